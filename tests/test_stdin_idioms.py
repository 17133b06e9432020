"""Every way of reading stdin and writing stdout that rewriting graders break must work:
the program runs as written, as __main__, with a real file on fd 0."""

import pytest

from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample
from tests.helpers import stdin_problem

# Input: a count line then numbers; expected output: their sum.
PROBLEM = stdin_problem([("3\n1 2 3\n", "6\n"), ("2\n10 -4\n", "6\n")], problem_id="sum", time_limit_s=2.0)

IDIOMS = {
    "for line in sys.stdin": "import sys\nlines = [line for line in sys.stdin]\nprint(sum(map(int, lines[1].split())))",
    "sys.stdin.buffer.readline": "import sys\nsys.stdin.buffer.readline()\nprint(sum(map(int, sys.stdin.buffer.readline().split())))",
    "input() then sys.stdin.read()": "import sys\nn = int(input())\nprint(sum(map(int, sys.stdin.read().split())))",
    "open(0)": "data = open(0).read().split()\nprint(sum(map(int, data[1:])))",
    "os.read(0, os.fstat(0).st_size)": "import os\ndata = os.read(0, os.fstat(0).st_size).split()\nprint(sum(map(int, data[1:])))",
    "sys.stdout.buffer.write": "import sys\ndata = sys.stdin.read().split()\nsys.stdout.buffer.write(str(sum(map(int, data[1:]))).encode() + b'\\n')",
    "os.write(1, ...)": "import os, sys\ndata = sys.stdin.read().split()\nos.write(1, str(sum(map(int, data[1:]))).encode())",
    "quit()": "import sys\ndata = sys.stdin.read().split()\nprint(sum(map(int, data[1:])))\nquit()\nprint('unreachable')",
    "exit(0) inside a function": "import sys\ndef main():\n    data = sys.stdin.read().split()\n    print(sum(map(int, data[1:])))\n    sys.exit(0)\nmain()",
    "os._exit(0) after flush": "import os, sys\ndata = sys.stdin.read().split()\nprint(sum(map(int, data[1:])), flush=True)\nos._exit(0)",
    "if '__main__' == __name__": "import sys\nif '__main__' == __name__:\n    data = sys.stdin.read().split()\n    print(sum(map(int, data[1:])))",
    "global at top level": "global total\ntotal = 0\ndef add(x):\n    global total\n    total += x\ninput()\nfor x in input().split():\n    add(int(x))\nprint(total)",
    "threading with a big stack": "import sys, threading\nthreading.stack_size(1 << 26)\ndef main():\n    data = sys.stdin.read().split()\n    print(sum(map(int, data[1:])))\nt = threading.Thread(target=main)\nt.start()\nt.join()",
    "print(*args, sep)": "input()\nprint(sum(int(x) for x in input().split()), end='\\n\\n\\n')",
    "__file__ and sys.argv": "import sys, os\nassert os.path.basename(__file__) == 'solution.py' and sys.argv[0] == 'solution.py'\ninput()\nprint(sum(map(int, input().split())))",
}


@pytest.fixture(scope="module")
def evaluator():
    with Evaluator(EvaluatorConfig(workers=2)) as evaluator:
        yield evaluator


def test_every_idiom_is_accepted(evaluator):
    names = list(IDIOMS)
    results = evaluator.evaluate([PROBLEM], [Sample("sum", code=IDIOMS[name]) for name in names])
    failed = {name: (result.verdict, result.detail) for name, result in zip(names, results) if result.verdict != "accepted"}
    assert failed == {}


def test_output_lost_to_os_exit_without_flush_is_wrong_as_with_real_python(evaluator):
    # `python solution.py > file` loses a print that sits in the buffer at os._exit; so do we.
    code = "import os\ninput()\nprint(sum(map(int, input().split())))\nos._exit(0)"
    assert evaluator.evaluate_code(PROBLEM, code).verdict == "wrong_answer"


def test_printing_the_answer_then_exit_1_is_a_runtime_error(evaluator):
    code = "import sys\ninput()\nprint(sum(map(int, input().split())))\nsys.exit(1)"
    assert evaluator.evaluate_code(PROBLEM, code).verdict == "runtime_error"

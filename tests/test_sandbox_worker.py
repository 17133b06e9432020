"""What the worker prepares once and shares with every run it forks (compiled programs,
prelude modules, the run directory, std streams) must still look fresh to each run."""

import json
import textwrap

import pytest

from microcoder.evaluator import Evaluator, EvaluatorConfig
from microcoder.evaluator.sandbox import RUN_ENVIRONMENT, Sandbox
from tests.helpers import call_problem


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1) as sandbox:  # one worker: every run below shares it
        yield sandbox


def test_a_run_sees_none_of_the_last_runs_files(sandbox):
    litter = textwrap.dedent("""
        import os
        os.makedirs("deep/er", exist_ok=True)
        open("deep/er/file", "w").write("x")
        open(os.path.join(os.environ["TMPDIR"], "tmpfile"), "w").write("x")
        os.mkdir("locked")
        open("locked/inside", "w").write("x")
        os.chmod("locked", 0)
        print(sorted(os.listdir(".")))
    """)
    look = "import os\nprint(sorted(os.listdir('.')), os.getcwd() == os.environ['HOME'] == os.environ['TMPDIR'])"
    first = sandbox.run_program(litter)
    assert first.status == "ok" and first.stdout.split() == [b"['deep',", b"'locked',", b"'tmpfile']"]
    second = sandbox.run_program(look)
    assert second.status == "ok" and second.stdout == b"[] True\n"


def test_state_a_run_leaves_in_its_modules_does_not_reach_the_next(sandbox):
    # The prelude's imports are bound once in the worker; each run must still get its own copy.
    code = textwrap.dedent("""
        import json, collections
        from collections import deque
        collections.SEEN = getattr(collections, "SEEN", 0) + 1
        json.dumps = None
        print(collections.SEEN, deque.__name__)
    """)
    runs = [sandbox.run_program(code) for _ in range(3)]
    assert [run.stdout for run in runs] == [b"1 deque\n"] * 3
    prelude = "from collections import *\nimport math\nCALLS = []\n"
    solution = "def f(x):\n    CALLS.append(x)\n    math.floor = None\n    globals().pop('Counter')\n    return len(CALLS)\n"
    check = "def f(x):\n    return [len(CALLS), math.floor(2.5), Counter('aab')['a']]\n"
    calls = [sandbox.run(solution, kind="call", entry_point="f", prelude=prelude, arguments=[str(i)]) for i in range(3)]
    assert [json.loads(run.return_json) for run in calls] == [1, 1, 1]
    after = sandbox.run(check, kind="call", entry_point="f", prelude=prelude, arguments=["0"])
    assert json.loads(after.return_json) == [0, 2, 2]


def test_a_failing_prelude_import_is_the_problems_fault():
    problem = call_problem([("1", "1")], entry_point="f", problem_id="bad-import", prelude="from math import no_such_name\n")
    with Evaluator(EvaluatorConfig(workers=1)) as evaluator:
        result = evaluator.evaluate_code(problem, "def f(x):\n    return x\n")
        assert result.verdict == "judge_error" and "no_such_name" in result.detail
        fine = call_problem([("1", "1")], entry_point="f", problem_id="fine", prelude="from math import floor\n")
        assert evaluator.evaluate_code(fine, "def f(x):\n    return floor(x)\n").verdict == "accepted"


def test_a_source_too_large_for_the_worker_compiles_in_the_run(sandbox):
    padding = "# " + "a" * (1 << 20) + "\n"
    assert sandbox.run_program(padding + "print(3)\n").stdout == b"3\n"
    broken = sandbox.run_program(padding + "print(3\n")
    assert broken.status == "syntax_error" and "never closed" in broken.detail


def test_syntax_errors_and_compile_warnings_read_as_the_interpreter_prints_them(sandbox):
    broken = sandbox.run_program("x = (1,\nprint(x)\n")
    assert broken.status == "syntax_error" and "SyntaxError" in broken.detail and "solution.py" in broken.detail
    warned = sandbox.run_program("assert (1, 'always true')\nprint(1)\n")
    assert warned.status == "ok" and warned.stdout == b"1\n"
    assert b"SyntaxWarning: assertion is always true" in warned.stderr
    again = sandbox.run_program("assert (1, 'always true')\nprint(2)\n")  # compiled once, told every time
    assert b"SyntaxWarning" in again.stderr


def test_a_run_sees_only_the_scrubbed_environment(sandbox):
    run = sandbox.run_program("import os\nprint(sorted(os.environ))\n")
    assert run.stdout.decode().strip() == str(sorted([*RUN_ENVIRONMENT, "HOME", "TMPDIR"]))

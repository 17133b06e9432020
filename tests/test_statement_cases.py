"""Hand-labelled cases of every kind of statement reading, through the data pipeline's
validate stage (its checker inference) and then the evaluator in robust mode.

Each case is a statement with its tests and programs; each program's label is what the
platform's judge would say of it (LeetCode, AtCoder, Codeforces as the statement's wording
comes from), and what the program prints in a plain `python3` run is recorded beside it
and checked here, so that the label rests on the program's real output. A statement that
accepts several answers must leave the corpus (equality with one recorded answer cannot
judge it). The last test removes each reading in turn and shows that some case then gets
the wrong verdict: every reading is needed for these labels.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from microcoder.data import readings
from microcoder.data.config import PipelineConfig, ValidateConfig
from microcoder.data.stages import StageContext
from microcoder.data.validate import validate_problems
from microcoder.evaluator import Evaluator, EvaluatorConfig
from microcoder.problems import Problem


@dataclass
class Program:
    code: str
    prints: str
    """What a plain `python3` run prints on the case's first test (call: the return value's JSON)."""
    accepted: bool
    """The platform judge's verdict on every test."""


@dataclass
class Case:
    name: str
    statement: str
    tests: list[tuple[str, str]]
    programs: list[Program] = field(default_factory=list)
    starter: str = ""
    removed: bool = False
    """The statement accepts several answers: the case leaves the corpus."""
    checker: dict | None = None
    """The checker the source's loader set before validate reads the statement."""

    @property
    def kind(self) -> str:
        return "call" if self.starter else "stdin"

    def problem(self) -> Problem:
        fields = {"id": self.name, "prompt": self.statement, "kind": self.kind,
                  "tests": [{"input": i, "output": o} for i, o in self.tests], "checker": self.checker}
        if self.starter:
            fields.update(starter_code=self.starter,
                          entry_point="Solution()." + self.starter.split("def ")[1].split("(")[0])
        return Problem(**fields)


def stdin(name, statement, tests, *programs, removed=False):
    return Case(name, statement, tests, list(programs), removed=removed)


def call(name, statement, starter, tests, *programs, removed=False, checker=None):
    return Case(name, statement, tests, list(programs), starter=starter, removed=removed, checker=checker)


P = Program
SUM_STARTER = "class Solution:\n    def solve(self, nums: List[int]) -> {returns}:\n        "
CASES = [
    # ---- letter case
    stdin("yes-no-case-insensitive",
          "Print YES (case-insensitive) if the number is even, or NO (case-insensitive) otherwise.",
          [("4\n", "YES\n"), ("3\n", "NO\n")],
          P("print('yes' if int(input()) % 2 == 0 else 'no')", "yes\n", True),
          P("print('Yes' if int(input()) % 2 else 'No')", "No\n", False)),
    stdin("yes-beside-a-string",
          "If s can be rearranged into a palindrome, print YES and then the palindrome on the next line; otherwise "
          "print NO. You can output the answer in any case (upper or lower). For example, the strings \"yEs\", "
          "\"yes\", \"Yes\", and \"YES\" will be recognized as positive responses.",
          [("aab\n", "YES\naba\n"), ("abc\n", "NO\n")],
          P("s = input()\nprint('yes\\naba' if s == 'aab' else 'no')", "yes\naba\n", True),
          P("s = input()\nprint('YES\\nABA' if s == 'aab' else 'NO')", "YES\nABA\n", False)),
    stdin("in-any-case-meaning-anyway",
          "You are given a string s. In any case, s contains at least one letter. Print s reversed.",
          [("abc\n", "cba\n"), ("xy\n", "yx\n")],
          P("print(input()[::-1])", "cba\n", True),
          P("print(input()[::-1].upper())", "CBA\n", False)),
    stdin("every-letter-in-any-case",
          "Print the name of the weekday after the given one. You may print each letter in any case.",
          [("monday\n", "tuesday\n"), ("friday\n", "saturday\n")],
          P("d = ['monday','tuesday','wednesday','thursday','friday','saturday','sunday']\n"
            "print(d[(d.index(input()) + 1) % 7].upper())", "TUESDAY\n", True),
          P("print('wednesday')", "wednesday\n", False)),
    stdin("case-insensitive-comparison-is-not-the-output",
          "Given two words, print the one that comes first in the dictionary, as it is written in the input. "
          "Note that string comparison here is case-insensitive.",
          [("Bob alice\n", "alice\n"), ("cat Dog\n", "cat\n")],
          P("print(min(input().split(), key=str.lower))", "alice\n", True),
          P("print(min(input().split(), key=str.lower).upper())", "ALICE\n", False)),
    stdin("logins-are-case-insensitive",
          "Print the first login of the list in lowercase. Logins are case-insensitive, so 'Bob' and 'bob' are the "
          "same user.",
          [("Bob alice\n", "bob\n"), ("BOB carol\n", "bob\n")],
          P("print(input().split()[0].lower())", "bob\n", True),
          P("print(input().split()[0].upper())", "BOB\n", False)),
    stdin("in-any-case-mid-sentence",
          "Print the length of s and then s reversed; in any case print the length first.",
          [("abc\n", "3\ncba\n"), ("xy\n", "2\nyx\n")],
          P("s = input()\nprint(len(s))\nprint(s[::-1])", "3\ncba\n", True),
          P("s = input()\nprint(len(s))\nprint(s[::-1].upper())", "3\nCBA\n", False)),
    stdin("yes-case-insensitive-beside-contains",
          "Print YES (case-insensitive) if the array contains a zero, and NO otherwise.",
          [("1 0 2\n", "YES\n"), ("1 2\n", "NO\n")],
          P("print('yes' if '0' in input().split() else 'no')", "yes\n", True),
          P("print('no' if '0' in input().split() else 'yes')", "no\n", False)),
    stdin("capitalised-word-of-the-story",
          "The ABC company ranks its teams. Print the name of the team, exactly as it is written in the input, and "
          "on the next line YES if it has more than 10 points, or NO otherwise. You can print YES and NO in any case.",
          [("abc 5\n", "abc\nNO\n"), ("xyz 20\n", "xyz\nYES\n")],
          P("n, p = input().split()\nprint(n)\nprint('yes' if int(p) > 10 else 'no')", "abc\nno\n", True),
          # the company's name is not an answer word: the team's name must be printed as written
          P("n, p = input().split()\nprint(n.upper() if n == 'abc' else n)\nprint('yes' if int(p) > 10 else 'no')",
            "ABC\nno\n", False)),
    # ---- tolerances
    stdin("differs-by-at-most",
          "Print a / b. Your answer is accepted if it differs from the correct one by at most 10^{-9}.",
          [("1 3\n", "0.333333333333\n"), ("2 3\n", "0.666666666667\n")],
          P("a, b = map(int, input().split())\nprint(f'{a / b:.12f}')", "0.333333333333\n", True),
          P("a, b = map(int, input().split())\nprint(f'{a / b:.6f}')", "0.333333\n", False)),
    stdin("absolute-error-does-not-exceed",
          "Print the average of the numbers. Your answer is correct if its absolute error does not exceed 0.01.",
          [("1 2\n", "1.5\n"), ("2 2\n", "2.0\n")],
          P("x = list(map(int, input().split()))\nprint(sum(x) / len(x) + 0.005)", "1.505\n", True),
          P("x = list(map(int, input().split()))\nprint(sum(x) / len(x) + 0.02)", "1.52\n", False)),
    stdin("within-of-the-correct-answer",
          "Print the square root of n. Answers within 10^{-4} of the correct answer are accepted.",
          [("4\n", "2.0000000\n"), ("2\n", "1.4142136\n")],
          P("print(round(int(input()) ** 0.5, 4))", "2.0\n", True),
          P("print(round(int(input()) ** 0.5, 2))", "2.0\n", False)),
    stdin("python-power-bound",
          "Print n / 7. The absolute or relative error of your answer must be at most 10**-3 to be accepted.",
          [("1\n", "0.142857142857\n"), ("10\n", "1.428571428571\n")],
          P("print(f'{int(input()) / 7:.4f}')", "0.1429\n", True),
          P("print(f'{int(input()) / 7:.2f}')", "0.14\n", False)),
    stdin("print-the-answer-with-an-error-bound",
          "Print a / b with an absolute or relative error of at most 10^{-9}.",
          [("1 3\n", "0.333333333333\n"), ("2 3\n", "0.666666666667\n")],
          P("a, b = map(int, input().split())\nprint(f'{a / b:.12f}')", "0.333333333333\n", True),
          P("a, b = map(int, input().split())\nprint(f'{a / b:.6f}')", "0.333333\n", False)),
    stdin("bound-with-a-multiplier",
          "Print the average of the numbers. Your answer is correct if its absolute error does not exceed "
          "$5 \\cdot 10^{-3}$.",
          [("1 2\n", "1.5\n"), ("2 2\n", "2.0\n")],
          P("x = list(map(int, input().split()))\nprint(sum(x) / len(x) + 0.004)", "1.504\n", True),
          P("x = list(map(int, input().split()))\nprint(sum(x) / len(x) + 0.006)", "1.506\n", False)),
    stdin("relative-error-in-percent",
          "Print the total weight. Your answer is correct if its relative error is less than 0.5%.",
          [("100 100\n", "200\n"), ("1 2\n", "3\n")],
          P("print(sum(map(int, input().split())) * 1.004)", "200.8\n", True),
          P("print(sum(map(int, input().split())) * 1.1)", "220.00000000000003\n", False)),
    call("call-tolerance-within",
         "Return the mean of nums. Answers within 10^-2 of the actual answer will be accepted.",
         SUM_STARTER.format(returns="float"), [("[1, 2]", "1.5"), ("[1, 1]", "1.0")],
         P("class Solution:\n    def solve(self, nums):\n        return sum(nums) / len(nums) + 0.004", "1.504", True),
         P("class Solution:\n    def solve(self, nums):\n        return sum(nums) / len(nums) + 0.02", "1.52", False)),
    # LeetCode's loader gives every float result its platform bound (1e-5); the statement's own wins.
    call("call-stated-bound-over-the-platform-default",
         "Return the mean of nums. Answers within 10^-2 of the actual answer will be accepted.",
         SUM_STARTER.format(returns="float"), [("[1, 2]", "1.5"), ("[1, 1]", "1.0")],
         P("class Solution:\n    def solve(self, nums):\n        return sum(nums) / len(nums) + 0.004", "1.504", True),
         P("class Solution:\n    def solve(self, nums):\n        return sum(nums) / len(nums) + 0.02", "1.52", False),
         checker={"float_tolerance": 1e-5}),
    call("call-relative-tolerance",
         "Return the mean of nums. Your answer is correct if its relative error is at most 1e-9.",
         SUM_STARTER.format(returns="float"), [("[1, 2]", "1.5"), ("[1, 1]", "1.0")],
         P("class Solution:\n    def solve(self, nums):\n        return sum(nums) / len(nums)", "1.5", True),
         P("class Solution:\n    def solve(self, nums):\n        return sum(nums) / len(nums) * (1 + 1e-7)",
           "1.50000015", False)),
    # ---- digits fixed as text
    stdin("rounded-to-exactly-two-digits",
          "Print the average of a and b, rounded to exactly two digits after the decimal point.",
          [("0.1 0.5\n", "0.30\n"), ("1 2\n", "1.50\n")],
          P("a, b = map(float, input().split())\nprint(f'{(a + b) / 2:.2f}')", "0.30\n", True),
          P("a, b = map(float, input().split())\nprint(round((a + b) / 2, 2))", "0.3\n", False)),
    # ---- several answers: the corpus cannot judge them
    stdin("any-correct-answer-accepted",
          "Print two positive integers whose sum is n. Any correct answer will be accepted.",
          [("3\n", "1 2\n")], removed=True),
    call("return-any-array",
         "Rearrange nums so that every even number comes first. Return any array that satisfies this condition.",
         SUM_STARTER.format(returns="List[int]"), [("[3, 1, 2, 4]", "[2, 4, 3, 1]")], removed=True),
    stdin("multiple-answers-print-any",
          "Find a permutation p with no fixed point. If there are multiple answers, print any.",
          [("2\n", "2 1\n")], removed=True),
    # ---- several orders
    call("order-of-the-result-does-not-matter",
         "Return the indices of the even numbers. The order of the elements in the result does not matter.",
         SUM_STARTER.format(returns="List[int]"), [("[2, 3, 4]", "[0, 2]"), ("[6, 8]", "[0, 1]")],
         P("class Solution:\n    def solve(self, nums):\n        return [i for i, x in enumerate(nums) if x % 2 == 0][::-1]",
           "[2, 0]", True),
         P("class Solution:\n    def solve(self, nums):\n        return [i for i, x in enumerate(nums) if x % 2][::-1]",
           "[1]", False)),
    call("bare-list-annotation",
         "Return the indices of the even numbers in any order.",
         SUM_STARTER.format(returns="list"), [("[2, 3, 4]", "[0, 2]"), ("[6, 8]", "[0, 1]")],
         P("class Solution:\n    def solve(self, nums):\n        return [i for i, x in enumerate(nums) if x % 2 == 0][::-1]",
           "[2, 0]", True)),
    stdin("order-of-the-output-does-not-matter",
          "Print the number k of even values, then on the next line their positions. The order of the output does "
          "not matter.",
          [("3\n2 3 4\n", "2\n1 3\n"), ("2\n6 8\n", "2\n1 2\n")],
          P("input()\nv = [i + 1 for i, x in enumerate(map(int, input().split())) if x % 2 == 0]\n"
            "print(len(v))\nprint(*v[::-1])", "2\n3 1\n", True),
          # the count and a position swapped: the same tokens, but not the same lines
          P("input()\nv = [i + 1 for i, x in enumerate(map(int, input().split())) if x % 2 == 0]\n"
            "print(v[-1])\nprint(len(v), *v[:-1])", "3\n2 1\n", False)),
    stdin("elements-in-any-order",
          "Print the distinct values of the array. You may print the elements in any order.",
          [("4\n1 2 2 3\n", "1 2 3\n"), ("2\n5 5\n", "5\n")],
          P("input()\nprint(*sorted(set(map(int, input().split())), reverse=True))", "3 2 1\n", True),
          P("input()\nprint(*map(int, input().split()))", "1 2 2 3\n", False)),
    stdin("pairs-in-any-order",
          "Print every pair (i, j) with i < j <= n, one pair per line. You can print the pairs in any order.",
          [("3\n", "1 2\n1 3\n2 3\n")],
          P("n = int(input())\nfor j in range(n, 0, -1):\n    for i in range(1, j):\n        print(i, j)",
            "1 3\n2 3\n1 2\n", True),
          P("n = int(input())\nfor j in range(2, n + 1):\n    for i in range(1, j):\n        print(j, i)",
            "2 1\n3 1\n3 2\n", False)),
    stdin("indices-one-on-each-line",
          "Print the positions of the even values in any order, one on each line.",
          [("3\n2 3 4\n", "1\n3\n"), ("2\n6 8\n", "1\n2\n")],
          P("input()\nv = [i + 1 for i, x in enumerate(map(int, input().split())) if x % 2 == 0]\n"
            "print(*v[::-1], sep='\\n')", "3\n1\n", True),
          P("input()\nv = [i + 1 for i, x in enumerate(map(int, input().split()))]\n"
            "print(*v[:2], sep='\\n')", "1\n2\n", False)),
    stdin("one-token-a-line-in-every-output",
          "Print the positions of the even values. The positions may be printed in any order.",
          [("3\n2 3 4\n", "1\n3\n"), ("2\n6 8\n", "1\n2\n")],
          P("input()\nv = [i + 1 for i, x in enumerate(map(int, input().split())) if x % 2 == 0]\n"
            "print(*v[::-1], sep='\\n')", "3\n1\n", True)),
    stdin("count-followed-by-the-items",
          "Print k, the number of even values, followed by their positions in any order, all on one line.",
          [("3\n2 3 4\n", "2 1 3\n"), ("4\n6 8 1 2\n", "3 1 2 4\n")],
          P("input()\nv = [i + 1 for i, x in enumerate(map(int, input().split())) if x % 2 == 0]\n"
            "print(len(v), *v[::-1])", "2 3 1\n", True),
          # the same tokens, the count last: the platform's checker reads the first token as k
          P("input()\nv = [i + 1 for i, x in enumerate(map(int, input().split())) if x % 2 == 0]\n"
            "print(*v, len(v))", "1 3 2\n", False)),
    # ---- a sentence about the task frees nothing
    call("tasks-in-any-order",
         "Return the finishing time of each task, in the order the tasks are given. The tasks can be done in any "
         "order.", SUM_STARTER.format(returns="List[int]"), [("[1, 2, 3]", "[1, 3, 6]"), ("[2, 2]", "[2, 4]")],
         P("from itertools import accumulate\nclass Solution:\n    def solve(self, nums):\n"
           "        return list(accumulate(nums))", "[1, 3, 6]", True),
         P("from itertools import accumulate\nclass Solution:\n    def solve(self, nums):\n"
           "        return list(accumulate(nums))[::-1]", "[6, 3, 1]", False)),
]


def plain_run(case: Case, program: Program) -> str:
    """What `python3` prints for the program on the case's first test (call: the JSON of
    what the entry point returns)."""
    test_input = case.tests[0][0]
    if case.kind == "stdin":
        code, stdin_text = program.code, test_input
    else:
        arguments = [json.loads(line) for line in test_input.split("\n") if line.strip()]
        method = case.starter.split("def ")[1].split("(")[0]
        code = (f"from typing import *\n{program.code}\nimport json\n"
                f"print(json.dumps(Solution().{method}(*{arguments!r})))")
        stdin_text = ""
    run = subprocess.run([sys.executable, "-c", code], input=stdin_text, capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    return run.stdout


@pytest.mark.parametrize("case, program", [(c, p) for c in CASES for p in c.programs],
                         ids=[f"{c.name}-{n}" for c in CASES for n, _ in enumerate(c.programs)])
def test_each_label_rests_on_what_python3_prints(case, program):
    printed = plain_run(case, program)
    if case.kind == "call":
        assert json.loads(printed) == json.loads(program.prints)
    else:
        assert printed == program.prints


def validated(tmp_path) -> tuple[dict[str, Problem], dict[str, str]]:
    config = PipelineConfig(sources=[], progress=False, work_dir=str(tmp_path), workers=1)
    config.validate = ValidateConfig(run_references=False, time_limits_from_reference=False)
    config.stage_dir("validate").mkdir(parents=True)
    context = StageContext(config)
    try:
        output = validate_problems([case.problem() for case in CASES], config, context)
    finally:
        context.close()
    assert not output.rejects, output.rejects
    return {p.id: p for p in output.problems}, {r.id: r.reason for r in output.removals}


def wrong_verdicts(kept: dict[str, Problem], removed: dict[str, str], evaluator: Evaluator) -> list[str]:
    """Every case whose outcome differs from its label, one line each."""
    wrong = []
    for case in CASES:
        if case.removed != (case.name in removed):
            wrong.append(f"{case.name}: {'kept' if case.removed else 'removed: ' + removed[case.name]}")
            continue
        if case.removed:
            continue
        problem = kept[case.name]
        for number, program in enumerate(case.programs):
            result = evaluator.evaluate_code(problem, program.code)
            if (result.verdict == "accepted") != program.accepted:
                wrong.append(f"{case.name} program {number}: {result.verdict} {result.detail[:120]} "
                             f"(checker {problem.checker})")
    return wrong


@pytest.fixture(scope="module")
def evaluator():
    with Evaluator(EvaluatorConfig(workers=2)) as evaluator:
        yield evaluator


READ_NOTHING = {"in-any-case-meaning-anyway", "in-any-case-mid-sentence", "case-insensitive-comparison-is-not-the-output",
                "logins-are-case-insensitive", "tasks-in-any-order"}
"""The cases whose statements set no checker (a sentence about the task, not the output)."""


def test_every_case_is_judged_as_its_platform_judges_it(tmp_path, evaluator):
    kept, removed = validated(tmp_path)
    assert wrong_verdicts(kept, removed, evaluator) == []
    assert all(kept[c.name].metadata.get("checker_inferred") == "statement" for c in CASES
               if c.name not in removed and c.name not in READ_NOTHING)
    # each rule comes with the words that decided it
    for case in CASES:
        if case.kind == "stdin" and case.name not in removed and case.name not in READ_NOTHING:
            rule = kept[case.name].metadata["checker_rule"]
            assert any(sentence[:60] in rule for sentence in readings.sentences(case.statement)), (case.name, rule)


READINGS = ["read_tolerance", "read_exact_decimals", "read_letter_case", "read_several_answers",
            "read_stdin_order", "read_result_order"]


@pytest.mark.parametrize("reading", READINGS)
def test_each_reading_is_needed_for_the_labels(reading, tmp_path, evaluator, monkeypatch):
    monkeypatch.setattr(readings, reading, lambda *args, **kwargs: None)
    kept, removed = validated(tmp_path)
    assert wrong_verdicts(kept, removed, evaluator), f"every case still right without {reading}"

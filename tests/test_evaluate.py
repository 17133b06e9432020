"""Verdicts, call problems, checkers, summaries and the evaluator's hygiene over many calls."""

import json
import os
import time
from pathlib import Path

import pytest

from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample, read_samples, summarize
from microcoder.problems import Checker, ProblemFormatError
from tests.helpers import call_problem, stdin_problem

ADD = stdin_problem([("1 2", "3"), ("5 5", "10"), ("0 0", "0")], problem_id="add")
TWO_SUM = call_problem(
    [("[2, 7, 11, 15]\n9", "[0, 1]"), ("[3, 2, 4]\n6", "[1, 2]")], entry_point="Solution().twoSum", problem_id="two-sum"
)


@pytest.fixture(scope="module")
def evaluator():
    with Evaluator(EvaluatorConfig(workers=2)) as evaluator:
        yield evaluator


def verdict(evaluator, problem, code):
    return evaluator.evaluate_code(problem, code).verdict


def test_stdin_verdicts(evaluator):
    assert verdict(evaluator, ADD, "print(sum(map(int, input().split())))") == "accepted"
    assert verdict(evaluator, ADD, "print(3)") == "wrong_answer"
    assert verdict(evaluator, ADD, "print(1 / 0)") == "runtime_error"
    assert verdict(evaluator, ADD, "print(3") == "syntax_error"


def test_stops_at_the_first_failing_test_unless_all_tests():
    code = "a, b = map(int, input().split())\nprint(a + b if a else 99)"  # fails only test 2
    with Evaluator(EvaluatorConfig(workers=1)) as evaluator:
        first = evaluator.evaluate_code(ADD, "print(3)")
        assert (first.tests_run, first.tests_passed, first.tests_total) == (2, 1, 3)
    with Evaluator(EvaluatorConfig(workers=1, all_tests=True)) as evaluator:
        result = evaluator.evaluate_code(ADD, code)
        assert (result.verdict, result.tests_run, result.tests_passed) == ("wrong_answer", 3, 2)
        assert result.detail.startswith("test 2:")


# Twenty tests; the program is wrong on test 3 (after 30 ms of work per test) and crashes
# at once on test 10. Run in order, the verdict is test 3's.
TWENTY = stdin_problem([(f"{i}", f"{i}") for i in range(20)], problem_id="twenty")
WRONG_ON_3_CRASH_ON_10 = (
    "import time\nn = int(input())\nassert n != 10\n_end = time.process_time() + 0.03\n"
    "while time.process_time() < _end:\n    pass\nprint(n + (n == 3))\n"
)


def test_a_sample_run_on_two_workers_gets_the_verdict_of_its_first_failing_test(evaluator):
    # Two workers, one sample: the second worker takes later tests once one has passed.
    # Splitting the tests in two halves up front gave test 10's crash, which comes first in
    # time, and counted tests past the sample's end.
    result = evaluator.evaluate_code(TWENTY, WRONG_ON_3_CRASH_ON_10)
    assert (result.verdict, result.detail[:7]) == ("wrong_answer", "test 3:")
    assert (result.tests_run, result.tests_passed) == (4, 3)
    with Evaluator(EvaluatorConfig(workers=1)) as one:
        alone = one.evaluate_code(TWENTY, WRONG_ON_3_CRASH_ON_10)
    assert (alone.verdict, alone.detail, alone.tests_run, alone.tests_passed) == (
        result.verdict, result.detail, result.tests_run, result.tests_passed)


def test_a_batch_on_two_workers_gets_the_verdicts_of_one_worker(evaluator):
    codes = [WRONG_ON_3_CRASH_ON_10, "print(input())", "n = int(input())\nprint(n if n < 15 else -1)",
             "print(1 / 0)", "print(input())\nimport time\n_e = time.process_time() + 0.02\n"
             "while time.process_time() < _e:\n    pass\n"]
    samples = [Sample("twenty", code=code) for code in codes]
    with Evaluator(EvaluatorConfig(workers=1)) as one:
        expected = [(r.verdict, r.detail, r.tests_run, r.tests_passed) for r in one.evaluate([TWENTY], samples)]
    got = [(r.verdict, r.detail, r.tests_run, r.tests_passed) for r in evaluator.evaluate([TWENTY], samples)]
    assert got == expected
    assert [verdict for verdict, *_ in got] == ["wrong_answer", "accepted", "wrong_answer", "runtime_error", "accepted"]


def test_evaluate_returns_only_once_every_result_is_made(evaluator, monkeypatch):
    # A sample's last test is recorded before its result is made (in the thread that ran
    # it): the call must wait for the result, not only for the tests.
    made = Evaluator._result

    def slowly(self, *args):
        time.sleep(0.2)
        return made(self, *args)

    monkeypatch.setattr(Evaluator, "_result", slowly)
    results = evaluator.evaluate([ADD], [Sample("add", code="print(3)"), Sample("add", code="print(1 / 0)")])
    assert [result.verdict for result in results] == ["wrong_answer", "runtime_error"]


def test_no_code_and_responses_are_extracted(evaluator):
    samples = [
        Sample("add", response="```python\nprint(sum(map(int, input().split())))\n```"),
        Sample("add", response="Let me think... ```python\nprint(sum(map("),
    ]
    results = evaluator.evaluate([ADD], samples)
    assert [r.verdict for r in results] == ["accepted", "no_code"]
    assert [r.reward for r in results] == [1.0, 0.0]


def test_call_problem_with_a_fresh_instance_per_test(evaluator):
    solution = (
        "class Solution:\n"
        "    calls = 0\n"
        "    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
        "        Solution.calls += 1\n"
        "        assert Solution.calls == 1, 'state leaked from an earlier test'\n"
        "        seen = {}\n"
        "        for i, x in enumerate(nums):\n"
        "            if target - x in seen:\n"
        "                return (seen[target - x], i)\n"  # a tuple: equal to the expected list
        "            seen[x] = i\n"
    )
    assert verdict(evaluator, TWO_SUM, solution) == "accepted"


def test_call_problem_never_trusts_the_candidates_eq(evaluator):
    cheat = (
        "class Anything(list):\n"
        "    def __eq__(self, other):\n"
        "        return True\n"
        "class Solution:\n"
        "    def twoSum(self, nums, target):\n"
        "        return Anything()\n"
    )
    assert verdict(evaluator, TWO_SUM, cheat) == "wrong_answer"
    unserialisable = "class Solution:\n    def twoSum(self, nums, target):\n        return object()\n"
    result = evaluator.evaluate_code(TWO_SUM, unserialisable)
    assert result.verdict == "wrong_answer" and "not JSON" in result.detail


def test_plain_function_entry_point_and_prelude(evaluator):
    problem = call_problem([("[3, 1, 2]", "[1, 2, 3]")], entry_point="sort_it", problem_id="sort",
                           prelude="from typing import List\nHELPER = sorted\n")
    assert verdict(evaluator, problem, "def sort_it(xs: List[int]):\n    return HELPER(xs)\n") == "accepted"


def test_robust_and_strict_modes_differ_on_floats():
    problem = stdin_problem([("", "0.3333333333")], problem_id="third")
    code = "print(0.333333)"
    with Evaluator(EvaluatorConfig(workers=1)) as robust, Evaluator(EvaluatorConfig(workers=1, mode="strict")) as strict:
        assert verdict(robust, problem, code) == "accepted"
        assert verdict(strict, problem, code) == "wrong_answer"


def test_python_checker_runs_sandboxed_and_decides(evaluator):
    # Any pair summing to the input number is right.
    checker = Checker(python="def check(input, expected, got):\n    a, b = map(int, got.split())\n    return a + b == int(input)\n")
    problem = stdin_problem([("10", "5 5"), ("3", "1 2")], problem_id="pair", checker=checker)
    assert verdict(evaluator, problem, "n = int(input())\nprint(n - 1, 1)") == "accepted"
    assert verdict(evaluator, problem, "n = int(input())\nprint(n, 1)") == "wrong_answer"
    broken = stdin_problem([("1", "1")], problem_id="broken", checker=Checker(python="def check(:\n"))
    assert verdict(evaluator, broken, "print(1)") == "judge_error"


def test_python_checker_of_a_call_problem_runs_sandboxed_and_decides(evaluator):
    # Any pair of indices whose numbers sum to the target is right; the expected pair is one.
    checker = Checker(python="import json\n"
                             "def check(input, expected, got):\n"
                             "    nums, target = map(json.loads, input.split('\\n'))\n"
                             "    i, j = json.loads(got)\n"
                             "    return i != j and nums[i] + nums[j] == target\n")
    problem = call_problem([("[1, 4, 4, 3]\n7", "[1, 3]")], entry_point="Solution().twoSum",
                           problem_id="any-pair", checker=checker)
    other_pair = "class Solution:\n    def twoSum(self, nums, target):\n        return [2, 3]\n"
    wrong_pair = "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]\n"
    assert verdict(evaluator, problem, other_pair) == "accepted"  # not the expected answer: the checker said so
    result = evaluator.evaluate_code(problem, wrong_pair)
    assert result.verdict == "wrong_answer" and result.detail.endswith("rejected by the problem's checker")
    broken = call_problem([("1", "1")], entry_point="f", problem_id="broken-call", checker=Checker(python="def check(:\n"))
    assert verdict(evaluator, broken, "def f(x):\n    return x\n") == "judge_error"


def test_broken_problems_are_judge_errors_not_the_models_fault(evaluator):
    no_tests = stdin_problem([], problem_id="empty")
    assert verdict(evaluator, no_tests, "print(1)") == "judge_error"
    results = [evaluator.evaluate_code(no_tests, "print(1)"), evaluator.evaluate_code(ADD, "print(3)")]
    summary = summarize(results)
    assert summary["verdicts"] == {"wrong_answer": 1, "judge_error": 1}
    assert summary["problems"] == 1  # the broken problem does not count


def test_a_broken_prelude_is_a_judge_error_and_keeps_the_worker(evaluator):
    problem = call_problem([("1", "1")], entry_point="f", problem_id="bad-prelude", prelude="def (:\n")
    evaluator.evaluate([ADD], [Sample("add", code="print(3)")] * 4)  # both workers started
    pids_before = {worker.process.pid for worker in evaluator.sandbox._all}
    assert len(pids_before) == 2
    result = evaluator.evaluate_code(problem, "def f(x):\n    return x\n")
    assert result.verdict == "judge_error" and "prelude" in result.detail
    assert {worker.process.pid for worker in evaluator.sandbox._all} == pids_before


def test_summary_pass_at_k_is_unbiased():
    # Problem a: 2 of 4 correct -> pass@1 = 0.5, pass@2 = 1 - C(2,2)/C(4,2) = 1 - 1/6.
    # Problem b: 0 of 4 -> 0 and 0. Means: pass@1 = 0.25, pass@2 = 5/12.
    from microcoder.evaluator.evaluate import EvaluationResult

    def row(problem_id, verdict):
        return EvaluationResult(problem_id, 0, verdict, float(verdict == "accepted"), 0, 0, 1, 0.0)

    results = [row("a", v) for v in ("accepted", "accepted", "wrong_answer", "no_code")]
    results += [row("b", "wrong_answer")] * 4
    summary = summarize(results, ks=(1, 2, 5))
    assert summary["pass@1"] == pytest.approx(0.25)
    assert summary["pass@2"] == pytest.approx(5 / 12)
    assert "pass@5" not in summary  # fewer than 5 samples per problem


def test_samples_file_errors_name_file_row_and_field(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text(json.dumps({"problem_id": "add", "code": "print(3)"}) + "\n" + json.dumps({"problem_id": 7}) + "\n")
    with pytest.raises(ProblemFormatError) as error:
        read_samples(str(path))
    assert (error.value.row, error.value.field) == (2, "problem_id")
    assert str(path) in str(error.value)


def _open_fds():
    return len(os.listdir("/proc/self/fd"))


def _children():
    """Our child processes, whichever of our threads started them."""
    return [pid for task in Path("/proc/self/task").iterdir() for pid in (task / "children").read_text().split()]


def test_many_evaluations_leak_no_process_fd_or_temp_dir(tmp_path):
    temp_before = set(Path("/tmp").iterdir())
    fds_before = _open_fds()
    children_before = set(_children())  # other tests' evaluators may still be open
    with Evaluator(EvaluatorConfig(workers=2)) as evaluator:
        codes = ["print(sum(map(int, input().split())))", "print(1/0)", "while True: pass", "import os\nos.fork()\nprint(3)"]
        quick = ADD.model_copy(update={"time_limit_s": 0.2})
        for round_ in range(40):
            evaluator.evaluate([quick], [Sample("add", code=codes[round_ % 4]) for _ in range(4)])
        assert len(set(_children()) - children_before) == 2, "only the two workers may be left"
    assert set(_children()) == children_before
    assert _open_fds() <= fds_before
    leftover = {p for p in set(Path("/tmp").iterdir()) - temp_before if p.name.startswith("microcoder")}
    assert leftover == set()


def test_the_evaluator_does_not_import_torch():
    # A second of start-up and a few hundred MB, and its BLAS threads compete with the runs.
    import subprocess
    import sys

    code = "import sys, microcoder.evaluator, microcoder.cli; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_without_problems_the_command_judges_the_default_its_caller_passes(tmp_path):
    import io

    from rich.console import Console

    from microcoder.evaluator.command import EvaluateJob, run_evaluate

    def add_reference(evaluator):
        assert isinstance(evaluator, Evaluator)  # the job's own, already started
        return [ADD], [Sample("add", code="a, b = map(int, input().split())\nprint(a + b)")]

    quiet = Console(file=io.StringIO())
    job = EvaluateJob(out=tmp_path / "results.jsonl", evaluator=EvaluatorConfig(workers=1))
    summary = run_evaluate(job, quiet, default=add_reference)
    assert summary["verdicts"] == {"accepted": 1} and summary["problems"] == 1
    with pytest.raises(ValueError, match="--problems is required"):
        run_evaluate(job, quiet)


def test_microcoder_evaluate_without_problems_judges_humaneval_from_the_data_loaders(tmp_path, monkeypatch):
    # The evaluator never imports the data room: the command line hands it the default.
    # (The real default converts HumanEval in the sandbox: 17 s; a stand-in shows the wiring.)
    from typer.testing import CliRunner

    from microcoder import cli
    from microcoder.data import loaders

    def humaneval_stand_in(evaluator):
        return [ADD], [Sample("add", code="a, b = map(int, input().split())\nprint(a + b)")]

    monkeypatch.setattr(loaders, "humaneval_reference_samples", humaneval_stand_in)
    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(cli.app, ["evaluate", "--workers", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "HumanEval's canonical solutions" in result.output
    assert [json.loads(line)["problem_id"] for line in out.read_text().splitlines()] == ["add"]

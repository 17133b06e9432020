"""The fast part of the differential harness (benchmarks/differential.py): every program
of the committed corpus (tests/fixtures/differential) runs as plain `python3` in a
throwaway directory and through the evaluator, and nothing may differ: stdout bytes, exit
status, the return value of call problems, the verdict. The shared data's references are
the benchmark's part (they need ../shared/data and take long)."""

import pytest

from benchmarks.differential import Case, Outcome, compare, corpus_cases, differences, report
from microcoder.evaluator import Evaluator, EvaluatorConfig

CASES = corpus_cases()


@pytest.fixture(scope="module")
def evaluator():
    with Evaluator(EvaluatorConfig(workers=2)) as evaluator:
        yield evaluator


def test_the_corpus_covers_both_kinds_and_the_issues_idioms():
    names = {case.name.split("#")[0] for case in CASES}
    assert sum(case.kind == "call" for case in CASES) >= 15 and sum(case.kind == "stdin" for case in CASES) >= 50
    for wanted in ("stdin/fastio_rival_template", "stdin/stdout_closed_at_end", "stdin/thread_after_main",
                   "stdin/thread_system_exit", "stdin/atexit_prints", "stdin/reconfigure", "stdin/input_at_eof",
                   "call/class_with_init", "call/module_state", "call/mutates_input", "call/returns_generator"):
        assert wanted in names


def test_no_program_of_the_corpus_behaves_differently_in_the_sandbox(evaluator):
    found = differences(CASES, evaluator, jobs=2)
    assert not found, report(found, len(CASES))


def test_the_harness_reports_a_program_that_does_differ(evaluator):
    # The working directory is a deliberate difference (each side has its own): a harness
    # that reported nothing here would be comparing nothing.
    case = Case("cwd", "stdin", "import os\nprint(os.getcwd())\n")
    (difference,) = differences([case], evaluator)
    assert difference.fields == ["stdout", "verdict"]
    assert difference.cpython.stdout != difference.sandbox.stdout
    assert "cwd: stdout, verdict" in report([difference], 1)


def test_a_case_that_carries_its_problem_is_judged_with_that_problem(evaluator):
    # The shared references come as cases with their own problem (checker, prelude,
    # limits); the harness once built that one-test problem with model_copy(update=...),
    # which left the test a plain dict, and every such case crashed the harness.
    from microcoder.problems import Problem

    problem = Problem(id="twice", prompt="", kind="call", entry_point="Solution().twice",
                      tests=[{"input": "3", "output": "6"}, {"input": "5", "output": "10"}])
    source = "class Solution:\n    def twice(self, x):\n        return 2 * x\n"
    case = Case("twice#1", "call", source, b"", ["5"], problem.entry_point, problem.call_prelude(),
                expected="10", problem=problem)
    assert differences([case], evaluator) == []



def test_a_program_over_the_time_limit_on_both_sides_is_a_deliberate_difference(evaluator):
    # python3 lets it finish (exit 0, its output); the sandbox stops it at the limit (a
    # signal, no output). Both verdicts are time_limit_exceeded, which docs/sandbox.md lists
    # as deliberate (MBPP 123's reference was the one such report on all of ../shared/data).
    burn = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end:\n    pass\nprint('done')\n"
    assert differences([Case("slow", "stdin", burn, expected="done\n", time_limit_s=0.2)], evaluator) == []
    # Only a timeout on both sides is let through: one side's timeout is still a difference.
    case = Case("slow", "stdin", burn)
    finished = Outcome(b"done\n", 0, None, None, "accepted")
    stopped = Outcome(b"", None, 27, None, "time_limit_exceeded")
    assert compare(case, finished, stopped) == ["stdout", "exit status", "verdict"]
    assert compare(case, Outcome(b"done\n", 0, None, None, "time_limit_exceeded"), stopped) == []

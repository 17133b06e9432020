"""Call results on the real path: the sandbox's encoding of a return value and the judge's
reading of it (a set stays a set, a float meets an int only exactly, unordered levels apply)."""

import re
from pathlib import Path

import pytest

from microcoder.evaluator import Evaluator, EvaluatorConfig, compare
from microcoder.problems import Checker, ProblemFormatError, parse_problem
from tests.helpers import call_problem

WORKER_CHILD = Path(compare.__file__).with_name("_zygote_child.py")  # the sandbox worker's child


@pytest.fixture(scope="module")
def evaluator():
    with Evaluator(EvaluatorConfig(workers=1)) as evaluator:
        yield evaluator


def verdicts(evaluator, problem, code):
    """(robust verdict, strict verdict)."""
    robust = evaluator.evaluate_code(problem, code).verdict
    with Evaluator(EvaluatorConfig(workers=1, mode="strict")) as strict:
        return robust, strict.evaluate_code(problem, code).verdict


def test_the_worker_and_the_judge_agree_on_the_set_tag():
    # The worker imports nothing of ours, so the tag is written twice; read it from there.
    written = re.search(r'^SET_TAG = "(.*)"$', WORKER_CHILD.read_text(), re.MULTILINE).group(1)
    assert written.encode().decode("unicode_escape") == compare.SET_TAG


def test_a_returned_set_is_not_the_sorted_list(evaluator):
    problem = call_problem([("[3, 1, 2, 1]", "[1, 2, 3]")], entry_point="unique")
    # The sorted list passes; the set of the same items fails in both modes, as
    # {1, 2, 3} == [1, 2, 3] is False in Python and in LiveCodeBench's grader.
    assert verdicts(evaluator, problem, "def unique(xs):\n    return sorted(set(xs))") == ("accepted", "accepted")
    assert verdicts(evaluator, problem, "def unique(xs):\n    return set(xs)") == ("wrong_answer", "wrong_answer")
    result = evaluator.evaluate_code(problem, "def unique(xs):\n    return frozenset(xs)")
    assert result.detail.endswith("expected list [1, 2, 3], got set frozenset({1, 2, 3})")


def test_a_returned_dict_with_a_nul_key_is_not_a_set(evaluator):
    problem = call_problem([("1", '{"\\u0000set": [1]}')], entry_point="f")
    assert verdicts(evaluator, problem, "def f(x):\n    return {'\\x00set': [x]}") == ("accepted", "accepted")
    assert verdicts(evaluator, problem, "def f(x):\n    return {x}") == ("wrong_answer", "wrong_answer")


def test_a_float_for_an_int_must_equal_it_unless_the_checker_allows_more(evaluator):
    factorial = call_problem([("23", "25852016738884976640000"), ("5", "120")], entry_point="f")
    gamma = "import math\ndef f(n):\n    return math.gamma(n + 1)"
    exact = "import math\ndef f(n):\n    return math.factorial(n)"
    assert verdicts(evaluator, factorial, exact) == ("accepted", "accepted")
    # gamma(24) is 6815744 short of 23!: Python == says no, and so do both modes.
    assert verdicts(evaluator, factorial, gamma) == ("wrong_answer", "wrong_answer")
    # 120.0 is 120 exactly: Python == says yes, and so do both modes.
    five = call_problem([("5", "120")], entry_point="f")
    assert verdicts(evaluator, five, gamma) == ("accepted", "accepted")
    # A float near the int passes only under a declared tolerance (strict has none).
    near = "def f(n):\n    return 120.0000001"
    assert verdicts(evaluator, five, near) == ("wrong_answer", "wrong_answer")
    tolerant = call_problem([("5", "120")], entry_point="f", checker=Checker(float_tolerance=1e-6))
    assert verdicts(evaluator, tolerant, near) == ("accepted", "wrong_answer")


TWO_SUM_REVERSED = """
def two_sum(xs, target):
    seen = {}
    for j, x in enumerate(xs):
        if target - x in seen:
            return [j, seen[target - x]]
        seen[x] = j
"""
PAIRS_REVERSED = """
def pairs(xs, target):
    found = [[j, i] for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[i] + xs[j] == target]
    return found[::-1]
"""


def test_an_any_order_checker_accepts_a_permutation_and_rejects_a_wrong_answer(evaluator):
    # "Return the two indices in any order": [1, 0] for [0, 1] passes under the checker
    # (strict ignores checkers, as LiveCodeBench has none); [0, 2] is wrong either way.
    two_sum = call_problem([("[2, 7, 11, 15]\n9", "[0, 1]"), ("[3, 2, 4]\n6", "[1, 2]")],
                           entry_point="two_sum", checker=Checker(unordered_levels=[0]))
    assert verdicts(evaluator, two_sum, TWO_SUM_REVERSED) == ("accepted", "wrong_answer")
    assert verdicts(evaluator, two_sum, "def two_sum(xs, target):\n    return [0, 2]") == ("wrong_answer",) * 2
    without_checker = two_sum.model_copy(update={"checker": None})
    assert verdicts(evaluator, without_checker, TWO_SUM_REVERSED) == ("wrong_answer",) * 2
    # "All pairs, each in any order, in any order": levels 0 and 1. Expected
    # [[0, 1], [0, 3], [1, 2], [2, 3]]; returned [[3, 2], [2, 1], [3, 0], [1, 0]].
    pairs = call_problem([("[1, 5, 1, 5]\n6", "[[0, 1], [0, 3], [1, 2], [2, 3]]")],
                         entry_point="pairs", checker=Checker(unordered_levels=[0, 1]))
    assert verdicts(evaluator, pairs, PAIRS_REVERSED) == ("accepted", "wrong_answer")
    level_0_only = pairs.model_copy(update={"checker": Checker(unordered_levels=[0])})
    assert verdicts(evaluator, level_0_only, PAIRS_REVERSED)[0] == "wrong_answer"
    missing_one = "def pairs(xs, target):\n    return [[1, 0], [3, 0], [2, 1], [2, 1]]"
    assert verdicts(evaluator, pairs, missing_one)[0] == "wrong_answer"


def test_unordered_levels_are_for_call_problems_only():
    record = {"id": "p", "prompt": "", "kind": "stdin", "tests": [], "checker": {"unordered_levels": [0]}}
    with pytest.raises(ProblemFormatError, match="checker.unordered_levels"):
        parse_problem(record)
    record = {"id": "p", "prompt": "", "kind": "call", "entry_point": "f", "tests": [],
              "checker": {"unordered_levels": [0, 0]}}
    with pytest.raises(ProblemFormatError, match="distinct"):
        parse_problem(record)

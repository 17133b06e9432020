"""The verdict cache and the test budget against the real sandboxed evaluator."""

import threading

import pytest

from microcoder.algorithms.rewards import problem_seed, select_tests
from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample
from microcoder.evaluator.cache import VerdictCache, problem_on_budget
from tests.helpers import stdin_problem

ADD = stdin_problem([("1 2", "3"), ("5 5", "10"), ("0 0", "0")], problem_id="add")
RIGHT = "```python\nprint(sum(map(int, input().split())))\n```"
WRONG = "```python\nprint(3)\n```"


class Counting:
    """An Evaluator that counts the samples it is asked to judge."""

    def __init__(self, evaluator):
        self.evaluator = evaluator
        self.config = evaluator.config
        self.judged = 0
        self.lock = threading.Lock()

    def evaluate(self, problems, samples, on_result=None):
        with self.lock:
            self.judged += len(samples)
        return self.evaluator.evaluate(problems, samples, on_result)


@pytest.fixture(scope="module")
def evaluator():
    with Evaluator(EvaluatorConfig(workers=2)) as evaluator:
        yield evaluator


def test_identical_programs_are_judged_once_with_the_same_results(evaluator):
    counting, cache = Counting(evaluator), VerdictCache(16)
    # the same program in two responses whose text outside the code block differs
    samples = [Sample("add", response="First try:\n" + RIGHT), Sample("add", response=WRONG),
               Sample("add", response="Again:\n" + RIGHT), Sample("add", response="no code here"),
               Sample("add", response=WRONG)]
    results, hits = cache.evaluate(counting, [ADD], samples)
    assert hits == [False, False, True, False, True]
    assert counting.judged == 3  # two programs and the no-code response
    plain = evaluator.evaluate([ADD], samples)
    assert [(r.verdict, r.tests_passed, r.tests_total, r.sample_index) for r in results] == \
           [(r.verdict, r.tests_passed, r.tests_total, r.sample_index) for r in plain]
    # A later call: both programs come from the cache, nothing is run.
    again, hits = cache.evaluate(counting, [ADD], [Sample("add", response=WRONG), Sample("add", response=RIGHT)])
    assert hits == [True, True] and counting.judged == 3
    assert [r.verdict for r in again] == ["wrong_answer", "accepted"] and again[0].seconds == 0.0
    assert (cache.hits, cache.lookups) == (4, 6)


def test_the_key_holds_the_judging_settings_and_the_problem(evaluator):
    cache = VerdictCache(16)
    code = "print(3)"
    base = cache.key(evaluator, ADD, code)
    assert cache.key(evaluator, ADD, code) == base
    assert cache.key(evaluator.with_options(all_tests=True), ADD, code) != base
    assert cache.key(evaluator.with_options(time_limit_scale=2.0), ADD, code) != base
    assert cache.key(evaluator.judging("strict"), ADD, code) != base
    assert cache.key(evaluator, problem_on_budget(ADD, 1, seed=0), code) != base
    assert cache.key(evaluator, ADD, code + " ") != base


def test_all_tests_results_are_kept_apart(evaluator):
    # A fraction mode judges with all_tests: its tests_passed counts every test, so it must
    # not be answered by a result that stopped at the first failure.
    cache = VerdictCache(16)
    half = "```python\na, b = map(int, input().split())\nprint(a + b if a != 5 else 0)\n```"  # fails test 2 only
    first, _ = cache.evaluate(evaluator, [ADD], [Sample("add", response=half)])
    every, hits = cache.evaluate(evaluator.with_options(all_tests=True), [ADD], [Sample("add", response=half)])
    assert hits == [False]
    assert (first[0].tests_passed, first[0].tests_run) == (1, 2) and (every[0].tests_passed, every[0].tests_run) == (2, 3)


def test_memory_is_bounded_least_recently_used_out(evaluator):
    cache = VerdictCache(2)
    programs = [f"```python\nprint({value})\n```" for value in range(3)]
    cache.evaluate(evaluator, [ADD], [Sample("add", response=programs[0]), Sample("add", response=programs[1])])
    cache.evaluate(evaluator, [ADD], [Sample("add", response=programs[0])])  # 0 is now the most recent
    cache.evaluate(evaluator, [ADD], [Sample("add", response=programs[2])])  # evicts 1
    assert len(cache) == 2
    _, hits = cache.evaluate(evaluator, [ADD], [Sample("add", response=p) for p in programs])
    assert hits == [True, False, True]


def test_judge_errors_are_not_kept(evaluator):
    broken = stdin_problem([("1", "1")], problem_id="broken", checker={"python": "def check(:\n"})
    cache, counting = VerdictCache(4), Counting(evaluator)
    samples = [Sample("broken", response=RIGHT), Sample("broken", response=RIGHT)]
    results, hits = cache.evaluate(counting, [broken], samples)
    assert [r.verdict for r in results] == ["judge_error"] * 2 and hits == [False, True]  # a repeat in the call
    _, hits = cache.evaluate(counting, [broken], samples[:1])
    assert hits == [False] and counting.judged == 2 and len(cache) == 0  # judged again in a later call


def test_concurrent_callers_wait_for_one_judging(evaluator):
    slow = stdin_problem([("", "done")], problem_id="slow")
    program = "```python\nimport time\ntime.sleep(0.5)\nprint('done')\n```"
    cache, counting = VerdictCache(4), Counting(evaluator)
    verdicts = []

    def call():
        results, _ = cache.evaluate(counting, [slow], [Sample("slow", response=program)])
        verdicts.append(results[0].verdict)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert verdicts == ["accepted"] * 4 and counting.judged == 1 and cache.hits == 3


def test_problem_on_budget_keeps_the_selected_tests_in_order():
    tests = [("x" * length, str(length)) for length in (4, 1, 9, 2, 7, 3)]
    problem = stdin_problem(tests, problem_id="p")
    kept = problem_on_budget(problem, 3, seed=11)
    expected = select_tests([4, 1, 9, 2, 7, 3], 3, problem_seed(11, "p"))
    assert [test.input for test in kept.tests] == [tests[index][0] for index in expected]
    assert {"x" * 9, "x" * 7} <= {test.input for test in kept.tests}  # ceil(3/2) = 2 longest
    assert problem_on_budget(problem, 6, seed=11) is problem and problem_on_budget(problem, None, 0) is problem
    assert len(problem.tests) == 6  # the original is untouched

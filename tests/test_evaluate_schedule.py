"""The order in which an evaluation's threads take tests (evaluate._Schedule), by hand."""

from microcoder.evaluator.evaluate import _Schedule, _SampleState, _TestOutcome, stopping_index
from tests.helpers import stdin_problem

PASS, WRONG, LOOP = (_TestOutcome(verdict, "", 0.0) for verdict in ("accepted", "wrong_answer", "time_limit_exceeded"))


def schedule(*test_counts, all_tests=False, capacity=2):
    states = [_SampleState(stdin_problem([("", "")] * count), "code") for count in test_counts]
    return _Schedule(states, list(range(len(states))), all_tests, capacity)


def test_threads_take_whole_samples_in_order_then_help_the_last_one():
    s = schedule(3, 4)
    assert s.launch() and s.launch() and not s.launch()  # two threads at most
    assert s.claim(None) == (0, 0)
    assert s.claim(None) == (1, 0)
    assert s.record(0, 0, PASS) is False
    assert s.claim(0) == (0, 1)  # a thread keeps to its sample
    # Thread 2's sample has not ended a test yet: nothing for a third thread either way.
    assert s.record(1, 0, PASS) is False
    assert s.claim(1) == (1, 1)
    assert s.record(0, 1, PASS) is False
    assert s.claim(0) == (0, 2)
    assert s.record(0, 2, PASS) is True  # sample 0 is done
    # Nothing left to start: thread 1 helps sample 1, taking the next test in order.
    assert s.claim(0) == (1, 2)
    assert s.record(1, 2, PASS) is False
    assert s.claim(1) == (1, 3)
    assert s.claim(1) is None  # all handed out: the thread stops
    assert s.record(1, 1, PASS) is False  # test 3 still runs
    s.result_made()  # sample 0's
    assert not s.done.is_set()
    assert s.record(1, 3, PASS) is True
    assert not s.done.is_set()  # until its result is made: evaluate() must not return without it
    s.result_made()
    assert s.done.is_set()


def test_a_sample_whose_first_test_is_running_is_not_helped():
    s = schedule(5)
    assert s.launch()
    assert s.claim(None) == (0, 0)
    assert not s.launch()  # it may loop: a second copy would only burn a core
    assert s.record(0, 0, PASS) is False
    assert s.launch()  # once a test ended, the thread that saw it starts a helper
    assert s.claim(None) == (0, 1)
    assert s.claim(0) == (0, 2)


def test_a_timeout_is_no_evidence_that_later_tests_end():
    s = schedule(5, all_tests=True)
    assert s.launch()
    assert s.claim(None) == (0, 0)
    assert s.record(0, 0, LOOP) is False  # under all_tests a timeout does not stop the sample
    assert s.claim(0) == (0, 1)
    assert not s.launch()  # still nothing that ended by itself


def test_a_failure_stops_handing_out_and_outcomes_after_it_are_not_the_samples():
    s = schedule(6)
    assert s.claim(None) == (0, 0)
    assert s.record(0, 0, PASS) is False
    assert s.claim(0) == (0, 1)
    assert s.claim(None) == (0, 2)  # a helper
    assert s.record(0, 2, PASS) is False
    assert s.claim(None) == (0, 3)
    assert s.record(0, 1, WRONG) is False  # test 3 still runs
    assert s.claim(0) is None and s.claim(None) is None
    assert s.record(0, 3, PASS) is True
    outcomes = s.states[0].outcomes
    assert stopping_index(outcomes, all_tests=False) == 1
    assert stopping_index(outcomes, all_tests=True) is None


def test_a_thread_that_raised_stops_the_others():
    s = schedule(4, 4)
    assert s.claim(None) == (0, 0)
    s.fail(RuntimeError("boom"))
    assert s.done.is_set() and s.claim(0) is None and not s.launch()

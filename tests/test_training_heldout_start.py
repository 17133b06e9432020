"""The held-out evaluation's bookends: step 0 read from a cache shared by the runs of one
starting model (an experiment grid's arms of one seed), and the gain paired by problem."""

from __future__ import annotations

import math
import threading
import time
from types import SimpleNamespace

import pytest

from microcoder.training.config import TrainConfig
from microcoder.training.run import paired_gain, start_heldout
from microcoder.training.trainer import problem_scores
from tests.training_support import add_problem


def stand_in(calls: list) -> SimpleNamespace:
    """A trainer whose held-out evaluation counts its calls and scores problem 0 right, 1 wrong."""
    trainer = SimpleNamespace(heldout=[add_problem(0), add_problem(1)], heldout_scores={})

    def heldout_accuracies():
        calls.append(1)
        trainer.heldout_scores["heldout_accuracy"] = {"tiny/add-0": 1.0, "tiny/add-1": 0.0}
        return {"heldout_accuracy": 0.5}

    trainer.heldout_accuracies = heldout_accuracies
    return trainer


def test_a_run_with_the_same_start_reads_step_0_from_the_cache(tmp_path):
    calls = []
    config = TrainConfig(heldout_start_cache=str(tmp_path / "cache"))
    first = stand_in(calls)
    assert start_heldout(first, config) == {"heldout_accuracy": 0.5} and len(calls) == 1
    # Another arm of the same seed: what it trains with differs, its starting point does not.
    arm = config.model_copy(update={"beta": 0.001, "truncation_mask": "none", "total_steps": 3})
    second = stand_in(calls)
    assert start_heldout(second, arm) == {"heldout_accuracy": 0.5} and len(calls) == 1
    assert second.heldout_scores == first.heldout_scores  # the paired gain needs them
    # A different seed, generation limit or decoding is another starting evaluation.
    for change in ({"seed": 1}, {"max_new_tokens": 64}, {"heldout_temperature": 0.7}):
        start_heldout(stand_in(calls), config.model_copy(update=change))
    assert len(calls) == 4
    # So is another held-out set.
    other = stand_in(calls)
    other.heldout = [add_problem(0), add_problem(2)]
    start_heldout(other, config)
    assert len(calls) == 5
    # Without the cache every run evaluates.
    start_heldout(stand_in(calls), TrainConfig())
    start_heldout(stand_in(calls), TrainConfig())
    assert len(calls) == 7


def test_two_runs_starting_together_evaluate_step_0_once(tmp_path):
    """The arms of one seed start side by side in a parallel grid: the second waits for the
    first's evaluation and reads it."""
    calls, started, release = [], threading.Event(), threading.Event()
    config = TrainConfig(heldout_start_cache=str(tmp_path / "cache"))
    first = stand_in(calls)
    evaluate = first.heldout_accuracies

    def slow_evaluation():
        started.set()
        release.wait(10)
        return evaluate()

    first.heldout_accuracies = slow_evaluation
    results = {}
    runs = [threading.Thread(target=lambda: results.setdefault("first", start_heldout(first, config)))]
    runs[0].start()
    started.wait(10)
    second = stand_in(calls)
    runs.append(threading.Thread(target=lambda: results.setdefault("second", start_heldout(second, config))))
    runs[1].start()
    time.sleep(0.3)  # the second reaches the cache while the first is still evaluating
    release.set()
    for run in runs:
        run.join(10)
    assert len(calls) == 1
    assert results == {"first": {"heldout_accuracy": 0.5}, "second": {"heldout_accuracy": 0.5}}
    assert second.heldout_scores == first.heldout_scores


def test_the_gain_is_paired_by_problem():
    before = {"a": 0.0, "b": 0.0, "c": 1.0}
    after = {"a": 1.0, "b": 0.0, "c": 1.0, "d": 1.0}  # d was not scored before: left out
    gain, se = paired_gain(before, after)
    assert gain == pytest.approx(1 / 3)
    assert se == pytest.approx(math.sqrt(1 / 3) / math.sqrt(3))
    assert paired_gain(None, after) is None and paired_gain({"a": 0.0}, {"a": 1.0}) is None


def test_problem_scores_leave_judge_errors_out():
    result = lambda problem, verdict: SimpleNamespace(problem_id=problem, verdict=verdict)  # noqa: E731
    results = [result("a", "accepted"), result("a", "wrong_answer"), result("a", "judge_error"),
               result("b", "judge_error"), result("c", "accepted")]
    assert problem_scores(results) == {"a": 0.5, "c": 1.0}

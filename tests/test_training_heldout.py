"""Held-out accuracy during training: how many samples are drawn, at which temperature,
and how the real evaluator's verdicts become pass@1 (broken problems left out).

Generation is scripted (a random-init model never writes a passing program); the judging
is the real Evaluator's."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from microcoder.evaluator import Evaluator, EvaluatorConfig
from microcoder.problems import Problem
from microcoder.policy import generation, prompts
from microcoder.policy.generation import GeneratedText
from microcoder.training.trainer import MicroCoderTrainer
from tests.training_support import add_problem

# The real Evaluator's sandbox workers judge (processes started per module), on a stand-in
# trainer whose generation is scripted; the last test trains the tiny model for three steps.
pytestmark = pytest.mark.slow

RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"
WRONG = "```python\ndef add(a, b):\n    return a - b\n```"


@pytest.fixture(scope="module")
def evaluator():
    with Evaluator(EvaluatorConfig(workers=2)) as evaluator:
        yield evaluator


def heldout_accuracy(evaluator, monkeypatch, problems, responses, temperature, samples, long_factor=0.0,
                     full=False):
    """MicroCoderTrainer.heldout_accuracies on a stand-in trainer; returns (accuracy, calls),
    accuracy being the dict of both accuracies when `full`. `responses` maps a problem id to
    its responses, or to {max_new_tokens: responses}."""
    calls = []

    def scripted_generate(model, tokenizer, prompt_texts, n, max_new_tokens, temperature, **kwargs):
        calls.append({"prompts": len(prompt_texts), "n": n, "temperature": temperature, "tokens": max_new_tokens})
        picked = [responses[problem.id] for problem in problems]
        picked = [texts[max_new_tokens] if isinstance(texts, dict) else texts for texts in picked]
        return [[GeneratedText([], text, False) for text in texts[:n]] for texts in picked]

    monkeypatch.setattr(generation, "generate", scripted_generate)
    monkeypatch.setattr(prompts, "render_prompt", lambda problem, tokenizer: problem.prompt)
    trainer = SimpleNamespace(
        accelerator=SimpleNamespace(unwrap_model=lambda model: model), model=None, processing_class=None, use_vllm=False,
        heldout=problems, reward=SimpleNamespace(evaluator=evaluator), heldout_scores={},
        config=SimpleNamespace(heldout_temperature=temperature, heldout_samples=samples, max_new_tokens=64,
                               heldout_long_factor=long_factor, top_p=1.0, seed=0),
    )
    trainer.heldout_accuracy = lambda tokens, name: MicroCoderTrainer.heldout_accuracy(trainer, tokens, name)
    accuracies = MicroCoderTrainer.heldout_accuracies(trainer)
    for call in calls:
        if not full:
            call.pop("tokens")
    return (accuracies if full else accuracies["heldout_accuracy"]), calls


def test_sampled_heldout_draws_heldout_samples_at_the_heldout_temperature(evaluator, monkeypatch):
    problems = [add_problem(0), add_problem(1)]
    responses = {problems[0].id: [RIGHT, WRONG, RIGHT, RIGHT], problems[1].id: [WRONG, WRONG, RIGHT, WRONG]}
    accuracy, calls = heldout_accuracy(evaluator, monkeypatch, problems, responses, temperature=0.7, samples=4)
    assert calls == [{"prompts": 2, "n": 4, "temperature": 0.7}]
    assert accuracy == pytest.approx((3 / 4 + 1 / 4) / 2)


def test_greedy_heldout_decodes_once(evaluator, monkeypatch):
    problems = [add_problem(0), add_problem(1)]
    responses = {problems[0].id: [RIGHT] * 4, problems[1].id: [WRONG] * 4}
    accuracy, calls = heldout_accuracy(evaluator, monkeypatch, problems, responses, temperature=0, samples=4)
    assert calls == [{"prompts": 2, "n": 1, "temperature": 0}]
    assert accuracy == pytest.approx(0.5)


def test_a_broken_heldout_problem_does_not_count(evaluator, monkeypatch):
    broken = Problem(id="tiny/broken", kind="call", entry_point="add", prompt="x", tests=[])  # judge_error
    problems = [add_problem(0), broken]
    responses = {problems[0].id: [RIGHT, RIGHT], broken.id: [RIGHT, RIGHT]}
    accuracy, _ = heldout_accuracy(evaluator, monkeypatch, problems, responses, temperature=1.0, samples=2)
    assert accuracy == pytest.approx(1.0)  # not 0.5: the problem with no tests is left out


def test_a_heldout_set_of_only_broken_problems_reads_nan_not_zero(evaluator, monkeypatch):
    broken = Problem(id="tiny/broken", kind="call", entry_point="add", prompt="x", tests=[])  # judge_error
    accuracy, _ = heldout_accuracy(evaluator, monkeypatch, [broken], {broken.id: [RIGHT, RIGHT]}, temperature=1.0,
                                   samples=2)
    assert math.isnan(accuracy)  # nothing was measured; 0.0 would read as a model that fails everything


def test_the_long_heldout_generates_at_the_factor_times_the_training_limit(evaluator, monkeypatch):
    problems = [add_problem(0), add_problem(1)]
    responses = {problems[0].id: {64: [WRONG, WRONG], 128: [RIGHT, RIGHT]},
                 problems[1].id: {64: [RIGHT, WRONG], 128: [RIGHT, RIGHT]}}
    accuracies, calls = heldout_accuracy(evaluator, monkeypatch, problems, responses, temperature=0.7, samples=2,
                                         long_factor=2.0, full=True)
    assert [call["tokens"] for call in calls] == [64, 128]
    assert accuracies == pytest.approx({"heldout_accuracy": 0.25, "heldout_accuracy_long": 1.0})
    accuracies, calls = heldout_accuracy(evaluator, monkeypatch, problems, responses, temperature=0.7, samples=2,
                                         full=True)
    assert [call["tokens"] for call in calls] == [64] and set(accuracies) == {"heldout_accuracy"}


def test_heldout_is_judged_robustly_when_the_reward_judges_strictly(monkeypatch):
    # LiveCodeBench's strict grader accepts True for an expected 1 (Python ==); ours does not.
    # (One argument: LiveCodeBench reads every input line as one, an empty input included.)
    problem = Problem(id="tiny/one", kind="call", entry_point="one", prompt="Return 1.",
                      tests=[{"input": "0", "output": "1"}])
    responses = {problem.id: ["```python\ndef one(x):\n    return True\n```"]}
    with Evaluator(EvaluatorConfig(workers=1, mode="strict")) as strict:
        assert strict.evaluate_code(problem, "def one(x):\n    return True\n").verdict == "accepted"
        accuracy, _ = heldout_accuracy(strict, monkeypatch, [problem], responses, temperature=0.7, samples=1)
    assert accuracy == 0.0


def test_a_run_logs_the_long_heldout_before_the_first_step_and_after_the_last_only(tmp_path):
    import json
    from pathlib import Path

    from microcoder.training.config import load_config
    from microcoder.training.run import run_training
    from tests.training_support import ScriptedEvaluator, tiny_problems

    preset = Path(__file__).parents[1] / "configs" / "microcoder-tiny.yaml"
    config = load_config(preset, ["total_steps=3", "eval_every=1", "heldout_long_factor=2", "heldout_samples=2",
                                  f"run_dir={tmp_path / 'run'}", f"heldout_start_cache={tmp_path / 'cache'}"])
    run_training(config, problems=tiny_problems(), evaluator=ScriptedEvaluator())
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(row["step"], "heldout_accuracy" in row, "heldout_accuracy_long" in row) for row in rows] == [
        (0, True, True), (1, True, False), (2, True, False), (3, True, True)]
    # Step 0 went to the shared cache, and the summary holds the gain paired by problem.
    assert len(list((tmp_path / "cache").glob("heldout-start-*.json"))) == 1
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["heldout_gain"] == pytest.approx(rows[3]["heldout_accuracy"] - rows[0]["heldout_accuracy"])
    assert summary["heldout_gain_se"] >= 0

"""Held-out accuracy during training: how many samples are drawn, at which temperature,
and how the real evaluator's verdicts become pass@1 (broken problems left out).

Generation is scripted (a random-init model never writes a passing program); the judging
is the real Evaluator's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from microcoder.evaluator import Evaluator, EvaluatorConfig
from microcoder.problems import Problem
from microcoder.training import generation, prompts
from microcoder.training.generation import GeneratedText
from microcoder.training.trainer import MicroCoderTrainer
from tests.training_support import add_problem

RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"
WRONG = "```python\ndef add(a, b):\n    return a - b\n```"


@pytest.fixture(scope="module")
def evaluator():
    with Evaluator(EvaluatorConfig(workers=2)) as evaluator:
        yield evaluator


def heldout_accuracy(evaluator, monkeypatch, problems, responses, temperature, samples):
    """MicroCoderTrainer.heldout_accuracy on a stand-in trainer; returns (accuracy, calls)."""
    calls = []

    def scripted_generate(model, tokenizer, prompt_texts, n, max_new_tokens, temperature, **kwargs):
        calls.append({"prompts": len(prompt_texts), "n": n, "temperature": temperature})
        return [[GeneratedText([], text, False) for text in responses[problem.id][:n]] for problem in problems]

    monkeypatch.setattr(generation, "generate", scripted_generate)
    monkeypatch.setattr(prompts, "render_prompt", lambda problem, tokenizer: problem.prompt)
    trainer = SimpleNamespace(
        accelerator=SimpleNamespace(unwrap_model=lambda model: model), model=None, processing_class=None,
        heldout=problems, reward=SimpleNamespace(evaluator=evaluator),
        config=SimpleNamespace(heldout_temperature=temperature, heldout_samples=samples, max_new_tokens=64,
                               top_p=1.0, seed=0),
    )
    return MicroCoderTrainer.heldout_accuracy(trainer), calls


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

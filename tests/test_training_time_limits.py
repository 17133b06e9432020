"""The reward's time limits on the trainer's own evaluator: a problem's limit wins over
reward_time_limit_s, and reward_time_limit_scale multiplies it (a slower machine)."""

import pytest

from microcoder.evaluator import Sample
from microcoder.problems import Problem
from microcoder.training.config import load_config
from microcoder.training.run import build_trainer
from tests.test_training_presets import CONFIGS

# Burns 0.5 s of CPU, then answers: over a 0.25 s limit, within 4 x 0.25 s.
SLOW = ("```python\nimport time\nend = time.process_time() + 0.5\nwhile time.process_time() < end:\n    pass\n"
        "print(sum(map(int, input().split())))\n```")


def slow_problem() -> Problem:
    return Problem(id="slow/add", kind="stdin", prompt="Print a + b.", time_limit_s=0.25,
                   tests=[{"input": "1 2\n", "output": "3\n"}])


@pytest.mark.parametrize("scale, verdict", [(1.0, "time_limit_exceeded"), (4.0, "accepted")])
def test_the_trainers_reward_uses_the_problems_limit_times_the_scale(tmp_path, scale, verdict):
    config = load_config(CONFIGS / "microcoder-tiny.yaml",
                         [f"run_dir={tmp_path}", "reward_workers=1", "reward_time_limit_s=30",
                          f"reward_time_limit_scale={scale}"])
    trainer = build_trainer(config, tmp_path, problems=([slow_problem()], []))  # the trainer's own evaluator
    try:
        [result] = trainer.reward.evaluator.evaluate([slow_problem()], [Sample("slow/add", response=SLOW)])
    finally:
        trainer.reward.close()
    assert result.verdict == verdict, result.detail


def test_a_scale_that_is_not_positive_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="reward_time_limit_scale"):
        load_config(CONFIGS / "microcoder-tiny.yaml", [f"run_dir={tmp_path}", "reward_time_limit_scale=0"])


@pytest.mark.parametrize("mode, verdict", [("strict", "accepted"), ("robust", "wrong_answer")])
def test_the_trainers_reward_judges_in_reward_judge_mode(tmp_path, mode, verdict):
    # LiveCodeBench's strict grader accepts "3.0" for an expected "3" (Decimal equality);
    # ours wants an integer printed as one. The evaluator aspect's two arms differ only here.
    config = load_config(CONFIGS / "microcoder-tiny.yaml",
                         [f"run_dir={tmp_path}", "reward_workers=1", f"reward_judge_mode={mode}"])
    problem = Problem(id="add", kind="stdin", prompt="Print a + b.", tests=[{"input": "1 2\n", "output": "3\n"}])
    trainer = build_trainer(config, tmp_path, problems=([problem], []))
    try:
        [result] = trainer.reward.evaluator.evaluate(
            [problem], [Sample("add", response="```python\nprint(float(sum(map(int, input().split()))))\n```")])
    finally:
        trainer.reward.close()
    assert result.verdict == verdict, result.detail

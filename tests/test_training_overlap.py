"""Judging hidden behind sampling, on the real trainer path (tiny model, CPU).

With `reward_overlap`, each chunk of a rollout (`rollout_chunks`) is judged in a
background thread as soon as it is sampled, while the trainer samples the next chunk and
computes the old log-probs; the reward call only waits for what is left. The overlap must
change nothing but the waiting: at the same `rollout_chunks`, runs with and without it
give the same verdicts, rewards and weights. Judging is made slow with a sleep inside the
evaluator, so the ordering asserted below (visible < total) follows from the schedule,
not from how fast this machine happens to be.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

from microcoder.training.config import load_config
from microcoder.policy.model import tiny_model_and_tokenizer
from microcoder.training.reward import EvaluatorReward, chunk_bounds
from microcoder.training.run import build_trainer
from tests.test_training_presets import CONFIGS
from tests.training_support import ScriptedEvaluator, add_problem, tiny_problems

pytestmark = pytest.mark.slow  # each test trains the tiny model (tens of seconds on 2 cores)


class SlowScriptedEvaluator(ScriptedEvaluator):
    """ScriptedEvaluator that takes `seconds` per call, off the caller's CPU (as sandboxed programs run in
    worker processes); records the size of each call."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds
        self.calls: list[int] = []
        self.threads: list[str] = []

    def evaluate(self, problems, samples, on_result=None):
        self.calls.append(len(samples))
        self.threads.append(threading.current_thread().name)
        time.sleep(self.seconds)
        return super().evaluate(problems, samples, on_result)


def train(run_dir, evaluator, *overrides):
    """Two rollout steps of the tiny MicroCoder-GRPO preset (2 prompts x 4, two updates each).
    Returns (per step: verdicts and rewards of the trained rows, metrics records, final weights)."""
    config = load_config(CONFIGS / "microcoder-tiny.yaml", [f"run_dir={run_dir}", "heldout_size=0", "save_every=0",
                                                            *overrides])
    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    train_problems, _ = tiny_problems()
    trainer = build_trainer(config, run_dir, model, tokenizer, problems=(train_problems, []), evaluator=evaluator)
    scored, records = [], []
    advantages = trainer.compute_advantages

    def recording(batch):
        scored.append((list(batch.verdicts), list(batch.rewards)))
        return advantages(batch)

    trainer.compute_advantages = recording
    finish = trainer._finish_step

    def finishing():
        records.append(finish())
        return records[-1]

    trainer._finish_step = finishing
    try:
        trainer.train()
    finally:
        trainer.reward.close()
    weights = {name: value.detach().clone() for name, value in trainer.model.named_parameters()}
    return scored, records, weights


def numbers(record: dict) -> dict:
    """A metrics record without its timings."""
    return {key: value for key, value in record.items() if not key.startswith("seconds") and key != "tokens_per_second"}


@pytest.mark.parametrize("chunks", [1, 2])
def test_overlap_gives_the_same_verdicts_rewards_and_weights(tmp_path, chunks):
    runs = [train(tmp_path / overlap, ScriptedEvaluator(), f"rollout_chunks={chunks}", f"reward_overlap={overlap}")
            for overlap in ("false", "true")]
    (scored_off, records_off, weights_off), (scored_on, records_on, weights_on) = runs
    assert len(scored_off) == 2 and scored_on == scored_off
    assert len({verdict for verdicts, _ in scored_off for verdict in verdicts}) > 1  # varied verdicts, not all one
    assert [numbers(record) for record in records_on] == [numbers(record) for record in records_off]
    assert all(torch.equal(weights_on[name], weights_off[name]) for name in weights_off)


def test_chunks_are_judged_while_sampling_goes_on(tmp_path):
    # 8 responses per rollout in 2 chunks; each judge call sleeps 0.5 s. With overlap the
    # first chunk is judged while the second is sampled and both while the old log-probs
    # are computed, so the reward call waits less than the judging took.
    on = SlowScriptedEvaluator(0.5)
    _, records, _ = train(tmp_path / "on", on, "rollout_chunks=2", "reward_overlap=true")
    assert on.calls == [4, 4, 4, 4]  # one call per chunk, two chunks per step
    # In the background: judging each chunk up front in the trainer's thread would also
    # make the reward call's wait short, but hide nothing.
    assert all(name.startswith("microcoder-judge") for name in on.threads), on.threads
    for record in records:
        assert record["seconds_reward"] >= 1.0  # two calls of 0.5 s
        assert record["seconds_reward_visible"] < record["seconds_reward"]
    off = SlowScriptedEvaluator(0.5)
    _, records, _ = train(tmp_path / "off", off, "rollout_chunks=2", "reward_overlap=false")
    assert off.calls == [8, 8]  # the whole batch, in the reward call
    assert not any(name.startswith("microcoder-judge") for name in off.threads), off.threads
    for record in records:
        assert record["seconds_reward_visible"] >= record["seconds_reward"] >= 0.5


def test_a_row_changed_after_sampling_is_judged_again():
    evaluator = SlowScriptedEvaluator(0.0)
    problems = [add_problem(0), add_problem(1)]
    reward = EvaluatorReward(evaluator, problems, max_new_tokens=16, overlap=True)
    reward.begin_round(["tiny/add-0", "tiny/add-1"])
    reward.judge_early(0, ["first", "second"])
    values = reward(prompts=["p", "p"], completions=["first", "changed"], completion_ids=[[1], [2]],
                    problem_id=["tiny/add-0", "tiny/add-1"])
    assert evaluator.calls == [2, 1]  # the early chunk, then the changed row alone
    direct = EvaluatorReward(ScriptedEvaluator(), problems, max_new_tokens=16)
    assert values == direct(prompts=["p", "p"], completions=["first", "changed"], completion_ids=[[1], [2]],
                            problem_id=["tiny/add-0", "tiny/add-1"])
    reward.close()


def test_chunk_bounds_cover_the_rows_in_order():
    assert chunk_bounds(8, 2) == [(0, 4), (4, 8)]
    assert chunk_bounds(7, 3) == [(0, 2), (2, 4), (4, 7)]
    assert chunk_bounds(2, 4) == [(0, 1), (1, 2)]  # more chunks than rows: no empty chunk
    assert chunk_bounds(5, 1) == [(0, 5)]


def test_rollout_chunks_is_checked():
    with pytest.raises(ValueError, match="rollout_chunks"):
        load_config(None, ["rollout_chunks=0"])
    with pytest.raises(ValueError, match="rollout_chunks"):
        load_config(None, ["use_vllm=true", "rollout_chunks=2"])

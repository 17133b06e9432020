"""Each mechanism of the paper's three algorithms on the real training path (`run_training` on the tiny model,
CPU): a test here fails when the mechanism is removed from the trainer.

Verdicts come from `ScriptedEvaluator` (tests/training_support.py): a random-init model
never passes a real test. The pure functions behind each mechanism have their own
hand-derived tests in tests/test_algorithms_*.py.
"""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from microcoder.training.config import load_config
from microcoder.policy.model import tiny_model_and_tokenizer
from microcoder.training.run import build_trainer, new_run_dir, run_training
from microcoder.training.rollouts import merge_rollouts
from tests.test_training_presets import CONFIGS, last_checkpoint, read_metrics
from tests.training_support import ScriptedEvaluator, tiny_problems

pytestmark = pytest.mark.slow  # each test trains the tiny model (tens of seconds on 2 cores)


def train(preset, run_dir, evaluator=None, *overrides):
    config = load_config(CONFIGS / f"{preset}-tiny.yaml", [f"run_dir={run_dir}", "heldout_size=0", *overrides])
    train_problems, _ = tiny_problems()
    run_training(config, problems=(train_problems, []), evaluator=evaluator or ScriptedEvaluator())
    return [record for record in read_metrics(run_dir) if "reward_mean" in record]  # the step lines


def changed_parameters(run_dir) -> int:
    initial = dict(tiny_model_and_tokenizer(seed=0)[0].named_parameters())
    final = AutoModelForCausalLM.from_pretrained(last_checkpoint(run_dir))
    return sum(not torch.equal(param, initial[name]) for name, param in final.named_parameters())


@pytest.fixture
def log_prob_passes(monkeypatch):
    """Every log-prob pass of the trainer, in order: "update" (with gradients) or "rollout"
    (TRL's old / reference log-probs, without)."""
    from microcoder.training.trainer import MicroCoderTrainer

    passes = []
    inner = MicroCoderTrainer.token_log_probs  # every pass, TRL's and the update's (trl_hooks.py)

    def counting(self, *args, **kwargs):
        passes.append("update" if torch.is_grad_enabled() else "rollout")
        return inner(self, *args, **kwargs)

    monkeypatch.setattr(MicroCoderTrainer, "token_log_probs", counting)
    return passes


# ---- 1. ratios that move, and clip-higher acting on them -------------------------------------

def test_clip_higher_clips_a_ratio_moved_by_the_first_update(tmp_path, log_prob_passes):
    # Two epochs over the same rollout with a large learning rate: the first update raises the
    # log-probs of the positive-advantage tokens, so in the second their ratio (new / old
    # log-probs at T) passes 1 + eps_high.
    moving = ("total_steps=1", "ppo_mini_batch_size=2", "ppo_epochs=2", "learning_rate=0.05")
    record = train("microcoder", tmp_path / "clip", None, *moving)[0]
    assert record["ratio_deviation"] > 0.05 and record["ppo_kl"] != 0
    assert record["clip_fraction_high"] > 0
    # Two updates of one rollout: the old log-probs are computed once, before the first.
    assert log_prob_passes[0] == "rollout" and log_prob_passes.count("rollout") == 1
    # The same run with an upper clip too wide to reach: no token is clipped high.
    wide = train("microcoder", tmp_path / "wide", None, *moving, "eps_high=1000")[0]
    assert wide["ratio_deviation"] == pytest.approx(record["ratio_deviation"])
    assert wide["clip_fraction_high"] == 0


def test_one_update_per_rollout_has_ratio_one(tmp_path, log_prob_passes):
    # The contrast the issue names: train_batch_size == ppo_mini_batch_size, one epoch
    # (with the bottom layer frozen, so that the frozen-prefix override is in the path).
    record = train("microcoder", tmp_path / "onpolicy", None, "total_steps=1", "ppo_mini_batch_size=2",
                   "train_top_layers=1")[0]
    assert record["ratio_deviation"] == 0 and record["clip_fraction_high"] == record["clip_fraction_low"] == 0
    # No pass that nothing reads: with beta = 0 and one update per rollout TRL computes
    # neither old nor reference log-probs, and the frozen-prefix override adds none back
    # (the clip test above sees the old-log-prob pass of a rollout with two updates).
    assert log_prob_passes and set(log_prob_passes) == {"update"}


# ---- 2. mask modes ------------------------------------------------------------------------------

def test_mask_all_takes_every_truncated_response_out_of_the_loss(tmp_path):
    # A random-init model never stops within 16 tokens: every response is truncated, so
    # under "all" nothing is left in the loss and no parameter moves; under "none" they move.
    records = train("microcoder", tmp_path / "all", None, "total_steps=1", "truncation_mask=all")
    assert records[0]["fraction_truncated"] == 1.0 and records[0]["fraction_masked"] == 1.0
    assert records[0]["entropy"] == 0  # averaged over the loss's tokens: none are left
    assert changed_parameters(tmp_path / "all") == 0
    train("microcoder", tmp_path / "none", None, "total_steps=1", "truncation_mask=none")
    assert changed_parameters(tmp_path / "none") > 0


def test_conditional_masks_only_the_qualifying_fraction(tmp_path):
    every = train("microcoder", tmp_path / "rho1", None, "truncation_mask_rho=1.0")
    for record in every:
        assert 0 < record["fraction_qualifying"] < record["fraction_truncated"]
        assert record["fraction_masked"] == record["fraction_qualifying"]
    none = train("microcoder", tmp_path / "none", None, "truncation_mask=none")
    assert all(record["fraction_masked"] == 0 and record["fraction_qualifying"] > 0 for record in none)


# ---- 4. DAPO's dynamic sampling with refill ----------------------------------------------------------

def test_dynamic_sampling_refills_the_batch_with_mixed_groups(tmp_path):
    # Four of the six training problems can only be answered wrong: their groups are never mixed.
    evaluator = ScriptedEvaluator(always_wrong={f"tiny/add-{index}" for index in (0, 2, 3, 5)})
    records = train("dapo", tmp_path / "refill", evaluator, "total_steps=3", "dynamic_sampling_max_rounds=8")
    for record in records:
        assert record["groups_kept"] == record["groups_mixed"] == 2  # train_batch_size mixed groups
        assert record["groups_generated"] == 2 * record["sampling_rounds"]
    assert max(record["sampling_rounds"] for record in records) > 1  # a refill happened
    # The budget so far counts every generated group and judged response, refills included.
    generated = [sum(record["groups_generated"] for record in records[:end]) for end in (1, 2, 3)]
    assert [record["groups_generated_total"] for record in records] == generated
    assert [record["responses_judged_total"] for record in records] == [4 * groups for groups in generated]
    seconds = [record["seconds_rollout"] + record["seconds_reward_visible"] + record["seconds_update"]
               for record in records]
    assert [record["seconds_total"] for record in records] == pytest.approx([sum(seconds[:end]) for end in (1, 2, 3)])


def test_dynamic_sampling_stops_at_its_cap_and_trains_on_what_there_is(tmp_path):
    evaluator = ScriptedEvaluator(always_wrong={f"tiny/add-{index}" for index in range(6)})
    records = train("dapo", tmp_path / "cap", evaluator, "total_steps=1", "dynamic_sampling_max_rounds=2")
    assert records[0]["sampling_rounds"] == 3 and records[0]["groups_generated"] == 6
    assert records[0]["groups_kept"] == 0 and records[0]["loss"] == 0
    assert records[0]["entropy"] == 0  # the dropped groups' tokens left the loss


def test_refilled_rows_stay_aligned_with_their_verdicts(tmp_path):
    # One DAPO rollout through the trainer's own method: the batch TRL trains on holds the
    # same rows, in the same order, as the scored batch the advantages came from.
    evaluator = ScriptedEvaluator(always_wrong={f"tiny/add-{index}" for index in (0, 2, 3, 5)})
    config = load_config(CONFIGS / "dapo-tiny.yaml", [f"run_dir={tmp_path}", "dynamic_sampling_max_rounds=8"])
    trainer = build_trainer(config, tmp_path, problems=(tiny_problems()[0], []), evaluator=evaluator)
    trainer.model.train()
    rounds = []  # every sampling round's scored batch, the dropped groups' included
    sample_and_score = trainer.sample_and_score

    def recording(inputs):
        output, scored = sample_and_score(inputs)
        rounds.append(scored)
        return output, scored

    trainer.sample_and_score = recording
    output = trainer._generate_and_score_completions(trainer.draw_prompts(2))
    scored = trainer.rollout_scored
    # Reward and accuracy over the kept groups, and over every generated one (DAPO's metrics
    # comparable with the other algorithms', which keep every group).
    record = trainer.rollout_record
    generated = [value for batch in rounds for value in batch.correct]
    assert len(rounds) > 1 and record["groups_generated"] == len(generated) // 4 == 2 * len(rounds)
    assert record["accuracy_mean"] == pytest.approx(sum(scored.correct) / 8)
    assert record["accuracy_mean_generated"] == pytest.approx(sum(generated) / len(generated))
    assert record["accuracy_mean_generated"] < record["accuracy_mean"]  # the dropped groups are all wrong
    assert record["reward_mean_generated"] == pytest.approx(
        sum(value for batch in rounds for value in batch.rewards) / len(generated))
    assert len(scored.verdicts) == output["completion_ids"].size(0) == 8
    pad = trainer.processing_class.pad_token_id
    for row, ids in enumerate(scored.completion_ids):
        assert output["completion_ids"][row, :len(ids)].tolist() == ids
        assert set(output["completion_ids"][row, len(ids):].tolist()) <= {pad}
    # Every group is mixed, and each row's advantage has its own verdict's sign.
    for row, correct in enumerate(scored.correct):
        assert (output["advantages"][row] > 0) == (correct == 1.0), row
    assert all(len(set(scored.correct[start:start + 4])) > 1 for start in (0, 4))


# ---- 5. unscorable responses ---------------------------------------------------------------------------

def test_judge_errors_get_no_reward_and_move_nothing(tmp_path):
    # Every response is accepted or a judge error. Scored as 0, the judge errors would make
    # the groups mixed and move the policy; left out, every scorable response is alike
    # (advantage 0) and no parameter moves.
    evaluator = ScriptedEvaluator(verdicts=("accepted", "judge_error"))
    record = train("microcoder", tmp_path / "judge", evaluator, "total_steps=1", "truncation_mask=none")[0]
    assert 0 < record["fraction_unscorable"] < 1
    assert record["reward_mean"] == record["accuracy_mean"] == 1.0  # over scorable responses only
    assert changed_parameters(tmp_path / "judge") == 0


# ---- 9. run directories -------------------------------------------------------------------------------

def test_runs_started_in_the_same_second_get_their_own_directories(tmp_path):
    made = {new_run_dir("microcoder", tmp_path) for _ in range(5)}
    assert len(made) == 5 and all(path.name.startswith("microcoder-") for path in made)


def test_an_existing_run_is_never_overwritten_without_resume(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 0, "heldout_accuracy": 0.5}) + "\n")
    config = load_config(CONFIGS / "microcoder-tiny.yaml", [f"run_dir={tmp_path}"])
    with pytest.raises(FileExistsError, match="--resume"):
        run_training(config, problems=tiny_problems(), evaluator=ScriptedEvaluator())
    assert (tmp_path / "metrics.jsonl").read_text().startswith('{"step": 0')


def test_merge_rollouts_pads_prompts_left_and_completions_right():
    # Two rollouts of 2 rows each, of different widths; take row 1 of the first, row 0 of the second.
    first = {"prompt_ids": torch.tensor([[9, 1, 2], [3, 4, 5]]), "prompt_mask": torch.tensor([[0, 1, 1], [1, 1, 1]]),
             "completion_ids": torch.tensor([[6, 9], [7, 8]]), "completion_mask": torch.tensor([[1, 0], [1, 1]]),
             "advantages": torch.tensor([0.5, -0.5]), "old_per_token_logps": torch.tensor([[-1.0, 0.0], [-2.0, -3.0]]),
             "num_items_in_batch": torch.tensor(5)}
    second = {"prompt_ids": torch.tensor([[1], [2]]), "prompt_mask": torch.tensor([[1], [1]]),
              "completion_ids": torch.tensor([[4, 5, 6], [7, 9, 9]]), "completion_mask": torch.tensor([[1, 1, 1], [1, 0, 0]]),
              "advantages": torch.tensor([1.0, 0.0]), "old_per_token_logps": torch.tensor([[-4.0, -5.0, -6.0], [-7.0, 0.0, 0.0]]),
              "num_items_in_batch": torch.tensor(4)}
    merged = merge_rollouts([(first, [1]), (second, [0])], pad_token_id=9)
    assert merged["prompt_ids"].tolist() == [[3, 4, 5], [9, 9, 1]]
    assert merged["prompt_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert merged["completion_ids"].tolist() == [[7, 8, 9], [4, 5, 6]]
    assert merged["completion_mask"].tolist() == [[1, 1, 0], [1, 1, 1]]
    assert merged["old_per_token_logps"].tolist() == [[-2.0, -3.0, 0.0], [-4.0, -5.0, -6.0]]
    assert merged["advantages"].tolist() == [-0.5, 1.0] and "num_items_in_batch" not in merged
    with pytest.raises(NotImplementedError, match="num_images"):
        merge_rollouts([({**first, "num_images": [1, 1]}, [0])], pad_token_id=9)

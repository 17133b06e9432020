"""The seams with TRL's private internals (microcoder/training/trl_hooks.py), one test each.

Each test fails when TRL stops doing what a hook relies on: a method renamed or re-signed,
a loop that no longer calls it, a different return, another checkpoint layout. They run
TRL's own code paths on the tiny model (2 layers, the top one trained) with a scripted
evaluator; the vLLM hooks' behaviour is tested in the vLLM environment
(tests/test_vllm_training.py), here only the TRL names they override.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest
import torch
import trl
from trl import GRPOTrainer

from microcoder.policy import generation
from microcoder.policy.model import tiny_model_and_tokenizer
from microcoder.training.config import load_config
from microcoder.training.run import build_trainer, freeze_below_top_layers
from microcoder.training.trainer import STATE_FILE
from microcoder.training.trl_hooks import (ACCEPT_TRL_ENV, TRL_VERSION, check_trl_version, colocated_vllm,
                                           fused_head_temperature_cell)
from tests.test_training_presets import CONFIGS
from tests.training_support import ScriptedEvaluator, tiny_problems

REPO = Path(__file__).resolve().parents[1]


def tiny_trainer(run_dir: Path):
    """A trainer on the tiny model: 2 prompts x 4 responses per rollout, sampled in 2 chunks,
    2 optimizer updates per rollout (so TRL computes old log-probs)."""
    config = load_config(CONFIGS / "microcoder-tiny.yaml", [f"run_dir={run_dir}", "heldout_size=0", "total_steps=1",
                                                            "train_top_layers=1", "save_every=0", "rollout_chunks=2"])
    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    freeze_below_top_layers(model, 1)
    train_problems, _ = tiny_problems()
    trainer = build_trainer(config, run_dir, model, tokenizer, problems=(train_problems, []),
                            evaluator=ScriptedEvaluator())
    trainer.model.train()
    return trainer


def parameters(method) -> list[str]:
    return list(inspect.signature(method).parameters)


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    return tiny_trainer(tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def prepared(trainer):
    """One generation batch through TRL's `_prepare_inputs`, our rollout's and TRL's rollout's
    outputs recorded on the way: {"rollout": ..., "trl": ..., "scored": ..., "micro_batch": ..., "rows": ...}."""
    seen = {}
    rollout, trl_rollout = trainer.rollout, trainer.trl_rollout

    def recording_rollout(inputs):
        seen["rows"] = inputs
        seen["rollout"] = rollout(inputs)
        return seen["rollout"]

    def recording_trl_rollout(inputs):
        output, seen["scored"] = trl_rollout(inputs)
        seen["trl"] = {key: value.clone() if torch.is_tensor(value) else value for key, value in output.items()}
        return output, seen["scored"]

    trainer.rollout, trainer.trl_rollout = recording_rollout, recording_trl_rollout
    try:
        seen["micro_batch"] = trainer._prepare_inputs(trainer.draw_prompts(2))
    finally:
        del trainer.rollout, trainer.trl_rollout
    return seen


# ---- the version ----------------------------------------------------------------------------------

def test_the_installed_and_pinned_trl_is_the_one_the_hooks_were_read_against():
    assert trl.__version__ == TRL_VERSION
    assert f'"trl=={TRL_VERSION}"' in (REPO / "pyproject.toml").read_text(encoding="utf-8")


def test_another_trl_stops_the_trainer_at_start_up_unless_accepted(tmp_path, monkeypatch):
    monkeypatch.setattr(trl, "__version__", "1.99.0")
    with pytest.raises(RuntimeError, match=rf"trl 1\.99\.0 is installed.*trl {re.escape(TRL_VERSION)}.*"
                                           rf"{ACCEPT_TRL_ENV}=1\.99\.0"):
        tiny_trainer(tmp_path / "refused")
    monkeypatch.setenv(ACCEPT_TRL_ENV, "1.98.0")  # accepting another version accepts only that one
    with pytest.raises(RuntimeError, match="1.99.0"):
        check_trl_version()
    monkeypatch.setenv(ACCEPT_TRL_ENV, "1.99.0")
    assert tiny_trainer(tmp_path / "accepted").temperature_cells


# ---- rollout --------------------------------------------------------------------------------------

def test_trls_loop_trains_on_our_rollout_built_from_trls(prepared):
    # _generate_and_score_completions: TRL's _prepare_inputs calls it once per generation
    # batch (our `rollout`), and TRL's own (`trl_rollout`) returns the tensors we read.
    assert parameters(GRPOTrainer._generate_and_score_completions) == ["self", "inputs"]
    rows, ours, theirs, micro_batch = prepared["rows"], prepared["rollout"], prepared["trl"], prepared["micro_batch"]
    assert len(rows) == 8
    batch, completion = theirs["completion_ids"].shape
    assert batch == 8 and theirs["completion_mask"].shape == (8, completion)
    assert theirs["prompt_ids"].shape == theirs["prompt_mask"].shape and theirs["prompt_ids"].shape[0] == 8
    assert theirs["advantages"].shape == (8,) and theirs["old_per_token_logps"].shape == (8, completion)
    # The micro-batch TRL hands the loss is rows of our output, with our advantages.
    assert len(micro_batch["advantages"]) == 4
    ours_rows = {(tuple(ids.tolist()), advantage.item()) for ids, advantage in zip(ours["completion_ids"],
                                                                                    ours["advantages"])}
    assert all((tuple(ids.tolist()), advantage.item()) in ours_rows
               for ids, advantage in zip(micro_batch["completion_ids"], micro_batch["advantages"]))


def test_trls_reward_call_is_our_score_and_the_scored_batch_comes_back_with_its_rollout(prepared):
    # _calculate_rewards: TRL's rollout calls it with the decoded process-local responses and
    # takes one reward column per reward function from it, gathered over processes; ours
    # scores them (`score`) and `trl_rollout` returns that scored batch beside TRL's output.
    assert parameters(GRPOTrainer._calculate_rewards) == [
        "self", "inputs", "prompts", "completions", "completion_ids_list"]
    scored, theirs = prepared["scored"], prepared["trl"]
    assert len(scored.verdicts) == len(scored.rewards) == 8
    for ids, row in zip(scored.completion_ids, theirs["completion_ids"], strict=True):  # TRL's rows, in its order
        assert ids and ids == row[:len(ids)].tolist()
    # TRL's advantages were computed from the handed-over rewards: group-centred, scaled per group.
    rewards = torch.tensor(scored.rewards).view(2, 4)
    centred = (rewards - rewards.nanmean(dim=1, keepdim=True)).flatten()
    assert torch.equal(torch.sign(theirs["advantages"]), torch.sign(torch.nan_to_num(centred)))


def test_the_methods_the_hooks_hand_over_to_are_declared_abstract():
    from microcoder.training.trainer import MicroCoderTrainer
    from microcoder.training.trl_hooks import TRLHooks

    declared = {"rollout", "score", "sample_rows", "completion_log_probs", "policy_loss", "save_own_state",
                "load_own_state"}
    assert TRLHooks.__abstractmethods__ == declared and not MicroCoderTrainer.__abstractmethods__
    assert declared <= set(re.findall(r"self\.(\w+)\(", inspect.getsource(TRLHooks)))  # each one a hook calls

    class WithoutScore(TRLHooks):  # pragma: no cover - never built
        rollout = sample_rows = completion_log_probs = policy_loss = save_own_state = load_own_state = None

    with pytest.raises(TypeError, match="abstract method.*score"):
        WithoutScore(model=None, reward_funcs=[], args=None, train_dataset=None, processing_class=None)


def test_trl_samples_each_chunk_through_the_swapped_generate(trainer, monkeypatch):
    # _generate_single_turn split into rollout_chunks calls of TRL's; inside each, TRL's HF
    # path calls the unwrapped model's `generate`, which shared_prefill has swapped.
    assert parameters(GRPOTrainer._generate_single_turn) == [
        "self", "prompt_ids", "images", "multimodal_fields", "num_generations", "has_tool_images"]
    calls = []
    real = generation.shared_prefill_generate

    def recording(inner, model, input_ids, attention_mask, **kwargs):
        calls.append(input_ids.shape[0])
        return real(inner, model, input_ids, attention_mask, **kwargs)

    monkeypatch.setattr(generation, "shared_prefill_generate", recording)
    prompt = trainer.processing_class("def add(a, b):", add_special_tokens=False)["input_ids"]
    completions, logprobs = trainer._generate_single_turn([prompt] * 4 + [prompt[:3]] * 4, None, {}, 4)
    assert calls == [4, 4]
    assert len(completions) == 8 and all(isinstance(token, int) for ids in completions for token in ids)
    assert logprobs is None  # HF generate gives none (vLLM's would be per token)
    assert "generate" not in trainer.accelerator.unwrap_model(trainer.model).__dict__  # the swap is undone


# ---- update -----------------------------------------------------------------------------------------

def test_trls_log_prob_pass_runs_ours_and_gets_its_numbers(trainer, monkeypatch):
    # _get_per_token_logps_and_entropies: every log-prob pass; ours runs the head on the
    # completion positions only, and must return what TRL's own pass returns.
    assert parameters(GRPOTrainer._get_per_token_logps_and_entropies)[:7] == [
        "self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size", "compute_entropy"]
    tokenizer = trainer.processing_class
    input_ids = tokenizer(["def add(a, b):\n    return a + b", "x = 1"], padding=True, padding_side="left",
                          return_tensors="pt")
    ids, mask, keep = input_ids["input_ids"], input_ids["attention_mask"], 4
    trainer.frozen_prefix.clear()
    calls = []
    completion_log_probs = trainer.completion_log_probs
    monkeypatch.setattr(trainer, "completion_log_probs",
                        lambda *args: calls.append(args) or completion_log_probs(*args))
    with torch.no_grad():
        ours = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep, compute_entropy=True)
        theirs = GRPOTrainer._get_per_token_logps_and_entropies(trainer, trainer.model, ids, mask, keep,
                                                                compute_entropy=True)
    assert len(calls) == 1  # ours answered, TRL's own pass ran once (for `theirs`)
    assert len(ours) == len(theirs) == 3 and ours[2] is None and theirs[2] is None
    assert ours[0].shape == ours[1].shape == (2, keep)
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours[1], theirs[1], rtol=1e-5, atol=1e-5)


def test_trls_compute_loss_is_our_policy_loss_scaled_for_accumulation(trainer, prepared):
    # _compute_loss: what TRL's compute_loss returns; transformers does not divide it by the
    # gradient accumulation steps because TRL says the loss already is.
    assert parameters(GRPOTrainer._compute_loss) == ["self", "model", "inputs"]
    assert GRPOTrainer.loss_is_scaled_for_ga is True
    inputs = prepared["micro_batch"]
    input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    trainer.current_gradient_accumulation_steps = 2
    trainer.update_stats.clear()
    with torch.no_grad():
        logp, entropies, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, input_ids, attention_mask, inputs["completion_ids"].size(1), compute_entropy=True)
        expected = trainer.policy_loss(inputs, logp, entropies) / 2
        loss = trainer.compute_loss(trainer.model, inputs)
    torch.testing.assert_close(loss, expected)
    assert loss.item() != 0.0
    assert trainer.update_stats["loss"] == [pytest.approx(2 * loss.item())] * 2  # ours ran, twice


def test_records_reach_trls_log(trainer):
    # _metrics["train"]: TRL averages it into its next log line (report_to backends).
    trainer.log_to_trl({"reward_mean": 0.25})
    trainer.log_to_trl({"reward_mean": 0.75})
    trainer.log({})
    assert trainer.state.log_history[-1]["microcoder/reward_mean"] == 0.5


def test_the_temperature_cell_is_the_fused_heads():
    # The fused head's temperature closure (tests/test_training_logprobs.py shows the log-probs follow it).
    model, _ = tiny_model_and_tokenizer(seed=0, layers=1)
    with pytest.raises(RuntimeError, match=f"trl=={re.escape(TRL_VERSION)}"):
        fused_head_temperature_cell(model)
    trl.trainer.utils.add_fused_lm_head(model, temperature=0.3)
    assert fused_head_temperature_cell(model).cell_contents == 0.3


# ---- checkpoints ------------------------------------------------------------------------------------

def test_our_state_is_saved_in_and_restored_from_trls_checkpoint_folder(trainer):
    # _save_checkpoint writes TRL's checkpoint-<global step> folder, which ours adds to;
    # _load_optimizer_and_scheduler is called with that folder on resume.
    assert parameters(GRPOTrainer._save_checkpoint) == ["self", "model", "trial"]
    assert parameters(GRPOTrainer._load_optimizer_and_scheduler) == ["self", "checkpoint"]
    trainer.create_optimizer_and_scheduler(num_training_steps=2)
    trainer.state.global_step = 2
    saved = trainer.mask_generator.get_state()
    try:
        trainer._save_checkpoint(trainer.model, None)
    finally:
        trainer.state.global_step = 0
    folder = trainer.run_dir / "checkpoints" / "checkpoint-2"
    assert (folder / "trainer_state.json").is_file() and (folder / "optimizer.pt").is_file()  # TRL's
    assert json.loads((folder / STATE_FILE).read_text())["rollout_step"] == 1  # ours
    torch.rand(5, generator=trainer.mask_generator)
    trainer._load_optimizer_and_scheduler(str(folder))
    assert torch.equal(trainer.mask_generator.get_state(), saved)


# ---- vLLM (behaviour: the vLLM environment) ---------------------------------------------------------

def test_the_vllm_names_we_override_are_trls():
    from trl.generation import vllm_generation
    from trl.trainer import grpo_trainer

    original = vllm_generation.VLLMGeneration
    assert grpo_trainer.VLLMGeneration is original  # the name GRPOTrainer builds its generator from
    for name in ("_init_vllm", "sync_weights", "_iter_named_params"):
        assert parameters(getattr(original, name)) == ["self"], name
    assert re.search(r"\bLLM\(", inspect.getsource(original._init_vllm))  # the engine start we add keywords to
    assert "_last_loaded_step" in inspect.getsource(GRPOTrainer._generate_single_turn)  # sync_vllm_weights
    with colocated_vllm(seed=0):
        swapped = grpo_trainer.VLLMGeneration
        assert issubclass(swapped, original) and swapped._init_vllm is not original._init_vllm
    assert grpo_trainer.VLLMGeneration is original

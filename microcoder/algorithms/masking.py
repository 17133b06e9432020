"""Conditional truncation masking, the core rule of MicroCoder-GRPO.

A response that hit the generation limit L_max is usually scored 0: either it
never finished its program, or it finished one that failed. Penalising the
first kind teaches the model to write short answers, which caps how long its
reasoning can grow. The paper therefore zeroes the advantage of a random
fraction rho of the truncated responses that were not judged wrong and are
not a degenerate repetition loop:

    keep_i = 1 - 1[ truncated_i and non_incorrect_i and not repetitive_i and u_i < rho ]
    A_i    = group_advantage_i * keep_i

The group mean and std are computed over all responses, masked ones included
(the formula masks after normalising). A masked response keeps its tokens in
the loss: its per-token loss is 0 (advantage 0) but its tokens still count in
the normaliser of "token-mean" aggregation. This differs from TRL's
`mask_truncated_completions`, which removes every truncated response's tokens
from the completion mask, and so from both the loss and its normaliser.

Three modes (`truncation_mask`), all through one function, `truncation_mask`:
- "none": no response is masked (GRPO, DAPO).
- "conditional": the rule above (MicroCoder-GRPO).
- "all": every truncated response is masked, the paper's "mask all" ablation, as
  TRL's `mask_truncated_completions` does it: the trainer also removes such a
  response's tokens from the loss and its normaliser.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import torch

# Verdicts meaning the program was run and judged wrong: the penalty stays.
WRONG_VERDICTS = frozenset(
    {
        "wrong_answer",
        "runtime_error",
        "time_limit_exceeded",
        "memory_limit_exceeded",
        "output_limit_exceeded",
        "syntax_error",
    }
)
# Verdicts meaning the evaluator did not judge the response wrong.
# "no_code": no complete program was extracted (for a truncated response, the
#   answer was cut off): "no answer", not a wrong answer, as the paper says.
NON_INCORRECT_VERDICTS = frozenset({"accepted", "no_code"})
# "judge_error": the evaluator itself failed (a broken problem or a sandbox fault,
#   not the model). The trainer gives it no reward at all (advantage 0, out of its
#   group's baseline), so there is no penalty for the mask to spare: it never
#   qualifies, and the masked fraction counts only masks that change something.
UNSCORABLE_VERDICTS = frozenset({"judge_error"})

DEFAULT_RHO = 0.3
"""The conditional mask's rho: the share of qualifying responses masked. The default of
TrainConfig.truncation_mask_rho and of verl's `algorithm.microcoder.rho`."""
PAPER_REPETITION_M = 128
"""The paper's repetition window m, in tokens, at 4K-token responses: verl's default
`repetition_m`. The TRL presets set their own (TrainConfig.repetition_m) for their shorter
responses."""


def non_incorrect(verdict: str) -> bool:
    """True when the evaluator judged the response and did not judge it wrong.

    "accepted" and "no_code" are non-incorrect; the verdicts in WRONG_VERDICTS
    are incorrect, and so (for the mask) is the unscorable "judge_error"; any
    other string is a ValueError, so that a new verdict cannot silently fall on
    either side.
    """
    if verdict in NON_INCORRECT_VERDICTS:
        return True
    if verdict in WRONG_VERDICTS or verdict in UNSCORABLE_VERDICTS:
        return False
    valid = sorted(NON_INCORRECT_VERDICTS | WRONG_VERDICTS | UNSCORABLE_VERDICTS)
    raise ValueError(f"unknown verdict {verdict!r}; valid verdicts: {', '.join(valid)}")


def is_truncated(token_ids: Sequence[int], limit: int, eos_token_ids: Collection[int]) -> bool:
    """True when a response reached the generation limit without ending: `limit` tokens or
    more and the last is not an end-of-sequence id (one that ends with EOS exactly at the
    limit is finished). An empty response is not truncated."""
    return len(token_ids) >= limit and len(token_ids) > 0 and token_ids[-1] not in eos_token_ids


def is_repetitive(token_ids: Sequence[int], m: int) -> bool:
    """True when the last m tokens equal the m tokens just before them.

    token_ids: one response, length n. A response shorter than 2m cannot
    repeat and gives False. m = 128 in the paper.
    """
    if m < 1:
        raise ValueError(f"m must be >= 1, got {m}")
    n = len(token_ids)
    if n < 2 * m:
        return False
    return list(token_ids[n - m :]) == list(token_ids[n - 2 * m : n - m])


TRUNCATION_MASK_MODES = ("none", "conditional", "all")


@dataclass(frozen=True)
class TruncationMask:
    """Result of `truncation_mask` (or `conditional_truncation_mask`) for a batch of B responses.

    keep: (B,) float, 1.0 keeps the response's advantage, 0.0 zeroes it.
    qualifying: (B,) bool, responses that met every condition except the draw.
    truncated_fraction: truncated responses / B.
    qualifying_fraction: qualifying responses / B.
    masked_fraction: masked responses (keep == 0) / B.
    """

    keep: torch.Tensor
    qualifying: torch.Tensor
    truncated_fraction: float
    qualifying_fraction: float
    masked_fraction: float


def _as_bool_vector(name: str, values: Sequence[bool] | torch.Tensor) -> torch.Tensor:
    tensor = torch.as_tensor(values, dtype=torch.bool)
    if tensor.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(tensor.shape)}")
    return tensor


def conditional_truncation_mask(
    truncated: Sequence[bool] | torch.Tensor,
    non_incorrect: Sequence[bool] | torch.Tensor,
    repetitive: Sequence[bool] | torch.Tensor,
    rho: float,
    generator: torch.Generator,
) -> TruncationMask:
    """Which responses keep their advantage under conditional truncation masking.

    Args:
        truncated: (B,) bool, the response reached L_max tokens.
        non_incorrect: (B,) bool, see `non_incorrect(verdict)`.
        repetitive: (B,) bool, see `is_repetitive(token_ids, m)`.
        rho: in [0, 1], the probability that a qualifying response is masked.
            0 masks nothing, 1 masks every qualifying response.
        generator: CPU torch.Generator for the U(0, 1) draws. One draw is made
            for every response, qualifying or not, so the random stream
            advances by B per call whatever the data: a seeded run replays.

    Returns:
        TruncationMask with keep (B,) float32 and the fractions for logging
        (all 0.0 for an empty batch).
    """
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"rho must be in [0, 1], got {rho}")
    truncated_t = _as_bool_vector("truncated", truncated)
    non_incorrect_t = _as_bool_vector("non_incorrect", non_incorrect)
    repetitive_t = _as_bool_vector("repetitive", repetitive)
    if not truncated_t.shape == non_incorrect_t.shape == repetitive_t.shape:
        raise ValueError(
            "truncated, non_incorrect and repetitive differ in length: "
            f"{truncated_t.numel()}, {non_incorrect_t.numel()}, {repetitive_t.numel()}"
        )

    batch = truncated_t.numel()
    uniform = torch.rand(batch, generator=generator)  # (B,), U[0, 1)
    qualifying = truncated_t & non_incorrect_t & ~repetitive_t
    masked = qualifying & (uniform < rho)
    keep = (~masked).to(torch.float32)

    def fraction(flags: torch.Tensor) -> float:
        return float(flags.sum()) / batch if batch else 0.0

    return TruncationMask(
        keep=keep,
        qualifying=qualifying,
        truncated_fraction=fraction(truncated_t),
        qualifying_fraction=fraction(qualifying),
        masked_fraction=fraction(masked),
    )


def truncation_mask(
    mode: str,
    truncated: Sequence[bool] | torch.Tensor,
    non_incorrect: Sequence[bool] | torch.Tensor,
    repetitive: Sequence[bool] | torch.Tensor,
    rho: float,
    generator: torch.Generator,
) -> TruncationMask:
    """The keep-mask of one of TRUNCATION_MASK_MODES; arguments as `conditional_truncation_mask`.

    "none" masks nothing and "all" every truncated response; both still report the
    qualifying fraction (what "conditional" at rho=1 would mask), so that runs of every
    mode log the same quantities. Every mode draws B uniforms from `generator`, so the
    random stream is the same whichever mode a run uses.
    """
    if mode not in TRUNCATION_MASK_MODES:
        raise ValueError(f"unknown truncation mask mode {mode!r}; valid: {', '.join(TRUNCATION_MASK_MODES)}")
    conditional = conditional_truncation_mask(truncated, non_incorrect, repetitive,
                                              rho if mode == "conditional" else 0.0, generator)
    if mode != "all":
        return conditional
    truncated_t = _as_bool_vector("truncated", truncated)
    return TruncationMask(
        keep=(~truncated_t).to(torch.float32),
        qualifying=conditional.qualifying,
        truncated_fraction=conditional.truncated_fraction,
        qualifying_fraction=conditional.qualifying_fraction,
        masked_fraction=conditional.truncated_fraction,
    )

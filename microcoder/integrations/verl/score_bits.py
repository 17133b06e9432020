"""How the truncation mask's facts reach a verl advantage estimator: in the reward's low bits.

Why a channel at all. verl 0.9.1's `compute_advantage` hands a registered estimator only
`token_level_rewards`, `response_mask`, `index` (the group uid), `config` (the
`algorithm` node) and, when present, `reward_baselines`; `non_tensor_batch` goes only to
the estimator named "gdpo". The v1 trainer (the default) also builds that batch from a
fixed list of fields (uid, response_mask, rm_scores, log-probs, values), so the dict a
reward function returns (`reward_extra_info`) never reaches an estimator, whichever
trainer runs. And each response's row of `token_level_rewards` is built by verl's agent
loop from one float, the reward, placed at the last response token. That float is the
only per-response value of ours an estimator receives.

So the reward side (`MicroCoderRewardManager`, which sees the response tokens, and
`compute_score`, which sees the verdict) decides per response whether it qualifies for
the conditional truncation mask (truncated, non-incorrect, not a loop) and whether it is
unscorable (a judge_error), and writes both, plus a marker, into the three lowest
mantissa bits of the reward as a float32:

    bit 2: marker, always 1 (a reward without it was not written by this module)
    bit 1: unscorable (judge_error: out of the group's baseline, advantage 0)
    bit 0: qualifying (may be masked with probability rho)

The estimator reads the bits back and clears them to recover the reward. For the
rewards MicroCoder-GRPO uses (0 and 1, whose low bits are already 0) the recovered
reward is exact, so the advantages equal our TRL trainer's. A reward with low bits set
(a shaped reward) loses them: it moves by at most 7 units in the last place (7 * 2^-23
of its magnitude). verl's own reward metrics (critic/score, val reward means) read the
coded float: 1 reads as 1.0000005 at most, 0 as a value below 1e-44. The plain reward
and the facts are also in reward_extra_info ("score", "acc", "verdict", "truncated",
"qualifying", ...), exact, for logs, dumps and DAPO's filter_groups metric (use "acc").

The bits survive what verl does with the reward on the way (python float -> float32
rm_scores -> TransferQueue -> padded tensor -> sum over the row of zeros and the reward;
all exact on CPU, where the driver computes advantages). They do not survive a KL
penalty in the reward (`algorithm.use_kl_in_reward`), which the estimator refuses.
"""

from __future__ import annotations

import math

import torch

MARKER_BIT = 0b100
UNSCORABLE_BIT = 0b010
QUALIFYING_BIT = 0b001
_LOW_BITS = 0b111


def encode_score(reward: float, qualifying: bool, unscorable: bool = False) -> float:
    """`reward` as a float32 whose three lowest mantissa bits carry the flags.

    The result is a Python float that a float32 holds exactly, so verl's cast of the
    reward into its float32 rm_scores keeps every bit. A non-finite reward is refused.
    """
    if not math.isfinite(reward):
        raise ValueError(f"reward must be finite, got {reward!r} (an unscorable response has reward 0 and unscorable=True)")
    bits = torch.tensor([reward], dtype=torch.float32).view(torch.int32)
    flags = MARKER_BIT | (UNSCORABLE_BIT if unscorable else 0) | (QUALIFYING_BIT if qualifying else 0)
    bits = (bits & ~_LOW_BITS) | flags
    return float(bits.view(torch.float32)[0])


def decode_scores(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rewards, qualifying, unscorable) from coded float32 scores.

    Args:
        scores: (B,) float32, each the sum of a response's row of token_level_rewards.

    Returns:
        rewards (B,) float32 with the flag bits cleared, NaN where unscorable (as
        `group_advantages` expects); qualifying (B,) bool; unscorable (B,) bool.

    Raises ValueError when a score lacks the marker bit: it was not written by
    `encode_score` (verl's own reward manager, or something changed the reward after us).
    """
    if scores.dtype != torch.float32:
        raise ValueError(f"scores must be float32 (verl's rm_scores), got {scores.dtype}")
    bits = scores.contiguous().view(torch.int32)
    unmarked = (bits & MARKER_BIT) == 0
    if bool(unmarked.any()):
        rows = torch.nonzero(unmarked).squeeze(-1).tolist()[:5]
        raise ValueError(
            f"{int(unmarked.sum())} rewards (rows {rows}...) do not carry the truncation mask's facts: "
            "set reward.reward_manager to microcoder's MicroCoderRewardManager (source: importlib, "
            "module.path: pkg://microcoder.integrations.verl.reward_manager) and keep "
            "algorithm.use_kl_in_reward false; see microcoder/integrations/verl/score_bits.py")
    qualifying = (bits & QUALIFYING_BIT) != 0
    unscorable = (bits & UNSCORABLE_BIT) != 0
    rewards = (bits & ~_LOW_BITS).view(torch.float32).clone()
    rewards[unscorable] = math.nan
    return rewards, qualifying, unscorable

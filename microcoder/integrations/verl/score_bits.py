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
the conditional truncation mask (truncated, non-incorrect, not a loop), whether it is
unscorable (a judge_error) and whether its agent-loop session returned several outputs,
and writes them, plus a marker, into the four lowest mantissa bits of the reward as a
float32:

    bit 3: several outputs (the session's reward, which verl copies to every output of it;
           the microcoder_grpo estimator refuses it, see advantage.py)
    bit 2: marker, always 1 (a reward without it was not written by this module)
    bit 1: unscorable (judge_error: out of the group's baseline, advantage 0)
    bit 0: qualifying (may be masked with probability rho)

The estimator reads the bits back and clears them to recover the reward. For the
rewards MicroCoder-GRPO uses (0 and 1, whose low bits are already 0) the recovered
reward is exact, so the advantages equal our TRL trainer's. A reward with low bits set
(a shaped reward) loses them: it moves by at most 15 units in the last place (15 * 2^-23
of its magnitude). verl's own reward metrics (critic/score, val reward means) read the
coded float: 1 reads as at most 1 + 5 * 2^-23 (about 1.0000006; marker and qualifying
set), 0 as a float32 denormal of at most 15 * 2^-149 (about 2e-44). The plain reward and the facts are
also in reward_extra_info ("score", "acc", "verdict", "truncated", "qualifying", ...),
exact, for logs, dumps and DAPO's filter_groups metric (use "acc"; "reward" reads the
coded floats, whose flags make equal rewards unequal, and is refused).

The bits survive what verl does with the reward on the way (python float -> float32
rm_scores -> TransferQueue -> padded tensor; the estimator reads the coded value itself,
never a sum of it with anything). They do not survive a KL penalty in the reward
(`algorithm.use_kl_in_reward`), which the estimator refuses, nor a cast to bfloat16 or
float16, which it refuses too. Nor flush-to-zero: with FTZ/DAZ on in the process that
converts the reward to float32 (torch.set_flush_denormal(True), a library built with
-ffast-math), a coded 0, a denormal, is stored as 0; the estimator's error for a reward
of exactly 0 says so, and the preflight checks for it in a Ray worker.
"""

from __future__ import annotations

import math

import torch

SEVERAL_OUTPUTS_BIT = 0b1000
MARKER_BIT = 0b0100
UNSCORABLE_BIT = 0b0010
QUALIFYING_BIT = 0b0001
_LOW_BITS = 0b1111


def encode_score(reward: float, qualifying: bool, unscorable: bool = False, several_outputs: bool = False) -> float:
    """`reward` as a float32 whose four lowest mantissa bits carry the flags.

    The result is a Python float that a float32 holds exactly, so verl's cast of the
    reward into its float32 rm_scores keeps every bit. A non-finite reward is refused.
    """
    if not math.isfinite(reward):
        raise ValueError(f"reward must be finite, got {reward!r} (an unscorable response has reward 0 and unscorable=True)")
    bits = torch.tensor([reward], dtype=torch.float32).view(torch.int32)
    flags = (MARKER_BIT | (UNSCORABLE_BIT if unscorable else 0) | (QUALIFYING_BIT if qualifying else 0)
             | (SEVERAL_OUTPUTS_BIT if several_outputs else 0))
    bits = (bits & ~_LOW_BITS) | flags
    return float(bits.view(torch.float32)[0])


def decode_scores(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rewards, qualifying, unscorable, several_outputs) from coded float32 scores.

    Args:
        scores: (B,) float32, each a response's coded reward as verl stored it.

    Returns:
        rewards (B,) float32 with the flag bits cleared, NaN where unscorable (as
        `group_advantages` expects); qualifying, unscorable, several_outputs: (B,) bool.

    Raises ValueError when a score lacks the marker bit: it was not written by
    `encode_score` (verl's own reward manager, or something changed the reward after us),
    or, for a score of exactly 0, flush-to-zero erased a coded 0 (the message says which).
    """
    if scores.dtype != torch.float32:
        raise ValueError(f"scores must be float32 (verl's rm_scores), got {scores.dtype}")
    bits = scores.contiguous().view(torch.int32)
    unmarked = (bits & MARKER_BIT) == 0
    if bool(unmarked.any()):
        rows = torch.nonzero(unmarked).squeeze(-1).tolist()[:5]
        zeros = int((bits[unmarked] == 0).sum())
        flushed = (
            f" {zeros} of them are exactly 0: a coded reward is never 0 (a coded 0 is a denormal, about 6e-45), so "
            "either these come from another reward manager, or flush-to-zero (FTZ/DAZ: "
            "torch.set_flush_denormal(True), a library built with -ffast-math) is on in a process on the "
            "reward's path and stored the coded 0 as 0 (`python -m microcoder.integrations.verl.preflight "
            "CONFIG` checks for it)." if zeros else "")
        raise ValueError(
            f"{int(unmarked.sum())} rewards (rows {rows}...) do not carry the truncation mask's facts: "
            "set reward.reward_manager to microcoder's MicroCoderRewardManager (source: importlib, "
            "module.path: pkg://microcoder.integrations.verl.reward_manager) and keep "
            "algorithm.use_kl_in_reward false; see microcoder/integrations/verl/score_bits.py." + flushed)
    qualifying = (bits & QUALIFYING_BIT) != 0
    unscorable = (bits & UNSCORABLE_BIT) != 0
    several_outputs = (bits & SEVERAL_OUTPUTS_BIT) != 0
    rewards = (bits & ~_LOW_BITS).view(torch.float32).clone()
    rewards[unscorable] = math.nan
    return rewards, qualifying, unscorable, several_outputs

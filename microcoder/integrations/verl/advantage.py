"""MicroCoder-GRPO's advantage as a verl advantage estimator (`algorithm.adv_estimator=microcoder_grpo`).

    A_i = group_advantage_i(r) * keep_i
    keep_i = 0 when response i qualifies (truncated, non-incorrect, not a loop) and u_i < rho

`microcoder_grpo_advantages` is the math, on plain tensors, calling the same pure functions
our TRL trainer calls (`group_advantages`, `conditional_truncation_mask`);
`compute_microcoder_grpo_advantage` is the estimator verl calls, with verl's signature;
`register()` puts it in verl's registry (the `verl.plugins` entry point does that in every
process that imports verl).

What verl hands the estimator, and where the facts come from: `compute_advantage` passes
token_level_rewards (B, L), response_mask (B, L), index (B,) (the prompt's uid) and config
(the `algorithm` node). Each row of token_level_rewards holds one float, the coded reward,
at the response's last token (zeros elsewhere); whether the response qualifies, and
whether it is unscorable, travel in its low bits (`score_bits`). `coded_rewards` reads that
float where it lies, bit for bit.

Rows that are not responses: verl's v1 trainer pads a batch that is not a multiple of
lcm(data-parallel size, ppo_mini_batch_size x n) with synthetic rows
(`upsample_batch_to_divisible_size`: response_mask all 0, rm_scores all 0, a uid "pad...").
They carry no reward of ours. A row whose response_mask is all 0 gets advantage 0, is not
decoded, is in no group and draws no mask number; verl's loss ignores it anyway.

Sessions of several outputs: an agent loop may return several outputs per session (one
per turn). verl 0.9.1's v1 trainer keeps only each session's last output for its own
`grpo` estimator and broadcasts the result; every other estimator, this one included, gets
every output as a row of its own (`compute_advantage_for_multi_trajectories`), and verl
copies the session's one reward onto each. Each output would then count as one more
response of its group (in the mean, the std and the mask's draws), and the estimator
cannot tell a session's outputs apart from separate responses (it sees no session id).
So `MicroCoderRewardManager` marks a session of several outputs in the reward's bits and
the estimator refuses it. verl's single_turn_agent (the default) and tool_agent return one
output per session.

Settings, under `algorithm.microcoder` (all optional):
    rho   (0.3)   probability that a qualifying response is masked (algorithms.masking.DEFAULT_RHO,
                  the TRL trainer's default too)
    seed  (0)     seed of the mask's random draws (see below)
    eps   (1e-6)  added to the group std (verl's GRPO and our trainer use 1e-6)
and verl's own `algorithm.norm_adv_by_std_in_grpo` (true: divide by the group std; false:
Dr. GRPO, no scaling).

Groups: responses sharing a uid, wherever they sit in the batch (verl's balance_batch
reorders rows); groups may differ in size. Each group's advantages are
`group_advantages` of its rewards: unbiased std, unscorable (NaN) rewards out of the mean
and std with advantage 0, and a group of one response gets 0. verl's own GRPO gives a
lone response its raw reward (mean 0, std 1 for a group of one); ours follows our trainer.

The mask's random draws: one U(0,1) per response, in batch row order (padding rows draw
none), from a `torch.Generator` seeded with `seed` that lives in the process that computes
advantages (verl's driver) and advances by the number of responses every call, as the TRL
trainer's `mask_generator` does.
So with the same seed, the same rows in the same order and the same number of earlier
calls, both mask the same responses; the tests rely on it. verl does not checkpoint this
generator: a resumed run restarts the stream at `seed` (our TRL trainer saves and restores
its own).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from microcoder.algorithms import conditional_truncation_mask, group_advantages
from microcoder.algorithms.masking import DEFAULT_RHO, TruncationMask
from microcoder.integrations.verl.score_bits import decode_scores

ESTIMATOR_NAME = "microcoder_grpo"
DEFAULT_SEED = 0
DEFAULT_EPS = 1e-6

_mask_generators: dict[int, torch.Generator] = {}


def mask_generator(seed: int) -> torch.Generator:
    """This process's generator for the mask's draws under `seed`, created on first use."""
    if seed not in _mask_generators:
        _mask_generators[seed] = torch.Generator().manual_seed(seed)
    return _mask_generators[seed]


def reset_mask_generators() -> None:
    """Forget every mask generator: the next call under a seed starts its stream afresh."""
    _mask_generators.clear()


def microcoder_grpo_advantages(
    rewards: torch.Tensor,
    qualifying: torch.Tensor,
    group_ids: Sequence[Any],
    rho: float,
    generator: torch.Generator,
    mode: str = "group_std",
    eps: float = DEFAULT_EPS,
) -> tuple[torch.Tensor, TruncationMask]:
    """Group advantages times the conditional truncation mask's keep, for groups in any order.

    Args:
        rewards: (B,) float, NaN for an unscorable response.
        qualifying: (B,) bool, truncated and non-incorrect and not repetitive.
        group_ids: B hashable labels; rows with the same label form a group.
        rho: probability that a qualifying response is masked.
        generator: CPU generator for the B uniform draws (one per row, row order).
        mode, eps: as `group_advantages`.

    Returns:
        (advantages (B,) float, never NaN; the TruncationMask). The mask's
        truncated_fraction is the qualifying fraction here: the reward side has already
        combined truncation with the other two conditions.
    """
    if rewards.dim() != 1 or qualifying.shape != rewards.shape or len(group_ids) != rewards.numel():
        raise ValueError(f"rewards {tuple(rewards.shape)}, qualifying {tuple(qualifying.shape)} and "
                         f"{len(group_ids)} group ids must all describe the same B responses")
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.float32)
    rows_of: dict[Any, list[int]] = {}
    for row, group in enumerate(group_ids):
        rows_of.setdefault(group, []).append(row)
    advantages = torch.zeros_like(rewards)
    for rows in rows_of.values():
        rows_t = torch.tensor(rows)
        advantages[rows_t] = group_advantages(rewards[rows_t], len(rows), mode, eps)
    flags = qualifying.to(torch.bool)
    mask = conditional_truncation_mask(flags, torch.ones_like(flags), torch.zeros_like(flags), rho, generator)
    return advantages * mask.keep.to(advantages.dtype), mask


def _get(node: Any, key: str, default: Any) -> Any:
    """node[key] for a DictConfig, a dict or a dataclass (verl's AlgoConfig); default when absent or None."""
    if node is None:
        return default
    value = node.get(key, default) if hasattr(node, "get") else getattr(node, key, default)
    return default if value is None else value


def refused_algorithm_settings(config: Any) -> list[str]:
    """What in verl's `algorithm` config would silently corrupt this estimator's input, one
    message per setting, each naming its key (empty: none). verl 0.9.1 applies all three
    before the estimator runs:

    - use_kl_in_reward: the KL penalty is added to the reward and erases the coded facts.
    - filter_groups with metric "reward": verl drops a group when the std of the rewards it
      stores (the coded floats) is exactly 0. The coded flags make equal rewards unequal
      (a coded 0 is a denormal whose low bits differ by response), so groups without signal
      are kept. "acc" or "score" (reward_extra_info, plain) filter as intended.
    - rollout_correction.rollout_rs outside bypass mode: rejection sampling zeroes a
      rejected response's response_mask before the advantages, so it looks like padding
      and leaves its group's mean and std (verl's grpo keeps it). In bypass mode the
      rejection happens in the actor's loss, after the advantages, and is accepted.
    """
    problems = []
    if _get(config, "use_kl_in_reward", False):
        problems.append(f"{ESTIMATOR_NAME} needs algorithm.use_kl_in_reward=false: the KL penalty is added to "
                        "the reward and erases the truncation mask's facts (MicroCoder-GRPO uses no KL at all)")
    filter_groups = _get(config, "filter_groups", None)
    if _get(filter_groups, "enable", False) and _get(filter_groups, "metric", None) == "reward":
        problems.append(
            "algorithm.filter_groups.metric=reward is refused with MicroCoderRewardManager: verl filters a group when "
            "the std of its stored rewards is exactly 0, and the reward carries the truncation mask's facts in its "
            "low bits, so equal rewards differ and groups without signal are kept. Use "
            "algorithm.filter_groups.metric=acc (the plain 0/1 score in reward_extra_info)")
    correction = _get(config, "rollout_correction", None)
    if _get(correction, "rollout_rs", None) and not _get(correction, "bypass_mode", False):
        problems.append(
            f"algorithm.rollout_correction.rollout_rs={_get(correction, 'rollout_rs', None)} is refused with "
            f"{ESTIMATOR_NAME} (unless algorithm.rollout_correction.bypass_mode=true): verl's rejection sampling "
            "zeroes a rejected response's response_mask before the advantages are computed, so the estimator takes "
            "it for padding and leaves it out of its group's mean and std. Set rollout_rs=null, or bypass_mode=true "
            "(rejection in the actor's loss, after the advantages)")
    return problems


def settings_from_config(config: Any) -> dict[str, Any]:
    """rho, seed, eps and the advantage mode from verl's `algorithm` config (a DictConfig,
    an AlgoConfig or None); refuses what `refused_algorithm_settings` names."""
    problems = refused_algorithm_settings(config)
    if problems:
        raise ValueError(problems[0])
    ours = _get(config, "microcoder", None)
    settings = {
        "rho": float(_get(ours, "rho", DEFAULT_RHO)),
        "seed": int(_get(ours, "seed", DEFAULT_SEED)),
        "eps": float(_get(ours, "eps", DEFAULT_EPS)),
        "mode": "group_std" if _get(config, "norm_adv_by_std_in_grpo", True) else "none",
    }
    if not 0.0 <= settings["rho"] <= 1.0:
        raise ValueError(f"algorithm.microcoder.rho must be in [0, 1], got {settings['rho']}")
    return settings


def coded_rewards(token_level_rewards: torch.Tensor) -> torch.Tensor:
    """Each row's coded reward, read where verl put it, bit for bit.

    Args:
        token_level_rewards: (B, L) float32, zeros but for one reward per row at the
            response's last token (verl's rm_scores, right-padded with zeros).

    Returns:
        (B,) float32 on the CPU: the row's entry whose bits are not all zero (a row of zeros
        reads as 0.0, which carries no marker). Read through an integer view, never
        summed: arithmetic that flushes denormals to zero would erase a coded 0 reward.

    Raises ValueError for a dtype other than float32 (bfloat16 and float16 have no room for
    the bits) and for a row with more than one nonzero entry (a per-token reward was added).
    """
    if token_level_rewards.dtype != torch.float32:
        raise ValueError(f"{ESTIMATOR_NAME} needs token_level_rewards in float32 (verl's rm_scores are), got "
                         f"{token_level_rewards.dtype}: the truncation mask's facts live in float32's lowest "
                         "mantissa bits, which a cast to a smaller type has rounded away")
    bits = token_level_rewards.detach().to("cpu").contiguous().view(torch.int32)  # (B, L)
    nonzero = bits != 0
    per_row = nonzero.sum(dim=-1)
    if bool((per_row > 1).any()):
        rows = torch.nonzero(per_row > 1).squeeze(-1).tolist()[:5]
        raise ValueError(f"rows {rows}... of token_level_rewards hold more than one nonzero entry: verl's agent loop "
                         "writes one reward per response, so something added per-token rewards (a KL penalty?), "
                         "which erases the truncation mask's facts")
    # At most one nonzero entry per row: the integer sum is that entry, bit for bit.
    return bits.sum(dim=-1).to(torch.int32).view(torch.float32)


def compute_microcoder_grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    config: Any = None,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's estimator interface: (advantages, returns), both (B, L), equal, zero off the response.

    Args:
        token_level_rewards: (B, L) float32; each row holds the coded reward at its last token.
        response_mask: (B, L), 1 on response tokens; a row of zeros is verl's padding.
        index: (B,) group uids (a numpy object array in verl).
        config: verl's `algorithm` config; see the module docstring.
    Other arguments verl may pass (reward_baselines, ...) are ignored.
    """
    settings = settings_from_config(config)
    with torch.no_grad():
        scores = coded_rewards(token_level_rewards)  # (B,)
        responses = torch.nonzero(response_mask.detach().to("cpu").sum(dim=-1) > 0).squeeze(-1)  # (R,) not padding
        advantages = torch.zeros(scores.shape[0], dtype=torch.float32)
        if responses.numel() > 0:
            rewards, qualifying, _, several_outputs = decode_scores(scores[responses])
            if bool(several_outputs.any()):
                raise ValueError(
                    f"{int(several_outputs.sum())} rows come from agent-loop sessions that returned several outputs: "
                    "verl hands this estimator each output as a response of its own, so a session would count "
                    f"once per output in its group. {ESTIMATOR_NAME} needs one output per session (verl's "
                    "single_turn_agent or tool_agent); see microcoder/integrations/verl/advantage.py")
            groups = [index[row] for row in responses.tolist()]
            response_advantages, _ = microcoder_grpo_advantages(
                rewards, qualifying, groups, settings["rho"], mask_generator(settings["seed"]),
                settings["mode"], settings["eps"])
            advantages[responses] = response_advantages
        per_token = advantages.to(token_level_rewards.device).unsqueeze(-1) * response_mask  # (B, L)
    return per_token, per_token


def register() -> None:
    """Register the estimator in verl's registry under ESTIMATOR_NAME (idempotent)."""
    from verl.trainer.ppo.core_algos import register_adv_est

    register_adv_est(ESTIMATOR_NAME)(compute_microcoder_grpo_advantage)

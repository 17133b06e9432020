"""DAPO's overlong reward shaping and dynamic-sampling group filter (Yu et al.
2025, arXiv 2503.14476), for the DAPO baseline.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def overlong_penalty(
    lengths: torch.Tensor,
    max_length: int,
    cache_length: int,
    penalty_factor: float = 1.0,
) -> torch.Tensor:
    """Soft overlong punishment, added to the task reward.

    With L_max = max_length, L_cache = cache_length, |y| = length:

        0                                     if |y| <= L_max - L_cache
        ((L_max - L_cache) - |y|) / L_cache   if L_max - L_cache < |y| <= L_max
        -1                                    if |y| > L_max

    times `penalty_factor`. This is the DAPO paper's formula; verl's reward
    manager computes min(-(|y| - (L_max - L_cache)) / L_cache * factor, 0),
    which is the same on |y| <= L_max (the only lengths verl can generate)
    and here is held at -1 * factor beyond L_max. The penalty is linear and
    continuous: -1 exactly at |y| = L_max. In DAPO, L_max = 20480 and
    L_cache = 4096 (a 16384-token expected length plus a 4096-token buffer).

    Args:
        lengths: (B,) response lengths in tokens (any integer or float dtype).
        max_length: L_max, the generation limit.
        cache_length: L_cache, the punishment interval, 0 < L_cache <= L_max.
        penalty_factor: scale of the penalty (1.0 in the paper).

    Returns: (B,) float32 penalties in [-penalty_factor, 0].
    """
    if not 0 < cache_length <= max_length:
        raise ValueError(f"need 0 < cache_length <= max_length, got {cache_length}, {max_length}")
    expected_length = max_length - cache_length
    lengths = lengths.to(torch.float32)
    penalty = (expected_length - lengths) / cache_length  # > 0 below the interval, -1 at L_max
    return torch.clamp(penalty, -1.0, 0.0) * penalty_factor


@dataclass(frozen=True)
class GroupFilter:
    """Result of `dynamic_sampling_filter`.

    group_keep: (num_groups,) bool, True for groups whose rewards differ.
    response_indices: (num_kept_groups * G,) long, the flat indices of the
        responses in kept groups, in order; index the batch with it.
    """

    group_keep: torch.Tensor
    response_indices: torch.Tensor


def dynamic_sampling_filter(rewards: torch.Tensor, group_size: int | None = None) -> GroupFilter:
    """Keep the groups whose rewards are not all equal.

    A group of all-correct or all-wrong responses has advantage 0 for every
    response under GRPO normalisation, so it adds no gradient, only dilutes
    the batch. DAPO drops such groups and samples more prompts until the batch
    is full (the resampling loop belongs to the trainer, not here).

    Pass the correctness reward (0/1 accuracy), not the overlong-shaped reward:
    shaped rewards differ by length even when every answer is wrong. verl's
    DAPO recipe filters on the "acc" metric for the same reason. Equality is
    exact, which is right for 0/1 rewards. NaN rewards (unscorable responses) are
    ignored: a group is kept when at least two of its scorable rewards differ.

    Args:
        rewards: (num_groups * G,) with groups contiguous, or (num_groups, G).
        group_size: G; required for 1-D rewards.

    Returns: GroupFilter.
    """
    if rewards.dim() == 1:
        if group_size is None or group_size < 1 or rewards.numel() % group_size != 0:
            raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
        grouped = rewards.view(-1, group_size)
    elif rewards.dim() == 2:
        if group_size is not None and group_size != rewards.shape[1]:
            raise ValueError(f"group_size={group_size} but rewards has shape {tuple(rewards.shape)}")
        grouped = rewards
    else:
        raise ValueError(f"rewards must be 1-D or 2-D, got shape {tuple(rewards.shape)}")

    # NaN (an unscorable response) counts for neither side: a group is mixed when its
    # scorable rewards differ, so a group with fewer than two scorable responses is dropped.
    valid = ~torch.isnan(grouped)
    highest = torch.where(valid, grouped, -torch.inf).amax(dim=1)
    lowest = torch.where(valid, grouped, torch.inf).amin(dim=1)
    group_keep = (valid.sum(dim=1) >= 2) & (highest != lowest)  # (num_groups,)
    size = grouped.shape[1]
    kept_groups = torch.nonzero(group_keep).squeeze(-1)  # (num_kept,)
    response_indices = (kept_groups.unsqueeze(-1) * size + torch.arange(size)).reshape(-1)
    return GroupFilter(group_keep=group_keep, response_indices=response_indices)

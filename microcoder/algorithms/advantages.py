"""Group-relative advantages for outcome rewards (one scalar reward per response).

A prompt is sampled G times; the G responses form a group and are laid out
contiguously: responses [g*G, (g+1)*G) belong to prompt g. The advantage of a
response is its reward minus its group's mean reward, optionally divided by a
standard deviation.

Which standard deviation: the unbiased one (Bessel's correction, divide by
G - 1), as `torch.std` computes by default. Both TRL (`GRPOTrainer`) and verl
(`compute_grpo_outcome_advantage`) use it, and the paper trains on verl, so
our numbers match theirs. For a binary reward with c of G correct the
unbiased std is sqrt(c * (G - c) / (G * (G - 1))).

A group of one response has advantage 0 in every mode: its mean is itself,
and its (undefined) std is taken as 0 instead of NaN.
"""

from __future__ import annotations

import torch

ADVANTAGE_MODES = ("group_std", "batch_std", "none")


def group_advantages(
    rewards: torch.Tensor,
    group_size: int | None = None,
    mode: str = "group_std",
    eps: float = 1e-6,
) -> torch.Tensor:
    """Advantage of every response relative to the other responses to its prompt.

    Args:
        rewards: (num_groups * group_size,) with groups contiguous, or
            (num_groups, group_size).
        group_size: G; required for 1-D `rewards`, checked against the second
            dimension for 2-D `rewards`.
        mode: how the centred reward r - mean_g is scaled.
            "group_std": divide by (std_g + eps), std_g the unbiased std of the
                group (GRPO; what MicroCoder-GRPO uses).
            "batch_std": divide by (std_batch + eps), std_batch the unbiased std
                of all rewards in the batch (TRL's scale_rewards="batch", the
                REINFORCE++-style global scale).
            "none": no scaling (Dr. GRPO).
        eps: added to the std so that a group whose rewards are all equal gets
            advantage 0 instead of 0/0. 1e-6 as in verl (TRL uses 1e-4).

    Returns:
        Advantages, float, same shape as `rewards`. Integer or bool rewards
        are computed in float32; floating rewards keep their dtype.
    """
    if mode not in ADVANTAGE_MODES:
        raise ValueError(f"unknown advantage mode {mode!r}; valid modes: {', '.join(ADVANTAGE_MODES)}")
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.float32)

    if rewards.dim() == 2:
        if group_size is not None and group_size != rewards.shape[1]:
            raise ValueError(f"group_size={group_size} but rewards has shape {tuple(rewards.shape)}")
        grouped = rewards
    elif rewards.dim() == 1:
        if group_size is None:
            raise ValueError("group_size is required when rewards is 1-D")
        if group_size < 1 or rewards.numel() % group_size != 0:
            raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
        grouped = rewards.view(-1, group_size)
    else:
        raise ValueError(f"rewards must be 1-D or 2-D, got shape {tuple(rewards.shape)}")

    num_in_group = grouped.shape[1]
    centred = grouped - grouped.mean(dim=1, keepdim=True)  # (num_groups, G)

    if mode == "group_std":
        if num_in_group > 1:
            std = grouped.std(dim=1, keepdim=True)  # unbiased, (num_groups, 1)
        else:
            std = torch.zeros_like(centred[:, :1])
        advantages = centred / (std + eps)
    elif mode == "batch_std":
        std = grouped.std() if grouped.numel() > 1 else torch.zeros((), dtype=grouped.dtype)
        advantages = centred / (std + eps)
    else:  # "none"
        advantages = centred

    return advantages.reshape(rewards.shape)

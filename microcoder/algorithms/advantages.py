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

A NaN reward marks an unscorable response (the judge failed: a broken problem
or a sandbox fault, never the model's doing). It is left out of its group's
mean and std, as if the group were one response smaller, and its own advantage
is 0, so it neither moves the policy nor shifts the other responses' baseline.
TRL treats a reward function's None the same way.
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

    NaN rewards (unscorable responses) are left out of the mean and the std and get
    advantage 0 (see the module docstring).

    Returns:
        Advantages, float, same shape as `rewards`, never NaN. Integer or bool rewards
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

    valid = ~torch.isnan(grouped)  # (num_groups, G), False for unscorable responses
    count = valid.sum(dim=1, keepdim=True)  # (num_groups, 1)
    mean = torch.where(valid, grouped, 0.0).sum(dim=1, keepdim=True) / count.clamp(min=1)
    centred = torch.where(valid, grouped - mean, 0.0)  # (num_groups, G), 0 where unscorable

    if mode == "group_std":
        # Unbiased std over the scorable responses; 0 for a group with fewer than two.
        variance = (centred**2).sum(dim=1, keepdim=True) / (count - 1).clamp(min=1)
        std = torch.where(count > 1, variance.sqrt(), 0.0)  # (num_groups, 1)
        advantages = centred / (std + eps)
    elif mode == "batch_std":
        scorable = grouped[valid]
        std = scorable.std() if scorable.numel() > 1 else torch.zeros((), dtype=grouped.dtype)
        advantages = centred / (std + eps)
    else:  # "none"
        advantages = centred

    return advantages.reshape(rewards.shape)

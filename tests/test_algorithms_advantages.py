"""Group advantages: hand-derived values and a plain-loop second implementation."""

import math
import os
import random
import statistics

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch

from microcoder.algorithms.advantages import group_advantages

torch.set_num_threads(1)


def test_group_std_one_of_four_correct():
    # r = [1, 0, 0, 0]: mean = 0.25, centred = [0.75, -0.25, -0.25, -0.25].
    # Unbiased variance = (0.75^2 + 3 * 0.25^2) / (4 - 1) = (0.5625 + 0.1875) / 3 = 0.25, std = 0.5.
    # A = centred / 0.5 = [1.5, -0.5, -0.5, -0.5].
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    advantages = group_advantages(rewards, group_size=4, mode="group_std", eps=0.0)
    torch.testing.assert_close(advantages, torch.tensor([1.5, -0.5, -0.5, -0.5]))


def test_group_std_two_of_four_correct_is_sqrt3_over_2():
    # r = [1, 1, 0, 0]: mean 0.5, centred +-0.5; unbiased var = 4 * 0.25 / 3 = 1/3, std = 1/sqrt(3).
    # A = +-0.5 * sqrt(3) = +-0.8660254.
    rewards = torch.tensor([[1.0, 1.0, 0.0, 0.0]])
    advantages = group_advantages(rewards, mode="group_std", eps=0.0)
    half_sqrt3 = math.sqrt(3) / 2
    torch.testing.assert_close(advantages, torch.tensor([[half_sqrt3, half_sqrt3, -half_sqrt3, -half_sqrt3]]))


def test_group_std_eps_default_is_barely_visible():
    # Same group as above with eps = 1e-6: A = 0.75 / (0.5 + 1e-6) = 1.499997.
    advantages = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), group_size=4)
    assert advantages[0].item() == pytest.approx(0.75 / 0.500001, rel=1e-6)


def test_equal_rewards_give_zero_advantage_not_nan():
    # r = [1, 1, 1, 1]: centred all 0, std 0, A = 0 / (0 + eps) = 0 in every mode.
    rewards = torch.ones(4)
    for mode in ("group_std", "batch_std", "none"):
        advantages = group_advantages(rewards, group_size=4, mode=mode)
        assert torch.equal(advantages, torch.zeros(4)), mode


def test_batch_std_uses_std_of_all_rewards():
    # Groups [1, 0] and [1, 1]. Batch of 4 rewards: mean 0.75,
    # unbiased var = (3 * 0.25^2 + 0.75^2) / 3 = (0.1875 + 0.5625) / 3 = 0.25, std 0.5.
    # Centred per group: [0.5, -0.5] and [0, 0]. A = centred / 0.5 = [1, -1, 0, 0].
    rewards = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    advantages = group_advantages(rewards, mode="batch_std", eps=0.0)
    torch.testing.assert_close(advantages, torch.tensor([[1.0, -1.0], [0.0, 0.0]]))


def test_none_only_centres():
    # Groups [1, 0] and [1, 1]: means 0.5 and 1, A = [0.5, -0.5, 0, 0].
    advantages = group_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0]), group_size=2, mode="none")
    torch.testing.assert_close(advantages, torch.tensor([0.5, -0.5, 0.0, 0.0]))


def test_group_of_one_has_zero_advantage():
    # G = 1: the mean is the reward itself, so r - mean = 0; the std is taken as 0, not NaN.
    advantages = group_advantages(torch.tensor([3.0, -2.0]), group_size=1)
    assert torch.equal(advantages, torch.zeros(2))


def test_integer_rewards_are_promoted_to_float():
    advantages = group_advantages(torch.tensor([1, 0]), group_size=2, mode="none")
    assert advantages.dtype == torch.float32
    torch.testing.assert_close(advantages, torch.tensor([0.5, -0.5]))


def test_invalid_mode_names_valid_choices():
    with pytest.raises(ValueError, match="group_std.*batch_std.*none"):
        group_advantages(torch.zeros(4), group_size=2, mode="whiten")


def test_bad_shapes_raise():
    with pytest.raises(ValueError):
        group_advantages(torch.zeros(5), group_size=2)
    with pytest.raises(ValueError):
        group_advantages(torch.zeros(4))
    with pytest.raises(ValueError):
        group_advantages(torch.zeros(2, 3), group_size=2)
    with pytest.raises(ValueError):
        group_advantages(torch.zeros(2, 2, 2), group_size=2)


def _loop_advantages(rewards, group_size, mode, eps):
    """Second implementation with the statistics module (stdev is the unbiased one)."""
    out = []
    groups = [rewards[i : i + group_size] for i in range(0, len(rewards), group_size)]
    batch_std = statistics.stdev(rewards)
    for group in groups:
        mean = sum(group) / len(group)
        for r in group:
            if mode == "group_std":
                out.append((r - mean) / (statistics.stdev(group) + eps))
            elif mode == "batch_std":
                out.append((r - mean) / (batch_std + eps))
            else:
                out.append(r - mean)
    return out


@pytest.mark.parametrize("mode", ["group_std", "batch_std", "none"])
def test_matches_plain_loop_on_random_rewards(mode):
    rng = random.Random(1234)
    for num_groups, group_size in [(1, 2), (5, 6), (3, 8)]:
        rewards = [rng.choice([0.0, 1.0, rng.uniform(-1, 2)]) for _ in range(num_groups * group_size)]
        expected = _loop_advantages(rewards, group_size, mode, eps=1e-6)
        flat = group_advantages(torch.tensor(rewards, dtype=torch.float64), group_size=group_size, mode=mode)
        grid = group_advantages(
            torch.tensor(rewards, dtype=torch.float64).view(num_groups, group_size), mode=mode
        )
        torch.testing.assert_close(flat, torch.tensor(expected, dtype=torch.float64))
        torch.testing.assert_close(grid.reshape(-1), flat)


def test_an_unscorable_response_is_left_out_of_its_group():
    # Group [1, 0, 0, NaN]: the baseline is that of [1, 0, 0]: mean 1/3, unbiased std
    # sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3) = 0.57735. A = (1 - 1/3) / 0.57735 = 1.1547,
    # (0 - 1/3) / 0.57735 = -0.57735; the NaN response gets 0.
    rewards = torch.tensor([1.0, 0.0, 0.0, float("nan"), 1.0, 1.0, 0.0, 0.0])
    advantages = group_advantages(rewards, 4, eps=0.0)
    expected = torch.tensor([1.1547, -0.57735, -0.57735, 0.0, 0.8660, 0.8660, -0.8660, -0.8660])
    torch.testing.assert_close(advantages, expected, atol=1e-4, rtol=0)
    # The scorable responses' advantages equal those of the group without the NaN one.
    torch.testing.assert_close(advantages[:3], group_advantages(torch.tensor([1.0, 0.0, 0.0]), 3, eps=0.0))


def test_groups_with_at_most_one_scorable_response_get_zero():
    nan = float("nan")
    for mode in ("group_std", "batch_std", "none"):
        advantages = group_advantages(torch.tensor([nan, nan, 1.0, nan]), 4, mode=mode)
        assert not advantages.isnan().any() and advantages.abs().max() == 0, mode

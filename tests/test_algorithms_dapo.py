"""DAPO overlong reward shaping and dynamic-sampling group filter."""

import os
import random

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch

from microcoder.algorithms.dapo import dynamic_sampling_filter, overlong_penalty

torch.set_num_threads(1)


def test_overlong_penalty_by_hand():
    # L_max = 20, L_cache = 4, so the punishment interval is (16, 20].
    #   10 -> 0 (<= 16); 16 -> 0; 17 -> (16 - 17) / 4 = -0.25; 18 -> -0.5; 20 -> -1; 25 (> L_max) -> -1.
    lengths = torch.tensor([10, 16, 17, 18, 20, 25])
    torch.testing.assert_close(
        overlong_penalty(lengths, max_length=20, cache_length=4), torch.tensor([0.0, 0.0, -0.25, -0.5, -1.0, -1.0])
    )


def test_penalty_factor_scales():
    # Same as above with factor 0.5: 17 -> -0.125, 20 -> -0.5.
    torch.testing.assert_close(
        overlong_penalty(torch.tensor([17, 20]), max_length=20, cache_length=4, penalty_factor=0.5),
        torch.tensor([-0.125, -0.5]),
    )


def test_matches_verl_formula_up_to_max_length():
    # verl: min(-(len - (L_max - L_cache)) / L_cache * factor, 0), for len <= L_max.
    max_length, cache_length, factor = 4096, 1024, 1.0
    lengths = list(range(0, max_length + 1, 37)) + [max_length]
    expected = [min(-(n - (max_length - cache_length)) / cache_length * factor, 0.0) for n in lengths]
    torch.testing.assert_close(
        overlong_penalty(torch.tensor(lengths), max_length, cache_length, factor), torch.tensor(expected)
    )


def test_bad_cache_length():
    with pytest.raises(ValueError):
        overlong_penalty(torch.tensor([1]), max_length=10, cache_length=0)
    with pytest.raises(ValueError):
        overlong_penalty(torch.tensor([1]), max_length=10, cache_length=11)


def test_filter_by_hand():
    # Groups [1,1,1] all right, [0,1,0] mixed, [0,0,0] all wrong, [1,0,1] mixed.
    # Kept: groups 1 and 3 -> responses 3,4,5 and 9,10,11.
    rewards = torch.tensor([[1, 1, 1], [0, 1, 0], [0, 0, 0], [1, 0, 1]])
    result = dynamic_sampling_filter(rewards)
    assert result.group_keep.tolist() == [False, True, False, True]
    assert result.response_indices.tolist() == [3, 4, 5, 9, 10, 11]
    flat = dynamic_sampling_filter(rewards.reshape(-1).float(), group_size=3)
    assert torch.equal(flat.group_keep, result.group_keep)
    assert torch.equal(flat.response_indices, result.response_indices)


def test_filter_everything_filtered():
    result = dynamic_sampling_filter(torch.ones(2, 4))
    assert result.group_keep.tolist() == [False, False]
    assert result.response_indices.numel() == 0


def test_filter_matches_plain_loop():
    rng = random.Random(9)
    group_size = 5
    rewards = [float(rng.random() < 0.3) for _ in range(40 * group_size)]
    keep, indices = [], []
    for g in range(40):
        group = rewards[g * group_size : (g + 1) * group_size]
        keep.append(len(set(group)) > 1)
        if keep[-1]:
            indices.extend(range(g * group_size, (g + 1) * group_size))
    result = dynamic_sampling_filter(torch.tensor(rewards), group_size=group_size)
    assert result.group_keep.tolist() == keep
    assert result.response_indices.tolist() == indices
    assert any(keep) and not all(keep)


def test_filter_bad_shapes():
    with pytest.raises(ValueError):
        dynamic_sampling_filter(torch.zeros(7), group_size=3)
    with pytest.raises(ValueError):
        dynamic_sampling_filter(torch.zeros(6))


def test_the_group_filter_ignores_unscorable_responses():
    nan = float("nan")
    rewards = torch.tensor([
        [1.0, 0.0, nan, nan],   # mixed among the scorable: kept
        [0.0, 0.0, nan, 0.0],   # all scorable equal: dropped
        [nan, nan, nan, 1.0],   # one scorable response: nothing to compare, dropped
    ])
    assert dynamic_sampling_filter(rewards).group_keep.tolist() == [True, False, False]

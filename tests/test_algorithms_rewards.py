"""Reward modes and the test budget's choice of tests: hand-derived values and a plain loop."""

import hashlib
import math
import random

import pytest

from microcoder.algorithms.rewards import (REWARD_MODES, needs_all_tests, problem_seed, reward_from_tests,
                                           select_tests)


@pytest.mark.parametrize("mode, passed, total, expected", [
    ("binary", 3, 3, 1.0), ("binary", 2, 3, 0.0), ("binary", 0, 3, 0.0),
    ("fraction", 3, 4, 0.75), ("fraction", 0, 4, 0.0), ("fraction", 4, 4, 1.0),
    # fraction_pow at power 4: (3/4)^4 = 81/256; (1/2)^4 = 1/16
    ("fraction_pow", 3, 4, 81 / 256), ("fraction_pow", 2, 4, 1 / 16), ("fraction_pow", 4, 4, 1.0),
    ("fraction", 0, 0, 0.0),  # no tests: nothing earned
])
def test_reward_from_tests_by_hand(mode, passed, total, expected):
    assert reward_from_tests(mode, passed, total, power=4.0) == pytest.approx(expected, abs=0)


def test_fraction_pow_uses_its_power():
    assert reward_from_tests("fraction_pow", 1, 2, power=2.0) == 0.25  # (1/2)^2
    assert reward_from_tests("fraction_pow", 1, 2, power=1.0) == reward_from_tests("fraction", 1, 2)


def test_bad_modes_and_counts_are_refused():
    with pytest.raises(ValueError, match="valid: binary, fraction, fraction_pow"):
        reward_from_tests("partial", 1, 2)
    with pytest.raises(ValueError, match="passed <= total"):
        reward_from_tests("fraction", 3, 2)
    assert [needs_all_tests(mode) for mode in REWARD_MODES] == [False, True, True]


def test_select_tests_by_hand():
    lengths = [3, 9, 1, 9, 5, 2, 7]
    # N = 4: ceil(4/2) = 2 longest: the two 9s (indices 1 and 3, ties to the earlier), then 2 of the rest.
    chosen = select_tests(lengths, 4, seed=7)
    assert len(chosen) == 4 and chosen == sorted(chosen) and {1, 3} <= set(chosen)
    rest = [index for index in chosen if index not in (1, 3)]
    assert set(rest) <= {0, 2, 4, 5, 6}
    # The sample is random.Random(seed).sample over the rest in index order.
    assert sorted(rest) == sorted(random.Random(7).sample([0, 2, 4, 5, 6], 2))
    # N = 3: ceil(3/2) = 2 longest and one drawn. longest=N is DeepCoder's rule: 9, 9, 7.
    assert select_tests(lengths, 3, seed=0, longest=3) == [1, 3, 6]
    assert len(select_tests(lengths, 3, seed=0)) == 3
    # Budgets at or above the count, or none, keep everything.
    assert select_tests(lengths, 7, seed=0) == select_tests(lengths, None, seed=0) == list(range(7))


def test_select_tests_takes_hidden_tests_first():
    lengths = [3, 9, 1, 9, 5, 2, 7]
    shown = [False, True, False, True, False, False, False]  # the two 9s are the statement's examples
    # N = 2 of 5 hidden: ceil(2/2) = 1 longest hidden (7, index 6), then 1 drawn from the other hidden.
    chosen = select_tests(lengths, 2, seed=7, shown=shown)
    assert 6 in chosen and not {1, 3} & set(chosen)
    assert [i for i in chosen if i != 6] == random.Random(7).sample([0, 2, 4, 5], 1)
    # N = 6 of 5 hidden: every hidden test, and the longest shown one fills the last place (index 1).
    assert select_tests(lengths, 6, seed=7, shown=shown) == [0, 1, 2, 4, 5, 6]
    # No hidden test (nothing to prefer) or no marks: the length rule alone.
    assert select_tests(lengths, 3, seed=0, longest=3, shown=[True] * 7) == [1, 3, 6]
    with pytest.raises(ValueError, match="shown"):
        select_tests(lengths, 3, seed=0, shown=[True])


def test_select_tests_is_a_seeded_choice():
    lengths = list(range(40, 0, -1))  # test i has length 40 - i: the longest come first
    runs = {tuple(select_tests(lengths, 10, seed)) for seed in range(20)}
    assert all(run[:5] == (0, 1, 2, 3, 4) for run in runs)  # the 5 longest, whatever the seed
    assert len(runs) > 1  # the sampled half moves with the seed
    assert select_tests(lengths, 10, 3) == select_tests(lengths, 10, 3)
    assert select_tests(lengths, 10, seed=1, longest=0) != list(range(10))


def test_select_tests_against_a_plain_loop():
    generator = random.Random(0)
    for _ in range(200):
        lengths = [generator.randrange(6) for _ in range(generator.randrange(1, 30))]
        budget = generator.randrange(1, 12)
        chosen = select_tests(lengths, budget, seed=5)
        if budget >= len(lengths):
            assert chosen == list(range(len(lengths)))
            continue
        # the loop: pick the longest ceil(N/2) one at a time, earliest first among equals
        longest, remaining = [], list(range(len(lengths)))
        for _ in range(math.ceil(budget / 2)):
            best = max(remaining, key=lambda index: (lengths[index], -index))
            longest.append(best)
            remaining.remove(best)
        assert set(longest) <= set(chosen) and len(set(chosen)) == budget


def test_problem_seed_is_stable_and_per_problem():
    assert problem_seed(0, "a") == problem_seed(0, "a")
    assert len({problem_seed(0, "a"), problem_seed(0, "b"), problem_seed(1, "a")}) == 3
    # a digest, so this value never changes between runs or machines
    assert problem_seed(0, "a") == int.from_bytes(hashlib.blake2b(b"0:a", digest_size=8).digest(), "big")

"""Unbiased pass@k: hand values and the binomial-coefficient definition."""

from math import comb

import pytest

from microcoder.algorithms.pass_at_k import mean_pass_at_k, pass_at_k


def test_k1_is_the_fraction_correct():
    # n = 5, c = 2, k = 1: 1 - C(3,1)/C(5,1) = 1 - 3/5 = 0.4.
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)


def test_k2_by_hand():
    # n = 5, c = 2, k = 2: 1 - C(3,2)/C(5,2) = 1 - 3/10 = 0.7.
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)


def test_no_correct_sample_gives_zero():
    # c = 0: C(n, k) / C(n, k) = 1, so 1 - 1 = 0 for every k.
    assert pass_at_k(5, 0, 1) == 0.0
    assert pass_at_k(5, 0, 5) == 0.0


def test_fewer_wrong_than_k_gives_one():
    # n - c = 1 < k = 2: any 2 of the 5 samples include a correct one.
    assert pass_at_k(5, 4, 2) == 1.0
    assert pass_at_k(3, 3, 1) == 1.0


def test_matches_binomial_definition():
    for n in range(1, 13):
        for c in range(0, n + 1):
            for k in range(1, n + 1):
                expected = 1.0 - comb(n - c, k) / comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12), (n, c, k)


def test_mean_over_problems():
    # Problems (5, 2) and (5, 0) at k = 1: (0.4 + 0) / 2 = 0.2.
    assert mean_pass_at_k([5, 5], [2, 0], 1) == pytest.approx(0.2)
    assert mean_pass_at_k([], [], 1) != mean_pass_at_k([], [], 1)  # NaN for no problems


def test_invalid_arguments():
    with pytest.raises(ValueError):
        pass_at_k(5, 6, 1)
    with pytest.raises(ValueError):
        pass_at_k(5, 2, 0)
    with pytest.raises(ValueError):
        pass_at_k(5, 2, 6)
    with pytest.raises(ValueError):
        mean_pass_at_k([5], [1, 2], 1)

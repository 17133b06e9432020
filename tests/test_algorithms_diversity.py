"""Within-group diversity: mean pairwise Jaccard distance of n-gram sets."""

import itertools
import random

import pytest

from microcoder.algorithms.diversity import batch_diversity, group_diversity, jaccard_distance, ngram_set


def test_identical_responses_have_zero_diversity():
    assert group_diversity([[1, 2, 3, 4, 5]] * 3, n=2) == 0.0


def test_disjoint_responses_have_diversity_one():
    # 2-grams {12, 23} and {45, 56}: no overlap, Jaccard 0, distance 1.
    assert group_diversity([[1, 2, 3], [4, 5, 6]], n=2) == 1.0


def test_partial_overlap_by_hand():
    # a = [1,2,3,4] -> {(1,2),(2,3),(3,4)}; b = [1,2,3,5] -> {(1,2),(2,3),(3,5)}.
    # |a & b| = 2, |a | b| = 4, Jaccard = 0.5, distance 0.5.
    a, b = [1, 2, 3, 4], [1, 2, 3, 5]
    assert group_diversity([a, b], n=2) == pytest.approx(0.5)
    # Add c = [7, 8, 9], disjoint from both: pairs (a,b)=0.5, (a,c)=1, (b,c)=1; mean 2.5 / 3 = 0.833333.
    assert group_diversity([a, b, [7, 8, 9]], n=2) == pytest.approx(2.5 / 3)


def test_order_of_responses_does_not_matter():
    group = [[1, 2, 3, 4], [1, 2, 3, 5], [7, 8, 9], [2, 3, 4, 4]]
    values = {round(group_diversity(list(perm), n=2), 12) for perm in itertools.permutations(group)}
    assert len(values) == 1


def test_short_and_empty_responses():
    # Shorter than n: the response itself is its one n-gram.
    assert ngram_set([1, 2], 4) == frozenset({(1, 2)})
    assert group_diversity([[1], [1]], n=4) == 0.0
    assert group_diversity([[1], [2]], n=4) == 1.0
    # Two empty responses are identical; empty vs non-empty share nothing.
    assert group_diversity([[], []]) == 0.0
    assert group_diversity([[], [1, 2, 3, 4]]) == 1.0
    assert jaccard_distance(frozenset(), frozenset()) == 0.0


def test_unigrams_vs_4grams():
    # Same tokens in a different order: unigram sets are equal (distance 0); 4-gram sets differ.
    a, b = [1, 2, 3, 4, 5], [5, 4, 3, 2, 1]
    assert group_diversity([a, b], n=1) == 0.0
    assert group_diversity([a, b], n=4) == 1.0


def test_values_stay_in_unit_interval_and_batch_keeps_order():
    rng = random.Random(0)
    groups = [[[rng.randrange(6) for _ in range(rng.randrange(0, 30))] for _ in range(5)] for _ in range(20)]
    values = batch_diversity(groups, n=3)
    assert len(values) == 20
    assert all(0.0 <= v <= 1.0 for v in values)
    assert values == [group_diversity(group, n=3) for group in groups]


def test_bad_inputs():
    with pytest.raises(ValueError):
        group_diversity([[1, 2, 3]])
    with pytest.raises(ValueError):
        ngram_set([1, 2], 0)

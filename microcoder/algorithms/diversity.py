"""Within-group response diversity, in [0, 1].

The paper picks its sampling temperature by the diversity of responses at
that temperature but does not define the measure; this one is ours:

    diversity(group) = mean over pairs i < j of (1 - Jaccard(S_i, S_j))

where S_i is the set of token n-grams of response i and
Jaccard(A, B) = |A & B| / |A | B|. It is 0 when all responses are identical,
1 when no two responses share an n-gram, and does not depend on the order of
the responses.

Why this one: distinct-n (unique n-grams / total n-grams) is not 0 for
identical responses (G identical copies give 1/G or less) and mixes
within-response repetition into between-response diversity; embedding
distances need a model. Set Jaccard is exact and cheap: G * L to build the
sets and G * (G - 1) / 2 set intersections.

n = 4 by default: single tokens of code (keywords, brackets, names) are
shared by almost any two programs, so unigram sets make everything look alike,
while 4-grams already separate different solutions. A response shorter than
n contributes one n-gram, itself; an empty response contributes none, and two
empty responses count as identical.
"""

from __future__ import annotations

from collections.abc import Sequence


def ngram_set(token_ids: Sequence[int], n: int) -> frozenset[tuple[int, ...]]:
    """The set of contiguous n-grams of one response (the response itself if shorter than n)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    tokens = tuple(token_ids)
    if not tokens:
        return frozenset()
    if len(tokens) < n:
        return frozenset({tokens})
    return frozenset(tokens[i : i + n] for i in range(len(tokens) - n + 1))


def jaccard_distance(a: frozenset, b: frozenset) -> float:
    """1 - |a & b| / |a | b|; 0.0 for two empty sets."""
    union = len(a | b)
    if union == 0:
        return 0.0
    return 1.0 - len(a & b) / union


def group_diversity(responses: Sequence[Sequence[int]], n: int = 4) -> float:
    """Mean pairwise Jaccard distance of the responses' n-gram sets.

    Args:
        responses: G >= 2 token-id lists, the responses to one prompt.
        n: n-gram length.

    Returns: a float in [0, 1].
    """
    if len(responses) < 2:
        raise ValueError(f"diversity needs at least 2 responses, got {len(responses)}")
    sets = [ngram_set(response, n) for response in responses]
    total = 0.0
    num_pairs = 0
    for i in range(len(sets)):
        for j in range(i + 1, len(sets)):
            total += jaccard_distance(sets[i], sets[j])
            num_pairs += 1
    return total / num_pairs


def batch_diversity(groups: Sequence[Sequence[Sequence[int]]], n: int = 4) -> list[float]:
    """`group_diversity` of every group: one float per prompt, in input order.

    The step's logged diversity is the mean of this list.
    """
    return [group_diversity(group, n) for group in groups]

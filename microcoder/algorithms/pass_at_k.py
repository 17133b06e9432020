"""Unbiased pass@k (Chen et al. 2021, "Evaluating Large Language Models Trained on Code")."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def pass_at_k(num_samples: int, num_correct: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from
    `num_samples` (of which `num_correct` are correct) is correct:
    1 - C(n - c, k) / C(n, k), computed as a stable product."""
    if not 0 <= num_correct <= num_samples:
        raise ValueError(f"need 0 <= num_correct <= num_samples, got {num_correct}, {num_samples}")
    if not 1 <= k <= num_samples:
        raise ValueError(f"need 1 <= k <= num_samples, got k={k}, n={num_samples}")
    if num_samples - num_correct < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
    return float(1.0 - np.prod(1.0 - k / np.arange(num_samples - num_correct + 1, num_samples + 1)))


def mean_pass_at_k(num_samples: Sequence[int], num_correct: Sequence[int], k: int) -> float:
    """Mean pass@k over problems; problems with fewer than k samples are an error."""
    if len(num_samples) != len(num_correct):
        raise ValueError("num_samples and num_correct differ in length")
    if not num_samples:
        return float("nan")
    return float(np.mean([pass_at_k(n, c, k) for n, c in zip(num_samples, num_correct)]))


def standard_error(values: Sequence[float]) -> float:
    """Standard error of the mean of per-problem values (e.g. each problem's pass@1):
    sample standard deviation (ddof 1) / sqrt(count). It treats the problems as drawn from
    a larger pool, so it covers both which problems were asked and the sampling within
    each. nan for fewer than two values."""
    if len(values) < 2:
        return float("nan")
    return float(np.std(values, ddof=1) / np.sqrt(len(values)))

"""The verdict rule of the experiment pages: pure functions of per-seed numbers.

A finding compares one metric between two arms (or within one arm, against an earlier
step) in the direction the paper reports. Per seed s that both sides ran,

    d_s  = value(arm A, seed s) - value(arm B, seed s)        (two arms, paired by seed)
    d_s  = value(arm A, seed s, at) - value(arm A, seed s, baseline)   (one arm)
    mean = (1/n) * sum_s d_s
    SE   = sd(d) / sqrt(n),   sd with n - 1 in the denominator (undefined for n = 1)
    MDE  = 2 * SE             (the smallest effect this many seeds would call)

and, with sign = +1 when the paper says A is greater (-1 when it says less):

    untestable at this scale   the spec declares it (with its reason), whatever the numbers
    mechanism idle             the arms' mechanism did not act (a logged metric below the
                               spec's threshold, or the two arms equal in every non-timing value)
    reproduced                 sign * mean >= 2 SE and mean != 0
    contradicted               sign * mean <= -2 SE and mean != 0
    inconclusive               neither, or n < 2 (SE undefined: one seed cannot tell)

The checks go in that order: a declared reason or an idle mechanism is stated instead of a
verdict the numbers cannot carry. Prose on the pages may explain a verdict, never override it.

2 SE is a t-statistic of 2 on n - 1 degrees of freedom: a two-sided confidence of about 70%
with 2 seeds, 88% with 5, 95% with 30 (scipy.stats.t). With 2 seeds a verdict is weak
evidence, and the page says how many seeds it rests on.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

RULE = ("Verdict rule (per finding, d = the paired-by-seed difference in the paper's terms, SE = sd(d)/sqrt(n), "
        "MDE = 2 SE): *reproduced* if the mean of d is in the paper's direction by at least 2 SE; *contradicted* "
        "if it is in the other direction by at least 2 SE; *inconclusive* otherwise, or with one seed (SE "
        "undefined); *untestable at this scale* when the spec says why (e.g. an effect the paper sees after "
        "hundreds of steps); *mechanism idle* when what the arms differ in did not act (a logged metric under "
        "the spec's threshold, or two arms equal in every non-timing value). Prose explains a verdict, never "
        "overrides it. 2 SE is t = 2 on n - 1 degrees of freedom: about 70% two-sided confidence with 2 seeds, "
        "88% with 5.")

REPRODUCED, CONTRADICTED, INCONCLUSIVE = "reproduced", "contradicted", "inconclusive"
UNTESTABLE, IDLE = "untestable at this scale", "mechanism idle"
DIRECTIONS = ("greater", "less")
TIMING_KEYS = ("seconds_rollout", "seconds_reward", "seconds_reward_visible", "seconds_update", "tokens_per_second")


@dataclass(frozen=True)
class Verdict:
    verdict: str
    n: int
    """Seeds with a difference."""
    mean: float | None
    """Mean paired difference (A - B, or at - baseline); None without any seed."""
    se: float | None
    """Standard error of the mean; None for fewer than two seeds."""
    reason: str = ""
    """Why, for every verdict but reproduced / contradicted."""

    @property
    def mde(self) -> float | None:
        """Minimum detectable effect: 2 SE (None when SE is undefined)."""
        return None if self.se is None else 2 * self.se


def paired_verdict(differences: Sequence[float], direction: str, untestable: str | None = None,
                   idle: str | None = None) -> Verdict:
    """The verdict of one finding from its per-seed differences (module docstring's rule).

    differences: d_s per seed, NaN-free. direction: "greater" (the paper: A > B, or later
    > earlier) or "less". untestable / idle: the reason, when the spec declares the finding
    untestable or the mechanism was found idle.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    values = [float(value) for value in differences]
    if any(math.isnan(value) for value in values):
        raise ValueError("a difference is NaN: leave out the seed that measured nothing")
    n = len(values)
    mean = statistics.fmean(values) if values else None
    se = statistics.stdev(values) / math.sqrt(n) if n >= 2 else None
    if untestable:
        return Verdict(UNTESTABLE, n, mean, se, untestable)
    if idle:
        return Verdict(IDLE, n, mean, se, idle)
    if n == 0:
        return Verdict(INCONCLUSIVE, 0, None, None, "no seed measured both sides")
    if se is None:
        return Verdict(INCONCLUSIVE, n, mean, None, "one seed: SE undefined")
    signed = mean if direction == "greater" else -mean
    if signed != 0 and signed >= 2 * se:
        return Verdict(REPRODUCED, n, mean, se)
    if signed != 0 and -signed >= 2 * se:
        return Verdict(CONTRADICTED, n, mean, se)
    return Verdict(INCONCLUSIVE, n, mean, se, "the difference is within 2 SE of 0")


def value_at(rows: Sequence[dict], metric: str, at: str | int | Sequence[int]) -> float | None:
    """A run's value of `metric`: at a step (int), at its last logged step ("last", step 0
    excluded so that an untrained value never stands for the end), or the mean over the
    logged steps in an inclusive window [first, last]. None when nothing is logged there;
    NaN values (an evaluation of judge errors only) count as not logged."""
    logged = [(row["step"], float(row[metric])) for row in rows
              if row.get(metric) is not None and not math.isnan(float(row[metric]))]
    if at == "last":
        trained = [value for step, value in logged if step > 0]
        return trained[-1] if trained else None
    if isinstance(at, int):
        found = [value for step, value in logged if step == at]
        return found[-1] if found else None
    first, last = at
    window = [value for step, value in logged if first <= step <= last]
    return statistics.fmean(window) if window else None


def mechanism_value(runs: Sequence[Sequence[dict]], metric: str, reduce: str) -> float | None:
    """How much a mechanism acted over an arm's runs: "mean" or "max" of every logged value
    of `metric`, or "range" (max - min: a schedule that moved). None when never logged."""
    values = [float(row[metric]) for rows in runs for row in rows if row.get(metric) is not None]
    if not values:
        return None
    if reduce == "mean":
        return statistics.fmean(values)
    if reduce == "max":
        return max(values)
    if reduce == "range":
        return max(values) - min(values)
    raise ValueError(f"reduce must be one of mean, max, range, got {reduce!r}")


def non_timing(rows: Sequence[dict]) -> list[dict]:
    """A run's rows without the wall-clock keys, which differ between identical runs."""
    return [{key: value for key, value in row.items() if key not in TIMING_KEYS} for row in rows]


def identical_arms(runs_a: dict[int, Sequence[dict]], runs_b: dict[int, Sequence[dict]]) -> bool:
    """True when two arms ran the same seeds and every non-timing value of every row is equal:
    whatever they differ in did nothing measurable."""
    seeds = set(runs_a) & set(runs_b)
    return bool(seeds) and set(runs_a) == set(runs_b) and all(
        non_timing(runs_a[seed]) == non_timing(runs_b[seed]) for seed in seeds)

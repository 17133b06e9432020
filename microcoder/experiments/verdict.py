"""The verdict rule of the experiment pages: pure functions of per-seed numbers.

A finding compares one metric between two arms (or within one arm, against an earlier
step) in the direction the paper reports. Per seed s that both sides ran,

    d_s  = value(arm A, seed s) - value(arm B, seed s)        (two arms, paired by seed)
    d_s  = value(arm A, seed s, at) - value(arm A, seed s, baseline)   (one arm)
    mean = (1/n) * sum_s d_s
    SE   = sd(d) / sqrt(n),   sd with n - 1 in the denominator (undefined for n = 1)
    t    = sign * mean / SE   on n - 1 degrees of freedom
    p    = P(T_{n-1} >= t)    the one-sided p-value in the paper's direction

with sign = +1 when the paper says A is greater (-1 when it says less). Then:

    untestable at this scale   the spec declares it (with its reason), whatever the numbers
    not training evidence      the spec declares that the arms differ before training (two
                               judges of the same responses, two problem sets, two limits at
                               step 0): the numbers are shown, the rule does not score them
    mechanism idle             the arms' mechanism did not act (a logged metric below the
                               spec's threshold, or the two arms equal in every non-timing value)
    reproduced                 p <= ALPHA (a one-sided t test at 5% in the paper's direction)
    contradicted               1 - p <= ALPHA (the same test in the other direction)
    inconclusive               neither, or n < 2 (SE undefined: one seed cannot tell)

The checks go in that order: a declared reason or an idle mechanism is stated instead of a
verdict the numbers cannot carry. Prose on the pages may explain a verdict, never override it.

Across a record of m scored findings (those reproduced, contradicted or inconclusive), some
5% tests come out "reproduced" by chance alone: `holm` adjusts the m p-values (Holm's
step-down: the i-th smallest times m - i + 1, then the running maximum), once for the
paper's direction and once for the other, and a verdict that survives has an adjusted p <=
ALPHA. That holds the chance of any false "reproduced" in the record (and, separately, of
any false "contradicted") at or under 5%, whatever the findings' dependence.

The detectable effect is the one the design detects with 80% power: the effect delta at
which the non-central t (n - 1 degrees of freedom, non-centrality delta / SE) exceeds the
test's critical value t_{0.95, n-1} with probability 0.8, at the measured SE (scipy.stats.nct,
solved for delta; with 5 seeds delta = 3.04 SE, where the t-quantile approximation
t_{0.95,4} + t_{0.80,4} gives 3.07 SE). `power` is that probability at a given effect (the
paper's, where it gives one), and `seeds_for_power` the fewest seeds that reach 80% at an
effect with the measured per-seed sd. All three read the measured SE as if it were the true
one: with 5 seeds that estimate is itself rough, so the summary gives each seeds-for-power
figure with its 95% range (`sd_range`: the chi-square interval on the variance, n - 1
degrees of freedom; with 5 seeds the sd could be 0.60x to 2.87x the measured one).
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

ALPHA = 0.05
"""The level of each one-sided test."""
POWER = 0.8
"""The power at which a detectable effect is stated."""

RULE = ("Verdict rule (per finding, d = the paired-by-seed difference in the paper's terms, SE = sd(d)/sqrt(n), "
        "t = mean/SE in the paper's direction on n - 1 degrees of freedom, p = the one-sided p-value): "
        "*reproduced* if p <= 0.05 (a one-sided t test at 5% in the paper's direction); *contradicted* if the same "
        "test in the other direction gives <= 0.05; *inconclusive* otherwise, or with one seed (SE undefined); "
        "*untestable at this scale* when the spec says why (e.g. an effect the paper sees after hundreds of "
        "steps); *not training evidence* when the spec states that the arms differ before training (two judges, "
        "two problem sets, two limits at step 0: the numbers are shown, not scored); *mechanism idle* when what "
        "the arms differ in did not act (a logged metric under the spec's threshold, or two arms equal in every "
        "non-timing value). The detectable effect is the one this many seeds detect with 80% power at the "
        "measured SE (non-central t, scipy.stats.nct: 3.04 SE with 5 seeds); the power column is the rule's "
        "chance of calling the paper's effect, where the paper gives one. Holm: the record's scored findings "
        "(reproduced, contradicted, inconclusive) corrected together for multiplicity (Holm's step-down on "
        "their p-values, each direction apart), so that the chance of any false reproduced in the record is "
        "at most 5%. Prose explains a verdict, never overrides it.")

REPRODUCED, CONTRADICTED, INCONCLUSIVE = "reproduced", "contradicted", "inconclusive"
UNTESTABLE, IDLE, CONFOUNDED = "untestable at this scale", "mechanism idle", "not training evidence"
SCORED = (REPRODUCED, CONTRADICTED, INCONCLUSIVE)
"""The verdicts a test decided: the findings that Holm's correction counts."""
DIRECTIONS = ("greater", "less")
# Wall-clock keys: they differ between two runs that computed the same thing.
TIMING_KEYS = ("seconds_rollout", "seconds_reward", "seconds_reward_visible", "seconds_update", "tokens_per_second",
               "seconds_total")


@functools.cache
def critical_t(df: int, two_sided: bool = False) -> float:
    """The test's critical value: t_{1 - ALPHA, df} one-sided, t_{1 - ALPHA/2, df} two-sided."""
    from scipy import stats

    return float(stats.t.ppf(1 - (ALPHA / 2 if two_sided else ALPHA), df))


@functools.cache
def detectable_in_se(df: int, two_sided: bool = False) -> float:
    """The non-centrality (effect / SE) at which the test on `df` degrees of freedom has POWER:
    solves P(T'_{df, ncp} > c) = POWER for ncp (non-central t), c = t_{1-ALPHA, df}; for the
    two-sided test (a question without a direction, such as whether two engines differ)
    P(T' > c) + P(T' < -c) = POWER with c = t_{1-ALPHA/2, df}."""
    from scipy import optimize, stats

    critical = critical_t(df, two_sided)

    def called(ncp: float) -> float:
        # P(T'_ncp < -c) = P(T'_-ncp > c): scipy's cdf of the lower tail gives NaN where it underflows
        return stats.nct.sf(critical, df, ncp) + (stats.nct.sf(critical, df, -ncp) if two_sided else 0.0)

    return float(optimize.brentq(lambda ncp: called(ncp) - POWER, 0.0, 1e3))


def power(effect: float, se: float, n: int) -> float | None:
    """The chance that the one-sided test at ALPHA on n - 1 degrees of freedom calls an effect
    of size `effect` (in the paper's direction) when the SE is `se`; None for n < 2 or SE 0."""
    from scipy import stats

    if n < 2 or se <= 0:
        return None
    return float(stats.nct.sf(critical_t(n - 1), n - 1, abs(effect) / se))


def seeds_for_power(effect: float, sd: float, most: int = 10_000) -> int | None:
    """The fewest seeds (at least 2) at which the test has POWER at `effect`, with a per-seed
    sd of the difference `sd` (SE = sd / sqrt(n)); past 100 seeds the search steps by a
    tenth, so the answer is within 10% of the fewest. None past `most` or without an effect."""
    if effect == 0 or sd <= 0:
        return None if effect == 0 else 2
    n = 2
    while n <= most:
        if power(effect, sd / math.sqrt(n), n) >= POWER:
            return n
        n += 1 if n < 100 else n // 10
    return None


def sd_range(sd: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """The `level` confidence interval of a normal population's sd from a sample sd of n
    values: sd * sqrt((n - 1) / chi2_{1 - a/2, n-1}) to sd * sqrt((n - 1) / chi2_{a/2, n-1})."""
    from scipy import stats

    tail = (1 - level) / 2
    return (sd * math.sqrt((n - 1) / stats.chi2.ppf(1 - tail, n - 1)),
            sd * math.sqrt((n - 1) / stats.chi2.ppf(tail, n - 1)))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: sorted ascending, the i-th
    (from 1) times m - i + 1, then the running maximum, capped at 1."""
    m = len(p_values)
    order = sorted(range(m), key=lambda index: p_values[index])
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


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
    p: float | None = None
    """The one-sided p-value in the paper's direction (None without an SE)."""
    t: float | None = None
    """mean / SE in the paper's direction (None without an SE; +-inf with SE 0 and a mean)."""

    @property
    def mde(self) -> float | None:
        """The effect detected with 80% power at this SE and n (None when SE is undefined)."""
        return None if self.se is None else detectable_in_se(self.n - 1) * self.se

    @property
    def sd(self) -> float | None:
        """The per-seed sd of the difference."""
        return None if self.se is None else self.se * math.sqrt(self.n)

    def power_at(self, effect: float | None) -> float | None:
        """The test's power at `effect` (the paper's) with this n and SE."""
        return None if effect is None or self.se is None else power(effect, self.se, self.n)


def t_test(mean: float, se: float, n: int, direction: str) -> tuple[float, float]:
    """(t, p): t = mean / SE in `direction`, p = P(T_{n-1} >= t); with SE 0, t is +-inf (0
    for a mean of 0) and p 0 or 1 by the mean's sign (0.5 at 0)."""
    from scipy import stats

    signed = mean if direction == "greater" else -mean
    if se == 0:
        t = math.copysign(math.inf, signed) if signed else 0.0
        return t, 0.0 if signed > 0 else 1.0 if signed < 0 else 0.5
    return signed / se, float(stats.t.sf(signed / se, n - 1))


def paired_verdict(differences: Sequence[float], direction: str, untestable: str | None = None,
                   idle: str | None = None, confound: str | None = None) -> Verdict:
    """The verdict of one finding from its per-seed differences (module docstring's rule).

    differences: d_s per seed, NaN-free. direction: "greater" (the paper: A > B, or later
    > earlier) or "less". untestable / confound / idle: the reason, when the spec declares
    the finding untestable or its arms different before training, or the mechanism was
    found idle.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    values = [float(value) for value in differences]
    if any(math.isnan(value) for value in values):
        raise ValueError("a difference is NaN: leave out the seed that measured nothing")
    n = len(values)
    mean = statistics.fmean(values) if values else None
    se = statistics.stdev(values) / math.sqrt(n) if n >= 2 else None
    t, p = t_test(mean, se, n, direction) if se is not None else (None, None)
    for verdict, reason in ((UNTESTABLE, untestable), (CONFOUNDED, confound), (IDLE, idle)):
        if reason:
            return Verdict(verdict, n, mean, se, reason, p, t)
    if n == 0:
        return Verdict(INCONCLUSIVE, 0, None, None, "no seed measured both sides")
    if se is None:
        return Verdict(INCONCLUSIVE, n, mean, None, "one seed: SE undefined")
    if mean != 0 and p <= ALPHA:
        return Verdict(REPRODUCED, n, mean, se, "", p, t)
    if mean != 0 and 1 - p <= ALPHA:
        return Verdict(CONTRADICTED, n, mean, se, "", p, t)
    return Verdict(INCONCLUSIVE, n, mean, se, f"one-sided p {p:.3f} > 0.05, nor 0.05 the other way", p, t)


def holm_verdicts(verdicts: Sequence[Verdict]) -> list[tuple[str, float | None]]:
    """(verdict after Holm, adjusted p in the verdict's direction) per verdict, the family
    being the scored ones (reproduced, contradicted, inconclusive); the others keep theirs
    with None."""
    scored = [index for index, verdict in enumerate(verdicts) if verdict.verdict in SCORED and verdict.p is not None]
    toward = holm([verdicts[index].p for index in scored])
    against = holm([1 - verdicts[index].p for index in scored])
    results: list[tuple[str, float | None]] = [(verdict.verdict, None) for verdict in verdicts]
    for index, paper, other in zip(scored, toward, against):
        verdict = verdicts[index]
        if verdict.verdict == REPRODUCED:
            results[index] = (REPRODUCED if paper <= ALPHA else INCONCLUSIVE, paper)
        elif verdict.verdict == CONTRADICTED:
            results[index] = (CONTRADICTED if other <= ALPHA else INCONCLUSIVE, other)
        else:
            results[index] = (INCONCLUSIVE, paper)
    return results


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

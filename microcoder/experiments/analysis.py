"""The numbers of a report, from runs' metrics rows: pure functions, no files.

An arm's curve and its tail (mean +- standard error over seeds), a change paired by seed,
the cumulative training budget, and a finding's per-seed differences and verdict (by the
rule of microcoder.experiments.verdict), with the paired-by-problem-and-seed analysis of a
held-out finding from per-problem scores (a statement about the trained models, no verdict).
"""

from __future__ import annotations

import math
import statistics

from microcoder.experiments.spec import Finding
from microcoder.experiments.verdict import Verdict, identical_arms, mechanism_value, paired_verdict, value_at
from microcoder.training.plots import series


# The reward's share is the time the step waited for the judge: with reward_overlap the
# judging is hidden behind sampling and the log-prob passes, and seconds_reward counts
# time already inside seconds_rollout. Runs from before the overlap have no visible key.
TIME_SPLIT = ("seconds_rollout", "seconds_reward_visible", "seconds_update")


def visible_reward_seconds(row: dict) -> float:
    """What a step waited for its reward: seconds_reward_visible (with reward_overlap,
    seconds_reward is mostly inside the rollout), or seconds_reward for runs before the key."""
    return row.get("seconds_reward_visible", row["seconds_reward"])


def with_visible_reward(rows: list[dict]) -> list[dict]:
    """Rows with `seconds_reward_visible` (= seconds_reward where a run predates it)."""
    return [{**row, "seconds_reward_visible": visible_reward_seconds(row)} if "seconds_reward" in row else row
            for row in rows]


def mean_and_error(values: list[float]) -> tuple[float, float]:
    """(mean, standard error of the mean); the error is 0 for one value."""
    mean = statistics.fmean(values)
    error = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return mean, error


def arm_curve(runs: list[list[dict]], key: str) -> tuple[list[int], list[float], list[float]]:
    """(steps, mean, standard error) over the seeds' rows, at the steps every seed logged `key`."""
    per_seed = [dict(zip(*series(rows, key))) for rows in runs]
    steps = sorted(set.intersection(*(set(values) for values in per_seed))) if per_seed else []
    means, errors = [], []
    for step in steps:
        mean, error = mean_and_error([values[step] for values in per_seed])
        means.append(mean)
        errors.append(error)
    return steps, means, errors


def tail_mean(runs: list[list[dict]], key: str, points: int = 3) -> tuple[float, float] | None:
    """Mean +- SE over seeds of each seed's mean over its last `points` logged values of
    `key` after step 0 (a held-out value at step 0 is the untrained model's)."""
    per_seed = []
    for rows in runs:
        values = [value for step, value in zip(*series(rows, key)) if step > 0]
        if values:
            per_seed.append(statistics.fmean(values[-points:]))
    return mean_and_error(per_seed) if per_seed else None


def paired_change(runs: list[list[dict]], key: str) -> tuple[float, float] | None:
    """Mean +- SE over seeds of each seed's change in `key` from the first to the last step
    every seed logged it (paired by seed: the spread between seeds' starting points cancels);
    None with fewer than two such steps."""
    per_seed = [dict(zip(*series(rows, key))) for rows in runs]
    steps = sorted(set.intersection(*(set(values) for values in per_seed))) if per_seed else []
    if len(steps) < 2:
        return None
    return mean_and_error([values[steps[-1]] - values[steps[0]] for values in per_seed])


def cumulative_budget(rows: list[dict], group_size: int) -> dict[int, dict[str, float]]:
    """step -> the training budget spent up to and including it: groups generated (with
    DAPO's refill rounds), responses judged (groups x group_size: every generated response
    is judged, kept or not), seconds (rollout + reward waited for + update; held-out
    evaluations not counted) and tokens (the tokens generated in the step's final batch:
    tokens_per_second x the step's seconds, as the trainer divided them; the groups DAPO's
    filter drops from the loss are in it, so it is tokens generated, not tokens that enter
    the loss; refill rounds' earlier batches are not in it). Step 0 (before training) is all zeros."""
    spent = {"groups_generated": 0.0, "responses_judged": 0.0, "seconds": 0.0, "tokens": 0.0}
    budget = {0: dict(spent)}
    for row in rows:
        if row.get("step", 0) <= 0 or "groups_generated" not in row:
            continue
        spent["groups_generated"] += row["groups_generated"]
        spent["responses_judged"] += row["groups_generated"] * group_size
        if "seconds_rollout" in row:
            seconds = row["seconds_rollout"] + visible_reward_seconds(row) + row["seconds_update"]
            spent["seconds"] += seconds
            spent["tokens"] += row.get("tokens_per_second", 0.0) * seconds
        budget[int(row["step"])] = dict(spent)
    return budget


def finding_result(finding: Finding, runs: dict[str, dict[int, list[dict]]]) -> tuple[Verdict, dict[int, float]]:
    """(verdict, per-seed differences) of one finding over an arm -> seed -> rows mapping."""
    def value(rows: list[dict], change: bool) -> float | None:
        later = value_at(rows, finding.metric, finding.at)
        if not change:
            return later
        earlier = value_at(rows, finding.metric, finding.baseline)
        return None if later is None or earlier is None else later - earlier

    first = runs.get(finding.arms[0], {})
    differences = {}
    idle = None
    if len(finding.arms) == 2:
        second = runs.get(finding.arms[1], {})
        for seed in sorted(set(first) & set(second)):
            a, b = value(first[seed], finding.change), value(second[seed], finding.change)
            if a is not None and b is not None:
                differences[seed] = a - b
        if identical_arms(first, second):
            idle = f"{finding.arms[0]} and {finding.arms[1]} are equal in every non-timing value"
    else:
        for seed in sorted(first):
            change = value(first[seed], True)
            if change is not None:
                differences[seed] = change
    if idle is None and finding.mechanism is not None:
        mechanism = finding.mechanism
        arm = mechanism.arm or finding.arms[0]
        acted = mechanism_value(list(runs.get(arm, {}).values()), mechanism.metric, mechanism.reduce)
        if acted is None or acted < mechanism.at_least:
            shown = "never logged" if acted is None else f"{acted:.4g}"
            idle = f"{arm}'s {mechanism.reduce} {mechanism.metric} is {shown}, under {mechanism.at_least:g}"
    verdict = paired_verdict(list(differences.values()), finding.direction, finding.untestable, idle,
                             finding.confound)
    return verdict, differences


def pairable(finding: Finding) -> bool:
    """Whether a finding is of the kind problem_paired analyses: held-out accuracy at the
    end (or its change from step 0)."""
    return finding.metric.startswith("heldout_accuracy") and finding.at == "last" and finding.baseline == 0


def problem_template(problem: str) -> str:
    """The template a held-out problem was drawn from: its id without the trailing
    instance number ("held_out/digit_sum-3" -> "held_out/digit_sum"; an id without one is
    its own template)."""
    stem, dash, instance = problem.rpartition("-")
    return stem if dash and instance.isdigit() else problem


def problem_paired(finding: Finding, scores: dict[str, dict[int, dict[str, dict]]]) -> dict | None:
    """The paired-by-problem-and-seed analysis of a held-out finding read at its last
    evaluation (from step 0 for a change), from per-problem scores (arm -> problem_scores).

    It is a statement about these trained models, not about the mechanism: it holds the
    seeds (the trained model pairs) fixed and asks how much the drawn problems blur the gap
    between them. Whether training would repeat the gap is the seeds' test's question, and
    that test already holds the problem-draw noise.

    Per seed s and problem q both sides scored, d_sq = A's score - B's (each side's change
    from step 0 with `change`, or A's change alone for one arm); mean = mean_s (mean_q d_sq).
    Two SEs of that mean, both stratified by seed (residuals e_sq = d_sq - mean_q d_sq):
    - by problem: problems independent within a seed, SE^2 = sum_s var_q(d_sq) / Q_s / S^2 on
      sum_s (Q_s - 1) degrees of freedom;
    - by template: problems of one template (problem_template) correlated, across seeds
      too; with T_c = (1/S) sum_s (1/Q_s) sum_{q in c} e_sq over the G templates, SE^2 =
      G / (G - 1) * sum_c T_c^2 on G - 1 degrees of freedom (cluster-robust, CR1).
    p is one-sided in the paper's direction for each. None when the finding is not of that
    kind or no seed has both sides' files."""
    if not pairable(finding):
        return None
    first = scores.get(finding.arms[0], {})
    second = scores.get(finding.arms[1], {}) if len(finding.arms) == 2 else None

    def per_problem(run: dict[str, dict], change: bool) -> dict[str, float] | None:
        end = run["end"].get(finding.metric)
        if end is None:
            return None
        if not change:
            return end
        start = run["start"].get(finding.metric)
        return None if start is None else {q: end[q] - start[q] for q in end if q in start}

    seeds = []  # per seed: {problem: d_sq}
    for seed in sorted(first if second is None else set(first) & set(second)):
        a = per_problem(first[seed], change=second is None or finding.change)
        b = None if second is None else per_problem(second[seed], change=finding.change)
        if a is None or (second is not None and b is None):
            continue
        d = {q: a[q] - (0.0 if b is None else b[q]) for q in sorted(a) if b is None or q in b}
        if len(d) >= 2:
            seeds.append(d)
    if not seeds:
        return None
    from scipy import stats

    def one_sided(se: float, df: int) -> float:
        signed = mean if finding.direction == "greater" else -mean
        if se == 0:
            return 0.0 if signed > 0 else 1.0 if signed < 0 else 0.5
        return float(stats.t.sf(signed / se, df))

    means = [statistics.fmean(d.values()) for d in seeds]
    mean = statistics.fmean(means)
    se = math.sqrt(sum(statistics.variance(d.values()) / len(d) for d in seeds)) / len(seeds)
    df = sum(len(d) - 1 for d in seeds)
    totals: dict[str, float] = {}
    for d, seed_mean in zip(seeds, means):
        for q, value in d.items():
            template = problem_template(q)
            totals[template] = totals.get(template, 0.0) + (value - seed_mean) / len(d) / len(seeds)
    templates = len(totals)
    template_se = math.sqrt(templates / (templates - 1) * sum(t * t for t in totals.values())) if templates > 1 else None
    return {"mean": mean, "se": se, "df": df, "p": one_sided(se, df), "seeds": len(seeds),
            "problems": sum(len(d) for d in seeds), "templates": templates, "template_se": template_se,
            "template_df": templates - 1,
            "template_p": None if template_se is None else one_sided(template_se, templates - 1)}

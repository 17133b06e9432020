"""`microcoder experiment report ROOT`: per grid, one figure and one page of numbers.

For each grid ROOT/<spec>/ (a spec.yaml beside <arm>/seed-<k>/ run directories):
- `figure.png`: one panel per metric of the spec against step (or, with the spec's
  `x_axis: relative_data`, against prompts seen / the smallest train_batch_size of the
  arms), one colour per arm, the mean over seeds as a line and, with two or more seeds,
  mean +- one standard error as a band. A step enters an arm's mean only where every seed
  of that arm logged the metric. The "time_split" panel is one stacked bar per arm: mean
  seconds per step in rollout, reward and update.
- `figure-<axis>.png` for each of the spec's `budget_axes`: the same panels against the
  cumulative training budget (groups generated, responses judged, or seconds of rollout +
  reward waited for + update), the mean over seeds of both coordinates at each step.
- `report.md`: per finding of the spec, the verdict by the rule of
  microcoder.experiments.verdict (paired-by-seed difference, SE, the one-sided t test's t
  and p, the effect detected with 80% power, the paper's effect and the power there, and
  for a held-out finding whose runs kept per-problem files the paired-by-problem-and-seed
  analysis); then per arm and metric the first and last logged value (mean +- standard
  error over seeds, and n), the mean over the last three logged points after step 0, the
  budget each arm spent, which runs are shared with another grid, and the seeds that have
  not finished. While a grid is in progress, an arm with a finished run is drawn and
  reported from its finished runs only (an arm with none, from its runs in progress);
  verdicts read finished runs alone.

With `docs`, each grid is also published for the repository: DOCS/<spec>.png (and its
budget figures), DOCS/data/<spec>/ (spec.yaml and each run's metrics.jsonl, config.yaml,
summary.json and, where the run kept them, heldout_start.json and heldout_end.json, or a
shared run's config.yaml and shared.yaml: a grid folder this command redraws from, no
checkpoints), and DOCS/<spec>.md, whose verdict table (between the
VERDICTS markers) and numbers block (between the NUMBERS markers) are rewritten while the
hand-written text around them is kept. DOCS/README.md's summary table (between the
SUMMARY markers) is rewritten from every grid published under DOCS/data, with each
finding's verdict after Holm's correction across the record (also written into each
page's verdict table), the seeds 80% power at the paper's effects needs, and the runs
whose step-0 evaluation is not published.
"""

from __future__ import annotations

import json
import math
import shutil
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import yaml

from microcoder.experiments.runner import (SHARED_FILE, START_CACHE, load_grid_spec, resolve_run, run_state,
                                           shared_target, visible_reward_seconds)
from microcoder.experiments.spec import ExperimentSpec, Finding
from microcoder.experiments.verdict import (ALPHA, CONFOUNDED, CONTRADICTED, IDLE, INCONCLUSIVE, REPRODUCED, RULE,
                                            SCORED, UNTESTABLE, Verdict, holm_verdicts, identical_arms,
                                            mechanism_value, paired_verdict, seeds_for_power, value_at)
from microcoder.training.plots import METRICS_FILE, read_metrics, series

# The reward's share is the time the step waited for the judge: with reward_overlap the
# judging is hidden behind sampling and the log-prob passes, and seconds_reward counts
# time already inside seconds_rollout. Runs from before the overlap have no visible key.
TIME_SPLIT = ("seconds_rollout", "seconds_reward_visible", "seconds_update")
NUMBERS_BEGIN = "<!-- NUMBERS: written by `microcoder experiment report --docs`; edits here are lost -->"
NUMBERS_END = "<!-- /NUMBERS -->"
VERDICTS_BEGIN = "<!-- VERDICTS: written by `microcoder experiment report --docs` by the rule below; edits here are lost -->"
VERDICTS_END = "<!-- /VERDICTS -->"
SUMMARY_BEGIN = "<!-- SUMMARY: written by `microcoder experiment report --docs` from every grid in data/; edits here are lost -->"
SUMMARY_END = "<!-- /SUMMARY -->"
COUNTS_BEGIN = "<!-- COUNTS: written by `microcoder experiment report --docs results/experiments`; edits here are lost -->"
COUNTS_END = "<!-- /COUNTS -->"
HELDOUT_FILES = ("heldout_start.json", "heldout_end.json")
"""A run's per-problem held-out scores at step 0 and at its last evaluation (training.run)."""
PUBLISHED_FILES = (METRICS_FILE, "config.yaml", "summary.json", *HELDOUT_FILES)
SHARED_FILES = ("config.yaml", SHARED_FILE)
BUDGET_AXES = {"groups_generated": "groups generated (cumulative)",
               "responses_judged": "responses judged (cumulative)",
               "seconds": "seconds: rollout + reward waited for + update (cumulative)"}
SUMMARY_ORDER = ("main", "evaluator", "evaluator_decimal", "temperature", "data", "context_length", "truncation_mask",
                 "batch_size", "kl_clip")


def with_visible_reward(rows: list[dict]) -> list[dict]:
    """Rows with `seconds_reward_visible` (= seconds_reward where a run predates it)."""
    return [{**row, "seconds_reward_visible": visible_reward_seconds(row)} if "seconds_reward" in row else row
            for row in rows]


def seed_of(run_dir: Path) -> int:
    return int(run_dir.name.split("-", 1)[1])


def seed_dirs(arm_dir: Path) -> list[Path]:
    """An arm's run folders that have metrics, or a shared record, by seed."""
    return sorted((path for path in arm_dir.glob("seed-*")
                   if (path / METRICS_FILE).is_file() or (path / SHARED_FILE).is_file()), key=seed_of)


def run_metrics(run_dir: Path) -> list[dict]:
    """A run's metrics rows, read through a shared record to the run that holds them."""
    source = resolve_run(run_dir)
    if not (source / METRICS_FILE).is_file():
        raise FileNotFoundError(f"{run_dir / SHARED_FILE}: names {source}, which has no {METRICS_FILE} "
                                "(publish or keep the grid it belongs to beside this one)")
    return read_metrics(source / METRICS_FILE)


def reported_runs(arm_dir: Path) -> list[Path]:
    """The runs an arm's curves and numbers come from: its finished runs when it has any,
    else every run that has logged a row (a grid that has only just started). A run in
    progress would otherwise cut every finished seed's curve at its own last step, and one
    that died at start (an empty metrics file) would empty it."""
    runs = seed_dirs(arm_dir)
    finished = [run for run in runs if run_state(run) == "finished"]
    return finished or [run for run in runs if run_metrics(run)]


def seed_runs(grid: Path, spec, finished_only: bool = False) -> dict[str, dict[int, list[dict]]]:
    """arm -> seed -> metrics rows (seconds_reward_visible filled in) of its reported runs,
    or with `finished_only` of its finished runs alone (what a verdict reads: a run in
    progress has no last step yet); arms without one are left out."""
    def runs_of(arm_dir: Path) -> list[Path]:
        if finished_only:
            return [run for run in seed_dirs(arm_dir) if run_state(run) == "finished"]
        return reported_runs(arm_dir)

    arms = {arm: {seed_of(run): with_visible_reward(run_metrics(run)) for run in runs_of(grid / arm)}
            for arm in spec.arms}
    return {arm: runs for arm, runs in arms.items() if runs}


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


def run_minutes(grid: Path, arm: str) -> list[tuple[float, bool, bool]]:
    """(wall minutes, shared from elsewhere, resumed) of each of an arm's reported runs that
    has a summary with `seconds` (wall time of the run's last start, held-out evaluations
    included)."""
    minutes = []
    for run in reported_runs(grid / arm):
        source = resolve_run(run)
        summary = source / "summary.json"
        record = json.loads(summary.read_text(encoding="utf-8")) if summary.is_file() else {}
        if "seconds" in record:
            minutes.append((record["seconds"] / 60, source != run, bool(record.get("resumed"))))
    return minutes


def config_values(grid: Path, arms: list[str], key: str) -> dict[str, int]:
    """Each arm's integer config `key` (e.g. train_batch_size, group_size), read from its first
    run's config.yaml."""
    values = {}
    for arm in arms:
        for run in seed_dirs(grid / arm):
            if (run / "config.yaml").is_file():
                values[arm] = int(yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))[key])
                break
    return values


def cumulative_budget(rows: list[dict], group_size: int) -> dict[int, dict[str, float]]:
    """step -> the training budget spent up to and including it: groups generated (with
    DAPO's refill rounds), responses judged (groups x group_size: every generated response
    is judged, kept or not), seconds (rollout + reward waited for + update; held-out
    evaluations not counted) and tokens (the trained batch's response tokens: tokens_per_second
    x the step's seconds, as the trainer divided them; DAPO's refill rounds' dropped groups
    are not in it). Step 0 (before training) is all zeros."""
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


def problem_scores(grid: Path, arm: str) -> dict[int, dict[str, dict]]:
    """seed -> {"start": ..., "end": ...}: the per-problem held-out scores of each finished run
    of `arm` that kept them (heldout_start.json / heldout_end.json; a shared run's are read
    where it lies). A run without both files is left out."""
    scores = {}
    for run in seed_dirs(grid / arm):
        if run_state(run) != "finished":
            continue
        source = resolve_run(run)
        paths = [source / name for name in HELDOUT_FILES]
        if all(path.is_file() for path in paths):
            start, end = (json.loads(path.read_text(encoding="utf-8")) for path in paths)
            scores[seed_of(run)] = {"start": start.get("scores", {}), "end": end.get("scores", {})}
    return scores


def problem_paired(finding: Finding, scores: dict[str, dict[int, dict[str, dict]]]) -> dict | None:
    """The paired-by-problem-and-seed analysis of a held-out finding read at its last
    evaluation (from step 0 for a change), from per-problem scores (arm -> problem_scores):
    per seed s and problem q both sides scored, d_sq = A's score - B's (each side's change
    from step 0 with `change`, or A's change alone for one arm); per seed the mean d_s and
    its problem-sampling variance var_q(d_sq) / Q_s; over seeds mean = mean_s d_s and SE^2
    = sum_s var_s / S^2 on sum_s (Q_s - 1) degrees of freedom (a seed-stratified paired
    test). Its mean is the seed analysis's; its SE holds the seeds fixed and counts only
    which problems were drawn, so it says whether a difference at these seeds is beyond
    problem-sampling noise, not whether training would repeat it. None when the finding is
    not of that kind or no seed has both sides' files."""
    if not finding.metric.startswith("heldout_accuracy") or finding.at != "last" or finding.baseline != 0:
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

    seeds = []
    for seed in sorted(first if second is None else set(first) & set(second)):
        a = per_problem(first[seed], change=second is None or finding.change)
        b = None if second is None else per_problem(second[seed], change=finding.change)
        if a is None or (second is not None and b is None):
            continue
        d = [a[q] - (0.0 if b is None else b[q]) for q in sorted(a) if b is None or q in b]
        if len(d) >= 2:
            seeds.append((statistics.fmean(d), statistics.variance(d) / len(d), len(d)))
    if not seeds:
        return None
    from scipy import stats

    mean = statistics.fmean(d for d, _, _ in seeds)
    se = math.sqrt(sum(var for _, var, _ in seeds)) / len(seeds)
    df = sum(count - 1 for _, _, count in seeds)
    signed = mean if finding.direction == "greater" else -mean
    p = (0.0 if signed > 0 else 1.0 if signed < 0 else 0.5) if se == 0 else float(stats.t.sf(signed / se, df))
    call = REPRODUCED if mean != 0 and p <= ALPHA else CONTRADICTED if mean != 0 and 1 - p <= ALPHA else INCONCLUSIVE
    return {"mean": mean, "se": se, "df": df, "p": p, "seeds": len(seeds),
            "problems": sum(count for _, _, count in seeds), "call": call}


def signed(value: float | None) -> str:
    """+0.123 / -0.123; a value that rounds to zero is +0.000 (never -0.000)."""
    return "-" if value is None else f"{round(value, 3) + 0.0:+.3f}"


def mean_cell(verdict: Verdict) -> str:
    if verdict.mean is None:
        return "-"
    return f"{signed(verdict.mean)} +- {'undefined' if verdict.se is None else f'{verdict.se:.3f}'}"


def verdict_cell(verdict: Verdict) -> str:
    return f"**{verdict.verdict}**" + (f" ({verdict.reason})" if verdict.reason else "")


def test_cell(verdict: Verdict) -> str:
    """t (df), one-sided p in the paper's direction; "-" where no test is read (a finding
    declared untestable, or a mechanism that did not act)."""
    if verdict.p is None or verdict.verdict in (UNTESTABLE, IDLE):
        return "-"
    return f"{verdict.t:.2f} ({verdict.n - 1}), p {verdict.p:.3f}"


def effect_cell(finding: Finding, verdict: Verdict) -> str:
    """The paper's effect and the test's power there."""
    if finding.paper_effect is None:
        return "-"
    power = verdict.power_at(finding.paper_effect)
    return f"{finding.paper_effect:+.3f}" + ("" if power is None else f" (power {power:.2f})")


@dataclass
class FindingRow:
    """One computed finding of a grid with everything its table rows print."""

    spec: ExperimentSpec
    grid: Path
    finding: Finding
    verdict: Verdict
    differences: dict[int, float]
    pairing: dict | None
    """problem_paired's analysis, None where there is none."""
    problem_files: bool
    """Whether any run of the finding's arms kept its per-problem held-out files."""
    minutes_per_seed: float | None
    """Mean wall minutes per run, summed over the finding's arms: what one more seed costs."""
    holm: tuple[str, float | None] | None = None
    """(verdict after Holm's correction across the record, adjusted p), once computed."""


def finding_rows(grid: Path, spec: ExperimentSpec) -> list[FindingRow]:
    """Every computed finding of a grid, from its finished runs."""
    runs = seed_runs(grid, spec, finished_only=True)
    rows = []
    for finding in spec.computed_findings:
        verdict, differences = finding_result(finding, runs)
        scores = {arm: problem_scores(grid, arm) for arm in finding.arms}
        walls = [[wall for wall, _, _ in run_minutes(grid, arm)] for arm in finding.arms]
        minutes = sum(statistics.fmean(wall) for wall in walls) if all(walls) else None
        rows.append(FindingRow(spec, grid, finding, verdict, differences, problem_paired(finding, scores),
                               any(scores.values()), minutes))
    return rows


def pairing_cell(row: FindingRow) -> str:
    """The paired-by-problem-and-seed analysis of a held-out finding, and whether it would
    change the verdict; "-" for a finding of another kind."""
    finding = row.finding
    if not finding.metric.startswith("heldout_accuracy") or finding.at != "last" or finding.baseline != 0:
        return "-"
    pairing = row.pairing
    if pairing is None:
        return "no per-problem files published" if not row.problem_files else "-"
    same = row.verdict.verdict not in SCORED or pairing["call"] == row.verdict.verdict
    return (f"{signed(pairing['mean'])} +- {pairing['se']:.3f} ({pairing['seeds']} seeds, {pairing['problems']} "
            f"problem-results), p {pairing['p']:.3f}: {pairing['call']}"
            + ("" if same else f", where the seeds' test says {row.verdict.verdict}"))


def holm_cell(row: FindingRow) -> str:
    if row.holm is None or row.holm[1] is None:
        return "-"
    return f"{row.holm[0]} (p {row.holm[1]:.3f})"


def verdicts_text(rows: list[FindingRow], quoted: list[str], holm_family: int | None = None) -> str:
    """The findings table of a grid (markdown), with the rule; quoted claims for string findings.
    With `holm_family` (the record's count of scored findings), each row's verdict after Holm."""
    lines = [RULE, ""]
    holm_header = f" after Holm (m = {holm_family}) |" if holm_family is not None else ""
    if rows:
        lines += [f"| # | the paper's claim | comparison | per seed | mean +- SE | t in the paper's direction (df), "
                  f"one-sided p | detectable (80% power) | paper's effect (power) | verdict |{holm_header} "
                  "by problem and seed |",
                  "|---|---|---|---|---|---|---|---|---|" + ("---|" if holm_header else "") + "---|"]
    for index, row in enumerate(rows, start=1):
        finding, verdict = row.finding, row.verdict
        per_seed = ", ".join(f"{seed}: {signed(value)}" for seed, value in row.differences.items()) or "-"
        mde = "-" if verdict.mde is None else f"{verdict.mde:.3f}"
        holm = f" {holm_cell(row)} |" if holm_header else ""
        lines.append(f"| {index} | {finding.claim} | {finding.label} ({finding.direction} in the paper) | {per_seed} "
                     f"| {mean_cell(verdict)} | {test_cell(verdict)} | {mde} | {effect_cell(finding, verdict)} "
                     f"| {verdict_cell(verdict)} |{holm} {pairing_cell(row)} |")
    if quoted:
        lines += ["", *(f"> {finding}" for finding in quoted), "", "(Quoted only: no comparison declared, no verdict.)"]
    return "\n".join(lines)


def report_grid(grid: Path) -> tuple[Path, Path]:
    """Write grid/figure.png (and grid/figure-<axis>.png per budget axis) and grid/report.md;
    returns the paths of the figure and the report."""
    spec = load_grid_spec(grid)
    by_seed = seed_runs(grid, spec)
    arms = {arm: list(runs.values()) for arm, runs in by_seed.items()}
    if not arms:
        raise FileNotFoundError(f"{grid}: no run has logged metrics yet")
    scale = {arm: 1.0 for arm in arms}
    if spec.x_axis == "relative_data":
        sizes = config_values(grid, list(arms), "train_batch_size")
        if len(sizes) != len(arms):
            raise FileNotFoundError(f"{grid}: x_axis relative_data needs each arm's config.yaml")
        scale = {arm: size / min(sizes.values()) for arm, size in sizes.items()}
    figure_path = grid / "figure.png"
    draw_figure(spec, arms, scale, figure_path)
    budgets = budget_curves(grid, by_seed)
    for axis in spec.budget_axes:
        draw_figure(spec, arms, scale, grid / f"figure-{axis}.png", budget=(axis, budgets))
    report_path = grid / "report.md"
    quoted = [finding for finding in spec.findings if isinstance(finding, str)]
    verdicts = verdicts_text(finding_rows(grid, spec), quoted)
    report_path.write_text(f"# {spec.name}\n\n## Findings\n\n{verdicts}\n\n## Numbers\n\n"
                           f"{numbers_page(spec, arms, grid, budgets)}", encoding="utf-8")
    return figure_path, report_path


def budget_curves(grid: Path, by_seed: dict[str, dict[int, list[dict]]]) -> dict[str, list[dict[int, dict]]]:
    """arm -> each reported run's cumulative_budget (in the order of its runs)."""
    sizes = config_values(grid, list(by_seed), "group_size")
    return {arm: [cumulative_budget(rows, sizes.get(arm, 1)) for rows in runs.values()] for arm, runs in by_seed.items()}


def draw_figure(spec, arms: dict[str, list[list[dict]]], scale: dict[str, float], path: Path,
                budget: tuple[str, dict[str, list[dict[int, dict]]]] | None = None) -> None:
    """The spec's panels against step (or relative data), or with `budget` (axis, arm ->
    each run's cumulative budget) against that budget, the mean over seeds at each step."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    columns = 2 if len(spec.metrics) > 1 else 1
    rows = math.ceil(len(spec.metrics) / columns)
    figure = Figure(figsize=(5.5 * columns, 3.8 * rows), layout="constrained")
    FigureCanvasAgg(figure)
    axes = list(figure.subplots(rows, columns, squeeze=False).flat)
    x_label = "step" if spec.x_axis == "step" else "relative data (prompts seen / smallest batch)"
    if budget is not None:
        x_label = BUDGET_AXES[budget[0]]
    colours = {arm: f"C{index % 10}" for index, arm in enumerate(spec.arms)}
    for axis, key in zip(axes, spec.metrics):
        if key == "time_split":
            draw_time_split(axis, arms, colours)
            continue
        for arm, runs in arms.items():
            steps, means, errors = arm_curve(runs, key)
            if not steps:
                continue
            if budget is not None:
                axis_name, spent = budget
                pairs = [(x, mean, error) for step, mean, error in zip(steps, means, errors)
                         if all(step in run for run in spent[arm])
                         for x in [statistics.fmean(run[step][axis_name] for run in spent[arm])]]
                if not pairs:
                    continue
                xs, means, errors = (list(column) for column in zip(*pairs))
            else:
                xs = [step * scale[arm] for step in steps]
            marker = "o" if key.startswith("heldout_accuracy") or len(steps) < 3 else None
            axis.plot(xs, means, color=colours[arm], marker=marker, markersize=4, label=f"{arm} (n={len(runs)})")
            if len(runs) > 1:
                axis.fill_between(xs, [m - e for m, e in zip(means, errors)], [m + e for m, e in zip(means, errors)],
                                  color=colours[arm], alpha=0.2)
        axis.set_title(key)
        axis.grid(alpha=0.3)
        if spec.x_axis == "step" and budget is None:
            axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_xlabel(x_label)
    for axis in axes[len(spec.metrics):]:
        axis.set_visible(False)
    handles, labels = [], []
    for axis in axes:
        for handle, label in zip(*axis.get_legend_handles_labels()):
            if label not in labels and not label.startswith("seconds"):
                handles.append(handle)
                labels.append(label)
    if handles:
        figure.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4))
    against = "" if budget is None else f" against {budget[0].replace('_', ' ')}"
    figure.suptitle(f"{spec.name}{against}: mean over seeds, band +- 1 standard error")
    figure.savefig(path, dpi=110)


def draw_time_split(axis, arms: dict[str, list[list[dict]]], colours: dict[str, str]) -> None:
    """One stacked bar per arm: mean seconds per step in rollout, reward and update."""
    names = list(arms)
    bottoms = [0.0] * len(names)
    for shade, key in zip((1.0, 0.6, 0.3), TIME_SPLIT):
        heights = []
        for arm in names:
            values = [value for rows in arms[arm] for value in series(rows, key)[1]]
            heights.append(statistics.fmean(values) if values else 0.0)
        axis.bar(names, heights, bottom=bottoms, color=[colours[arm] for arm in names], alpha=shade,
                 edgecolor="black", linewidth=0.5, label=key)
        for index, (bottom, height) in enumerate(zip(bottoms, heights)):
            if height > 0:
                axis.text(index, bottom + height / 2, key.removeprefix("seconds_").removesuffix("_visible"),
                          ha="center", va="center",
                          fontsize=7)
        bottoms = [bottom + height for bottom, height in zip(bottoms, heights)]
    axis.set_title("seconds per step: rollout / reward (waited for) / update")
    axis.tick_params(axis="x", labelrotation=20)
    axis.grid(alpha=0.3, axis="y")


def judge_error_runs(grid: Path, spec) -> list[str]:
    """The reported runs that logged judge errors, with where: training steps with
    fraction_unscorable > 0, and held-out evaluations whose every sample was one (logged
    as NaN, which the curves and tables leave out)."""
    found = []
    for arm in spec.arms:
        for run in reported_runs(grid / arm):
            metrics = run_metrics(run)
            rows = [row for row in metrics if row.get("fraction_unscorable")]
            if rows:
                worst = max(row["fraction_unscorable"] for row in rows)
                found.append(f"{arm}/{run.name} (steps {rows[0]['step']}-{rows[-1]['step']}, up to {worst:.0%})")
            unmeasured = [row["step"] for row in metrics for key in ("heldout_accuracy", "heldout_accuracy_long")
                          if isinstance(row.get(key), float) and math.isnan(row[key])]
            if unmeasured:
                found.append(f"{arm}/{run.name} (held-out all judge errors at step "
                             f"{', '.join(map(str, sorted(set(unmeasured))))})")
    return found


def numbers_page(spec, arms: dict[str, list[list[dict]]], grid: Path,
                 budgets: dict[str, list[dict[int, dict]]]) -> str:
    lines = ["| arm | metric | first (mean +- SE) | last (mean +- SE) | last 3 points after step 0 (mean +- SE) "
             "| last - first, paired by seed (mean +- SE) | last step | n |",
             "|---|---|---|---|---|---|---|---|"]
    for arm, runs in arms.items():
        for key in spec.metrics:
            if key == "time_split":
                for part in TIME_SPLIT:
                    tail = tail_mean(runs, part, points=10**9)
                    shown = f"{tail[0]:.1f} +- {tail[1]:.1f} s" if tail else "-"
                    lines.append(f"| {arm} | {part} (all steps) | | | {shown} | | | {len(runs)} |")
                continue
            steps, means, errors = arm_curve(runs, key)
            if not steps:
                lines.append(f"| {arm} | {key} | - | - | - | - | - | {len(runs)} |")
                continue
            tail = tail_mean(runs, key)  # None: nothing logged after step 0 yet (a run in progress)
            shown = f"{tail[0]:.3f} +- {tail[1]:.3f}" if tail else "-"
            change = paired_change(runs, key)
            moved = f"{change[0]:+.3f} +- {change[1]:.3f}" if change else "-"
            lines.append(f"| {arm} | {key} | {means[0]:.3f} +- {errors[0]:.3f} | {means[-1]:.3f} +- {errors[-1]:.3f} "
                         f"| {shown} | {moved} | {steps[-1]} | {len(runs)} |")
    lines += ["", "Budget spent per run (mean +- SE over seeds, to the last step): groups generated (refill "
              "rounds counted), responses judged, tokens of the trained batches' responses (refill rounds' "
              "dropped groups not counted), and seconds of rollout + reward waited for + update "
              "(held-out evaluations not counted); and each run's wall minutes (summary.json `seconds`: "
              "held-out evaluations counted, step 0's too where the run made it). Arms with equal groups "
              "generated need not have spent equal tokens or seconds.", "",
              "| arm | groups generated | responses judged | tokens | seconds | wall minutes per run (min-max) | n |",
              "|---|---|---|---|---|---|---|"]
    own, shared_minutes, resumed = 0.0, 0.0, []
    for arm, spent in budgets.items():
        totals = [run[max(run)] for run in spent]
        cells = []
        for key, digits in (("groups_generated", 1), ("responses_judged", 1), ("tokens", 0), ("seconds", 0)):
            mean, error = mean_and_error([total[key] for total in totals])
            cells.append(f"{mean:.{digits}f} +- {error:.{digits}f}")
        minutes = run_minutes(grid, arm)
        walls = [wall for wall, _, _ in minutes]
        cells.append(f"{min(walls):.1f}-{max(walls):.1f}" if walls else "-")
        own += sum(wall for wall, elsewhere, _ in minutes if not elsewhere)
        shared_minutes += sum(wall for wall, elsewhere, _ in minutes if elsewhere)
        resumed += [arm for _, _, again in minutes if again]
        lines.append(f"| {arm} | {' | '.join(cells)} | {len(spent)} |")
    if own or shared_minutes:
        lines += ["", f"Wall minutes in all: {own:.0f} in this grid's own runs"
                  + (f", {shared_minutes:.0f} more in the runs it shares with other grids" if shared_minutes else "")
                  + (f"; {len(resumed)} resumed run(s) ({', '.join(sorted(set(resumed)))}) count from the resume"
                     if resumed else "") + "."]
    shared = [f"{arm}/{run.name} is {shared_target(run).relative_to(grid.parent).as_posix()}"
              for arm in spec.arms for run in seed_dirs(grid / arm) if shared_target(run) is not None]
    if shared:
        lines += ["", f"Shared runs (the same resolved config and seed, run once and read from there): "
                  f"{'; '.join(shared)}."]
    unjudged = judge_error_runs(grid, spec)
    if unjudged:
        # A judge error is no reward, not a wrong answer: a run with many trained on a
        # fraction of its batch, and a held-out evaluation with every sample unjudged
        # measured nothing (NaN, missing from its curve).
        lines += ["", f"**Runs with judge errors: {', '.join(unjudged)}.** "
                  "Their numbers are not the method's; find the cause before comparing."]
    unfinished = [f"{arm}/seed-{seed}" for arm in spec.arms for seed in spec.seeds
                  if run_state(grid / arm / f"seed-{seed}") != "finished"]
    lines += ["", f"Runs not finished: {', '.join(unfinished) if unfinished else 'none'}"
              + (" (an arm with a finished run is reported from its finished runs only; n counts them)."
                 if unfinished else "."), ""]
    return "\n".join(lines)


def publish(grid: Path, docs: Path) -> Path:
    """Copy a reported grid's figures and small per-run files under `docs`; refresh
    DOCS/<name>.md's verdict table and numbers."""
    spec = load_grid_spec(grid)
    data = docs / "data" / spec.name
    data.mkdir(parents=True, exist_ok=True)
    _copy(grid / "spec.yaml", data / "spec.yaml")
    for arm in spec.arms:
        # A mirror: a run the grid no longer has (deleted to be redone) leaves the docs too.
        for stale in (data / arm).glob("seed-*") if (data / arm).is_dir() else ():
            if not (grid / arm / stale.name).exists():
                shutil.rmtree(stale)
        for run in seed_dirs(grid / arm):
            target = data / arm / run.name
            target.mkdir(parents=True, exist_ok=True)
            names = SHARED_FILES if shared_target(run) is not None else PUBLISHED_FILES
            for name in (*PUBLISHED_FILES, SHARED_FILE):
                if name in names and (run / name).is_file():
                    _copy(run / name, target / name)
                elif (target / name).is_file():
                    (target / name).unlink()  # e.g. the summary of a run that is being redone
    publish_start_cache(grid, docs / "data" / START_CACHE)
    figures = ["figure.png", *(f"figure-{axis}.png" for axis in spec.budget_axes)]
    for figure in figures:
        _copy(grid / figure, docs / f"{spec.name}{figure.removeprefix('figure')}")
    report = (grid / "report.md").read_text(encoding="utf-8")
    verdicts = report.split("## Findings\n", 1)[1].split("\n## Numbers\n", 1)[0].strip()
    numbers = report.split("\n## Numbers\n", 1)[1].strip()
    links = ", ".join(f"[{spec.name}{name.removeprefix('figure')}]({spec.name}{name.removeprefix('figure')})"
                      for name in figures)
    block = f"{NUMBERS_BEGIN}\n{numbers}\n\nFigures: {links}; redraw: " \
            f"`microcoder experiment report {docs / 'data' / spec.name}`.\n{NUMBERS_END}"
    verdict_block = f"{VERDICTS_BEGIN}\n{verdicts}\n{VERDICTS_END}"
    page = docs / f"{spec.name}.md"
    if page.is_file():
        text = page.read_text(encoding="utf-8")
        text = replace_block(page, text, NUMBERS_BEGIN, NUMBERS_END, block)
        if VERDICTS_BEGIN not in text and "## Verdict\n" in text:  # a page from before computed verdicts
            head, rest = text.split("## Verdict\n", 1)
            text = f"{head}## Verdict\n\n{verdict_block}\n{rest}"
        text = replace_block(page, text, VERDICTS_BEGIN, VERDICTS_END, verdict_block)
    else:
        text = (f"# {spec.name}\n\n![{spec.name}]({spec.name}.png)\n\n## Verdict\n\n{verdict_block}\n\n"
                f"No reading written yet: what the numbers below show beside each verdict (prose explains a "
                f"verdict, never overrides it).\n\n## Numbers\n\n{block}\n")
    page.write_text(text, encoding="utf-8")
    return page


def replace_block(page: Path, text: str, begin: str, end: str, block: str) -> str:
    """`text` with what lies between the markers `begin` ... `end` (both included) replaced by `block`."""
    if begin not in text or end not in text:
        raise ValueError(f"{page}: has no block to refresh (markers {begin!r} ... {end!r})")
    head, rest = text.split(begin, 1)
    return head + block + rest.split(end, 1)[1]


def published_rows(data: Path) -> list[FindingRow]:
    """Every computed finding of every grid under `data` (a published DOCS/data), grids in
    SUMMARY_ORDER, with its verdict after Holm's correction across the scored ones."""
    grids = sorted((path.parent for path in data.glob("*/spec.yaml")),
                   key=lambda grid: (SUMMARY_ORDER.index(grid.name) if grid.name in SUMMARY_ORDER
                                     else len(SUMMARY_ORDER), grid.name))
    rows = [row for grid in grids for row in finding_rows(grid, load_grid_spec(grid))]
    for row, corrected in zip(rows, holm_verdicts([row.verdict for row in rows])):
        row.holm = corrected
    return rows


def scored_count(rows: list[FindingRow]) -> int:
    """The findings a test decided: Holm's family."""
    return sum(row.verdict.verdict in SCORED and row.verdict.p is not None for row in rows)


def summary_table(rows: list[FindingRow]) -> str:
    """One row per finding of `published_rows`: aspect, claim, comparison, mean +- SE, the
    t test, the detectable effect, the paper's effect and the power there, the verdict and
    the verdict after Holm; then the seeds that 80% power at the paper's effect needs."""
    lines = [RULE, "", f"| aspect | the paper's claim | comparison | mean +- SE (n) | t in the paper's direction (df), "
             f"one-sided p | detectable (80% power) | paper's effect (power) | verdict "
             f"| after Holm (m = {scored_count(rows)}) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        spec, finding, verdict = row.spec, row.finding, row.verdict
        mde = "-" if verdict.mde is None else f"{verdict.mde:.3f}"
        lines.append(f"| [{spec.name}]({spec.name}.md) | {finding.claim} | {finding.label} | "
                     f"{mean_cell(verdict)} ({verdict.n}) | {test_cell(verdict)} | {mde} | "
                     f"{effect_cell(finding, verdict)} | {verdict_cell(verdict)} | {holm_cell(row)} |")
    heldout = [row for row in rows if pairing_cell(row) != "-"]
    paired = [row for row in heldout if row.pairing is not None]
    lines += ["", f"Paired by problem and seed (each page's last column): {len(paired)} of the {len(heldout)} held-out "
              "findings have per-problem files for every seed"
              + (", where the runs kept heldout_start.json and heldout_end.json." if paired else
                 "; the published runs predate publishing them, and only a rerun of their grids can add them.")]
    power_rows = [row for row in rows if row.finding.paper_effect is not None and row.verdict.se
                  and row.verdict.verdict in SCORED]
    if power_rows:
        lines += ["", "Seeds for 80% power at the paper's effect, from each finding's measured per-seed sd of the "
                  "difference (`seeds_for_power`), and what that many seeds of the finding's arms would take at "
                  "their measured wall minutes per run (run-hours; hours two at a time on 2 cores):", "",
                  "| aspect | comparison | paper's effect | per-seed sd | power now (n) | seeds for 80% | run-hours "
                  "| hours two at a time |", "|---|---|---|---|---|---|---|---|"]
        for row in power_rows:
            verdict, finding = row.verdict, row.finding
            seeds = seeds_for_power(finding.paper_effect, verdict.sd)
            hours = None if seeds is None or row.minutes_per_seed is None else seeds * row.minutes_per_seed / 60
            lines.append(f"| {row.spec.name} | {finding.label} | {finding.paper_effect:+.3f} | {verdict.sd:.3f} "
                         f"| {verdict.power_at(finding.paper_effect):.2f} ({verdict.n}) "
                         f"| {'over 10,000' if seeds is None else seeds} "
                         f"| {'-' if hours is None else f'{hours:.1f}'} "
                         f"| {'-' if hours is None else f'{hours / 2:.1f}'} |")
        for first in {row.spec.name: row for row in power_rows}.values():
            needed = [seeds_for_power(row.finding.paper_effect, row.verdict.sd) for row in power_rows
                      if row.spec.name == first.spec.name]
            walls = [[wall for wall, _, _ in run_minutes(first.grid, arm)] for arm in first.spec.arms]
            if None in needed or not all(walls):
                continue
            per_seed = sum(statistics.fmean(wall) for wall in walls) / 60
            more = max(needed) - first.verdict.n
            lines += ["", f"{first.spec.name} at {max(needed)} seeds (the most any of its findings above needs), each "
                      f"of its {len(walls)} arms: {max(needed) * per_seed:.1f} run-hours, "
                      f"{max(needed) * per_seed / 2:.1f} h "
                      f"two at a time at the measured minutes per run"
                      + (f"; the {more} seeds not yet run, {more * per_seed:.1f} run-hours "
                         f"({more * per_seed / 2:.1f} h two at a time)." if more > 0 else ".")]
    return "\n".join(lines)


def verdict_counts(rows: list[FindingRow]) -> str:
    """One sentence counting the verdicts of `published_rows`, in the rule's order, raw and
    after Holm's correction: "Of 39 findings, 30 scored: 8 reproduced, ...; after Holm ...". """
    counts = Counter(row.verdict.verdict for row in rows)
    corrected = Counter(row.holm[0] for row in rows if row.holm is not None and row.holm[1] is not None)
    scored = scored_count(rows)
    raw = ", ".join(f"{counts[name]} {name}" for name in SCORED if counts[name])
    after = ", ".join(f"{corrected[name]} {name}" for name in SCORED if corrected[name])
    others = ", ".join(f"{counts[name]} {name}" for name in (CONFOUNDED, UNTESTABLE, IDLE) if counts[name])
    text = f"Of {len(rows)} findings, {scored} scored by a one-sided t test at 5%: {raw or 'none'}"
    if scored:
        text += f"; after Holm's correction across the {scored}: {after}"
    return text + (f"; not scored: {others}." if others else ".")


def unpublished_start_caches(data: Path) -> dict[str, str]:
    """The runs of a published record (`data`: DOCS/data) that read a step-0 cache and whose
    step-0 evaluation is not among data/heldout-start's: a run of the same config and seed
    that trains (a rerun, a restore with a run missing) evaluates its starting model again.
    <spec>/<arm>/seed-<k> -> the evaluation's key (runs of one seed and limit share one), or
    for a run whose config or problems do not load here (a file of another machine), why."""
    from microcoder.training.config import TrainConfig
    from microcoder.training.run import load_problem_split, start_key

    published = {path.name.removeprefix("heldout-start-").removesuffix(".json")
                 for path in (data / START_CACHE).glob("heldout-start-*.json")}
    missing = {}
    for config_path in sorted(data.glob("*/*/seed-*/config.yaml")):
        run = config_path.parent
        if shared_target(run) is not None:
            continue
        name = run.relative_to(data).as_posix()
        try:
            config = TrainConfig.model_validate(yaml.safe_load(config_path.read_text(encoding="utf-8")))
            if config.heldout_start_cache is None:
                continue
            heldout = load_problem_split(config)[1]
        except (OSError, ValueError) as error:  # pydantic's ValidationError is a ValueError
            missing[name] = f"its config or held-out problems do not load here: {error}"
            continue
        key = start_key(config, heldout) if heldout else None
        if key is not None and key not in published:
            missing[name] = key
    return missing


def publish_summary(docs: Path) -> Path:
    """Rewrite the SUMMARY block of DOCS/README.md from every grid under DOCS/data, each
    published page's VERDICTS block with the verdicts after Holm's correction across them,
    and the COUNTS line of the repository README two folders up when it has one
    (results/experiments -> README.md)."""
    readme = docs / "README.md"
    rows = published_rows(docs / "data")
    front = docs.parent.parent / "README.md"
    if front.is_file() and COUNTS_BEGIN in (front_text := front.read_text(encoding="utf-8")):
        line = f"{COUNTS_BEGIN}\n{verdict_counts(rows)}\n{COUNTS_END}"
        front.write_text(replace_block(front, front_text, COUNTS_BEGIN, COUNTS_END, line), encoding="utf-8")
    family = scored_count(rows)
    for spec in {row.spec.name: row.spec for row in rows}.values():
        page = docs / f"{spec.name}.md"
        if page.is_file() and VERDICTS_BEGIN in (text := page.read_text(encoding="utf-8")):
            own = [row for row in rows if row.spec.name == spec.name]
            quoted = [finding for finding in spec.findings if isinstance(finding, str)]
            block = f"{VERDICTS_BEGIN}\n{verdicts_text(own, quoted, family)}\n{VERDICTS_END}"
            page.write_text(replace_block(page, text, VERDICTS_BEGIN, VERDICTS_END, block), encoding="utf-8")
    missing = unpublished_start_caches(docs / "data")
    caches = ("Every published run's step-0 evaluation is in data/heldout-start/, so `run --restore` of the "
              "record evaluates nothing." if not missing else
              f"Step-0 evaluations not in data/heldout-start/ ({len(set(missing.values()))}, read by "
              f"{len(missing)} runs; a run of the same config and seed that trains evaluates its starting model "
              f"again, and nothing can pair these runs' step 0 by problem): {', '.join(missing)}.")
    block = f"{SUMMARY_BEGIN}\n{summary_table(rows)}\n\n{caches}\n{SUMMARY_END}"
    if readme.is_file():
        text = replace_block(readme, readme.read_text(encoding="utf-8"), SUMMARY_BEGIN, SUMMARY_END, block)
    else:
        text = f"# Experiments\n\n## Summary\n\n{block}\n"
    readme.write_text(text, encoding="utf-8")
    return readme


def publish_start_cache(grid: Path, target: Path) -> None:
    """Copy every step-0 held-out evaluation in the cache folders the grid's runs read from
    (their heldout_start_cache; one folder is shared by the grids of a runs root, so others'
    come too) to `target`, so that a later sitting restoring the grid (`run --restore`) reads
    them instead of evaluating each seed's starting model again."""
    caches = set()
    for config_path in grid.glob("*/seed-*/config.yaml"):
        cache = (yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}).get("heldout_start_cache")
        if cache and Path(cache).is_dir():
            caches.add(Path(cache))
    for cache in sorted(caches):
        for path in sorted(cache.glob("heldout-start-*.json")):
            target.mkdir(parents=True, exist_ok=True)
            _copy(path, target / path.name)


def _copy(source: Path, target: Path) -> None:
    """Copy, unless `target` is `source` (redrawing a published grid in place)."""
    if not (target.exists() and target.samefile(source)):
        shutil.copyfile(source, target)


def report_all(root: str | Path, docs: str | Path | None = None) -> list[tuple[Path, Path]]:
    """report_grid for every grid (a folder with spec.yaml) under `root`, or `root` itself;
    with `docs`, publish each there too."""
    root = Path(root)
    grids = [root] if (root / "spec.yaml").is_file() else sorted(path.parent for path in root.glob("*/spec.yaml"))
    if not grids:
        raise FileNotFoundError(f"{root}: no experiment grid (a folder with spec.yaml) here")
    outputs = []
    for grid in grids:
        outputs.append(report_grid(grid))
        if docs is not None:
            publish(grid, Path(docs))
    if docs is not None:
        publish_summary(Path(docs))
    return outputs

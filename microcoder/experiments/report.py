"""`microcoder experiment report ROOT`: per grid, one figure and one page of numbers.

For each grid ROOT/<spec>/ (a spec.yaml beside <arm>/seed-<k>/ run directories):
- `figure.png`: one panel per metric of the spec against step (or, with the spec's
  `x_axis: relative_data`, against prompts seen / the smallest train_batch_size of the
  arms), one colour per arm, the mean over seeds as a line and, with two or more seeds,
  mean +- one standard error as a band. A step enters an arm's mean only where every seed
  of that arm logged the metric. The "time_split" panel is one stacked bar per arm: mean
  seconds per step in rollout, reward and update.
- `report.md`: the paper's findings (quoted from the spec), then per arm and metric the
  first and last logged value (mean +- standard error over seeds, and n), the mean over
  the last three logged points, and the seeds that have not finished. While a grid is in
  progress, an arm with a finished run is drawn and reported from its finished runs only. Verdicts are
  written by hand from these numbers (docs/experiments/); the report states numbers only.

With `docs`, each grid is also published for the repository: DOCS/<spec>.png (the
figure), DOCS/data/<spec>/ (spec.yaml and each run's metrics.jsonl, config.yaml and
summary.json: a grid folder this command redraws from, no checkpoints), and
DOCS/<spec>.md, whose numbers block (between the NUMBERS markers) is rewritten while the
hand-written verdict around it is kept.
"""

from __future__ import annotations

import math
import shutil
import statistics
from pathlib import Path

import yaml

from microcoder.experiments.runner import load_grid_spec, run_state, visible_reward_seconds
from microcoder.training.plots import METRICS_FILE, read_metrics, series

# The reward's share is the time the step waited for the judge: with reward_overlap the
# judging is hidden behind sampling and the log-prob passes, and seconds_reward counts
# time already inside seconds_rollout. Runs from before the overlap have no visible key.
TIME_SPLIT = ("seconds_rollout", "seconds_reward_visible", "seconds_update")
NUMBERS_BEGIN = "<!-- NUMBERS: written by `microcoder experiment report --docs`; edits here are lost -->"
NUMBERS_END = "<!-- /NUMBERS -->"
PUBLISHED_FILES = (METRICS_FILE, "config.yaml", "summary.json")


def with_visible_reward(rows: list[dict]) -> list[dict]:
    """Rows with `seconds_reward_visible` (= seconds_reward where a run predates it)."""
    return [{**row, "seconds_reward_visible": visible_reward_seconds(row)} if "seconds_reward" in row else row
            for row in rows]


def seed_dirs(arm_dir: Path) -> list[Path]:
    return sorted((path for path in arm_dir.glob("seed-*") if (path / METRICS_FILE).is_file()),
                  key=lambda path: int(path.name.split("-", 1)[1]))


def reported_runs(arm_dir: Path) -> list[Path]:
    """The runs an arm's curves and numbers come from: its finished runs when it has any,
    else every run that has logged a row (a grid that has only just started). A run in
    progress would otherwise cut every finished seed's curve at its own last step, and one
    that died at start (an empty metrics file) would empty it."""
    runs = seed_dirs(arm_dir)
    finished = [run for run in runs if run_state(run) == "finished"]
    return finished or [run for run in runs if read_metrics(run / METRICS_FILE)]


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
    """Mean +- SE over seeds of each seed's mean over its last `points` logged values of `key`."""
    per_seed = []
    for rows in runs:
        values = series(rows, key)[1]
        if values:
            per_seed.append(statistics.fmean(values[-points:]))
    return mean_and_error(per_seed) if per_seed else None


def batch_sizes(grid: Path, arms: list[str]) -> dict[str, int]:
    """Each arm's train_batch_size, read from its first run's config.yaml."""
    sizes = {}
    for arm in arms:
        for run in seed_dirs(grid / arm):
            if (run / "config.yaml").is_file():
                sizes[arm] = int(yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))["train_batch_size"])
                break
    return sizes


def report_grid(grid: Path) -> tuple[Path, Path]:
    """Write grid/figure.png and grid/report.md; returns their paths."""
    spec = load_grid_spec(grid)
    arms = {arm: [with_visible_reward(read_metrics(path / METRICS_FILE)) for path in reported_runs(grid / arm)]
            for arm in spec.arms}
    arms = {arm: runs for arm, runs in arms.items() if runs}
    if not arms:
        raise FileNotFoundError(f"{grid}: no run has logged metrics yet")
    scale = {arm: 1.0 for arm in arms}
    if spec.x_axis == "relative_data":
        sizes = batch_sizes(grid, list(arms))
        if len(sizes) != len(arms):
            raise FileNotFoundError(f"{grid}: x_axis relative_data needs each arm's config.yaml")
        scale = {arm: size / min(sizes.values()) for arm, size in sizes.items()}
    figure_path = grid / "figure.png"
    draw_figure(spec, arms, scale, figure_path)
    report_path = grid / "report.md"
    report_path.write_text(numbers_page(spec, arms, grid), encoding="utf-8")
    return figure_path, report_path


def draw_figure(spec, arms: dict[str, list[list[dict]]], scale: dict[str, float], path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    columns = 2 if len(spec.metrics) > 1 else 1
    rows = math.ceil(len(spec.metrics) / columns)
    figure = Figure(figsize=(5.5 * columns, 3.8 * rows), layout="constrained")
    FigureCanvasAgg(figure)
    axes = list(figure.subplots(rows, columns, squeeze=False).flat)
    x_label = "step" if spec.x_axis == "step" else "relative data (prompts seen / smallest batch)"
    colours = {arm: f"C{index % 10}" for index, arm in enumerate(spec.arms)}
    for axis, key in zip(axes, spec.metrics):
        if key == "time_split":
            draw_time_split(axis, arms, colours)
            continue
        for arm, runs in arms.items():
            steps, means, errors = arm_curve(runs, key)
            if not steps:
                continue
            xs = [step * scale[arm] for step in steps]
            marker = "o" if key.startswith("heldout_accuracy") or len(steps) < 3 else None
            axis.plot(xs, means, color=colours[arm], marker=marker, markersize=4, label=f"{arm} (n={len(runs)})")
            if len(runs) > 1:
                axis.fill_between(xs, [m - e for m, e in zip(means, errors)], [m + e for m, e in zip(means, errors)],
                                  color=colours[arm], alpha=0.2)
        axis.set_title(key)
        axis.grid(alpha=0.3)
        if spec.x_axis == "step":
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
    figure.suptitle(f"{spec.name}: mean over seeds, band +- 1 standard error")
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
            metrics = read_metrics(run / METRICS_FILE)
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


def numbers_page(spec, arms: dict[str, list[list[dict]]], grid: Path) -> str:
    lines = [f"# {spec.name}", ""]
    for finding in spec.findings:
        lines += [f"> {finding}", ""]
    lines += ["| arm | metric | first (mean +- SE) | last (mean +- SE) | last 3 points (mean +- SE) | last step | n |",
              "|---|---|---|---|---|---|---|"]
    for arm, runs in arms.items():
        for key in spec.metrics:
            if key == "time_split":
                for part in TIME_SPLIT:
                    tail = tail_mean(runs, part, points=10**9)
                    shown = f"{tail[0]:.1f} +- {tail[1]:.1f} s" if tail else "-"
                    lines.append(f"| {arm} | {part} (all steps) | | | {shown} | | {len(runs)} |")
                continue
            steps, means, errors = arm_curve(runs, key)
            if not steps:
                lines.append(f"| {arm} | {key} | - | - | - | - | {len(runs)} |")
                continue
            tail = tail_mean(runs, key)
            lines.append(f"| {arm} | {key} | {means[0]:.3f} +- {errors[0]:.3f} | {means[-1]:.3f} +- {errors[-1]:.3f} "
                         f"| {tail[0]:.3f} +- {tail[1]:.3f} | {steps[-1]} | {len(runs)} |")
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
    """Copy a reported grid's figure and small per-run files under `docs`; refresh DOCS/<name>.md's numbers."""
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
            for name in PUBLISHED_FILES:
                if (run / name).is_file():
                    _copy(run / name, target / name)
                elif (target / name).is_file():
                    (target / name).unlink()  # e.g. the summary of a run that is being redone
    _copy(grid / "figure.png", docs / f"{spec.name}.png")
    numbers = (grid / "report.md").read_text(encoding="utf-8").split("\n", 2)[2]  # without its title
    block = f"{NUMBERS_BEGIN}\n{numbers.strip()}\n\nFigure: [{spec.name}.png]({spec.name}.png); redraw: " \
            f"`microcoder experiment report {docs / 'data' / spec.name}`.\n{NUMBERS_END}"
    page = docs / f"{spec.name}.md"
    if page.is_file():
        text = page.read_text(encoding="utf-8")
        if NUMBERS_BEGIN not in text or NUMBERS_END not in text:
            raise ValueError(f"{page}: has no NUMBERS block to refresh (markers {NUMBERS_BEGIN!r} ... {NUMBERS_END!r})")
        head, rest = text.split(NUMBERS_BEGIN, 1)
        text = head + block + rest.split(NUMBERS_END, 1)[1]
    else:
        text = (f"# {spec.name}\n\n![{spec.name}]({spec.name}.png)\n\n## Verdict\n\n"
                f"Not written yet: one verdict per finding (reproduced / not reproduced / inconclusive at this "
                f"scale), with the numbers below that support it.\n\n## Numbers\n\n{block}\n")
    page.write_text(text, encoding="utf-8")
    return page


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
    return outputs

"""`microcoder experiment report ROOT`: per grid, one figure and one page of numbers.

For each grid ROOT/<spec>/ (a spec.yaml beside <arm>/seed-<k>/ run directories):
- `figure.png`: one panel per metric of the spec against step, one colour per arm, the
  mean over seeds as a line and, with two or more seeds, mean +- one standard error as
  a band. A step enters an arm's mean only where every seed of that arm logged the metric.
- `report.md`: the paper's finding (quoted from the spec), then per arm and metric the
  last logged value (mean +- standard error over seeds, and n), the first, and the
  seeds that have not finished. Verdicts are written by hand from these numbers
  (docs/experiments/); the report states numbers only.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from microcoder.experiments.runner import load_grid_spec, run_state
from microcoder.training.plots import METRICS_FILE, read_metrics, series


def seed_dirs(arm_dir: Path) -> list[Path]:
    return sorted((path for path in arm_dir.glob("seed-*") if (path / METRICS_FILE).is_file()),
                  key=lambda path: int(path.name.split("-", 1)[1]))


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


def report_grid(grid: Path) -> tuple[Path, Path]:
    """Write grid/figure.png and grid/report.md; returns their paths."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    spec = load_grid_spec(grid)
    arms = {arm: [read_metrics(path / METRICS_FILE) for path in seed_dirs(grid / arm)] for arm in spec.arms}
    arms = {arm: runs for arm, runs in arms.items() if runs}
    if not arms:
        raise FileNotFoundError(f"{grid}: no run has logged metrics yet")
    columns = 2 if len(spec.metrics) > 1 else 1
    rows = math.ceil(len(spec.metrics) / columns)
    figure = Figure(figsize=(5.5 * columns, 3.8 * rows), layout="constrained")
    FigureCanvasAgg(figure)
    axes = list(figure.subplots(rows, columns, sharex=True, squeeze=False).flat)
    for axis, key in zip(axes, spec.metrics):
        for index, (arm, runs) in enumerate(arms.items()):
            steps, means, errors = arm_curve(runs, key)
            if not steps:
                continue
            colour = f"C{index % 10}"
            marker = "o" if key == "heldout_accuracy" or len(steps) < 3 else None
            axis.plot(steps, means, color=colour, marker=marker, markersize=4, label=f"{arm} (n={len(runs)})")
            if len(runs) > 1:
                axis.fill_between(steps, [m - e for m, e in zip(means, errors)],
                                  [m + e for m, e in zip(means, errors)], color=colour, alpha=0.2)
        axis.set_title(key)
        axis.grid(alpha=0.3)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_xlabel("step")
    for axis in axes[len(spec.metrics):]:
        axis.set_visible(False)
    handles, labels = figure.axes[0].get_legend_handles_labels()
    if handles:
        figure.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4))
    figure.suptitle(f"{spec.name}: mean over seeds, band +- 1 standard error")
    figure_path = grid / "figure.png"
    figure.savefig(figure_path, dpi=110)

    lines = [f"# {spec.name}", ""]
    if spec.finding:
        lines += [f"> {spec.finding}", ""]
    lines += ["| arm | metric | first (mean +- SE) | last (mean +- SE) | last step | n |", "|---|---|---|---|---|---|"]
    for arm, runs in arms.items():
        for key in spec.metrics:
            steps, means, errors = arm_curve(runs, key)
            if not steps:
                lines.append(f"| {arm} | {key} | - | - | - | {len(runs)} |")
                continue
            lines.append(f"| {arm} | {key} | {means[0]:.3f} +- {errors[0]:.3f} | {means[-1]:.3f} +- {errors[-1]:.3f} "
                         f"| {steps[-1]} | {len(runs)} |")
    unfinished = [f"{arm}/seed-{seed}" for arm in spec.arms for seed in spec.seeds
                  if run_state(grid / arm / f"seed-{seed}") != "finished"]
    lines += ["", f"Runs not finished: {', '.join(unfinished) if unfinished else 'none'}.", ""]
    report_path = grid / "report.md"
    report_path.write_text("\n".join(lines), encoding="utf-8")
    return figure_path, report_path


def report_all(root: str | Path) -> list[tuple[Path, Path]]:
    """report_grid for every grid (a folder with spec.yaml) under `root`, or `root` itself."""
    root = Path(root)
    grids = [root] if (root / "spec.yaml").is_file() else sorted(path.parent for path in root.glob("*/spec.yaml"))
    if not grids:
        raise FileNotFoundError(f"{root}: no experiment grid (a folder with spec.yaml) here")
    return [report_grid(grid) for grid in grids]

"""`microcoder experiment report ROOT`: per grid, its figures and one page of numbers.

For each grid ROOT/<spec>/ (a spec.yaml beside <arm>/seed-<k>/ run directories):
- `figure.png`: one panel per metric of the spec against step (or, with the spec's
  `x_axis: relative_data`, against prompts seen / the smallest train_batch_size of the
  arms), one colour per arm, the mean over seeds as a line and, with two or more seeds,
  mean +- one standard error as a band. A step enters an arm's mean only where every seed
  of that arm logged the metric. The "time_split" panel is one stacked bar per arm: mean
  seconds per step in rollout, reward and update (figures.py).
- `figure-<axis>.png` for each of the spec's `budget_axes`: the same panels against the
  cumulative training budget (groups generated, responses judged, or seconds of rollout +
  reward waited for + update), the mean over seeds of both coordinates at each step.
- `report.md`: per finding of the spec, the verdict by the rule of
  microcoder.experiments.verdict (paired-by-seed difference, SE, the one-sided t test's t
  and p, the effect detected with 80% power, the paper's effect and the power there, and
  for a held-out finding whose runs kept per-problem files the paired-by-problem-and-seed
  analysis, a statement about the trained models with no verdict); then per arm and metric the first and last logged value (mean +- standard
  error over seeds, and n), the mean over the last three logged points after step 0, the
  budget each arm spent, which runs are shared with another grid, and the seeds that have
  not finished (pages.py). While a grid is in progress, an arm with a finished run is
  drawn and reported from its finished runs only (an arm with none, from its runs in
  progress); verdicts read finished runs alone.

With `docs`, each grid is also published into the record DOCS (publish.py): the only
writer of the record, and of nothing outside it. A grid already in the record whose shared
runs live in a grid just published is redrawn from the record, so its page reads them.
"""

from __future__ import annotations

from pathlib import Path

from microcoder.experiments.analysis import cumulative_budget
from microcoder.experiments.figures import draw_figure
from microcoder.experiments.findings import finding_rows
from microcoder.experiments.layout import config_values, grid_runs, load_grid_spec, seed_runs
from microcoder.experiments.pages import numbers_page, verdicts_text
from microcoder.experiments.publish import check_shared_records, grids_sharing, publish, publish_summary


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
                           f"{numbers_page(spec, arms, budgets, grid_runs(grid, spec))}", encoding="utf-8")
    return figure_path, report_path


def budget_curves(grid: Path, by_seed: dict[str, dict[int, list[dict]]]) -> dict[str, list[dict[int, dict]]]:
    """arm -> each reported run's cumulative_budget (in the order of its runs)."""
    sizes = config_values(grid, list(by_seed), "group_size")
    return {arm: [cumulative_budget(rows, sizes.get(arm, 1)) for rows in runs.values()] for arm, runs in by_seed.items()}


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
        check_shared_records(Path(docs) / "data")
        # A published grid whose shared runs live in one just published reports them anew.
        for other in grids_sharing(Path(docs) / "data", {load_grid_spec(grid).name for grid in grids}):
            report_grid(other)
            publish(other, Path(docs))
        publish_summary(Path(docs))
    return outputs

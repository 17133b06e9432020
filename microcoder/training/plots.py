"""`microcoder plot`: training curves of one or more runs, overlaid, as one PNG.

A 2x2 figure against step: held-out accuracy, mean reward, mean response length and
diversity, the four curves the paper reads its insights from. Each run is one colour,
labelled with its directory name. Reads `RUN_DIR/metrics.jsonl` (one JSON object per
step, written by the trainer).

- A malformed line raises `MetricsFormatError` naming the file and the 1-based row.
- A key missing from a row (held-out accuracy is only logged on eval steps) or null is
  simply not plotted there; a panel with no data at all says so.
- A resumed run may log a step twice: the last row for a step wins.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from microcoder.training.metrics import METRICS_FILE

PANELS = (
    ("heldout_accuracy", "held-out accuracy"),
    ("reward_mean", "mean reward"),
    ("response_length_mean", "mean response length (tokens)"),
    ("diversity", "diversity"),
)


class MetricsFormatError(ValueError):
    """A metrics.jsonl line that cannot be read; names the file and the 1-based row."""

    def __init__(self, path: str | Path, row: int, message: str):
        self.path, self.row = str(path), row
        super().__init__(f"{path}: row {row}: {message}")


def read_metrics(path: str | Path) -> list[dict]:
    """The rows of a metrics.jsonl, sorted by step, one per step (the last one logged).

    Every row must be a JSON object with a numeric `step`; other values must be numbers,
    null or absent for the plotted keys (anything goes for keys we do not plot)."""
    path = Path(path)
    by_step: dict[int, dict] = {}
    with open(path, encoding="utf-8") as handle:
        for row_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise MetricsFormatError(path, row_number, f"not JSON ({error.msg})") from None
            if not isinstance(record, dict):
                raise MetricsFormatError(path, row_number, f"expected a JSON object, got {type(record).__name__}")
            step = record.get("step")
            if not _is_number(step):
                raise MetricsFormatError(path, row_number, f"'step' is missing or not a number: {step!r}")
            for key, _ in PANELS:
                value = record.get(key)
                if value is not None and not _is_number(value):
                    raise MetricsFormatError(path, row_number, f"'{key}' is not a number: {value!r}")
            by_step[int(step)] = record
    return [by_step[step] for step in sorted(by_step)]


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def series(rows: Sequence[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of the rows that carry a finite `key`."""
    steps, values = [], []
    for row in rows:
        value = row.get(key)
        if value is not None and math.isfinite(value):
            steps.append(int(row["step"]))
            values.append(float(value))
    return steps, values


def run_labels(run_dirs: Sequence[str | Path]) -> list[str]:
    """Each run's directory name; the path as given where two runs share a name."""
    names = [Path(run).resolve().name for run in run_dirs]
    return [name if names.count(name) == 1 else str(run) for name, run in zip(names, run_dirs)]


def plot_runs(run_dirs: Sequence[str | Path], out: str | Path | None = None) -> Path:
    """Draw the 2x2 figure for `run_dirs` and save it as a PNG.

    `out` defaults to RUN_DIR/metrics.png for one run and ./runs.png for several.
    Returns the path written."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    if not run_dirs:
        raise ValueError("give at least one run directory")
    runs = []
    for run in run_dirs:
        path = Path(run) / METRICS_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist (is {run} a run directory?)")
        runs.append(read_metrics(path))
    if out is None:
        out = Path(run_dirs[0]) / "metrics.png" if len(run_dirs) == 1 else Path("runs.png")
    out = Path(out)

    # Figure without pyplot: no global state, no display backend needed.
    figure = Figure(figsize=(11, 8), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(2, 2, sharex=True)
    colours = [f"C{index % 10}" for index in range(len(runs))]
    for axis, (key, title) in zip(axes.flat, PANELS):
        plotted = False
        for rows, label, colour in zip(runs, run_labels(run_dirs), colours):
            steps, values = series(rows, key)
            if not steps:
                continue
            # Held-out points are sparse (every N steps): markers keep single points visible.
            marker = "o" if key == "heldout_accuracy" or len(steps) < 3 else None
            axis.plot(steps, values, label=label, color=colour, marker=marker, markersize=4, linewidth=1.5)
            plotted = True
        axis.set_title(title)
        axis.grid(alpha=0.3)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        if not plotted:
            axis.text(0.5, 0.5, f"no '{key}' values yet", ha="center", va="center", transform=axis.transAxes,
                      color="gray")
        elif key == "diversity":
            axis.set_ylim(bottom=0)
    for axis in axes[1]:
        axis.set_xlabel("step")
    handles, labels = [], []
    for axis in axes.flat:  # one legend for the figure, from whichever panels have the runs
        for handle, label in zip(*axis.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    if handles:
        figure.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4))
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    return out

"""A grid's figures (matplotlib): one panel per metric of the spec, one colour per arm.

Each arm's mean over seeds is a line and, with two or more seeds, mean +- one standard
error a band, against step, relative data, or a cumulative training budget; the
"time_split" panel is one stacked bar per arm.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from microcoder.experiments.analysis import TIME_SPLIT, arm_curve
from microcoder.training.plots import series


BUDGET_AXES = {"groups_generated": "groups generated (cumulative)",
               "responses_judged": "responses judged (cumulative)",
               "seconds": "seconds: rollout + reward waited for + update (cumulative)"}


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

"""A grid on disk, as the runner writes it and the report reads it.

ROOT/<spec>/spec.yaml beside ROOT/<spec>/<arm>/seed-<k>/, each a `microcoder train` run
directory, or a shared record (shared.yaml: `run: <spec>/<arm>/seed-<k>`, relative to
ROOT) of a run that lies in another grid or arm. Every reader here follows such a record
to the run that holds the files. ROOT/heldout-start holds the step-0 held-out evaluations
that the runs of a spec with share_heldout_start read.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from microcoder.experiments.analysis import with_visible_reward
from microcoder.experiments.spec import ExperimentSpec
from microcoder.training.metrics import METRICS_FILE
from microcoder.training.plots import read_metrics


SHARED_FILE = "shared.yaml"
RESTORED_FILE = "restored.yaml"
START_CACHE = "heldout-start"
"""ROOT/heldout-start: the step-0 held-out evaluations of a spec with share_heldout_start."""
HELDOUT_FILES = ("heldout_start.json", "heldout_end.json")
"""A run's per-problem held-out scores at step 0 and at its last evaluation (training.run)."""


def shared_target(run_dir: Path) -> Path | None:
    """The run a shared record points to (ROOT/<spec>/<arm>/seed-<k>), or None for a run of its own."""
    record = run_dir / SHARED_FILE
    if not record.is_file():
        return None
    target = yaml.safe_load(record.read_text(encoding="utf-8")) or {}
    if not isinstance(target, dict) or not isinstance(target.get("run"), str):
        raise ValueError(f"{record}: expected a mapping with run: <spec>/<arm>/seed-<k>")
    return run_dir.parents[2] / target["run"]


def resolve_run(run_dir: Path) -> Path:
    """The folder that holds a run's files: its own, or the shared run its record names."""
    target = shared_target(run_dir)
    if target is None:
        return run_dir
    if shared_target(target) is not None:
        raise ValueError(f"{run_dir / SHARED_FILE}: points to {target}, itself a shared record; "
                         "a record must name the run that holds the files")
    return target


def load_grid_spec(grid: Path) -> ExperimentSpec:
    """The spec copied beside a grid's runs."""
    return ExperimentSpec.model_validate(yaml.safe_load((grid / "spec.yaml").read_text(encoding="utf-8")))


def run_state(run_dir: Path, total_steps: int | None = None) -> str:
    """"finished", "interrupted" (has a checkpoint), or "fresh" (nothing to keep).

    With `total_steps`, a summary of fewer steps (a phase's end) is not finished. A shared
    record has the state of the run it names ("fresh" if that run is gone)."""
    if shared_target(run_dir) is not None:
        target = resolve_run(run_dir)
        return run_state(target, total_steps) if target.is_dir() else "fresh"
    summary = run_dir / "summary.json"
    if summary.is_file() and (total_steps is None
                              or json.loads(summary.read_text(encoding="utf-8")).get("steps") == total_steps):
        return "finished"
    checkpoints = run_dir / "checkpoints"
    if checkpoints.is_dir() and any(checkpoints.glob("checkpoint-*")):
        return "interrupted"
    return "fresh"


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


@dataclass
class GridRuns:
    """What a grid's numbers page says of its runs, beside their metrics."""

    minutes: dict[str, list[tuple[float, bool, bool]]]
    """arm -> run_minutes of its reported runs."""
    shared: list[str]
    """"<arm>/seed-<k> is <spec>/<arm>/seed-<j>" for each shared record, the run it names."""
    judge_errors: list[str]
    """judge_error_runs."""
    unfinished: list[str]
    """"<arm>/seed-<k>" for each run of the spec that has not finished."""


def grid_runs(grid: Path, spec: ExperimentSpec) -> GridRuns:
    """GridRuns of the grid at `grid`, read from its run folders."""
    return GridRuns(
        minutes={arm: run_minutes(grid, arm) for arm in spec.arms},
        shared=[f"{arm}/{run.name} is {shared_target(run).relative_to(grid.parent).as_posix()}"
                for arm in spec.arms for run in seed_dirs(grid / arm) if shared_target(run) is not None],
        judge_errors=judge_error_runs(grid, spec),
        unfinished=[f"{arm}/seed-{seed}" for arm in spec.arms for seed in spec.seeds
                    if run_state(grid / arm / f"seed-{seed}") != "finished"])

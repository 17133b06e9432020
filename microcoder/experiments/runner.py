"""`microcoder experiment run SPEC.yaml`: every arm x seed of a spec, resumable.

A run's directory is ROOT/<spec name>/<arm>/seed-<k>/ (a normal `microcoder train` run
directory). Its state decides what happens:
- summary.json present: finished, skipped;
- a checkpoint present: interrupted, resumed from its last checkpoint (`--resume`);
- anything else (started, killed before its first checkpoint): removed and started over.
So a grid can span several sittings: rerun the same command. The spec is copied to
ROOT/<spec name>/spec.yaml beside the runs (the report reads its metrics and finding).
Runs go one after another in this process.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from microcoder.experiments.spec import ExperimentSpec, arm_config, load_spec

DEFAULT_ROOT = Path("runs/experiments")


@dataclass
class RunOutcome:
    arm: str
    seed: int
    run_dir: Path
    status: str
    """"skipped" (finished before), "resumed", "started"."""
    seconds: float


def run_state(run_dir: Path) -> str:
    """"finished", "interrupted" (has a checkpoint), or "fresh" (nothing to keep)."""
    if (run_dir / "summary.json").is_file():
        return "finished"
    checkpoints = run_dir / "checkpoints"
    if checkpoints.is_dir() and any(checkpoints.glob("checkpoint-*")):
        return "interrupted"
    return "fresh"


def run_experiment(spec_path: str | Path, root: str | Path = DEFAULT_ROOT,
                   train: Callable | None = None, log: Callable[[str], None] = print) -> list[RunOutcome]:
    """Run the grid of `spec_path` under `root`; returns one outcome per arm x seed.

    `train(config, resume)` runs one training run (default: `run_training`; tests pass one
    that injects problems and an evaluator).
    """
    from microcoder.training.trainer import run_training

    spec, base = load_spec(spec_path)
    train = train or (lambda config, resume: run_training(config, resume=resume))  # run_dir is always set
    grid = Path(root) / spec.name
    grid.mkdir(parents=True, exist_ok=True)
    (grid / "spec.yaml").write_text(yaml.safe_dump(spec.model_dump(), sort_keys=False), encoding="utf-8")
    runs = [(arm, seed) for arm in spec.arms for seed in spec.seeds]
    outcomes: list[RunOutcome] = []
    started = time.perf_counter()
    for index, (arm, seed) in enumerate(runs, start=1):
        run_dir = grid / arm / f"seed-{seed}"
        state = run_state(run_dir)
        prefix = f"[{index}/{len(runs)}] {spec.name} {arm} seed {seed}"
        if state == "finished":
            log(f"{prefix}: finished before, skipped")
            outcomes.append(RunOutcome(arm, seed, run_dir, "skipped", 0.0))
            continue
        if state == "fresh" and run_dir.exists():
            shutil.rmtree(run_dir)  # killed before its first checkpoint: nothing to resume
        config = arm_config(spec, base, arm, seed, run_dir)
        done = [outcome for outcome in outcomes if outcome.status != "skipped"]
        eta = ""
        if done:
            per_run = sum(outcome.seconds for outcome in done) / len(done)
            eta = f", about {per_run * (len(runs) - index + 1) / 60:.0f} min left"
        log(f"{prefix}: {'resuming' if state == 'interrupted' else 'starting'} "
            f"({config.total_steps} steps{eta}) -> {run_dir}")
        begin = time.perf_counter()
        train(config, state == "interrupted")
        outcomes.append(RunOutcome(arm, seed, run_dir, "resumed" if state == "interrupted" else "started",
                                   time.perf_counter() - begin))
    log(f"{spec.name}: {len(runs)} runs done in {(time.perf_counter() - started) / 60:.1f} min; "
        f"report: microcoder experiment report {Path(root)}")
    return outcomes


def load_grid_spec(grid: Path) -> ExperimentSpec:
    """The spec copied beside a grid's runs."""
    return ExperimentSpec.model_validate(yaml.safe_load((grid / "spec.yaml").read_text(encoding="utf-8")))

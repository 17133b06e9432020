"""`microcoder experiment run SPEC.yaml`: every arm x seed of a spec, resumable.

A run's directory is ROOT/<spec name>/<arm>/seed-<k>/ (a normal `microcoder train` run
directory). Its state decides what happens:
- summary.json present and its steps the run's total: finished, skipped;
- a checkpoint present: interrupted, resumed from its last checkpoint (`--resume`), in
  the phase (for an arm with schedule changes) that the checkpoint's step falls in;
- anything else (started, killed before its first checkpoint): removed and started over.
So a grid can span several sittings: rerun the same command. The spec is copied to
ROOT/<spec name>/spec.yaml beside the runs (the report reads its metrics and findings).
A run is trained by one process at a time: it holds <arm>/seed-<k>.lock while it runs, and
a second runner reaching that run fails it (RunInUse) instead of removing or resuming a
folder that is still being written. Worker processes end with the runner that made them.

A control shared between specs runs once per seed: before starting a fresh run, the
runner looks under ROOT for a finished run with the same resolved config (every key but
run_dir, after the config's own defaults) and the same schedule changes, in any grid.
When it finds one, the run's folder gets only its config.yaml and shared.yaml (`run:
<spec>/<arm>/seed-<k>`, relative to ROOT), and every reader (run_state, the report,
publishing) follows that record to the run. An interrupted run is resumed, not shared.
A finished run whose config is not what the spec now trains stops the grid before any run
starts (naming the run and the keys that differ), rather than being skipped as if current.

`restore_from` (`--restore DIR`, repeatable) names published grids (`report --record` data
folders, each laid out as a runs root) for a runs root that lacks them, e.g. a fresh
clone continuing a grid: a fresh run takes the finished run published at its place, or else a published twin
from any grid (copied to its own place under ROOT and shared as above), when the resolved
config matches. A restored run holds the published files (config, metrics, summary) and
restored.yaml naming where they came from; no checkpoint comes with it. The published
step-0 evaluations (DIR/heldout-start, see share_heldout_start below) come into ROOT's.
With `restore_per_problem_only` (`--require-per-problem`), a published run (or twin)
without its per-problem held-out files (heldout_start.json, heldout_end.json) is not
restored but trained again, and no run under ROOT without them is shared: a grid whose
published runs lack the files gets them by a rerun a few runs per sitting, each sitting
starting from a fresh ROOT that restores the runs already rerun (results/experiments/README.md).

A spec with `share_heldout_start: true` gives every run ROOT/heldout-start as its
heldout_start_cache: the step-0 held-out evaluation of a starting model is made by the
first run of a seed and read by every other arm (and grid) of that seed. The cache's place
is not part of a run's identity.

An arm with schedule changes runs as phases: phase 1 trains to its `at_step` and
checkpoints; each next phase resumes that checkpoint with its own config (e.g. a longer
max_new_tokens), as a user would by hand.

Runs go one after another in this process, or `parallel` at a time in worker processes
(each with cores / parallel threads, its output in the run's train.log). Either way a
progress line per run and step (arm, seed, step, time per step, eta) comes from watching
the runs' metrics.jsonl.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import shutil
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import yaml

from microcoder.experiments.analysis import visible_reward_seconds
from microcoder.experiments.layout import HELDOUT_FILES, START_CACHE, run_state
from microcoder.experiments.sharing import (check_finished_runs, config_identity, find_shared_run, record_shared_run,
                                            restore_run, restore_start_cache)
from microcoder.experiments.spec import arm_phases, load_spec
from microcoder.training.metrics import METRICS_FILE


DEFAULT_ROOT = Path("runs/experiments")


@dataclass
class RunOutcome:
    arm: str
    seed: int
    run_dir: Path
    status: str
    """"skipped" (finished before), "restored" (copied from published grids), "shared" (the
    same run finished in another grid or arm), "resumed", "started", or "failed" (parallel
    runs; see its train.log)."""
    seconds: float


def completed_steps(run_dir: Path, updates_per_step: int) -> int:
    """Rollout steps of the run's last checkpoint (0 without one)."""
    steps = [int(path.name.rsplit("-", 1)[1]) // updates_per_step
             for path in (run_dir / "checkpoints").glob("checkpoint-*") if path.name.rsplit("-", 1)[1].isdigit()]
    return max(steps, default=0)


class RunInUse(RuntimeError):
    """Another process is training this run."""


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold <run_dir>.lock (beside the run, whose folder may be removed and remade) while
    this process trains the run; RunInUse when another process holds it. The kernel drops
    the lock when its holder exits, however it exits. A grid restarted while an earlier
    runner's worker still trained a run once removed and retrained that run under it."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(run_dir.parent / f"{run_dir.name}.lock", "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "a process"
            raise RunInUse(f"{run_dir} is being trained by {holder}: stop it or let it finish, "
                           "then rerun to continue this run") from None
        handle.truncate(0)
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        yield


def run_phases(phases: list, run_dir: Path, train: Callable) -> str:
    """Run what is left of one run (its phase configs in order); returns "started" or "resumed"."""
    with run_lock(run_dir):
        state = run_state(run_dir, phases[-1].total_steps)
        if state == "fresh" and run_dir.exists():
            shutil.rmtree(run_dir)  # killed before its first checkpoint: nothing to resume
        done = completed_steps(run_dir, phases[0].updates_per_step) if state == "interrupted" else 0
        resume = state == "interrupted"
        for config in phases:
            if config.total_steps <= done:
                continue
            train(config, resume)
            resume = True  # a next phase continues this one's final checkpoint
    return "resumed" if state == "interrupted" else "started"


PR_SET_PDEATHSIG = 1


def end_with_parent(parent_pid: int) -> None:
    """A worker process's initializer: SIGTERM when the runner that started it exits.

    Without it a killed runner's workers trained on unseen, and a restarted grid met them
    in its run folders. Linux only (prctl); elsewhere a no-op."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the runner died before the prctl took effect
        os._exit(1)


def _train_in_worker(phases: list, run_dir: str, threads: int) -> float:
    """A worker process: `threads` CPU threads, output to the run's train.log."""
    import sys

    import torch

    from microcoder.training.run import run_training

    torch.set_num_threads(threads)
    Path(run_dir).parent.mkdir(parents=True, exist_ok=True)
    begin = time.perf_counter()
    with open(Path(run_dir).parent / f"{Path(run_dir).name}.train.log", "a", encoding="utf-8") as log:
        sys.stdout = sys.stderr = log
        try:
            run_phases(phases, Path(run_dir), lambda config, resume: run_training(config, resume=resume))
        except BaseException:
            traceback.print_exc()  # into the run's log: the parent only sees the exception's text
            raise
    return time.perf_counter() - begin


class ProgressWatcher:
    """Prints a line whenever a watched run logs a new step: arm, seed, step, time per step
    (rollout + reward + update as the run logged them; held-out evals not counted), eta."""

    def __init__(self, log: Callable[[str], None], interval_s: float = 5.0):
        self.log, self.interval_s = log, interval_s
        self.runs: dict[Path, tuple[str, int]] = {}
        self.printed: dict[Path, int] = {}
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> ProgressWatcher:
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop.set()
        self.thread.join()
        self.poll()

    def watch(self, run_dir: Path, label: str, total_steps: int) -> None:
        with self.lock:
            self.runs[run_dir] = (label, total_steps)
            self.printed[run_dir] = self._steps(run_dir)[0]

    @staticmethod
    def _steps(run_dir: Path) -> tuple[int, list[float]]:
        """(last logged step, seconds of each logged training step)."""
        try:
            rows = [json.loads(line) for line in (run_dir / METRICS_FILE).read_text(encoding="utf-8").splitlines()
                    if line.strip()]
        except (OSError, ValueError):
            return 0, []
        seconds = [row["seconds_rollout"] + visible_reward_seconds(row) + row["seconds_update"]
                   for row in rows if "seconds_rollout" in row]
        return (rows[-1].get("step", 0) if rows else 0), seconds

    def poll(self) -> None:
        with self.lock:
            for run_dir, (label, total) in self.runs.items():
                step, seconds = self._steps(run_dir)
                if step <= self.printed[run_dir] or not seconds:
                    continue
                self.printed[run_dir] = step
                per_step = sum(seconds) / len(seconds)
                self.log(f"  {label}: step {step}/{total}, {per_step / 60:.1f} min/step, "
                         f"about {per_step * (total - step) / 60:.0f} min left (without evals)")

    def _loop(self) -> None:
        while not self.stop.wait(self.interval_s):
            self.poll()


def run_experiment(spec_path: str | Path, root: str | Path = DEFAULT_ROOT, train: Callable | None = None,
                   log: Callable[[str], None] = print, parallel: int = 1,
                   extra: tuple[str, ...] = (), variables: dict[str, int | float] | None = None,
                   restore_from: tuple[str | Path, ...] = (),
                   restore_per_problem_only: bool = False) -> list[RunOutcome]:
    """Run the grid of `spec_path` under `root`; returns one outcome per arm x seed.

    `train(config, resume)` runs one training run in this process (default: `run_training`;
    tests pass one that injects problems and an evaluator). `parallel` > 1 runs that many
    at once in worker processes with the default trainer. `extra`: key=value overrides for
    every arm (after the spec's own, before the arm's); `variables` replace the spec's vars.
    `restore_from`: folders of published grids to take finished runs from, in order (see the
    module's docstring); with `restore_per_problem_only`, only runs that kept their
    per-problem held-out files.
    """
    from microcoder.training.run import run_training

    if parallel < 1:
        raise ValueError(f"parallel must be >= 1, got {parallel}")
    if parallel > 1 and train is not None:
        raise ValueError("parallel runs use the default trainer; a custom train() runs in this process")
    published = [Path(folder) for folder in restore_from]
    if restore_per_problem_only and not published:
        raise ValueError("--require-per-problem chooses which published runs --restore takes: name a --restore folder")
    needs = HELDOUT_FILES if restore_per_problem_only else ()
    missing = [source for source in published if not source.is_dir()]
    if missing:  # a mistyped folder would restore nothing and retrain every run
        raise FileNotFoundError(f"--restore {missing[0]}: no such folder of published grids")
    spec, folder = load_spec(spec_path, extra, variables)
    train = train or (lambda config, resume: run_training(config, resume=resume))  # run_dir is always set
    grid = Path(root) / spec.name
    grid.mkdir(parents=True, exist_ok=True)
    (grid / "spec.yaml").write_text(yaml.safe_dump(spec.model_dump(), sort_keys=False), encoding="utf-8")
    # Seed-major: a grid stopped part-way has every arm at its first seeds.
    runs = [(arm, seed) for seed in spec.seeds for arm in spec.arms]
    start_cache = Path(root).resolve() / START_CACHE if spec.share_heldout_start else None
    plans = {(arm, seed): arm_phases(spec, folder, arm, seed, grid / arm / f"seed-{seed}", start_cache)
             for arm, seed in runs}
    identities = {(arm, seed): config_identity(plans[arm, seed][-1].model_dump(mode="json"), spec.arms[arm].then)
                  for arm, seed in runs}
    check_finished_runs(spec, spec_path, {grid / arm / f"seed-{seed}": (identities[arm, seed],
                                                                         plans[arm, seed][-1].total_steps)
                                          for arm, seed in runs})
    for folder in published if start_cache is not None else ():
        restore_start_cache(folder, start_cache)
    outcomes: dict[tuple[str, int], RunOutcome] = {}
    started = time.perf_counter()
    todo = []
    for index, (arm, seed) in enumerate(runs, start=1):
        run_dir = grid / arm / f"seed-{seed}"
        state = run_state(run_dir, plans[arm, seed][-1].total_steps)
        if state == "finished":
            log(f"[{index}/{len(runs)}] {spec.name} {arm} seed {seed}: finished before, skipped")
            outcomes[arm, seed] = RunOutcome(arm, seed, run_dir, "skipped", 0.0)
            continue
        place = None
        for folder in published if state == "fresh" else ():
            with run_lock(run_dir):
                place = restore_run(folder, Path(root), run_dir, identities[arm, seed], needs)
            if place is not None:
                break
        if place == run_dir:
            log(f"[{index}/{len(runs)}] {spec.name} {arm} seed {seed}: finished in {folder}, restored")
            outcomes[arm, seed] = RunOutcome(arm, seed, run_dir, "restored", 0.0)
            continue
        if state == "fresh":
            identity = identities[arm, seed]
            target = find_shared_run(Path(root), identity, run_dir, needs)
            if target is not None:
                with run_lock(run_dir):
                    if run_dir.exists():
                        shutil.rmtree(run_dir)  # a start killed before its first checkpoint
                    record_shared_run(run_dir, target, plans[arm, seed][-1])
                log(f"[{index}/{len(runs)}] {spec.name} {arm} seed {seed}: the same config and seed finished "
                    f"as {target.relative_to(Path(root)).as_posix()}, shared (not run again)")
                outcomes[arm, seed] = RunOutcome(arm, seed, run_dir, "shared", 0.0)
                continue
        todo.append((index, arm, seed, run_dir, state))

    def announce(index: int, arm: str, seed: int, run_dir: Path, state: str, verb: str = "") -> None:
        done = [outcome.seconds for outcome in outcomes.values() if outcome.status in ("started", "resumed")]
        eta = f", grid about {sum(done) / len(done) * (len(todo) - len(done)) / 60:.0f} min left" if done else ""
        verb = verb or ("resuming" if state == "interrupted" else "starting")
        log(f"[{index}/{len(runs)}] {spec.name} {arm} seed {seed}: {verb} "
            f"({plans[arm, seed][-1].total_steps} steps{eta}) -> {run_dir}")
        watcher.watch(run_dir, f"{arm} seed {seed}", plans[arm, seed][-1].total_steps)

    with ProgressWatcher(log) as watcher:
        if parallel == 1:
            for index, arm, seed, run_dir, state in todo:
                announce(index, arm, seed, run_dir, state)
                begin = time.perf_counter()
                status = run_phases(plans[arm, seed], run_dir, train)
                outcomes[arm, seed] = RunOutcome(arm, seed, run_dir, status, time.perf_counter() - begin)
        else:
            threads = max(1, (os.cpu_count() or 1) // parallel)
            with ProcessPoolExecutor(parallel, mp_context=get_context("spawn"), initializer=end_with_parent,
                                     initargs=(os.getpid(),)) as pool:
                futures = {}
                for index, arm, seed, run_dir, state in todo:
                    futures[pool.submit(_train_in_worker, plans[arm, seed], str(run_dir), threads)] = (
                        index, arm, seed, run_dir, state)
                    announce(index, arm, seed, run_dir, state, "queued")  # starts when a worker is free
                for future in as_completed(futures):
                    index, arm, seed, run_dir, state = futures[future]
                    status = "resumed" if state == "interrupted" else "started"
                    train_log = f"{run_dir.parent / run_dir.name}.train.log"
                    try:  # one failed run does not stop the others; rerunning the grid retries it
                        seconds = future.result()
                    except Exception as error:
                        outcomes[arm, seed] = RunOutcome(arm, seed, run_dir, "failed", 0.0)
                        log(f"[{index}/{len(runs)}] {spec.name} {arm} seed {seed}: FAILED: {error!r} "
                            f"(traceback in {train_log})")
                        continue
                    outcomes[arm, seed] = RunOutcome(arm, seed, run_dir, status, seconds)
                    log(f"[{index}/{len(runs)}] {spec.name} {arm} seed {seed}: done ({seconds / 60:.1f} min; "
                        f"log {train_log})")
    failed = [f"{arm}/seed-{seed}" for (arm, seed), outcome in outcomes.items() if outcome.status == "failed"]
    if failed:
        log(f"{spec.name}: {len(failed)} run(s) FAILED: {', '.join(failed)}; rerun the same command to retry them")
    log(f"{spec.name}: {len(runs)} runs done in {(time.perf_counter() - started) / 60:.1f} min; "
        f"report: microcoder experiment report {Path(root)}")
    return [outcomes[run] for run in runs]

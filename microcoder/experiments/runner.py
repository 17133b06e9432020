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

`restore_from` (`--restore DIR`, repeatable) names published grids (`report --docs` data
folders, each laid out as a runs root) for a runs root that lacks them, e.g. a fresh
clone continuing a grid: a fresh run takes the finished run published at its place, or else a published twin
from any grid (copied to its own place under ROOT and shared as above), when the resolved
config matches. A restored run holds the published files (config, metrics, summary) and
restored.yaml naming where they came from; no checkpoint comes with it. The published
step-0 evaluations (DIR/heldout-start, see share_heldout_start below) come into ROOT's.

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

from pydantic import ValidationError

from microcoder.experiments.spec import ExperimentSpec, Phase, arm_phases, load_spec
from microcoder.training.config import TrainConfig
from microcoder.training.plots import METRICS_FILE

DEFAULT_ROOT = Path("runs/experiments")
SHARED_FILE = "shared.yaml"
RESTORED_FILE = "restored.yaml"
START_CACHE = "heldout-start"
"""ROOT/heldout-start: the step-0 held-out evaluations of a spec with share_heldout_start."""
# Where a run's files go, not what it trains: left out of what makes two runs the same run.
LOCATION_KEYS = ("run_dir", "heldout_start_cache")


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


def config_identity(config: dict, then: list[Phase]) -> str:
    """What makes two runs the same run: the resolved config (defaults filled in, run_dir and
    heldout_start_cache left out: a cached step-0 evaluation is the one the run would make;
    the seed is in it) and the arm's schedule changes, as canonical JSON.

    A config.yaml from an older config schema that no longer validates is compared as it is,
    so it matches nothing newer (the run is trained again rather than wrongly shared)."""
    config = {key: value for key, value in config.items() if key not in LOCATION_KEYS}
    try:
        config = TrainConfig.model_validate(config).model_dump(mode="json")
    except ValidationError:
        pass
    for key in LOCATION_KEYS:
        config.pop(key, None)
    return json.dumps({"config": config, "then": [phase.model_dump() for phase in then]}, sort_keys=True)


def run_identity(run_dir: Path, spec: ExperimentSpec) -> str | None:
    """config_identity of a run on disk (its config.yaml and its arm in its grid's spec), or
    None when it has no config.yaml or its arm is not in the spec."""
    config_path = run_dir / "config.yaml"
    arm = run_dir.parent.name
    if not config_path.is_file() or arm not in spec.arms:
        return None
    return config_identity(yaml.safe_load(config_path.read_text(encoding="utf-8")), spec.arms[arm].then)


def find_shared_run(root: Path, identity: str, exclude: Path) -> Path | None:
    """A finished run of its own under `root` (any grid) whose identity is `identity`."""
    for config_path in sorted(root.glob("*/*/seed-*/config.yaml")):
        run_dir = config_path.parent
        if run_dir == exclude or shared_target(run_dir) is not None or run_state(run_dir) != "finished":
            continue
        try:
            spec = load_grid_spec(run_dir.parents[1])
        except (OSError, ValueError, ValidationError):
            continue  # not a grid this runner wrote
        if run_identity(run_dir, spec) == identity:
            return run_dir
    return None


def differing_keys(identity: str, other: str) -> list[str]:
    """The config keys (and "then", the schedule changes) in which two identities differ."""
    first, second = json.loads(identity), json.loads(other)
    keys = sorted(key for key in first["config"].keys() | second["config"].keys()
                  if first["config"].get(key) != second["config"].get(key))
    return keys + (["then"] if first["then"] != second["then"] else [])


def check_finished_runs(spec: ExperimentSpec, spec_path: str | Path, plans: dict[Path, tuple[str, int]]) -> None:
    """ValueError naming every finished run whose config.yaml is not the config the spec now
    gives it (an edited spec or preset): skipping it would report a different experiment.
    `plans`: each run's identity and total steps (a run at a phase's end is not finished)."""
    stale = []
    for run_dir, (identity, total_steps) in plans.items():
        if run_state(run_dir, total_steps) != "finished":
            continue
        found = run_identity(run_dir, spec)
        if found is None:
            stale.append(f"{run_dir} (no config.yaml)")
        elif found != identity:
            stale.append(f"{run_dir} ({', '.join(differing_keys(found, identity))})")
    if stale:
        raise ValueError(f"{spec_path}: finished runs trained another config than the spec now gives them "
                         f"(the keys that differ in brackets): {'; '.join(stale)}. Move them away to train "
                         "them again, or restore the spec")


def restore_run(published: Path, root: Path, run_dir: Path, identity: str) -> Path | None:
    """Copy into `root` the finished published run with `identity`: the one at run_dir's place
    under `published`, else a twin in any published grid. Returns where it now lies under
    `root` (None: nothing to restore, or its place is taken)."""
    candidate = published / run_dir.relative_to(root)
    own = ((candidate / "config.yaml").is_file() and shared_target(candidate) is None
           and run_state(candidate) == "finished"
           and run_identity(candidate, load_grid_spec(candidate.parents[1])) == identity)
    source = candidate if own else find_shared_run(published, identity, exclude=None)
    if source is None:
        return None
    place = root / source.relative_to(published)
    if place.exists() and place != run_dir:
        return None
    if place.exists():
        shutil.rmtree(place)  # run_dir, killed before its first checkpoint (we hold its lock)
    # A twin's place is not under this run's lock: copy beside it and rename, so a second
    # runner restoring the same twin at the same moment finds either nothing or all of it.
    staging = place.parent / f".{place.name}.restoring-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging)
    (staging / RESTORED_FILE).write_text(yaml.safe_dump({"from": str(source.resolve())}), encoding="utf-8")
    try:
        staging.rename(place)
    except OSError:  # the other runner's copy landed first: the same files
        shutil.rmtree(staging)
        if run_state(place) != "finished":
            return None
    if not (place.parents[1] / "spec.yaml").is_file():
        shutil.copyfile(source.parents[1] / "spec.yaml", place.parents[1] / "spec.yaml")
    return place


def record_shared_run(run_dir: Path, target: Path, config: TrainConfig) -> None:
    """Make `run_dir` a record of `target`: the config it would have trained, and shared.yaml."""
    root = run_dir.parents[2]
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False),
                                         encoding="utf-8")
    (run_dir / SHARED_FILE).write_text(yaml.safe_dump({"run": target.relative_to(root).as_posix()}, sort_keys=False),
                                       encoding="utf-8")


def visible_reward_seconds(row: dict) -> float:
    """What a step waited for its reward: seconds_reward_visible (with reward_overlap,
    seconds_reward is mostly inside the rollout), or seconds_reward for runs before the key."""
    return row.get("seconds_reward_visible", row["seconds_reward"])


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
                   restore_from: tuple[str | Path, ...] = ()) -> list[RunOutcome]:
    """Run the grid of `spec_path` under `root`; returns one outcome per arm x seed.

    `train(config, resume)` runs one training run in this process (default: `run_training`;
    tests pass one that injects problems and an evaluator). `parallel` > 1 runs that many
    at once in worker processes with the default trainer. `extra`: key=value overrides for
    every arm (after the spec's own, before the arm's); `variables` replace the spec's vars.
    `restore_from`: folders of published grids to take finished runs from, in order (see the
    module's docstring).
    """
    from microcoder.training.run import run_training

    if parallel < 1:
        raise ValueError(f"parallel must be >= 1, got {parallel}")
    if parallel > 1 and train is not None:
        raise ValueError("parallel runs use the default trainer; a custom train() runs in this process")
    published = [Path(folder) for folder in restore_from]
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
        for path in sorted((folder / START_CACHE).glob("heldout-start-*.json")):
            if not (start_cache / path.name).is_file():
                start_cache.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, start_cache / path.name)
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
                place = restore_run(folder, Path(root), run_dir, identities[arm, seed])
            if place is not None:
                break
        if place == run_dir:
            log(f"[{index}/{len(runs)}] {spec.name} {arm} seed {seed}: finished in {folder}, restored")
            outcomes[arm, seed] = RunOutcome(arm, seed, run_dir, "restored", 0.0)
            continue
        if state == "fresh":
            identity = identities[arm, seed]
            target = find_shared_run(Path(root), identity, run_dir)
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


def load_grid_spec(grid: Path) -> ExperimentSpec:
    """The spec copied beside a grid's runs."""
    return ExperimentSpec.model_validate(yaml.safe_load((grid / "spec.yaml").read_text(encoding="utf-8")))

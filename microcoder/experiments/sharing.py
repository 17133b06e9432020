"""Which runs are the same run: a control shared between grids, a published run restored.

Two runs are the same run when their resolved configs (every key but where the run's
files go, after the config's own defaults) and their arms' schedule changes are equal
(config_identity). The runner shares a finished run of another grid or arm instead of
training it again (record_shared_run), takes a finished run from a published record
(restore_run; the step-0 evaluations its runs read: restore_start_cache), and refuses a
finished run whose config is not what the spec now gives it (check_finished_runs).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import yaml
from pydantic import ValidationError

from microcoder.experiments.layout import (RESTORED_FILE, SHARED_FILE, START_CACHE, load_grid_spec, run_state,
                                           shared_target)
from microcoder.experiments.spec import ExperimentSpec, Phase
from microcoder.training.config import TrainConfig


# Where a run's files go, not what it trains: left out of what makes two runs the same run.
LOCATION_KEYS = ("run_dir", "heldout_start_cache")


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


def holds(run_dir: Path, names: tuple[str, ...]) -> bool:
    """Whether the run folder has every file named in `names`."""
    return all((run_dir / name).is_file() for name in names)


def find_shared_run(root: Path, identity: str, exclude: Path | None, needs: tuple[str, ...] = ()) -> Path | None:
    """A finished run of its own under `root` (any grid) whose identity is `identity` and
    that holds every file named in `needs`."""
    for config_path in sorted(root.glob("*/*/seed-*/config.yaml")):
        run_dir = config_path.parent
        if (run_dir == exclude or shared_target(run_dir) is not None or run_state(run_dir) != "finished"
                or not holds(run_dir, needs)):
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


def restore_run(published: Path, root: Path, run_dir: Path, identity: str, needs: tuple[str, ...] = ()) -> Path | None:
    """Copy into `root` the finished published run with `identity` that holds every file named
    in `needs` (e.g. HELDOUT_FILES): the one at run_dir's place under `published`, else a twin
    in any published grid. Returns where it now lies under `root` (None: nothing to restore,
    or its place is taken)."""
    candidate = published / run_dir.relative_to(root)
    own = ((candidate / "config.yaml").is_file() and shared_target(candidate) is None
           and run_state(candidate) == "finished" and holds(candidate, needs)
           and run_identity(candidate, load_grid_spec(candidate.parents[1])) == identity)
    source = candidate if own else find_shared_run(published, identity, exclude=None, needs=needs)
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


def restore_start_cache(published: Path, start_cache: Path) -> None:
    """Copy into `start_cache` the published step-0 evaluations (PUBLISHED/heldout-start) it lacks."""
    for path in sorted((published / START_CACHE).glob("heldout-start-*.json")):
        if not (start_cache / path.name).is_file():
            start_cache.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, start_cache / path.name)

"""`microcoder data build`: sources -> a clean, deduplicated, decontaminated corpus.

    config = load_build_config("configs/data/shared.yaml")   # data/config.py
    build(config)                        # every stage, skipping those already done
    run_stage(config, "dedup")           # one stage; its input must exist

Stages, in order (docs/data_pipeline.md says what each removes and why):

    ingest -> validate -> dedup -> decontaminate -> amplify -> difficulty -> export

Each stage reads the previous stage's `problems.jsonl` row by row and writes, under
`work_dir/<stage>/`, line by line as it goes: `problems.jsonl` (what it kept),
`removed.jsonl` (one `Removal` per dropped problem, with its reason and match),
`rejects.jsonl` (malformed records: file, row, field), then `manifest.json`. No stage holds
its whole input: memory grows with the corpus only by the small per-problem facts a stage
keeps across problems (ids, keys, signatures; each stage's docstring says which). The manifest holds the hash of the stage's
input (the upstream manifests' output hashes) and of its config section; a stage
whose manifest matches is skipped, so a rerun after an interruption or a config edit
redoes only what changed. A stage removes its manifest before it writes and writes it
last; each file goes to a temporary name of its own and is renamed, and the export is
written into a temporary folder renamed into place whole: an interrupted or failed stage
leaves no output that could be taken for a finished one.

Before anything is written, every file the config names for the stages to run (sources,
date tables, evaluation sets, adopted caches) must be there and readable, or the build
stops with one line naming the first one missing. One build at a time writes a work_dir:
it holds an exclusive lock on `work_dir/build.lock` (which holds its pid); another is
refused, naming that pid, or waits for it with `wait_lock`.

This file runs the stages; what they share (records, context, files) is `stages.py`,
the config `config.py`.

Choices of ours (the paper describes the corpus, not the pipeline):
- Relative paths in a config resolve against the repository root (the nearest
  ancestor of the config file holding `pyproject.toml`), else the config's folder.
- A record that makes a stage raise is rejected with the stage's input file and row,
  never stops the build.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from microcoder.data.config import PipelineConfig
from microcoder.data.stages import (
    STAGES,
    MissingInput,
    StageContext,
    StageFiles,
    StageInput,
    file_hash,
    fresh_folder_beside,
    read_manifest,
    remove_leftovers,
    replace_folder,
    sha256_of,
    write_json_atomic,
)
from microcoder.problems import remember_data_directory

PIPELINE_VERSION = 6
"""Part of every stage's config hash: bump when a stage's behaviour changes."""


def stage_config(config: PipelineConfig, stage: str) -> dict[str, Any]:
    """The part of the config a stage depends on (its cache key)."""
    common = {"version": PIPELINE_VERSION, "stage": stage}
    if stage == "ingest":
        return {**common, "sources": [source.model_dump() for source in config.sources]}
    if stage == "validate":
        settings = config.validate.model_dump()
        settings.pop("batch_size")  # how often verdicts are cached, not what they are
        return {**common, **settings, "time_limit_s": config.time_limit_s}
    if stage == "amplify":
        settings = config.amplify.model_dump()
        settings.pop("batch_size")
        limits = {name: value for name, value in config.validate.model_dump().items() if name.startswith("time_limit")}
        return {**common, **settings, **limits, "time_limit_s": config.time_limit_s}
    if stage == "difficulty":
        return {**common, **config.difficulty.model_dump(), "time_limit_s": config.time_limit_s}
    return {**common, **getattr(config, stage).model_dump()}  # dedup, decontaminate, export


def _input_hash(config: PipelineConfig, stage: str) -> str | None:
    """Ingest: the sources' contents. Later stages: the output hashes of every upstream
    stage (None when one has not run), and for decontaminate its evaluation sets' contents."""
    from microcoder.data.ingest import sources_fingerprint

    if stage == "ingest":
        return sources_fingerprint(config, config.sources)
    hashes = []
    for upstream in STAGES[: STAGES.index(stage)]:
        manifest = read_manifest(config, upstream)
        if manifest is None:
            return None
        hashes.append(manifest["output_hash"])
    if stage == "decontaminate":  # an evaluation set's content changed: decontaminate again
        hashes.append(sources_fingerprint(config, config.decontaminate.eval_sets))
    return sha256_of(hashes)


def is_done(config: PipelineConfig, stage: str) -> bool:
    manifest = read_manifest(config, stage)
    if manifest is None:
        return False
    outputs_exist = all((config.stage_dir(stage) / name).exists() for name in manifest.get("outputs", []))
    return (outputs_exist and manifest.get("input_hash") == _input_hash(config, stage)
            and manifest.get("config_hash") == sha256_of(stage_config(config, stage)))


def named_inputs(config: PipelineConfig, stage: str) -> list[tuple[str, Path]]:
    """(what the config calls it, path) for every local file `stage` reads that the config
    names. An `hf:` hub name or saved-dataset folder is not among them (a folder that is not
    there reads as a hub name): its failure is the ingest reject at row 0."""
    from microcoder.data.ingest import source_inputs, source_name

    if stage == "ingest":
        return [named for index, source in enumerate(config.sources)
                for named in source_inputs(config, source, f"sources[{index}]")]
    if stage == "validate" and config.validate.reference_timings_from is not None:
        return [("validate.reference_timings_from", config.resolve(config.validate.reference_timings_from))]
    if stage == "decontaminate":
        return [(f"{what} ({source_name(eval_set)})", path)
                for index, eval_set in enumerate(config.decontaminate.eval_sets)
                for what, path in source_inputs(config, eval_set, f"decontaminate.eval_sets[{index}]")]
    if stage == "amplify" and config.amplify.answers_from is not None:
        return [("amplify.answers_from", config.resolve(config.amplify.answers_from))]
    return []


def check_inputs(config: PipelineConfig, stages: tuple[str, ...] | list[str]) -> None:
    """Raise MissingInput, naming the first file missing or unreadable, unless every file
    the config names for `stages` can be read. Writes nothing."""
    unreadable = []
    for stage in stages:
        for what, path in named_inputs(config, stage):
            try:
                with open(path, "rb") as handle:
                    handle.read(1)
            except OSError as error:
                unreadable.append(f"{what}: {path}: {error.strerror or error}")
    if unreadable:
        more = f" (and {len(unreadable) - 1} more inputs)" if len(unreadable) > 1 else ""
        raise MissingInput(f"{unreadable[0]}{more}; no stage was run")


LOCK_FILE = "build.lock"
"""In work_dir: locked (fcntl.flock) by the build writing there, and holding its pid."""


class WorkDirLocked(RuntimeError):
    """Another build holds the work_dir's lock."""


@contextmanager
def work_dir_lock(config: PipelineConfig, log: Callable[[str], None] = print) -> Iterator[None]:
    """Hold the exclusive lock of the config's work_dir: raise WorkDirLocked naming the
    holder's pid, or with `config.wait_lock` wait for it. The kernel releases the lock when
    its holder exits, however it ends, so a killed build leaves no stale lock. Holding it,
    the temporary files of killed writers are removed."""
    work_dir = config.resolve(config.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    remember_data_directory(work_dir)  # hidden from the programs the stages run (docs/sandbox.md)
    path = work_dir / LOCK_FILE
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip() or "unknown"
            if not config.wait_lock:
                raise WorkDirLocked(f"{work_dir} is in use by another build (pid {holder}, lock {path}); "
                                    "wait for it to end, or pass --wait-lock") from None
            log(f"waiting for the build of pid {holder} to release {path}")
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        remove_leftovers(work_dir)
        yield
    finally:
        os.close(descriptor)


def run_stage(config: PipelineConfig, stage: str, force: bool = False, context: StageContext | None = None,
              log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run one stage (unless its manifest says it is done) and return its manifest. Called
    without a context, it checks the stage's inputs and holds the work_dir's lock while it
    runs; `build` does both for every stage and passes its context."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; choose one of {', '.join(STAGES)}")
    if context is not None:
        return _run_stage(config, stage, force, context, log)
    check_inputs(config, [stage])
    with work_dir_lock(config, log):
        context = StageContext(config, force=force)
        try:
            return _run_stage(config, stage, force, context, log)
        finally:
            context.close()


def _run_stage(config: PipelineConfig, stage: str, force: bool, context: StageContext,
               log: Callable[[str], None]) -> dict[str, Any]:
    if not force and is_done(config, stage):
        manifest = read_manifest(config, stage)
        log(f"{stage}: up to date ({manifest['counts']['out']} problems), skipped")
        return manifest
    input_hash = _input_hash(config, stage)
    if input_hash is None:
        previous = STAGES[STAGES.index(stage) - 1]
        raise MissingInput(f"{stage} reads the output of {previous}, which has not run: "
                           f"run `microcoder data {previous}` or `microcoder data build` first")
    final_dir = config.stage_dir(stage)
    if stage != "export":
        final_dir.mkdir(parents=True, exist_ok=True)
        (final_dir / "manifest.json").unlink(missing_ok=True)  # written last: until then the stage is not done
        manifest = _write_stage(config, stage, input_hash, context, final_dir)
    else:
        # Written into a folder of its own and renamed into place whole: a reader finds the
        # previous export or this one, never a part of one, and a failed export leaves the
        # previous one as it was.
        out_dir = fresh_folder_beside(final_dir)
        try:
            manifest = _write_stage(config, stage, input_hash, context, out_dir)
            replace_folder(out_dir, final_dir)
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
    log(f"{stage}: {manifest['counts']['in']} in, {manifest['counts']['out']} out, "
        f"{manifest['counts']['removed']} removed, {manifest['counts']['rejected']} rejected ({manifest['seconds']} s)")
    return manifest


def _write_stage(config: PipelineConfig, stage: str, input_hash: str, context: StageContext,
                 out_dir: Path) -> dict[str, Any]:
    """Run `stage`, its outputs written into `out_dir` line by line as it goes (`StageFiles`:
    whole or absent), its manifest last."""
    started = time.monotonic()
    with StageFiles(out_dir) as out:
        if stage == "ingest":
            from microcoder.data.ingest import ingest_sources

            ingest_sources(config, context, out)
            count_in = out.kept + len(out.rejects)
        else:
            previous_dir = config.stage_dir(STAGES[STAGES.index(stage) - 1])
            problems = StageInput(previous_dir / "problems.jsonl")
            out.input_rejects = problems.rejects  # filled by the stage's first pass over its input
            _run_on_problems(stage, problems, config, context, out_dir, out)
            if problems.rows is None:
                raise RuntimeError(f"{stage} did not read its input to the end")
            count_in = problems.rows
    outputs = list(StageFiles.OUTPUTS)
    if stage == "export":
        outputs += out.extra.pop("files", [])
    manifest = {
        "stage": stage,
        "input_hash": input_hash,
        "config_hash": sha256_of(stage_config(config, stage)),
        "output_hash": sha256_of(*(file_hash(out_dir / name) for name in outputs[:3])),
        "outputs": outputs,
        "counts": {"in": count_in, "out": out.kept, "removed": out.removed, "rejected": out.rejected},
        "seconds": round(time.monotonic() - started, 1),
        "extra": out.extra,
    }
    write_json_atomic(out_dir / "manifest.json", manifest)
    return manifest


def _run_on_problems(stage: str, problems: StageInput, config: PipelineConfig, context: StageContext,
                     out_dir: Path, out: StageFiles) -> None:
    if stage == "validate":
        from microcoder.data.validate import validate_problems

        validate_problems(problems, config, context, out)
    elif stage == "dedup":
        from microcoder.data.dedup import deduplicate

        deduplicate(problems, config.dedup, context, out)
    elif stage == "decontaminate":
        from microcoder.data.decontaminate import remove_contaminated

        remove_contaminated(problems, config, context, out)
    elif stage == "amplify":
        from microcoder.data.amplify import amplify_problems

        amplify_problems(problems, config, context, out)
    elif stage == "difficulty":
        from microcoder.data.difficulty import filter_by_difficulty

        filter_by_difficulty(problems, config, context, out)
    elif stage == "export":
        from microcoder.data.export import export_corpus

        export_corpus(problems, config, context, out_dir, out)
    else:
        raise ValueError(f"unknown stage {stage!r}")


def build(config: PipelineConfig, force: bool = False, generator: Any = None,
          log: Callable[[str], None] = print) -> dict[str, dict[str, Any]]:
    """Run every stage in order, skipping those already done; returns their manifests.
    `force` reruns all of them and re-reads every source (the content-keyed caches of
    reference verdicts and pass rates still apply). Every input is checked, and the
    work_dir locked, before the first stage runs."""
    check_inputs(config, STAGES)
    with work_dir_lock(config, log):
        context = StageContext(config, generator=generator, force=force)
        manifests = {}
        try:
            for stage in STAGES:
                manifests[stage] = run_stage(config, stage, force=force, context=context, log=log)
        finally:
            context.close()
    return manifests

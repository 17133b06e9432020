"""`microcoder data build`: sources -> a clean, deduplicated, decontaminated corpus.

    config = load_build_config("configs/data/shared.yaml")   # data/config.py
    build(config)                        # every stage, skipping those already done
    run_stage(config, "dedup")           # one stage; its input must exist

Stages, in order (docs/data_pipeline.md says what each removes and why):

    ingest -> validate -> dedup -> decontaminate -> amplify -> difficulty -> export

Each stage reads the previous stage's `problems.jsonl` and writes, under
`work_dir/<stage>/`: `problems.jsonl` (what it kept), `removed.jsonl` (one `Removal`
per dropped problem, with its reason and match), `rejects.jsonl` (malformed records:
file, row, field) and `manifest.json`. The manifest holds the hash of the stage's
input (the upstream manifests' output hashes) and of its config section; a stage
whose manifest matches is skipped, so a rerun after an interruption or a config edit
redoes only what changed. Files are written to a temporary name and renamed, so an
interrupted stage leaves no half-written output that could be taken for a finished one.

This file runs the stages; what they share (records, context, files) is `stages.py`,
the config `config.py`.

Choices of ours (the paper describes the corpus, not the pipeline):
- Relative paths in a config resolve against the repository root (the nearest
  ancestor of the config file holding `pyproject.toml`), else the config's folder.
- A record that makes a stage raise is rejected with the stage's input file and row,
  never stops the build.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from microcoder.data.config import PipelineConfig
from microcoder.data.stages import (
    STAGES,
    StageContext,
    StageOutput,
    file_hash,
    read_manifest,
    read_stage_problems,
    sha256_of,
    write_json_atomic,
    write_lines_atomic,
)
from microcoder.problems import Problem

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
    stage (None when one has not run)."""
    if stage == "ingest":
        from microcoder.data.ingest import sources_fingerprint

        return sources_fingerprint(config)
    hashes = []
    for upstream in STAGES[: STAGES.index(stage)]:
        manifest = read_manifest(config, upstream)
        if manifest is None:
            return None
        hashes.append(manifest["output_hash"])
    return sha256_of(hashes)


def is_done(config: PipelineConfig, stage: str) -> bool:
    manifest = read_manifest(config, stage)
    if manifest is None:
        return False
    outputs_exist = all((config.stage_dir(stage) / name).exists() for name in manifest.get("outputs", []))
    return (outputs_exist and manifest.get("input_hash") == _input_hash(config, stage)
            and manifest.get("config_hash") == sha256_of(stage_config(config, stage)))


class MissingInput(RuntimeError):
    """A single stage was asked to run before the stage it reads from."""


def run_stage(config: PipelineConfig, stage: str, force: bool = False, context: StageContext | None = None,
              log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run one stage (unless its manifest says it is done) and return its manifest."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; choose one of {', '.join(STAGES)}")
    if not force and is_done(config, stage):
        manifest = read_manifest(config, stage)
        log(f"{stage}: up to date ({manifest['counts']['out']} problems), skipped")
        return manifest
    input_hash = _input_hash(config, stage)
    if input_hash is None:
        previous = STAGES[STAGES.index(stage) - 1]
        raise MissingInput(f"{stage} reads the output of {previous}, which has not run: "
                           f"run `microcoder data {previous}` or `microcoder data build` first")
    own_context = context is None
    context = context or StageContext(config, force=force)
    started = time.monotonic()
    out_dir = config.stage_dir(stage)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        if stage == "ingest":
            from microcoder.data.ingest import ingest_sources

            result = ingest_sources(config, context)
            count_in = len(result.problems) + len(result.rejects)
        else:
            previous_dir = config.stage_dir(STAGES[STAGES.index(stage) - 1])
            problems, input_rejects = read_stage_problems(previous_dir / "problems.jsonl", stage)
            result = _run_on_problems(stage, problems, config, context)
            result.rejects[:0] = input_rejects
            count_in = len(problems) + len(input_rejects)
    finally:
        if own_context:
            context.close()
    outputs = ["problems.jsonl", "removed.jsonl", "rejects.jsonl"]
    write_lines_atomic(out_dir / "problems.jsonl", (p.model_dump_json() for p in result.problems))
    write_lines_atomic(out_dir / "removed.jsonl", (r.to_json() for r in result.removals))
    write_lines_atomic(out_dir / "rejects.jsonl", (r.to_json() for r in result.rejects))
    if stage == "export":
        outputs += result.extra.pop("files", [])
    manifest = {
        "stage": stage,
        "input_hash": input_hash,
        "config_hash": sha256_of(stage_config(config, stage)),
        "output_hash": sha256_of(*(file_hash(out_dir / name) for name in outputs[:3])),
        "outputs": outputs,
        "counts": {"in": count_in, "out": len(result.problems), "removed": len(result.removals),
                   "rejected": len(result.rejects)},
        "seconds": round(time.monotonic() - started, 1),
        "extra": result.extra,
    }
    write_json_atomic(out_dir / "manifest.json", manifest)
    log(f"{stage}: {count_in} in, {len(result.problems)} out, {len(result.removals)} removed, "
        f"{len(result.rejects)} rejected ({manifest['seconds']} s)")
    return manifest


def _run_on_problems(stage: str, problems: list[Problem], config: PipelineConfig, context: StageContext) -> StageOutput:
    if stage == "validate":
        from microcoder.data.validate import validate_problems

        return validate_problems(problems, config, context)
    if stage == "dedup":
        from microcoder.data.dedup import deduplicate

        return deduplicate(problems, config.dedup, context)
    if stage == "decontaminate":
        from microcoder.data.decontaminate import remove_contaminated

        return remove_contaminated(problems, config, context)
    if stage == "amplify":
        from microcoder.data.amplify import amplify_problems

        return amplify_problems(problems, config, context)
    if stage == "difficulty":
        from microcoder.data.difficulty import filter_by_difficulty

        return filter_by_difficulty(problems, config, context)
    if stage == "export":
        from microcoder.data.export import export_corpus

        return export_corpus(problems, config, context)
    raise ValueError(f"unknown stage {stage!r}")


def build(config: PipelineConfig, force: bool = False, generator: Any = None,
          log: Callable[[str], None] = print) -> dict[str, dict[str, Any]]:
    """Run every stage in order, skipping those already done; returns their manifests.
    `force` reruns all of them and re-reads every source (the content-keyed caches of
    reference verdicts and pass rates still apply)."""
    context = StageContext(config, generator=generator, force=force)
    manifests = {}
    try:
        for stage in STAGES:
            manifests[stage] = run_stage(config, stage, force=force, context=context, log=log)
    finally:
        context.close()
    return manifests

"""`microcoder data ...` commands."""

from __future__ import annotations

import os
import traceback
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import typer

from microcoder.data.config import PipelineConfig, RayEngineConfig, load_build_config
from microcoder.data.sources import formats_help

data_app = typer.Typer(help="Convert and build problem sets.", no_args_is_help=True, rich_markup_mode=None)


@data_app.command("convert")
def convert(
    input: Path = typer.Argument(..., exists=True, dir_okay=False, help="Source file (.json, .jsonl, .jsonl.gz; .parquet for livecodebench_release)."),
    format: str = typer.Option("auto", "--format", help=formats_help()),
    out: Path = typer.Option(..., "--out", help="Canonical JSONL to write."),
    rejects: Path | None = typer.Option(None, "--rejects", help="JSONL of rejected rows with file, row, field, reason."),
    workers: int = typer.Option(2, "--workers", help="Sandbox workers for formats whose asserts are recorded."),
    show: int = typer.Option(5, "--show", help="Rejected rows printed per reason."),
) -> None:
    """Convert a public problem set into the canonical format (docs/formats.md)."""
    from microcoder.data.loaders import load_problems
    from microcoder.data.stages import write_lines_atomic

    try:
        problems, rejected = load_problems(input, format=format, workers=workers)
        # Each file written whole or not at all: a conversion cut short (an error, a signal,
        # a full disk) leaves the previous file as it was, never half of a new one.
        if rejects is not None:
            write_lines_atomic(rejects, (reject.to_json() for reject in rejected))
        write_lines_atomic(out, (problem.model_dump_json(exclude_defaults=False) for problem in problems))
    except (ValueError, OSError) as error:
        _fail(error)
    by_reason = Counter(reject.reason for reject in rejected)
    shown: Counter[str] = Counter()
    for reject in rejected:
        if shown[reject.reason] < show:
            typer.echo(str(reject), err=True)
        shown[reject.reason] += 1
    dropped: Counter[str] = Counter()
    for problem in problems:
        dropped.update(problem.metadata.get("dropped_tests", {}))
    typer.echo(f"{input}: {len(problems)} converted, {len(rejected)} rejected -> {out}")
    for reason, count in by_reason.most_common():
        typer.echo(f"  rejected {count:5d}  {reason}")
    for reason, count in dropped.most_common():
        typer.echo(f"  dropped tests {count:5d}  {reason}")


def _fail(error: BaseException) -> NoReturn:
    """Print what failed as one line and exit 2; with MICROCODER_TRACEBACK=1 set (as for the
    other commands), the traceback first."""
    if os.environ.get("MICROCODER_TRACEBACK"):
        traceback.print_exception(error)
    if isinstance(error, OSError) and error.filename is not None:
        message = f"{error.filename}: {error.strerror or error}"  # a full or read-only disk: where
    else:
        message = str(error)
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2) from None


# ------------------------------------------------------------------- the pipeline
# `build` runs every stage; one subcommand per stage runs that stage alone
# (docs/data_pipeline.md). All read one YAML config (configs/data/*.yaml).

_CONFIG_HELP = "Pipeline config (YAML), e.g. configs/data/shared.yaml."
_WAIT_LOCK_HELP = PipelineConfig.model_fields["wait_lock"].description.rstrip(".") + " (the config's `wait_lock`)."


# Options that override a config field take the field's own docstring as their help.
_ENGINE_HELP = PipelineConfig.model_fields["engine"].description + " Default: the config's `engine`."
_RAY_ADDRESS_HELP = ("With --engine ray, " + RayEngineConfig.model_fields["address"].description
                     + " Default: the config's `ray.address`.")


def _load_pipeline_config(config: Path, no_progress: bool, wait_lock: bool, engine: str | None = None,
                          ray_address: str | None = None) -> PipelineConfig:
    try:
        loaded = load_build_config(config)
        if engine not in (None, "local", "ray"):
            raise ValueError(f"--engine: choose local or ray, got {engine!r}")
        if engine is not None:
            loaded.engine = engine
        if ray_address is not None:
            loaded.ray.address = ray_address
    except (OSError, ValueError) as error:
        _fail(error)
    if no_progress:
        loaded.progress = False
    if wait_lock:
        loaded.wait_lock = True
    return loaded


@contextmanager
def _one_line_errors() -> Iterator[None]:
    """What stops a build (a missing input, a locked work_dir, a full or read-only disk, a
    config a stage refuses) is one line and exit 2."""
    from microcoder.data.pipeline import MissingInput, WorkDirLocked
    from microcoder.evaluator.sandbox import SandboxFault

    try:
        yield
    except (MissingInput, WorkDirLocked, SandboxFault, OSError, ValueError) as error:
        _fail(error)


@data_app.command("build")
def build_command(
    config: Path = typer.Option(..., "--config", exists=True, dir_okay=False, help=_CONFIG_HELP),
    force: bool = typer.Option(False, "--force", help="Rerun every stage even when its manifest matches."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bars (logs, CI)."),
    wait_lock: bool = typer.Option(False, "--wait-lock", help=_WAIT_LOCK_HELP),
    engine: str | None = typer.Option(None, "--engine", help=_ENGINE_HELP),
    ray_address: str | None = typer.Option(None, "--ray-address", help=_RAY_ADDRESS_HELP),
) -> None:
    """Run every stage: ingest, validate, dedup, decontaminate, difficulty, export (done stages are skipped)."""
    import time

    from microcoder.data.pipeline import build

    loaded = _load_pipeline_config(config, no_progress, wait_lock, engine, ray_address)
    started = time.monotonic()
    with _one_line_errors():
        manifests = build(loaded, force=force, log=typer.echo)
    export_dir = loaded.stage_dir("export")
    typer.echo(f"built {manifests['export']['counts']['out']} problems in {time.monotonic() - started:.0f} s "
               f"-> {export_dir} (datasheet.md)")


def _stage_command(stage: str, summary: str):
    def command(
        config: Path = typer.Option(..., "--config", exists=True, dir_okay=False, help=_CONFIG_HELP),
        force: bool = typer.Option(False, "--force", help="Rerun even when the stage's manifest matches."),
        no_progress: bool = typer.Option(False, "--no-progress", help="No progress bars (logs, CI)."),
        wait_lock: bool = typer.Option(False, "--wait-lock", help=_WAIT_LOCK_HELP),
        engine: str | None = typer.Option(None, "--engine", help=_ENGINE_HELP),
        ray_address: str | None = typer.Option(None, "--ray-address", help=_RAY_ADDRESS_HELP),
    ) -> None:
        from microcoder.data.pipeline import run_stage

        loaded = _load_pipeline_config(config, no_progress, wait_lock, engine, ray_address)
        with _one_line_errors():
            run_stage(loaded, stage, force=force, log=typer.echo)

    command.__doc__ = summary
    data_app.command(stage)(command)


for _stage, _summary in (
    ("ingest", "Stage 1: read every source into canonical problems, with provenance."),
    ("validate", "Stage 2: drop tests that do not belong, run references, infer checkers."),
    ("dedup", "Stage 3: remove exact and near duplicates, keeping the richer record."),
    ("decontaminate", "Stage 4: remove problems that match the evaluation sets."),
    ("amplify", "Stage 5: mark shown tests, generate hidden ones answered by the reference."),
    ("difficulty", "Stage 6: optional model pass rate; pass-rate band and date filters."),
    ("export", "Stage 7: write Parquet, JSONL, verl's parquet, the split and the datasheet."),
):
    _stage_command(_stage, _summary)

"""`microcoder data ...` commands."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import typer

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

    try:
        problems, rejected = load_problems(input, format=format, workers=workers)
    except ValueError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    if rejects is not None:
        _write_atomically(rejects, (reject.to_json() for reject in rejected))
    _write_atomically(out, (problem.model_dump_json(exclude_defaults=False) for problem in problems))
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


def _write_atomically(path: Path, lines) -> None:
    """Write `lines` to `path` whole or not at all: a conversion cut short (an error, a
    signal) leaves the previous file as it was, never half of a new one."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            for line in lines:
                handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


# ------------------------------------------------------------------- the pipeline
# `build` runs every stage; one subcommand per stage runs that stage alone
# (docs/data_pipeline.md). All read one YAML config (configs/data/*.yaml).

_CONFIG_HELP = "Pipeline config (YAML), e.g. configs/data/shared.yaml."


def _load_pipeline_config(config: Path, no_progress: bool):
    from microcoder.data.config import load_build_config

    try:
        loaded = load_build_config(config)
    except (OSError, ValueError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    if no_progress:
        loaded.progress = False
    return loaded


@data_app.command("build")
def build_command(
    config: Path = typer.Option(..., "--config", exists=True, dir_okay=False, help=_CONFIG_HELP),
    force: bool = typer.Option(False, "--force", help="Rerun every stage even when its manifest matches."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bars (logs, CI)."),
) -> None:
    """Run every stage: ingest, validate, dedup, decontaminate, difficulty, export (done stages are skipped)."""
    import time

    from microcoder.data.pipeline import build

    loaded = _load_pipeline_config(config, no_progress)
    started = time.monotonic()
    manifests = build(loaded, force=force, log=typer.echo)
    export_dir = loaded.stage_dir("export")
    typer.echo(f"built {manifests['export']['counts']['out']} problems in {time.monotonic() - started:.0f} s "
               f"-> {export_dir} (datasheet.md)")


def _stage_command(stage: str, summary: str):
    def command(
        config: Path = typer.Option(..., "--config", exists=True, dir_okay=False, help=_CONFIG_HELP),
        force: bool = typer.Option(False, "--force", help="Rerun even when the stage's manifest matches."),
        no_progress: bool = typer.Option(False, "--no-progress", help="No progress bars (logs, CI)."),
    ) -> None:
        from microcoder.data.pipeline import MissingInput, run_stage

        loaded = _load_pipeline_config(config, no_progress)
        try:
            run_stage(loaded, stage, force=force, log=typer.echo)
        except MissingInput as error:
            typer.echo(f"error: {error}", err=True)
            raise typer.Exit(2) from None

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

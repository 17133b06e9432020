"""`microcoder data ...` commands."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import typer

data_app = typer.Typer(help="Convert and build problem sets.", no_args_is_help=True)


@data_app.command("convert")
def convert(
    input: Path = typer.Argument(..., exists=True, dir_okay=False, help="Source file (.json, .jsonl, .jsonl.gz)."),
    format: str = typer.Option("auto", "--format", help="auto|livecodebench|leetcodedataset|humaneval|humanevalpack|mbpp|codecontests|codeforces|apps"),
    out: Path = typer.Option(..., "--out", help="Canonical JSONL to write."),
    rejects: Path | None = typer.Option(None, "--rejects", help="JSONL of rejected rows with file, row, field, reason."),
    workers: int = typer.Option(2, "--workers", help="Sandbox workers for formats whose asserts are recorded."),
    show: int = typer.Option(5, "--show", help="Rejected rows printed per reason."),
) -> None:
    """Convert a public problem set into the canonical format (docs/formats.md)."""
    from microcoder.data.loaders import load_problems
    from microcoder.problems import write_problems

    try:
        problems, rejected = load_problems(input, format=format, workers=workers)
    except ValueError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    write_problems(out, problems)
    if rejects is not None:
        with open(rejects, "w", encoding="utf-8") as handle:
            for reject in rejected:
                handle.write(reject.to_json() + "\n")
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

"""The `microcoder` command line. Each command parses its options into the typed config of
its entry point and calls it; no logic lives here."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from microcoder.data.cli import data_app
from microcoder.problems import ProblemFormatError

app = typer.Typer(help="microcoder: RL training, evaluation and data for code models.", no_args_is_help=True)
app.add_typer(data_app, name="data")


@app.command()
def evaluate(
    problems: Optional[Path] = typer.Option(None, help="Canonical problems JSONL. Omit for the embedded default (HumanEval canonical solutions)."),
    samples: Optional[Path] = typer.Option(None, help='Samples JSONL: {"problem_id", "response"} or {"problem_id", "code"} per line.'),
    out: Path = typer.Option(Path("results.jsonl"), help="Results JSONL, one row per sample; a .summary.json is written beside it."),
    workers: int = typer.Option(0, help="Parallel runs; 0 = one per usable core."),
    mode: str = typer.Option("robust", help="robust (our rules) or strict (LiveCodeBench's rules)."),
    all_tests: bool = typer.Option(False, "--all-tests", help="Run every test, not stopping at the first failure."),
    time_limit: float = typer.Option(2.0, help="CPU seconds per test when a problem sets none."),
    memory_limit: int = typer.Option(1024, help="MiB of address space per test when a problem sets none."),
    resume: bool = typer.Option(False, "--resume", help="Keep rows already in --out; judge only the rest."),
) -> None:
    """Run model-written programs against tests in the sandbox and judge them."""
    from microcoder.evaluator.command import EvaluateJob, run_evaluate
    from microcoder.evaluator.evaluate import EvaluatorConfig

    console = Console()
    try:
        config = EvaluatorConfig(workers=workers, mode=mode, all_tests=all_tests, time_limit_s=time_limit,  # type: ignore[arg-type]
                                 memory_limit_mb=memory_limit)
        run_evaluate(EvaluateJob(problems, samples, out, resume, config), console)
    except (ProblemFormatError, ValueError, FileNotFoundError, KeyError) as error:
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from None


@app.command()
def train(
    overrides: Optional[list[str]] = typer.Argument(None, help="key=value config overrides, e.g. total_steps=20 beta=0.001."),
    config: Optional[Path] = typer.Option(None, "--config", help="Config YAML, e.g. configs/dapo.yaml (default: the embedded MicroCoder-GRPO CPU run)."),
    resume: Optional[Path] = typer.Option(None, "--resume", help="Run directory to continue from its last checkpoint (with its config.yaml unless --config is given)."),
) -> None:
    """Train a code model with MicroCoder-GRPO, GRPO or DAPO; writes a run directory."""
    from microcoder.training.config import load_config
    from microcoder.training.trainer import run_training

    console = Console()
    try:
        path = resume / "config.yaml" if resume is not None and config is None else config
        settings = load_config(path, [*(overrides or []), *([f"run_dir={resume}"] if resume is not None else [])])
        run_training(settings, resume=resume is not None)
    except (ProblemFormatError, ValueError, FileNotFoundError) as error:
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from None


if __name__ == "__main__":
    app()

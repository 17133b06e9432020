"""Every computed finding of a grid, or of a published record, with what its rows print."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from microcoder.experiments.analysis import finding_result, problem_paired
from microcoder.experiments.layout import load_grid_spec, problem_scores, run_minutes, seed_runs
from microcoder.experiments.spec import ExperimentSpec, Finding
from microcoder.experiments.verdict import SCORED, Verdict, holm_verdicts


SUMMARY_ORDER = ("main", "evaluator", "evaluator_decimal", "temperature", "data", "context_length", "truncation_mask",
                 "batch_size", "kl_clip")


@dataclass
class FindingRow:
    """One computed finding of a grid with everything its table rows print."""

    spec: ExperimentSpec
    grid: Path
    finding: Finding
    verdict: Verdict
    differences: dict[int, float]
    pairing: dict | None
    """problem_paired's analysis, None where there is none."""
    problem_files: bool
    """Whether any run of the finding's arms kept its per-problem held-out files."""
    minutes_per_seed: float | None
    """Mean wall minutes per run, summed over the finding's arms: what one more seed costs."""
    grid_minutes_per_seed: float | None
    """The same summed over every arm of the grid (None where an arm has no timed run)."""
    holm: tuple[str, float | None] | None = None
    """(verdict after Holm's correction across the record, adjusted p), once computed."""


def finding_rows(grid: Path, spec: ExperimentSpec) -> list[FindingRow]:
    """Every computed finding of a grid, from its finished runs."""
    runs = seed_runs(grid, spec, finished_only=True)
    every_arm = [[wall for wall, _, _ in run_minutes(grid, arm)] for arm in spec.arms]
    grid_minutes = sum(statistics.fmean(wall) for wall in every_arm) if all(every_arm) else None
    rows = []
    for finding in spec.computed_findings:
        verdict, differences = finding_result(finding, runs)
        scores = {arm: problem_scores(grid, arm) for arm in finding.arms}
        walls = [[wall for wall, _, _ in run_minutes(grid, arm)] for arm in finding.arms]
        minutes = sum(statistics.fmean(wall) for wall in walls) if all(walls) else None
        rows.append(FindingRow(spec, grid, finding, verdict, differences, problem_paired(finding, scores),
                               any(scores.values()), minutes, grid_minutes))
    return rows


def published_rows(data: Path) -> list[FindingRow]:
    """Every computed finding of every grid under `data` (a published DOCS/data), grids in
    SUMMARY_ORDER, with its verdict after Holm's correction across the scored ones."""
    grids = sorted((path.parent for path in data.glob("*/spec.yaml")),
                   key=lambda grid: (SUMMARY_ORDER.index(grid.name) if grid.name in SUMMARY_ORDER
                                     else len(SUMMARY_ORDER), grid.name))
    rows = [row for grid in grids for row in finding_rows(grid, load_grid_spec(grid))]
    for row, corrected in zip(rows, holm_verdicts([row.verdict for row in rows])):
        row.holm = corrected
    return rows


def scored_count(rows: list[FindingRow]) -> int:
    """The findings a test decided: Holm's family."""
    return sum(row.verdict.verdict in SCORED and row.verdict.p is not None for row in rows)

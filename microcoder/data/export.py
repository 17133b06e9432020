"""Stage 7, export: the corpus as Parquet and JSONL, the engines' files, and its datasheet.

- `<name>.jsonl`: canonical problems (docs/formats.md), readable with `read_problems`.
- `<name>.parquet`: the same rows with a fixed Arrow schema, so that
  `datasets.load_dataset("parquet", data_files=...)` reads it. `metadata` varies in shape
  from source to source, so it is stored as JSON text (`json.loads(row["metadata"])`);
  `checker` is a struct (null when absent); `tests` a list of {input, output, shown,
  generated}. `parquet_row_to_problem` turns a row back into a `Problem`.
- `split.json`: the seeded train/validation split (`export.validation_fraction`,
  `export.split_seed`; `engines.split_of`), ids per split.
- `verl/train.parquet`, `verl/validation.parquet`: verl's RL rows (engines.py), each naming
  its problem by reference into `<name>.jsonl` (list that file in verl's
  `reward.custom_reward_function.reward_kwargs.problems_files`).
- `trl/train.parquet`, `trl/validation.parquet`: TRL's conversational prompts
  (`prompt` = the chat messages with the starter code, `problem_id`).
- `datasheet.md` + `sources.png` + `difficulty.png` (datasheet.py).
- `all_rejects.jsonl`: every malformed record of every stage, with file, row and field.

`export_corpus` writes into the folder it is given; the pipeline gives it a temporary
folder and renames that into `work_dir/export/` whole, its manifest inside.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from microcoder.data.config import PipelineConfig
from microcoder.data.stages import (StageContext, StageOutput, StageSink, read_json_lines, write_lines_atomic,
                                   written_atomically)
from microcoder.problems import Problem


def arrow_schema():
    import pyarrow as pa

    checker = pa.struct([("float_tolerance", pa.float64()), ("float_tolerance_kind", pa.string()),
                         ("case_insensitive", pa.bool_()), ("case_insensitive_words", pa.list_(pa.string())),
                         ("unordered_lines", pa.bool_()), ("unordered_tokens", pa.bool_()), ("leading_count", pa.bool_()),
                         ("unordered_levels", pa.list_(pa.int64())), ("exact_decimals", pa.bool_()),
                         ("python", pa.string())])
    return pa.schema([
        ("id", pa.string()), ("prompt", pa.string()), ("kind", pa.string()), ("entry_point", pa.string()),
        ("starter_code", pa.string()), ("prelude", pa.string()),
        ("tests", pa.list_(pa.struct([("input", pa.string()), ("output", pa.string()), ("shown", pa.bool_()),
                                      ("generated", pa.bool_())]))),
        ("time_limit_s", pa.float64()), ("memory_limit_mb", pa.int64()), ("checker", checker),
        ("source", pa.string()), ("difficulty", pa.string()), ("date", pa.string()),
        ("tags", pa.list_(pa.string())), ("metadata", pa.string()),
    ])


def problem_to_parquet_row(problem: Problem) -> dict[str, Any]:
    row = problem.model_dump()
    row["metadata"] = json.dumps(row["metadata"], ensure_ascii=False, default=str)
    row["tests"] = [{"shown": False, "generated": False, **test} for test in row["tests"]]  # a fixed schema
    return row


def parquet_row_to_problem(row: dict[str, Any]) -> Problem:
    row = dict(row)
    row["metadata"] = json.loads(row["metadata"]) if isinstance(row["metadata"], str) else row["metadata"]
    if isinstance(row.get("checker"), dict):  # a struct field the row's problem left at its default reads as null
        row["checker"] = {key: value for key, value in row["checker"].items() if value is not None}
    return Problem.model_validate(row)


PARQUET_ROW_GROUP = 256
"""Rows per row group of `<name>.parquet`."""


def write_parquet(path: Path, problems: Iterable[Problem]) -> None:
    """`problems` as `<name>.parquet` (`arrow_schema`), a row group at a time."""
    with ParquetRows(path) as rows:
        for problem in problems:
            rows.add(problem)


class ParquetRows:
    """`<name>.parquet` written as problems come: a row group of `PARQUET_ROW_GROUP` rows
    at a time (the same file `pq.write_table(..., row_group_size=PARQUET_ROW_GROUP)` writes
    for them all), atomically."""

    def __init__(self, path: Path):
        self.path = path
        self._rows: list[dict[str, Any]] = []

    def __enter__(self) -> ParquetRows:
        import pyarrow.parquet as pq

        self._file = written_atomically(self.path, binary=True)
        handle = self._file.__enter__()
        self._writer = pq.ParquetWriter(handle, arrow_schema())
        return self

    def add(self, problem: Problem) -> None:
        self._rows.append(problem_to_parquet_row(problem))
        if len(self._rows) == PARQUET_ROW_GROUP:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self._rows:
            self._writer.write_table(pa.Table.from_pylist(self._rows, schema=arrow_schema()))
            self._rows = []

    def __exit__(self, kind, error, traceback) -> bool:
        try:
            if kind is None:
                self._flush()
            self._writer.close()
        except BaseException as failure:
            if not self._file.__exit__(type(failure), failure, failure.__traceback__):
                raise
            return False
        return self._file.__exit__(kind, error, traceback)


def slim(problem: Problem) -> Problem:
    """What the datasheet reads of a problem: everything but the texts of its statement,
    starter code, reference and tests (each test keeps its flags)."""
    metadata = dict(problem.metadata)
    if "reference_solution" in metadata:
        metadata["reference_solution"] = ""
    tests = [test.model_copy(update={"input": "", "output": ""}) for test in problem.tests]
    return problem.model_copy(update={"prompt": "", "starter_code": "", "tests": tests, "metadata": metadata})


def export_corpus(problems: Iterable[Problem], config: PipelineConfig, context: StageContext, out_dir: Path,
                  out: StageSink | None = None) -> StageSink:
    """Write the export, one problem at a time: the JSONL and Parquet corpus as they come.
    Held across problems: each problem's id by split (`split.json`), its verl and TRL rows
    (their prompts: ~2x its statement; each of those files is one row group, written at the
    end) and a `slim` copy for the datasheet (its metadata, tests as flags)."""
    from microcoder.data.datasheet import write_datasheet
    from microcoder.data.stages import STAGES

    from microcoder.data.engines import split_of, trl_row, verl_row, write_rows

    out = StageOutput() if out is None else out
    name = config.export.name
    splits: dict[str, list[str]] = {"train": [], "validation": []}
    verl_rows: dict[str, list[dict]] = {"train": [], "validation": []}
    trl_rows: dict[str, list[dict]] = {"train": [], "validation": []}
    summaries: list[Problem] = []
    with context.progress("export", 4) as advance:
        with written_atomically(out_dir / f"{name}.jsonl") as corpus, ParquetRows(out_dir / f"{name}.parquet") as parquet:
            for problem in problems:
                corpus.write(problem.model_dump_json() + "\n")
                parquet.add(problem)
                split = split_of(problem.id, config.export.validation_fraction, config.export.split_seed)
                verl_rows[split].append(verl_row(problem, len(splits[split]), split))
                trl_rows[split].append(trl_row(problem))
                splits[split].append(problem.id)
                summaries.append(slim(problem))
                out.keep(problem)
        advance()
        write_lines_atomic(out_dir / "split.json", [json.dumps(
            {"validation_fraction": config.export.validation_fraction, "seed": config.export.split_seed,
             **splits}, indent=1)])
        for split in splits:
            write_rows(verl_rows.pop(split), out_dir / "verl" / f"{split}.parquet")
            write_rows(trl_rows.pop(split), out_dir / "trl" / f"{split}.parquet")
        advance()
        all_rejects = [r for stage in STAGES[:-1] for r in read_json_lines(config.stage_dir(stage) / "rejects.jsonl")]
        write_lines_atomic(out_dir / "all_rejects.jsonl", (json.dumps(r, ensure_ascii=False) for r in all_rejects))
        advance()
        figures = write_datasheet(config, summaries, out_dir)
        advance()
    files = [f"{name}.jsonl", f"{name}.parquet", "all_rejects.jsonl", "datasheet.md", "split.json",
             "verl/train.parquet", "verl/validation.parquet", "trl/train.parquet", "trl/validation.parquet", *figures]
    out.extra = {"files": files}
    return out

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
from pathlib import Path
from typing import Any

from microcoder.data.config import PipelineConfig
from microcoder.data.stages import StageContext, StageOutput, read_json_lines, write_lines_atomic, written_atomically
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


def write_parquet(path: Path, problems: list[Problem]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist([problem_to_parquet_row(p) for p in problems], schema=arrow_schema())
    with written_atomically(path, binary=True) as handle:
        pq.write_table(table, handle, row_group_size=256)


def export_corpus(problems: list[Problem], config: PipelineConfig, context: StageContext, out_dir: Path) -> StageOutput:
    from microcoder.data.datasheet import write_datasheet
    from microcoder.data.stages import STAGES

    from microcoder.data.engines import split_of, write_trl_parquet, write_verl_parquet

    name = config.export.name
    with context.progress("export", 5) as advance:
        write_lines_atomic(out_dir / f"{name}.jsonl", (p.model_dump_json() for p in problems))
        advance()
        write_parquet(out_dir / f"{name}.parquet", problems)
        advance()
        splits: dict[str, list[Problem]] = {"train": [], "validation": []}
        for problem in problems:
            splits[split_of(problem.id, config.export.validation_fraction, config.export.split_seed)].append(problem)
        write_lines_atomic(out_dir / "split.json", [json.dumps(
            {"validation_fraction": config.export.validation_fraction, "seed": config.export.split_seed,
             **{split: [p.id for p in members] for split, members in splits.items()}}, indent=1)])
        for split, members in splits.items():
            write_verl_parquet(members, out_dir / "verl" / f"{split}.parquet", split)
            write_trl_parquet(members, out_dir / "trl" / f"{split}.parquet")
        advance()
        all_rejects = [r for stage in STAGES[:-1] for r in read_json_lines(config.stage_dir(stage) / "rejects.jsonl")]
        write_lines_atomic(out_dir / "all_rejects.jsonl", (json.dumps(r, ensure_ascii=False) for r in all_rejects))
        advance()
        figures = write_datasheet(config, problems, out_dir)
        advance()
    files = [f"{name}.jsonl", f"{name}.parquet", "all_rejects.jsonl", "datasheet.md", "split.json",
             "verl/train.parquet", "verl/validation.parquet", "trl/train.parquet", "trl/validation.parquet", *figures]
    return StageOutput(problems, extra={"files": files})

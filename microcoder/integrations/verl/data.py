"""Our problems JSONL as verl's RL parquet: one row per problem.

    python -m microcoder.integrations.verl.data problems.jsonl --out train.parquet [--split train]

A row, as verl 0.9.1's RLHFDataset and reward loop read it:
    data_source   "microcoder/<problem source>" (verl groups validation metrics by it)
    prompt        the chat messages our TRL trainer shows the policy (`build_messages`)
    ability       "code"
    reward_model  {"style": "rule", "ground_truth": <the Problem as JSON>}: what
                  `compute_score` judges against (tests, kind, entry_point, limits, checker)
    extra_info    {"split", "index" (row number), "problem_id"}

The ground truth is the whole problem as one JSON string, so parquet needs no schema for
test lists of any shape, and the reward function reads back exactly the problem the
evaluator expects. Needs pyarrow (in verl's environment, and in our `data` extra).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from microcoder.policy.prompts import build_messages
from microcoder.problems import Problem, read_problems


def verl_row(problem: Problem, index: int, split: str) -> dict:
    """The verl dataset row of one problem (see the module docstring)."""
    return {
        "data_source": f"microcoder/{problem.source or 'unknown'}",
        "prompt": build_messages(problem),
        "ability": "code",
        "reward_model": {"style": "rule", "ground_truth": problem.model_dump_json()},
        "extra_info": {"split": split, "index": index, "problem_id": problem.id},
    }


def write_verl_parquet(problems: Sequence[Problem], path: str | Path, split: str = "train") -> int:
    """Write `problems` as verl rows to `path`; returns the row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [verl_row(problem, index, split) for index, problem in enumerate(problems)]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return len(rows)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m microcoder.integrations.verl.data",
                                     description="Convert a microcoder problems JSONL into verl's RL parquet.")
    parser.add_argument("problems", help="problems JSONL (docs/formats.md)")
    parser.add_argument("--out", required=True, help="parquet file to write")
    parser.add_argument("--split", default="train", help="written into each row's extra_info.split")
    args = parser.parse_args(argv)
    count = write_verl_parquet(read_problems(args.problems), args.out, args.split)
    print(f"wrote {count} rows to {args.out}")


if __name__ == "__main__":
    main()

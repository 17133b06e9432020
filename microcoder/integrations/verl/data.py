"""Our problems JSONL as verl's RL parquet: one row per problem.

    python -m microcoder.integrations.verl.data problems.jsonl --out train.parquet [--split train] [--inline]

A row, as verl 0.9.1's RLHFDataset and reward loop read it:
    data_source   "microcoder/<problem source>" (verl groups validation metrics by it)
    prompt        the chat messages our TRL trainer shows the policy (`build_messages`)
    ability       "code"
    reward_model  {"style": "rule", "ground_truth": <a reference to the problem>}: what
                  `compute_score` judges against
    extra_info    {"split", "index" (row number), "problem_id"}

The ground truth is a reference by default, `{"ref": <id>, "sha256": <digest>}`
(problem_store.py): verl copies it into every trajectory, so the hidden tests stay in the
problems file, which each reward worker reads once
(`reward.custom_reward_function.reward_kwargs.problems_files`), and a problem edited since
the conversion is refused. With `--inline` it is the whole problem as one JSON string (no
problems file needed, but rollout.n copies of every test per prompt per step). Needs
pyarrow (in verl's environment, and in our `data` extra).
"""

from __future__ import annotations

import argparse
import pickle
from collections.abc import Sequence
from pathlib import Path

from microcoder.integrations.verl.problem_store import problem_reference
from microcoder.policy.prompts import build_messages
from microcoder.problems import Problem, read_problems


def verl_row(problem: Problem, index: int, split: str, inline: bool = False) -> dict:
    """The verl dataset row of one problem (see the module docstring)."""
    ground_truth = problem.model_dump_json() if inline else problem_reference(problem)
    return {
        "data_source": f"microcoder/{problem.source or 'unknown'}",
        "prompt": build_messages(problem),
        "ability": "code",
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {"split": split, "index": index, "problem_id": problem.id},
    }


def write_verl_parquet(problems: Sequence[Problem], path: str | Path, split: str = "train",
                       inline: bool = False) -> int:
    """Write `problems` as verl rows to `path`; returns the row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [verl_row(problem, index, split, inline) for index, problem in enumerate(problems)]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return len(rows)


def trajectory_bytes(problems: Sequence[Problem], inline: bool) -> list[int]:
    """Each problem's row pickled (as Ray and TransferQueue pickle what verl copies into every
    trajectory: the dataset row's columns), in bytes."""
    return [len(pickle.dumps(verl_row(problem, index, "train", inline))) for index, problem in enumerate(problems)]


def size_report(problems: Sequence[Problem], prompts: int, n: int) -> list[str]:
    """What travels per trajectory and per step, inline and by reference: the mean and the
    largest row, and a step of `prompts` x `n` trajectories at the mean and at the largest."""
    lines = []
    for inline in (True, False):
        sizes = sorted(trajectory_bytes(problems, inline))
        mean = sum(sizes) / len(sizes)
        lines.append(f"{'inline' if inline else 'reference'}: per trajectory mean {mean / 1e3:.1f} KB, max "
                     f"{sizes[-1] / 1e3:.1f} KB; per step of {prompts} x {n}: mean {mean * prompts * n / 1e6:.1f} MB, "
                     f"the {prompts} largest {sum(sizes[-prompts:]) * n / 1e6:.1f} MB")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m microcoder.integrations.verl.data",
                                     description="Convert a microcoder problems JSONL into verl's RL parquet.")
    parser.add_argument("problems", help="problems JSONL (docs/formats.md)")
    parser.add_argument("--out", help="parquet file to write")
    parser.add_argument("--split", default="train", help="written into each row's extra_info.split")
    parser.add_argument("--inline", action="store_true",
                        help="put each whole problem in its row instead of a reference to PROBLEMS")
    parser.add_argument("--sizes", action="store_true",
                        help="print the bytes verl copies per trajectory and per step, inline and by reference")
    parser.add_argument("--prompts", type=int, default=64, help="--sizes: prompts per step (data.train_batch_size)")
    parser.add_argument("--n", type=int, default=8, help="--sizes: responses per prompt (rollout.n)")
    args = parser.parse_args(argv)
    if not args.out and not args.sizes:
        parser.error("give --out (and/or --sizes)")
    problems = read_problems(args.problems)
    if args.sizes:
        print(f"{args.problems}: {len(problems)} problems")
        for line in size_report(problems, args.prompts, args.n):
            print(line)
    if args.out:
        count = write_verl_parquet(problems, args.out, args.split, args.inline)
        print(f"wrote {count} rows to {args.out}")
        if not args.inline:
            print(f"its rows name their problems by reference: list {Path(args.problems).resolve()} in "
                  "reward.custom_reward_function.reward_kwargs.problems_files")


if __name__ == "__main__":
    main()

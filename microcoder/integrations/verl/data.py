"""Our problems JSONL as verl's RL parquet: one row per problem.

    python -m microcoder.integrations.verl.data problems.jsonl --out train.parquet [--split train] [--inline]

A row is `microcoder.data.engines.verl_row` (`microcoder data build` writes the same rows
for its train/validation split): the chat prompt, and the problem as a reference into the
problems file by default (`--inline`: the whole problem). Needs
pyarrow (in verl's environment, and in our `data` extra).
"""

from __future__ import annotations

import argparse
import pickle
from collections.abc import Sequence
from pathlib import Path

from microcoder.data.engines import verl_row, write_verl_parquet
from microcoder.problems import Problem, read_problems

__all__ = ["verl_row", "write_verl_parquet", "trajectory_bytes", "size_report", "main"]


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

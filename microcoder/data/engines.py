"""The corpus as the engines load it: verl's RL parquet and TRL's conversational prompts.

    verl_row(problem, index, split)   # verl 0.9.1's RLHFDataset row
    trl_row(problem)                  # {"prompt": chat messages, "problem_id"}: TRL's GRPOTrainer

A verl row, as verl's RLHFDataset and reward loop read it:
    data_source   "microcoder/<problem source>" (verl groups validation metrics by it)
    prompt        the chat messages our trainer shows the policy (`build_messages`: the
                  statement, the starter code, the answer format)
    ability       "code"
    reward_model  {"style": "rule", "ground_truth": <a reference to the problem>}: what
                  `compute_score` judges against
    extra_info    {"split", "index" (row number), "problem_id"}

The ground truth is a reference by default, `{"ref": <id>, "sha256": <digest>}`: verl
copies it into every trajectory, so the tests stay in the problems file, which each reward
worker reads once (microcoder/integrations/verl/problem_store.py), and a problem edited
since the conversion is refused. Inline, it is the whole problem as one JSON string.

`split_of` assigns each problem to train or validation by a digest of its id and a seed:
the same problem lands in the same split in every build, whatever else the corpus holds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from microcoder.data.stages import written_atomically
from microcoder.policy.prompts import build_messages
from microcoder.problems import Problem


def problem_sha256(problem: Problem) -> str:
    """The hex sha256 of the problem's canonical JSON (what a reference pins)."""
    return hashlib.sha256(problem.model_dump_json().encode()).hexdigest()


def problem_reference(problem: Problem) -> str:
    """The ground-truth string that names `problem` by id and digest."""
    return json.dumps({"ref": problem.id, "sha256": problem_sha256(problem)})


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


def trl_row(problem: Problem) -> dict:
    """A row of TRL's conversational prompt format: GRPOTrainer applies the model's chat
    template to `prompt` and passes `problem_id` to the reward function."""
    return {"prompt": build_messages(problem), "problem_id": problem.id}


def write_rows(rows: list[dict], path: str | Path) -> int:
    """`rows` as one Parquet table (its schema read from them all) at `path`, atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with written_atomically(Path(path), binary=True) as handle:
        pq.write_table(pa.Table.from_pylist(rows), handle)
    return len(rows)


def write_verl_parquet(problems: Sequence[Problem], path: str | Path, split: str = "train",
                       inline: bool = False) -> int:
    """Write `problems` as verl rows to `path` (atomically); returns the row count."""
    return write_rows([verl_row(problem, index, split, inline) for index, problem in enumerate(problems)], path)


def write_trl_parquet(problems: Sequence[Problem], path: str | Path) -> int:
    """Write `problems` as TRL prompt rows to `path` (atomically); returns the row count."""
    return write_rows([trl_row(problem) for problem in problems], path)


def split_of(problem_id: str, validation_fraction: float, seed: int) -> str:
    """'validation' for about `validation_fraction` of ids, else 'train'; by a sha256 of
    the seed and the id, so never by Python's salted `hash`. Pure."""
    digest = int(hashlib.sha256(f"{seed}:{problem_id}".encode()).hexdigest()[:15], 16)
    return "validation" if digest / 16**15 < validation_fraction else "train"

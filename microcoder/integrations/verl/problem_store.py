"""Problems by reference: a dataset row names its problem by id and content hash, and each
reward worker reads the problems from their JSONL files.

Why: verl copies a row's `reward_model.ground_truth` into every trajectory of the prompt
(through the agent loop, TransferQueue and the reward worker's call), so a ground truth
that holds the whole problem, hidden tests and all, travels rollout.n times per prompt
per step. A reference is ~110 bytes however many tests the problem has.

    reference     {"ref": "<problem id>", "sha256": "<hex digest of the problem>"}
    digest        sha256 of `Problem.model_dump_json()`: the problem as the evaluator sees it,
                  whatever the file's whitespace or key order

`ProblemStore` reads its files once, keeping per problem only where its line lies and its
digest (about 200 bytes each); a problem is parsed from its line when asked for, and its
digest checked again, so an edited file is refused rather than judged against. Memory: the
index, plus whatever the caller caches (reward.py keeps the last PROBLEM_CACHE_SIZE).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from microcoder.data.engines import problem_reference, problem_sha256
from microcoder.problems import DuplicateIdError, Problem, ProblemFormatError, parse_problem

__all__ = ["ProblemStore", "REFERENCE_KEYS", "parse_reference", "problem_reference", "problem_sha256"]

REFERENCE_KEYS = {"ref", "sha256"}


def parse_reference(ground_truth: str) -> tuple[str, str] | None:
    """(problem id, sha256) when `ground_truth` is a reference, else None (an inline problem)."""
    if len(ground_truth) > 4096 or not ground_truth.lstrip().startswith('{"ref"'):
        return None
    try:
        value = json.loads(ground_truth)
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict) or set(value) != REFERENCE_KEYS:
        return None
    return str(value["ref"]), str(value["sha256"])


class _Line(NamedTuple):
    sha256: str
    file: int  # position in ProblemStore.paths
    row: int  # 1-based line number
    offset: int  # byte offset of the line
    length: int  # bytes, without the newline


class ProblemStore:
    """The problems of some JSONL files, looked up by (id, sha256); see the module docstring.

    Raises ProblemFormatError (file, row, field) for a bad line, FileNotFoundError for a
    missing file and ValueError for a gzipped one (lines must be seekable) or for one id
    given two different problems within one file.
    """

    def __init__(self, paths: Sequence[str | Path]):
        self.paths = [Path(path) for path in paths]
        self._lines: dict[str, list[_Line]] = {}
        for number, path in enumerate(self.paths):
            if path.suffix == ".gz":
                raise ValueError(f"{path}: problems_files must be plain JSONL (lines are read by offset); gunzip it")
            seen: set[str] = set()
            with open(path, "rb") as handle:
                offset = 0
                for row, line in enumerate(handle, start=1):
                    start, offset = offset, offset + len(line)
                    if not line.strip():
                        continue
                    problem = self._parse(path, row, line)
                    if problem.id in seen:
                        raise DuplicateIdError(path, row, "id", f"duplicate id {problem.id!r}")
                    seen.add(problem.id)
                    entry = _Line(problem_sha256(problem), number, row, start, len(line.rstrip(b"\r\n")))
                    self._lines.setdefault(problem.id, []).append(entry)

    @staticmethod
    def _parse(path: Path, row: int, line: bytes) -> Problem:
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ProblemFormatError(path, row, "(json)", error.msg) from None
        return parse_problem(record, path, row)

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._lines.values())

    def get(self, problem_id: str, sha256: str) -> Problem:
        """The problem with this id and digest, read from its line.

        Raises what `locate` raises, and ValueError when the line changed since the files
        were indexed.
        """
        entry = self.locate(problem_id, sha256)
        path = self.paths[entry.file]
        with open(path, "rb") as handle:
            handle.seek(entry.offset)
            line = handle.read(entry.length)
        problem = self._parse(path, entry.row, line)
        if problem.id != problem_id or problem_sha256(problem) != sha256:
            raise ValueError(f"{path} row {entry.row} changed while the run was reading it (problem {problem_id!r})")
        return problem

    def locate(self, problem_id: str, sha256: str) -> _Line:
        """Where the problem with this id and digest lies, without reading it.

        Raises KeyError when no file holds the id, and ValueError when the files hold it with
        another digest (the file changed since the parquet was written).
        """
        entries = self._lines.get(problem_id)
        if not entries:
            raise KeyError(f"problem {problem_id!r} is in none of problems_files "
                           f"({', '.join(map(str, self.paths))}): the parquet was written from another file")
        entry = next((entry for entry in entries if entry.sha256 == sha256), None)
        if entry is None:
            where = ", ".join(f"{self.paths[e.file]} row {e.row} (sha256 {e.sha256[:12]}...)" for e in entries)
            raise ValueError(f"problem {problem_id!r}: the dataset row pins sha256 {sha256[:12]}..., but "
                             f"problems_files hold {where}: the problem changed since the parquet was written; "
                             "convert the problems again (python -m microcoder.integrations.verl.data)")
        return entry

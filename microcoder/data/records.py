"""Rows of a source file on their way to `Problem`s, shared by the loaders and the assert recorder.

`read_records` reads a file's records; each becomes a `Row` that either `finish`es as a
`Problem` or raises `RowRejected`, reported as a `Reject` naming file, row and field.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from microcoder.data.formats import FORMATS
from microcoder.problems import Problem, ProblemFormatError, TestCase, iter_jsonl


@dataclass
class Reject:
    """A row that did not become a problem."""

    path: str
    row: int
    field: str
    reason: str
    """Short category used for counting, e.g. 'no tests left'."""
    message: str
    id: str | None = None

    def __str__(self) -> str:
        return f"{self.path}: row {self.row}: field '{self.field}': {self.message}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)


class RowRejected(ProblemFormatError):
    """A ProblemFormatError that also carries a short reason category."""

    def __init__(self, path: str | Path, row: int, field: str, message: str, reason: str | None = None):
        super().__init__(path, row, field, message)
        self.reason = reason or message


class Row:
    """Context for converting one record: where it came from, and its dropped tests."""

    def __init__(self, path: str, row: int, record: dict[str, Any]):
        self.path, self.row, self.record = path, row, record
        self.dropped: Counter[str] = Counter()

    def reject(self, field: str, message: str, reason: str | None = None) -> RowRejected:
        return RowRejected(self.path, self.row, field, message, reason)

    def require(self, field: str, kind: type | tuple[type, ...] = str) -> Any:
        if field not in self.record:
            raise self.reject(field, "missing", "missing field")
        value = self.record[field]
        if not isinstance(value, kind):
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise self.reject(field, f"expected {names}, got {type(value).__name__}", "wrong field type")
        return value

    def drop(self, reason: str, count: int = 1) -> None:
        if count:
            self.dropped[reason] += count

    def finish(self, problem_fields: dict[str, Any], tests: list[TestCase]) -> Problem:
        """Attach the kept tests and drop counts; reject when no test is left."""
        if not tests:
            detail = "; ".join(f"{n} dropped: {why}" for why, n in self.dropped.items()) or "none given"
            main_reason = self.dropped.most_common(1)[0][0] if self.dropped else "none given"
            raise self.reject("tests", f"no usable tests ({detail})", f"no tests left ({main_reason})")
        metadata = problem_fields.setdefault("metadata", {})
        if self.dropped:
            metadata["dropped_tests"] = dict(self.dropped)
        try:
            return Problem(tests=tests, **problem_fields)
        except ValueError as error:  # pydantic's ValidationError is a ValueError
            raise self.reject("(problem)", str(error).replace("\n", " ")[:300], "invalid problem") from None


def read_records(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """Yield (1-based row, record, None) or (row, None, error) for a .json list or a
    .jsonl(.gz) file. A JSON list that does not parse is one error at row 0."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        head = ""
        while not head.strip() and (chunk := handle.read(4096)):
            head += chunk
        if head.lstrip().startswith("["):
            text = head + handle.read()
            try:
                records = json.loads(text)
            except json.JSONDecodeError as error:
                yield 0, None, f"file is not valid JSON: {error.msg} at line {error.lineno}"
                return
            for row, record in enumerate(records, start=1):
                yield row, record, None
            return
    errors: list[ProblemFormatError] = []
    for row, record in iter_jsonl(path, on_error=errors.append):
        yield from ((error.row, None, f"line is not JSON: {error.message}") for error in errors)
        errors.clear()
        yield row, record, None
    yield from ((error.row, None, f"line is not JSON: {error.message}") for error in errors)


def base_metadata(item: Row, source: str, original_id: Any) -> dict[str, Any]:
    """The metadata every converted problem starts with: where it came from, its licence."""
    return {
        "original_id": original_id,
        "licence": FORMATS[source].licence,
        "source_file": Path(item.path).name,
        "source_row": item.row,
    }

"""Rows of a source file on their way to `Problem`s, shared by the loaders and the assert recorder.

`read_records` reads a file's records; each becomes a `Row` that either `finish`es as a
`Problem` or raises `RowRejected`, reported as a `Reject` naming file, row and field.
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from microcoder.problems import Problem, ProblemFormatError, TestCase


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
    .jsonl(.gz) file.

    A damaged JSONL file loses only what cannot be read: a line that is not UTF-8 or not
    JSON is an error at its row, and a file that ends early (a truncated .gz) is an error
    at the row after its last complete line; every line before is yielded. A JSON list is
    one value, so a list that cannot be read is one error at row 0."""
    gzipped = path.name.endswith(".gz")
    opener = gzip.open if gzipped else open
    where = "of the uncompressed data" if gzipped else "of the file"
    row, offset = 0, 0
    with opener(path, "rb") as handle:
        try:
            head = b""
            while not head.strip() and (chunk := handle.read(4096)):
                head += chunk
            if head.lstrip().startswith(b"["):
                yield from _json_list(head + handle.read(), where)
                return
            lines = io.BytesIO(head).readlines()
            if lines and not lines[-1].endswith(b"\n"):  # the head ends mid-line: finish that line
                lines[-1] += handle.readline()
            for line in itertools.chain(lines, handle):
                row += 1
                if line.strip():  # blank lines are no rows' business
                    yield _json_line(row, line, offset, where)
                offset += len(line)
        except (EOFError, OSError, zlib.error) as error:  # a truncated or corrupt .gz
            yield row + 1, None, (f"the file cannot be read past line {row} ({offset} bytes {where}): "
                                  f"{type(error).__name__}: {error}")


def _json_line(row: int, line: bytes, offset: int, where: str) -> tuple[int, Any, str | None]:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        return row, None, (f"line is not UTF-8: byte 0x{line[error.start]:02x} at byte {error.start} of the line "
                           f"(byte {offset + error.start} {where})")
    try:
        return row, json.loads(text.removeprefix("\ufeff")), None  # a byte-order mark is no part of the row
    except json.JSONDecodeError as error:
        return row, None, f"line is not JSON: {error.msg} at column {error.colno}"
    except RecursionError:
        return row, None, "line is not JSON this reader can hold: nested too deeply"


def _json_list(data: bytes, where: str) -> Iterator[tuple[int, Any, str | None]]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        yield 0, None, f"file is not UTF-8: byte 0x{data[error.start]:02x} at byte {error.start} {where}"
        return
    try:
        records = json.loads(text)
    except json.JSONDecodeError as error:
        yield 0, None, f"file is not valid JSON: {error.msg} at line {error.lineno}"
        return
    except RecursionError:
        yield 0, None, "file is not JSON this reader can hold: nested too deeply"
        return
    for row, record in enumerate(records, start=1):
        yield row, record, None


def base_metadata(item: Row, source: str, original_id: Any, licence: str) -> dict[str, Any]:
    """The metadata every converted problem of format `source` starts with: where it came
    from, its licence (the format's, from its entry in `sources.SOURCES`)."""
    return {
        "original_id": original_id,
        "licence": licence,
        "source_file": Path(item.path).name,
        "source_row": item.row,
    }

"""LiveCodeBench as published: the `code_generation_lite` release files (jsonl or parquet).

One row per problem, every field a string: question_title, question_content, platform,
question_id, contest_id, contest_date (ISO datetime), starter_code, difficulty,
public_test_cases (a JSON list of {input, output, testtype}), private_test_cases (the same
list, either as JSON or as base64 of zlib of a pickle of that JSON text) and metadata (a
JSON object; `func_name` names the function a `functional` problem calls). This is the
encoding `lcb_runner/benchmarks/code_generation.py` of LiveCodeBench/LiveCodeBench reads.

A pickle can name any importable callable and have the unpickler call it, so the private
tests are unpickled by `PlainDataUnpickler`, which refuses every global: only str, bytes,
int, float, bool, None, list, tuple, dict, set and bytearray can come out, and a pickle that names
anything else (`os.system`, `builtins.eval`, a class) is refused before anything runs.

The conversion keeps the benchmark as LiveCodeBench defines it: every public and private
test, in that order, and every problem (a statement that accepts several outputs is not
rejected here, as it is for the training sources: the benchmark's denominator is fixed).
`loaders.load_problems` reads these files (format `livecodebench_release`, detected from
the fields) and adds what needs its helpers (the statement's checker and fingerprint);
docs/formats.md says how each field maps.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import io
import json
import pickle
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from microcoder.data.literals import NotRepresentable, find_signature
from microcoder.data.records import Row, base_metadata, read_records
from microcoder.problems import TestCase

RELEASE_FIELDS = frozenset({"question_content", "public_test_cases", "private_test_cases"})
"""Fields that tell a release record from the other LiveCodeBench layouts."""

TIME_LIMIT_S = 6.0
"""Seconds per test, LiveCodeBench's own (`run_test(..., timeout=6)`, a wall-clock alarm
there; CPU seconds here, as every limit of ours). Memory is left to the evaluator's
default: LiveCodeBench sets no memory limit."""

MAX_PRIVATE_TESTS_BYTES = 1 << 30
"""Largest decompressed private-test blob accepted, whatever its compressed size."""

MAX_PRIVATE_TESTS_RATIO = 100
"""Past PRIVATE_TESTS_FREE_BYTES, the most a blob may inflate per compressed byte. Test
text compresses by a few times, repetitive tests by a few hundred; deflate's ceiling is
~1032, where zlib bombs sit. A bomb is refused once it inflates past
max(PRIVATE_TESTS_FREE_BYTES, MAX_PRIVATE_TESTS_RATIO x its compressed size), with at most
that much (plus one INFLATE_CHUNK_BYTES) inflated and held."""

PRIVATE_TESTS_FREE_BYTES = 64 << 20
"""Decompressed size accepted at any compression ratio."""

INFLATE_CHUNK_BYTES = 4 << 20

RELEASE_WINDOWS: dict[str, tuple[str, str]] = {
    "release_v1": ("2023-05-01", "2024-03-31"),
    "release_v2": ("2023-05-01", "2024-05-31"),
    "release_v3": ("2023-05-01", "2024-07-31"),
    "release_v4": ("2023-05-01", "2024-09-30"),
    "release_v5": ("2023-05-01", "2025-01-31"),
    "release_v6": ("2023-05-01", "2025-04-30"),
    "v2": ("2024-04-01", "2024-05-31"),
    "v3": ("2024-06-01", "2024-07-31"),
    "v4": ("2024-08-01", "2024-09-30"),
    "v5": ("2024-10-01", "2025-01-31"),
    "v6": ("2025-02-01", "2025-04-30"),
}
"""Named contest-date windows, (since, until) inclusive. `release_vN` is every problem of
LiveCodeBench's release N (May 2023 to the month its README gives); `vN` is what release N
added over release N-1, the window papers mean by "LiveCodeBench vN" (v6: February to
April 2025; the MicroCoder paper reports v6 and states no dates of its own)."""


def is_release_record(record: Any) -> bool:
    return isinstance(record, dict) and RELEASE_FIELDS <= set(record)


def is_release_file(path: Path) -> bool:
    """Whether `path` holds release rows: a parquet file, or JSON whose first record has
    the release's fields."""
    if path.suffix == ".parquet":
        return True
    first = next((record for _, record, _ in read_records(path) if record is not None), None)
    return is_release_record(first)


def window_dates(name: str) -> tuple[str, str]:
    """(since, until) of a named window; a ValueError names the known ones."""
    if name not in RELEASE_WINDOWS:
        raise ValueError(f"unknown release window {name!r}; choose one of {', '.join(RELEASE_WINDOWS)}")
    return RELEASE_WINDOWS[name]


# --------------------------------------------------------------------- reading


def read_parquet_records(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """Yield (1-based row, record, None) per row of a parquet file, as `read_records`
    does for JSON. Needs pyarrow (the `data` extra)."""
    try:
        import pyarrow.parquet as parquet
    except ModuleNotFoundError:
        raise ValueError(f"{path}: reading parquet needs pyarrow: pip install -e '.[data]'") from None
    row = 0
    for batch in parquet.ParquetFile(path).iter_batches(batch_size=64):
        for record in batch.to_pylist():
            row += 1
            yield row, record, None


# --------------------------------------------------------------- private tests


class UnsafePickleError(ValueError):
    """A pickle that names a global (a function or class) instead of holding plain data."""


class PlainDataUnpickler(pickle.Unpickler):
    """An unpickler that loads plain data only: every global a pickle names is refused,
    so no callable can be reached and nothing but the built-in containers and scalars is
    built (REDUCE, BUILD and the extension codes all need a global first)."""

    def find_class(self, module: str, name: str) -> Any:
        raise UnsafePickleError(f"the pickle names {module}.{name}; only plain data (strings, numbers, "
                                "lists, dicts) is accepted, so it was refused and nothing ran")


def decode_private_tests(text: str) -> Any:
    """The private tests' JSON text decoded: JSON as is, else base64 -> zlib -> pickle (of
    a JSON string) -> JSON. Raises ValueError (UnsafePickleError for a pickle carrying
    anything but plain data) saying which step failed."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        compressed = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ValueError("neither JSON nor base64") from None
    pickled = _inflate_bounded(compressed)
    try:
        value = PlainDataUnpickler(io.BytesIO(pickled)).load()
    except UnsafePickleError:
        raise
    except Exception as error:  # a malformed pickle raises many kinds of error
        raise ValueError(f"zlib data but not a pickle ({type(error).__name__}: {error})") from None
    if not isinstance(value, str):
        raise ValueError(f"the pickle holds a {type(value).__name__}, not the tests' JSON text")
    try:
        return json.loads(value)
    except json.JSONDecodeError as error:
        raise ValueError(f"the unpickled text is not JSON ({error.msg})") from None


def _inflate_bounded(compressed: bytes) -> bytes:
    """zlib data inflated chunk by chunk, refused (ValueError) as soon as it passes its
    bound (see MAX_PRIVATE_TESTS_RATIO): a bomb costs at most the bound in time and memory."""
    bound = min(MAX_PRIVATE_TESTS_BYTES, max(PRIVATE_TESTS_FREE_BYTES, MAX_PRIVATE_TESTS_RATIO * len(compressed)))
    inflater = zlib.decompressobj()
    chunks, size, pending = [], 0, compressed
    try:
        while not inflater.eof:
            chunk = inflater.decompress(pending, INFLATE_CHUNK_BYTES)
            pending = inflater.unconsumed_tail
            size += len(chunk)
            if size > bound:
                raise ValueError(f"decompresses to more than {bound} bytes (from {len(compressed)} compressed: "
                                 f"over {MAX_PRIVATE_TESTS_RATIO}x past {PRIVATE_TESTS_FREE_BYTES} bytes, "
                                 "or over the cap; a zlib bomb?)")
            chunks.append(chunk)
            if not chunk and not pending:  # truncated: no more input, no end of stream
                break
    except zlib.error as error:
        raise ValueError(f"base64 but not zlib data ({error})") from None
    return b"".join(chunks)


# ------------------------------------------------------------------ conversion


def _text(item: Row, field: str) -> str:
    value = item.record.get(field)
    if isinstance(value, (datetime.date, datetime.datetime)):  # a parquet timestamp column
        return value.isoformat()
    if not isinstance(value, str):
        raise item.reject(field, "missing" if value is None else f"expected str, got {type(value).__name__}",
                          "missing field" if value is None else "wrong field type")
    return value


def _tests(item: Row, field: str, decoded: Any) -> list[tuple[str, dict[str, Any]]]:
    """(field path, test) per test of one list, each checked to be {input, output, testtype}."""
    if not isinstance(decoded, list):
        raise item.reject(field, f"expected a list of tests, got {type(decoded).__name__}", "unparseable tests")
    tests = []
    for index, test in enumerate(decoded):
        where = f"{field}.{index}"
        if not isinstance(test, dict) or not {"input", "output", "testtype"} <= set(test):
            raise item.reject(where, "expected an object with input, output and testtype", "unparseable tests")
        for key in ("input", "output", "testtype"):
            if not isinstance(test[key], str):
                raise item.reject(f"{where}.{key}", f"expected str, got {type(test[key]).__name__}",
                                  "unparseable tests")
        tests.append((where, test))
    return tests


def release_fields(item: Row, licence: str) -> tuple[dict[str, Any], list[TestCase]]:
    """A release row's `Problem` fields and tests, or RowRejected naming the field.

    The caller adds the statement's checker and fingerprint and finishes the problem."""
    statement = _text(item, "question_content")
    starter = _text(item, "starter_code")
    question_id = _text(item, "question_id")
    try:
        public = json.loads(_text(item, "public_test_cases"))
    except json.JSONDecodeError as error:
        raise item.reject("public_test_cases", f"not JSON ({error.msg})", "unparseable tests") from None
    try:
        private = decode_private_tests(_text(item, "private_test_cases"))
    except UnsafePickleError as error:
        raise item.reject("private_test_cases", str(error), "unsafe pickle") from None
    except ValueError as error:
        raise item.reject("private_test_cases", str(error), "unparseable tests") from None
    raw_metadata = item.record.get("metadata", "{}")
    try:
        metadata_field = json.loads(raw_metadata) if isinstance(raw_metadata, str) else raw_metadata
    except json.JSONDecodeError as error:
        raise item.reject("metadata", f"not JSON ({error.msg})", "unparseable metadata") from None
    if not isinstance(metadata_field, dict):
        raise item.reject("metadata", "expected a JSON object", "unparseable metadata")

    tests = _tests(item, "public_test_cases", public) + _tests(item, "private_test_cases", private)
    testtypes = {test["testtype"] for _, test in tests}
    if not testtypes <= {"stdin", "functional"} or len(testtypes) > 1:
        raise item.reject("public_test_cases", f"testtypes {sorted(testtypes)}: expected all 'stdin' or all "
                          "'functional'", "unparseable tests")
    kind = "call" if testtypes == {"functional"} else "stdin"

    metadata = base_metadata(item, "livecodebench_release", question_id, licence)
    for field in ("question_title", "platform", "contest_id", "contest_date"):
        if item.record.get(field) is not None:
            metadata[field] = _text(item, field)
    metadata["public_tests"] = len(public)
    contest_date = metadata.get("contest_date", "")
    fields: dict[str, Any] = {
        "id": f"livecodebench/{question_id}",
        "prompt": statement.strip(),
        "kind": kind,
        "starter_code": starter,
        "source": "livecodebench",
        "difficulty": item.record["difficulty"] if isinstance(item.record.get("difficulty"), str) else None,
        "date": contest_date[:10] if _is_iso_date(contest_date[:10]) else None,
        "time_limit_s": TIME_LIMIT_S,
        "metadata": metadata,
    }
    if kind == "call":
        func_name = metadata_field.get("func_name")
        if not isinstance(func_name, str) or not func_name:
            raise item.reject("metadata.func_name", "a functional problem needs the name of its function",
                              "missing field")
        try:
            signature = find_signature(starter, func_name)
        except NotRepresentable as error:
            raise item.reject("starter_code", f"{error} (metadata.func_name is {func_name!r})",
                              "unparseable starter code") from None
        # As LiveCodeBench calls it: a method of a fresh instance of the starter's class.
        fields["entry_point"] = f"{signature.class_name}().{func_name}" if signature.class_name else func_name
        fields["prelude"] = None
        metadata["func_name"] = func_name
        for where, test in tests:
            for key, lines in (("input", [ln for ln in test["input"].split("\n") if ln.strip()]),
                               ("output", [test["output"]])):
                for line in lines:
                    try:
                        json.loads(line)
                    except json.JSONDecodeError as error:
                        raise item.reject(f"{where}.{key}", f"a functional test's {key} is not JSON ({error.msg})",
                                          "unparseable tests") from None
    return fields, [TestCase(input=test["input"], output=test["output"]) for _, test in tests]


def _is_iso_date(text: str) -> bool:
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return len(text) == 10

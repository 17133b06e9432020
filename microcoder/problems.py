"""The canonical problem format (one JSON object per line), documented in docs/formats.md.

Every loader converts its source into `Problem`; the evaluator, the trainer and the
data pipeline read nothing else. Reading is strict: a malformed row raises
`ProblemFormatError` naming the file, the 1-based row and the field.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_serializer, model_validator

# Imports LeetCode and LiveCodeBench make available to call-style solutions; used as the
# prelude of a `call` problem that names none. Solutions routinely use `List`, `deque`,
# `inf` ... without importing them, because the judges they were written for provide them.
# Not `random`: importing it costs every call ~0.7 ms, and solutions that use it import it.
DEFAULT_CALL_PRELUDE = """\
import bisect, collections, copy, datetime, functools, heapq, itertools, math, operator, re, string, sys
from typing import *
from bisect import *
from collections import *
from copy import deepcopy
from functools import *
from heapq import *
from itertools import *
from math import *
from operator import *
from string import *
inf = float("inf")
sys.setrecursionlimit(100000)
"""


class TestCase(BaseModel):
    """One test. For `stdin` problems: the program's standard input and expected output.
    For `call` problems: `input` holds one JSON value per line (the positional arguments)
    and `output` one JSON value (the expected return value), as in LiveCodeBench."""

    model_config = ConfigDict(extra="forbid")
    __test__ = False  # not a pytest test class

    input: str
    output: str
    shown: bool = False
    """The test appears in the statement (an example the model sees): a program that prints
    the shown outputs passes it without solving anything. The training reward always
    includes hidden tests (`microcoder.algorithms.rewards.select_tests`)."""
    generated: bool = False
    """Made by the data pipeline's amplify stage: an input generated from the stored ones,
    answered by the reference solution (docs/data_pipeline.md)."""

    @model_serializer(mode="wrap")
    def _leave_out_unset_marks(self, handler):
        # `shown` and `generated` only where true: a problem without marks keeps its bytes,
        # and with them its digest (verl references) and its step-0 cache key.
        data = handler(self)
        if isinstance(data, dict):
            for mark in ("shown", "generated"):
                if data.get(mark) is False:
                    del data[mark]
        return data


class Checker(BaseModel):
    """How an output is judged when plain token equality is not the rule."""

    model_config = ConfigDict(extra="forbid")

    float_tolerance: float | None = None
    """Numeric tokens match when |got - expected| <= tol or <= tol * |expected| (see
    `float_tolerance_kind`). In call problems it also lets a returned float meet an expected
    int within tol (else only an exactly equal float does)."""
    float_tolerance_kind: Literal["either", "absolute", "relative"] = "either"
    """Which error `float_tolerance` bounds: `either` (absolute or relative, Codeforces'
    usual rule), `absolute` (|got - expected| <= tol only: "within an absolute error of
    1e-2") or `relative` (|got - expected| <= tol * |expected| only). Left out of the JSON
    when `either`, so problems without it keep their bytes (and digests)."""
    case_insensitive: bool = False
    """Every token compares without regard to case ("you may print each letter of the
    string in any case")."""
    case_insensitive_words: list[str] = Field(default_factory=list)
    """`stdin`: the answer words that compare without regard to case, every other token
    exactly: ["NO", "YES"] for "print YES or NO; you can output the answer in any case",
    where a string printed beside the YES must still match letter for letter. Left out of
    the JSON when empty."""
    unordered_lines: bool = False
    """Output lines may appear in any order (compared as a multiset of lines). `stdin` only."""
    unordered_tokens: bool = False
    """`stdin`: the tokens of each expected line may come in any order (compared as a
    multiset, line breaks counting as whitespace as ever): "print the k indices in any
    order" after a first line holding k. Left out of the JSON when false."""
    leading_count: bool = False
    """`stdin`, with `unordered_tokens` or `unordered_lines`: the output prints a count
    before the items whose order is free, and it stays in place ("print k, followed by
    the k indices in any order"): the first token of each line (unordered_tokens: "3 1 2
    5" is not "1 2 5 3") or the first line (unordered_lines). Left out of the JSON when
    false."""
    exact_decimals: bool = False
    """`stdin`: decimal tokens compare as text, as integers do ("print the value rounded
    to exactly two digits after the decimal point": 0.3 is not 0.30). Left out of the
    JSON when false."""
    unordered_levels: list[int] = Field(default_factory=list)
    """`call` only: the nesting levels of the return value whose lists may come in any order
    (compared as multisets). 0 is the returned list itself, 1 each list inside it, and so
    on: [0] for "return the indices in any order", [0, 1] for "the triplets, and the
    numbers in each, in any order", [1] for "each group sorted any way, groups in order"."""
    python: str | None = None
    """Source defining `check(input: str, expected: str, got: str) -> bool`; runs sandboxed,
    in robust mode, instead of every other rule here. `stdin`: the test's input and
    expected output and the program's stdout. `call`: the test's input (one JSON argument
    a line), its expected output (JSON) and the JSON of the returned value."""


    @model_serializer(mode="wrap")
    def _leave_out_later_fields_at_their_defaults(self, handler):
        # Fields added after problems were first written are left out at their defaults,
        # so that those problems keep their bytes (and digests: verl references, caches).
        data = handler(self)
        if isinstance(data, dict):
            for name, default in _LATER_FIELD_DEFAULTS.items():
                if name in data and data[name] == default:
                    del data[name]
        return data


_LATER_FIELD_DEFAULTS = {"float_tolerance_kind": "either", "case_insensitive_words": [], "unordered_tokens": False,
                         "leading_count": False, "exact_decimals": False}


class Problem(BaseModel):
    """One programming problem in the canonical format."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    id: str = Field(min_length=1)
    """Unique within a file; conventionally `source/original-id`."""
    prompt: str
    """The statement shown to the model."""
    kind: Literal["stdin", "call"]
    """`stdin`: a program reading stdin, writing stdout. `call`: a function or method."""
    entry_point: str | None = None
    """For `call`: `name` for a function, `Class().method` for a method of a fresh instance."""
    starter_code: str = ""
    """Code the model is asked to complete (a signature), shown in the prompt."""
    prelude: str | None = None
    """For `call`: code run in the solution's module before it (imports, ListNode ...).
    None means DEFAULT_CALL_PRELUDE; an empty string means nothing."""
    tests: list[TestCase]
    time_limit_s: float | None = None
    """CPU seconds per test, positive and finite; None means the evaluator's default."""
    memory_limit_mb: int | None = None
    """Address-space limit per test in MiB; None means the evaluator's default."""
    checker: Checker | None = None
    source: str = ""
    difficulty: str | None = None
    date: str | None = None
    """ISO date (YYYY-MM-DD) the problem was published, where known."""
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Provenance and anything else: original id, licence, reference solution ..."""

    @field_validator("time_limit_s", mode="before")
    @classmethod
    def _time_limit_is_positive_and_finite(cls, value: Any) -> Any:
        # Before pydantic's own float parsing, which reads `true` as 1.0 and "2" as 2.0 and
        # lets 0 and nan through: a zero limit would time out every run.
        why = time_limit_error(value) if value is not None else None
        if why:
            raise FieldError("time_limit_s", why)
        return value

    @model_validator(mode="after")
    def _call_needs_entry_point(self) -> Problem:
        if self.kind == "call" and not self.entry_point:
            raise FieldError("entry_point", "a `call` problem needs `entry_point`")
        if self.checker is not None and self.kind != "stdin":
            for name in ("case_insensitive_words", "unordered_tokens", "leading_count", "exact_decimals"):
                if getattr(self.checker, name):
                    raise FieldError(f"checker.{name}", f"only `stdin` problems have `{name}`")
        if self.checker is not None and self.checker.unordered_levels:
            levels = self.checker.unordered_levels
            if self.kind != "call":
                raise FieldError("checker.unordered_levels", "only `call` problems have unordered levels")
            if any(level < 0 for level in levels) or len(set(levels)) != len(levels):
                raise FieldError("checker.unordered_levels", f"levels must be distinct and >= 0, got {levels}")
        if self.kind == "call":
            for index, test in enumerate(self.tests):
                _check_call_test(index, test)
        return self

    def call_prelude(self) -> str:
        return DEFAULT_CALL_PRELUDE if self.prelude is None else self.prelude


class FieldError(ValueError):
    """A whole-record check that failed on one field: reading names that field."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


def time_limit_error(value: object) -> str | None:
    """Why `value` is not a usable time limit or scale (a positive, finite number), or None.
    The one rule for `Problem.time_limit_s` and the evaluator's default and scale."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number of seconds, got {value!r}"
    if not math.isfinite(value) or value <= 0:
        return f"must be positive and finite, got {value!r}"
    return None


def _check_call_test(index: int, test: TestCase) -> None:
    for part, text in (("input", test.input), ("output", test.output)):
        lines = [text] if part == "output" else [ln for ln in text.split("\n") if ln.strip()]
        for line in lines:
            try:
                json.loads(line)
            except json.JSONDecodeError as error:
                raise FieldError(f"tests.{index}.{part}", f"not JSON ({error.msg}): {line[:80]!r}") from None


class ProblemFormatError(ValueError):
    """A row of a problems or samples file that cannot be read; names file, row and field."""

    def __init__(self, path: str | Path, row: int, field: str, message: str):
        self.path, self.row, self.field, self.message = str(path), row, field, message
        super().__init__(f"{path}: row {row}: field '{field}': {message}")


class DuplicateIdError(ProblemFormatError):
    """A row whose id an earlier row of the file already has."""


def _first_error(error: ValidationError) -> tuple[str, str]:
    first = error.errors()[0]
    cause = first.get("ctx", {}).get("error")
    if isinstance(cause, FieldError):
        return cause.field, str(cause)
    field = ".".join(str(part) for part in first["loc"]) or "(row)"
    return field, first["msg"]


def parse_problem(record: Any, path: str | Path = "<memory>", row: int = 0) -> Problem:
    """Validate one decoded JSON record, raising ProblemFormatError on failure."""
    if not isinstance(record, dict):
        raise ProblemFormatError(path, row, "(row)", f"expected a JSON object, got {type(record).__name__}")
    try:
        return Problem.model_validate(record)
    except ValidationError as error:
        field, message = _first_error(error)
        raise ProblemFormatError(path, row, field, message) from None


# Every directory this process read problems, tests or samples from, first read first. The
# sandboxes that judge programs hide each one from the programs they run (docs/sandbox.md,
# "Datasets"): a program that read its test file could print the expected output.
_data_directories: list[str] = []


def remember_data_directory(path: str | Path) -> None:
    """Note that data was read from `path` (a file: its directory; a directory: itself), so
    that no sandbox of this process shows it to the programs it runs."""
    path = os.path.realpath(path)
    directory = path if os.path.isdir(path) else os.path.dirname(path)
    if directory not in _data_directories:
        _data_directories.append(directory)


def data_directories() -> tuple[str, ...]:
    """The directories `remember_data_directory` was told of, first told first."""
    return tuple(_data_directories)


def data_directory_count() -> int:
    """How many directories `remember_data_directory` was told of: only ever grows, so a
    worker that hid that many hides them all (checked before every run, hence no copy)."""
    return len(_data_directories)


def iter_jsonl(
    path: str | Path, on_error: Callable[[ProblemFormatError], None] | None = None
) -> Iterator[tuple[int, Any]]:
    """Yield (1-based row, decoded object) for each non-blank line. A line that is not JSON
    raises ProblemFormatError with field '(json)', or, with `on_error`, is passed to it and
    skipped. Reads `.gz` transparently. Its directory is remembered as data (hidden from
    the programs any sandbox of this process runs)."""
    import gzip

    remember_data_directory(path)

    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for row, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                failure = ProblemFormatError(path, row, "(json)", error.msg)
                if on_error is None:
                    raise failure from None
                on_error(failure)
                continue
            yield row, record


def read_problems(
    path: str | Path, on_error: Callable[[ProblemFormatError], None] | None = None
) -> list[Problem]:
    """Read a canonical JSONL file. Without `on_error` the first bad row raises; with it,
    bad rows are passed to `on_error` and skipped. Duplicate ids are an error."""
    return parse_problems(iter_jsonl(path, on_error), path, on_error)


def parse_problems(
    rows: Iterable[tuple[int, Any]], path: str | Path, on_error: Callable[[ProblemFormatError], None] | None = None
) -> list[Problem]:
    """Problems from decoded (row, record) pairs of `path`, as `read_problems` says."""
    problems: list[Problem] = []
    seen: set[str] = set()
    for row, record in rows:
        try:
            problem = parse_problem(record, path, row)
            if problem.id in seen:
                raise DuplicateIdError(path, row, "id", f"duplicate id {problem.id!r}")
        except ProblemFormatError as error:
            if on_error is None:
                raise
            on_error(error)
            continue
        seen.add(problem.id)
        problems.append(problem)
    return problems


def write_problems(path: str | Path, problems: Iterable[Problem]) -> int:
    """Write problems as canonical JSONL; returns the number written."""
    count = 0
    with open(path, "w", encoding="utf-8") as handle:
        for problem in problems:
            handle.write(problem.model_dump_json(exclude_defaults=False) + "\n")
            count += 1
    return count

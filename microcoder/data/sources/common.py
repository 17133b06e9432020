"""What the source loaders share: the `Source` entry each one registers, ids and statement
fingerprints, the statement rules (checkers, unjudgeable problems), test builders, and
the statement trailers of contest sources (CodeContests, Codeforces).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from microcoder.data.literals import NotRepresentable, Signature, call_input, dumps, floats_as_annotated, literal, matches_annotation
from microcoder.data.records import Row, base_metadata
from microcoder.problems import Checker, Problem, TestCase

Converter = Callable[[Row, set[tuple[str, str]]], Problem]
"""(a row, the tests shared across its file) -> a Problem; raises RowRejected."""


@dataclass(frozen=True)
class Source:
    """One public problem-set format: what `load_problems` needs to read it."""

    name: str
    description: str
    """One line: what the format is and which files have it (the CLI's help)."""
    licence: str
    """Copied into each problem's metadata["licence"] (a source config may override it)."""
    detect: Callable[[dict[str, Any]], bool]
    """Whether a file whose first record is this one is in this format (tried in the
    table's order; the first that says yes wins)."""
    convert: Converter | None
    """A row -> a Problem; None for formats whose tests are assert code, which need a
    sandbox to record them (assert_tests.py)."""
    tests_field: str | None = "tests"
    """The record's field of (input, output) tests, searched for tests shared across the
    file's problems (None: not searched)."""

    @property
    def assert_tests(self) -> bool:
        """Tests are assert code: converting the format needs a sandbox to record them."""
        return self.convert is None


# ------------------------------------------------------------------ ids and fingerprints


def source_id(source: str, original_id: Any) -> str:
    return f"{source}/{original_id}"


def statement_hash(text: str) -> str:
    """Fingerprint of a statement, to find the same problem across files (train/test overlap)."""
    return hashlib.sha1(" ".join(text.split()).encode()).hexdigest()[:16]


# ------------------------------------------------------------ statement rules


# Statement phrases. Each pattern is deliberately narrow; docs/formats.md lists them.
_FLOAT_TOLERANCE = re.compile(
    r"(?:absolute|relative)[^.]{0,80}?error[^.]{0,80}?"
    r"(?:10\s*\^?\s*\{?\s*\(?\s*[-−–]\s*(\d+)|1e-(\d+)|10\s*\*\*\s*-(\d+))",
    re.IGNORECASE | re.DOTALL,
)
_ANY_CASE = re.compile(
    r"(?:in any case|any letter case|any register|each letter in any case|"
    r"upper or lower case|(?:uppercase|lowercase) or (?:uppercase|lowercase)|will be recognized as)",
    re.IGNORECASE,
)
_SEVERAL_ANSWERS = re.compile(
    r"(?:(?:print|output|return|find)\s+any(?:\s+one)?\s+of\s+them|"
    r"(?:print|output|return)\s+any\s+(?:valid|correct|such|possible)?\s*(?:answer|solution|one)|"
    r"any\s+of\s+them\s+(?:will\s+be\s+)?(?:accepted|is\s+accepted)|"
    r"multiple\s+(?:possible\s+)?(?:answers|solutions)[^.]{0,40}?(?:any|either))",
    re.IGNORECASE,
)
_INTERACTIVE = re.compile(r"this is an interactive problem|interaction protocol|\binteractive\b", re.IGNORECASE)


def stdin_checker(statement: str) -> Checker | None:
    """A checker from what the statement promises: float tolerance (bounding the absolute
    error, the relative one, or either, as the phrase names them), any letter case."""
    match = _FLOAT_TOLERANCE.search(statement)
    tolerance, kind = None, "either"
    if match:
        exponent = next(group for group in match.groups() if group)
        tolerance = 10.0 ** -int(exponent)
        kind = _tolerance_kind(match.group(0))
    case_insensitive = bool(_ANY_CASE.search(statement))
    if tolerance is None and not case_insensitive:
        return None
    return Checker(float_tolerance=tolerance, float_tolerance_kind=kind, case_insensitive=case_insensitive)


_ERROR_KINDS = re.compile(r"\b(absolute|relative)\b", re.IGNORECASE)


def _tolerance_kind(phrase: str) -> str:
    """`absolute` or `relative` when the tolerance phrase names only that error ("an
    absolute error of at most 10^-2"), else `either` ("absolute or relative error")."""
    kinds = {word.lower() for word in _ERROR_KINDS.findall(phrase)}
    return kinds.pop() if len(kinds) == 1 else "either"


def unjudgeable_statement(statement: str, tags: list[str] | None = None) -> tuple[str, str] | None:
    """(reason, message) when plain output comparison cannot judge a stdin problem with
    this statement (interactive, or several correct outputs), else None."""
    if _INTERACTIVE.search(statement) or (tags and "interactive" in tags):
        return "interactive", "interactive problem: needs an interactor"
    match = _SEVERAL_ANSWERS.search(statement)
    if match:
        return "several correct outputs", f"statement accepts several outputs ({match.group(0)!r}) and no checker is available"
    return None


def reject_unjudgeable(item: Row, statement: str, field: str, tags: list[str] | None = None) -> None:
    """Reject stdin problems plain output comparison cannot judge."""
    flagged = unjudgeable_statement(statement, tags)
    if flagged:
        reason, message = flagged
        raise item.reject(field, message, reason)


# ------------------------------------------------------------------ tests


def stdin_tests(item: Row, pairs: list[tuple[Any, Any]], shared: set[tuple[str, str]]) -> list[TestCase]:
    tests: list[TestCase] = []
    for test_input, test_output in pairs:
        if not isinstance(test_input, str) or not isinstance(test_output, str):
            item.drop("input/output is not a string")
        elif (test_input, test_output) in shared:
            item.drop("test shared with many other problems of the file")
        else:
            tests.append(TestCase(input=test_input, output=test_output))
    return tests


def signature_misfit(signature: Signature, arguments: list[Any], expected: Any) -> str | None:
    """Why a call test's decoded arguments and output do not fit the signature (count and
    top-level types), or None when they do."""
    if len(arguments) != len(signature.parameters):
        return "argument count does not match the signature"
    if not all(matches_annotation(value, signature.annotations.get(name))
               for name, value in zip(signature.parameters, arguments)):
        return "argument type does not match the signature"
    if not matches_annotation(expected, signature.returns):
        return "output type does not match the signature"
    return None


def call_test(item: Row, signature: Signature, arguments: list[Any], expected: Any) -> TestCase | None:
    """A call test from decoded values, or None (with a drop counted) when it does not fit."""
    misfit = signature_misfit(signature, arguments, expected)
    if misfit:
        item.drop(misfit)
        return None
    try:
        return TestCase(input=call_input(arguments), output=dumps(floats_as_annotated(expected, signature.returns)))
    except NotRepresentable as error:
        item.drop(f"not JSON-representable: {error}")
        return None


def entry_point(signature: Signature) -> str:
    return f"{signature.class_name}().{signature.name}" if signature.class_name else signature.name


# ---------------------------------------------- contest statements (CodeContests, Codeforces)


def _limits_from_statement(statement: str, metadata: dict[str, Any]) -> str:
    """Move the `Time Limit:` / `Memory Limit:` / `Tags:` trailer into metadata; returns
    the statement without it. The judge's limits were set for C++, so they are recorded,
    not imposed (the evaluator picks Python limits)."""
    time_match = re.search(r"\n\s*Time Limit:\s*(.+)", statement)
    if time_match:
        text = time_match.group(1)
        seconds = re.search(r"'seconds':\s*(\d+)", text)
        nanos = re.search(r"'nanos':\s*(\d+)", text)
        millis = re.match(r"\s*([\d.]+)\s*ms", text)
        plain = re.match(r"\s*([\d.]+)\s*s", text)
        if seconds:
            metadata["original_time_limit_s"] = int(seconds.group(1)) + (int(nanos.group(1)) / 1e9 if nanos else 0)
        elif millis:
            metadata["original_time_limit_s"] = float(millis.group(1)) / 1000
        elif plain:
            metadata["original_time_limit_s"] = float(plain.group(1))
    memory_match = re.search(r"\n\s*Memory Limit:\s*([\d.]+)\s*(Bytes|MB|megabytes)", statement, re.IGNORECASE)
    if memory_match:
        amount = float(memory_match.group(1))
        metadata["original_memory_limit_mb"] = int(amount / 2**20) if memory_match.group(2) == "Bytes" else int(amount)
    cut = min(
        (m.start() for m in (time_match, memory_match, re.search(r"\n\s*Tags:\s*\n", statement)) if m),
        default=len(statement),
    )
    return statement[:cut].strip()


def _statement_tags(statement: str) -> list[str]:
    match = re.search(r"\n\s*Tags:\s*\n\s*(\[.*?\])", statement, re.DOTALL)
    if not match:
        return []
    try:
        tags = literal(match.group(1))
    except NotRepresentable:
        return []
    return [str(tag) for tag in tags] if isinstance(tags, list) else []


def contest_problem(item: Row, source: Source, pairs: list[tuple[Any, Any]], shared: set[tuple[str, str]]) -> Problem:
    """A stdin problem of a contest source (CodeContests, Codeforces) from its (input, output) pairs."""
    statement = item.require("problem")
    name = item.record.get("name") or item.record.get("id") or f"{Path(item.path).name.split('.')[0]}-{item.row}"
    metadata = base_metadata(item, source.name, name, source.licence)
    tags = _statement_tags(statement)
    prompt = _limits_from_statement(statement, metadata)
    metadata["statement_sha1"] = statement_hash(prompt)
    reject_unjudgeable(item, prompt, "problem", tags)
    tests = stdin_tests(item, pairs, shared)
    fields = {
        "id": source_id(source.name, name),
        "prompt": prompt,
        "kind": "stdin",
        "source": source.name,
        "tags": tags,
        "checker": stdin_checker(prompt),
        "metadata": metadata,
    }
    return item.finish(fields, tests)

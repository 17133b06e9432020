"""What the source loaders share: the `Source` entry each one registers, ids and statement
fingerprints, the statement rules (checkers, unjudgeable problems), test builders, and
the statement trailers of contest sources (CodeContests, Codeforces).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from microcoder.data import readings
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


# Statement readings live in microcoder/data/readings.py (docs/data_pipeline.md lists them).
_INTERACTIVE = re.compile(r"this is an interactive problem|interaction protocol|\binteractive\b", re.IGNORECASE)


def stdin_reading(statement: str, outputs: Iterable[str] = ()) -> tuple[Checker, str] | None:
    """A checker from what a stdin problem's statement promises of its output (see
    microcoder/data/readings.py): an error bound on numbers (bounding the absolute error,
    the relative one, or either), decimals printed exactly as stated, answers in any
    letter case (the answer words the statement names and `outputs` print, else every
    token), the printed items in any order (the lines, or the tokens of each line, a
    leading count in place); with the rules it set and the sentences that decided them
    ("tolerance 0.01 (absolute): '...'; case_insensitive_words NO/YES: '...'", recorded as
    `metadata.checker_rule`). None when it promises none of these."""
    outputs = list(outputs)
    fields: dict[str, Any] = {}
    rules: list[str] = []
    tolerance = readings.read_tolerance(statement)
    exact = None if tolerance is not None else readings.read_exact_decimals(statement)
    if tolerance is not None:
        fields.update(float_tolerance=tolerance.value, float_tolerance_kind=tolerance.kind)
        rules.append(f"tolerance {tolerance.value:g} ({tolerance.kind}): {tolerance.words[:120]!r}")
    elif exact:
        fields["exact_decimals"] = True
        rules.append(f"exact_decimals: {exact[:120]!r}")
    letter_case = readings.read_letter_case(statement, outputs)
    if letter_case is not None and letter_case.words:
        fields["case_insensitive_words"] = list(letter_case.words)
        rules.append(f"case_insensitive_words {'/'.join(letter_case.words)}: {letter_case.sentence[:120]!r}")
    elif letter_case is not None:
        fields["case_insensitive"] = True
        rules.append(f"case_insensitive: {letter_case.sentence[:120]!r}")
    order = readings.read_stdin_order(statement, outputs)
    if order is not None:
        name = "unordered_lines" if order.lines else "unordered_tokens"
        fields[name] = True
        if order.leading_count:
            fields["leading_count"] = True
            name += " with leading_count"
        rules.append(f"{name}: {order.sentence[:120]!r}")
    return (Checker(**fields), "; ".join(rules)) if fields else None


def stdin_checker(statement: str, outputs: Iterable[str] = ()) -> Checker | None:
    """`stdin_reading`'s checker alone."""
    found = stdin_reading(statement, outputs)
    return found[0] if found else None


def set_stdin_checker(fields: dict[str, Any], statement: str, outputs: Iterable[str]) -> None:
    """A loader's stdin problem `fields` get `stdin_reading`'s checker, and its rules in
    `metadata.checker_rule` when there is one."""
    found = stdin_reading(statement, outputs)
    fields["checker"] = found[0] if found else None
    if found:
        fields["metadata"]["checker_rule"] = found[1]


def unjudgeable_statement(statement: str, tags: list[str] | None = None) -> tuple[str, str] | None:
    """(reason, message) when plain output comparison cannot judge a stdin problem with
    this statement (interactive, or several correct outputs), else None."""
    if _INTERACTIVE.search(statement) or (tags and "interactive" in tags):
        return "interactive", "interactive problem: needs an interactor"
    several = readings.read_several_answers(statement, "stdin")
    if several:
        return "several correct outputs", f"statement accepts several outputs ({several[:120]!r}) and no checker is available"
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
        "metadata": metadata,
    }
    set_stdin_checker(fields, prompt, [test.output for test in tests])
    return item.finish(fields, tests)

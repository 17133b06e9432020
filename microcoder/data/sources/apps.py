"""APPS as MapCoder ships it (`APPS_selected150.jsonl`): empty starter code -> stdin;
otherwise call tests with one argument per line and strings unquoted."""

from __future__ import annotations

from typing import Any

from microcoder.data.literals import NotRepresentable, find_signature, literal
from microcoder.data.records import Row, base_metadata
from microcoder.data.sources.common import (Source, call_test, entry_point, reject_unjudgeable, source_id,
                                            statement_hash, set_stdin_checker, stdin_tests)
from microcoder.problems import Problem, TestCase


def detect(record: dict[str, Any]) -> bool:
    return {"test_list", "description"} <= set(record)


def _apps_call_arguments(raw_inputs: list[str], arity: int) -> list[list[Any]] | None:
    """APPS (as shipped by MapCoder) writes one argument per line, strings unquoted.
    Read each argument position as literals when every test's value there is a literal
    of one JSON type, else as raw strings. Returns None per test whose line count does not
    match the arity, in a list aligned with raw_inputs."""
    split = [text.split("\n") for text in raw_inputs]
    columns: list[str] = []  # "literal" or "string" per position
    for position in range(arity):
        kinds: set[str] = set()
        for lines in split:
            if len(lines) != arity:
                continue
            try:
                kinds.add(type(literal(lines[position])).__name__)
            except NotRepresentable:
                kinds.add("raw")
        numeric = kinds <= {"int", "float"}
        columns.append("literal" if kinds and "raw" not in kinds and (len(kinds) == 1 or numeric) else "string")
    result: list[Any] = []
    for lines in split:
        if len(lines) != arity:
            result.append(None)
            continue
        result.append(
            [literal(line) if column == "literal" else line for line, column in zip(lines, columns)]
        )
    return result


def convert(item: Row, shared: set[tuple[str, str]]) -> Problem:
    record = item.record
    statement = item.require("description")
    starter = item.require("starter_code")
    raw_tests = item.require("test_list", list)
    original_id = record.get("id", record.get("name", item.row))
    metadata = base_metadata(item, "apps", original_id, SOURCE.licence)
    metadata["statement_sha1"] = statement_hash(statement)
    fields: dict[str, Any] = {
        "id": source_id("apps", original_id),
        "prompt": statement.strip(),
        "starter_code": starter,
        "source": "apps",
        "difficulty": record.get("difficulty") if isinstance(record.get("difficulty"), str) else None,
        "metadata": metadata,
    }
    good = [t for t in raw_tests if isinstance(t, dict) and {"input", "output"} <= set(t)]
    if len(good) < len(raw_tests):
        item.drop("test is not an {input, output} object", len(raw_tests) - len(good))
    # APPS wraps every expected output in a one-element list.
    outputs: list[Any] = []
    for test in good:
        output = test["output"]
        outputs.append(output[0] if isinstance(output, list) and len(output) == 1 else _Unwrappable)

    if not starter.strip():
        fields["kind"] = "stdin"
        reject_unjudgeable(item, statement, "description")
        pairs = [(t["input"], out) for t, out in zip(good, outputs) if out is not _Unwrappable]
        set_stdin_checker(fields, statement, [out for _, out in pairs if isinstance(out, str)])
        item.drop("output is not a one-element list", len(good) - len(pairs))
        return item.finish(fields, stdin_tests(item, pairs, shared))

    try:
        signature = find_signature(starter)
    except NotRepresentable as error:
        raise item.reject("starter_code", str(error), "unparseable starter code") from None
    fields["kind"] = "call"
    fields["entry_point"] = entry_point(signature)
    fields["prelude"] = None
    metadata["argument_encoding"] = "one argument per line, unquoted strings (inferred per position)"
    tests: list[TestCase] = []
    arguments_per_test = _apps_call_arguments([str(t["input"]) for t in good], len(signature.parameters))
    for test, arguments, expected in zip(good, arguments_per_test, outputs):
        if expected is _Unwrappable:
            item.drop("output is not a one-element list")
        elif arguments is None:
            item.drop("line count does not match the number of parameters")
        elif (str(test["input"]), str(test["output"])) in shared:
            item.drop("test shared with many other problems of the file")
        else:
            case = call_test(item, signature, arguments, expected)
            if case is not None:
                tests.append(case)
    return item.finish(fields, tests)


class _Unwrappable:
    """Marker: an APPS output that is not a one-element list."""


SOURCE = Source(
    "apps", "APPS, MapCoder's selection (APPS_selected150.jsonl)",
    licence="MIT (APPS)",
    detect=detect, convert=convert, tests_field="test_list",
)

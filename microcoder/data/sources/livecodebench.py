"""LiveCodeBench as the rllm release ships it (`lcb_*.json`): a JSON list of
{problem, starter_code, tests}; docs/formats.md, "How each source maps"."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from microcoder.data.literals import NotRepresentable, Signature, find_signature
from microcoder.data.records import Row, base_metadata
from microcoder.data.sources.common import (Source, call_test, entry_point, reject_unjudgeable, source_id,
                                            statement_hash, set_stdin_checker, stdin_tests)
from microcoder.problems import Problem, TestCase


def detect(record: dict[str, Any]) -> bool:
    return {"problem", "tests", "starter_code"} <= set(record)


def convert(item: Row, shared: set[tuple[str, str]]) -> Problem:
    statement = item.require("problem")
    starter = item.require("starter_code")
    raw_tests = item.require("tests", (list, str))
    if isinstance(raw_tests, str):  # some releases store the list as a JSON string
        try:
            raw_tests = json.loads(raw_tests)
        except json.JSONDecodeError as error:
            raise item.reject("tests", f"not JSON: {error.msg}", "unparseable tests") from None
        if not isinstance(raw_tests, list):
            raise item.reject("tests", "expected a list of tests", "unparseable tests")
    original_id = item.record.get("question_id") or item.record.get("id") or f"{Path(item.path).name.split('.')[0]}-{item.row}"
    metadata = base_metadata(item, "livecodebench", original_id, SOURCE.licence)
    metadata["statement_sha1"] = statement_hash(statement)
    kind = "call" if starter.strip() else "stdin"
    wanted = "functional" if kind == "call" else "stdin"
    signature: Signature | None = None
    if kind == "call":
        try:
            signature = find_signature(starter)
        except NotRepresentable as error:
            raise item.reject("starter_code", str(error), "unparseable starter code") from None
    else:
        reject_unjudgeable(item, statement, "problem")

    tests: list[TestCase] = []
    for index, test in enumerate(raw_tests):
        if not isinstance(test, dict) or not {"input", "output"} <= set(test):
            item.drop("test is not an {input, output} object")
            continue
        testtype = test.get("testtype", wanted)
        if testtype != wanted:
            item.drop(f"testtype {testtype!r} on a {kind} problem")
            continue
        if (str(test["input"]), str(test["output"])) in shared:
            item.drop("test shared with many other problems of the file")
            continue
        if kind == "stdin":
            tests.extend(stdin_tests(item, [(test["input"], test["output"])], set()))
            continue
        assert signature is not None
        try:
            arguments = [json.loads(line) for line in str(test["input"]).split("\n") if line.strip()]
            expected = json.loads(str(test["output"]))
        except json.JSONDecodeError:
            item.drop("functional test is not JSON")
            continue
        case = call_test(item, signature, arguments, expected)
        if case is not None:
            tests.append(case)

    fields: dict[str, Any] = {
        "id": source_id("livecodebench", original_id),
        "prompt": statement.strip(),
        "kind": kind,
        "starter_code": starter,
        "source": "livecodebench",
        "metadata": metadata,
    }
    if isinstance(item.record.get("difficulty"), str):
        fields["difficulty"] = item.record["difficulty"]
    date = item.record.get("contest_date") or item.record.get("date")
    if isinstance(date, str) and re.match(r"\d{4}-\d{2}-\d{2}", date):
        fields["date"] = date[:10]
    if kind == "call":
        assert signature is not None
        fields["entry_point"] = entry_point(signature)
        fields["prelude"] = None
    else:
        set_stdin_checker(fields, statement, [test.output for test in tests])
    return item.finish(fields, tests)


SOURCE = Source(
    "livecodebench", "LiveCodeBench, rllm's release (lcb_*.json)",
    licence="MIT (rllm-org/rllm release; problem text from AtCoder/LeetCode)",
    detect=detect, convert=convert,
)

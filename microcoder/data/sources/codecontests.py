"""CodeContests as the rllm release ships it (`codecontests_test.json`): {problem, tests:
{inputs, outputs}}, stdin problems whose statements end in a limits trailer."""

from __future__ import annotations

from typing import Any

from microcoder.data.records import Row
from microcoder.data.sources.common import Source, contest_problem
from microcoder.problems import Problem


def detect(record: dict[str, Any]) -> bool:
    return {"problem", "tests"} <= set(record) and isinstance(record["tests"], dict)


def convert(item: Row, shared: set[tuple[str, str]]) -> Problem:
    tests = item.require("tests", dict)
    inputs, outputs = tests.get("inputs"), tests.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise item.reject("tests", "expected {inputs: [...], outputs: [...]}", "unparseable tests")
    if len(inputs) != len(outputs):
        raise item.reject("tests", f"{len(inputs)} inputs but {len(outputs)} outputs", "unparseable tests")
    return contest_problem(item, SOURCE, list(zip(inputs, outputs)), shared)


SOURCE = Source(
    "codecontests", "CodeContests, rllm's release (codecontests_test.json)",
    licence="MIT (rllm-org/rllm release of CodeContests, CC-BY-4.0)",
    detect=detect, convert=convert,
)

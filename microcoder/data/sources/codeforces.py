"""Codeforces as the rllm release ships it (`codeforces_test.json`): {problem, tests:
[{input, output}]}, stdin problems whose statements end in a limits trailer."""

from __future__ import annotations

from typing import Any

from microcoder.data.records import Row
from microcoder.data.sources.common import Source, contest_problem
from microcoder.problems import Problem


def detect(record: dict[str, Any]) -> bool:
    return {"problem", "tests"} <= set(record) and not isinstance(record["tests"], dict)


def convert(item: Row, shared: set[tuple[str, str]]) -> Problem:
    tests = item.require("tests", list)
    pairs = []
    for test in tests:
        if isinstance(test, dict) and {"input", "output"} <= set(test):
            pairs.append((test["input"], test["output"]))
        else:
            item.drop("test is not an {input, output} object")
    return contest_problem(item, SOURCE, pairs, shared)


SOURCE = Source(
    "codeforces", "Codeforces, rllm's release (codeforces_test.json)",
    licence="MIT (rllm-org/rllm release; problem text from Codeforces)",
    detect=detect, convert=convert,
)

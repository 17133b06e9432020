"""MBPP (`MBPP.jsonl`): call problems whose tests are `assert f(x) == y` lines, recorded
by running the reference in the sandbox (assert_tests.py)."""

from __future__ import annotations

from typing import Any

from microcoder.data.sources.common import Source


def detect(record: dict[str, Any]) -> bool:
    return {"code", "test_list"} <= set(record)


SOURCE = Source(
    "mbpp", "MBPP (MBPP.jsonl; asserts recorded in the sandbox)",
    licence="CC-BY-4.0 (MBPP)",
    detect=detect, convert=None, tests_field=None,
)

"""HumanEvalPack's Python split (`humanevalpack_python.jsonl`): HumanEval's problems with a
buggy solution beside each; tests recorded as HumanEval's are (assert_tests.py)."""

from __future__ import annotations

from typing import Any

from microcoder.data.sources.common import Source


def detect(record: dict[str, Any]) -> bool:
    return "buggy_solution" in record


SOURCE = Source(
    "humanevalpack", "HumanEvalPack, Python (asserts recorded in the sandbox)",
    licence="MIT (bigcode-project/octopack)",
    detect=detect, convert=None, tests_field=None,
)

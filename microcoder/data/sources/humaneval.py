"""HumanEval (`HumanEval.jsonl.gz`): call problems whose tests are a `check(candidate)`
function of asserts, recorded by running the reference in the sandbox (assert_tests.py)."""

from __future__ import annotations

from typing import Any

from microcoder.data.sources.common import Source


def detect(record: dict[str, Any]) -> bool:
    return {"canonical_solution", "entry_point", "test", "prompt"} <= set(record)


SOURCE = Source(
    "humaneval", "HumanEval (HumanEval.jsonl.gz; asserts recorded in the sandbox)",
    licence="MIT (openai/human-eval)",
    detect=detect, convert=None, tests_field=None,
)

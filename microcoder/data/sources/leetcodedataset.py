"""LeetCodeDataset (`*.jsonl.gz`): call problems on `Solution().name`, tests as keyword
arguments and literal outputs, ListNode/TreeNode arguments through an adapter."""

from __future__ import annotations

import re
from typing import Any

from microcoder.data.leetcode_nodes import adapter_prelude, node_kind, uses_nodes
from microcoder.data.literals import (NotRepresentable, Signature, canonical_tree_values, find_signature,
                                      keyword_arguments, literal)
from microcoder.data.records import Row, base_metadata
from microcoder.data.sources.common import Source, call_test, source_id, statement_hash
from microcoder.problems import Checker, Problem, TestCase


def detect(record: dict[str, Any]) -> bool:
    return {"input_output", "entry_point"} <= set(record)


def convert(item: Row, shared: set[tuple[str, str]]) -> Problem:
    record = item.record
    task_id = item.require("task_id")
    entry = item.require("entry_point")
    completion = item.require("completion")
    header = item.require("prompt")
    pairs = item.require("input_output", (list, str))
    if isinstance(pairs, str):  # a Python-literal list in some releases
        try:
            pairs = literal(pairs)
        except NotRepresentable as error:
            raise item.reject("input_output", str(error), "unparseable tests") from None
        if not isinstance(pairs, list):
            raise item.reject("input_output", "expected a list of {input, output}", "unparseable tests")
    meta = record.get("meta") if isinstance(record.get("meta"), dict) else {}
    starter = record.get("starter_code") or meta.get("lang_code") or ""
    match = re.fullmatch(r"Solution\(\)\.(\w+)", entry.strip())
    if not match:
        raise item.reject("entry_point", f"expected 'Solution().name', got {entry!r}", "unsupported entry point")
    method = match.group(1)
    try:
        signature = find_signature(starter or completion, method)
    except NotRepresentable as error:
        raise item.reject("starter_code", str(error), "unparseable starter code") from None

    if not uses_nodes(signature):
        # A typo in the starter (`root: reeNode`) hides a tree argument; trust the
        # reference's annotations when they name ListNode/TreeNode.
        try:
            reference_signature = find_signature(completion, method)
        except NotRepresentable:
            reference_signature = None
        if reference_signature is not None and uses_nodes(reference_signature):
            signature = reference_signature
    nodes = uses_nodes(signature)
    return_kind = node_kind(signature.returns)
    # Node arguments travel as lists; the annotation check applies to the list form.
    check_signature = Signature(
        signature.name,
        signature.parameters,
        {k: v for k, v in signature.annotations.items() if node_kind(v) is None},
        None if return_kind else signature.returns,
        signature.class_name,
    )
    tests: list[TestCase] = []
    for pair in pairs:
        if not isinstance(pair, dict) or not {"input", "output"} <= set(pair):
            item.drop("test is not an {input, output} object")
            continue
        output_text = str(pair["output"]).strip()
        returns_str = (signature.returns or "").strip() == "str"
        if not output_text and not returns_str:  # for a str answer, "" is the empty string
            item.drop("empty output")
            continue
        if output_text.startswith("Error:") or output_text == "Execution timed out":
            # v0.3.1 recorded the reference run's failure instead of an answer.
            item.drop("output is a recorded error, not an answer")
            continue
        try:
            arguments = keyword_arguments(str(pair["input"]), signature.parameters)
        except NotRepresentable as error:
            item.drop(f"unparseable input ({_error_kind(error)})")
            continue
        try:
            expected = literal(output_text)
        except NotRepresentable as error:
            expected = error
        if returns_str and not isinstance(expected, str):
            expected = output_text  # v0.3.1 prints string answers unquoted
        if isinstance(expected, NotRepresentable):
            item.drop(f"unparseable output ({_error_kind(expected)})")
            continue
        if return_kind == "tree":
            expected = canonical_tree_values(expected) if isinstance(expected, list) or expected is None else expected
        elif return_kind == "list" and expected is None:
            expected = []
        case = call_test(item, check_signature, arguments, expected)
        if case is not None:
            tests.append(case)

    question_id = record.get("question_id", meta.get("question_id"))
    metadata = base_metadata(item, "leetcodedataset", task_id, SOURCE.licence)
    metadata.update(
        {
            "question_id": question_id,
            "reference_solution": completion,
            "statement_sha1": statement_hash(record.get("problem_description") or meta.get("question_title") or ""),
        }
    )
    if nodes:
        metadata["node_adapter"] = "arguments/results of type ListNode/TreeNode travel as LeetCode lists"
    if isinstance(record.get("test"), str):
        metadata["original_test"] = record["test"]
    prompt = record.get("problem_description") or meta.get("question_title") or record.get("query") or ""
    difficulty = record.get("difficulty") or meta.get("difficulty")
    date = record.get("estimated_date")
    float_return = (signature.returns or "").strip() == "float"
    fields: dict[str, Any] = {
        "id": source_id("leetcodedataset", task_id),
        "prompt": prompt.strip(),
        "kind": "call",
        "entry_point": f"_Adapter().{method}" if nodes else f"Solution().{method}",
        "starter_code": starter,
        # The dataset's header (imports, ListNode/TreeNode and their helpers) is what its
        # reference solutions were checked against; keep it, plus our adapter if needed.
        "prelude": header + (adapter_prelude(signature) if nodes else ""),
        "source": "leetcodedataset",
        "difficulty": difficulty if isinstance(difficulty, str) else None,
        "date": date[:10] if isinstance(date, str) and re.match(r"\d{4}-\d{2}-\d{2}", date) else None,
        "tags": [str(tag) for tag in record.get("tags") or []],
        # LeetCode accepts float answers within 1e-5.
        "checker": Checker(float_tolerance=1e-5) if float_return else None,
        "metadata": metadata,
    }
    return item.finish(fields, tests)


def _error_kind(error: NotRepresentable) -> str:
    """The stable head of a parse error, for counting (`argument 'x' is not a literal`)."""
    text = str(error)
    if "is not a literal" in text and text.startswith("argument"):
        return "an argument is an expression, not a literal"
    return text.split(":")[0].split(" (")[0]


SOURCE = Source(
    "leetcodedataset", "LeetCodeDataset (newfacade, *.jsonl.gz)",
    licence="MIT (newfacade/LeetCodeDataset; problem text is LeetCode's)",
    detect=detect, convert=convert, tests_field=None,  # its tests are its own
)

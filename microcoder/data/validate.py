"""Stage 2, validate: tests that belong to their problem, references that pass, checkers.

Per problem, in order:
1. Tests. Dropped (counted in `metadata.dropped_tests`): empty cases (blank input and
   output; a stdin test with a blank expected output), exact repeats, every test of an
   input given two different outputs, call tests whose argument count or top-level
   types do not fit the starter's signature, and stdin tests whose first line does not
   fit the statement's input format (below). A problem left with no test is removed;
   when every test misfit the input format the tests belong to another problem, and the
   removal says so.
2. Checker. For a problem without one, `stdin_checker` (the loaders' statement rules:
   "absolute or relative error ... 10^-6", "in any case") sets `checker`, recorded in
   `metadata.checker_inferred = "statement"`. Stdin statements that accept several
   answers or are interactive (`loaders.unjudgeable_statement`) are removed: equality cannot judge them.
3. Reference. `metadata.reference_solution` runs through the evaluator on every test;
   a problem whose reference is not accepted is removed with the verdict. Verdicts and
   each test's CPU time are cached by content under `validate/reference_verdicts.jsonl`
   after each batch, so an interrupted run loses at most one batch.
4. Time limit. A problem whose reference passed gets `metadata.reference_cpu_s` (CPU
   seconds of each test's run, in test order) and `time_limit_s` =
   `time_limit_multiple` x its slowest test, rounded up to 0.01 s, within
   [`time_limit_floor_s`, `time_limit_cap_s`] (`time_limit_from_reference`), as judges
   set a limit from the author's solution. Others keep the source's limit, or none (the
   judge's default applies). `metadata.time_limit_from` says which: `reference`,
   `source` or `default`.

The input-format check is deliberately cheap and narrow (choices of ours): it reads
only the first input line, from two statement styles. Codeforces: "The first line
contains a single integer / two integers ..." -> that many integer tokens. AtCoder:
the first line of the block after "in the following format:" when it is plain names
(`N M`) -> that many tokens, numbers when the statement says "All input values are
integers". Only the first mention is read (later ones describe a test case, a query);
statements in any other style are not checked.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from typing import Any

from microcoder.data.literals import NotRepresentable, find_signature
from microcoder.data.config import PipelineConfig, ValidateConfig
from microcoder.data.loaders import signature_misfit, stdin_checker, unjudgeable_statement
from microcoder.data.records import Reject
from microcoder.data.stages import Removal, StageContext, StageOutput, read_json_lines, sha256_of
from microcoder.problems import Problem, TestCase

_COUNT_WORDS = {"a single": 1, "one": 1, "an": 1, "a": 1, "exactly one": 1, "two": 2, "three": 3, "four": 4,
                "five": 5, "six": 6}
_FIRST_LINE = re.compile(r"\bthe first line\b", re.IGNORECASE)
_CODEFORCES_FIRST_LINE = re.compile(
    r"the first line(?: of (?:the )?input)?\s+contains\s+"
    r"(a single|exactly one|one|an|a|two|three|four|five|six)\s+"
    r"(?:positive |non-negative |nonnegative |negative |)integers?\b",
    re.IGNORECASE,
)
_MIXED_LINE = ("string", "and a ", "and an ", "followed", "character", "real", "letter", "word")
_ATCODER_FORMAT = re.compile(r"in the following format[^\n]*", re.IGNORECASE)
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_ALL_INTEGERS = re.compile(r"all (?:input )?values (?:in (?:the )?input )?are integers", re.IGNORECASE)
_NUMBER = re.compile(r"^[+-]?\d+(?:\.\d+)?$")
MISFIT = "input does not fit the stated input format"


def first_line_shape(statement: str) -> tuple[int, bool] | None:
    """(tokens, all numbers?) the statement promises for the first input line, or None
    when the statement is in no style we read. Only the statement's first mention of
    "the first line" / "in the following format" is read: later ones describe a test
    case or a query, not the input's first line."""
    first = _FIRST_LINE.search(statement)
    if first:
        match = _CODEFORCES_FIRST_LINE.match(statement, first.start())
        if not match:
            return None
        rest_of_sentence = re.split(r"\.\s|\n", statement[match.end():], maxsplit=1)[0].lower()
        if any(word in rest_of_sentence for word in _MIXED_LINE):
            return None  # "an integer n and a string s": more than integers on the line
        return _COUNT_WORDS[match.group(1).lower()], True
    match = _ATCODER_FORMAT.search(statement)
    if match and match.group(0).rstrip().endswith(":"):
        block = statement[match.end():].lstrip("\n")
        names = block.split("\n", 1)[0].strip().split()
        if names and all(_NAME.match(name) for name in names):
            return len(names), bool(_ALL_INTEGERS.search(statement))
    return None


def fits_first_line(test_input: str, shape: tuple[int, bool]) -> bool:
    """Token count, and numbers where integers are promised (a number is accepted where an
    integer is stated: statements call probabilities "integers" often enough)."""
    count, numbers = shape
    line = next((line for line in test_input.split("\n") if line.strip()), "")
    tokens = line.split()
    return len(tokens) == count and (not numbers or all(_NUMBER.match(token) for token in tokens))


def check_tests(problem: Problem, check_input_format: bool = True) -> tuple[list[TestCase], Counter[str]]:
    """The tests that belong to `problem`, and drop counts by reason. Pure."""
    dropped: Counter[str] = Counter()
    kept: list[TestCase] = []
    for test in problem.tests:
        if not test.input.strip() and not test.output.strip():
            dropped["empty test"] += 1
        elif problem.kind == "stdin" and not test.output.strip():
            dropped["empty expected output"] += 1
        else:
            kept.append(test)

    # repeats and conflicts, on whitespace-normalised text
    outputs_by_input: dict[str, set[str]] = {}
    for test in kept:
        outputs_by_input.setdefault(_norm(test.input), set()).add(_norm(test.output))
    unique: list[TestCase] = []
    seen: set[tuple[str, str]] = set()
    for test in kept:
        key = (_norm(test.input), _norm(test.output))
        if len(outputs_by_input[key[0]]) > 1:
            dropped["same input, different outputs"] += 1
        elif key in seen:
            dropped["duplicate test"] += 1
        else:
            seen.add(key)
            unique.append(test)
    kept = unique

    if problem.kind == "call":
        kept = _call_tests_fitting_signature(problem, kept, dropped)
    elif check_input_format:
        shape = first_line_shape(problem.prompt)
        if shape is not None:
            fitting = [test for test in kept if fits_first_line(test.input, shape)]
            dropped[MISFIT] += len(kept) - len(fitting)
            kept = fitting
    return kept, +dropped


def _norm(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().split("\n"))


def _call_tests_fitting_signature(problem: Problem, tests: list[TestCase], dropped: Counter[str]) -> list[TestCase]:
    """Call tests whose argument count and top-level types fit the starter's signature
    (problems without a readable starter are not checked)."""
    if not problem.starter_code.strip():
        return tests
    try:
        signature = find_signature(problem.starter_code)
    except NotRepresentable:
        return tests
    kept = []
    for test in tests:
        arguments = [json.loads(line) for line in test.input.split("\n") if line.strip()]
        misfit = signature_misfit(signature, arguments, json.loads(test.output))
        if misfit:
            dropped[misfit] += 1
        else:
            kept.append(test)
    return kept


def judge_flags(problem: Problem) -> tuple[str, str] | None:
    """(reason, message) when equality cannot judge a stdin problem, else None."""
    if problem.kind != "stdin" or (problem.checker is not None and problem.checker.python):
        return None
    return unjudgeable_statement(problem.prompt, problem.tags)


def reference_key(problem: Problem) -> str:
    """What a reference verdict depends on."""
    return sha256_of(problem.kind, problem.entry_point, problem.call_prelude() if problem.kind == "call" else "",
                     problem.metadata.get("reference_solution"), [t.model_dump() for t in problem.tests],
                     problem.checker.model_dump() if problem.checker else None,
                     problem.time_limit_s, problem.memory_limit_mb)


def time_limit_from_reference(test_cpu_seconds: list[float], multiple: float, floor_s: float, cap_s: float) -> float:
    """CPU seconds per test for a problem whose reference took `test_cpu_seconds` (one per
    test): `multiple` x the slowest, rounded up to 0.01 s, then clamped to [floor_s, cap_s].
    Pure. E.g. slowest 0.1234 s, multiple 3: 0.3702 -> 0.38, below a 1 s floor -> 1.0."""
    if not test_cpu_seconds:
        raise ValueError("no test times: a limit needs at least one reference run")
    scaled = math.ceil(round(multiple * max(test_cpu_seconds) * 100, 6)) / 100
    return min(cap_s, max(floor_s, scaled))


def validate_problems(problems: list[Problem], config: PipelineConfig, context: StageContext) -> StageOutput:
    settings = config.validate
    kept: list[Problem] = []
    removals: list[Removal] = []
    rejects: list[Reject] = []
    input_path = str(config.stage_dir("ingest") / "problems.jsonl")

    def remove(problem: Problem, reason: str, detail: str = "") -> None:
        removals.append(Removal(problem.id, problem.source, "validate", reason, detail))

    with context.progress("validate: tests and checkers", len(problems)) as advance:
        for row, problem in enumerate(problems, start=1):
            advance()
            try:
                tests, dropped = check_tests(problem, settings.check_input_format)
                if dropped:
                    counts = Counter(problem.metadata.get("dropped_tests", {}))
                    counts.update(dropped)
                    problem.metadata["dropped_tests"] = dict(counts)
                if not tests:
                    main = dropped.most_common(1)[0][0] if dropped else "none given"
                    if dropped.get(MISFIT, 0) and dropped[MISFIT] == sum(dropped.values()):
                        remove(problem, "tests do not fit the statement's input format",
                               f"{dropped[MISFIT]} tests; first line expected {first_line_shape(problem.prompt)}")
                    else:
                        remove(problem, f"no tests left ({main})", json.dumps(dict(dropped)))
                    continue
                problem.tests = tests
                flags = judge_flags(problem)
                if flags is not None:
                    remove(problem, flags[0], flags[1])
                    continue
                if settings.infer_checkers and problem.checker is None:
                    inferred = stdin_checker(problem.prompt)
                    if inferred is not None:
                        problem.checker = inferred
                        problem.metadata["checker_inferred"] = "statement"
                kept.append(problem)
            except Exception as error:  # noqa: BLE001 - one bad record never stops the build
                rejects.append(Reject(input_path, row, "(validate)", "validate error", f"{type(error).__name__}: {error}",
                                      problem.id))

    timings: dict[str, list[float]] = {}
    if settings.run_references:
        failed, timings = _reference_verdicts(kept, config, context)
        survivors = []
        for problem in kept:
            verdict = failed.get(problem.id)
            if verdict is None:
                survivors.append(problem)
            else:
                remove(problem, "reference fails its tests", verdict)
        kept = survivors
    for problem in kept:
        times = timings.get(problem.id)
        if times is not None:
            problem.metadata["reference_cpu_s"] = times
        if times is not None and settings.time_limits_from_reference:
            problem.time_limit_s = time_limit_from_reference(times, settings.time_limit_multiple,
                                                             settings.time_limit_floor_s, settings.time_limit_cap_s)
            problem.metadata["time_limit_from"] = "reference"
        else:
            problem.metadata["time_limit_from"] = "source" if problem.time_limit_s is not None else "default"
    with_reference = sum("reference_solution" in p.metadata for p in kept)
    return StageOutput(kept, removals, rejects, extra={"references_passed": with_reference,
                                                       "time_limits": time_limit_summary(kept, settings)})


def time_limit_summary(problems: list[Problem], settings: ValidateConfig) -> dict[str, Any]:
    """For the manifest and datasheet: where limits came from, how many sit at the floor or
    the cap, and the distribution of limits and of references' slowest tests."""
    from_counts = Counter(p.metadata.get("time_limit_from", "default") for p in problems)
    derived = [p for p in problems if p.metadata.get("time_limit_from") == "reference"]
    slowest = sorted(max(p.metadata["reference_cpu_s"]) for p in derived)
    limits = sorted(p.time_limit_s for p in derived)

    def quantiles(values: list[float]) -> dict[str, float]:
        if not values:
            return {}
        pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
        return {"min": values[0], "p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99), "max": values[-1]}

    return {
        "rule": {"multiple": settings.time_limit_multiple, "floor_s": settings.time_limit_floor_s,
                 "cap_s": settings.time_limit_cap_s},
        "from": dict(from_counts),
        "at_floor": sum(limit == settings.time_limit_floor_s for limit in limits),
        "at_cap": sum(limit == settings.time_limit_cap_s for limit in limits),
        "limit_s": quantiles(limits),
        "reference_slowest_test_s": quantiles(slowest),
    }


def _reference_verdicts(problems: list[Problem], config: PipelineConfig,
                        context: StageContext) -> tuple[dict[str, str], dict[str, list[float]]]:
    """({problem id: 'verdict: detail'} for each problem whose reference is not accepted,
    {problem id: CPU seconds of each test} for each whose reference is)."""
    from microcoder.evaluator import Sample

    cache_path = config.stage_dir("validate") / "reference_verdicts.jsonl"
    cache: dict[str, dict[str, Any]] = {record["key"]: record for record in read_json_lines(cache_path)
                                        if record.get("verdict") != "accepted" or "test_cpu_s" in record}
    todo = [p for p in problems if isinstance(p.metadata.get("reference_solution"), str)]
    keys = {p.id: reference_key(p) for p in todo}
    failed: dict[str, str] = {}
    timings: dict[str, list[float]] = {}
    pending = [p for p in todo if keys[p.id] not in cache]
    with context.progress("validate: reference solutions", len(todo)) as advance:
        advance(len(todo) - len(pending))
        step = max(1, config.validate.batch_size)
        for start in range(0, len(pending), step):
            batch = pending[start : start + step]
            samples = [Sample(p.id, code=p.metadata["reference_solution"]) for p in batch]
            results = context.evaluator().evaluate(batch, samples, on_result=lambda _: advance())
            with open(cache_path, "a", encoding="utf-8") as handle:
                for problem, result in zip(batch, results):
                    record = {"key": keys[problem.id], "id": problem.id, "verdict": result.verdict,
                              "detail": result.detail[:300], "tests_passed": result.tests_passed,
                              "tests_total": result.tests_total}
                    if result.verdict == "accepted":  # every test ran; 0.1 ms is below the noise
                        record["test_cpu_s"] = [round(seconds, 4) for seconds in result.test_cpu_seconds]
                    cache[record["key"]] = record
                    handle.write(json.dumps(record) + "\n")
    for problem in todo:
        record = cache[keys[problem.id]]
        if record["verdict"] != "accepted":
            failed[problem.id] = (f"{record['verdict']} after {record['tests_passed']}/{record['tests_total']} tests"
                                  + (f": {record['detail']}" if record["detail"] else ""))
        else:
            timings[problem.id] = record["test_cpu_s"]
    return failed, timings

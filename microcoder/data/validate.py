"""Stage 2, validate: tests that belong to their problem, references that pass, checkers.

Per problem, in order:
1. Tests. Dropped (counted in `metadata.dropped_tests`): empty cases (blank input and
   output; a stdin test with a blank expected output), exact repeats, every test of an
   input given two different outputs, call tests whose argument count or top-level
   types do not fit the starter's signature, and stdin tests whose first line does not
   fit the statement's input format (below). A problem left with no test is removed;
   when every test misfit the input format the tests belong to another problem, and the
   removal says so.
2. Checker. The statement is read as microcoder/data/readings.py says. Statements that
   accept several answers are removed, as equality with one recorded answer cannot judge
   them: stdin ones ("If there are multiple answers, print any"), interactive ones, and
   call ones ("Return any array that satisfies this condition", reason "several
   answers, no checker"). Otherwise the statement may set the checker
   (`metadata.checker_inferred = "statement"`, the rules in `metadata.checker_rule`):
   stdin problems without one get `stdin_reading` (an error bound, exact decimals, the
   answer words in any letter case, the lines or each line's tokens in any order); call
   problems get a stated error bound ("within 10^-5 of the actual answer") and, where
   the result is a list whose statement says it may come "in any order",
   `unordered_levels` ([0], or [1] for a result of fixed positions whose lists are
   unordered inside). Each inferred any-order checker is
   checked on the problem's own tests: every expected result, permuted at those levels,
   must be accepted (`metadata.checker_permuted_tests` counts the tests and how many
   permutations differ from the result); the reference must then pass with it (3.).
3. Reference. `metadata.reference_solution` runs through the evaluator on every test;
   a problem whose reference is not accepted is removed with the verdict. A run whose
   time decides something (a timeout, a test at `retime_above` of the limit or more, a
   time that sets a derived limit above the floor or is within `retime_margin` of doing
   so) is repeated up to `retime_runs` runs
   in all: accepted if one is, each test's least time over the accepted runs. Verdicts and
   each test's CPU time are cached by content under `validate/reference_verdicts.jsonl`
   after each batch, so an interrupted run loses at most one batch; with
   `reference_timings_from` they are taken from another build's cache where it has them.
4. Time limit. A problem whose reference passed gets `metadata.reference_cpu_s` (CPU
   seconds of each test's run, in test order) and `time_limit_s` =
   `time_limit_multiple` x its slowest test, rounded up to `time_limit_step_s`, within
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
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from microcoder.data import readings
from microcoder.data.config import PipelineConfig, ValidateConfig
from microcoder.data.literals import NotRepresentable, find_signature
from microcoder.data.sources.common import signature_misfit, stdin_reading, unjudgeable_statement
from microcoder.data.records import Reject
from microcoder.data.stages import (Removal, Spool, StageContext, StageOutput, StageSink, read_json_lines,
                                   sha256_of)
from microcoder.evaluator.compare import judge_call
from microcoder.problems import Checker, Problem, ProblemFormatError, TestCase, iter_jsonl

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
SEVERAL_ANSWERS = "several answers, no checker"

# Which levels of a nested result the words free. A result of fixed positions whose lists
# are unordered inside: "answer[0] is a list of ...", "the first list of the output".
_FIXED_POSITIONS = re.compile(r"\banswer\[[01]\]|\b(?:first|second) list of the output\b", re.IGNORECASE)
# The items inside each inner list said to come in any order ("the integers in the lists
# may be returned in any order", "the elements inside each group can be in any order").
_INNER_ANY_ORDER = re.compile(
    r"\b(?:in|inside|within|of) (?:the lists|each (?:list|group|subset|combination|triplet|quadruplet))\b"
    r"[^.\n]{0,60}?\b(?:in any order|any order)\b"
    r"|\bin any order\b[^.\n]{0,40}?\b(?:inside|within) each\b", re.IGNORECASE)
# The items inside each inner list said to be sorted: their order is fixed ("the words in
# each list must be sorted", "each group sorted in ascending order").
_INNER_SORTED = re.compile(
    r"\b(?:in|inside|within|of)? ?each (?:list|group|subset|combination|triplet|quadruplet|row|answer)\b"
    r"[^.\n]{0,50}?\b(?:sorted|in (?:ascending|increasing|non-decreasing|lexicographical) order)\b"
    r"|\bsorted\b[^.\n]{0,30}?\b(?:within|inside|in) each\b", re.IGNORECASE)
# What the inner lists are: collections whose order carries nothing (a group of anagrams, a
# subset, a combination, a triplet summing to zero) or sequences whose order is their content
# (a permutation, a path). LeetCode's judge accepts any inner order for the former.
_COLLECTION_WORDS = re.compile(r"\b(?:groups?|subsets?|combinations?|triplets?|quadruplets?|partitions?)\b",
                               re.IGNORECASE)
_SEQUENCE_WORDS = re.compile(r"\b(?:permutations?|paths?|sequences?|orderings?|arrangements?|routes?|"
                             r"itinerar(?:y|ies)|sentences?|words? ladders?|transformations?)\b", re.IGNORECASE)
INNER_UNDECIDED = "inner order undecided"
"""A nested result whose outer order the words free but whose inner lists they neither free
nor fix: level 0 only, listed in the datasheet for a hand decision."""

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
    """(reason, message) when equality cannot judge the problem, else None: interactive
    stdin problems, and statements that accept several answers (stdin: the loaders' rules
    and `_SEVERAL_STDIN_OUTPUTS`; call: `_SEVERAL_CALL_RESULTS`), unless a Python checker
    judges them."""
    if problem.checker is not None and problem.checker.python:
        return None
    if problem.kind == "call":
        sentence = readings.read_several_answers(problem.prompt, "call")
        if sentence:
            return SEVERAL_ANSWERS, f"statement accepts several results ({sentence[:120]!r}) and no checker is available"
        return None
    return unjudgeable_statement(problem.prompt, problem.tags)


def list_depth(annotation: str | None, outputs: list[object]) -> int:
    """How many lists deep the result is: from the return annotation (`List[List[int]]`
    -> 2), else from the expected outputs (every one a list of lists -> 2); a bare `list`
    says one level at least, the outputs say how many. Pure."""
    if annotation and annotation.strip() not in _BARE_LISTS:
        depth, rest = 0, annotation.strip()
        while (inner := re.fullmatch(r"(?:List|list)\s*\[\s*(.*)\]", rest)) is not None:
            depth, rest = depth + 1, inner.group(1).strip()
            if rest in _BARE_LISTS:  # List[list]: the rest from the outputs
                return depth + max(1, _depth_of_outputs([item for value in outputs if type(value) is list
                                                          for item in value]))
        return depth
    return max(1, _depth_of_outputs(outputs)) if annotation else _depth_of_outputs(outputs)


_BARE_LISTS = ("list", "List", "typing.List")


def _depth_of_outputs(outputs: list[object]) -> int:
    depth = 0
    level = outputs
    while level and all(type(value) is list for value in level):
        depth += 1
        level = [item for value in level for item in value]
    return depth


def inferred_call_checker(problem: Problem) -> tuple[Checker, str] | None:
    """(checker, rule) from what a call problem's statement says of its result's order,
    or None. Only a result that is a list can have an order. "in any order" frees the
    returned list (level 0); for a list of lists, the inner lists' own order is read per
    level from the words:

    - a result of fixed positions (`answer[0]`): the outer order is not free, so what the
      words free is inside -> [1];
    - the items inside each inner list said to be sorted -> [0] (inner order fixed);
    - said to come in any order, or the inner lists are collections (groups, subsets,
      combinations, triplets) and not sequences (permutations, paths) -> [0, 1];
    - otherwise [0], the rule marked `INNER_UNDECIDED` for a hand decision."""
    words = readings.read_result_order(problem.prompt)
    if words is None:
        return None
    try:
        annotation = find_signature(problem.starter_code).returns if problem.starter_code.strip() else None
    except NotRepresentable:
        annotation = None
    depth = list_depth(annotation, [json.loads(test.output) for test in problem.tests])
    if depth == 0:
        return None
    levels, note = inner_levels(problem.prompt) if depth >= 2 else ([0], "")
    base = problem.checker or Checker()
    return (base.model_copy(update={"unordered_levels": levels}),
            f"any order, levels {levels}: {words!r}" + (f" ({note})" if note else ""))


def inner_levels(statement: str) -> tuple[list[int], str]:
    """The free levels of a list-of-lists result whose statement frees something (see
    `inferred_call_checker`), and a note on the words that decided. Pure."""
    inner_free = _INNER_ANY_ORDER.search(statement)
    if _FIXED_POSITIONS.search(statement):
        return [1], "fixed positions: the order freed is inside them"
    if _INNER_SORTED.search(statement):
        return [0], "inner lists sorted"
    if inner_free:
        return [0, 1], "inner lists free"
    collection, sequence = _COLLECTION_WORDS.search(statement), _SEQUENCE_WORDS.search(statement)
    if collection and not sequence:
        return [0, 1], f"inner lists are {collection.group(0).lower()}"
    if sequence and not collection:
        return [0], f"inner lists are {sequence.group(0).lower()}"
    return [0], INNER_UNDECIDED


def permuted(value: object, levels: list[int], level: int = 0) -> object:
    """`value` with every list at the given nesting levels reversed (the permutation the
    check below feeds the judge). Pure."""
    if type(value) is list:
        items = [permuted(item, levels, level + 1) for item in value]
        return items[::-1] if level in levels else items
    if type(value) is dict:
        return {key: permuted(item, levels, level + 1) for key, item in value.items()}
    return value


def check_permuted_answers(problem: Problem) -> tuple[int, str]:
    """Judge each test's expected result permuted at the checker's unordered levels:
    the checker must accept every one. Returns (how many permutations differ from the
    expected result, so that the judge without the checker rejects them; a reason, ""
    when every one is accepted)."""
    assert problem.checker is not None
    levels = problem.checker.unordered_levels
    changed = 0
    for index, test in enumerate(problem.tests, start=1):
        answer = permuted(json.loads(test.output), levels)
        accepted, reason = judge_call(test.output, answer, "robust", problem.checker)
        if not accepted:
            return changed, f"test {index}: the checker rejects the permuted expected result: {reason}"
        changed += not judge_call(test.output, answer, "robust", problem.checker.model_copy(update={"unordered_levels": []}))[0]
    return changed, ""


def _infer_checker(problem: Problem) -> str | None:
    """Set `problem.checker` from the statement where it says how outputs may differ;
    returns the rules applied (microcoder/data/readings.py), or None."""
    if problem.kind == "call":
        if problem.checker is not None and problem.checker.python:
            return None
        rules, checker = [], problem.checker or Checker()
        # A bound the statement states wins over the one a loader gave every float result
        # (LeetCode's 1e-5): the statement is what the platform's judge applies to this problem.
        tolerance = readings.read_tolerance(problem.prompt)
        if tolerance is not None and (checker.float_tolerance, checker.float_tolerance_kind) != (tolerance.value, tolerance.kind):
            checker = checker.model_copy(update={"float_tolerance": tolerance.value, "float_tolerance_kind": tolerance.kind})
            rules.append(f"tolerance {tolerance.value:g} ({tolerance.kind}): {tolerance.words[:120]!r}")
        if not checker.unordered_levels:
            found = inferred_call_checker(problem.model_copy(update={"checker": checker}))
            if found is not None:
                checker, rule = found
                rules.append(rule)
        if not rules:
            return None
        problem.checker = checker
        return "; ".join(rules)
    if problem.checker is not None:
        return None
    inferred = stdin_reading(problem.prompt, [test.output for test in problem.tests])
    if inferred is None:
        return None
    problem.checker, rules = inferred
    return rules


def reference_key(problem: Problem) -> str:
    """What a reference verdict depends on."""
    return sha256_of(problem.kind, problem.entry_point, problem.call_prelude() if problem.kind == "call" else "",
                     problem.metadata.get("reference_solution"), [{"input": t.input, "output": t.output} for t in problem.tests],
                     problem.checker.model_dump() if problem.checker else None,
                     problem.time_limit_s, problem.memory_limit_mb)


def time_limit_from_reference(test_cpu_seconds: list[float], multiple: float, floor_s: float, cap_s: float,
                              step_s: float) -> float:
    """CPU seconds per test for a problem whose reference took `test_cpu_seconds` (one per
    test): `multiple` x the slowest, rounded up to a multiple of `step_s`, then clamped to
    [floor_s, cap_s]. Pure. E.g. slowest 0.4 s, multiple 3, step 0.5: 1.2 -> 1.5."""
    if not test_cpu_seconds:
        raise ValueError("no test times: a limit needs at least one reference run")
    steps = math.ceil(round(multiple * max(test_cpu_seconds) / step_s, 6))
    scaled = round(steps * step_s, 6)
    return min(cap_s, max(floor_s, scaled))


def validate_problems(problems: Iterable[Problem], config: PipelineConfig, context: StageContext,
                      out: StageSink | None = None) -> StageSink:
    """The stage, one problem at a time: the checks of `_checked`, then, with
    `run_references`, the references run in batches (`_with_reference_verdicts`), then the
    time limits. Held across problems: the reference verdict cache (one record per distinct
    reference: its verdict and each test's CPU seconds), the keys of the references to run,
    and for the manifest each derived limit and slowest test time (two floats a problem)."""
    out = StageOutput() if out is None else out
    settings = config.validate
    tally = _Summary(settings)
    checked = _checked(problems, config, context, out, tally)
    if settings.run_references:
        checked = _with_reference_verdicts(checked, config, context, out)
    for problem, times in checked:
        if times is not None:
            problem.metadata["reference_cpu_s"] = times
        if times is not None and settings.time_limits_from_reference:
            problem.time_limit_s = time_limit_from_reference(times, settings.time_limit_multiple,
                                                             settings.time_limit_floor_s, settings.time_limit_cap_s,
                                                             settings.time_limit_step_s)
            problem.metadata["time_limit_from"] = "reference"
        else:
            problem.metadata["time_limit_from"] = "source" if problem.time_limit_s is not None else "default"
        tally.kept(problem)
        out.keep(problem)
    out.extra = tally.extra()
    return out


def _checked(problems: Iterable[Problem], config: PipelineConfig, context: StageContext, out: StageSink,
             tally: _Summary) -> Iterator[tuple[Problem, None]]:
    """(problem, None) for each problem that passes the checks (tests that fit, enough of
    them, judge flags, inferred checkers), its tests and checker as checked; the others are
    handed to `out` as removals, a record that raises as a reject."""
    settings = config.validate
    input_path = str(config.stage_dir("ingest") / "problems.jsonl")

    def remove(problem: Problem, reason: str, detail: str = "") -> None:
        out.remove(Removal(problem.id, problem.source, "validate", reason, detail))

    with context.progress("validate: tests and checkers", None) as advance:
        for row, problem in enumerate(problems, start=1):
            advance()
            tally.received(problem)
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
                if len(tests) < settings.min_tests:
                    remove(problem, f"fewer than {settings.min_tests} tests (min_tests)", f"{len(tests)} tests")
                    continue
                if settings.max_tests is not None and len(tests) > settings.max_tests:
                    tests = longest_inputs(tests, settings.max_tests)
                    counts = Counter(problem.metadata.get("dropped_tests", {}))
                    counts[f"over max_tests ({settings.max_tests}, the longest inputs kept)"] += len(problem.tests) - len(tests)
                    problem.metadata["dropped_tests"] = dict(counts)
                problem.tests = tests
                flags = judge_flags(problem)
                if flags is not None:
                    remove(problem, flags[0], flags[1])
                    continue
                rule = _infer_checker(problem) if settings.infer_checkers else None
                if rule is not None:
                    problem.metadata["checker_inferred"] = "statement"
                    problem.metadata["checker_rule"] = rule
                    if problem.checker.unordered_levels:
                        changed, failure = check_permuted_answers(problem)
                        if failure:
                            remove(problem, "inferred checker fails its check", failure)
                            continue
                        problem.metadata["checker_permuted_tests"] = {"tests": len(problem.tests), "changed": changed}
            except Exception as error:  # noqa: BLE001 - one bad record never stops the build
                out.reject(Reject(input_path, row, "(validate)", "validate error", f"{type(error).__name__}: {error}",
                                  problem.id))
                continue
            yield problem, None


class _Summary:
    """The manifest's facts about validate, counted as problems pass: tests per problem by
    source as received and as kept, references passed, where time limits came from."""

    def __init__(self, settings: ValidateConfig):
        self.settings = settings
        self.histograms: dict[str, dict[str, Counter[str]]] = {}
        self.with_reference = 0
        self.limits_from: Counter[str] = Counter()
        self.limits: list[float] = []
        self.slowest: list[float] = []

    def _bands(self, problem: Problem) -> dict[str, Counter[str]]:
        return self.histograms.setdefault(pipeline_source(problem), {"before": Counter(), "after": Counter()})

    def received(self, problem: Problem) -> None:
        self._bands(problem)["before"][band_of_test_count(len(problem.tests))] += 1

    def kept(self, problem: Problem) -> None:
        self._bands(problem)["after"][band_of_test_count(len(problem.tests))] += 1
        self.with_reference += "reference_solution" in problem.metadata
        self.limits_from[problem.metadata.get("time_limit_from", "default")] += 1
        if problem.metadata.get("time_limit_from") == "reference":
            self.limits.append(problem.time_limit_s)
            self.slowest.append(max(problem.metadata["reference_cpu_s"]))

    def extra(self) -> dict[str, Any]:
        return {"references_passed": self.with_reference,
                "time_limits": time_limit_summary(self.limits_from, self.limits, self.slowest, self.settings),
                "tests_per_problem": {source: {when: dict(counts) for when, counts in sides.items()}
                                      for source, sides in self.histograms.items()}}


def longest_inputs(tests: list[TestCase], count: int) -> list[TestCase]:
    """The `count` tests with the longest inputs (ties: the earlier test), in their order.
    Long inputs are the tests a wrong program is likeliest to fail (DeepCoder rewards on
    the 15 longest). Pure."""
    chosen = sorted(range(len(tests)), key=lambda index: (-len(tests[index].input), index))[:count]
    return [tests[index] for index in sorted(chosen)]


TEST_COUNT_BANDS = ((1, 1), (2, 2), (3, 3), (4, 4), (5, 9), (10, 15), (16, 50), (51, 100), (101, None))
"""Bands of tests per problem in the datasheet's histogram (inclusive; None: no upper end)."""


def band_of_test_count(count: int) -> str:
    for low, high in TEST_COUNT_BANDS:
        if count >= low and (high is None or count <= high):
            return str(low) if low == high else f"{low}+" if high is None else f"{low}-{high}"
    return "0"


def pipeline_source(problem: Problem) -> str:
    return problem.metadata.get("pipeline_source", problem.source)


def time_limit_summary(from_counts: Counter[str], limits: list[float], slowest: list[float],
                       settings: ValidateConfig) -> dict[str, Any]:
    """For the manifest and datasheet: where limits came from (`from_counts`), how many sit
    at the floor or the cap, and the distribution of the limits derived from references and
    of those references' slowest tests. Pure."""
    slowest = sorted(slowest)
    limits = sorted(limits)

    def quantiles(values: list[float]) -> dict[str, float]:
        if not values:
            return {}
        pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
        return {"min": values[0], "p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99), "max": values[-1]}

    return {
        "rule": {"multiple": settings.time_limit_multiple, "floor_s": settings.time_limit_floor_s,
                 "cap_s": settings.time_limit_cap_s, "step_s": settings.time_limit_step_s},
        "from": dict(from_counts),
        "at_floor": sum(limit == settings.time_limit_floor_s for limit in limits),
        "at_cap": sum(limit == settings.time_limit_cap_s for limit in limits),
        "limit_s": quantiles(limits),
        "reference_slowest_test_s": quantiles(slowest),
    }


def _with_reference_verdicts(checked: Iterable[tuple[Problem, None]], config: PipelineConfig, context: StageContext,
                             out: StageSink) -> Iterator[tuple[Problem, list[float] | None]]:
    """(problem, CPU seconds of each test or None) for each checked problem whose reference,
    if it has one, is accepted; a problem whose reference is not is handed to `out` as a
    removal. The checked problems are spooled to a temporary file beside the verdict cache
    and read from it twice: the references are run first, in batches of `batch_size` distinct
    content keys not in the cache (each batch cached as it ends), then each problem takes
    its verdict from the cache, in input order."""
    cache_path = config.stage_dir("validate") / "reference_verdicts.jsonl"
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    cache: dict[str, dict[str, Any]] = {record["key"]: record for record in read_json_lines(cache_path)
                                        if record.get("verdict") != "accepted" or "test_cpu_s" in record}
    with Spool(cache_path.with_name("checked.jsonl")) as spool:
        wanted: set[str] = set()
        todo = 0
        for problem, _ in spool.write(checked):
            if isinstance(problem.metadata.get("reference_solution"), str):
                wanted.add(reference_key(problem))
                todo += 1
        if config.validate.reference_timings_from is not None:
            adopted = _adopted_timings(config.resolve(config.validate.reference_timings_from), wanted - set(cache))
            with open(cache_path, "a", encoding="utf-8") as handle:  # this build's cache stands on its own
                for record in adopted:
                    cache[record["key"]] = record
                    handle.write(json.dumps(record) + "\n")
        # One run per content key: problems of several sources with the same reference and tests
        # share its verdict (the dedup stage keeps one of them later).
        queued = set(cache)
        with context.progress("validate: reference solutions", todo) as advance:
            advance(todo - len(wanted - queued))
            step = max(1, config.validate.batch_size)
            batch: list[Problem] = []
            for problem, _ in spool:
                if isinstance(problem.metadata.get("reference_solution"), str) and reference_key(problem) not in queued:
                    queued.add(reference_key(problem))
                    batch.append(problem)
                if len(batch) == step:
                    _run_references(batch, config, context, cache, cache_path, advance)
                    batch = []
            if batch:
                _run_references(batch, config, context, cache, cache_path, advance)
        for problem, _ in spool:
            if not isinstance(problem.metadata.get("reference_solution"), str):
                yield problem, None
                continue
            record = cache[reference_key(problem)]
            if record["verdict"] == "accepted":
                yield problem, record["test_cpu_s"]
                continue
            verdict = (f"{record['verdict']} after {record['tests_passed']}/{record['tests_total']} tests"
                       + (f": {record['detail']}" if record["detail"] else ""))
            rule = problem.metadata.get("checker_rule")
            out.remove(Removal(problem.id, problem.source, "validate", "reference fails its tests",
                               verdict + (f" (checker from the statement: {rule[:120]})" if rule else "")))


def _run_references(batch: list[Problem], config: PipelineConfig, context: StageContext,
                    cache: dict[str, dict[str, Any]], cache_path: Path, advance: Callable[..., None]) -> None:
    """Run `batch`'s references on their tests (those near the limit again: `_retimed`) and
    cache each verdict."""
    from microcoder.evaluator import Sample, stop_on_machine_fault

    samples = [Sample(p.id, code=p.metadata["reference_solution"]) for p in batch]
    results = context.evaluator().evaluate(batch, samples, on_result=lambda _: advance())
    stop_on_machine_fault(results, "validate")  # never cached as the reference's failure
    runs = _retimed(batch, results, config, context)
    with open(cache_path, "a", encoding="utf-8") as handle:
        for problem, result in zip(batch, results):
            record = _verdict_record(runs.get(problem.id, [result]))
            record.update(key=reference_key(problem), id=problem.id)
            cache[record["key"]] = record
            handle.write(json.dumps(record) + "\n")


def _adopted_timings(path: Path, wanted: set[str]) -> list[dict[str, Any]]:
    """The records of another build's reference cache (`path`) whose key is in `wanted`."""
    if not path.is_file():
        raise FileNotFoundError(f"validate.reference_timings_from: {path} does not exist (another build's "
                                f"validate/reference_verdicts.jsonl)")
    def bad(row: int, field: str) -> ProblemFormatError:
        return ProblemFormatError(path, row, field, "missing or of the wrong type: not a validate/reference_verdicts.jsonl")

    adopted: dict[str, dict[str, Any]] = {}
    for row, record in iter_jsonl(path):
        for field in ("key", "verdict", "detail"):
            if not isinstance(record, dict) or not isinstance(record.get(field), str):
                raise bad(row, field)
        for field in ("tests_passed", "tests_total"):
            if isinstance(record.get(field), bool) or not isinstance(record.get(field), int):
                raise bad(row, field)
        times = record.get("test_cpu_s")
        if times is not None and (not isinstance(times, list) or not times
                                  or not all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in times)):
            raise bad(row, "test_cpu_s")
        if record["key"] in wanted and (record["verdict"] != "accepted" or times is not None):
            adopted[record["key"]] = record
    return list(adopted.values())


def needs_retiming(result: Any, limit_s: float, above: float, retime_from_s: float | None = None) -> bool:
    """A reference run whose time decides something: timed out, passed with its slowest
    test at `above` x the limit or more, or (with `retime_from_s`) passed with its slowest
    test at `retime_from_s` or more (near or above where its time sets the derived limit). Pure."""
    if result.verdict == "time_limit_exceeded":
        return True
    if result.verdict != "accepted" or not result.test_cpu_seconds:
        return False
    slowest = max(result.test_cpu_seconds)
    return slowest >= above * limit_s or (retime_from_s is not None and slowest >= retime_from_s)


def _retimed(batch: list[Problem], results: list[Any], config: PipelineConfig,
             context: StageContext) -> dict[str, list[Any]]:
    """{problem id: every run} for the references near the limit, run `retime_runs` times
    in all (see ValidateConfig.retime_runs)."""
    from microcoder.evaluator import Sample, stop_on_machine_fault

    settings = config.validate
    # The derived limit is multiple x the slowest test, so it rises above the floor from
    # floor / multiple; runs within retime_margin below that are timed the same way.
    retime_from_s = (settings.time_limit_floor_s / settings.time_limit_multiple / settings.retime_margin
                     if settings.time_limits_from_reference else None)
    near = [(problem, result) for problem, result in zip(batch, results)
            if needs_retiming(result, config.time_limit_s, settings.retime_above, retime_from_s)]
    runs = {problem.id: [result] for problem, result in near}
    for _ in range(settings.retime_runs - 1):
        if not near:
            break
        problems = [problem for problem, _ in near]
        samples = [Sample(p.id, code=p.metadata["reference_solution"]) for p in problems]
        results = context.evaluator().evaluate(problems, samples)
        stop_on_machine_fault(results, "validate")
        for problem, result in zip(problems, results):
            runs[problem.id].append(result)
    return runs


def _verdict_record(runs: list[Any]) -> dict[str, Any]:
    """The cached verdict of one reference from its runs: accepted if one run is, with
    each test's least CPU time over the accepted runs; else the first run's failure."""
    accepted = [run for run in runs if run.verdict == "accepted"]
    shown = accepted[0] if accepted else runs[0]
    record = {"verdict": shown.verdict, "detail": shown.detail[:300], "tests_passed": shown.tests_passed,
              "tests_total": shown.tests_total}
    if accepted:  # every test ran; 0.1 ms is below the noise
        record["test_cpu_s"] = [round(min(times), 4) for times in zip(*(run.test_cpu_seconds for run in accepted))]
    if len(runs) > 1:
        record["runs"] = len(runs)
        record["accepted_runs"] = len(accepted)
    return record

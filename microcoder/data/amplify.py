"""Stage `amplify`: hidden tests beyond the statement's examples, answered by the reference.

Most stored tests of the public sets are the statement's own examples (a program that
prints the shown outputs passes them) and there are few of them (median 3), so wrong
programs pass. This stage, after decontaminate:

1. marks each stored test `shown` when its input and output both appear in the statement
   (shown.py: as text, whitespace, case and quote style ignored, or as a value, the
   statement's literals read as Python or JSON: a false "shown" only asks for more hidden
   tests);
2. for a `call` problem with a reference solution, generates inputs from the stored ones
   (`generate_inputs`: type-aware draws and mutations at growing sizes, inside the bounds
   of the statement's "Constraints:" lines and the properties every stored input shares,
   constraints.py), runs the reference on each in the sandbox, and keeps those it answers
   (not a crash, a timeout, or a `None` where no stored answer is null: an input outside
   the problem's promises) as tests marked `generated`; the reference-derived time limit
   is derived again over every test;
3. removes from the training corpus a stdin problem whose statement shows a stored input
   with another output than the stored one (it accepts several answers), a problem left
   with no hidden test ("no hidden tests"),
   one whose hidden tests (two or more, or one answered as a shown test is) all expect
   one answer (a constant program passes them), and,
   unless `amplify.keep_unverified`, one with no reference solution ("unverified: no
   reference solution"): nothing can check or extend its tests.

Deterministic: candidates come from `random.Random` seeded by the problem id and
`amplify.seed` through sha256 (never Python's `hash`), so two builds generate the same
inputs under any PYTHONHASHSEED; the reference's answers are cached by content
(`amplify/reference_answers.jsonl`) after each batch, so an interrupted stage resumes.

Choices of ours: the draws are this module's own, over `random.Random`, not hypothesis's
strategies: hypothesis generates for tests (its `example()` is not meant for data, and its
choice sequence changes between its releases), while a corpus needs the same inputs from
the same seed in every build. `stdin` problems are not amplified (no source here ships a reference for
one; their input grammars are not JSON values); inputs stay small (`max_items` items per
list, `max_input_chars` per test) so that the stored corpus and the judge's time stay
bounded: the tests catch wrong logic, not wrong complexity.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from microcoder.data.boundaries import boundary_inputs
from microcoder.data.config import AmplifyConfig, PipelineConfig
from microcoder.data.constraints import (
    Bound,
    Domain,
    Relation,
    argument_names,
    bound_holds,
    checked_bounds,
    infer_domains,
    infer_relations,
    measures_of,
    numeric_range,
    parse_constraints,
)
from microcoder.data.records import Reject
from microcoder.data.shown import mark_shown, squash
from microcoder.data.stages import (Removal, Spool, StageContext, StageOutput, StageSink, read_json_lines,
                                   sha256_of)
from microcoder.data.validate import pipeline_source, time_limit_from_reference
from microcoder.evaluator.sandbox import SandboxFault
from microcoder.problems import Problem, TestCase

NO_HIDDEN = "no hidden tests (every test is in the statement)"
UNVERIFIED = "unverified: no reference solution"
ONE_ANSWER = "every hidden test has one answer (a constant passes them)"


# ---------------------------------------------------------------- shown tests


SAMPLE_DISAGREES = "the statement's sample output differs from the stored one (several answers)"


def sample_output_disagrees(problem: Problem, min_input_chars: int = 8) -> TestCase | None:
    """A stdin test whose input the statement shows (at least `min_input_chars` characters
    without whitespace, so no chance match) but whose output it does not: the statement's
    own sample answer differs from the stored one, so the problem accepts several answers
    and exact comparison would reject one of them. None when no test is such. Pure."""
    if problem.kind != "stdin" or (problem.checker is not None and (problem.checker.python
                                                                     or problem.checker.float_tolerance)):
        return None
    statement = squash(problem.prompt)
    for test in problem.tests:
        shown_input = len(squash(test.input)) >= min_input_chars and squash(test.input) in statement
        if shown_input and squash(test.output) and squash(test.output) not in statement:
            return test
    return None


def hidden_count(problem: Problem) -> int:
    return sum(not test.shown for test in problem.tests)


# ---------------------------------------------------------------- generating inputs


@dataclass
class InputSpace:
    """Where a problem's generated inputs may lie: one domain per argument, the bounds read
    from the statement (checked against the stored inputs) and the relations every stored
    input satisfies."""

    names: list[str]
    domains: list[Domain]
    bounds: list[Bound]
    relations: list[Relation]
    dropped_lines: list[str]
    """Constraint lines read but broken by a stored input (misread, or a wrong test)."""
    promises: list[str] = field(default_factory=list)
    """Sentences promising what no bound says ("It is guaranteed that ...", "The input is
    generated such that ..."): inputs are then stored ones shuffled (`_shuffled`)."""

    def admits(self, arguments: list[Any]) -> bool:
        if not all(bound_holds(bound, arguments, self.names) for bound in self.bounds):
            return False
        measures = measures_of(arguments, self.names)
        return all(relation.holds(measures) for relation in self.relations)

    def describe(self) -> dict[str, Any]:
        return {"bounds": [f"{b.low} <= {b.measure} <= {b.high}" for b in self.bounds],
                "relations": [str(r) for r in self.relations], "dropped_lines": self.dropped_lines,
                "promises": self.promises}


def stored_arguments(problem: Problem) -> list[list[Any]]:
    """Each stored test's arguments, decoded (call problems)."""
    return [[json.loads(line) for line in test.input.split("\n") if line.strip()] for test in problem.tests]


def input_space(problem: Problem, settings: AmplifyConfig) -> InputSpace | None:
    """The input space of a `call` problem, or None when its stored inputs do not share one
    argument count (nothing to generate from)."""
    inputs = stored_arguments(problem)
    if not inputs or len({len(arguments) for arguments in inputs}) != 1 or not inputs[0]:
        return None
    names = argument_names(problem)
    if names is None or len(names) != len(inputs[0]):
        names = [f"arg{index}" for index in range(len(inputs[0]))]
    bounds, facts = parse_constraints(problem.prompt, names)
    bounds, dropped = checked_bounds(bounds, inputs, names)
    domains = infer_domains(inputs)
    for name, domain in zip(names, domains):
        _apply_statement(domain, name, bounds, facts, settings)
    return InputSpace(names, domains, bounds, unstated_relations(infer_relations(inputs, names), bounds), dropped,
                      promises(problem.prompt))


def unstated_relations(relations: list[Relation], bounds: list[Bound]) -> list[Relation]:
    """The observed relations between two measures the statement does not relate itself: where
    it does (`1 <= low <= high`), its bound decides, and the stored inputs' stricter order
    (every stored `low < high`) would keep out the ties at the range's end."""
    stated = {frozenset((bound.measure, side)) for bound in bounds for side in (bound.low, bound.high)
              if isinstance(side, str)}
    return [relation for relation in relations if frozenset((relation.left, relation.right)) not in stated]


_PROMISE = re.compile(r"[^.\n]*\b(?:guaranteed|generated such that|it is given that|exactly one|there (?:is|exists) "
                      r"(?:exactly|at least|at most|a unique)|a valid answer (?:always )?exists|always exists)\b[^.\n]*",
                      re.IGNORECASE)


_COVERED = re.compile(r"\b(?:sorted|ascending|descending|non-decreasing|non-increasing|unique|distinct)\b",
                      re.IGNORECASE)


def promises(statement: str) -> list[str]:
    """Sentences of the statement that promise something of the input no bound states (a
    promise of order or distinctness is not one: the stored inputs' domains keep it)."""
    return [match.group(0).strip() for match in _PROMISE.finditer(statement)
            if not _COVERED.search(match.group(0))][:5]


def _widen(domain: Domain, low: float | None, high: float | None) -> None:
    """Draw from the statement's range where it gives one (the stored values lie inside it,
    `checked_bounds`), else from the stored values' range."""
    if low is not None and (domain.low is None or low <= domain.low):
        domain.low = low
    if high is not None and (domain.high is None or high >= domain.high):
        domain.high = high


def _or_inferred(domain: Domain, low: float | None, high: float | None) -> tuple[float | None, float | None]:
    """A side the statement leaves open, inferred from the stored values: their span again
    beyond them (at least 3), never across zero (stored values all >= 1 stay >= 1, all >= 0
    stay >= 0): a range read off two or three examples is too narrow to find bugs in."""
    if domain.low is None or domain.high is None:
        return low, high
    span = max(domain.high - domain.low, 3)
    if low is None:
        low = domain.low - span
        if domain.low >= 0:
            low = max(low, 1 if domain.low >= 1 else 0)
    if high is None:
        high = domain.high + span
        if domain.high <= 0:
            high = min(high, -1 if domain.high <= -1 else 0)
    if domain.kind == "int":
        low, high = int(low), int(high)
    return low, high


def _apply_statement(domain: Domain, name: str, bounds: list[Bound], facts: dict[str, dict[str, Any]],
                     settings: AmplifyConfig) -> None:
    if domain.kind in ("int", "float"):
        _widen(domain, *_or_inferred(domain, *numeric_range(bounds, name)))
    if domain.kind == "str" and domain.number_shape is not None:  # "1+-1i": its integers' range, widened
        _widen(domain, *_or_inferred(replace(domain, kind="int"), None, None))
    if domain.kind in ("str", "list"):
        low, high = numeric_range(bounds, f"len({name})")
        stated_high = high is not None
        cap = settings.max_items if domain.kind == "list" else settings.max_chars
        if low is not None:
            domain.length_low = min(domain.length_low, max(0, int(low)))
        if stated_high:
            domain.length_high = max(domain.length_high, min(int(high), cap))
        elif domain.length_low != domain.length_high:  # lengths vary, none stated: up to twice the longest
            domain.length_high = max(domain.length_high, min(2 * domain.length_high, cap))
    if domain.kind == "str" and name in facts["alphabet"]:
        domain.alphabet = facts["alphabet"][name]
    if domain.kind == "list":
        domain.distinct = domain.distinct or name in facts["distinct"]
        domain.is_sorted = domain.is_sorted or name in facts["sorted"]
        item = domain.item
        if item is not None and item.kind in ("int", "float"):
            _widen(item, *_or_inferred(item, *numeric_range(bounds, f"item({name})")))
        if item is not None and item.kind in ("str", "list"):
            low, high = numeric_range(bounds, f"itemlen({name})")
            row_low, row_high = numeric_range(bounds, f"len({name}[0])")
            low, high = low if low is not None else row_low, high if high is not None else row_high
            cap = settings.max_items if item.kind == "list" else settings.max_chars
            if low is not None:
                item.length_low = min(item.length_low, max(0, int(low)))
            if high is not None:
                item.length_high = max(item.length_high, min(int(high), cap))
            if item.kind == "list" and item.item is not None and item.item.kind in ("int", "float"):
                _widen(item.item, *numeric_range(bounds, f"item2({name})"))


def _seeded(problem_id: str, seed: int) -> random.Random:
    return random.Random(int(hashlib.sha256(f"{seed}:{problem_id}".encode()).hexdigest()[:16], 16))


def _draw_number(domain: Domain, rng: random.Random) -> Any:
    low = domain.low if domain.low is not None else 0
    high = domain.high if domain.high is not None else low
    roll = rng.random()
    if domain.kind == "int":
        low, high = int(low), int(high)
        if roll < 0.25:
            return rng.choice([low, high, min(high, low + 1), max(low, high - 1)])
        if roll < 0.6 and domain.seen:
            return min(high, max(low, int(rng.choice(domain.seen)) + rng.randint(-3, 3)))
        return rng.randint(low, high)
    value = rng.uniform(low, high) if roll >= 0.25 else rng.choice([low, high])
    return round(value, 2)


def _length(domain: Domain, rng: random.Random, scale: float) -> int:
    """A length in [length_low, length_high], the top of the range opened up by `scale`
    (0: the stored lengths' range, 1: the whole range): sizes grow over the candidates."""
    observed_high = max(len(value) for value in domain.seen) if domain.seen else domain.length_high
    top = int(round(observed_high + scale * (domain.length_high - observed_high)))
    return rng.randint(domain.length_low, max(domain.length_low, top))


NEAR_REPEAT = 0.25
"""Share of list items made from an earlier item (an equal int, a string sharing its
prefix): random draws almost never repeat, and `<` for `<=`, an off-by-one in a prefix
loop, a missed duplicate, are only seen on repeats."""


def _near_repeat(value: Any, item: Domain, rng: random.Random) -> Any:
    if item.kind == "int" or item.template is not None or item.number_shape is not None:
        return value
    keep = rng.randint(0, len(value))
    extra = _length(item, rng, 0.0) - keep
    return value[:keep] + "".join(rng.choice(item.alphabet) for _ in range(max(0, extra)))


def draw(domain: Domain, rng: random.Random, scale: float = 0.0) -> Any:
    """One value of `domain`. Pure given `rng`."""
    if domain.kind in ("int", "float"):
        return _draw_number(domain, rng)
    if domain.kind == "bool":
        return rng.random() < 0.5
    if domain.kind == "str":
        if domain.template is not None:
            return "".join(rng.choice(chars) for chars in domain.template)
        if domain.number_shape is not None:  # the shape kept, its integers drawn like int arguments
            numbers = replace(domain, kind="int", seen=[int(n) for v in domain.seen for n in re.findall(r"-?\d+", v)])
            return re.sub("#", lambda _: str(_draw_number(numbers, rng)), domain.number_shape)
        length = _length(domain, rng, scale)
        if domain.palindrome:
            half = [rng.choice(domain.alphabet) for _ in range((length + 1) // 2)]
            return "".join(half + half[: length // 2][::-1])
        return "".join(rng.choice(domain.alphabet) for _ in range(length))
    if domain.kind == "list":
        length = _length(domain, rng, scale)
        if domain.permutation_base is not None:
            values = list(range(domain.permutation_base, domain.permutation_base + length))
            rng.shuffle(values)
            return values
        item = domain.item
        if item is not None and item.kind == "list" and domain.rectangular:
            width = _length(item, rng, scale)
            row = replace(item, length_low=width, length_high=width, seen=[])
            return [draw(row, rng, scale) for _ in range(length)]
        values: list[Any] = []
        for _ in range(length * 4 if domain.distinct else length):
            if values and rng.random() < NEAR_REPEAT and item is not None and item.kind in ("int", "str"):
                value = _near_repeat(rng.choice(values), item, rng)  # ties and shared prefixes find bugs
            else:
                value = draw(item, rng, scale) if item is not None else 0
            if domain.distinct and value in values:
                continue
            values.append(value)
            if len(values) == length:
                break
        return sorted(values) if domain.is_sorted else values
    return json.loads(json.dumps(rng.choice(domain.seen))) if domain.seen else None


def generate_inputs(problem: Problem, space: InputSpace, count: int, seed: int, max_input_chars: int,
                    attempts_per_input: int = 20) -> list[list[Any]]:
    """Up to `count` distinct argument lists inside `space`, none equal to a stored input:
    half drawn whole, half a stored input with one or two arguments drawn anew; sizes grow
    from the stored ones' to the stated limit over the sequence. Pure: the same problem,
    space and seed give the same inputs."""
    rng = _seeded(problem.id, seed)
    stored = stored_arguments(problem)
    seen = {json.dumps(arguments) for arguments in stored}
    found: list[list[Any]] = []
    for index in range(count * attempts_per_input):
        if len(found) == count:
            break
        scale = (len(found) / max(1, count - 1)) ** 2
        if space.promises:
            arguments = _shuffled(rng.choice(stored), space.domains, rng)
        elif rng.random() < 0.5:
            arguments = [draw(domain, rng, scale) for domain in space.domains]
        else:
            arguments = json.loads(json.dumps(rng.choice(stored)))
            for position in rng.sample(range(len(arguments)), min(len(arguments), rng.choice([1, 2]))):
                arguments[position] = draw(space.domains[position], rng, scale)
        _tie_numbers(arguments, space.domains, rng)
        key = json.dumps(arguments)
        if key in seen or len(key) > max_input_chars or not space.admits(arguments):
            continue
        seen.add(key)
        found.append(arguments)
    return found


def _tie_numbers(arguments: list[Any], domains: list[Domain], rng: random.Random) -> None:
    """Now and then give one int argument another int argument's value, where both domains
    allow it: equal arguments are where `<` and `<=` part."""
    ints = [position for position, domain in enumerate(domains) if domain.kind == "int"
            and isinstance(arguments[position], int) and not isinstance(arguments[position], bool)]
    if len(ints) >= 2 and rng.random() < 0.15:
        target, origin = rng.sample(ints, 2)
        value = arguments[origin]
        domain = domains[target]
        if (domain.low is None or value >= domain.low) and (domain.high is None or value <= domain.high):
            arguments[target] = value


def _shuffled(arguments: list[Any], domains: list[Domain], rng: random.Random) -> list[Any]:
    """A stored input with the items of its lists and strings shuffled (rows and within
    rows), numbers and lengths untouched: what a statement promises of a multiset ("exactly
    one value is missing", "the input is generated such that ...") survives it, where a
    fresh draw would break it. Sorted lists stay sorted."""
    def shuffle(value: Any, domain: Domain | None) -> Any:
        if isinstance(value, str) and not (domain is not None and domain.palindrome):
            letters = list(value)
            rng.shuffle(letters)
            return "".join(letters)
        if isinstance(value, list):
            if all(isinstance(row, list) for row in value) and value:
                flat = [item for row in value for item in row]  # a grid: its cells shuffled, its shape kept
                if not all(isinstance(item, (list, dict)) for item in flat):
                    rng.shuffle(flat)
                    cells = iter(flat)
                    return [[next(cells) for _ in row] for row in value]
            items = list(value)
            rng.shuffle(items)
            return sorted(items) if domain is not None and domain.is_sorted else items
        return value

    return [shuffle(json.loads(json.dumps(value)), domain) for value, domain in zip(arguments, domains)]


# ---------------------------------------------------------------- the stage


def answer_time_limit(problem: Problem, config: PipelineConfig) -> float:
    """CPU seconds the reference may take on a generated input: its problem's limit over the
    limit's multiple (so that no generated test would raise a reference-derived limit, and a
    slow brute force on a grown input costs a third of a second, not the reference limit),
    else the reference limit (`time_limit_s`)."""
    if problem.metadata.get("time_limit_from") == "reference" and problem.time_limit_s is not None:
        return round(problem.time_limit_s / config.validate.time_limit_multiple, 6)
    return config.time_limit_s


def answer_key(problem: Problem, arguments_text: str, time_limit_s: float) -> str:
    return sha256_of(problem.entry_point, problem.call_prelude(), problem.metadata.get("reference_solution"),
                     arguments_text, time_limit_s, problem.memory_limit_mb)


def _answer(context: StageContext, problem: Problem, arguments_text: str, time_limit_s: float) -> dict[str, Any]:
    """The reference's answer to one input, run in the sandbox as the judge runs a call."""
    evaluator = context.evaluator()
    run = evaluator.sandbox.run(problem.metadata["reference_solution"], kind="call", entry_point=problem.entry_point,
                                prelude=problem.call_prelude(),
                                arguments=[line for line in arguments_text.split("\n") if line.strip()],
                                time_limit_s=time_limit_s,
                                memory_limit_mb=problem.memory_limit_mb or evaluator.config.memory_limit_mb,
                                output_limit_mb=evaluator.config.output_limit_mb)
    if run.machine_fault:  # never an answer, nor cached as one: the stage stops, and a rerun resumes
        raise SandboxFault(f"amplify: the sandbox could not run {problem.id}'s reference: {run.detail}")
    return {"status": run.status, "return_json": run.return_json, "cpu_s": round(run.cpu_s, 6),
            "detail": run.detail[:200]}


def _cached_answers(config: PipelineConfig) -> tuple[dict[str, dict[str, Any]], Path]:
    cache_path = config.stage_dir("amplify") / "reference_answers.jsonl"
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    return {record["key"]: record for record in read_json_lines(cache_path)}, cache_path


def _answer_all(spool: Spool, jobs: int, wanted: set[str], config: PipelineConfig, context: StageContext,
                cache: dict[str, dict[str, Any]], cache_path: Path) -> None:
    """Put in `cache` the reference's answer to every generated input of the spooled plans
    (`wanted`: their keys, `jobs`: their count): adopted from `answers_from`, or run in the
    sandbox in batches of `batch_size` distinct keys, each batch cached as it ends."""
    if config.amplify.answers_from is not None:
        missing = wanted - set(cache)
        adopted = [record for record in read_json_lines(config.resolve(config.amplify.answers_from))
                   if record.get("key") in missing]
        with open(cache_path, "a", encoding="utf-8") as handle:  # this build's cache stands on its own
            for record in adopted:
                cache[record["key"]] = record
                handle.write(json.dumps(record) + "\n")
    queued = set(cache)
    with context.progress("amplify: reference answers", jobs) as advance:
        advance(jobs - len(wanted - queued))
        step = max(1, config.amplify.batch_size)
        batch: list[tuple[Problem, str, str]] = []
        for problem, plan in spool:
            for text in (plan or {}).get("texts", []):
                key = answer_key(problem, text, answer_time_limit(problem, config))
                if key in queued:
                    continue
                queued.add(key)
                batch.append((problem, text, key))
                if len(batch) == step:
                    _answer_batch(batch, config, context, cache, cache_path)
                    advance(len(batch))
                    batch = []
        if batch:
            _answer_batch(batch, config, context, cache, cache_path)
            advance(len(batch))


def _answer_batch(batch: list[tuple[Problem, str, str]], config: PipelineConfig, context: StageContext,
                  cache: dict[str, dict[str, Any]], cache_path: Path) -> None:
    answers = context.map_sandboxed(_answer, [(problem, text, answer_time_limit(problem, config))
                                              for problem, text, _ in batch])
    with open(cache_path, "a", encoding="utf-8") as handle:
        for (_, _, key), answer in zip(batch, answers):
            record = {"key": key, **answer}
            cache[key] = record
            handle.write(json.dumps(record) + "\n")


def _usable(answer: dict[str, Any], null_expected: bool) -> str | None:
    """Why an answer makes no test (None: it makes one)."""
    if answer["status"] != "ok":
        return f"reference {answer['status']}"
    if answer["return_json"] is None:
        return "no JSON result"
    if answer["return_json"] == "null" and not null_expected:
        return "reference returned None (an input outside the problem's promises)"
    return None


def amplify_problems(problems: Iterable[Problem], config: PipelineConfig, context: StageContext,
                     out: StageSink | None = None) -> StageSink:
    """The stage, one problem at a time. With `enabled`, each problem and its plan (the
    inputs to generate) are spooled to a temporary file beside the answer cache and read
    from it twice: the references answer every planned input first (`_answer_all`), then
    each problem takes its tests. Held across problems: the answer cache (one record per
    distinct generated input: up to `tests_per_problem` and the boundary inputs per call
    problem with a reference), the keys of the inputs planned, and the per-source counts."""
    out = StageOutput() if out is None else out
    planned = _planned(problems, config, out)
    if not config.amplify.enabled:
        out.extra = _finished(((problem, None) for problem, _ in planned), {}, config, out)
        return out
    cache, cache_path = _cached_answers(config)
    with Spool(cache_path.with_name("planned.jsonl")) as spool:
        wanted: set[str] = set()
        jobs = 0
        for problem, plan in spool.write(planned):
            for text in (plan or {}).get("texts", []):
                wanted.add(answer_key(problem, text, answer_time_limit(problem, config)))
                jobs += 1
        if jobs:
            _answer_all(spool, jobs, wanted, config, context, cache, cache_path)
        out.extra = _finished(iter(spool), cache, config, out)
    return out


def _planned(problems: Iterable[Problem], config: PipelineConfig,
             out: StageSink) -> Iterator[tuple[Problem, dict[str, Any] | None]]:
    """(problem with its shown tests marked, its plan or None) for each problem; a plan is
    the inputs to generate (`texts`: the boundary inputs, then the drawn ones not among
    them), `kinds` (boundary input -> its kind) and `space` (what the input space was read
    as). A problem that raises is a reject, and goes on without a plan once marked."""
    settings = config.amplify
    input_path = str(config.stage_dir("decontaminate") / "problems.jsonl")
    for row, problem in enumerate(problems, start=1):
        marked, plan = None, None
        try:
            problem = marked = mark_shown(problem)
            if not (settings.enabled and problem.kind == "call"
                    and isinstance(problem.metadata.get("reference_solution"), str)):
                pass
            elif all(test.output.strip() == "null" for test in problem.tests):
                pass  # results returned in place: nothing to compare but None
            elif (space := input_space(problem, settings)) is not None:
                edges = boundary_inputs(space.domains, space.admits, stored_arguments(problem), problem.prompt,
                                        bool(space.promises), settings.boundary_inputs, settings.seed, problem.id,
                                        settings.max_input_chars)
                kinds = {_as_text(arguments): kind for kind, arguments in edges}
                drawn = [_as_text(arguments) for arguments in generate_inputs(problem, space, settings.tests_per_problem,
                                                                             settings.seed, settings.max_input_chars)]
                plan = {"texts": list(kinds) + [text for text in drawn if text not in kinds], "kinds": kinds,
                        "space": space.describe()}
        except Exception as error:  # noqa: BLE001 - one bad record never stops the build
            out.reject(Reject(input_path, row, "(amplify)", "amplify error", f"{type(error).__name__}: {error}",
                              problem.id))
        if marked is not None:
            yield marked, plan


def _finished(planned: Iterable[tuple[Problem, dict[str, Any] | None]], answers: dict[str, dict[str, Any]],
              config: PipelineConfig, out: StageSink) -> dict[str, Any]:
    """Give each problem its generated tests (`answers`: the answer cache), keep or remove it,
    and return the manifest's counts."""
    settings = config.amplify
    counts: Counter[str] = Counter()
    per_source: dict[str, Counter[str]] = {}
    stdin_tally: dict[str, Counter[str]] = {}
    for problem, plan in planned:
        source = pipeline_source(problem)
        tally = per_source.setdefault(source, Counter())
        tally["problems"] += 1
        tally["shown tests"] += sum(test.shown for test in problem.tests)
        tally["stored hidden tests"] += hidden_count(problem)
        if problem.kind == "stdin":
            _count_stdin(stdin_tally.setdefault(source, Counter()), problem, settings)
        if plan is not None:
            problem = _with_generated(problem, plan["texts"], answers, config, plan["space"], counts, plan["kinds"])
            tally["generated tests"] += sum(test.generated for test in problem.tests)
            tally["boundary tests"] += sum(problem.metadata["amplified"]["boundary"].values())
            tally["amplified problems"] += any(test.generated for test in problem.tests)
        disagreeing = sample_output_disagrees(problem)
        if disagreeing is not None:
            out.remove(Removal(problem.id, problem.source, "amplify", SAMPLE_DISAGREES,
                               f"input of {len(disagreeing.input)} characters shown with another output"))
            tally["removed: sample output differs"] += 1
            continue
        has_reference = isinstance(problem.metadata.get("reference_solution"), str)
        problem.metadata["verified"] = has_reference
        if not has_reference and settings.unverified_hidden and \
                hidden_count(problem) >= settings.unverified_hidden_min_tests:
            problem.metadata["tier"] = UNVERIFIED_HIDDEN
            problem.metadata[UNVERIFIED_HIDDEN] = trivial_program_shares(problem)
        elif not has_reference and not settings.keep_unverified:
            out.remove(Removal(problem.id, problem.source, "amplify", UNVERIFIED,
                               f"{len(problem.tests)} tests, {hidden_count(problem)} hidden"))
            tally["removed: unverified"] += 1
            continue
        if hidden_count(problem) == 0:
            out.remove(Removal(problem.id, problem.source, "amplify", NO_HIDDEN,
                               f"{len(problem.tests)} tests, all in the statement"))
            tally["removed: no hidden tests"] += 1
            continue
        hidden_answers = {test.output.strip() for test in problem.tests if not test.shown}
        shown_answers = {test.output.strip() for test in problem.tests if test.shown}
        if len(hidden_answers) == 1 and (hidden_count(problem) >= 2 or hidden_answers <= shown_answers):
            out.remove(Removal(problem.id, problem.source, "amplify", ONE_ANSWER,
                               f"{hidden_count(problem)} hidden tests, all {next(iter(hidden_answers))[:40]}"))
            tally["removed: one hidden answer"] += 1
            continue
        tally["kept"] += 1
        tally["kept: unverified_hidden"] += problem.metadata.get("tier") == UNVERIFIED_HIDDEN
        out.keep(problem)
    return {"per_source": {source: dict(sorted(tally.items())) for source, tally in per_source.items()},
            "discarded_candidates": dict(sorted(counts.items())),
            "stdin": {source: dict(sorted(tally.items())) for source, tally in stdin_tally.items()}}


UNVERIFIED_HIDDEN = "unverified_hidden"
"""The opt-in tier of problems with no reference but many hidden stored tests."""


def _count_stdin(tally: Counter[str], problem: Problem, settings: AmplifyConfig) -> None:
    """What one stdin problem brings to this stage: a reference, hidden tests, enough of them."""
    hidden = hidden_count(problem)
    tally["problems"] += 1
    tally["with a reference"] += isinstance(problem.metadata.get("reference_solution"), str)
    tally["stored tests"] += len(problem.tests)
    tally["shown tests"] += len(problem.tests) - hidden
    tally["with a hidden test"] += hidden > 0
    minimum = settings.unverified_hidden_min_tests
    tally[f"with {minimum}+ hidden tests"] += hidden >= minimum


def _same(output: str) -> str:
    return " ".join(output.split())


def trivial_program_shares(problem: Problem) -> dict[str, Any]:
    """How much of an unverified problem's hidden tests trivial programs pass, read off the
    expected outputs (whitespace runs as one space) rather than run: the best constant
    output, an empty output, and echoing the input. What its tests can tell apart, where no
    reference checked them. Pure."""
    hidden = [test for test in problem.tests if not test.shown]
    if not hidden:
        return {"hidden_tests": 0}
    outputs = Counter(_same(test.output) for test in hidden)
    constant, constant_count = outputs.most_common(1)[0]
    return {"hidden_tests": len(hidden),
            "constant_output_share": round(constant_count / len(hidden), 4),
            "empty_output_share": round(outputs.get("", 0) / len(hidden), 4),
            "echo_share": round(sum(_same(test.output) == _same(test.input) for test in hidden) / len(hidden), 4)}


def _as_text(arguments: list[Any]) -> str:
    """A call test's input: one JSON value per line."""
    return "\n".join(json.dumps(value) for value in arguments)


def _with_generated(problem: Problem, texts: list[str], answers: dict[str, dict[str, Any]], config: PipelineConfig,
                    space: dict[str, Any], counts: Counter[str], kinds: dict[str, str]) -> Problem:
    """The problem with a test per usable answer, its limit derived again over every test;
    `metadata.amplified.boundary` counts the tests made from boundary inputs (`kinds`: input
    text -> kind), by kind."""
    null_expected = any(test.output.strip() == "null" for test in problem.tests)
    tests = list(problem.tests)
    cpu = list(problem.metadata.get("reference_cpu_s") or [])
    made: Counter[str] = Counter()
    for text in texts:
        answer = answers[answer_key(problem, text, answer_time_limit(problem, config))]
        why = _usable(answer, null_expected)
        if why is not None:
            counts[why] += 1
            continue
        tests.append(TestCase(input=text, output=json.dumps(json.loads(answer["return_json"])), generated=True))
        cpu.append(answer["cpu_s"])
        if text in kinds:
            made[kinds[text]] += 1
    generated = len(tests) - len(problem.tests)
    metadata = dict(problem.metadata)
    metadata["amplified"] = {"candidates": len(texts), "generated": generated, "seed": config.amplify.seed,
                             "boundary_candidates": len(kinds), "boundary": dict(sorted(made.items())), **space}
    update: dict[str, Any] = {"tests": tests, "metadata": metadata}
    if len(cpu) == len(tests) and metadata.get("time_limit_from") == "reference":
        metadata["reference_cpu_s"] = cpu
        settings = config.validate
        update["time_limit_s"] = time_limit_from_reference(cpu, settings.time_limit_multiple,
                                                           settings.time_limit_floor_s, settings.time_limit_cap_s,
                                                           settings.time_limit_step_s)
    return problem.model_copy(update=update)


"""Judging a training reward for less: a test budget per problem, and verdicts judged once.

`problem_on_budget` keeps N of a problem's tests (the rule is `select_tests` in
microcoder.algorithms.rewards). Only training rewards use it; held-out accuracy and
benchmarks judge on every test.

`VerdictCache` judges an identical (problem, extracted program, judging settings) once
within a run. Late in training a group often holds the same program several times
(diversity falls to 0.3-0.5), and a problem comes back step after step; each repeat is
then a dictionary look-up instead of a sandboxed run of every test.

What the key holds, and why it is enough: a digest of the problem as JSON (statement,
tests after any budget, limits, checker), the program exactly as extracted (the
evaluator runs that string, so two responses that differ only outside their code block
share it), and the evaluator's config (judge mode, all_tests, time/memory/output limits,
isolation), which with the problem decide every limit a run gets. The reward mode is not
in the key: it reaches the result only through all_tests (a fraction mode runs every
test), and the reward is computed from the result afterwards. The same key therefore
means the same runs; the cached result is what judging again would give, up to a timeout
near its limit, which judging again could flip either way.

Bounded: at most `max_entries` results, least recently used out first (a result is a
verdict, a few counts and a detail of at most 1000 characters: about 1.5 KB). A
judge_error is never stored (a sandbox fault is not the program's; it is judged again
next time), though repeats within one call share it. Thread-safe: a program being judged
by one caller is waited for, not judged again, by another (verl's reward worker judges a
group's responses in concurrent calls).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence

from microcoder.algorithms.rewards import problem_seed, select_tests
from microcoder.evaluator.evaluate import EvaluationResult, Evaluator, Sample
from microcoder.evaluator.extract import extract_code
from microcoder.problems import Problem

DEFAULT_CACHE_ENTRIES = 4096


def problem_on_budget(problem: Problem, max_tests: int | None, seed: int) -> Problem:
    """`problem` judged on at most `max_tests` of its tests (`select_tests` with the
    problem's own seed, `problem_seed(seed, problem.id)`, hidden tests first); the problem
    itself when it has no more than that."""
    if max_tests is None or len(problem.tests) <= max_tests:
        return problem
    keep = select_tests([len(test.input) for test in problem.tests], max_tests, problem_seed(seed, problem.id),
                        shown=[test.shown for test in problem.tests])
    return problem.model_copy(update={"tests": [problem.tests[index] for index in keep]})


class VerdictCache:
    """Results of judged programs by (problem, program, judging settings); see the module docstring."""

    def __init__(self, max_entries: int = DEFAULT_CACHE_ENTRIES):
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self.hits = 0
        """Samples answered without being judged (a stored result, a repeat in the same call, or one another caller judged)."""
        self.lookups = 0
        """Samples with a program that were looked up (a response without one is not)."""
        self._results: OrderedDict[bytes, EvaluationResult] = OrderedDict()  # least recently used first
        self._pending: dict[bytes, threading.Event] = {}  # keys some caller is judging now
        self._digests: OrderedDict[int, tuple[Problem, bytes]] = OrderedDict()  # id(problem) -> (it, its digest)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._results)

    def key(self, evaluator: Evaluator, problem: Problem, code: str) -> bytes:
        """The key of judging `code` against `problem` with `evaluator`'s settings."""
        settings = evaluator.config.model_dump(mode="json")
        settings.pop("workers")  # how many runs at once: no run's outcome depends on it
        digest = hashlib.blake2b(digest_size=16)
        digest.update(self._problem_digest(problem))
        digest.update(json.dumps(settings, sort_keys=True).encode())
        digest.update(b"\0")
        digest.update(code.encode("utf-8", "surrogatepass"))
        return digest.digest()

    def _problem_digest(self, problem: Problem) -> bytes:
        # The problem object is held with its digest, so its id() is not reused while it is here.
        with self._lock:
            held = self._digests.get(id(problem))
            if held is not None and held[0] is problem:
                self._digests.move_to_end(id(problem))
                return held[1]
        digest = hashlib.blake2b(problem.model_dump_json().encode(), digest_size=16).digest()
        with self._lock:
            self._digests[id(problem)] = (problem, digest)
            while len(self._digests) > self.max_entries:
                self._digests.popitem(last=False)
        return digest

    def evaluate(self, evaluator: Evaluator, problems: Mapping[str, Problem] | Sequence[Problem],
                 samples: Sequence[Sample]) -> tuple[list[EvaluationResult], list[bool]]:
        """(`evaluator.evaluate(problems, samples)`'s results, whether each came from the cache).

        The samples to judge go to the evaluator as they are (it extracts the code again),
        in one call. A result served from the cache is the judged one with this sample's
        `sample_index`, and `seconds` / `cpu_seconds` 0 and no per-test CPU: nothing ran.
        """
        by_id = problems if isinstance(problems, Mapping) else {problem.id: problem for problem in problems}
        keys: list[bytes | None] = []
        for position, sample in enumerate(samples):
            problem = by_id.get(sample.problem_id)
            if problem is None:
                raise KeyError(f"sample {position}: unknown problem_id {sample.problem_id!r}")
            code = sample.code if sample.code is not None else extract_code(sample.response or "", problem.entry_point)
            keys.append(self.key(evaluator, problem, code) if code is not None and problem.tests else None)

        results: list[EvaluationResult | None] = [None] * len(samples)
        hit = [False] * len(samples)
        claimed: dict[bytes, int] = {}  # key -> the position judged for it in this call
        repeats: list[int] = []  # positions answered by a position judged in this call
        waiting: list[int] = []  # positions whose key another caller is judging
        with self._lock:
            for position, key in enumerate(keys):
                if key is None:
                    continue
                self.lookups += 1
                if key in self._results:
                    self._results.move_to_end(key)
                    results[position] = self._results[key]
                    hit[position] = True
                elif key in claimed:
                    repeats.append(position)
                elif key in self._pending:
                    waiting.append(position)
                else:
                    claimed[key] = position
                    self._pending[key] = threading.Event()
        judge = [position for position, key in enumerate(keys) if key is None or claimed.get(key) == position]
        try:
            judged = evaluator.evaluate(by_id, [samples[p] for p in judge]) if judge else []
            for position, result in zip(judge, judged, strict=True):
                results[position] = result
        finally:
            with self._lock:
                for key, position in claimed.items():
                    if results[position] is not None and results[position].verdict != "judge_error":
                        self._results[key] = results[position]
                        self._results.move_to_end(key)
                    self._pending.pop(key).set()
                while len(self._results) > self.max_entries:
                    self._results.popitem(last=False)
        for position in repeats:
            results[position] = results[claimed[keys[position]]]
            hit[position] = True
        for position in waiting:
            event = self._pending.get(keys[position])
            if event is not None:
                event.wait()
            with self._lock:
                stored = self._results.get(keys[position])
            if stored is not None:
                results[position], hit[position] = stored, True
            else:  # the other caller failed, or its result was a judge_error: judge it here
                results[position] = evaluator.evaluate(by_id, [samples[position]])[0]
        with self._lock:
            self.hits += sum(hit)
        return _renumbered(results, hit, samples), hit


def _renumbered(results: list[EvaluationResult | None], hit: list[bool],
                samples: Sequence[Sample]) -> list[EvaluationResult]:
    """Each result with its own sample's `sample_index` (its rank among the call's samples
    of its problem, as `Evaluator.evaluate` numbers them); a hit with no time of its own."""
    seen: Counter[str] = Counter()
    out = []
    for result, from_cache, sample in zip(results, hit, samples):
        changes = {"sample_index": seen[sample.problem_id], "problem_id": sample.problem_id}
        if from_cache:
            changes.update(seconds=0.0, cpu_seconds=0.0, test_cpu_seconds=None)
        seen[sample.problem_id] += 1
        out.append(dataclasses.replace(result, **changes))
    return out

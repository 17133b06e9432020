"""Judge samples against problems: the reward of training and the judge of benchmarks.

A sample's verdict is that of its first failing test (tests run in order, stopping at
the first failure unless `all_tests`); `accepted` when all pass. Runs happen in the
sandbox; comparisons happen here, so expected outputs never reach a candidate's process.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Annotated

from pydantic import Field

from microcoder.algorithms.pass_at_k import mean_pass_at_k
from microcoder.config_files import CommandConfig
from microcoder.evaluator.compare import JudgeMode, judge_call, judge_stdout, loads_like_livecodebench
from microcoder.evaluator.extract import extract_code
from microcoder.evaluator.isolation import Isolation
from microcoder.evaluator.sandbox import (DEFAULT_MEMORY_LIMIT_MB, DEFAULT_OUTPUT_LIMIT_MB, DEFAULT_TIME_LIMIT_S, ProgramRun,
                                         Sandbox, SandboxConfig, SandboxFault)
from microcoder.problems import Problem, ProblemFormatError, TestCase, iter_jsonl

VERDICTS = (
    "accepted",
    "wrong_answer",
    "runtime_error",
    "time_limit_exceeded",
    "memory_limit_exceeded",
    "output_limit_exceeded",
    "no_code",
    "syntax_error",
    "judge_error",
)
_STATUS_TO_VERDICT = {
    "runtime_error": "runtime_error",
    "time_limit_exceeded": "time_limit_exceeded",
    "memory_limit_exceeded": "memory_limit_exceeded",
    "output_limit_exceeded": "output_limit_exceeded",
    "syntax_error": "syntax_error",
    "sandbox_error": "judge_error",
}
class _CheckerRunFault(Exception):
    """The sandbox failed a run of a problem's checker (its worker died): no verdict."""

    def __init__(self, message: str, machine_fault: bool):
        super().__init__(message)
        self.machine_fault = machine_fault


# Runs a problem's own checker in the sandbox: reads {"input","expected","got"} on stdin.
_CHECKER_DRIVER = """
import json as _json, sys as _sys
_case = _json.loads(_sys.stdin.read())
_sys.stdout.write("1" if check(_case["input"], _case["expected"], _case["got"]) else "0")
"""


TimeLimit = Annotated[float, Field(gt=0, strict=True)]
"""Seconds of CPU per test, or a factor on them: a positive, finite number (not a bool or a
string), as a problem's own `time_limit_s` (problems.time_limit_error)."""


class EvaluatorConfig(CommandConfig):
    """How samples are judged. One config for the `evaluate` entry point."""

    workers: int = Field(0, ge=0)
    """Parallel runs; 0 = one per usable core."""
    mode: JudgeMode = "robust"
    """Comparison rules: robust (ours) or strict (LiveCodeBench's, for side-by-side numbers)."""
    all_tests: bool = False
    """Run every test, not stopping at the first failure (slower; gives exact tests_passed)."""
    time_limit_s: TimeLimit = DEFAULT_TIME_LIMIT_S
    """CPU seconds per test when a problem sets none (a problem's time_limit_s, e.g. from its reference solution, wins)."""
    time_limit_scale: TimeLimit = 1.0
    """Multiply every test's CPU limit (the problem's or time_limit_s) by this, e.g. 2 on a machine twice as slow
    as the one the limits were measured on."""
    memory_limit_mb: int = Field(DEFAULT_MEMORY_LIMIT_MB, gt=0)
    """MiB of address space per test when a problem sets none."""
    output_limit_mb: float = Field(DEFAULT_OUTPUT_LIMIT_MB, gt=0)
    """MiB of stdout per test; more is output_limit_exceeded."""
    isolation: Isolation = "auto"
    """Sandbox isolation: auto, full (fails without namespaces and uid switching) or none (microcoder.evaluator.sandbox)."""
    record_test_cpu: bool = False
    """Record the CPU time of each test run in every result row (EvaluationResult.test_cpu_seconds)."""


@dataclass
class Sample:
    """A model's answer to a problem: `response` (code is extracted) or `code` (used as is)."""

    problem_id: str
    response: str | None = None
    code: str | None = None


@dataclass
class EvaluationResult:
    """One row of the results file."""

    problem_id: str
    sample_index: int
    verdict: str
    reward: float
    tests_passed: int
    tests_run: int
    tests_total: int
    seconds: float
    """Wall time spent on this sample."""
    detail: str = ""
    cpu_seconds: float = 0.0
    """CPU time of the sample's runs (its programs, not the judge)."""
    test_cpu_seconds: list[float | None] | None = None
    """With `EvaluatorConfig.record_test_cpu`: the CPU seconds of each test's run, in test
    order, None for a test not run (after an earlier failure); else None. A timeout's
    entry is what the kernel accounted when the run was stopped, a little over its limit."""
    machine_fault: bool = False
    """A judge_error because the machine failed a run (`ProgramRun.machine_fault`: its
    worker died under it on every try, or the sandbox closed), not the program's nor the
    problem's doing: judged again it may well run. Training masks it like any judge_error;
    a caller that would otherwise record it as the problem's (a data stage's cache) stops
    instead (`stop_on_machine_fault`). Left out of the JSON when False."""

    def to_json(self) -> str:
        record = asdict(self)
        if not self.machine_fault:
            del record["machine_fault"]
        return json.dumps(record)


def stop_on_machine_fault(results: Iterable[EvaluationResult], doing: str) -> None:
    """Raise SandboxFault naming the first result the machine failed: a machine fault is one
    line, never a verdict. `doing`: what stops (e.g. "validate")."""
    for result in results:
        if result.machine_fault:
            raise SandboxFault(f"{doing} stopped: the machine failed a run of {result.problem_id} "
                               f"(sample {result.sample_index}): {result.detail[:300]}; rerun to resume")


@dataclass
class _TestOutcome:
    verdict: str
    detail: str
    cpu_s: float
    machine_fault: bool = False


@dataclass
class _SampleState:
    problem: Problem
    code: str | None
    outcomes: dict[int, _TestOutcome] = field(default_factory=dict)
    next_test: int = 0
    """The lowest test not yet handed to a thread: tests are handed out in order."""
    running: int = 0
    stopped: bool = False
    """One of its tests ended it (`ends_sample`): no more are handed out."""
    terminates: bool = False
    """Some test of it ended other than by a timeout: a second thread may take its later tests."""


class _Schedule:
    """Which test each of the sandbox's threads runs next, for one `evaluate` call.

    A thread continues its own sample, test by test; else starts the next sample; else,
    when none is left to start, takes the next test of a running sample, so that a batch's
    last long samples do not run on one worker while the others idle. Tests are handed out
    in order, so every test before a sample's first failure has run (or is running) when
    the failure is known: the verdict is the one the tests run one after another would
    give, and outcomes past it are left out of the result (`stopping_index`). A sample is
    helped only once one of its tests ended without a timeout: a program that loops on its
    first test would loop on the next too, and a helper would only burn a core.

    At most `capacity` threads serve one call; one that finds nothing to run returns its
    executor thread (other calls may be queued there) and a finished test that leaves work
    for another thread starts one (`record`'s answer)."""

    def __init__(self, states: list[_SampleState], pending: list[int], all_tests: bool, capacity: int):
        self.states = states
        self.all_tests = all_tests
        self.capacity = capacity
        self.lock = threading.Lock()
        self.unstarted = list(reversed(pending))  # popped from the end: in order
        self.started: list[int] = []
        self.unfinished = len(pending)
        self.threads = 0
        self.error: BaseException | None = None
        self.done = threading.Event()
        if not pending:
            self.done.set()

    def _open(self, position: int) -> bool:
        state = self.states[position]
        return not state.stopped and state.next_test < len(state.problem.tests)

    def _choose(self, prefer: int | None) -> int | None:
        if self.error is not None:
            return None
        if prefer is not None and self._open(prefer):
            return prefer
        open_started = [position for position in self.started if self._open(position)]
        for position in open_started:  # nobody is on it (its thread moved on between two tests)
            if self.states[position].running == 0:
                return position
        if self.unstarted:
            position = self.unstarted.pop()
            self.started.append(position)
            return position
        helpable = [position for position in open_started if self.states[position].terminates]
        if helpable:
            return max(helpable, key=lambda p: len(self.states[p].problem.tests) - self.states[p].next_test)
        return None

    def launch(self) -> bool:
        """Count one more thread, where there is work for it and room; True when so."""
        with self.lock:
            if self.threads >= self.capacity or self.error is not None:
                return False
            if not self.unstarted and not any(
                    self._open(p) and (self.states[p].terminates or self.states[p].running == 0) for p in self.started):
                return False
            self.threads += 1
            return True

    def claim(self, prefer: int | None) -> tuple[int, int] | None:
        """(sample position, test index) for the calling thread, or None: it stops serving."""
        with self.lock:
            position = self._choose(prefer)
            if position is None:
                self.threads -= 1
                return None
            state = self.states[position]
            state.next_test += 1
            state.running += 1
            return position, state.next_test - 1

    def record(self, position: int, index: int, outcome: _TestOutcome) -> bool:
        """Store a test's outcome; True when it finished its sample: the caller makes the
        sample's result, then calls `result_made`."""
        with self.lock:
            state = self.states[position]
            state.outcomes[index] = outcome
            state.running -= 1
            if outcome.verdict != "time_limit_exceeded":
                state.terminates = True
            if ends_sample(outcome.verdict, self.all_tests):
                state.stopped = True
            finished = state.running == 0 and not self._open(position)
            if finished:
                self.started.remove(position)
            return finished

    def result_made(self) -> None:
        """A finished sample's result is in place; the call returns once every one is."""
        with self.lock:
            self.unfinished -= 1
            if self.unfinished == 0:
                self.done.set()

    def fail(self, error: BaseException) -> None:
        """A thread raised (or the caller was interrupted): hand out nothing more."""
        with self.lock:
            if self.error is None:
                self.error = error
            self.done.set()


def ends_sample(verdict: str, all_tests: bool) -> bool:
    """Whether a test with this verdict is a sample's last: a failure ends it, and under
    `all_tests` only a syntax error (every other test would fail the same way)."""
    return verdict != "accepted" and (not all_tests or verdict == "syntax_error")


def stopping_index(outcomes: Mapping[int, _TestOutcome], all_tests: bool) -> int | None:
    """The test whose outcome ends a sample's run, None when none does: outcomes after it
    are not the sample's."""
    return next((index for index in sorted(outcomes) if ends_sample(outcomes[index].verdict, all_tests)), None)


class Evaluator:
    """Judges samples in parallel. Build once and reuse: workers are started on first use
    and kept, so thousands of calls cost no process start-up. Close it (or use `with`)."""

    def __init__(self, config: EvaluatorConfig | None = None):
        self.config = config or EvaluatorConfig()
        self.sandbox = Sandbox(config=SandboxConfig(workers=self.config.workers, isolation=self.config.isolation))

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self, kill: bool = False) -> None:
        """Close the workers; `kill` ends the runs in progress now (Sandbox.close)."""
        self.sandbox.close(kill=kill)

    def judging(self, mode: JudgeMode) -> Evaluator:
        """This evaluator's workers judging in `mode` (no new processes; close the original only)."""
        if mode == self.config.mode:
            return self
        return self.with_options(mode=mode)

    def with_options(self, **changes) -> Evaluator:
        """This evaluator's workers under its config with `changes` (e.g. `record_test_cpu=True`,
        `time_limit_scale=2`); no new processes, close the original only. `workers` and
        `isolation` belong to the running workers and cannot change."""
        fixed = sorted({"workers", "isolation"} & set(changes))
        if fixed:
            raise ValueError(f"{fixed} cannot change on a running evaluator; build a new one")
        view = copy.copy(self)
        view.config = self.config.replaced(**changes)
        return view

    def evaluate(
        self,
        problems: Mapping[str, Problem] | Sequence[Problem],
        samples: Sequence[Sample],
        on_result: Callable[[EvaluationResult], None] | None = None,
    ) -> list[EvaluationResult]:
        """One result per sample, in the order of `samples`. `on_result` is called as each
        sample finishes (from worker threads), e.g. to advance a progress bar."""
        by_id = problems if isinstance(problems, Mapping) else {problem.id: problem for problem in problems}
        sample_indices: Counter[str] = Counter()
        states: list[_SampleState | None] = []
        results: list[EvaluationResult | None] = [None] * len(samples)
        indices: list[int] = []
        for position, sample in enumerate(samples):
            indices.append(sample_indices[sample.problem_id])
            sample_indices[sample.problem_id] += 1
            problem = by_id.get(sample.problem_id)
            if problem is None:
                raise KeyError(f"sample {position}: unknown problem_id {sample.problem_id!r}")
            code = sample.code if sample.code is not None else extract_code(sample.response or "", problem.entry_point)
            states.append(_SampleState(problem, code))

        pending = [i for i, state in enumerate(states) if state.code is not None and state.problem.tests]
        started: dict[int, float] = {}

        def finish(position: int) -> None:
            now = time.monotonic()
            result = self._result(states[position], indices[position], samples[position].problem_id,
                                  now - started.get(position, now))
            results[position] = result
            if on_result:
                on_result(result)

        waiting = set(pending)
        for position in range(len(states)):
            if position not in waiting:
                finish(position)
        schedule = _Schedule(states, pending, self.config.all_tests, self.sandbox.size)

        def serve() -> None:
            """One sandbox thread: run the tests the schedule hands out until none is left."""
            try:
                last = None
                while (claim := schedule.claim(last)) is not None:
                    last, index = claim
                    state = states[last]
                    started.setdefault(last, time.monotonic())
                    outcome = self._run_test(state.problem, state.code, state.problem.tests[index])
                    if schedule.record(last, index, outcome):
                        finish(last)
                        schedule.result_made()
                    if schedule.launch():  # work another thread can take, and room for it
                        self.sandbox.submit(serve)
            except BaseException as error:  # noqa: BLE001 - re-raised in the calling thread
                schedule.fail(error)

        try:
            while schedule.launch():
                self.sandbox.submit(serve)
            schedule.done.wait()
        except BaseException as error:
            schedule.fail(error)  # the threads stop after their current test
            raise
        if schedule.error is not None:
            raise schedule.error
        return results  # type: ignore[return-value]

    def evaluate_code(self, problem: Problem, code: str) -> EvaluationResult:
        """Judge one program against one problem."""
        return self.evaluate([problem], [Sample(problem.id, code=code)])[0]

    def time_limit_s(self, problem: Problem) -> float:
        """CPU seconds one test of `problem` may use: its own limit, else the configured
        default, times `time_limit_scale`. The sandbox also stops a run at a wall-clock
        backstop (`SandboxConfig.wall_factor`, 3, times this + 1 s) for programs that sleep
        or block; verdicts follow CPU time."""
        own = problem.time_limit_s if problem.time_limit_s is not None else self.config.time_limit_s
        return own * self.config.time_limit_scale

    def _run_test(self, problem: Problem, code: str, test: TestCase) -> _TestOutcome:
        limits = {
            "time_limit_s": self.time_limit_s(problem),
            "memory_limit_mb": problem.memory_limit_mb or self.config.memory_limit_mb,
            "output_limit_mb": self.config.output_limit_mb,
        }
        # Strict mode runs the program as LiveCodeBench's grader does (its stdout capture,
        # stdin, header of imports and value conversion; microcoder/evaluator/_livecodebench.py).
        harness = "livecodebench" if self.config.mode == "strict" else None
        if problem.kind == "stdin":
            run = self.sandbox.run(code, test.input, harness=harness, **limits)
        elif harness:  # every line is an argument, as LiveCodeBench reads them
            run = self.sandbox.run(code, kind="call", entry_point=problem.entry_point, prelude=problem.call_prelude(),
                                   arguments=test.input.split("\n"), harness=harness, **limits)
        else:
            arguments = [line for line in test.input.split("\n") if line.strip()]
            run = self.sandbox.run(code, kind="call", entry_point=problem.entry_point,
                                   prelude=problem.call_prelude(), arguments=arguments, **limits)
        if run.status != "ok":
            return _TestOutcome(_STATUS_TO_VERDICT[run.status], run.detail, run.cpu_s, run.machine_fault)
        try:
            accepted, reason = self._judge(problem, test, run)
        except ValueError as error:  # the problem's expected output is unusable
            return _TestOutcome("judge_error", f"broken test: {error}", run.cpu_s)
        except _CheckerRunFault as fault:  # the machine failed the checker's run, not the program
            return _TestOutcome("judge_error", str(fault), run.cpu_s, fault.machine_fault)
        return _TestOutcome("accepted" if accepted else "wrong_answer", reason, run.cpu_s)

    def _judge(self, problem: Problem, test: TestCase, run: ProgramRun) -> tuple[bool, str]:
        """(accepted, reason). Raises ValueError only for what is wrong with the problem:
        whatever the candidate's output does to the comparison is its own failure (a
        judge_error is left out of pass@k and masked in training)."""
        checker = problem.checker
        own_checker = checker is not None and checker.python and self.config.mode == "robust"
        if problem.kind == "call":
            if run.return_json is None:
                return False, run.detail or "no return value"
            try:  # the run can write any bytes where its return value goes
                got = (loads_like_livecodebench if self.config.mode == "strict" else json.loads)(run.return_json)
            except (ValueError, RecursionError) as error:
                return False, f"the return value did not come back as JSON: {str(error)[:200]}"
            if own_checker:  # it reads the arguments' lines, the expected JSON and the returned JSON
                return self._run_checker(checker.python, test, run.return_json)
            try:
                return judge_call(test.output, got, self.config.mode, problem.checker)
            except RecursionError:
                return False, "the return value is nested too deeply to compare"
        got = run.stdout.decode("utf-8", "replace")
        if own_checker:
            return self._run_checker(checker.python, test, got)
        return judge_stdout(test.output, got, checker, self.config.mode)

    def _run_checker(self, checker_source: str, test: TestCase, got: str) -> tuple[bool, str]:
        """A problem's checker is code from a dataset: it runs sandboxed too. When it fails
        on the candidate's output, it is asked about the expected output: failing there as
        well, the problem is broken; otherwise the output is what broke it."""
        verdict, detail = self._checker_verdict(checker_source, test, got)
        if verdict is None:
            expected_verdict, _ = self._checker_verdict(checker_source, test, test.output)
            if expected_verdict is not True:
                raise ValueError(f"the problem's checker fails on its own expected output: {detail}")
            return False, f"the problem's checker failed on this output: {detail}"
        return verdict, "" if verdict else "rejected by the problem's checker"

    def _checker_verdict(self, checker_source: str, test: TestCase, got: str) -> tuple[bool | None, str]:
        case = json.dumps({"input": test.input, "expected": test.output, "got": got})
        run = self.sandbox.run(checker_source + "\n" + _CHECKER_DRIVER, case, time_limit_s=10.0,
                               memory_limit_mb=self.config.memory_limit_mb)
        if run.status == "sandbox_error":  # never the output's doing (a broken checker fails otherwise)
            raise _CheckerRunFault(f"the problem's checker could not be run: {run.detail}", run.machine_fault)
        if run.status != "ok" or run.stdout not in (b"0", b"1"):
            return None, f"{run.status}: {run.detail or run.stdout[:200]!r}"
        return run.stdout == b"1", ""

    def _result(self, state: _SampleState, sample_index: int, problem_id: str, seconds: float) -> EvaluationResult:
        total = len(state.problem.tests)
        common = {"problem_id": problem_id, "sample_index": sample_index, "tests_total": total, "seconds": seconds}
        if not state.problem.tests:
            return EvaluationResult(verdict="judge_error", reward=0.0, tests_passed=0, tests_run=0,
                                    detail="problem has no tests", **common)
        if state.code is None:
            return EvaluationResult(verdict="no_code", reward=0.0, tests_passed=0, tests_run=0,
                                    detail="no complete python block in the response", **common)
        outcomes = state.outcomes
        stop = stopping_index(outcomes, self.config.all_tests)
        if stop is not None:  # tests a second thread ran past the sample's end are not its own
            outcomes = {index: outcome for index, outcome in outcomes.items() if index <= stop}
        passed = sum(outcome.verdict == "accepted" for outcome in outcomes.values())
        failures = [index for index in sorted(outcomes) if outcomes[index].verdict != "accepted"]
        verdict, detail, machine_fault = "accepted", "", False
        if failures:
            first = outcomes[failures[0]]
            verdict, detail, machine_fault = first.verdict, f"test {failures[0]}: {first.detail}", first.machine_fault
        return EvaluationResult(
            verdict=verdict,
            reward=1.0 if verdict == "accepted" else 0.0,
            tests_passed=passed,
            tests_run=len(outcomes),
            detail=detail[:1000],
            cpu_seconds=sum(outcome.cpu_s for outcome in outcomes.values()),
            test_cpu_seconds=[outcomes[index].cpu_s if index in outcomes else None for index in range(total)]
            if self.config.record_test_cpu else None,
            machine_fault=machine_fault,
            **common,
        )


def read_samples(path: str) -> list[Sample]:
    """Samples JSONL: {"problem_id", "response"} or {"problem_id", "code"} per line."""
    samples = []
    for row, record in iter_jsonl(path):
        if not isinstance(record, dict):
            raise ProblemFormatError(path, row, "(row)", "expected a JSON object")
        if not isinstance(record.get("problem_id"), str):
            raise ProblemFormatError(path, row, "problem_id", "missing or not a string")
        response, code = record.get("response"), record.get("code")
        if not isinstance(response, str) and not isinstance(code, str):
            raise ProblemFormatError(path, row, "response", "need a string 'response' or 'code'")
        samples.append(Sample(record["problem_id"], response if isinstance(response, str) else None,
                              code if isinstance(code, str) else None))
    return samples


def summarize(results: Iterable[EvaluationResult], ks: Sequence[int] = (1, 5, 10)) -> dict:
    """Verdict counts and unbiased pass@k over problems (judge errors excluded: a broken
    problem is never counted against the model)."""
    results = list(results)
    counts = Counter(result.verdict for result in results)
    per_problem: dict[str, list[int]] = {}
    for result in results:
        if result.verdict == "judge_error":
            continue
        tally = per_problem.setdefault(result.problem_id, [0, 0])
        tally[0] += 1
        tally[1] += result.verdict == "accepted"
    summary: dict = {"samples": len(results), "problems": len(per_problem),
                     "verdicts": {verdict: counts[verdict] for verdict in VERDICTS if counts[verdict]}}
    for k in ks:
        eligible = [(n, c) for n, c in per_problem.values() if n >= k]
        if eligible and len(eligible) == len(per_problem):
            summary[f"pass@{k}"] = mean_pass_at_k([n for n, _ in eligible], [c for _, c in eligible], k)
    return summary

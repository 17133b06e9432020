"""Differential testing: does a sandboxed run behave like plain CPython?

    python benchmarks/differential.py [--corpus tests/fixtures/differential] [--data ../shared/data]
                                      [--sets NAME ...] [--limit N] [--max-tests N] [--jobs 2]
                                      [--no-shared]

Each (program, input) runs twice: once as plain `python3 solution.py < input` in a
throwaway directory (a separate process, with a timeout), and once through the
evaluator (`Evaluator`, and its sandbox for the raw run). The two are compared on:

- stdout, byte for byte;
- the exit status (exit code, or the signal that ended the process);
- the verdict a token checker gives (the evaluator's robust rules: `judge_stdout`,
  `judge_call`), against the test's expected output, or against CPython's own output
  where the corpus gives none;
- call problems: the return value, as JSON.

Stderr is not compared: tracebacks name different files (the sandbox keeps no copy of
the program on disk, so they show no source lines).

Call problems run on the CPython side as a plain call: `main.py` makes a module named
`solution`, runs the problem's prelude and then the program in it, calls the entry point
(`name`, or `Class().method` on a fresh instance) on the test's arguments and writes the
return value as JSON (tuples become lists, a set {NUL + "set": sorted items}, dict keys strings,
as the evaluator's worker sends them; anything else is "not JSON data").

The corpus:
- `--corpus` (default `tests/fixtures/differential`): committed programs that end or do
  I/O in unusual ways. `stdin/*.py` are whole programs; each `# input: "<JSON string>"`
  line in a file is one test (none: DEFAULT_INPUT). `call/*.py` are call-problem
  solutions with `# entry_point: Solution().method` and one `# call: [arguments...]`
  line per test (prelude: the default call prelude, or the file's `# prelude:` lines). An optional `# expected: ...` line (stdin: a JSON string; call: JSON)
  applies to every test of the file.
- `--data` (default `../shared/data`, skipped when absent or with `--no-shared`): every
  reference solution there (LeetCodeDataset, HumanEval, HumanEvalPack canonical, MBPP)
  with its own tests. The data stays where it is; nothing is copied.

What CPython gets, so that only undocumented differences show: the sandbox's scrubbed
environment, `PYTHONHASHSEED=0` (the sandbox's fixed seed) and its 512 MiB stack limit.
The deliberate differences (docs/sandbox.md, "Deliberate differences from plain
CPython") are then not reported, except where a program looks for them.

The exit status is 1 when any difference is found, so CI can run it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample
from microcoder.evaluator.compare import judge_call, judge_stdout
from microcoder.evaluator.sandbox import RUN_ENVIRONMENT
from microcoder.problems import DEFAULT_CALL_PRELUDE, Problem

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = REPO_ROOT / "tests" / "fixtures" / "differential"
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data"
DEFAULT_INPUT = "3\n1 2 3\n"
STACK_BYTES = 512 * 1024 * 1024  # the sandbox worker's main-thread stack (docs/sandbox.md, limits)
CPYTHON_WALL_FACTOR = 3.0  # CPython's wall-clock timeout = factor * time limit + 1 s, as the sandbox's backstop

# The CPython side of a call problem: a plain call of the entry point.
CALL_DRIVER = r'''
import json, sys, types

def plain_json(value, depth=0):
    if depth > 200:
        raise ValueError("return value nested too deeply")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [plain_json(item, depth + 1) for item in value]
    if isinstance(value, (set, frozenset)):
        items = [plain_json(item, depth + 1) for item in value]
        try:
            items.sort()
        except TypeError:
            items.sort(key=repr)
        return {"\x00set": items}
    if isinstance(value, dict):
        return {("\x00" + str(key) if str(key).startswith("\x00") else str(key)): plain_json(item, depth + 1)
                for key, item in value.items()}
    raise TypeError(f"cannot serialise a {type(value).__name__}")

def call(request_path, result_path):
    with open(request_path) as handle:
        request = json.load(handle)
    module = types.ModuleType("solution")
    sys.modules["solution"] = module
    exec(compile(request["prelude"], "prelude.py", "exec"), module.__dict__)
    exec(compile(request["source"], "solution.py", "exec"), module.__dict__)
    entry_point = request["entry_point"]
    if "()." in entry_point:
        class_name, method = entry_point.split("().", 1)
        function = getattr(getattr(module, class_name)(), method)
    else:
        function = getattr(module, entry_point)
    value = function(*[json.loads(argument) for argument in request["arguments"]])
    try:
        answer = "R" + json.dumps(plain_json(value))
    except (TypeError, ValueError) as error:
        answer = "U" + str(error)
    with open(result_path, "w") as handle:
        handle.write(answer)

call(sys.argv[1], sys.argv[2])
'''


@dataclass
class Case:
    """One program on one input."""

    name: str
    kind: str
    """`stdin` or `call`."""
    source: str
    stdin: bytes = b""
    arguments: Sequence[str] = ()
    """Call problems: one JSON value per argument."""
    entry_point: str | None = None
    prelude: str = ""
    expected: str | None = None
    """The expected output (stdin: text; call: JSON); None: CPython's own output."""
    problem: Problem | None = None
    """The problem the case comes from (its checker and limits), when there is one."""
    time_limit_s: float = 2.0
    memory_limit_mb: int = 1024


@dataclass
class Outcome:
    """What one side did with a case."""

    stdout: bytes
    exit_code: int | None
    signal: int | None
    return_json: str | None
    verdict: str
    stderr: bytes = b""
    detail: str = ""
    cpu_s: float = 0.0

    @property
    def exit_status(self) -> str:
        return f"signal {self.signal}" if self.signal is not None else f"exit {self.exit_code}"


@dataclass
class Difference:
    case: Case
    cpython: Outcome
    sandbox: Outcome
    fields: list[str] = field(default_factory=list)


def run_cpython(case: Case, python: str = sys.executable) -> Outcome:
    """Run the case as plain `python3 solution.py < input` (call problems: `python3 main.py`,
    a plain call) in a throwaway directory, under the sandbox's environment and stack."""
    directory = tempfile.mkdtemp(prefix="differential-")
    try:
        stdin_path, stdout_path, stderr_path = (os.path.join(directory, name) for name in ("input", "stdout", "stderr"))
        result_path = os.path.join(directory, "result")
        with open(stdin_path, "wb") as handle:
            handle.write(case.stdin)
        if case.kind == "stdin":
            with open(os.path.join(directory, "solution.py"), "w", encoding="utf-8", errors="surrogatepass") as handle:
                handle.write(case.source)
            argv = [python, "solution.py"]
        else:
            request = {"prelude": case.prelude, "source": case.source, "entry_point": case.entry_point,
                       "arguments": list(case.arguments)}
            with open(os.path.join(directory, "request.json"), "w") as handle:
                json.dump(request, handle)
            with open(os.path.join(directory, "main.py"), "w") as handle:
                handle.write(CALL_DRIVER)
            argv = [python, "main.py", os.path.join(directory, "request.json"), result_path]
        prlimit = shutil.which("prlimit")
        if prlimit:
            argv = [prlimit, f"--stack={STACK_BYTES}:", "--", *argv]
        environment = {**RUN_ENVIRONMENT, "PYTHONHASHSEED": "0", "HOME": directory, "TMPDIR": directory}
        with open(stdin_path, "rb") as stdin, open(stdout_path, "wb") as stdout, open(stderr_path, "wb") as stderr:
            process = subprocess.Popen(argv, stdin=stdin, stdout=stdout, stderr=stderr, cwd=directory,
                                       env=environment, start_new_session=True)
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(CPYTHON_WALL_FACTOR * case.time_limit_s + 1.0, kill)
        timer.start()
        try:
            _, status, rusage = os.wait4(process.pid, 0)
        finally:
            timer.cancel()
        process.returncode = status  # already reaped
        try:
            os.killpg(process.pid, signal.SIGKILL)  # whatever it left running
        except (ProcessLookupError, PermissionError):
            pass
        with open(stdout_path, "rb") as handle:
            out = handle.read()
        with open(stderr_path, "rb") as handle:
            err = handle.read()
        result = b""
        if os.path.exists(result_path):
            with open(result_path, "rb") as handle:
                result = handle.read()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    cpu = rusage.ru_utime + rusage.ru_stime
    exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    return_json = result[1:].decode("utf-8", "replace") if result[:1] == b"R" else None
    outcome = Outcome(out, exit_code, signum, return_json, "", stderr=err, cpu_s=cpu)
    if killed.is_set() or cpu > case.time_limit_s:
        outcome.verdict, outcome.detail = "time_limit_exceeded", f"{cpu:.2f} s CPU"
    elif exit_code != 0:
        outcome.verdict, outcome.detail = "runtime_error", outcome.exit_status
    else:
        outcome.verdict, outcome.detail = judged(case, outcome)
    return outcome


def expected_output(case: Case, cpython: Outcome) -> str:
    """The case's expected output, or CPython's own where the corpus gives none."""
    if case.expected is not None:
        return case.expected
    if case.kind == "stdin":
        return cpython.stdout.decode("utf-8", "replace")
    return cpython.return_json if cpython.return_json is not None else "null"


def judged(case: Case, outcome: Outcome) -> tuple[str, str]:
    """The token checker's verdict on a run that exited 0 (the evaluator's robust rules)."""
    expected = expected_output(case, outcome)
    if case.kind == "stdin":
        accepted, reason = judge_stdout(expected, outcome.stdout.decode("utf-8", "replace"), None, "robust")
    elif outcome.return_json is None:
        accepted, reason = False, "no JSON return value"
    else:
        accepted, reason = judge_call(expected, json.loads(outcome.return_json), "robust")
    return ("accepted" if accepted else "wrong_answer"), reason


def problem_for(case: Case, expected: str) -> Problem:
    """A one-test problem for the evaluator: the case's own problem when it has one."""
    test = {"input": case.stdin.decode("utf-8", "surrogateescape") if case.kind == "stdin" else "\n".join(case.arguments),
            "output": expected}
    if case.problem is not None:
        # model_validate, not model_copy(update=...): the latter would keep the test a dict.
        return Problem.model_validate({**case.problem.model_dump(), "id": case.name, "tests": [test]})
    return Problem(id=case.name, prompt="", kind=case.kind, entry_point=case.entry_point, tests=[test],
                   prelude=case.prelude if case.kind == "call" else None, time_limit_s=case.time_limit_s,
                   memory_limit_mb=case.memory_limit_mb)


def run_sandboxed(evaluator: Evaluator, case: Case, expected: str) -> Outcome:
    """The raw run in the evaluator's sandbox, and the evaluator's verdict (a second run)."""
    run = evaluator.sandbox.run(case.source, case.stdin, kind=case.kind, entry_point=case.entry_point,
                                prelude=case.prelude, arguments=list(case.arguments),
                                time_limit_s=case.time_limit_s, memory_limit_mb=case.memory_limit_mb)
    result = evaluator.evaluate_code(problem_for(case, expected), case.source)
    return Outcome(run.stdout, run.exit_code, run.signal, run.return_json, result.verdict, stderr=run.stderr,
                   detail=result.detail, cpu_s=run.cpu_s)


def compare(case: Case, cpython: Outcome, sandbox: Outcome) -> list[str]:
    """The fields in which the two runs differ; none when both sides ran over the time
    limit (a deliberate difference: the sandbox stops a program that `python3` lets finish,
    so its exit status and output differ as docs/sandbox.md says they will)."""
    if cpython.verdict == sandbox.verdict == "time_limit_exceeded":
        return []
    fields = []
    if cpython.stdout != sandbox.stdout:
        fields.append("stdout")
    if (cpython.exit_code, cpython.signal) != (sandbox.exit_code, sandbox.signal):
        fields.append("exit status")
    if case.kind == "call" and cpython.return_json != sandbox.return_json:
        fields.append("return value")
    if cpython.verdict != sandbox.verdict:
        fields.append("verdict")
    return fields


def differences(cases: Sequence[Case], evaluator: Evaluator, jobs: int = 2,
                progress: bool = False) -> list[Difference]:
    """Run every case both ways; the differences, in case order."""
    done = Counter()

    def one(case: Case) -> Difference | None:
        cpython = run_cpython(case)
        sandbox = run_sandboxed(evaluator, case, expected_output(case, cpython))
        fields = compare(case, cpython, sandbox)
        done["cases"] += 1
        if progress and done["cases"] % 200 == 0:
            print(f"  {done['cases']}/{len(cases)} cases", file=sys.stderr, flush=True)
        return Difference(case, cpython, sandbox, fields) if fields else None

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return [difference for difference in pool.map(one, cases) if difference is not None]


def _header_values(source: str, key: str) -> list[str]:
    prefix = f"# {key}:"
    return [line[len(prefix):].strip() for line in source.splitlines() if line.startswith(prefix)]


def corpus_cases(folder: Path = DEFAULT_CORPUS) -> list[Case]:
    """The committed corpus (see the module docstring for its format)."""
    cases = []
    for path in sorted((folder / "stdin").glob("*.py")):
        source = path.read_text(encoding="utf-8")
        inputs = [json.loads(text) for text in _header_values(source, "input")] or [DEFAULT_INPUT]
        expected = [json.loads(text) for text in _header_values(source, "expected")]
        for index, given in enumerate(inputs):
            cases.append(Case(f"stdin/{path.stem}#{index}", "stdin", source, given.encode("utf-8", "surrogateescape"),
                              expected=expected[0] if expected else None))
    for path in sorted((folder / "call").glob("*.py")):
        source = path.read_text(encoding="utf-8")
        (entry_point,) = _header_values(source, "entry_point")
        expected = _header_values(source, "expected")
        prelude = "\n".join(_header_values(source, "prelude")) or DEFAULT_CALL_PRELUDE
        for index, arguments in enumerate(_header_values(source, "call")):
            cases.append(Case(f"call/{path.stem}#{index}", "call", source, b"",
                              [json.dumps(value) for value in json.loads(arguments)], entry_point, prelude,
                              expected=expected[0] if expected else None))
    return cases


def shared_cases(data: Path, sets: Sequence[str] = (), limit: int | None = None, max_tests: int | None = None,
                 sandbox=None) -> list[Case]:
    """Every reference solution in the shared data with its own tests (converted by our
    loaders; the files are read where they are)."""
    from microcoder.data.loaders import load_problems

    sources = [("HumanEvalPack", data / "humanevalpack" / "humanevalpack_python.jsonl"),
               ("HumanEval", data / "humaneval" / "HumanEval.jsonl.gz"),
               ("MBPP", data / "mbpp" / "MBPP.jsonl")]
    sources += [(path.name.split(".jsonl")[0], path) for path in sorted((data / "leetcodedataset").glob("*.jsonl*"))]
    cases = []
    for name, path in sources:
        if not path.exists() or (sets and not any(wanted.lower() in name.lower() for wanted in sets)):
            continue
        problems, _ = load_problems(path, format="auto", sandbox=sandbox)
        for problem in problems[:limit] if limit else problems:
            reference = problem.metadata.get("reference_solution")
            if not reference:
                continue
            for index, test in enumerate(problem.tests[:max_tests] if max_tests else problem.tests):
                limits = {"time_limit_s": problem.time_limit_s or 2.0, "memory_limit_mb": problem.memory_limit_mb or 1024}
                if problem.kind == "stdin":
                    cases.append(Case(f"{name}/{problem.id}#{index}", "stdin", reference, test.input.encode(),
                                      expected=test.output, problem=problem, **limits))
                else:
                    arguments = [line for line in test.input.split("\n") if line.strip()]
                    cases.append(Case(f"{name}/{problem.id}#{index}", "call", reference, b"", arguments,
                                      problem.entry_point, problem.call_prelude(), expected=test.output,
                                      problem=problem, **limits))
    return cases


def _shown(data: bytes | str | None, width: int = 300) -> str:
    if data is None:
        return "None"
    text = repr(data)
    return text if len(text) <= width else text[: width - 3] + "..."


def report(found: Iterable[Difference], total: int) -> str:
    """One block per difference: the program, both outputs and both exit statuses."""
    found = list(found)
    lines = [f"{len(found)} of {total} cases differ"]
    for difference in found:
        case, cpython, sandbox = difference.case, difference.cpython, difference.sandbox
        lines.append(f"\n## {case.name}: {', '.join(difference.fields)}")
        lines.append("program:\n" + "\n".join("    " + line for line in case.source.splitlines()[:40]))
        lines.append(f"input: {_shown(case.stdin if case.kind == 'stdin' else list(case.arguments))}")
        for side, outcome in (("cpython", cpython), ("sandbox", sandbox)):
            lines.append(f"{side}: {outcome.exit_status}, verdict {outcome.verdict} ({outcome.detail[:200]}), "
                         f"{outcome.cpu_s:.2f} s CPU")
            lines.append(f"  stdout: {_shown(outcome.stdout)}")
            if case.kind == "call":
                lines.append(f"  return: {_shown(outcome.return_json)}")
            lines.append(f"  stderr tail: {_shown(outcome.stderr[-300:])}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--no-shared", action="store_true", help="only the committed corpus")
    parser.add_argument("--sets", nargs="*", default=[], help="shared files whose name contains one of these")
    parser.add_argument("--limit", type=int, default=None, help="the first N problems of each shared file")
    parser.add_argument("--max-tests", type=int, default=None, help="the first N tests of each shared problem")
    parser.add_argument("--jobs", type=int, default=2, help="cases run at once")
    parser.add_argument("--workers", type=int, default=0, help="sandbox workers; 0 = one per core")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: that the script runs (tests/test_benchmarks_smoke.py)")
    args = parser.parse_args()
    started = time.perf_counter()
    with Evaluator(EvaluatorConfig(workers=args.workers)) as evaluator:
        cases = corpus_cases(args.corpus)
        if args.smoke:  # a few committed cases, no shared data
            cases, args.no_shared = cases[:6], True
        print(f"corpus: {len(cases)} cases from {args.corpus}", file=sys.stderr)
        if not args.no_shared and args.data.is_dir():
            shared = shared_cases(args.data, args.sets, args.limit, args.max_tests, evaluator.sandbox)
            print(f"shared references: {len(shared)} cases from {args.data}", file=sys.stderr)
            cases += shared
        elif not args.no_shared:
            print(f"note: {args.data} not found, shared references skipped", file=sys.stderr)
        found = differences(cases, evaluator, args.jobs, progress=True)
    print(report(found, len(cases)))
    print(f"\n{time.perf_counter() - started:.0f} s; isolation: {evaluator.sandbox.plan.description}; "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

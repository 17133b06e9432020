"""Strict mode against LiveCodeBench's grader, verdict for verdict.

    python benchmarks/livecodebench_agreement.py [--corpus tests/fixtures/differential] [--jobs 2] [--smoke]

Every program of the differential corpus (tests/fixtures/differential: stdin and call
programs that read, write, end and return in unusual ways) is judged twice against the
same expected output (the corpus's `# expected:` line, else plain CPython's own output):

- by the evaluator in strict mode (`EvaluatorConfig(mode="strict")`, sandboxed);
- by a reference restatement of LiveCodeBench's grader (tests/fixtures/livecodebench_reference.py,
  its rules written from lcb_runner/evaluation/testing_util.py), run in-process as
  theirs is, in a plain `python3` with stdin on /dev/null.

A case is one LiveCodeBench's grader can express unless the verdict hangs on time (a
timeout on either side) or a call returns a value that is not plain data (what a custom
`__eq__` says cannot cross the sandbox's JSON wire). Agreement is pass/fail on the
expressible cases; 100% is expected. Exit status 1 when any expressible case disagrees.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, the repo root is not on the path

from benchmarks.differential import (DEFAULT_CORPUS, STACK_BYTES, Case, corpus_cases, expected_output, problem_for,
                                     run_cpython)
from microcoder.evaluator import Evaluator, EvaluatorConfig
from microcoder.evaluator.sandbox import RUN_ENVIRONMENT

REFERENCE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "livecodebench_reference.py"


@dataclass
class Agreement:
    case: str
    expressible: bool
    livecodebench: bool | None
    """Whether LiveCodeBench's grader (the reference) passes it; None when it cannot say."""
    strict: bool
    strict_verdict: str
    why: str = ""

    @property
    def agrees(self) -> bool:
        return self.livecodebench == self.strict


def run_reference(case: Case, expected: str, timeout_s: float) -> tuple[bool | None, bool]:
    """(passed, expressible) from the reference grader, in its own process."""
    directory = tempfile.mkdtemp(prefix="lcb-reference-")
    try:
        job = {"kind": case.kind, "source": case.source, "prelude": case.prelude if case.kind == "call" else "",
               "fn_name": (case.entry_point or "").split("().", 1)[-1],
               "inputs": [case.stdin.decode("utf-8", "surrogateescape") if case.kind == "stdin"
                          else "\n".join(case.arguments)],
               "outputs": [expected]}
        job_path, result_path = os.path.join(directory, "job.json"), os.path.join(directory, "result.json")
        with open(job_path, "w") as handle:
            json.dump(job, handle)
        argv = [sys.executable, str(REFERENCE), job_path, result_path]
        prlimit = shutil.which("prlimit")
        if prlimit:
            argv = [prlimit, f"--stack={STACK_BYTES}:", "--", *argv]
        environment = {**RUN_ENVIRONMENT, "PYTHONHASHSEED": "0", "HOME": directory, "TMPDIR": directory}
        try:
            subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           cwd=directory, env=environment, timeout=timeout_s, start_new_session=True)
        except subprocess.TimeoutExpired:
            return None, False
        if not os.path.exists(result_path):  # the process died: every test failed (-1)
            return False, True
        with open(result_path) as handle:
            result = json.load(handle)
        return all(value is True for value in result["results"]) and bool(result["results"]), result["expressible"]
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def agreement(case: Case, evaluator: Evaluator) -> Agreement:
    cpython = run_cpython(case)
    expected = expected_output(case, cpython)
    passed, expressible = run_reference(case, expected, 3 * case.time_limit_s + 1)
    result = evaluator.evaluate_code(problem_for(case, expected), case.source)
    why = ""
    if cpython.verdict == "time_limit_exceeded" or result.verdict == "time_limit_exceeded" or passed is None:
        expressible, why = False, "a timeout"
    elif not expressible:
        why = "returns a value that is not plain data"
    return Agreement(case.name, expressible, passed, result.verdict == "accepted", result.verdict, why)


def agreements(cases: Sequence[Case], evaluator: Evaluator, jobs: int = 2) -> list[Agreement]:
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda case: agreement(case, evaluator), cases))


def summary(rows: Sequence[Agreement]) -> str:
    expressible = [row for row in rows if row.expressible]
    agreeing = sum(row.agrees for row in expressible)
    lines = [f"strict vs LiveCodeBench's grader: {agreeing}/{len(expressible)} expressible cases agree "
             f"({100 * agreeing / max(len(expressible), 1):.1f}%); {len(rows) - len(expressible)} of {len(rows)} "
             "cases not expressible"]
    lcb_pass = sum(bool(row.livecodebench) for row in expressible)
    lines.append(f"  LiveCodeBench passes {lcb_pass}, strict accepts {sum(row.strict for row in expressible)}")
    for row in expressible:
        if not row.agrees:
            lines.append(f"  DISAGREE {row.case}: LiveCodeBench {'pass' if row.livecodebench else 'fail'}, "
                         f"strict {row.strict_verdict}")
    for row in rows:
        if not row.expressible:
            lines.append(f"  not expressible {row.case}: {row.why}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="six cases, seconds: that the script runs")
    args = parser.parse_args()
    cases = corpus_cases(args.corpus)
    if args.smoke:
        cases = [case for case in cases if "/lcb_" in case.name][:6]
    with Evaluator(EvaluatorConfig(workers=args.jobs, mode="strict")) as evaluator:
        rows = agreements(cases, evaluator, args.jobs)
    print(summary(rows))
    return 0 if all(row.agrees for row in rows if row.expressible) else 1


if __name__ == "__main__":
    sys.exit(main())

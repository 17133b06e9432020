"""Evaluator speed: 64 samples x 20 tests for four workloads, against the physical limit.

    python benchmarks/evaluator_speed.py [--workers N] [--samples 64] [--tests 20]

Physical limit = (CPU time the runs themselves used, up to each sample's first failing
test, with one time limit per timeout) / workers. The ratio wall / limit is what the
evaluator's own machinery (scheduling, IPC, judging) costs on top; 1.0 is perfect.
The runs' CPU time is measured by the kernel (rusage of each run's process), so it
includes the per-run process cost (fork, exit), which is also reported per test.

The trivial workloads take about a second each and vary from run to run on a shared
machine: the table gives the median of `--repeat` runs. For them it also gives the fork floor (`fork_floor.py`): the same
interpreter and modules as a worker forking one child per test with nothing else around
it (no limits, uid, IPC or judging), measured in the same run on the same cores.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample
from microcoder.problems import DEFAULT_CALL_PRELUDE, Problem

try:
    from fork_floor import floor_ms_per_sample  # run as a script: benchmarks/ is on the path
except ImportError:
    from benchmarks.fork_floor import floor_ms_per_sample

TIME_LIMIT_S = 1.0


def busy(milliseconds: float) -> str:
    """Python that burns about this much CPU, then continues."""
    return (
        "import time as _t\n_end = _t.process_time() + %f\nwhile _t.process_time() < _end:\n    pass\n" % (milliseconds / 1000)
    )


def stdin_problem(tests: int) -> Problem:
    rows = [{"input": f"{i} {i * 7}\n", "output": f"{i + i * 7}\n"} for i in range(tests)]
    return Problem(id="add", prompt="", kind="stdin", tests=rows, time_limit_s=TIME_LIMIT_S)


def call_problem(tests: int) -> Problem:
    rows = [{"input": f"{i}\n{i * 7}", "output": f"{i + i * 7}"} for i in range(tests)]
    return Problem(id="addc", prompt="", kind="call", entry_point="Solution().add", tests=rows, time_limit_s=TIME_LIMIT_S)


CORRECT = "a, b = map(int, input().split())\nprint(a + b)\n"
CORRECT_CALL = "class Solution:\n    def add(self, a: int, b: int) -> int:\n        return a + b\n"


def rl_mix(samples: int, seed: int = 0) -> list[str]:
    """Half correct, a quarter wrong (on a random test), some crashes, a few infinite loops,
    a few slow but correct -- what a policy's rollouts look like early in training."""
    rng = random.Random(seed)
    codes = []
    for index in range(samples):
        roll = index / samples
        if roll < 0.5:
            codes.append(CORRECT)
        elif roll < 0.75:
            bad = rng.randrange(20)
            codes.append(f"a, b = map(int, input().split())\nprint(a + b + (1 if a == {bad} else 0))\n")
        elif roll < 0.875:
            crash_at = rng.randrange(20)
            codes.append(f"a, b = map(int, input().split())\nassert a != {crash_at}\nprint(a + b)\n")
        elif roll < 0.92:
            codes.append("while True:\n    pass\n")
        else:
            codes.append(busy(100) + CORRECT)
    rng.shuffle(codes)
    return codes


def measure(evaluator: Evaluator, problem: Problem, codes: list[str]) -> dict:
    samples = [Sample(problem.id, code=code) for code in codes]
    evaluator.evaluate([problem], samples[:4])  # warm the workers up
    started = time.perf_counter()
    results = evaluator.evaluate([problem], samples)
    wall = time.perf_counter() - started
    cpu = sum(result.cpu_seconds for result in results)
    runs = sum(result.tests_run for result in results)
    limit = cpu / evaluator.sandbox.size
    verdicts: dict[str, int] = {}
    for result in results:
        verdicts[result.verdict] = verdicts.get(result.verdict, 0) + 1
    return {"wall": wall, "limit": limit, "ratio": wall / limit, "per_sample_ms": 1000 * wall / len(samples),
            "cpu_per_run_ms": 1000 * cpu / runs, "verdicts": verdicts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--tests", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5, help="trivial workloads: report the median of this many runs")
    parser.add_argument("--only", nargs="*", default=[], help="only the workloads whose name contains one of these "
                        "(e.g. --only trivial, to compare two versions side by side)")
    args = parser.parse_args()
    n, tests = args.samples, args.tests
    workloads = {
        "trivial stdin": (stdin_problem(tests), [CORRECT] * n),
        "trivial call": (call_problem(tests), [CORRECT_CALL] * n),
        "~50 ms CPU per test": (stdin_problem(tests), [busy(50) + CORRECT] * n),
        "RL-like mix": (stdin_problem(tests), rl_mix(n)),
    }
    workloads = {name: load for name, load in workloads.items() if not args.only or any(w in name for w in args.only)}
    with Evaluator(EvaluatorConfig(workers=args.workers)) as evaluator:
        size = evaluator.sandbox.size
        floors = {
            name: statistics.median(floor_ms_per_sample(kind, code, prelude, n, tests, size) for _ in range(args.repeat))
            for name, kind, code, prelude in (("trivial stdin", "stdin", CORRECT, ""),
                                              ("trivial call", "call", CORRECT_CALL, DEFAULT_CALL_PRELUDE))
        }
        print(f"{n} samples x {tests} tests, {size} workers on {os.cpu_count()} cores, "
              f"isolation: {evaluator.sandbox.plan.description}\n")
        print("| workload | wall s | physical limit s | ratio | ms per sample | CPU ms per run | fork floor ms per sample | verdicts |")
        print("|---|---|---|---|---|---|---|---|")
        for name, (problem, codes) in workloads.items():
            repeats = args.repeat if name in floors else 1  # they take a second each, and vary run to run
            row = sorted((measure(evaluator, problem, codes) for _ in range(repeats)), key=lambda r: r["wall"])[repeats // 2]
            verdicts = ", ".join(f"{k} {v}" for k, v in sorted(row["verdicts"].items()))
            floor = f"{floors[name]:.1f}" if name in floors else "-"
            print(f"| {name} | {row['wall']:.2f} | {row['limit']:.2f} | {row['ratio']:.2f} | "
                  f"{row['per_sample_ms']:.1f} | {row['cpu_per_run_ms']:.2f} | {floor} | {verdicts} |", flush=True)


if __name__ == "__main__":
    main()

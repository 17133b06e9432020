"""Where a trivial test's cost goes: the run's own process, the worker that forks it, and
our process (scheduling, IPC, judging). Reads the workers' CPU from /proc.

    python benchmarks/evaluator_cost_split.py [--samples 64] [--tests 20]
"""

from __future__ import annotations

import argparse
import os
import resource
import time

from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample
from microcoder.problems import Problem

try:
    from workloads import CORRECT as CODE  # run as a script: benchmarks/ is on the path
except ImportError:
    from benchmarks.workloads import CORRECT as CODE



def cpu_seconds_of(pid: int) -> float:
    """utime + stime of one process (not its children), from /proc/PID/stat."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--tests", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: that the script runs (tests/test_benchmarks_smoke.py)")
    args = parser.parse_args()
    if args.smoke:
        args.samples, args.tests = 4, 2
    problem = Problem(id="add", prompt="", kind="stdin",
                      tests=[{"input": f"{i} {i}\n", "output": f"{2 * i}\n"} for i in range(args.tests)])
    with Evaluator(EvaluatorConfig(workers=2)) as evaluator:
        evaluator.evaluate([problem], [Sample("add", code=CODE)] * 4)  # start both workers
        workers = [worker.process.pid for worker in evaluator.sandbox._all]
        workers_before = sum(map(cpu_seconds_of, workers))
        ours_before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        results = evaluator.evaluate([problem], [Sample("add", code=CODE)] * args.samples)
        wall = time.perf_counter() - started
        ours_after = resource.getrusage(resource.RUSAGE_SELF)
        workers_cpu = sum(map(cpu_seconds_of, workers)) - workers_before
    runs = sum(result.tests_run for result in results)
    ours = (ours_after.ru_utime + ours_after.ru_stime) - (ours_before.ru_utime + ours_before.ru_stime)
    runs_cpu = sum(result.cpu_seconds for result in results)
    print(f"{runs} runs in {wall:.2f} s ({1000 * wall / args.samples:.1f} ms per sample of {args.tests} tests)")
    print("CPU ms per run: "
          f"the run itself {1000 * runs_cpu / runs:.2f}, its worker {1000 * workers_cpu / runs:.2f}, "
          f"our process {1000 * ours / runs:.2f}")


if __name__ == "__main__":
    main()

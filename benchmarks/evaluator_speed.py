"""Evaluator speed: 64 samples x 20 tests for five workloads, against the physical limit.

    python benchmarks/evaluator_speed.py [--workers N] [--samples 64] [--tests 20]
    python benchmarks/evaluator_speed.py --only RL      # the two RL-mix rows and their ratios
    python benchmarks/evaluator_speed.py --against COMMIT [--rounds 3]   # side by side with that commit

Physical limit = (CPU time the runs themselves used, up to each sample's first failing
test, with one time limit per timeout) / min(workers, cores). The ratio wall / limit is what the
evaluator's own machinery (scheduling, IPC, judging) costs on top; 1.0 is perfect.
The runs' CPU time is measured by the kernel (rusage of each run's process), so it
includes the per-run process cost (fork, exit), which is also reported per test.

The trivial workloads take about a second each and vary from run to run on a shared
machine: the table gives the median of `--repeat` runs. For them it also gives the fork floor (`fork_floor.py`): the same
interpreter and modules as a worker forking one child per test with nothing else around
it (no limits, uid, IPC or judging), measured in the same run on the same cores.

`--against COMMIT` (or a checkout's path) runs this script on that commit's package and on
this one's, alternately in fresh processes (`--rounds` each, the old first in each round),
and prints each workload's median wall time under both and their ratio: how a change to the
evaluator moved its speed, measured side by side under the same load.

`--against COMMIT --interleave N` is the finer comparison for small differences on a busy
machine: one long-lived process per version, each with its evaluator started and warm,
judge the workload in turns (N turns each, the order swapped every turn: old new, new old,
...), so that a change of load lasting longer than one batch (about a second) falls on both
versions alike. It prints the paired ratios new / old of wall and CPU per run with their
95% intervals.

The RL-like mix (4 infinite loops, 4 slow but correct programs, the rest trivial, wrong
or crashing) is judged twice: with one generous fixed limit (6 s per test, as before
limits came from references), and with the limit the data pipeline derives from the
problem's reference solution (its CPU time per test, measured here the way the validate
stage measures it, x `time_limit_multiple` within [floor, cap], ValidateConfig's
defaults). The loops cost a whole limit per sample, so most of the fixed-limit batch
is theirs. The run prints both walls' ratio and checks that every sample that is not a
timeout gets the same verdict under both limits.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample
from microcoder.problems import DEFAULT_CALL_PRELUDE, Problem

try:  # run as a script: benchmarks/ is on the path
    from fork_floor import floor_ms_per_sample
    from workloads import (CORRECT, CORRECT_CALL, LOOP, busy, call_problem, old_tree, paired_ratio, rl_mix,
                           stdin_problem)
except ImportError:
    from benchmarks.fork_floor import floor_ms_per_sample
    from benchmarks.workloads import (CORRECT, CORRECT_CALL, LOOP, busy, call_problem, old_tree, paired_ratio,
                                      rl_mix, stdin_problem)

FIXED_RL_LIMIT_S = 6.0  # one generous constant, as before limits came from references


def reference_derived_limit(evaluator: Evaluator, problem: Problem, reference: str) -> tuple[float, float]:
    """(limit, the reference's slowest test in CPU seconds): the validate stage's rule on
    the reference's CPU time per test, with ValidateConfig's default multiple, floor, cap."""
    from microcoder.data.config import ValidateConfig
    from microcoder.data.validate import time_limit_from_reference

    result = evaluator.with_options(record_test_cpu=True).evaluate_code(problem, reference)
    if result.verdict != "accepted":
        raise RuntimeError(f"the reference fails its own problem: {result.verdict} {result.detail}")
    rule = ValidateConfig()
    limit = time_limit_from_reference(result.test_cpu_seconds, rule.time_limit_multiple, rule.time_limit_floor_s,
                                      rule.time_limit_cap_s, rule.time_limit_step_s)
    return limit, max(result.test_cpu_seconds)


def own_cpu_seconds(pid: int) -> float:
    """utime + stime of one process, not its children, from /proc/PID/stat."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(evaluator: Evaluator, problem: Problem, codes: list[str]) -> dict:
    samples = [Sample(problem.id, code=code) for code in codes]
    evaluator.evaluate([problem], [sample for sample in samples if sample.code != LOOP][:4])  # warm the workers up
    workers = [worker.process.pid for worker in evaluator.sandbox._all]
    workers_before, ours_before = sum(map(own_cpu_seconds, workers)), time.process_time()
    started = time.perf_counter()
    results = evaluator.evaluate([problem], samples)
    wall = time.perf_counter() - started
    # The workers' own CPU (forking, reaping, IPC) and ours (scheduling, judging): what the
    # evaluator adds to the runs' CPU. (runs + machinery) / runs is the wall ratio a quiet
    # machine would show if no worker ever waited. Load inflates it too (per-run costs
    # about double at load 5 on 2 cores), but far less than it stretches wall time.
    workers_cpu = sum(map(own_cpu_seconds, workers)) - workers_before
    ours_cpu = time.process_time() - ours_before
    machinery = workers_cpu + ours_cpu
    cpu = sum(result.cpu_seconds for result in results)
    runs = sum(result.tests_run for result in results)
    limit = cpu / min(evaluator.sandbox.size, len(os.sched_getaffinity(0)))  # no more cores than there are
    verdicts: dict[str, int] = {}
    for result in results:
        verdicts[result.verdict] = verdicts.get(result.verdict, 0) + 1
    return {"wall": wall, "limit": limit, "ratio": wall / limit, "per_sample_ms": 1000 * wall / len(samples),
            "cpu_per_run_ms": 1000 * cpu / runs, "verdicts": verdicts, "per_sample": [r.verdict for r in results],
            "cpu": cpu, "cpu_bound_ratio": (cpu + machinery) / cpu,
            "workers_ms_per_run": 1000 * workers_cpu / runs, "ours_ms_per_run": 1000 * ours_cpu / runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--tests", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5, help="trivial workloads: report the median of this many runs")
    parser.add_argument("--only", nargs="*", default=[], help="only the workloads whose name contains one of these "
                        "(e.g. --only trivial, to compare two versions side by side)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: that the script runs (tests/test_benchmarks_smoke.py)")
    parser.add_argument("--against", default=None, help="a commit (or a checkout's path) to run side by side with this one")
    parser.add_argument("--rounds", type=int, default=3, help="--against: runs of each version, alternating")
    parser.add_argument("--interleave", type=int, default=0,
                        help="--against: N turns each in two long-lived processes, alternating batch by batch")
    parser.add_argument("--json", help=argparse.SUPPRESS)  # write the rows as JSON here (--against's runs)
    parser.add_argument("--turns", action="store_true", help=argparse.SUPPRESS)  # --interleave's process
    args = parser.parse_args()
    if args.turns:
        serve_turns(args)
        return
    if args.against and args.interleave:
        compare_interleaved(args)
        return
    if args.against:
        compare_against(args)
        return
    fixed_limit, loops = FIXED_RL_LIMIT_S, 4
    if args.smoke:  # one infinite loop, under a 1 s "fixed" limit
        args.samples, args.tests, args.repeat = 4, 2, 1
        fixed_limit, loops = 1.0, 1
    n, tests = args.samples, args.tests
    mix = rl_mix(n, tests, loops=loops, slow=loops)
    fixed = stdin_problem(tests).model_copy(update={"time_limit_s": fixed_limit})
    workloads = {
        **trivial_workloads(args),
        "~50 ms CPU per test": (stdin_problem(tests), [busy(50) + CORRECT] * n),
        f"RL-like mix, fixed {fixed_limit:g} s limit": (fixed, mix),
        "RL-like mix, reference-derived limit": (None, mix),  # the limit is measured below
    }
    workloads = {name: load for name, load in workloads.items() if selected(args, name)}
    with Evaluator(EvaluatorConfig(workers=args.workers)) as evaluator:
        size = evaluator.sandbox.size
        derived_name = "RL-like mix, reference-derived limit"
        if derived_name in workloads:
            derived, slowest = reference_derived_limit(evaluator, stdin_problem(tests), CORRECT)
            workloads[derived_name] = (stdin_problem(tests).model_copy(update={"time_limit_s": derived}), mix)
            workloads[f"RL-like mix, reference-derived limit ({derived:g} s)"] = workloads.pop(derived_name)
        floors = {  # not for --against's runs, which read walls and CPU only
            name: statistics.median(floor_ms_per_sample(kind, code, prelude, n, tests, size) for _ in range(args.repeat))
            for name, kind, code, prelude in (("trivial stdin", "stdin", CORRECT, ""),
                                              ("trivial call", "call", CORRECT_CALL, DEFAULT_CALL_PRELUDE))
            if name in workloads and not args.json
        }
        print(f"{n} samples x {tests} tests, {size} workers on {os.cpu_count()} cores, "
              f"isolation: {evaluator.sandbox.plan.description}\n")
        print("| workload | wall s | physical limit s | ratio | ms per sample | CPU ms per run | fork floor ms per sample | verdicts |")
        print("|---|---|---|---|---|---|---|---|")
        rows = {}
        for name, (problem, codes) in workloads.items():
            repeats = args.repeat if name.startswith("trivial") else 1  # they take a second each, and vary run to run
            row = sorted((measure(evaluator, problem, codes) for _ in range(repeats)), key=lambda r: r["wall"])[repeats // 2]
            rows[name] = row
            verdicts = ", ".join(f"{k} {v}" for k, v in sorted(row["verdicts"].items()))
            floor = f"{floors[name]:.1f}" if name in floors else "-"
            print(f"| {name} | {row['wall']:.2f} | {row['limit']:.2f} | {row['ratio']:.2f} | "
                  f"{row['per_sample_ms']:.1f} | {row['cpu_per_run_ms']:.2f} | {floor} | {verdicts} |", flush=True)
        mixes = [name for name in rows if name.startswith("RL-like mix")]
        if len(mixes) == 2:
            fixed_row, derived_row = rows[mixes[0]], rows[mixes[1]]
            differ = [index for index, (a, b) in enumerate(zip(fixed_row["per_sample"], derived_row["per_sample"]))
                      if a != b and "time_limit_exceeded" not in (a, b)]
            print(f"\nRL-like mix: reference slowest test {1000 * slowest:.1f} ms CPU -> limit {derived:g} s per test; "
                  f"wall {fixed_row['wall']:.2f} s (fixed) / {derived_row['wall']:.2f} s (derived) = "
                  f"{fixed_row['wall'] / derived_row['wall']:.2f}x lower (done when >= 2); derived wall / physical "
                  f"limit {derived_row['ratio']:.2f} (done when <= 1.15; (runs + evaluator CPU) / runs CPU "
                  f"{derived_row['cpu_bound_ratio']:.2f}, the ratio with no waiting; load inflates it less than wall time; "
                  f"the workers' own CPU {derived_row['workers_ms_per_run']:.2f} ms and ours "
                  f"{derived_row['ours_ms_per_run']:.2f} ms per run); "
                  f"samples that are not timeouts with another verdict: {len(differ)}"
                  + (f" (positions {differ})" if differ else ""))
        print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        if args.json:
            with open(args.json, "w") as handle:
                # CPU per run: the run's own, the worker's (fork, wait, clean-up) and ours.
                json.dump({name: {"wall": row["wall"], "cpu_ms_per_run": row["cpu_per_run_ms"]
                                  + row["workers_ms_per_run"] + row["ours_ms_per_run"]}
                           for name, row in rows.items()}, handle)


def selected(args, name: str) -> bool:
    """Whether --only keeps the workload `name` (its name contains one of the words)."""
    return not args.only or any(word in name for word in args.only)


def trivial_workloads(args) -> dict[str, tuple[Problem, list[str]]]:
    """The two trivial workloads (the ones --interleave compares), filtered by --only."""
    workloads = {"trivial stdin": (stdin_problem(args.tests), [CORRECT] * args.samples),
                 "trivial call": (call_problem(args.tests), [CORRECT_CALL] * args.samples)}
    return {name: load for name, load in workloads.items() if selected(args, name)}


def serve_turns(args) -> None:
    """--interleave's process: one warm evaluator; for each line "go" on stdin, every
    workload judged once, one JSON line {workload: {wall, cpu_ms_per_run}} on stdout."""
    import sys

    workloads = trivial_workloads(args)
    with Evaluator(EvaluatorConfig(workers=args.workers)) as evaluator:
        for name, (problem, codes) in workloads.items():
            measure(evaluator, problem, codes)  # the first batch starts the workers and fills caches
        print("ready", flush=True)
        for line in sys.stdin:
            if line.strip() != "go":
                break
            rows = {name: measure(evaluator, problem, codes) for name, (problem, codes) in workloads.items()}
            print(json.dumps({name: {"wall": row["wall"], "cpu_ms_per_run": row["cpu_per_run_ms"]
                                     + row["workers_ms_per_run"] + row["ours_ms_per_run"]}
                              for name, row in rows.items()}), flush=True)


def compare_interleaved(args) -> None:
    """This script's --turns processes on `args.against`'s package and on this one's, judging
    the trivial workloads in alternating turns; prints the paired ratios (module docstring)."""
    import subprocess
    import sys
    from pathlib import Path

    trees = {"old": old_tree(args.against, []), "new": Path(__file__).resolve().parents[1]}
    passed = [*(["--only", *args.only] if args.only else []), "--samples", str(args.samples), "--tests",
              str(args.tests), "--workers", str(args.workers)]
    processes = {version: subprocess.Popen([sys.executable, __file__, *passed, "--turns"], text=True,
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           env={**os.environ, "PYTHONPATH": str(tree)})
                 for version, tree in trees.items()}
    walls: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    cpus: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    try:
        for version, process in processes.items():
            if process.stdout.readline().strip() != "ready":
                raise SystemExit(f"the {version} process ({trees[version]}) did not start")
        for turn in range(args.interleave):
            for version in ("old", "new") if turn % 2 == 0 else ("new", "old"):
                process = processes[version]
                process.stdin.write("go\n")
                process.stdin.flush()
                line = process.stdout.readline()
                if not line:
                    raise SystemExit(f"the {version} process ({trees[version]}) stopped")
                for name, row in json.loads(line).items():
                    walls[version].setdefault(name, []).append(row["wall"])
                    cpus[version].setdefault(name, []).append(row["cpu_ms_per_run"])
            if (turn + 1) % 10 == 0:
                print(f"turn {turn + 1}/{args.interleave}", flush=True)
    finally:
        for process in processes.values():
            process.stdin.close()
            process.wait(60)
    print(f"\n{args.samples} samples x {args.tests} tests, {args.interleave} turns each in two warm processes, "
          f"alternating (old = {args.against}); paired ratios new / old, geometric mean and two-sided 95% "
          f"interval; a change is within x% when the interval's upper end is below 1 + x/100.\n")
    print("| workload | turns | wall new / old (95% CI) | CPU per run new / old (95% CI) | "
          "median CPU ms per run, old / new |")
    print("|---|---|---|---|---|")
    for name in walls["new"]:
        wall, cpu = (paired_ratio(series["old"][name], series["new"][name]) for series in (walls, cpus))
        print(f"| {name} | {len(walls['new'][name])} | {wall[0]:.3f} ({wall[1]:.3f}-{wall[2]:.3f}) | "
              f"{cpu[0]:.3f} ({cpu[1]:.3f}-{cpu[2]:.3f}) | {statistics.median(cpus['old'][name]):.2f} / "
              f"{statistics.median(cpus['new'][name]):.2f} |")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def compare_against(args) -> None:
    """This script on `args.against`'s package and on this one's, alternately, each in a
    fresh process with that checkout first on its path; prints median walls and ratios."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    trees = {"old": old_tree(args.against, []), "new": Path(__file__).resolve().parents[1]}
    passed = [*(["--only", *args.only] if args.only else []), "--samples", str(args.samples), "--tests",
              str(args.tests), "--workers", str(args.workers), "--repeat", str(args.repeat),
              *(["--smoke"] if args.smoke else [])]
    walls: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    cpus: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    with tempfile.TemporaryDirectory() as folder:
        for round_index in range(args.rounds):
            for version, tree in trees.items():
                out = Path(folder, f"{version}-{round_index}.json")
                done = subprocess.run([sys.executable, __file__, *passed, "--json", str(out)],
                                      env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True)
                if done.returncode != 0:
                    raise SystemExit(f"the {version} run ({tree}) failed:\n{done.stderr[-3000:]}")
                for name, row in json.loads(out.read_text()).items():
                    walls[version].setdefault(name, []).append(row["wall"])
                    cpus[version].setdefault(name, []).append(row["cpu_ms_per_run"])
            print(f"round {round_index + 1}/{args.rounds}, new / old: " + ", ".join(
                f"{name} wall {walls['new'][name][-1] / walls['old'][name][-1]:.3f} CPU "
                f"{cpus['new'][name][-1] / cpus['old'][name][-1]:.3f}" for name in walls["new"]), flush=True)
    print(f"\n{args.samples} samples x {args.tests} tests, median wall of {args.rounds} runs each, alternating; "
          f"old = {args.against}\n")
    print("| workload | old wall s | new wall s | new / old | old walls | new walls | CPU ms per run (run + worker + ours), old / new |")
    print("|---|---|---|---|---|---|---|")
    for name in walls["new"]:
        old, new = statistics.median(walls["old"][name]), statistics.median(walls["new"][name])
        spread = {version: " ".join(f"{wall:.2f}" for wall in walls[version][name]) for version in walls}
        cpu = {version: statistics.median(cpus[version][name]) for version in cpus}
        print(f"| {name} | {old:.2f} | {new:.2f} | {new / old:.3f} | {spread['old']} | {spread['new']} | "
              f"{cpu['old']:.2f} / {cpu['new']:.2f} |")
    print(f"\nPaired by round (each round runs old then new back to back): geometric mean of new / old, "
          f"two-sided 95% interval; a change is within x% when the interval's upper end is below 1 + x/100.\n")
    print("| workload | rounds | wall new / old (95% CI) | CPU per run new / old (95% CI) |")
    print("|---|---|---|---|")
    for name in walls["new"]:
        wall, cpu = (paired_ratio(series["old"][name], series["new"][name]) for series in (walls, cpus))
        print(f"| {name} | {len(walls['new'][name])} | {wall[0]:.3f} ({wall[1]:.3f}-{wall[2]:.3f}) | "
              f"{cpu[0]:.3f} ({cpu[1]:.3f}-{cpu[2]:.3f}) |")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

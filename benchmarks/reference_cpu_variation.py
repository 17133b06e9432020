"""How much a reference solution's CPU time moves from run to run, and how slow references
are: the measurements behind the validate stage's time-limit defaults (multiple, floor, cap).

    microcoder data build --config configs/data/shared.yaml      # run 1: records reference_cpu_s
    python benchmarks/reference_cpu_variation.py [--repeat 1] [--sample 0] [--workers 2]

Reads the validate stage's output (`build/data/shared/validate/problems.jsonl`, every
problem whose reference passed, with the CPU seconds of each of its tests as the build
measured them), runs every reference again `--repeat` times on the same tests under the
build's measuring limit (the config's `time_limit_s`, 4 s), and prints, per problem, the
ratio of the rerun's slowest test to the recorded slowest test, the largest per-test
ratio among tests of at least 10 ms, the largest absolute increase of any test, and the
distribution of the recorded slowest test over the corpus. The multiple must sit above the
worst rerun ratio with room to spare; the floor above the absolute noise of tests that
take milliseconds. It prints the load average, which is what moves these numbers: the
CPU time of a run grows when other processes share its core's caches.

Needs ../shared (through the build); not a test.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path

from microcoder.data.config import load_build_config
from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample
from microcoder.problems import Problem, read_problems

REPO = Path(__file__).resolve().parent.parent


ADD = "a, b = map(int, input().split())\nprint(a + b)\n"


def smoke_problems() -> list[Problem]:
    """Two hand-made problems shaped as the build writes them (--smoke: no build needed)."""
    tests = [{"input": f"{i} {i}\n", "output": f"{2 * i}\n"} for i in range(3)]
    return [Problem(id=f"smoke-{index}", prompt="", kind="stdin", tests=tests, time_limit_s=1.0,
                    metadata={"reference_solution": ADD, "reference_cpu_s": [0.002] * 3,
                              "time_limit_from": "reference"})
            for index in range(2)]


def quantiles(values: list[float], points=(0.5, 0.9, 0.99, 0.999)) -> str:
    ordered = sorted(values)
    if not ordered:
        return "(none)"
    picks = [f"p{100 * q:g} {ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.3f}" for q in points]
    return f"min {ordered[0]:.3f}, " + ", ".join(picks) + f", max {ordered[-1]:.3f} (n={len(ordered)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(REPO / "configs/data/shared.yaml"))
    parser.add_argument("--repeat", type=int, default=1, help="reruns of every reference")
    parser.add_argument("--sample", type=int, default=0, help="rerun only this many problems, drawn at random (0: all)")
    parser.add_argument("--workers", type=int, default=0, help="0: the config's workers")
    parser.add_argument("--batch", type=int, default=200, help="problems per evaluator call")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: two hand-made problems in place of the build's output (tests/test_benchmarks_smoke.py)")
    args = parser.parse_args()

    config = load_build_config(args.config)
    path = config.stage_dir("validate") / "problems.jsonl"
    if args.smoke:
        path, problems = "(--smoke)", smoke_problems()
    else:
        problems = [p for p in read_problems(path) if p.metadata.get("reference_cpu_s")]
    if not problems:
        raise SystemExit(f"{path}: no problem carries reference_cpu_s; run `microcoder data build --config "
                         f"{args.config}` first")
    if args.sample:
        problems = random.Random(0).sample(problems, min(args.sample, len(problems)))
    recorded_slowest = [max(p.metadata["reference_cpu_s"]) for p in problems]
    print(f"{len(problems)} references from {path}; recorded slowest test per problem (CPU s): "
          f"{quantiles(recorded_slowest)}")
    print(f"share of problems whose slowest test is under 10 ms: "
          f"{sum(s < 0.01 for s in recorded_slowest) / len(recorded_slowest):.3f}, under 100 ms: "
          f"{sum(s < 0.1 for s in recorded_slowest) / len(recorded_slowest):.3f}, over 1 s: "
          f"{sum(s > 1 for s in recorded_slowest)}")

    slowest_ratio, test_ratio, increase = [], [], []
    worst: list[tuple[float, str, float, float]] = []
    failed = []
    started = time.monotonic()
    loads = [os.getloadavg()[0]]
    # The problems carry their derived limits; reruns use the measuring limit instead (as
    # the build did: the shared sources set none), so a slow rerun shows as a ratio rather
    # than a timeout.
    measuring = [p.model_copy(update={"time_limit_s": None}) for p in problems]
    with Evaluator(EvaluatorConfig(workers=args.workers or config.workers, time_limit_s=config.time_limit_s,
                                   record_test_cpu=True)) as evaluator:
        for repeat in range(args.repeat):
            for start in range(0, len(measuring), args.batch):
                batch = measuring[start:start + args.batch]
                results = evaluator.evaluate(batch, [Sample(p.id, code=p.metadata["reference_solution"]) for p in batch])
                loads.append(os.getloadavg()[0])
                for problem, result in zip(batch, results):
                    if result.verdict != "accepted":
                        failed.append((problem.id, result.verdict, result.detail[:120]))
                        continue
                    recorded = problem.metadata["reference_cpu_s"]
                    again = result.test_cpu_seconds
                    ratio = max(again) / max(max(recorded), 1e-4)
                    slowest_ratio.append(ratio)
                    worst.append((ratio, problem.id, max(recorded), max(again)))
                    big = [b / a for a, b in zip(recorded, again) if a >= 0.01]
                    if big:
                        test_ratio.append(max(big))
                    increase.append(max(b - a for a, b in zip(recorded, again)))
            print(f"rerun {repeat + 1}/{args.repeat} done after {time.monotonic() - started:.0f} s", flush=True)

    print(f"\nload average (1 min) during the reruns: {min(loads):.1f}-{max(loads):.1f}")
    print(f"rerun slowest / recorded slowest, per problem: {quantiles(slowest_ratio)}")
    print(f"largest per-test ratio among tests >= 10 ms: {quantiles(test_ratio)}")
    print(f"largest absolute increase of a test (s): {quantiles(increase)}")
    for multiple in (1.5, 2, 3):
        over = sum(r > multiple for r in slowest_ratio)
        print(f"reruns whose slowest test exceeds {multiple:g}x the recorded: {over} of {len(slowest_ratio)}")
    print("largest ratios (ratio, problem, recorded slowest s, rerun slowest s):")
    for ratio, pid, before, after in sorted(worst, reverse=True)[:8]:
        print(f"  {ratio:.2f}  {pid}  {before:.4f} -> {after:.4f}")
    print("largest ratios among problems whose slowest test is >= 100 ms:")
    for ratio, pid, before, after in sorted((w for w in worst if w[2] >= 0.1), reverse=True)[:5]:
        print(f"  {ratio:.2f}  {pid}  {before:.4f} -> {after:.4f}")
    if failed:
        print(f"\n{len(failed)} reruns not accepted (the build accepted them):")
        for pid, verdict, detail in failed[:10]:
            print(f"  {pid}: {verdict} {detail}")


if __name__ == "__main__":
    main()

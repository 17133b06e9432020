"""Honest runs judged beside a run that forks spinners in sessions of their own.

    python benchmarks/noisy_neighbour.py [--spinners 60] [--honest 4] [--against COMMIT]

One worker runs the attack (`--spinners` processes, each after `setsid`, and the main
process, all spinning; limit 2 s), the other judges `--honest` programs one after another
that each need 0.5 s of CPU (limit 1.5 s). Printed: each run's status, CPU and wall, and
the load. Where each worker's runs share one core's quota and are timed together
(docs/sandbox.md, "The CPU cgroup of each worker"), the honest runs are accepted at about
their CPU time and the attack is a time limit at about 2 s of CPU; without, the spinners
starve the honest runs into the wall-clock backstop. `--against COMMIT` runs the same in
a git worktree of that commit first, in its own process, for the two side by side.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

def measure(spinners: int, honest: int) -> None:
    from microcoder.evaluator.sandbox import Sandbox, SandboxConfig

    try:  # run as a script: benchmarks/ is on the path
        from workloads import HALF_A_SECOND, spinners_in_new_sessions
    except ImportError:
        from benchmarks.workloads import HALF_A_SECOND, spinners_in_new_sessions

    with Sandbox(config=SandboxConfig(workers=2)) as sandbox:
        sandbox.run_programs([("pass", "")] * 2)
        print(f"isolation: {sandbox.plan.description}; cgroups: {sandbox.cgroups.description}")
        attack = sandbox.submit(lambda: sandbox.run(spinners_in_new_sessions(spinners), time_limit_s=2.0))
        time.sleep(0.3)  # the spinners are up
        runs = [("honest", sandbox.run(HALF_A_SECOND, time_limit_s=1.5)) for _ in range(honest)]
        runs.append(("attack", attack.result(timeout=300)))
    print("| run | status | CPU s | wall s |")
    print("|---|---|---|---|")
    for name, run in runs:
        print(f"| {name} | {run.status} | {run.cpu_s:.2f} | {run.wall_s:.2f} |")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spinners", type=int, default=60)
    parser.add_argument("--honest", type=int, default=4)
    parser.add_argument("--against", default=None, help="a commit (or a checkout's path) to run first, side by side")
    parser.add_argument("--smoke", action="store_true", help="5 spinners, 1 honest run: that the script runs")
    args = parser.parse_args()
    if args.smoke:
        args.spinners, args.honest = 5, 1
    if args.against:
        try:  # run as a script: benchmarks/ is on the path
            from workloads import old_tree
        except ImportError:
            from benchmarks.workloads import old_tree
        tree = old_tree(args.against, [])
        print(f"## {args.against}\n", flush=True)
        done = subprocess.run([sys.executable, __file__, "--spinners", str(args.spinners), "--honest", str(args.honest)],
                              env={**os.environ, "PYTHONPATH": str(tree)})
        if done.returncode != 0:
            raise SystemExit(f"the run at {args.against} failed")
        print(f"\n## this checkout ({Path(__file__).resolve().parents[1]})\n", flush=True)
    measure(args.spinners, args.honest)


if __name__ == "__main__":
    main()

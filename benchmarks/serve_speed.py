"""The evaluator over HTTP against the evaluator in-process, on the same batch, in one run.

    python benchmarks/serve_speed.py [--workers 2] [--samples 64] [--tests 20] [--repeat 7] [--smoke]

Starts `microcoder serve` as a subprocess (same worker count) and, for each workload,
alternates: judge the batch in-process (`Evaluator.evaluate`), then the same batch over
HTTP (`POST /evaluate`, from building the JSON body to reading the stream's last line).
Alternating puts both under the same background load; the table gives medians over
`--repeat` pairs, their ratio, and the range of the per-pair ratios. The issue's target
is HTTP <= 1.2x in-process. Both evaluators are warmed up before timing.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import os
import re
import select
import signal
import statistics
import subprocess
import sys
import time

from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample

try:
    from workloads import CORRECT, rl_mix, stdin_problem  # run as a script: benchmarks/ is on the path
except ImportError:
    from benchmarks.workloads import CORRECT, rl_mix, stdin_problem


def start_server(workers: int, *options: str) -> tuple[subprocess.Popen, str, int]:
    process = subprocess.Popen([sys.executable, "-m", "microcoder.cli", "serve", "--port", "0",
                                "--workers", str(workers), *options], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if select.select([process.stdout], [], [], 0.5)[0]:
            line = process.stdout.readline()
            found = re.search(r"http://([\d.]+):(\d+)", line)
            if found:
                return process, found.group(1), int(found.group(2))
    process.kill()
    raise RuntimeError("the server did not start")


def over_http(host: str, port: int, problem, samples: list[Sample]) -> list[dict]:
    body = json.dumps({"problems": [problem.model_dump()],
                       "samples": [{k: v for k, v in dataclasses.asdict(s).items() if v is not None} for s in samples]})
    connection = http.client.HTTPConnection(host, port, timeout=600)
    try:
        connection.request("POST", "/evaluate", body=body.encode(), headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {response.read()[:500]!r}")
        rows = [json.loads(line) for line in response.read().decode().splitlines()]
    finally:
        connection.close()
    if not rows or not rows[-1].get("done"):
        raise RuntimeError(f"the stream ended without its done line: {rows[-1:]}")
    return rows[:-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--tests", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=7, help="in-process / HTTP pairs per workload")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: that the script runs (tests/test_benchmarks_smoke.py)")
    args = parser.parse_args()
    loops = 4
    if args.smoke:
        args.samples, args.tests, args.repeat, loops = 4, 2, 1, 1
    problem = stdin_problem(args.tests)
    workloads = {"trivial stdin": [CORRECT] * args.samples,
                 "RL-like mix": rl_mix(args.samples, args.tests, loops=loops, slow=loops)}
    print(f"{args.samples} samples x {args.tests} tests, {args.workers} workers on {os.cpu_count()} cores; "
          f"load average at start {os.getloadavg()[0]:.2f}\n")
    process, host, port = start_server(args.workers)
    try:
        with Evaluator(EvaluatorConfig(workers=args.workers)) as evaluator:
            print("| workload | in-process s (median) | HTTP s (median) | ratio of medians | per-pair ratios | verdicts equal |")
            print("|---|---|---|---|---|---|")
            for name, codes in workloads.items():
                samples = [Sample(problem.id, code=code) for code in codes]
                evaluator.evaluate([problem], samples[:8])  # warm both up
                over_http(host, port, problem, samples[:8])
                local_times, http_times, same = [], [], True
                for _ in range(args.repeat):
                    started = time.perf_counter()
                    local = evaluator.evaluate([problem], samples)
                    local_times.append(time.perf_counter() - started)
                    started = time.perf_counter()
                    remote = over_http(host, port, problem, samples)
                    http_times.append(time.perf_counter() - started)
                    by_index = {row["index"]: row["verdict"] for row in remote}
                    same &= [by_index[i] for i in range(len(samples))] == [r.verdict for r in local]
                ratios = sorted(h / l for h, l in zip(http_times, local_times))
                local_median, http_median = statistics.median(local_times), statistics.median(http_times)
                print(f"| {name} | {local_median:.3f} | {http_median:.3f} | {http_median / local_median:.2f} | "
                      f"{ratios[0]:.2f}-{ratios[-1]:.2f} | {'yes' if same else 'NO'} |", flush=True)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

"""`microcoder serve` under many concurrent clients: throughput and latency of `/run_code`.

    python benchmarks/serve_load.py [--clients 64] [--requests 20] [--workers 0] [--smoke]

Starts `microcoder serve` on loopback (a free port, `--workers`, a queue limit above the
client count), then `--clients` threads each open one HTTP/1.1 connection, kept alive,
and post `--requests` SandboxFusion `/run_code` requests on it one after another (the
body verl 0.9.1 sends: a two-line stdin program and its input), all clients starting
together. Bounded: clients x requests in all, each request with a 60 s timeout. Every
answer is checked (status 200, `Success`, the right stdout); anything else is counted
and printed. Prints throughput (right answers per second of the whole run: a refusal or
a wrong answer is a failure, not throughput) and the latency p50/p99/max of the right
answers, measured by the client from sending to the last byte. Before
the load, one client alone measures the median round trip of `GET /health` and of a
`print(1)` run on its kept-alive connection (30 each): the per-request cost of the HTTP
path itself.

The client threads share this process's GIL and the machine's cores with the server and
its workers, so on a small machine the numbers are a floor for what a separate client
machine would see.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import threading
import time
from collections import Counter

try:
    from serve_speed import start_server  # run as a script: benchmarks/ is on the path
except ImportError:
    from benchmarks.serve_speed import start_server

CODE = "a, b = map(int, input().split())\nprint(a + b)\n"


def payload(index: int) -> tuple[bytes, str]:
    """verl's /run_code body for one test case, and the stdout it must get."""
    body = {"compile_timeout": 10, "run_timeout": 10, "code": CODE, "stdin": f"{index} {index * 3}\n",
            "memory_limit_MB": 1024, "language": "python", "files": {}, "fetch_files": []}
    return json.dumps(body).encode(), f"{index * 4}\n"


def client(host: str, port: int, requests: int, start: threading.Barrier, latencies: list[float],
           failures: Counter, first: int) -> None:
    connection = http.client.HTTPConnection(host, port, timeout=60)
    try:
        connection.connect()
        start.wait()
        for index in range(first, first + requests):
            body, expected = payload(index)
            sent = time.perf_counter()
            try:
                connection.request("POST", "/run_code", body=body, headers={"Content-Type": "application/json"})
                response = connection.getresponse()
                raw = response.read()
            except (OSError, http.client.HTTPException) as error:
                failures[f"{type(error).__name__}"] += 1
                connection.close()  # a fresh connection for the next request
                continue
            took = time.perf_counter() - sent
            if response.status != 200:
                failures[f"HTTP {response.status}"] += 1
                continue
            try:
                answer = json.loads(raw)
                right = answer["status"] == "Success" and answer["run_result"]["stdout"] == expected
                wrong = f"{answer['status']} {answer['run_result']['status']}"
            except (ValueError, KeyError, TypeError):
                failures["not SandboxFusion JSON"] += 1
                continue
            if right:
                latencies.append(took)
            else:
                failures[wrong] += 1
    finally:
        connection.close()


def one_client_latency(host: str, port: int, repeat: int) -> dict[str, float]:
    """Median seconds of one request on one kept-alive connection, alone on the server:
    `GET /health` (no run) and `/run_code` of `print(1)`."""
    connection = http.client.HTTPConnection(host, port, timeout=60)
    body = json.dumps({"code": "print(1)", "language": "python"}).encode()
    medians = {}
    try:
        for name, method, path, data in (("GET /health", "GET", "/health", None),
                                         ("/run_code print(1)", "POST", "/run_code", body)):
            times = []
            for _ in range(repeat):
                sent = time.perf_counter()
                connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
                response = connection.getresponse()
                response.read()
                if response.status != 200:
                    raise RuntimeError(f"{name}: HTTP {response.status}")
                times.append(time.perf_counter() - sent)
            medians[name] = statistics.median(times)
    finally:
        connection.close()
    return medians


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--requests", type=int, default=20, help="requests per client, one after another")
    parser.add_argument("--workers", type=int, default=0, help="the server's sandbox workers; 0 = one per core")
    parser.add_argument("--smoke", action="store_true", help="4 clients x 3 requests: that the script runs "
                        "(tests/test_benchmarks_smoke.py)")
    args = parser.parse_args()
    if args.smoke:
        args.clients, args.requests = 4, 3
    process, host, port = start_server(args.workers, "--queue-limit", str(max(1024, 2 * args.clients)))
    try:
        load_before = os.getloadavg()[0]
        alone = one_client_latency(host, port, 5 if args.smoke else 30)
        latencies: list[float] = []
        failures: Counter = Counter()
        start = threading.Barrier(args.clients + 1)
        threads = [threading.Thread(target=client, args=(host, port, args.requests, start, latencies, failures,
                                                         number * args.requests))
                   for number in range(args.clients)]
        for thread in threads:
            thread.start()
        start.wait()
        started = time.perf_counter()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - started
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    total = args.clients * args.requests
    print(f"{args.clients} clients x {args.requests} requests, kept-alive connections on loopback, "
          f"{args.workers or len(os.sched_getaffinity(0))} workers, {os.cpu_count()} cores; "
          f"load average {load_before:.1f} at start, {os.getloadavg()[0]:.1f} at end")
    print("one client alone, kept-alive, median: " + ", ".join(f"{name} {1000 * seconds:.2f} ms"
                                                              for name, seconds in alone.items()))
    if latencies:
        print(f"{total} requests in {seconds:.2f} s: {len(latencies)} right answers, {len(latencies) / seconds:.0f} "
              f"per second; latency p50 {1000 * statistics.median(latencies):.0f} ms, "
              f"p99 {1000 * percentile(latencies, 0.99):.0f} ms, max {1000 * max(latencies):.0f} ms")
    else:
        print(f"{total} requests in {seconds:.2f} s: no right answer")
    print("failures: " + (", ".join(f"{name} {count}" for name, count in failures.most_common()) or "none"))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())

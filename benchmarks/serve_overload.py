"""`microcoder serve` oversubscribed, judged by verl 0.9.1's own SandboxFusion client.

    python benchmarks/serve_overload.py [--workers 2] [--oversubscription 4] [--correct 40] [--timeout 1] [--smoke]

Starts `microcoder serve` on loopback and posts, all at once, busy loops and correct
programs in a shuffled order through verl's unmodified client (`check_correctness`, one
test case per call, each HTTP request on a new connection, as verl's reward workers do).
The loops are `--oversubscription` times the CPU the pool can give within one request's
budget (workers x (2 x timeout + 10 - 1) s, at timeout s each). Bounded: one burst, every
request with verl's own timeout.

Prints, for the correct programs and for the loops, how verl scored them (True, -3 the
program's timeout, -1 after three 504s, -1 any other way), and for every HTTP request
the server's answer status and how close it came to the client's timeout (verl's
`requests.post(timeout=compile_timeout + run_timeout + 10)`): a request that outlives it
is an API error the server caused. What must hold: no correct program is -3, and no
request outlives its client's timeout.

verl's client is read from an installed verl, else from verl 0.9.1's wheel (downloaded by
scripts/install.sh into ~/.cache/microcoder/wheels or $MICROCODER_WHEELS); without either
the script says so and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import random
import signal
import threading
import time
import types
import zipfile
from collections import Counter
from pathlib import Path

try:
    from serve_speed import start_server  # run as a script: benchmarks/ is on the path
except ImportError:
    from benchmarks.serve_speed import start_server

VERL_CLIENT = "verl/utils/reward_score/sandbox_fusion/utils.py"
VERL_WHEEL = "verl-0.9.1-py3-none-any.whl"
CORRECT = ("a, b = map(int, input().split())\nprint(a + b)\n", "2 3\n", "5\n")
LOOP = ("while True:\n    pass\n", "", "x")


def verl_client() -> types.ModuleType | None:
    spec = importlib.util.find_spec("verl")
    if spec is not None and spec.submodule_search_locations:
        origin = str(Path(list(spec.submodule_search_locations)[0]) / VERL_CLIENT.removeprefix("verl/"))
        source = Path(origin).read_text()
    else:
        wheel = Path(os.environ.get("MICROCODER_WHEELS", Path.home() / ".cache/microcoder/wheels")) / VERL_WHEEL
        if not wheel.exists():
            return None
        with zipfile.ZipFile(wheel) as archive:
            source = archive.read(VERL_CLIENT).decode()
        origin = f"{wheel}!{VERL_CLIENT}"
    client = types.ModuleType("verl_sandbox_fusion_utils")
    client.__file__ = origin
    exec(compile(source, origin, "exec"), client.__dict__)
    return client


def timed_requests(client: types.ModuleType, log: list[tuple[float, float, str]]) -> None:
    """Record (seconds, the client's timeout, outcome) of every request verl's client posts."""
    requests = client.requests
    post = requests.post

    def timed_post(*args, timeout=None, **kwargs):
        started = time.monotonic()
        try:
            response = post(*args, timeout=timeout, **kwargs)
        except requests.exceptions.RequestException as error:
            log.append((time.monotonic() - started, timeout, type(error).__name__))
            raise
        log.append((time.monotonic() - started, timeout, f"HTTP {response.status_code}"))
        return response

    client.requests = types.SimpleNamespace(**{**vars(requests), "post": timed_post})


def verdict_name(verdict, metadata: dict) -> str:
    if verdict is True:
        return "True"
    if verdict == -1 and "Gateway Timeout (504)" in (metadata.get("api_request_error") or ""):
        return "-1 after three 504s"
    return str(verdict)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--oversubscription", type=float, default=4.0,
                        help="the loops' CPU over what the pool runs within one request's budget")
    parser.add_argument("--correct", type=int, default=40, help="correct programs among the loops")
    parser.add_argument("--timeout", type=int, default=1, help="verl's per-case timeout (compile and run)")
    parser.add_argument("--smoke", action="store_true", help="a burst of 3 loops and 3 correct programs")
    args = parser.parse_args()
    client = verl_client()
    if client is None:
        print(f"verl is not installed and {VERL_WHEEL} is absent (scripts/install.sh downloads it): nothing to run")
        return 0
    logging.getLogger(client.__name__).setLevel(logging.CRITICAL)  # its line per 504 and per API error
    budget = 2 * args.timeout + client.API_TIMEOUT - 1  # the server's deadline for one request
    loops = round(args.oversubscription * args.workers * budget / args.timeout)
    if args.smoke:
        loops, args.correct = 3, 3
    log: list[tuple[float, float, str]] = []
    timed_requests(client, log)
    results: dict[str, Counter] = {"correct": Counter(), "loop": Counter()}
    lock = threading.Lock()
    process, host, port = start_server(args.workers)
    url = f"http://{host}:{port}/run_code"

    def judge(kind: str, code: str, stdin: str, expected: str) -> None:
        verdicts, metadata = client.check_correctness(url, {"inputs": [stdin], "outputs": [expected]}, code,
                                                      timeout=args.timeout)
        with lock:
            results[kind][verdict_name(verdicts[0], metadata[0])] += 1

    jobs = [("loop", *LOOP)] * loops + [("correct", *CORRECT)] * args.correct
    random.Random(7).shuffle(jobs)
    try:
        load_before = os.getloadavg()[0]
        started = time.monotonic()
        threads = [threading.Thread(target=judge, args=job) for job in jobs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.monotonic() - started
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    outcomes = Counter(outcome for _, _, outcome in log)
    closest = max(took / timeout for took, timeout, _ in log)
    oversubscription = loops * args.timeout / (args.workers * budget)
    print(f"{args.workers} workers, verl timeout {args.timeout} (a {budget} s budget per request), {loops} loops "
          f"({oversubscription:.2g}x the pool's CPU within one budget) among {args.correct} correct programs; "
          f"{seconds:.0f} s; load average {load_before:.1f} at start, {os.getloadavg()[0]:.1f} at end")
    for kind in ("correct", "loop"):
        print(f"  {kind:8s} " + ", ".join(f"{name}: {count}" for name, count in sorted(results[kind].items())))
    print(f"  {len(log)} HTTP requests: " + ", ".join(f"{name} {count}" for name, count in outcomes.most_common())
          + f"; the slowest took {closest:.0%} of its client's timeout")
    timeouts = results["correct"]["-3"]
    late = sum(1 for took, timeout, outcome in log if outcome in ("ReadTimeout", "Timeout", "ConnectTimeout"))
    print(f"correct programs scored as timeouts: {timeouts}; requests that outlived their client's timeout: {late}")
    return 1 if timeouts or late else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The floor of the evaluator's method: what forking one child per test costs on this
machine with nothing else around it.

    python benchmarks/fork_floor.py [--processes N] [--runs 1280]

Each of N processes (one per core) is an interpreter like a sandbox worker (its flags and
hash seed, the worker's module with its preloads, warmed up, symbols bound at start) that, per run,
puts the input in a memory file, forks, and in the child moves stdin/stdout onto it, runs
the trivial program and exits; the parent waits and reads the output. No limits, uid,
session, directory, IPC or judging: whatever the evaluator spends above this is its own.
`evaluator_speed.py` prints it beside the trivial workloads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ZYGOTE = Path(__file__).resolve().parents[1] / "microcoder" / "evaluator" / "_zygote.py"


def serve(kind: str, runs: int, code_text: str, prelude: str) -> None:
    """One floor process: `runs` forked runs of the program."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_zygote", ZYGOTE)
    zygote = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(zygote)
    zygote.warm_up()
    code = compile(code_text, "solution.py", "exec")
    module = zygote.prepared_prelude(prelude)[0] if kind == "call" else None
    for index in range(runs):
        stdin, stdout = os.memfd_create("stdin"), os.memfd_create("stdout")
        os.write(stdin, f"{index} {index * 7}\n".encode())
        os.lseek(stdin, 0, os.SEEK_SET)
        pid = os.fork()
        if pid == 0:
            os.dup2(stdin, 0)
            os.dup2(stdout, 1)
            if kind == "stdin":
                exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
            else:
                exec(code, module.__dict__)
                value = module.__dict__["Solution"]().add(*[json.loads(line) for line in (str(index), str(index * 7))])
                sys.stdout.write(json.dumps(value))
            sys.stdout.flush()
            os._exit(0)
        os.waitpid(pid, 0)
        output = os.pread(stdout, 1 << 16, 0)
        assert output.strip() == str(index * 8).encode(), output
        os.close(stdin)
        os.close(stdout)


def timed_serve(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    serve(args.serve, args.runs, args.code, args.prelude)
    print(json.dumps({"seconds": time.perf_counter() - started}))


def floor_ms_per_sample(kind: str, code: str, prelude: str, samples: int, tests: int, processes: int) -> float:
    """Milliseconds per sample of `tests` runs at the floor, processes running at once."""
    import subprocess  # here, not at the top: it imports threading, whose at-fork hook would slow every fork

    from microcoder.evaluator.sandbox import WORKER_FLAGS

    command = [sys.executable, *WORKER_FLAGS, __file__, "--serve", kind, "--code", code, "--prelude", prelude]
    environment = {"PATH": "/usr/bin:/bin", "LD_BIND_NOW": "1", "PYTHONHASHSEED": "0"}
    runs = samples * tests
    shares = [runs // processes + (1 if i < runs % processes else 0) for i in range(processes)]
    children = [subprocess.Popen([*command, "--runs", str(share)], env=environment, stdout=subprocess.PIPE)
                for share in shares]
    seconds = [json.loads(child.communicate()[0])["seconds"] for child in children]
    if any(child.returncode for child in children):
        raise RuntimeError("a floor process failed")
    return 1000 * max(seconds) / samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--tests", type=int, default=20)
    parser.add_argument("--serve", choices=["stdin", "call"])
    parser.add_argument("--runs", type=int, default=0)
    parser.add_argument("--code", default="")
    parser.add_argument("--prelude", default="")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: that the script runs (tests/test_benchmarks_smoke.py)")
    args = parser.parse_args()
    if args.smoke:
        args.samples, args.tests, args.processes = 2, 2, 1
    if args.serve:
        timed_serve(args)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.workloads import CORRECT, CORRECT_CALL
    from microcoder.problems import DEFAULT_CALL_PRELUDE

    for kind, code, prelude in (("stdin", CORRECT, ""), ("call", CORRECT_CALL, DEFAULT_CALL_PRELUDE)):
        ms = floor_ms_per_sample(kind, code, prelude, args.samples, args.tests, args.processes)
        print(f"trivial {kind}: {ms:.1f} ms per sample of {args.tests} tests at the fork floor "
              f"({args.processes} processes)")


if __name__ == "__main__":
    main()

"""Evaluator leaks: 10,000 evaluations in one process leave nothing behind.

    python benchmarks/evaluator_leaks.py [--evaluations 10000] [--batch 50] [--workers 0]

One Evaluator judges `--evaluations` samples of one stdin problem (a + b, two tests,
0.1 s CPU limit per test), in `evaluate` calls of `--batch` samples each (default 50,
so 200 calls), the way a trainer judges one rollout batch after another. The samples are
a fixed, shuffled mix of programs (MIX below): correct, wrong, crashing, an infinite
loop, one that forks a sleeping daemon, one that leaves a daemon thread running, one
that blocks on a sleeping non-daemon thread (ended by the wall-clock backstop), and
one that prints 64 MiB (over the 32 MiB output cap).

Then it checks, and prints before/after:
- our child processes (every /proc/self/task/*/children): after `close()` exactly the
  ones we had before; while open, only the evaluator's workers;
- our open file descriptors (/proc/self/fd) and threads (/proc/self/task);
- entries in /tmp (only those named microcoder* or owned by a run uid count as leaks:
  on a shared machine other processes add theirs, which are listed but not counted);
- processes running under the sandbox's run uids (`evaluator.sandbox.run_uids`), while
  the evaluator is still open (the daemons must already be gone) and after close;
- the workers' cgroups (those this process made, named
  microcoder-<our pid namespace>.<our pid>.*): while open exactly the live workers' (a
  retired worker's are gone), after close none.
Exits 1 if anything leaked; a verdict other than the one each program should get is
reported too (and also exits 1), since a leak can show up as a wrong verdict first.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample
from microcoder.evaluator.cgroups import CgroupPlan, _owner_tag
from microcoder.problems import Problem

TIME_LIMIT_S = 0.1
PROBLEM = Problem(id="add", prompt="Print a + b.", kind="stdin", time_limit_s=TIME_LIMIT_S,
                  tests=[{"input": "1 2\n", "output": "3\n"}, {"input": "40 2\n", "output": "42\n"}])
ANSWER = "a, b = map(int, input().split())\nprint(a + b)\n"

# name: (weight in the mix, program, the verdict it should get)
MIX = {
    "correct": (40, ANSWER, "accepted"),
    "wrong": (20, "a, b = map(int, input().split())\nprint(a - b)\n", "wrong_answer"),
    "crash": (14, "a, b = map(int, input().split())\nprint(a // (b - b))\n", "runtime_error"),
    "infinite loop": (6, "while True:\n    pass\n", "time_limit_exceeded"),
    "forks a sleeping daemon": (8, (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(3600)\n"
        "    os._exit(0)\n"
        "os.wait()\n" + ANSWER), "accepted"),
    "leaves a daemon thread running": (8, (
        "import threading, time\n"
        "def spin():\n"
        "    while True:\n"
        "        pass\n"
        "threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n"
        "threading.Thread(target=spin, daemon=True).start()\n" + ANSWER), "accepted"),
    "blocks on a non-daemon thread": (0.2, (
        "import threading, time\n" + ANSWER +
        "threading.Thread(target=time.sleep, args=(3600,)).start()\n"), "time_limit_exceeded"),
    "huge output": (3.8, "import sys\nchunk = b'x' * (1 << 20)\nfor _ in range(64):\n    sys.stdout.buffer.write(chunk)\n",
                    "output_limit_exceeded"),
}


def children() -> set[int]:
    """Our child processes, whichever of our threads started them."""
    return {int(pid) for task in Path("/proc/self/task").iterdir()
            for pid in (task / "children").read_text().split()}


def open_fds() -> set[str]:
    return {f"{fd} -> {os.readlink(f'/proc/self/fd/{fd}')}" for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")}  # the listing's own fd is gone by now


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def tmp_entries() -> set[str]:
    return set(os.listdir("/tmp"))


def ours(entries: set[str], run_uids: set[int]) -> list[str]:
    """New /tmp entries the evaluator could have made: named microcoder* (the sandbox's
    directories) or owned by a run uid. Others on a shared machine add their own entries."""
    found = []
    for name in sorted(entries):
        try:
            owner = os.lstat(os.path.join("/tmp", name)).st_uid
        except FileNotFoundError:
            continue
        if name.startswith("microcoder") or owner in run_uids:
            found.append(name)
    return found


def processes_of(uids: set[int]) -> list[str]:
    """Processes running right now under one of `uids`: 'pid (command)'."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid in uids:
                    command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    found.append(f"{entry.name} ({command.strip()[:80]})")
            except (FileNotFoundError, ProcessLookupError):
                pass
    return found


def our_cgroups(plan: CgroupPlan) -> set[str]:
    """Cgroups this process made (microcoder-<owner tag>-<slot>): other processes on the
    machine make their own in the same parents."""
    prefix = f"microcoder-{_owner_tag()}-"
    found = set()
    for parent in {plan.memory_parent, plan.pids_parent} - {None}:
        found |= {os.path.join(parent, name) for name in os.listdir(parent) if name.startswith(prefix)}
    return found


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def build_mix(evaluations: int, seed: int = 0) -> list[str]:
    """`evaluations` program names in the proportions of MIX, shuffled."""
    total = sum(weight for weight, _, _ in MIX.values())
    names = [name for name, (weight, _, _) in MIX.items() for _ in range(max(1, round(evaluations * weight / total)))]
    names = (names * 2)[:evaluations] if len(names) < evaluations else names[:evaluations]
    random.Random(seed).shuffle(names)
    return names


# Growth of the held memory from the lower of the first two readings (at 1,000 and 2,000
# evaluations: the evaluator's own caches are in place by then) to the median of the last
# three (about the 9,000th, of 10,000; one odd reading does not count). Over those ~7,500
# evaluations 16 MiB is a leak of about 2.2 KiB per evaluation, a kept result with its
# output; the readings have been flat within 1 MiB.
HELD_GROWTH_MB = 16
HELD_READINGS = 5  # fewer (under 5,000 evaluations): the check is not made


def trimmed_rss_mb() -> float:
    """Our RSS once the collector has run and glibc has returned what it can (malloc_trim;
    without glibc, what the collector left)."""
    gc.collect()
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)
    return rss_mb()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--evaluations", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=50, help="samples per evaluate() call")
    parser.add_argument("--workers", type=int, default=0, help="0 = one per core")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: that the script runs (tests/test_benchmarks_smoke.py)")
    args = parser.parse_args()
    if args.smoke:
        args.evaluations, args.batch = 20, 10

    names = build_mix(args.evaluations)
    before = {"children": children(), "fds": open_fds(), "threads": threads(), "tmp": tmp_entries()}
    rss_before = rss_mb()
    held: list[float] = []  # our RSS after gc and malloc_trim, every 1000 evaluations
    verdicts: dict[str, Counter] = {name: Counter() for name in MIX}
    evaluator = Evaluator(EvaluatorConfig(workers=args.workers))
    started = time.perf_counter()
    try:
        for start in range(0, len(names), args.batch):
            batch = names[start : start + args.batch]
            results = evaluator.evaluate([PROBLEM], [Sample(PROBLEM.id, code=MIX[name][1]) for name in batch])
            for name, result in zip(batch, results):
                verdicts[name][result.verdict] += 1
            done = start + len(batch)
            if done % 1000 < args.batch:
                del results
                held.append(trimmed_rss_mb())
                print(f"  {done} evaluations, {time.perf_counter() - started:.0f} s, {held[-1]:.0f} MiB held",
                      file=sys.stderr, flush=True)
        elapsed = time.perf_counter() - started
        run_uids = set(evaluator.sandbox.run_uids)
        workers = evaluator.sandbox.size
        time.sleep(0.5)  # a straggler would still be alive after this
        open_children = children() - before["children"]
        uid_processes_open = processes_of(run_uids)
        plan = evaluator.sandbox.cgroups
        cgroups_open = our_cgroups(plan)
        workers_cgroups = set(evaluator.sandbox.memory_cgroups + evaluator.sandbox.pids_cgroups)
    finally:
        evaluator.close()
    cgroups_closed = our_cgroups(plan)
    rss_after = rss_mb()
    after = {"children": children(), "fds": open_fds(), "threads": threads(), "tmp": tmp_entries()}
    uid_processes_closed = processes_of(run_uids)

    print(f"## Evaluator leaks: {len(names)} evaluations in {len(range(0, len(names), args.batch))} evaluate() calls "
          f"of {args.batch}, {workers} workers on {os.cpu_count()} cores, isolation: "
          f"{evaluator.sandbox.plan.description}; cgroups: {plan.description}\n")
    print(f"{elapsed:.1f} s, {len(names) / elapsed:.0f} evaluations/s "
          f"(load average {' '.join(f'{x:.1f}' for x in os.getloadavg())})\n")
    print("| program | samples | expected verdict | verdicts |")
    print("|---|---|---|---|")
    wrong_verdicts = 0
    for name, (_, _, expected) in MIX.items():
        counts = verdicts[name]
        wrong_verdicts += sum(count for verdict, count in counts.items() if verdict != expected)
        listing = ", ".join(f"{verdict} {count}" for verdict, count in counts.most_common())
        print(f"| {name} | {sum(counts.values())} | {expected} | {listing} |")

    leaks = {
        "child processes": (len(before["children"]), len(after["children"]),
                            sorted(after["children"] - before["children"])),
        "open fds": (len(before["fds"]), len(after["fds"]), sorted(after["fds"] - before["fds"])),
        "threads": (before["threads"], after["threads"], [] if after["threads"] <= before["threads"] else ["more"]),
        "/tmp entries (leaked: the evaluator's)": (len(before["tmp"]), len(after["tmp"]),
                                                   ours(after["tmp"] - before["tmp"], run_uids)),
        f"processes under run uids {min(run_uids, default='-')}..{max(run_uids, default='-')}, open": (
            "-", len(uid_processes_open), uid_processes_open),
        "processes under run uids, after close": ("-", len(uid_processes_closed), uid_processes_closed),
        f"our children while open (must be the {workers} workers)": (
            "-", len(open_children), [] if len(open_children) <= workers else sorted(open_children)),
        "our cgroups while open (must be the live workers')": (
            "-", len(cgroups_open), sorted(cgroups_open ^ workers_cgroups)),
        "our cgroups after close": ("-", len(cgroups_closed), sorted(cgroups_closed)),
    }
    print("\n| check | before | after | leaked |")
    print("|---|---|---|---|")
    for check, (first, last, leaked) in leaks.items():
        print(f"| {check} | {first} | {last} | {', '.join(map(str, leaked[:5])) or 'none'} |")
    others = sorted(set(after["tmp"] - before["tmp"]) - set(ours(after["tmp"] - before["tmp"], run_uids)))
    if others:
        print(f"\nnew /tmp entries not the evaluator's (other processes on this machine): {', '.join(others[:10])}")
    # The RSS itself is for information: glibc keeps freed blocks (the huge-output runs' 32
    # MiB reads among them) for reuse. What it cannot hand back when asked (gc, then
    # malloc_trim) is held, and must not grow with the evaluations.
    checked = len(held) >= HELD_READINGS
    growth = statistics.median(held[-3:]) - min(held[:2]) if checked else 0.0
    print(f"\nour RSS: {rss_before:.0f} MiB before, {rss_after:.0f} MiB after (for information); held after gc and "
          f"malloc_trim, every 1000 evaluations: {', '.join(f'{mb:.0f}' for mb in held)} MiB "
          + (f"(growth {growth:.0f} MiB; more than {HELD_GROWTH_MB} counts as a leak)" if checked else
             f"(growth not checked: it needs {HELD_READINGS} readings, --evaluations {HELD_READINGS * 1000} or more)"))
    if growth > HELD_GROWTH_MB:
        leaks["memory held (MiB)"] = (held[0], held[-1], ["grows"])
    leaked = [check for check, (_, _, items) in leaks.items() if items]
    if leaked or wrong_verdicts:
        print(f"\nFAIL: leaked: {', '.join(leaked) or 'nothing'}; unexpected verdicts: {wrong_verdicts}")
        return 1
    print("\nOK: nothing leaked, every program got its expected verdict")
    return 0


if __name__ == "__main__":
    sys.exit(main())

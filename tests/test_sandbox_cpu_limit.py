"""The CPU limit is decided by the CPU time measured: a program under its limit is never
stopped as a timeout, on an idle host or on one loaded several times over its cores, and
the wall-clock backstop waits for a program that computes but is starved of a core."""

from __future__ import annotations

import os
import signal
import time

import pytest

from microcoder.evaluator.sandbox import Sandbox, SandboxConfig

# Busy for `n` CPU seconds (the stdin), checking the clock only now and then: the kernel's
# tick-sampled account (ITIMER_PROF, RLIMIT_CPU) overcharges such a loop on a shared host.
NEAR_LIMIT = ("import time\nn = float(input())\nwhile time.process_time() < n:\n"
              "    for _ in range(20000):\n        pass\nprint('done')\n")


def busy_processes(count: int) -> list[int]:
    """`count` processes spinning on the CPU (the caller kills them)."""
    pids = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            try:
                signal.alarm(120)  # never outlives a test that forgot it
                while True:
                    pass
            finally:
                os._exit(0)
        pids.append(pid)
    return pids


def test_programs_just_under_their_limit_finish_on_a_loaded_host():
    limit = 0.6
    shares = (0.8, 0.85, 0.9, 0.95) * 2
    load = busy_processes(3 * len(os.sched_getaffinity(0)))
    try:
        with Sandbox(config=SandboxConfig(workers=2)) as sandbox:
            jobs = [(NEAR_LIMIT, f"{limit * share}") for share in shares]
            runs = sandbox.run_programs(jobs, time_limit_s=limit)
    finally:
        for pid in load:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    for share, run in zip(shares, runs):
        assert (run.status, run.stdout) == ("ok", b"done\n"), (share, run.cpu_s, run.wall_s, run.detail)
        assert run.cpu_s < limit


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(config=SandboxConfig(workers=1, wall_factor=0.0)) as sandbox:  # wall backstop: 1 s
        yield sandbox


def test_a_program_over_its_limit_is_stopped_within_a_tick_of_it():
    with Sandbox(config=SandboxConfig(workers=1)) as sandbox:
        run = sandbox.run(NEAR_LIMIT, "100", time_limit_s=0.5)
    assert run.status == "time_limit_exceeded" and "CPU timer" in run.detail, run.detail
    assert 0.5 <= run.cpu_s < 0.55, run.cpu_s


def test_the_wall_backstop_waits_for_a_program_that_computes(sandbox):
    # 1.5 s of CPU takes longer than the 1 s backstop on any host: it still finishes.
    run = sandbox.run(NEAR_LIMIT, "1.5", time_limit_s=2.0)
    assert (run.status, run.stdout) == ("ok", b"done\n"), run.detail
    assert run.wall_s > 1.0


def test_the_wall_backstop_stops_a_program_that_sleeps(sandbox):
    started = time.monotonic()
    run = sandbox.run("import time\ntime.sleep(30)\n", time_limit_s=2.0)
    assert run.status == "time_limit_exceeded" and "wall-clock" in run.detail
    assert time.monotonic() - started < 10


def test_the_wall_backstop_stops_a_program_that_computes_a_little_then_sleeps(sandbox):
    run = sandbox.run(NEAR_LIMIT.replace("print('done')", "time.sleep(30)"), "0.6", time_limit_s=2.0)
    assert run.status == "time_limit_exceeded" and "wall-clock" in run.detail
    assert run.wall_s < 1.0 + 2 * 1.0 + 2  # the first look, at most two more, a margin


def test_a_timer_signal_a_program_sends_itself_under_its_limit_is_its_runtime_error(sandbox):
    for name in ("SIGPROF", "SIGXCPU"):
        run = sandbox.run(f"import os, signal\nos.kill(os.getpid(), signal.{name})\n", time_limit_s=1.0)
        assert run.status == "runtime_error" and name in run.detail, run.detail

"""The CPU limit is decided by the CPU time measured: a program under its limit is never
stopped as a timeout, on an idle host or on one loaded several times over its cores, and
the wall-clock backstop waits for a program that computes but is starved of a core."""

from __future__ import annotations

import os
import signal
import time

import pytest

from benchmarks.workloads import HALF_A_SECOND, spinners_in_new_sessions
from microcoder.evaluator.cgroups import cgroup_plan
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


CGROUPS = cgroup_plan()
needs_cpu_cgroup = pytest.mark.skipif(not (CGROUPS.cpu_parent and CGROUPS.cpuacct_parent),
                                      reason=f"no CPU cgroup can be made here ({CGROUPS.description})")


@needs_cpu_cgroup
def test_spinners_in_new_sessions_neither_starve_a_neighbour_nor_outlive_their_limit():
    # Two workers on a 2-core host: one run forks 60 spinners, the honest one beside it
    # needs half a second of CPU. Each worker's runs share one core's quota, so the
    # spinners get at most their own; their CPU time, all processes together, is the
    # attack's verdict.
    with Sandbox(config=SandboxConfig(workers=2)) as sandbox:
        sandbox.run_programs([("pass", "")] * 2)
        attack = sandbox.submit(lambda: sandbox.run(spinners_in_new_sessions(60), time_limit_s=2.0))
        time.sleep(0.3)  # the spinners are up
        honest = [sandbox.run(HALF_A_SECOND, time_limit_s=1.5) for _ in range(2)]
        attacked = attack.result(timeout=60)
    assert [(run.status, run.stdout) for run in honest] == [("ok", b"done\n")] * 2, honest
    assert attacked.status == "time_limit_exceeded", attacked
    # Stopped by its processes' CPU time (2 s plus a look's slack), not by the 7 s backstop.
    assert 2.0 <= attacked.cpu_s < 3.0 and attacked.wall_s < 5.0, attacked


@needs_cpu_cgroup
def test_the_cpu_time_of_processes_the_run_did_not_wait_for_counts_toward_its_limit():
    # Four grandchildren (double forks, so the main process never waits for them and its
    # own CPU time holds none of theirs) of 0.4 s each: 1.6 s against a 1 s limit, though
    # no single process comes near it. Two of them (0.8 s) are within the limit.
    program = ("import os, time\nread, write = os.pipe()\nfor _ in range({n}):\n    if os.fork() == 0:\n"
               "        if os.fork() == 0:\n            while time.process_time() < 0.4:\n                pass\n"
               "            os.write(write, b'x')\n        os._exit(0)\n    os.wait()\n"
               "got = b''\nwhile len(got) < {n}:\n    got += os.read(read, 8)\nprint('done')\n")
    with Sandbox(config=SandboxConfig(workers=1)) as sandbox:
        four = sandbox.run(program.format(n=4), time_limit_s=1.0)
        two = sandbox.run(program.format(n=2), time_limit_s=1.0)
    assert four.status == "time_limit_exceeded" and four.cpu_s >= 1.0, four
    assert (two.status, two.stdout) == ("ok", b"done\n") and 0.8 <= two.cpu_s < 1.0, two

"""The memory and pids cgroup of each worker: what a run holds outside its address space
(memfds, tmpfs files) counts against its memory limit, and the next run starts from zero.

These need a writable memory cgroup (v2, or the v1 memory controller); where the machine
has none they skip, and the sandbox falls back to rlimits with one warning."""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from microcoder.evaluator import sandbox as sandbox_module
from microcoder.evaluator.sandbox import Sandbox, SandboxConfig, cgroup_plan, isolation_plan

PLAN = cgroup_plan()
needs_cgroup = pytest.mark.skipif(not PLAN.available, reason=f"no writable memory cgroup here: {PLAN.description}")
FULL = isolation_plan("auto").switch_uid and isolation_plan("auto").isolate_filesystem
needs_full_isolation = pytest.mark.skipif(not FULL, reason="needs root with namespaces (isolation 'full')")
LIMIT_MB = 256
MiB = 1 << 20


def hoarding(directory: str | None) -> str:
    """A program holding 480 MiB (16 files of 30 MiB, each under the 32 MiB output limit
    that RLIMIT_FSIZE puts on every file) in memfds (`directory` None) or in tmpfs files
    in `directory`, none of it in its address space; it prints "held" if it got there."""
    if directory is None:
        make = "os.memfd_create(f'hoard-{index}')"
    else:
        make = f"os.open(os.path.join({directory!r}, f'hoard-{{index}}'), os.O_CREAT | os.O_WRONLY, 0o600)"
    return textwrap.dedent(f"""
        import os
        chunk = b"x" * (1 << 20)
        files = []
        for index in range(16):
            fd = {make}
            for _ in range(30):
                os.write(fd, chunk)
            files.append(fd)
        print("held")
    """)


def charged_bytes(path: str) -> int:
    """What the kernel charges to a worker's memory cgroup right now (v1 or v2)."""
    for name in ("memory.current", "memory.usage_in_bytes"):
        if os.path.exists(os.path.join(path, name)):
            return int(Path(path, name).read_text())
    raise FileNotFoundError(f"no memory usage file in {path}")


def peak_bytes(path: str) -> int | None:
    """The most the cgroup was ever charged (v1 max_usage, v2 memory.peak; None if neither)."""
    for name in ("memory.peak", "memory.max_usage_in_bytes"):
        if os.path.exists(os.path.join(path, name)):
            return int(Path(path, name).read_text())
    return None


def host_shmem_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("Shmem:"):
            return int(line.split()[1]) * 1024
    raise LookupError("no Shmem line in /proc/meminfo")


@pytest.fixture()
def sandbox():
    with Sandbox(config=SandboxConfig(workers=1)) as sandbox:  # one worker: every run below shares it
        yield sandbox


@needs_cgroup
@pytest.mark.parametrize("where", [
    None,  # memfds
    pytest.param("/dev/shm", marks=needs_full_isolation),  # the worker's own tmpfs
    pytest.param(".", marks=needs_full_isolation),  # the run's directory, in the worker's /tmp tmpfs
], ids=["memfd", "dev-shm", "run-directory"])
def test_memory_held_in_files_beyond_the_limit_is_memory_limit_exceeded(sandbox, where):
    assert sandbox.run_program("print(1)", memory_limit_mb=LIMIT_MB).status == "ok"  # the worker is up
    shmem_before = host_shmem_bytes()
    result = sandbox.run_program(hoarding(where), time_limit_s=20, memory_limit_mb=LIMIT_MB)
    assert result.status == "memory_limit_exceeded", result
    assert b"held" not in result.stdout
    assert "cgroup" in result.detail
    # The kernel stopped it at the limit, and what it held is gone with the run (other
    # processes on a shared machine move Shmem a little, hence the margin).
    (path,) = sandbox.memory_cgroups
    assert (peak_bytes(path) or 0) <= LIMIT_MB * MiB
    assert charged_bytes(path) < 32 * MiB
    assert host_shmem_bytes() - shmem_before < 64 * MiB
    # The next run in the same worker starts from zero: 200 MiB of its own heap fits.
    after = sandbox.run_program("x = bytearray(200 << 20)\nprint(len(x) >> 20)", memory_limit_mb=LIMIT_MB)
    assert (after.status, after.stdout) == ("ok", b"200\n"), after


@needs_cgroup
def test_files_held_within_the_limit_are_fine(sandbox):
    # 4 x 30 MiB of memfds under a 256 MiB limit: a program may use files in memory.
    program = hoarding(None).replace("range(16)", "range(4)")
    result = sandbox.run_program(program, time_limit_s=20, memory_limit_mb=LIMIT_MB)
    assert (result.status, result.stdout) == ("ok", b"held\n"), result


@needs_cgroup
def test_the_limit_follows_each_runs_memory_limit(sandbox):
    # 480 MiB of memfds: over a 256 MiB limit, within a 1024 MiB one, in the same worker.
    runs = [sandbox.run_program(hoarding(None), time_limit_s=20, memory_limit_mb=limit) for limit in (LIMIT_MB, 1024, LIMIT_MB)]
    assert [run.status for run in runs] == ["memory_limit_exceeded", "ok", "memory_limit_exceeded"], runs
    assert runs[1].stdout == b"held\n"


@needs_cgroup
def test_the_pids_limit_stops_a_fork_bomb_where_no_uid_of_its_own_does():
    # isolation "none": runs keep our uid, so RLIMIT_NPROC is not set, and only the pids
    # cgroup bounds them. The bomb is bounded too (300 sleeping children), in case the
    # cgroup were not there: it prints how many forks it got.
    if PLAN.pids_parent is None:
        pytest.skip(f"no pids cgroup here: {PLAN.description}")
    bomb = textwrap.dedent("""
        import os, time
        made = 0
        for _ in range(300):
            try:
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
                made += 1
            except OSError:
                break
        print(made)
    """)
    with Sandbox(config=SandboxConfig(workers=1, isolation="none", max_processes=32)) as box:
        result = box.run_program(bomb, time_limit_s=10)
        assert result.status == "ok" and int(result.stdout) < 32, result
        # The sweep left nothing in the cgroup: the next run may fork as many again.
        again = box.run_program(bomb, time_limit_s=10)
        assert again.stdout == result.stdout


@needs_cgroup
def test_closing_the_sandbox_removes_its_cgroups():
    box = Sandbox(config=SandboxConfig(workers=2))
    box.run_programs([("print(1)", ""), ("print(2)", "")])
    paths = box.memory_cgroups + box.pids_cgroups
    assert len(box.memory_cgroups) == 2 and all(os.path.isdir(path) for path in paths)
    box.close()
    assert not [path for path in paths if os.path.exists(path)]


@needs_cgroup
def test_a_worker_that_dies_is_replaced_and_its_cgroup_removed(sandbox):
    assert sandbox.run_program("print(1)").status == "ok"
    (worker,) = sandbox._all
    paths = list(worker.cgroup_paths)
    os.kill(worker.process.pid, signal.SIGKILL)  # as an OOM killer outside might
    worker.process.wait()
    assert sandbox.run_program("print(2)").stdout == b"2\n"  # a fresh worker, with cgroups of its own
    assert not [path for path in paths if os.path.exists(path)]
    assert sandbox.memory_cgroups and sandbox.memory_cgroups[0] not in paths


@needs_cgroup
def test_a_cgroup_removed_under_its_worker_costs_one_run(sandbox):
    assert sandbox.run_program("print(1)").status == "ok"
    (worker,) = sandbox._all
    for path in reversed(worker.cgroup_paths):  # empty between runs, so rmdir takes it
        os.rmdir(path)
    broken = sandbox.run_program("print(2)")  # it cannot join: a judge's failure, not the program's
    assert broken.status == "sandbox_error", broken
    assert sandbox.run_program("print(3)").stdout == b"3\n"  # a fresh worker, with cgroups of its own
    assert sandbox._all[0] is not worker and all(os.path.isdir(path) for path in sandbox._all[0].cgroup_paths)


KILLED_OWNER = """
import os, signal, sys
from microcoder.evaluator.sandbox import Sandbox, SandboxConfig
box = Sandbox(config=SandboxConfig(workers=1))
assert box.run_program("print(1)").stdout == b"1\\n"
print(" ".join(box.memory_cgroups + box.pids_cgroups), flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no close(), no atexit
"""


@needs_cgroup
def test_cgroups_left_by_a_killed_process_are_removed_by_the_next_start():
    child = subprocess.run([sys.executable, "-c", KILLED_OWNER], capture_output=True, text=True, timeout=120,
                           cwd=Path(__file__).resolve().parents[1])
    assert child.returncode == -signal.SIGKILL, child.stderr
    stale = child.stdout.split()
    assert stale and all(os.path.isdir(path) for path in stale)
    deadline = time.monotonic() + 30  # its worker ends when it sees its pipe close
    while time.monotonic() < deadline and any(Path(path, "cgroup.procs").read_text().strip() for path in stale):
        time.sleep(0.1)
    with Sandbox(config=SandboxConfig(workers=1)) as box:
        assert box.run_program("print(1)").stdout == b"1\n"
        assert not [path for path in stale if os.path.exists(path)]


def test_without_a_writable_cgroup_the_sandbox_warns_once_and_runs(monkeypatch):
    missing = sandbox_module.CgroupPlan(None, None, None, "no cgroup hierarchy with a memory controller is mounted")
    monkeypatch.setattr(sandbox_module, "cgroup_plan", lambda: missing)
    monkeypatch.setattr(sandbox_module, "_warned_no_cgroup", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            with Sandbox(config=SandboxConfig(workers=1)) as box:
                assert box.run_program("print(1)").stdout == b"1\n"
                assert box.memory_cgroups == []
    messages = [str(warning.message) for warning in caught if "cgroup" in str(warning.message)]
    assert len(messages) == 1 and "memfd" in messages[0], messages
    with pytest.raises(RuntimeError, match="cgroup"):
        Sandbox(config=SandboxConfig(workers=1, cgroup="required"))


def test_cgroup_off_uses_none_and_says_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Sandbox(config=SandboxConfig(workers=1, cgroup="off")) as box:
            assert box.run_program("print(1)").stdout == b"1\n"
            assert box.memory_cgroups == [] and box.pids_cgroups == []
    with pytest.raises(ValueError, match="cgroup"):
        Sandbox(config=SandboxConfig(workers=1, cgroup="sometimes"))


# Where the cgroups go, found from /proc/self/cgroup and /proc/self/mountinfo: checked on
# plain directories standing in for the cgroup filesystems (a real one fills a new
# cgroup with its control files; a plain one takes the probe's write as a new file).
def mount_line(point: str, fstype: str, options: str, root: str = "/") -> str:
    return f"40 31 0:38 {root} {point} rw,relatime - {fstype} {fstype} {options}"


def test_v2_is_used_where_its_memory_controller_is_there(tmp_path):
    own = tmp_path / "v2" / "system.slice" / "job"  # a container's mount shows only its own subtree
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpu memory pids\n")
    (own / "cgroup.subtree_control").write_text("memory pids\n")
    plan = sandbox_module.find_cgroups("0::/system.slice/job\n",
                                       mount_line(str(tmp_path / "v2"), "cgroup2", "rw", root="/"))
    assert (plan.version, plan.memory_parent, plan.pids_parent) == (2, str(own), str(own))
    for probe in own.glob("microcoder-probe-*"):  # a real cgroup's rmdir takes its control files along
        shutil.rmtree(probe)
    # The same cgroup, seen through a mount whose root is our own cgroup (a cgroup namespace).
    plan = sandbox_module.find_cgroups("0::/system.slice/job\n",
                                       mount_line(str(own), "cgroup2", "rw", root="/system.slice/job"))
    assert plan.memory_parent == str(own)


def test_v1_is_used_where_v2_has_no_memory_controller(tmp_path):
    v2, memory, pids = tmp_path / "unified", tmp_path / "memory" / "process_api" / "abc", tmp_path / "pids"
    for directory in (v2, memory, pids):
        directory.mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("hugetlb\n")  # this machine's: memory is bound to v1
    mountinfo = "\n".join([mount_line(str(v2), "cgroup2", "rw"),
                           mount_line(str(tmp_path / "memory"), "cgroup", "rw,memory"),
                           mount_line(str(pids), "cgroup", "rw,pids")])
    plan = sandbox_module.find_cgroups("8:pids:/\n4:memory:/process_api/abc\n0::/\n", mountinfo)
    assert (plan.version, plan.memory_parent, plan.pids_parent) == (1, str(memory), str(pids))
    assert "v1" in plan.description


def test_no_memory_hierarchy_means_no_plan_and_says_why(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu io\n")
    plan = sandbox_module.find_cgroups("0::/\n", mount_line(str(tmp_path), "cgroup2", "rw"))
    assert not plan.available
    assert "gives our cgroup no memory controller" in plan.description, plan
    assert "no cgroup v1 memory hierarchy" in plan.description, plan


@needs_cgroup
def test_a_stale_cgroup_of_a_process_that_is_gone_is_reaped():
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid names no process now (or another one, started later)
    stale = os.path.join(PLAN.memory_parent, f"microcoder-{gone.pid}.1-0")
    os.mkdir(stale)
    try:
        ours = sandbox_module.reap_stale_cgroups(PLAN)
        assert stale in ours and not os.path.exists(stale)
    finally:
        if os.path.exists(stale):
            os.rmdir(stale)

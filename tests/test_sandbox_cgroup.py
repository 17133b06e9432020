"""The memory and pids cgroup of each worker: what a run holds outside its address space
(memfds, tmpfs files) counts against its memory limit, no run can lift that limit for
itself or for the next, and the next run starts from zero.

These need a writable memory cgroup (v2, or the v1 memory controller); where the machine
has none they skip, and the sandbox falls back to rlimits with one warning."""

import dataclasses
import json
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

from microcoder.evaluator import cgroups as cgroups_module
from microcoder.evaluator import sandbox as sandbox_module
from microcoder.evaluator.cgroups import cgroup_plan
from microcoder.evaluator.isolation import IsolationPlan, command_succeeds, isolation_plan
from microcoder.evaluator.sandbox import Sandbox, SandboxConfig

PLAN = cgroup_plan()
needs_cgroup = pytest.mark.skipif(not PLAN.available, reason=f"no writable memory cgroup here: {PLAN.description}")
FULL = isolation_plan("auto").switch_uid and isolation_plan("auto").isolate_filesystem
needs_full_isolation = pytest.mark.skipif(not FULL, reason="needs root with namespaces (isolation 'full')")
LIMIT_MB = 256
MiB = 1 << 20
REPOSITORY = Path(__file__).resolve().parents[1]


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


# The reviewer's escape: in a user namespace of its own (where it holds every capability),
# with a mount and a cgroup namespace, a run mounts the cgroup filesystem afresh and lifts
# the limits it finds there. Where the cgroup's files belong to the run's own uid (runs that
# keep the caller's uid, the caller not root) that held 480 MiB under 256 MiB, and, the
# limit being written only when it changed, so did the next run's plain hoard. Its first
# line says how far it got.
ESCAPE = textwrap.dedent("""
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    def escape():
        if libc.unshare(0x10000000 | 0x20000 | 0x02000000) != 0:  # CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWCGROUP
            return "unshare: " + os.strerror(ctypes.get_errno())
        os.mkdir("cgroup")
        done = []
        for controller, names in (("memory", ("memory.memsw.limit_in_bytes", "memory.limit_in_bytes", "memory.max")),
                                  ("pids", ("pids.max",))):
            if libc.mount(b"cgroup", b"cgroup", b"cgroup", 0, controller.encode()) != 0:
                done.append(f"mount {controller}: " + os.strerror(ctypes.get_errno()))
                continue
            for name in names:
                try:
                    with open(os.path.join("cgroup", name), "w") as handle:
                        handle.write("max" if name.endswith(".max") else str(4 << 30))
                    done.append(name)
                except OSError as error:
                    done.append(f"{name}: {error.strerror}")
            libc.umount2(b"cgroup", 2)
        return ", ".join(done)
    print(escape(), flush=True)
""") + hoarding(None)


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


ROOT = os.geteuid() == 0
LEVELS = [  # the isolation levels a root caller can start in this process
    pytest.param("auto", marks=needs_full_isolation, id="namespaces-and-uid"),
    pytest.param(IsolationPlan((), True, False, "a uid per worker; no namespaces (test)"),
                 marks=pytest.mark.skipif(not ROOT, reason="needs root"), id="uid-only"),
    pytest.param("none", id="none"),
]


def sandbox_at(level, monkeypatch) -> Sandbox:
    if isinstance(level, IsolationPlan):
        plan = level
        monkeypatch.setattr(sandbox_module, "isolation_plan", lambda mode: plan)
        return Sandbox(config=SandboxConfig(workers=1))
    return Sandbox(config=SandboxConfig(workers=1, isolation=level))


@needs_cgroup
@pytest.mark.parametrize("level", LEVELS)
def test_a_run_cannot_lift_its_limit_through_a_cgroup_namespace_of_its_own(level, monkeypatch):
    # The run under a uid other than the cgroup's owner's here (root's runs, or none as root):
    # the test with runs that keep the caller's uid, the level where this was an escape, is
    # test_..._when_runs_keep_the_callers_uid below.
    with sandbox_at(level, monkeypatch) as box:
        escaping = box.run_program(ESCAPE, time_limit_s=20, memory_limit_mb=LIMIT_MB)
        assert escaping.status == "memory_limit_exceeded", escaping
        assert escaping.stdout == b"unshare: Operation not permitted\n", escaping
        after = box.run_program(hoarding(None), time_limit_s=20, memory_limit_mb=LIMIT_MB)
        assert after.status == "memory_limit_exceeded", after


@needs_cgroup
@needs_full_isolation
def test_what_a_runs_own_cgroup_namespace_would_show_holds_no_limit(sandbox):
    # A cgroup namespace is rooted at the cgroup its maker is in: the run's leaf. Lift every
    # limit there (as a run with a way past the seccomp filter could) and the limits above
    # it still hold.
    assert sandbox.run_program("print(1)").status == "ok"
    leaves = [os.path.join(path, cgroups_module.RUN_CGROUP) for path in sandbox.memory_cgroups + sandbox.pids_cgroups]
    lifted = 0
    for leaf in leaves:  # v1: unlimited before, so memory first, then memory + swap
        for name in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.max", "pids.max"):
            if os.path.exists(os.path.join(leaf, name)):
                Path(leaf, name).write_text("max" if name.endswith(".max") else str(4 << 30))
                lifted += 1
    if not lifted:  # v2: no controller is enabled below our cgroup, so the leaf has no limit to lift
        pytest.skip("the run's leaf has no limit files (cgroup v2): nothing a run's namespace could lift")
    result = sandbox.run_program(hoarding(None), time_limit_s=20, memory_limit_mb=LIMIT_MB)
    assert result.status == "memory_limit_exceeded", result


@needs_cgroup
@pytest.mark.skipif(not ROOT, reason="needs root: with isolation 'none' the run must be able to write its cgroup")
def test_a_limit_a_run_lifted_is_written_again_for_the_next_run():
    # isolation="none" as root: the run is root, and may write its worker's cgroup files
    # through /sys/fs/cgroup (docs/sandbox.md, "Not protected"). That run is then not held
    # by the cgroup; the next run in the same worker is.
    with Sandbox(config=SandboxConfig(workers=1, isolation="none")) as box:
        assert box.run_program("print(1)", memory_limit_mb=LIMIT_MB).status == "ok"
        files = [os.path.join(path, name) for path in box.memory_cgroups + box.pids_cgroups
                 for name in ("memory.memsw.limit_in_bytes", "memory.limit_in_bytes", "memory.max", "pids.max")
                 if os.path.exists(os.path.join(path, name))]
        lift = textwrap.dedent(f"""
            for path in {files!r}:
                with open(path, "w") as handle:
                    handle.write("max" if path.endswith(".max") else str(4 << 30))
        """)
        lifted = box.run_program(lift + hoarding(None), time_limit_s=20, memory_limit_mb=LIMIT_MB)
        # The lift worked (else the next run's verdict would prove nothing about rewriting).
        assert (lifted.status, lifted.stdout) == ("ok", b"held\n"), lifted
        after = box.run_program(hoarding(None), time_limit_s=20, memory_limit_mb=LIMIT_MB)
        assert after.status == "memory_limit_exceeded", after
        assert {Path(path).read_text().strip() for path in files} == {str(LIMIT_MB * MiB), str(box.config.max_processes)}


# The reviewer's setup for the level where runs keep the caller's uid: a v1 memory and a
# pids cgroup delegated to `nobody` (chowned to it), and a sandbox started by `nobody` in
# them. Started as root in a mount namespace of its own, where an interpreter under /root
# (0700 here) is bound back where nobody can reach it, it joins the cgroups, becomes
# nobody and judges the programs on stdin (JSON), printing [status, stdout] of each.
AS_NOBODY = """
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def mount(source, target, fstype=None, flags=4096 | 16384, options=None):  # a recursive bind
    if libc.mount(source.encode(), target.encode(), fstype, flags, options) != 0:
        raise OSError(ctypes.get_errno(), f"mount {target}")
memory, pids, stage = sys.argv[1:4]
prefix = os.path.realpath(sys.base_prefix)
if prefix.startswith("/root/"):
    top = "/root/" + prefix.split("/")[2]
    mount(top, stage)
    mount("tmpfs", "/root", b"tmpfs", 0, b"mode=755")
    os.mkdir(top)
    mount(stage, top)
for directory in (memory, pids):
    with open(os.path.join(directory, "cgroup.procs"), "w") as handle:
        handle.write("0")
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
os.environ["HOME"] = "/tmp"
from microcoder.evaluator.cgroups import cgroup_plan
from microcoder.evaluator.isolation import isolation_plan
from microcoder.evaluator.sandbox import Sandbox, SandboxConfig
print(isolation_plan().description, "|", cgroup_plan().description, file=sys.stderr)
with Sandbox(config=SandboxConfig(workers=1, cgroup="required")) as box:
    runs = [box.run_program(source, time_limit_s=20, memory_limit_mb=limit) for source, limit in json.load(sys.stdin)]
print(json.dumps([[run.status, run.stdout.decode()] for run in runs]))
"""


@pytest.fixture()
def delegated_to_nobody(tmp_path):
    """(memory, pids) cgroups below ours, chowned to nobody; removed with all below them."""
    if not ROOT or PLAN.version != 1 or PLAN.pids_parent is None:
        pytest.skip(f"needs root and v1 memory and pids cgroups to delegate (here: {PLAN.description})")
    unshare = shutil.which("unshare")
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all"]
    namespaces = [unshare, "--user", "--map-root-user", "--net", "--mount", "--ipc", "true"]
    if not (unshare and shutil.which("setpriv") and command_succeeds([*as_nobody, *namespaces])):
        pytest.skip("nobody cannot make user namespaces here")
    name = f"delegated-to-nobody-{os.getpid()}"
    made = [os.path.join(parent, name) for parent in (PLAN.memory_parent, PLAN.pids_parent)]
    try:
        for path in made:
            os.mkdir(path)
            for name in [".", *os.listdir(path)]:
                os.chown(os.path.join(path, name), 65534, 65534)
        stage = tmp_path / "stage"
        stage.mkdir()
        yield made, stage
    finally:
        for path in made:
            assert cgroups_module._remove_cgroup(path), f"left {path}"


@needs_cgroup
def test_a_run_cannot_lift_its_limit_through_a_cgroup_namespace_when_runs_keep_the_callers_uid(delegated_to_nobody):
    (memory, pids), stage = delegated_to_nobody
    unshare = shutil.which("unshare")
    programs = [(ESCAPE, LIMIT_MB), (hoarding(None), LIMIT_MB)]
    child = subprocess.run([unshare, "--mount", "--propagation", "private", sys.executable, "-c", AS_NOBODY,
                            memory, pids, str(stage)], input=json.dumps(programs), capture_output=True, text=True,
                           timeout=300, cwd=REPOSITORY)
    assert child.returncode == 0, child.stderr
    assert "runs keep the caller's uid" in child.stderr and "cgroup v1" in child.stderr, child.stderr
    escaping, after = json.loads(child.stdout)
    assert escaping == ["memory_limit_exceeded", "unshare: Operation not permitted\n"], escaping
    assert after[0] == "memory_limit_exceeded", after


@needs_cgroup
def test_where_runs_keep_the_callers_uid_the_hidden_directories_are_read_only(delegated_to_nobody):
    # There a run is its namespace's root with the tmpfs's owner's uid: were the tmpfs over
    # /home, /root, /run, /mnt writable, what one run left there the next would find.
    (memory, pids), stage = delegated_to_nobody
    hidden = ["/home", "/run", "/mnt", "/srv"]
    write = ("import os\nfor d in %r:\n    try:\n        open(d + '/left', 'w').write('x')\n"
             "        print('wrote', d)\n    except OSError as e:\n        print(e.errno)\n") % hidden
    look = "import os\nprint(sorted(n for d in %r for n in os.listdir(d)))\n" % hidden
    child = subprocess.run([shutil.which("unshare"), "--mount", "--propagation", "private", sys.executable, "-c",
                            AS_NOBODY, memory, pids, str(stage)], input=json.dumps([(write, LIMIT_MB), (look, LIMIT_MB)]),
                           capture_output=True, text=True, timeout=300, cwd=REPOSITORY)
    assert child.returncode == 0, child.stderr
    assert "runs keep the caller's uid" in child.stderr, child.stderr
    wrote, looked = json.loads(child.stdout)
    assert wrote == ["ok", "30\n" * len(hidden)], wrote  # EROFS for each
    assert looked == ["ok", "[]\n"], looked


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
    paths = list(worker.cgroups.paths)
    os.kill(worker.process.pid, signal.SIGKILL)  # as an OOM killer outside might
    worker.process.wait()
    assert sandbox.run_program("print(2)").stdout == b"2\n"  # a fresh worker, with cgroups of its own
    assert not [path for path in paths if os.path.exists(path)]
    assert sandbox.memory_cgroups and sandbox.memory_cgroups[0] not in paths


@needs_cgroup
def test_a_cgroup_removed_under_its_worker_costs_one_run(sandbox):
    assert sandbox.run_program("print(1)").status == "ok"
    (worker,) = sandbox._all
    # The cgroups its runs join, empty between runs, so rmdir takes them (v1's cpu and
    # cpuacct cgroups hold the worker itself).
    for path in {worker.cgroups.memory, worker.cgroups.pids} - {None}:
        os.rmdir(os.path.join(path, cgroups_module.RUN_CGROUP))
        os.rmdir(path)
    broken = sandbox.run_program("print(2)")  # it cannot join: a judge's failure, not the program's
    assert broken.status == "sandbox_error", broken
    assert sandbox.run_program("print(3)").stdout == b"3\n"  # a fresh worker, with cgroups of its own
    assert sandbox._all[0] is not worker and all(os.path.isdir(path) for path in sandbox._all[0].cgroups.paths)


KILLED_OWNER = """
import os, signal, sys
from microcoder.evaluator.sandbox import Sandbox, SandboxConfig
box = Sandbox(config=SandboxConfig(workers=1))
assert box.run_program("print(1)").stdout == b"1\\n"
print(" ".join(box.memory_cgroups + box.pids_cgroups), flush=True)
print(" ".join(str(worker.process.pid) for worker in box._all), flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no close(), no atexit
"""


def alive(pid: str) -> bool:
    """Whether process `pid` still runs (a zombie has closed its files, and so its locks)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


@needs_cgroup
def test_cgroups_left_by_a_killed_process_are_removed_by_the_next_start():
    child = subprocess.run([sys.executable, "-c", KILLED_OWNER], capture_output=True, text=True, timeout=120,
                           cwd=Path(__file__).resolve().parents[1])
    assert child.returncode == -signal.SIGKILL, child.stderr
    cgroup_line, worker_line = child.stdout.splitlines()
    stale, workers = cgroup_line.split(), worker_line.split()
    assert stale and workers and all(os.path.isdir(path) for path in stale)
    # The orphaned workers hold their cgroups' locks until they exit, which they do when they
    # see their pipe close: on a loaded machine that can take a while. A start while one
    # lives must leave its cgroups (another test checks that); this one is about the start after.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(alive(pid) for pid in workers):
        time.sleep(0.1)
    assert not any(alive(pid) for pid in workers), "the killed owner's workers outlived it by 60 s"
    with Sandbox(config=SandboxConfig(workers=1)) as box:
        assert box.run_program("print(1)").stdout == b"1\n"
        assert not [path for path in stale if os.path.exists(path)]


def warnings_of_two_sandboxes(monkeypatch, plan: cgroups_module.CgroupPlan) -> tuple[list, list[str]]:
    """Two sandboxes started one after another on `plan`, each running a program: the
    cgroups their workers got (WorkerCgroups) and the messages of every warning."""
    monkeypatch.setattr(cgroups_module, "cgroup_plan", lambda: plan)
    monkeypatch.setattr(cgroups_module, "_warned", set())
    made = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            with Sandbox(config=SandboxConfig(workers=1)) as box:
                assert box.run_program("print(1)").stdout == b"1\n"
                made.append(box._all[0].cgroups)
    return made, [str(warning.message) for warning in caught]


def test_without_a_writable_cgroup_the_sandbox_warns_once_and_runs(monkeypatch):
    missing = cgroups_module.CgroupPlan(None, None, None, "no cgroup hierarchy with a memory controller is mounted")
    made, caught = warnings_of_two_sandboxes(monkeypatch, missing)
    assert all(cgroups.memory is None and cgroups.cpu is None for cgroups in made)
    messages = [message for message in caught if "cgroup" in message]
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
    plan = cgroups_module.find_cgroups("0::/system.slice/job\n",
                                       mount_line(str(tmp_path / "v2"), "cgroup2", "rw", root="/"))
    assert (plan.version, plan.memory_parent, plan.pids_parent) == (2, str(own), str(own))
    for probe in own.glob("microcoder-probe-*"):  # a real cgroup's rmdir takes its control files along
        shutil.rmtree(probe)
    # The same cgroup, seen through a mount whose root is our own cgroup (a cgroup namespace).
    plan = cgroups_module.find_cgroups("0::/system.slice/job\n",
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
    plan = cgroups_module.find_cgroups("8:pids:/\n4:memory:/process_api/abc\n0::/\n", mountinfo)
    assert (plan.version, plan.memory_parent, plan.pids_parent) == (1, str(memory), str(pids))
    assert "v1" in plan.description


def test_v1_cpu_hierarchies_are_found_apart_or_mounted_together(tmp_path):
    memory, cpu, cpuacct = tmp_path / "memory", tmp_path / "cpu", tmp_path / "cpuacct"
    for directory in (memory, cpu, cpuacct):
        directory.mkdir()
    own = "4:memory:/\n2:cpuacct:/\n1:cpu:/\n"
    apart = "\n".join([mount_line(str(memory), "cgroup", "rw,memory"), mount_line(str(cpu), "cgroup", "rw,cpu"),
                       mount_line(str(cpuacct), "cgroup", "rw,cpuacct")])
    def found(self_cgroup, mountinfo):
        plan = cgroups_module.find_cgroups(self_cgroup, mountinfo)
        for probe in tmp_path.glob("*/microcoder-probe-*"):  # a real cgroup's rmdir takes its files along
            shutil.rmtree(probe)
        return plan

    plan = found(own, apart)
    assert (plan.cpu_parent, plan.cpuacct_parent) == (str(cpu), str(cpuacct)), plan
    assert "a CPU quota under" in plan.description
    together = "\n".join([mount_line(str(memory), "cgroup", "rw,memory"),
                          mount_line(str(cpu), "cgroup", "rw,cpu,cpuacct")])
    plan = found("4:memory:/\n1:cpu,cpuacct:/\n", together)
    assert (plan.cpu_parent, plan.cpuacct_parent) == (str(cpu), str(cpu)), plan
    plan = found("4:memory:/\n", mount_line(str(memory), "cgroup", "rw,memory"))
    assert (plan.cpu_parent, plan.cpuacct_parent) == (None, None) and "no CPU quota" in plan.description


def test_no_memory_hierarchy_means_no_plan_and_says_why(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu io\n")
    plan = cgroups_module.find_cgroups("0::/\n", mount_line(str(tmp_path), "cgroup2", "rw"))
    assert not plan.available
    assert "gives our cgroup no memory controller" in plan.description, plan
    assert "no cgroup v1 memory hierarchy" in plan.description, plan


def gone_pid() -> int:
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid names no process now (or another one, started later)
    return gone.pid


@needs_cgroup
def test_a_stale_cgroup_of_a_process_that_is_gone_is_reaped():
    stale = os.path.join(PLAN.memory_parent, f"microcoder-{cgroups_module._pid_namespace()}.{gone_pid()}.1-0")
    os.mkdir(stale)
    os.mkdir(os.path.join(stale, cgroups_module.RUN_CGROUP))
    try:
        ours = cgroups_module.reap_stale_cgroups(PLAN)
        assert stale in ours and not os.path.exists(stale)
    finally:
        cgroups_module._remove_cgroup_tree(stale)


@needs_cgroup
def test_a_cgroup_whose_lock_a_worker_holds_is_not_reaped():
    # Named in our pid namespace after a process that is gone (as a maker in another time
    # namespace would read), but a live worker holds its lock: it stays, until released.
    held = os.path.join(PLAN.memory_parent, f"microcoder-{cgroups_module._pid_namespace()}.{gone_pid()}.1-0")
    lock = cgroups_module._make_locked_cgroup(held)
    try:
        assert held not in cgroups_module.reap_stale_cgroups(PLAN) and os.path.isdir(held)
        os.close(lock)
        lock = None
        assert held in cgroups_module.reap_stale_cgroups(PLAN) and not os.path.exists(held)
    finally:
        if lock is not None:
            os.close(lock)
        cgroups_module._remove_cgroup_tree(held)


@needs_cgroup
def test_a_cgroup_left_by_another_pid_namespace_is_reaped_once_old_and_unlocked():
    # Named in a pid namespace that is not ours (one that is gone: a container that exited).
    # Its pid cannot be looked up here, so only the lock and the age decide.
    other = int(cgroups_module._pid_namespace()) + 1
    paths = [os.path.join(PLAN.memory_parent, f"microcoder-{other}.{pid}.1-0") for pid in (11, 12, 13)]
    old, young, locked = paths
    lock = None
    try:
        for path in (old, young):
            os.mkdir(path)
            os.mkdir(os.path.join(path, cgroups_module.RUN_CGROUP))
        lock = cgroups_module._make_locked_cgroup(locked)
        hour_ago = time.time() - 3600
        for path in (old, locked):
            os.utime(path, (hour_ago, hour_ago))
        reaped = cgroups_module.reap_stale_cgroups(PLAN)
        assert old in reaped and not os.path.exists(old)
        assert young not in reaped and os.path.isdir(young)  # may be a maker about to take its lock
        assert locked not in reaped and os.path.isdir(locked)  # a live worker's, in any namespace
    finally:
        if lock is not None:
            os.close(lock)
        for path in paths:
            cgroups_module._remove_cgroup_tree(path)


# A Sandbox in a pid namespace of its own, sharing our cgroups: between runs its worker's
# cgroups are empty, and its pids mean nothing in ours.
OTHER_NAMESPACE = """
import sys
from microcoder.evaluator.sandbox import Sandbox, SandboxConfig
with Sandbox(config=SandboxConfig(workers=1)) as box:
    for line in sys.stdin:
        result = box.run_program(line)
        print(result.status, result.stdout.decode().strip(), " ".join(box.memory_cgroups + box.pids_cgroups), flush=True)
"""


@needs_cgroup
@needs_full_isolation
def test_the_cgroups_of_a_sandbox_in_another_pid_namespace_are_left_alone():
    unshare = shutil.which("unshare")
    command = [unshare, "--pid", "--fork", "--mount-proc", sys.executable, "-c", OTHER_NAMESPACE]
    if not command_succeeds([unshare, "--pid", "--fork", "--mount-proc", "true"]):
        pytest.skip("cannot make a pid namespace here")
    other = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPOSITORY)
    try:
        other.stdin.write("print(1)\n")
        other.stdin.flush()
        status, output, *theirs = other.stdout.readline().split()
        assert (status, output) == ("ok", "1") and theirs, theirs
        assert cgroups_module.reap_stale_cgroups(PLAN) == []
        with Sandbox(config=SandboxConfig(workers=1)) as box:  # its start reaps too
            assert box.run_program("print(2)").stdout == b"2\n"
        assert all(os.path.isdir(path) for path in theirs)
        other.stdin.write("print(3)\n")  # its worker's cgroups are still there for its next run
        other.stdin.flush()
        assert other.stdout.readline().split() == ["ok", "3", *theirs]
    finally:
        other.stdin.close()
        other.wait(timeout=60)


@needs_cgroup
def test_a_worker_whose_cgroup_cannot_be_made_runs_on_rlimits_with_the_one_warning(monkeypatch, tmp_path):
    # The plan said yes, the mkdir says no (a parent gone, a full cgroup tree): cgroup="auto"
    # is a judge without the cgroup and one warning, not a failed evaluate().
    broken = cgroups_module.CgroupPlan(1, str(tmp_path / "gone"), None, "a v1 memory parent that is gone")
    monkeypatch.setattr(cgroups_module, "cgroup_plan", lambda: broken)
    monkeypatch.setattr(cgroups_module, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Sandbox(config=SandboxConfig(workers=2)) as box:
            assert [run.stdout for run in box.run_programs([("print(1)", ""), ("print(2)", "")])] == [b"1\n", b"2\n"]
            assert box.memory_cgroups == []
    messages = [str(warning.message) for warning in caught
                if "cgroup" in str(warning.message) and "CPU cgroup" not in str(warning.message)]
    assert len(messages) == 1 and "gone" in messages[0] and "rlimits" in messages[0], messages
    with Sandbox(config=SandboxConfig(workers=1, cgroup="required")) as box, pytest.raises(RuntimeError, match="cgroup"):
        box.run_program("print(1)")


@needs_cgroup
def test_without_a_cpu_cgroup_the_sandbox_says_so_once_and_runs(monkeypatch):
    # A memory cgroup but no CPU controller (a v1 machine without the cpu hierarchy, a v2
    # parent that refuses +cpu): runs go on, each process on its own CPU timer, and the
    # caller is told once what that leaves open.
    without_cpu = dataclasses.replace(cgroups_module.cgroup_plan(), cpu_parent=None, cpuacct_parent=None)
    made, caught = warnings_of_two_sandboxes(monkeypatch, without_cpu)
    assert all(cgroups.cpu is None and cgroups.cpuacct is None and cgroups.memory for cgroups in made)
    messages = [message for message in caught if "CPU cgroup" in message]
    assert len(messages) == 1 and "starve" in messages[0], messages

"""Run untrusted programs outside our process, under limits enforced from outside.

A `Sandbox` is a pool of pre-started worker interpreters (`_zygote.py`), one per core by
default. Each run is a fresh process forked from a worker, so interpreter start-up is
paid once per worker, not once per test. See docs/sandbox.md for what is protected and
what is not.

Isolation, strongest first (chosen by `isolation="auto"`):
- running as root: each worker in its own network namespace (no network but a down
  loopback), IPC namespace (no SysV IPC or message queues) and mount namespace (every
  mount read-only; /root, /home, /tmp, the caller's home and working directory covered
  by empty tmpfs; the Python installation bound back read-only), and each run under a
  uid of its own worker, so the run cannot signal or read our processes, RLIMIT_NPROC
  stops fork bombs, and leftovers are killed by uid;
- not root, user namespaces allowed: the same namespaces, but runs keep our uid (and
  drop every capability);
- neither: rlimits, a private directory, a scrubbed environment and process-group kills.

Beside the isolation, each worker gets a memory and a pids cgroup of its own where the
machine lets us make one (cgroup v2, else the v1 `memory` and `pids` controllers; see
`cgroup_plan`), which holds the limits, with a leaf cgroup inside that every run joins:
what a run holds in memory files and tmpfs counts against its memory limit, as its heap
does, and `pids.max` bounds its processes whatever its uid. Where no cgroup can be made
the sandbox warns once and relies on rlimits.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import itertools
import json
import os
import re
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from microcoder.evaluator._wire import read_message, write_message

ZYGOTE = Path(__file__).with_name("_zygote.py")
STATUSES = (
    "ok",
    "runtime_error",
    "time_limit_exceeded",
    "memory_limit_exceeded",
    "output_limit_exceeded",
    "syntax_error",
    "sandbox_error",
)
# The environment of workers and runs: nothing of the caller's survives.
RUN_ENVIRONMENT = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
# Isolated mode (-I) but for -E: the environment is ours alone (RUN_ENVIRONMENT), and it
# carries PYTHONHASHSEED. -P: no script folder on the path; -s: no user site; -S: no site.
WORKER_FLAGS = ("-P", "-s", "-S")
_slots = itertools.count()

# The one home of the default limits of a run, read by every entry point (the evaluator,
# the trainer's reward, the service, the CLI). A problem's own limits win over them.
DEFAULT_TIME_LIMIT_S = 2.0
"""CPU seconds per test: LiveCodeBench's and most judges' order of magnitude for Python."""
DEFAULT_MEMORY_LIMIT_MB = 1024
"""MiB of address space per run (a CPython process with numpy needs ~300 of it)."""
DEFAULT_OUTPUT_LIMIT_MB = 32.0
"""stdout cap per run; more is `output_limit_exceeded`."""


@dataclass(frozen=True)
class SandboxConfig:
    """How the sandbox runs programs. Defaults suit a laptop CPU."""

    workers: int = 0
    """Worker processes (parallel runs); 0 means one per usable core."""
    isolation: Literal["auto", "full", "none"] = "auto"
    """`full` fails unless namespaces and uid switching are available; `none` uses neither."""
    hidden_paths: tuple[str, ...] = ()
    """Directories covered with an empty tmpfs in addition to the defaults (see module doc)."""
    max_processes: int = 64
    """Processes and threads of a run: RLIMIT_NPROC when runs have a uid of their own, and
    pids.max of the worker's cgroup where there is one."""
    wall_factor: float = 3.0
    """Wall-clock backstop = wall_factor * time limit + 1 s. Verdicts use CPU time; the
    backstop only catches programs that sleep or block: one still computing then (a tenth
    of a core or more, starved by a loaded host) is waited for until its CPU limit."""
    cgroup: Literal["auto", "required", "off"] = "auto"
    """A memory and pids cgroup per worker (memory held in memfds and tmpfs counts against
    a run's memory limit; `pids.max` = `max_processes`): `auto` where the machine lets us
    make one (one warning where not), `required` refuses to start without, `off` never."""


@dataclass
class ProgramRun:
    """What one run of one program did. `status` is one of STATUSES."""

    status: str
    stdout: bytes = b""
    stderr: bytes = b""
    exit_code: int | None = None
    signal: int | None = None
    cpu_s: float = 0.0
    wall_s: float = 0.0
    max_rss_mb: float = 0.0
    return_json: str | None = None
    """Call runs: the JSON of the return value, or None."""
    detail: str = ""


@dataclass(frozen=True)
class IsolationPlan:
    command_prefix: tuple[str, ...]
    switch_uid: bool
    isolate_filesystem: bool
    description: str


def _works(command: Sequence[str]) -> bool:
    try:
        return subprocess.run(list(command), capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


_plans: dict[str, IsolationPlan] = {}


def isolation_plan(mode: str = "auto") -> IsolationPlan:
    """Find the strongest isolation this machine allows (cached)."""
    if mode not in ("auto", "full", "none"):
        raise ValueError(f"isolation must be 'auto', 'full' or 'none', got {mode!r}")
    if mode in _plans:
        return _plans[mode]
    unshare = shutil.which("unshare")
    root = os.geteuid() == 0
    if mode == "none":
        plan = IsolationPlan((), False, False, "none: rlimits and process groups only")
    elif root and unshare and _works([unshare, "--net", "--mount", "--ipc", "true"]):
        plan = IsolationPlan((unshare, "--net", "--mount", "--ipc"), True, True,
                             "network+mount+IPC namespaces, a uid per worker")
    elif root:
        plan = IsolationPlan((), True, False, "a uid per worker; no namespaces (unshare unavailable)")
    elif unshare and _works([unshare, "--user", "--map-root-user", "--net", "--mount", "--ipc", "true"]):
        prefix = (unshare, "--user", "--map-root-user", "--net", "--mount", "--ipc")
        plan = IsolationPlan(prefix, False, True, "network+mount+IPC namespaces; runs keep the caller's uid")
    else:
        plan = IsolationPlan((), False, False, "none available: rlimits and process groups only")
    if mode == "full" and not (plan.switch_uid and plan.isolate_filesystem):
        raise RuntimeError(f"isolation='full' is not available here (best: {plan.description}); run as root")
    _plans[mode] = plan
    return plan


@dataclass(frozen=True)
class CgroupPlan:
    """Where each worker's cgroups go: under this process's own cgroup of each hierarchy."""

    version: int | None
    """2 (one cgroup v2 directory holds both controllers), 1 (the v1 `memory` and `pids`
    hierarchies), or None: no memory cgroup can be made here."""
    memory_parent: str | None
    """The directory each worker's memory cgroup is made in (our own memory cgroup)."""
    pids_parent: str | None
    """The same for the pids controller; None where it is missing (memory alone is used)."""
    description: str
    """What was found, or why nothing is usable."""

    @property
    def available(self) -> bool:
        return self.version is not None


# Each worker's cgroups are named after the process that made them: its pid namespace (the
# inode of /proc/self/ns/pid), pid and start time (so a reused pid is not mistaken for it),
# and the worker's slot. A later start removes the ones whose maker is gone (killed before
# it could remove them itself), only among those named in its own pid namespace, where
# those pids mean what they say, and only when no live worker holds the cgroup's lock (see
# `_make_locked_cgroup`). Runs join the leaf RUN_CGROUP inside; the limits are on the
# worker's cgroup above it, out of reach of a cgroup namespace a run could make.
CGROUP_NAME = re.compile(r"microcoder-(?:probe-)?(?P<namespace>\d+)\.(?P<pid>\d+)\.(?P<started>\d+)(?:-\d+)?")
RUN_CGROUP = "run"
_cgroup_plans: list[CgroupPlan] = []
_cgroup_lock = threading.Lock()
_warned_no_cgroup = False
_unremoved_cgroups: set[str] = set()  # worker cgroups whose rmdir failed at close


def _start_time(pid: int | str = "self") -> str | None:
    """A process's start time (clock ticks since boot), which with its pid names it; None
    when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat[stat.rindex(")") + 2:].split()[19]  # field 22; the command name may hold spaces


def _pid_namespace() -> int:
    """The inode of our pid namespace (0 where /proc does not say)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _owner_tag() -> str:
    return f"{_pid_namespace()}.{os.getpid()}.{_start_time()}"


def _make_locked_cgroup(path: str) -> int:
    """mkdir a cgroup and return its directory opened and `flock`ed: whoever holds that fd
    (the worker it is passed to, for as long as it lives) marks the cgroup as in use, in
    any pid namespace, so that `reap_stale_cgroups` leaves it alone."""
    os.mkdir(path, 0o755)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise
    except OSError:
        os.rmdir(path)
        raise
    return fd


def _unescape(path: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), path)


def _own_cgroup_directory(mount_root: str, mount_point: str, path: str) -> str | None:
    """The directory of our cgroup `path` (as /proc/self/cgroup gives it) in a mount of its
    hierarchy whose root is `mount_root`; None where that mount does not show it."""
    if mount_root != "/":
        if not (path == mount_root or path.startswith(mount_root.rstrip("/") + "/")):
            return None
        path = path[len(mount_root):] or "/"
    directory = os.path.normpath(mount_point + "/" + path.lstrip("/"))
    return directory if os.path.isdir(directory) else None


def _probe(parent: str, control: str) -> str | None:
    """None if a child cgroup can be made in `parent` and its `control` file written (then
    removed again), else why not."""
    probe = os.path.join(parent, f"microcoder-probe-{_owner_tag()}")
    try:
        lock = _make_locked_cgroup(probe)
    except OSError as error:
        return f"cannot make a cgroup in {parent}: {error.strerror}"
    try:
        value = "max" if control.endswith(".max") else str(1 << 62)
        Path(probe, control).write_text(value)
        return None
    except OSError as error:
        return f"cannot write {control} in {parent}: {error.strerror}"
    finally:
        try:
            os.rmdir(probe)
        except OSError:
            pass
        os.close(lock)


def find_cgroups(self_cgroup: str, mountinfo: str) -> CgroupPlan:
    """Where this process can make per-worker cgroups: cgroup v2 if its memory controller
    can be enabled below our own cgroup, else the v1 memory (and pids) hierarchies, else
    none. `self_cgroup` and `mountinfo` are the texts of /proc/self/cgroup and
    /proc/self/mountinfo. Probes by making (and removing) a child cgroup."""
    own = {}  # controller ("" for v2) -> our path in its hierarchy
    for line in self_cgroup.splitlines():
        number, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if number != "0" else [""]:
            own[controller.removeprefix("name=")] = path
    mounts = {}  # controller -> (root, mount point) of its first mount
    for line in mountinfo.splitlines():
        fields = line.split()
        separator = fields.index("-")
        fstype, options = fields[separator + 1], fields[separator + 3].split(",")
        root, point = _unescape(fields[3]), _unescape(fields[4])
        if fstype == "cgroup2":
            mounts.setdefault("", (root, point))
        elif fstype == "cgroup":
            for controller in ("memory", "pids"):
                if controller in options:
                    mounts.setdefault(controller, (root, point))
    reasons = []
    if "" in mounts and "" in own:
        directory = _own_cgroup_directory(*mounts[""], own[""])
        if directory is None:
            reasons.append("cgroup v2: our cgroup is not under its mount")
        else:
            available = Path(directory, "cgroup.controllers").read_text().split()
            if "memory" not in available:
                reasons.append(f"cgroup v2 at {mounts[''][1]} gives our cgroup no memory controller "
                               "(it is bound to v1, or not enabled above us)")
            else:
                wanted = [c for c in ("memory", "pids") if c in available]
                enabled = Path(directory, "cgroup.subtree_control").read_text().split()
                try:
                    if any(c not in enabled for c in wanted):  # only a cgroup without processes of its own may
                        Path(directory, "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
                    why = _probe(directory, "memory.max")
                except OSError as error:
                    why = f"cannot enable the memory controller below {directory}: {error.strerror}"
                if why is None:
                    pids = directory if "pids" in wanted else None
                    return CgroupPlan(2, directory, pids, f"cgroup v2 under {directory}"
                                      + ("" if pids else " (no pids controller)"))
                reasons.append(f"cgroup v2: {why}")
    if "memory" not in mounts or "memory" not in own:
        reasons.append("no cgroup v1 memory hierarchy is mounted")
        return CgroupPlan(None, None, None, "; ".join(reasons))
    memory = _own_cgroup_directory(*mounts["memory"], own["memory"])
    why = "our memory cgroup is not under its mount" if memory is None else _probe(memory, "memory.limit_in_bytes")
    if why is not None:
        reasons.append(f"cgroup v1: {why}")
        return CgroupPlan(None, None, None, "; ".join(reasons))
    pids = None
    if "pids" in mounts and "pids" in own:
        pids = _own_cgroup_directory(*mounts["pids"], own["pids"])
        pids = pids if pids is not None and _probe(pids, "pids.max") is None else None
    swap = "with swap" if os.path.exists(os.path.join(memory, "memory.memsw.limit_in_bytes")) else "no swap accounting"
    return CgroupPlan(1, memory, pids, f"cgroup v1: memory ({swap}) under {memory}, "
                      + (f"pids under {pids}" if pids else "no pids controller"))


def cgroup_plan() -> CgroupPlan:
    """Where this machine lets us make per-worker cgroups (found once per process)."""
    with _cgroup_lock:  # two probes at once would find each other's probe cgroup in the way
        if not _cgroup_plans:
            try:
                plan = find_cgroups(Path("/proc/self/cgroup").read_text(), Path("/proc/self/mountinfo").read_text())
            except (OSError, ValueError, IndexError) as error:
                plan = CgroupPlan(None, None, None, f"cannot read our cgroups: {error}")
            _cgroup_plans.append(plan)
        return _cgroup_plans[0]


FOREIGN_CGROUP_MIN_AGE_S = 60.0
"""A cgroup named in another pid namespace is reaped only when unchanged this long: its
maker cannot be looked up from here, and one just made may not hold its lock yet."""


def reap_stale_cgroups(plan: CgroupPlan) -> list[str]:
    """Remove the worker cgroups (and probes) in our own parents that a killed process left;
    returns those that went. What marks a cgroup as in use is its lock, which the live
    worker holds (in any pid namespace): one whose lock is held stays. Before the lock is
    taken, a cgroup named in our pid namespace stays while its maker (pid and start time)
    lives; one named in another (whose pids mean nothing here; the namespace may be gone,
    a container that exited) while it is younger than FOREIGN_CGROUP_MIN_AGE_S. One that
    still holds a process stays (nothing is killed here) for a later start."""
    removed = []
    namespace = str(_pid_namespace())
    for parent in {plan.memory_parent, plan.pids_parent} - {None}:
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            match = CGROUP_NAME.fullmatch(name)
            if match is None:
                continue
            path = os.path.join(parent, name)
            if match["namespace"] == namespace:
                if _start_time(match["pid"]) == match["started"]:
                    continue  # its maker is alive: its own
            else:
                try:
                    if time.time() - os.stat(path).st_mtime < FOREIGN_CGROUP_MIN_AGE_S:
                        continue
                except OSError:
                    continue
            try:
                lock = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held: a worker still uses it
                if _remove_cgroup_tree(path):
                    removed.append(path)
            except OSError:
                pass
            finally:
                os.close(lock)
    return removed


def _cgroup_tree(path: str) -> list[str]:
    """`path` and every cgroup below it, deepest first (the order rmdir needs)."""
    return [directory for directory, _, _ in os.walk(path, topdown=False)]


def _remove_cgroup_tree(path: str) -> bool:
    """rmdir a cgroup and whatever cgroups were made below it (its run leaf, and any a
    run made), deepest first; True when it is gone. Kills nothing."""
    for directory in _cgroup_tree(path):
        try:
            os.rmdir(directory)
        except FileNotFoundError:
            pass
        except OSError:
            return False
    return True


def _kill_cgroup_members(path: str) -> None:
    """SIGKILL every process in one cgroup (only runs of its worker join there)."""
    try:
        pids = Path(path, "cgroup.procs").read_text().split()
    except OSError:
        return
    for pid in pids:
        try:
            pidfd = os.pidfd_open(int(pid))
        except OSError:
            continue  # gone
        try:
            # Still listed after the pidfd was taken: the pidfd is that member, not a
            # process that reused a freed pid.
            if pid in Path(path, "cgroup.procs").read_text().split():
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.close(pidfd)


def _remove_cgroup(path: str, seconds: float = 2.0) -> bool:
    """rmdir a worker's cgroup and the cgroups below it once no process is left in them
    (killing any that are: runs of a worker closed mid-run); True when it is gone."""
    deadline = time.monotonic() + seconds
    while True:
        if _remove_cgroup_tree(path):
            return True
        if time.monotonic() > deadline:
            return False
        for directory in _cgroup_tree(path):
            _kill_cgroup_members(directory)
        time.sleep(0.02)  # killed processes take a moment to leave


def _warn_without_cgroup(why: str) -> None:
    """The one warning per process that runs go without a cgroup (`cgroup="auto"`)."""
    global _warned_no_cgroup
    if not _warned_no_cgroup:
        _warned_no_cgroup = True
        warnings.warn(f"sandbox: {why}; runs are bounded by rlimits alone, so a run can hold memory in memfds "
                      "and tmpfs files beyond its memory limit until it ends (docs/sandbox.md)",
                      RuntimeWarning, stacklevel=4)


def _default_hidden_paths(extra: Sequence[str]) -> list[str]:
    home = os.path.expanduser("~")
    return ["/root", "/home", "/tmp", "/var/tmp", "/dev/shm", "/mnt", "/media", "/srv", home, os.getcwd(), *extra]


class Worker:
    """One zygote process. Not thread-safe: the Sandbox hands it to one thread at a time."""

    def __init__(self, plan: IsolationPlan, config: SandboxConfig, cgroups: CgroupPlan | None = None):
        self.plan, self.config = plan, config
        slot = next(_slots)
        self.uid = 100_000 + (os.getpid() % 32768) * 4096 + slot % 4096 if plan.switch_uid else None
        self._own_tmp: str | None = None
        self.unswept = False  # a run may have left processes the worker did not kill
        self.memory_cgroup: str | None = None
        self.pids_cgroup: str | None = None
        self.cgroup_paths: list[str] = []  # what close() removes: one directory (v2) or one per hierarchy (v1)
        directory_fds: dict[str, int] = {}
        if cgroups is not None and cgroups.available:
            try:
                directory_fds = self._make_cgroups(cgroups, slot)
            except OSError as error:
                why = f"cannot make the worker's cgroup ({cgroups.description}): {error}"
                if config.cgroup == "required":
                    raise RuntimeError(f"sandbox: {why}") from error
                _warn_without_cgroup(why)  # this worker runs on rlimits alone; the next tries again
        if plan.isolate_filesystem:
            tmp_root = "/tmp/microcoder-runs"
        else:
            self._own_tmp = tempfile.mkdtemp(prefix="microcoder-sandbox-")
            os.chmod(self._own_tmp, 0o711)  # a run's uid must reach its own directory inside
            tmp_root = self._own_tmp
        zygote_config = {
            "uid": self.uid,
            "isolate_filesystem": plan.isolate_filesystem,
            "hidden_paths": _default_hidden_paths(config.hidden_paths),
            "tmp_root": tmp_root,
            "private_ipc": "--ipc" in plan.command_prefix,
            "site_paths": [*site.getsitepackages(), site.getusersitepackages()],
            "cgroup": {"version": cgroups.version, **directory_fds} if directory_fds else None,
        }
        try:
            self.process = subprocess.Popen(
                [*plan.command_prefix, sys.executable, *WORKER_FLAGS, str(ZYGOTE), json.dumps(zygote_config)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                # Bind every symbol of the interpreter at start, in the worker: a run forked from
                # it then never writes the lazily bound symbol table (each write a page copy).
                # One string-hash seed for every worker, so that a program whose output follows
                # set order gets the same verdict on every worker and every start. The worker
                # drops both variables from the environment its runs see.
                env={**RUN_ENVIRONMENT, "LD_BIND_NOW": "1", "PYTHONHASHSEED": "0"},
                close_fds=True,
                # The cgroup directories, opened (and locked) here: they name the host's cgroup
                # mounts, which stay writable through them when the worker's own copies are
                # read-only; the worker holds the lock for as long as it lives.
                pass_fds=tuple(directory_fds.values()),
                start_new_session=True,  # a Ctrl-C at our terminal is ours to handle, not the worker's
            )
        except BaseException:
            self._remove_cgroups()
            raise
        finally:
            for fd in directory_fds.values():
                os.close(fd)
        try:
            hello, _ = read_message(self.process.stdout.fileno())
        except EOFError:
            self.close()
            raise RuntimeError(f"sandbox worker failed to start (isolation: {plan.description})") from None
        if not hello.get("ready"):
            self.close()
            raise RuntimeError(f"sandbox worker said {hello!r} at start")
        if hello.get("read_only_root") is False:  # the kernel lacks mount_setattr (Linux < 5.12)
            if config.isolation == "full":
                self.close()
                raise RuntimeError("isolation='full': the worker could not make its mounts read-only")
            warnings.warn("sandbox: the worker's mounts stay writable (Linux < 5.12?); runs can write "
                          "world-writable host directories such as /run/lock", RuntimeWarning, stacklevel=2)

    def _make_cgroups(self, cgroups: CgroupPlan, slot: int) -> dict[str, int]:
        """Make this worker's cgroups, each with the leaf RUN_CGROUP inside that its runs
        join, and return their directories, opened and locked, for the worker:
        {"memory_fd": fd, "pids_fd": fd} (v2: one directory, no pids_fd; v1: pids_fd only
        where the controller is there). The worker writes the limits (`memory.max` or
        `memory.limit_in_bytes`, `pids.max`) on these, above the leaf, before every run.
        Raises OSError, having removed what it made."""
        name = f"microcoder-{_owner_tag()}-{slot}"
        fds: dict[str, int] = {}
        try:
            self.memory_cgroup = os.path.join(cgroups.memory_parent, name)
            fds["memory_fd"] = _make_locked_cgroup(self.memory_cgroup)
            self.cgroup_paths.append(self.memory_cgroup)
            if cgroups.version == 2:
                self.pids_cgroup = self.memory_cgroup if cgroups.pids_parent else None
                # No swap to push memory files out to, and a run's processes killed together.
                # Nothing is enabled in its cgroup.subtree_control: the leaf has no memory or
                # pids files of its own, and is charged and counted here.
                for control, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                    if os.path.exists(os.path.join(self.memory_cgroup, control)):
                        Path(self.memory_cgroup, control).write_text(value)
            else:
                # The leaf's usage must count against the limit here. Linux 5.11+ always
                # does; before, a cgroup without children could still be made to.
                hierarchy = Path(self.memory_cgroup, "memory.use_hierarchy")
                if hierarchy.exists() and hierarchy.read_text().strip() != "1":
                    hierarchy.write_text("1")
                    if hierarchy.read_text().strip() != "1":
                        raise OSError(f"{hierarchy} stays 0: a run's leaf would not count against the limit")
                if cgroups.pids_parent:
                    self.pids_cgroup = os.path.join(cgroups.pids_parent, name)
                    fds["pids_fd"] = _make_locked_cgroup(self.pids_cgroup)
                    self.cgroup_paths.append(self.pids_cgroup)
            for path in self.cgroup_paths:
                os.mkdir(os.path.join(path, RUN_CGROUP), 0o755)
            return fds
        except OSError:
            for fd in fds.values():
                os.close(fd)
            self._remove_cgroups()
            self.memory_cgroup = self.pids_cgroup = None
            raise

    def _remove_cgroups(self) -> None:
        for path in reversed(self.cgroup_paths):
            if not _remove_cgroup(path):
                _unremoved_cgroups.add(path)  # tried again when a sandbox starts, and at exit
        self.cgroup_paths = []

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def run(self, request: dict, source: bytes, stdin: bytes) -> tuple[dict, list[bytes]]:
        self.unswept = True  # until the worker's reply says it cleaned up after the run
        write_message(self.process.stdin.fileno(), request, [source, stdin])
        header, blobs = read_message(self.process.stdout.fileno())
        self.unswept = bool(header.get("retiring"))
        return header, blobs

    def interrupt(self) -> None:
        """Stop the run in progress (or the next one, when its child has not started yet):
        SIGUSR1 kills its process group at once, as the wall-clock backstop would."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGUSR1)

    def kill(self) -> None:
        """End the worker now; its runs die with it (their parent-death signal)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                write_message(self.process.stdin.fileno(), {"op": "exit"})
            except (OSError, ValueError):  # ValueError: closed already, by another thread
                pass
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        if self.uid is not None and self.unswept:
            # A worker closed mid-run (Ctrl-C), or one that retired, did not sweep its last
            # run's escaped processes: kill every process of the run uid, as that uid.
            # (`kill -9 -1`: every process the caller may signal; our interpreter may sit where
            # that uid cannot run it.)
            kill = shutil.which("kill", path=RUN_ENVIRONMENT["PATH"])
            if kill:
                subprocess.run([kill, "-9", "-1"], user=self.uid, env=RUN_ENVIRONMENT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        self._remove_cgroups()  # after the worker: only then can no run join them any more
        if self._own_tmp:
            shutil.rmtree(self._own_tmp, ignore_errors=True)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # real-time signals have no name
        return f"{signum}"


def _last_line(stderr: bytes) -> str:
    return (stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""])[0]


def classify(header: dict, stdout: bytes, stderr: bytes, time_limit_s: float,
             memory_limit_mb: int, output_limit_bytes: int) -> tuple[str, str]:
    """(status, detail) of a finished run, from what the worker measured."""
    exit_code, signum, cpu = header["exit_code"], header["signal"], header["cpu_s"]
    # The status the run reported before the candidate's code started (see _zygote.child_main);
    # nothing the candidate does can change it.
    status = header.get("status", "")
    if "S" in status:
        return "syntax_error", stderr.decode("utf-8", "replace")[-500:]
    if "P" in status:
        return "sandbox_error", f"the problem's prelude fails: {_last_line(stderr)[:300]}"
    if "C" not in status:
        if header["wall_timeout"]:  # its deadline, or a RunStop, came before the program started
            return "time_limit_exceeded", (f"stopped by the wall-clock backstop before the program started "
                                           f"(limit {time_limit_s}s, {header['wall_s']:.2f}s wall)")
        return "sandbox_error", "the run ended before the program started: " + stderr.decode("utf-8", "replace")[-1000:]
    if header.get("oom_kills") and not (exit_code == 0 and signum is None):
        # The kernel killed a process of the run at the cgroup's limit: a fact, where the
        # signal alone (below) is a guess. Its memory files count there, its address space not.
        tail = _last_line(stderr)[:200]
        return "memory_limit_exceeded", (f"limit {memory_limit_mb} MiB, memory files included: killed by the kernel "
                                         f"at its memory cgroup's limit" + (f"; {tail}" if tail else ""))
    # The CPU time measured decides: the kernel's timers only stop a run (see docs/sandbox.md).
    # A run killed under its limit by a signal it sent itself is the program's runtime error.
    if header["wall_timeout"] or cpu >= time_limit_s:
        if header["wall_timeout"]:
            how = "stopped by the wall-clock backstop"
        elif signum in (signal.SIGKILL, signal.SIGXCPU):
            how = "stopped by the CPU timer"
        else:
            how = "over the CPU limit"
        return "time_limit_exceeded", f"{how}: limit {time_limit_s}s, {cpu:.2f}s CPU and {header['wall_s']:.2f}s wall accounted"
    if signum == signal.SIGXFSZ or len(stdout) > output_limit_bytes:
        return "output_limit_exceeded", f"output over {output_limit_bytes} bytes"
    if exit_code == 0 and signum is None:
        return "ok", ""
    tail = _last_line(stderr)
    near_limit = header["max_rss_kb"] / 1024 >= 0.9 * memory_limit_mb
    if "MemoryError" in tail or (signum in (signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS) and near_limit):
        return "memory_limit_exceeded", f"limit {memory_limit_mb} MiB; {tail[:200]}"
    how = f"killed by signal {_signal_name(signum)}" if signum else f"exit code {exit_code}"
    return "runtime_error", f"{how}: {tail[:300]}"


class RunStop:
    """Stops one run (`Sandbox.run(..., stop=)`) from another thread: stopped before it
    starts, it never starts; stopped while it runs, its process group is killed (the
    worker's wall-clock backstop, fired early). Either way it is `time_limit_exceeded`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.stopped = False
        self._worker: Worker | None = None

    def stop(self) -> None:
        # Under the lock: once run() has detached the worker, no signal of ours can reach
        # it, so none can stop a later run of that worker (the worker clears a pending
        # stop as it reads each request).
        with self._lock:
            self.stopped = True
            if self._worker is not None:
                self._worker.interrupt()

    def _attach(self, worker: Worker) -> bool:
        with self._lock:
            if self.stopped:
                return False
            self._worker = worker
            return True

    def _detach(self) -> None:
        with self._lock:
            self._worker = None


class Sandbox:
    """A pool of workers. Thread-safe: `run_*` may be called from many threads at once;
    each call waits for a free worker. Use as a context manager or call `close()`."""

    def __init__(self, workers: int = 0, isolation: str = "auto", config: SandboxConfig | None = None):
        config = config or SandboxConfig(workers=workers, isolation=isolation)  # type: ignore[arg-type]
        self.config = config
        self.plan = isolation_plan(config.isolation)
        self.cgroups = self._cgroups(config.cgroup)
        self.size = config.workers or len(os.sched_getaffinity(0))
        # Idle workers (None: not started yet, started on first use). A thread gets back the
        # worker it used last when that one is idle, so the tests of a sample, run one after
        # another on one thread, run on one worker, which compiles the program once.
        self._idle: list[Worker | None] = [None] * self.size
        self._idle_changed = threading.Condition()
        self._last_worker = threading.local()
        self._all: list[Worker] = []
        self._lock = threading.Lock()
        self._closed = False
        self._executor = ThreadPoolExecutor(max_workers=self.size, thread_name_prefix="sandbox")
        _open_sandboxes.add(self)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @staticmethod
    def _cgroups(mode: str) -> CgroupPlan:
        """The cgroup plan for `SandboxConfig.cgroup`; removes what killed processes left."""
        if mode not in ("auto", "required", "off"):
            raise ValueError(f"cgroup must be 'auto', 'required' or 'off', got {mode!r}")
        if mode == "off":
            return CgroupPlan(None, None, None, "off (SandboxConfig.cgroup)")
        plan = cgroup_plan()
        if not plan.available:
            if mode == "required":
                raise RuntimeError(f"cgroup='required': no memory cgroup can be made here ({plan.description})")
            _warn_without_cgroup(f"no memory cgroup can be made here ({plan.description})")
            return plan
        reap_stale_cgroups(plan)
        for path in list(_unremoved_cgroups):
            if _remove_cgroup(path, seconds=0):
                _unremoved_cgroups.discard(path)
        return plan

    @property
    def run_uids(self) -> list[int]:
        """The uids runs of this sandbox's started workers use (empty when runs keep ours)."""
        with self._lock:
            return [worker.uid for worker in self._all if worker.uid is not None]

    @property
    def memory_cgroups(self) -> list[str]:
        """The memory cgroup directory of each started worker (empty without cgroups)."""
        with self._lock:
            return [worker.memory_cgroup for worker in self._all if worker.memory_cgroup]

    @property
    def pids_cgroups(self) -> list[str]:
        """The pids cgroup directory of each started worker (v2: its memory cgroup's)."""
        with self._lock:
            return [worker.pids_cgroup for worker in self._all if worker.pids_cgroup]

    def _start_worker(self) -> Worker:
        if self._closed:  # a run that met a killed worker (close(kill=True)) starts no other
            raise RuntimeError("sandbox is closed")
        worker = Worker(self.plan, self.config, self.cgroups)
        with self._lock:
            if not self._closed:
                self._all.append(worker)
                return worker
        worker.close()
        raise RuntimeError("sandbox is closed")

    def _take_idle(self) -> Worker | None:
        with self._idle_changed:
            while not self._idle:
                self._idle_changed.wait()
            last = getattr(self._last_worker, "worker", None)
            for index, worker in enumerate(self._idle):
                if worker is last and last is not None:
                    return self._idle.pop(index)
            return self._idle.pop()

    def _put_idle(self, worker: Worker | None) -> None:
        self._last_worker.worker = worker
        with self._idle_changed:
            self._idle.append(worker)
            self._idle_changed.notify()

    def _retire(self, worker: Worker) -> None:
        worker.close()
        with self._lock:
            if worker in self._all:
                self._all.remove(worker)

    def run(
        self,
        source: str,
        stdin: str | bytes = b"",
        *,
        kind: str = "stdin",
        entry_point: str | None = None,
        prelude: str = "",
        arguments: Sequence[str] = (),
        time_limit_s: float = DEFAULT_TIME_LIMIT_S,
        memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB,
        output_limit_mb: float = DEFAULT_OUTPUT_LIMIT_MB,
        deadline: float | None = None,
        stop: RunStop | None = None,
        harness: str | None = None,
    ) -> ProgramRun:
        """Run one program (`kind="stdin"`) or one call of its entry point (`kind="call"`,
        `arguments` one JSON value each) and say what happened.

        `deadline` (a `time.monotonic()` time): the run ends by then. Its wall-clock
        backstop is cut to what is left when it gets a worker; one that gets its worker
        after the deadline does not run. `stop`: lets another thread end it (RunStop).
        Both make it `time_limit_exceeded`. `harness="livecodebench"`: run it as
        LiveCodeBench's grader does (microcoder/evaluator/_livecodebench.py; strict mode):
        stdout is what went through sys.stdout, a call's value keeps nested tuples."""
        if self._closed:
            raise RuntimeError("sandbox is closed")
        if kind not in ("stdin", "call"):
            raise ValueError(f"kind must be 'stdin' or 'call', got {kind!r}")
        if harness not in (None, "livecodebench"):
            raise ValueError(f"harness must be None or 'livecodebench', got {harness!r}")
        output_bytes = int(output_limit_mb * 1024 * 1024)
        request = {
            "op": "run",
            "kind": kind,
            "entry_point": entry_point,
            "prelude": prelude,
            "arguments": list(arguments),
            "time_limit_s": time_limit_s,
            "wall_limit_s": self.config.wall_factor * time_limit_s + 1.0,
            "wall_cap_s": None,  # how far a starved computing run may put the backstop off (None: no cap)
            "memory_bytes": int(memory_limit_mb * 1024 * 1024),
            "output_bytes": output_bytes,
            "max_processes": self.config.max_processes,
            "harness": harness,
        }
        # A lone surrogate (from JSON's "\ud800") goes as its surrogatepass bytes, which the
        # program reads as undecodable input, instead of failing the caller's whole batch.
        stdin_bytes = stdin.encode("utf-8", "surrogatepass") if isinstance(stdin, str) else stdin
        worker = self._take_idle()
        try:
            if worker is None or not worker.alive:
                if worker is not None:
                    dead, worker = worker, None  # back in the pool as "not started" should a start fail
                    self._retire(dead)
                worker = self._start_worker()
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return ProgramRun("time_limit_exceeded", detail="its deadline passed before it got a worker")
                request["wall_limit_s"] = min(request["wall_limit_s"], left)
                request["wall_cap_s"] = left
            if stop is not None and not stop._attach(worker):
                return ProgramRun("time_limit_exceeded", detail="stopped before it started")
            try:
                header, blobs = worker.run(request, source.encode("utf-8", "surrogatepass"), stdin_bytes)
            except (EOFError, OSError, ValueError):
                # The worker died mid-run. Only the run itself can have done that (it
                # shares the worker's uid when not root): charge it to the run.
                self._retire(worker)
                worker = None
                return ProgramRun("runtime_error", detail="the run killed its sandbox worker")
            except BaseException:
                # Interrupted (Ctrl-C, a timeout around us) with the reply unread: the next
                # run must not read this one's reply, so this worker goes.
                self._retire(worker)
                worker = None
                raise
            finally:
                if stop is not None:
                    stop._detach()
            if header.pop("retiring", False):  # it could not clean up after the run: it exits now
                self._retire(worker)
                worker = None
        finally:
            self._put_idle(worker)
        if "error" in header:  # the worker could not run it (e.g. the problem's prelude is broken)
            return ProgramRun("sandbox_error", detail=header["error"])
        stdout, stderr, result = blobs
        status, detail = classify(header, stdout, stderr, time_limit_s, memory_limit_mb, output_bytes)
        # Call runs: the result file holds b"R" + JSON of the return value, or b"U" + why it
        # could not be serialised.
        return_json = result[1:].decode("utf-8", "replace") if result[:1] == b"R" else None
        if status == "ok" and kind == "call" and return_json is None:
            if result[:1] == b"U":
                detail = "return value is not JSON data: " + result[1:].decode("utf-8", "replace")
            else:
                detail = "the program exited before its entry point returned"
        return ProgramRun(
            status=status,
            stdout=stdout[:output_bytes],
            stderr=stderr,
            exit_code=header.get("exit_code"),
            signal=header.get("signal"),
            cpu_s=header.get("cpu_s", 0.0),
            wall_s=header.get("wall_s", 0.0),
            max_rss_mb=header.get("max_rss_kb", 0) / 1024,
            return_json=return_json,
            detail=detail,
        )

    def run_program(self, source: str, stdin: str | bytes = b"", time_limit_s: float = DEFAULT_TIME_LIMIT_S,
                    memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB) -> ProgramRun:
        """Run a whole program on stdin (kind `stdin`)."""
        return self.run(source, stdin, time_limit_s=time_limit_s, memory_limit_mb=memory_limit_mb)

    def run_programs(self, jobs: Sequence[tuple[str, str | bytes]], time_limit_s: float = DEFAULT_TIME_LIMIT_S,
                     memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB) -> list[ProgramRun]:
        """Run (source, stdin) pairs in parallel; results in the same order."""
        return list(self.map(lambda job: self.run_program(job[0], job[1], time_limit_s, memory_limit_mb), jobs))

    def submit(self, function) -> Future:
        """`function()` on the sandbox's own thread pool."""
        return self._executor.submit(function)

    def map(self, function, items):
        """`function` over `items` on the sandbox's own thread pool (one thread per worker)."""
        return self._executor.map(function, items)

    def close(self, kill: bool = False) -> None:
        """Close every worker. `kill`: end the runs in progress now (their workers are
        killed; each is reported to its caller as a run that killed its worker) instead
        of waiting for them to end."""
        if self._closed:
            return
        self._closed = True
        if kill:
            with self._lock:
                running = list(self._all)
            for worker in running:
                worker.kill()
        self._executor.shutdown(wait=True)
        with self._lock:
            workers, self._all = self._all, []
        for worker in workers:
            worker.close()
        _open_sandboxes.discard(self)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


_open_sandboxes: weakref.WeakSet[Sandbox] = weakref.WeakSet()


@atexit.register
def _close_open_sandboxes() -> None:
    for sandbox in list(_open_sandboxes):
        sandbox.close()
    for path in list(_unremoved_cgroups):
        _remove_cgroup(path)


__all__ = ["Sandbox", "SandboxConfig", "ProgramRun", "RunStop", "STATUSES", "CgroupPlan", "cgroup_plan", "isolation_plan"]

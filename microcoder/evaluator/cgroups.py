"""Each sandbox worker's memory and pids cgroups: finding where they can be made, making
them, and removing them (and what killed processes left).

Each worker gets a memory and a pids cgroup of its own where the machine lets us make one
(cgroup v2, else the v1 `memory` and `pids` controllers; see `cgroup_plan`), which holds
the limits, with a leaf cgroup inside that every run joins: what a run holds in memory
files and tmpfs counts against its memory limit, as its heap does, and `pids.max` bounds
its processes whatever its uid. Where no cgroup can be made the sandbox warns once and
relies on rlimits. The worker (`_zygote.py`) writes each run's limits and moves the run
into the leaf; this module finds where the cgroups can go, makes them and removes them.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path


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
    cpu_parent: str | None = None
    """The same for the CPU controller, which holds each worker's quota of one core (v2: the
    memory parent where `cpu` could be enabled; v1: the `cpu` hierarchy); None: no quota."""
    cpuacct_parent: str | None = None
    """Where each worker's CPU time is counted, its runs' whole process trees (v2: the memory
    parent, whose `cpu.stat` every cgroup has; v1: the `cpuacct` hierarchy, which may be the
    `cpu` one); None: only each run's main process is timed."""

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
CPU_PERIOD_US = 100_000
RUN_CPU_QUOTA_CORES = 1
"""The CPU a worker's runs get in all, whatever processes they make: one core, as a judge
gives one program (runs keep one thread per library: RUN_ENVIRONMENT)."""
_cgroup_plans: list[CgroupPlan] = []
_cgroup_lock = threading.Lock()
_warned: set[str] = set()  # what the sandbox has warned of, once per process
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


def _probe(parent: str, control: str, value: str | None = None) -> str | None:
    """None if a child cgroup can be made in `parent` and its `control` file written with
    `value` (by default, no limit), then removed again; else why not."""
    probe = os.path.join(parent, f"microcoder-probe-{_owner_tag()}")
    try:
        lock = _make_locked_cgroup(probe)
    except OSError as error:
        return f"cannot make a cgroup in {parent}: {error.strerror}"
    try:
        if value is None:
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
            for controller in ("memory", "pids", "cpu", "cpuacct"):
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
                wanted = [c for c in ("memory", "pids", "cpu") if c in available]
                enabled = Path(directory, "cgroup.subtree_control").read_text().split()
                try:
                    if any(c not in enabled for c in wanted):  # only a cgroup without processes of its own may
                        enabled = _enable_v2_controllers(directory, wanted)
                    why = _probe(directory, "memory.max")
                except OSError as error:
                    why = f"cannot enable the memory controller below {directory}: {error.strerror}"
                if why is None:
                    pids = directory if "pids" in enabled else None
                    cpu = directory if "cpu" in enabled and _probe(directory, "cpu.max", _v2_quota()) is None else None
                    return CgroupPlan(2, directory, pids, f"cgroup v2 under {directory}"
                                      + ("" if pids else " (no pids controller)")
                                      + (", a CPU quota" if cpu else " (no CPU controller: no CPU quota)"),
                                      cpu_parent=cpu, cpuacct_parent=directory)
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
    cpu = cpuacct = None
    if "cpu" in mounts and "cpu" in own:
        cpu = _own_cgroup_directory(*mounts["cpu"], own["cpu"])
        cpu = cpu if cpu is not None and _probe(cpu, "cpu.cfs_quota_us", str(_v1_quota_us())) is None else None
    if "cpuacct" in mounts and "cpuacct" in own:
        cpuacct = _own_cgroup_directory(*mounts["cpuacct"], own["cpuacct"])
        if cpuacct is not None and cpuacct != cpu:  # mounted with cpu: probed with it
            cpuacct = cpuacct if _probe(cpuacct, "cpuacct.usage", "0") is None else None
    swap = "with swap" if os.path.exists(os.path.join(memory, "memory.memsw.limit_in_bytes")) else "no swap accounting"
    return CgroupPlan(1, memory, pids, f"cgroup v1: memory ({swap}) under {memory}, "
                      + (f"pids under {pids}" if pids else "no pids controller") + ", "
                      + (f"a CPU quota under {cpu}" if cpu else "no cpu controller (no CPU quota)") + ", "
                      + (f"CPU time under {cpuacct}" if cpuacct else "no cpuacct controller (main processes timed)"),
                      cpu_parent=cpu, cpuacct_parent=cpuacct)


def _v1_quota_us() -> int:
    return CPU_PERIOD_US * RUN_CPU_QUOTA_CORES


def _v2_quota() -> str:
    return f"{CPU_PERIOD_US * RUN_CPU_QUOTA_CORES} {CPU_PERIOD_US}"


def _enable_v2_controllers(directory: str, wanted: list[str]) -> list[str]:
    """Enable `wanted` below `directory` (cgroup.subtree_control) and return what was; the
    CPU controller, which some kernels refuse where real-time processes run, is given up
    rather than the rest."""
    control = Path(directory, "cgroup.subtree_control")
    try:
        control.write_text(" ".join(f"+{c}" for c in wanted))
        return wanted
    except OSError:
        if "cpu" not in wanted:
            raise
        rest = [c for c in wanted if c != "cpu"]
        control.write_text(" ".join(f"+{c}" for c in rest))
        return rest


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
    for parent in {plan.memory_parent, plan.pids_parent, plan.cpu_parent, plan.cpuacct_parent} - {None}:
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


def warn_without_cgroup(why: str) -> None:
    """The one warning per process that runs go without a cgroup (`cgroup="auto"`)."""
    _warn_once("memory", f"sandbox: {why}; runs are bounded by rlimits alone, so a run can hold memory in memfds "
                         "and tmpfs files beyond its memory limit until it ends (docs/sandbox.md)")


def _warn_once(what: str, message: str) -> None:
    if what not in _warned:
        _warned.add(what)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def worker_cgroup_plan(mode: str) -> CgroupPlan:
    """The cgroup plan for `SandboxConfig.cgroup` (`auto`, `required` or `off`); removes
    what killed processes left, and retries the cgroups an earlier close could not remove."""
    if mode not in ("auto", "required", "off"):
        raise ValueError(f"cgroup must be 'auto', 'required' or 'off', got {mode!r}")
    if mode == "off":
        return CgroupPlan(None, None, None, "off (SandboxConfig.cgroup)")
    plan = cgroup_plan()
    if not plan.available:
        if mode == "required":
            raise RuntimeError(f"cgroup='required': no memory cgroup can be made here ({plan.description})")
        warn_without_cgroup(f"no memory cgroup can be made here ({plan.description})")
        return plan
    if not (plan.cpu_parent and plan.cpuacct_parent):
        _warn_once("cpu", f"sandbox: no CPU cgroup can be made here ({plan.description}); a run's processes are "
                          "neither held to one core together nor timed together: each is bounded by its own CPU "
                          "timer or RLIMIT_CPU, so a run that forks spinners can starve the runs beside it until "
                          "the wall-clock backstop (docs/sandbox.md)")
    reap_stale_cgroups(plan)
    retry_unremoved_cgroups(seconds=0)
    return plan


def retry_unremoved_cgroups(seconds: float) -> None:
    """Remove the worker cgroups whose removal failed at close (waiting up to `seconds`
    for each, killing what is left in it)."""
    for path in list(_unremoved_cgroups):
        if _remove_cgroup(path, seconds=seconds):
            _unremoved_cgroups.discard(path)


@dataclass
class WorkerCgroups:
    """The cgroups of one worker (all None and empty when it has none)."""

    memory: str | None = None
    """Its memory cgroup's directory."""
    pids: str | None = None
    """Its pids cgroup's directory (v2: the memory cgroup's; None without the controller)."""
    cpu: str | None = None
    """Its CPU cgroup's directory, which holds the quota (None without one)."""
    cpuacct: str | None = None
    """Where its runs' CPU time is counted (v2: the memory cgroup; None without one)."""
    paths: list[str] = field(default_factory=list)
    """What `remove` removes: one directory (v2) or one per hierarchy (v1)."""

    def remove(self) -> None:
        """Remove them (killing any run left in them); one that will not go is retried
        when a sandbox starts, and at exit."""
        for path in reversed(self.paths):
            if not _remove_cgroup(path):
                _unremoved_cgroups.add(path)
        self.paths = []


def make_worker_cgroups(plan: CgroupPlan, slot: int) -> tuple[WorkerCgroups, dict[str, int]]:
    """Make a worker's cgroups, each with the leaf RUN_CGROUP inside that its runs join,
    and return them with their directories, opened and locked, for the worker:
    {"memory_fd": fd, "pids_fd": fd, "cpu_fd": fd, "cpuacct_fd": fd} (v2: one directory,
    memory_fd only; v1: each other fd only where its controller is there, cpuacct_fd only
    where it is not mounted with cpu). The worker writes the limits (`memory.max` or
    `memory.limit_in_bytes`, `pids.max`) on these, above the leaf, before every run; the
    CPU quota (RUN_CPU_QUOTA_CORES) is written here, once. Raises OSError, having removed
    what it made."""
    name = f"microcoder-{_owner_tag()}-{slot}"
    made = WorkerCgroups()
    fds: dict[str, int] = {}
    try:
        made.memory = os.path.join(plan.memory_parent, name)
        fds["memory_fd"] = _make_locked_cgroup(made.memory)
        made.paths.append(made.memory)
        if plan.version == 2:
            made.pids = made.memory if plan.pids_parent else None
            # No swap to push memory files out to, and a run's processes killed together.
            # Nothing is enabled in its cgroup.subtree_control: the leaf has no memory or
            # pids files of its own, and is charged and counted here.
            for control, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                if os.path.exists(os.path.join(made.memory, control)):
                    Path(made.memory, control).write_text(value)
            made.cpuacct = made.memory if plan.cpuacct_parent else None
            if plan.cpu_parent:
                made.cpu = made.memory
                Path(made.cpu, "cpu.max").write_text(_v2_quota())
        else:
            # The leaf's usage must count against the limit here. Linux 5.11+ always
            # does; before, a cgroup without children could still be made to.
            hierarchy = Path(made.memory, "memory.use_hierarchy")
            if hierarchy.exists() and hierarchy.read_text().strip() != "1":
                hierarchy.write_text("1")
                if hierarchy.read_text().strip() != "1":
                    raise OSError(f"{hierarchy} stays 0: a run's leaf would not count against the limit")
            if plan.pids_parent:
                made.pids = os.path.join(plan.pids_parent, name)
                fds["pids_fd"] = _make_locked_cgroup(made.pids)
                made.paths.append(made.pids)
            if plan.cpu_parent:
                made.cpu = os.path.join(plan.cpu_parent, name)
                fds["cpu_fd"] = _make_locked_cgroup(made.cpu)
                made.paths.append(made.cpu)
                Path(made.cpu, "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
                Path(made.cpu, "cpu.cfs_quota_us").write_text(str(_v1_quota_us()))
            if plan.cpuacct_parent is not None and plan.cpuacct_parent == plan.cpu_parent:  # "cpu,cpuacct"
                made.cpuacct = made.cpu
            elif plan.cpuacct_parent is not None:
                made.cpuacct = os.path.join(plan.cpuacct_parent, name)
                fds["cpuacct_fd"] = _make_locked_cgroup(made.cpuacct)
                made.paths.append(made.cpuacct)
        for path in {made.memory, made.pids} - {None}:  # v1's cpu and cpuacct: the worker itself joins
            os.mkdir(os.path.join(path, RUN_CGROUP), 0o755)
        return made, fds
    except OSError:
        for fd in fds.values():
            os.close(fd)
        made.remove()
        raise

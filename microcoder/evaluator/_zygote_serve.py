"""The sandbox worker's serve loop: one request at a time, one forked child per run.

`serve` reads a request, has `run` prepare it (the program compiled, the run's directory
and memory files made, the cgroup's limits written), fork the child (`_zygote_child`),
wait for it under the backstop (`wait_with_backstop`: the wall clock, and the CPU time of
all the run's processes), kill and reap whatever the run left behind (`sweep`), read its
outputs and clean up after it; then replies. A worker that could not clean up after a
run, or whose cgroup still holds the run's memory, retires after its reply.

What the worker knows of itself is a `Worker`; what the backstop's signal handlers know of
the run waited for is `WAIT`.

Part of the worker (`_zygote.py`), which loads it by path: it imports nothing of microcoder.
"""

import fcntl
import gc
import os
import shutil
import signal
import time
import traceback

from _wire import read_message, write_all, write_message
from _zygote_child import child_main, limits_for
from _zygote_program import compiled_program, non_utf8_source, prepared_prelude

STDIN_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


class Worker:
    """What the worker knows of itself: set once before it serves (`_zygote.prepare_worker`)
    and read by every run, but `retiring`, which a run that leaves something behind sets."""

    __slots__ = ("uid", "run_uid_key", "cgroup", "capabilities_to_drop", "run_directory", "main_module",
                 "streams", "children_file", "shared_tmp", "keep_in_shared_tmp", "retiring")

    def __init__(self, uid):
        self.uid = uid  # the runs' own uid (None: they keep the worker's)
        self.run_uid_key = None if uid is None else str(uid).encode()  # as /proc/key-users writes it
        self.cgroup = None  # the worker's _zygote_confinement.RunCgroup, where the sandbox made one
        self.capabilities_to_drop = ()  # what a run without a uid of its own gives up
        self.run_directory = None  # each run's private directory (the same path every time)
        self.main_module = None  # the `__main__` module every stdin run uses as it is
        self.streams = ()  # sys.stdin, sys.stdout and sys.stderr of every run
        self.children_file = None  # /proc's list of the worker's children
        self.shared_tmp = {}  # isolated workers: shared temp directory -> (size, mtime) after the last clean-up
        self.keep_in_shared_tmp = set()  # what of the shared temp directories is the worker's own
        self.retiring = False  # a run left something behind: reply, then exit


class RunWait:
    """What the worker's timer handlers know of the run it waits for (one instance, WAIT)."""

    __slots__ = ("pid", "killed", "last_wall", "last_cpu", "cpu_limit", "latest", "wall_deadline",
                 "tree_cpu_base", "cores", "cgroup", "stop_requested")

    def __init__(self):
        self.pid = None  # the run's main process; None while no run is waited for
        self.killed = False  # the backstop (or a stop) killed it
        self.last_wall = self.last_cpu = 0.0  # the last look past the wall-clock limit
        self.cpu_limit = 0.0
        self.latest = None  # the latest time the backstop may be put off to (None: no caller's deadline)
        self.wall_deadline = 0.0  # monotonic time of the wall-clock limit
        self.tree_cpu_base = None  # the cgroup's CPU counter at the fork (None: not counted there)
        self.cores = 1.0  # the most CPU the run's processes can use together, in cores
        self.cgroup = None  # the worker's RunCgroup, which counts tree_cpu_base
        # A stop (SIGUSR1) that came while no run was waited for: the caller stopping the
        # run it sent (sandbox.RunStop) before its child started. Cleared as each request is
        # read: a stop the caller sent for an earlier run has been handled by then (see
        # RunStop.stop).
        self.stop_requested = False

    def cpu(self):
        """CPU seconds the run has used so far: all its processes where the cgroup counts
        them, else its main process alone."""
        if self.tree_cpu_base is not None:
            return self.cgroup.cpu_seconds() - self.tree_cpu_base
        return time.clock_gettime(process_cpu_clock(self.pid))


WAIT = RunWait()
# Past its wall-clock limit, a run that got at least MIN_CPU_SHARE of a core since the
# last look, with CPU time left, is a computing program starved by a loaded host, not one
# that sleeps or blocks: the backstop looks again BACKSTOP_RECHECK_S later. Such a run
# meets its CPU limit within (CPU left) / MIN_CPU_SHARE of wall time or falls under the
# share, so the wait ends; one that stops computing is killed at the next look.
MIN_CPU_SHARE = 0.1
BACKSTOP_RECHECK_S = 1.0
# Before its wall-clock limit, the run's CPU time, all its processes together, is looked
# at as early as it could reach the limit (CPU left / the cores its processes can use),
# and no more often than this: the main process's CPU timer stops the main process
# precisely, and these looks stop the processes it made, which no timer of ours covers.
MIN_TREE_LOOK_S = 0.02


def process_cpu_clock(pid):
    """The clock id of a process's CPU time as the scheduler counts it (Linux's
    MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED); glibc's clock_getcpuclockid)."""
    return ((~pid) << 3) | 2


def on_backstop(signum, frame):
    """SIGALRM: a look at the run. Kill its group when all its processes together have
    used their CPU limit (where the cgroup counts them; then the verdict's CPU time says
    so) or, past the wall-clock limit, when it is not a computing program starved of CPU
    (see MIN_CPU_SHARE): then as the backstop. Otherwise look again later."""
    if WAIT.pid is None:
        return
    try:
        cpu = WAIT.cpu()
    except OSError:  # gone already
        cpu = None
    now = time.monotonic()
    if cpu is not None and cpu >= WAIT.cpu_limit:
        kill_group(WAIT.pid)  # not the backstop: the CPU time measured makes it a time limit
        return
    if cpu is not None and now < WAIT.wall_deadline:
        signal.setitimer(signal.ITIMER_REAL, next_look(cpu, now))
        return
    delay = 0 if cpu is None else starved_delay(cpu, now)
    if delay:
        signal.setitimer(signal.ITIMER_REAL, delay)
        return
    WAIT.killed = True
    kill_group(WAIT.pid)


def next_look(cpu, now):
    """Seconds to the next look before the wall-clock limit: when the run could reach its
    CPU limit at the earliest, or the wall-clock limit, whichever comes first."""
    return max(MIN_TREE_LOOK_S, min(WAIT.wall_deadline - now, (WAIT.cpu_limit - cpu) / WAIT.cores))


def starved_delay(cpu, now):
    """Seconds to put the backstop off by, or 0 (kill now)."""
    last_wall, last_cpu = WAIT.last_wall, WAIT.last_cpu
    WAIT.last_wall, WAIT.last_cpu = now, cpu
    if cpu - last_cpu < MIN_CPU_SHARE * (now - last_wall):
        return 0
    delay = BACKSTOP_RECHECK_S if WAIT.latest is None else min(BACKSTOP_RECHECK_S, WAIT.latest - now)
    return delay if delay > 0 else 0


def on_stop(signum, frame):
    """SIGUSR1, sent by the caller to stop the run (sandbox.RunStop): kill its group now.
    Before the run's child is waited for, the stop is kept for when it is."""
    if WAIT.pid is not None:
        WAIT.killed = True
        kill_group(WAIT.pid)
    else:
        WAIT.stop_requested = True


def wait_with_backstop(pid, request, started, tree_cpu_base, cgroup):
    """Wait for the child; SIGKILL its group when the wall clock runs out (see on_backstop),
    or when its processes together reach the CPU limit (`tree_cpu_base`: the cgroup's CPU
    counter at the fork, None where there is none; `cgroup` the worker's RunCgroup or None). Returns (wait status, rusage, killed
    by the backstop).

    One blocking wait4 under a real-time timer, and nothing else: until the child exits,
    every page of ours it shares that we write costs us a copy (the child's writes are its
    own cost), so the worker touches as little as it can until then (a pidfd and a poll
    object cost a few such copies per run)."""
    cap = request.get("wall_cap_s")
    WAIT.pid, WAIT.killed, WAIT.last_wall, WAIT.last_cpu = pid, False, started, 0.0
    WAIT.cpu_limit, WAIT.latest = request["time_limit_s"], None if cap is None else started + cap
    WAIT.wall_deadline = started + request["wall_limit_s"]
    WAIT.tree_cpu_base, WAIT.cgroup = tree_cpu_base, cgroup
    WAIT.cores = (cgroup.cpu_quota if cgroup is not None and cgroup.cpu_quota else None) or len(os.sched_getaffinity(0))
    first = request["wall_limit_s"] if tree_cpu_base is None else next_look(0.0, started)
    signal.setitimer(signal.ITIMER_REAL, first)
    if WAIT.stop_requested:  # stopped before it started: the child may not lead its group yet
        WAIT.killed = True
        os.kill(pid, signal.SIGKILL)
    try:
        _, status, rusage = os.wait4(pid, 0)  # retried after the handler (PEP 475)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        WAIT.pid = None
    # A timer that fired just as the child exited by itself killed nothing of it.
    killed = WAIT.killed and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    return status, rusage, killed


def kill_group(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def leftover_children(worker):
    """Pids of the zygote's children. As a subreaper it inherits every orphan of a run, so
    after the run's own child is reaped, anything listed here is something the run left."""
    fd = os.open(worker.children_file, os.O_RDONLY)
    try:
        return [int(pid) for pid in os.read(fd, 1 << 16).split()]
    finally:
        os.close(fd)


def sweep(worker):
    """Kill and reap every process left over from a run (daemons, double forks). Should
    some survive, the worker retires after its reply."""
    uid = worker.uid
    for _ in range(100):
        leftovers = leftover_children(worker)
        if not leftovers:
            return
        if uid is not None:
            killer = os.fork()
            if killer == 0:
                try:
                    os.setuid(uid)
                    os.kill(-1, signal.SIGKILL)  # every process of this uid, and no other
                finally:
                    os._exit(0)
            os.waitpid(killer, 0)
        for pid in leftovers:
            kill_group(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                time.sleep(0.001)
                break
    worker.retiring = worker.retiring or bool(leftover_children(worker))


def read_back(fd, cap, tail=False):
    """Up to `cap` + 1 bytes of a memory file (its last `cap` with `tail`)."""
    size = os.lseek(fd, 0, os.SEEK_END)
    if tail:
        return os.pread(fd, min(size, cap), max(0, size - cap))
    return os.pread(fd, min(size, cap + 1), 0)


NO_EXIT_STATUS = {"exit_code": 1, "signal": None, "cpu_s": 0.0, "wall_s": 0.0, "max_rss_kb": 0, "wall_timeout": False}


def run(request, blobs, worker):
    source, stdin = blobs
    try:
        source = source.decode("utf-8")
    except UnicodeDecodeError as error:  # what CPython's file reader says, exit status 1
        return dict(NO_EXIT_STATUS, status="S"), [b"", non_utf8_source(source, error.start), b""]
    code, notes, syntax_error = compiled_program(source, request, worker.uid)
    if syntax_error is not None:  # nothing to run: reply as the child would have
        return dict(NO_EXIT_STATUS, status="S"), [b"", notes + syntax_error, b""]
    prelude = None
    if request["kind"] == "call":
        try:  # before the fork, so that every child inherits the module
            prelude = prepared_prelude(request["prelude"])
        except Exception as error:  # noqa: BLE001 - a broken problem, not the program's fault
            return {"error": f"the problem's prelude fails: {error!r}"[:2000]}, []
    uid, cgroup = worker.uid, worker.cgroup
    os.mkdir(worker.run_directory, 0o700)  # the last run's is gone, or the worker retired
    fds = [os.memfd_create("stdin", os.MFD_ALLOW_SEALING)]
    fds += [os.memfd_create(name, 0) for name in ("stdout", "stderr", "result")]
    fds += os.pipe()[::-1]  # the status pipe: the child gets its write end
    try:
        write_all(fds[0], stdin)
        os.lseek(fds[0], 0, os.SEEK_SET)
        fcntl.fcntl(fds[0], fcntl.F_ADD_SEALS, STDIN_SEALS)  # read-only, however it is reopened
        if uid is not None:
            os.chown(worker.run_directory, uid, uid)
        os.chdir(worker.run_directory)  # the child inherits it
        limits = limits_for(request, uid)
        if cgroup is not None:
            try:
                cgroup.set_limits(request["memory_bytes"], request["max_processes"])
            except OSError:  # removed under us: a fresh worker makes another
                worker.retiring = True
                raise
        # Frozen, the worker's objects are not the child's collector's business: its
        # collections (and finish()'s) see only the program's objects and copy no page of
        # ours. The worker itself goes on collecting as before.
        gc.freeze()
        started = time.monotonic()
        if WAIT.stop_requested:  # stopped while it was being prepared: never started
            gc.unfreeze()
            return dict(NO_EXIT_STATUS, exit_code=None, wall_timeout=True, status=""), [b"", b"", b""]
        tree_cpu_base = cgroup.cpu_seconds() if cgroup is not None and cgroup.cpu_fd is not None else None
        pid = os.fork()
        if pid == 0:
            child_main(request, source if code is None else code, notes, prelude, fds[:5], limits, worker, source)
        status, rusage, wall_timeout = wait_with_backstop(pid, request, started, tree_cpu_base, cgroup)
        wall = time.monotonic() - started
        gc.unfreeze()
        os.close(fds.pop(4))  # only the child writes statuses (before reading them: the child is gone)
        sweep(worker)  # nothing to do unless the run left something (the backstop killed its group)
        # All its processes, those it made in sessions of their own included, until the sweep.
        tree_cpu = None if tree_cpu_base is None else cgroup.cpu_seconds() - tree_cpu_base
        cap = request["output_bytes"]
        out = [read_back(fds[1], cap), read_back(fds[2], 4096, tail=True), read_back(fds[3], cap)]
        statuses = os.read(fds[4], 16)  # the child is gone: every write end is closed
    finally:
        for fd in fds:
            os.close(fd)
        os.chdir("/")
        clean_up_after_run(worker)
    header = {
        "oom_kills": settle_cgroup(worker),
        "exit_code": os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        # The verdict's CPU time: the whole process tree's where the cgroup counts it (the
        # main process's rusage holds only the children it waited for).
        "cpu_s": max(rusage.ru_utime + rusage.ru_stime, tree_cpu or 0.0),
        "cpu_of": "process" if tree_cpu is None else "tree",
        "wall_s": wall,
        "max_rss_kb": rusage.ru_maxrss,
        "wall_timeout": wall_timeout,
        "status": statuses.decode("ascii", "replace"),
    }
    return header, out


def settle_cgroup(worker):
    """After the run's clean-up: how many of its processes the kernel killed at its memory
    limit; the worker retires if the cgroup still holds memory of the run."""
    if worker.cgroup is None:
        return 0
    try:
        kills = worker.cgroup.oom_kills_of_run()
        if not worker.cgroup.released():
            worker.retiring = True
        return kills
    except OSError:  # the cgroup was removed under us (its files say ENODEV): a fresh worker makes another
        worker.retiring = True
        return 0


def clean_up_after_run(worker):
    """Remove the run's directory and whatever it left in the shared temp directories, so
    that the next run finds nothing of it. When that fails the worker retires after its
    reply (the sandbox starts a fresh one): a run must not poison the runs after it."""
    clean = remove_tree(worker.run_directory)
    if worker.run_uid_key is not None:  # keys the run made stay with its uid: a fresh worker has another
        with open("/proc/key-users", "rb") as handle:
            clean = clean and not any(line.split(b":")[0].strip() == worker.run_uid_key for line in handle)
    for path, (size, mtime) in list(worker.shared_tmp.items()):
        state = os.stat(path)
        # tmpfs counts a directory's size in entries, so an entry made and one removed in
        # the same clock tick still show.
        if (state.st_size, state.st_mtime_ns) != (size, mtime):
            with os.scandir(path) as entries:
                names = [entry.name for entry in entries]
            for name in names:
                if os.path.join(path, name) not in worker.keep_in_shared_tmp:
                    clean = remove_tree(os.path.join(path, name)) and clean
            state = os.stat(path)
            worker.shared_tmp[path] = (state.st_size, state.st_mtime_ns)
    if not clean:
        worker.retiring = True


def remove_tree(path):
    """Remove a file or a directory tree of any depth; True when it is gone. Never raises."""
    try:
        os.rmdir(path)  # the usual case: the run left nothing
        return True
    except FileNotFoundError:
        return True
    except OSError:
        pass
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except (OSError, RecursionError):  # deeper than Python recursion or PATH_MAX
        try:
            rm = "/usr/bin/rm" if os.path.exists("/usr/bin/rm") else "/bin/rm"
            os.waitpid(os.posix_spawn(rm, [rm, "-rf", "--one-file-system", "--", path], {}), 0)
        except OSError:
            pass
    return not os.path.lexists(path)


def serve(worker, requests, replies):
    """Answer requests until the caller closes the pipe, asks the worker to exit, or a run
    leaves the worker retiring."""
    while True:
        try:
            request, blobs = read_message(requests)
        except EOFError:
            return  # the caller is gone
        if request.get("op") == "exit":
            return
        WAIT.stop_requested = False
        try:
            header, out = run(request, blobs, worker)
        except Exception:  # noqa: BLE001 - report the zygote's own failure, keep serving
            header, out = {"error": traceback.format_exc()[-2000:]}, []
        if worker.retiring:
            header = dict(header, retiring=True)
        write_message(replies, header, out)
        if worker.retiring:
            return

"""The sandbox worker ("zygote"): a fresh interpreter that forks one child per program run.

Started by `sandbox.Worker` as `python -P -s -S _zygote.py CONFIG_JSON`, usually inside new
network, mount and IPC namespaces (`unshare --net --mount --ipc`). It imports nothing from
microcoder: it must not hold anything of the caller's but the programs and inputs it is
asked to run, because every child it forks inherits its memory. In particular the
expected outputs never come here; the caller compares.

Per run the zygote:
  1. has the program compiled by a helper under the run's limits (once per program: the
     tests of a sample come one after another), makes the run's private directory, and
     puts stdin (sealed), stdout, stderr and the result in fresh memory files (memfd:
     real, seekable files that no path names), beside a status pipe;
  2. forks a child that starts a new session, moves those onto fds 0-4, joins the leaf
     of the worker's memory and pids cgroups where the sandbox made them (`RunCgroup`;
     the worker has just written the run's limits on the cgroups above the leaf), closes
     every other file descriptor, sets rlimits (CPU, address space, file size, processes,
     open files), drops to a per-worker uid, reports on the status pipe and closes it, and
     runs the program as `__main__` (or calls its entry point). The seccomp filter the
     worker put on itself (`run_syscall_filter`) holds in every child: no keyring,
     namespace or mount calls;
  3. waits with a wall-clock backstop, kills whatever the run left behind (its process
     group, then as the worker uid `kill(-1, SIGKILL)`), reaps, reads the outputs and the
     status, removes the directory (and litter in the shared temp directories), reads
     the cgroup's OOM kill count, and replies, retiring afterwards if anything of the run
     could not be removed or the cgroup still holds its memory.

Speed: a forked child pays a copy-on-write fault for each page it writes (~3-8 us on
these VMs), so whatever every child would do alike is done once in the worker before it
serves (`prepare_worker`): streams, signal dispositions, no_new_privs, thread stack size,
HOME/TMPDIR, the call prelude's imports, the compiled program.

Messages in both directions are framed as `_wire.py` says.
"""

import ctypes
import json
import marshal
import math
import operator
import os
import resource
import select
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -P left our folder off the path
from _wire import read_message, write_all, write_message  # noqa: E402
import _livecodebench  # noqa: E402 - strict runs' harness

del sys.path[0]

# Modules a typical solution imports; importing them once here saves every child the cost.
# Not `threading` or `random`: threading's at-fork handler costs every fork ~0.3 ms, and
# random pulls in hashlib and OpenSSL, whose mappings make every fork ~0.4 ms dearer
# (both measured); a program that needs them pays ~1 ms to import them.
PRELOAD = "bisect collections copy datetime decimal fractions functools heapq io itertools json math operator re string types typing"
for _name in PRELOAD.split():
    __import__(_name)
import _sitebuiltins  # noqa: E402
import atexit  # noqa: E402
import fcntl  # noqa: E402
import gc  # noqa: E402
import itertools  # noqa: E402
import linecache  # noqa: E402
import _thread  # noqa: E402
import builtins  # noqa: E402
import io  # noqa: E402
import traceback  # noqa: E402
import types  # noqa: E402
import warnings  # noqa: E402

LIBC = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 36, 38
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
SYS_MOUNT_SETATTR, AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 1
PR_CAPBSET_DROP, LINUX_CAPABILITY_VERSION_3 = 24, 0x20080522
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
CAPABILITIES_TO_DROP = ()  # set by main() for workers whose runs get no uid of their own
# In the worker's own IPC namespace: no SysV shared memory, message queue or semaphore set
# and no POSIX message queue can be made, so none can outlive a run for the next to find.
IPC_LIMITS = {"/proc/sys/kernel/shmmni": "0", "/proc/sys/kernel/msgmni": "0",
              "/proc/sys/kernel/sem": "250 32000 32 0", "/proc/sys/fs/mqueue/queues_max": "0"}
STACK_BYTES = 512 * 1024 * 1024  # deep recursion in solutions (lru_cache recursion uses the C stack)
RESULT_FD = 3  # call mode: b"R" + the return value's JSON, or b"U" + why it is not JSON
STATUS_FD = 4  # see child_main
STDIN_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
MAX_FD = 1 << 16
COMPILE_IN_HELPER_BYTES = 1 << 20  # larger sources: each child compiles them itself
COMPILE_ERRORS = (SyntaxError, ValueError, RecursionError, OverflowError)  # MemoryError is the limit's
MAX_COMPILED_BYTES = 16 << 20  # a larger code object is compiled by each child instead of kept
# The program's file name in its code: tracebacks and warnings name it as they would for
# `python3 solution.py`, not by the run directory it happens to run in.
PROGRAM_NAME = "solution.py"
# Set by prepare_worker(): what every child uses as it is.
CHILD_DIRECTORY = CHILD_FILE = CHILD_MAIN = None
CHILD_ARGV = ["solution.py"]
CHILD_STREAMS = ()
CHILDREN_FILE = None
WORKER_STDERR = None  # the worker's own stderr stream, kept apart from the children's
SHARED_TMP = {}  # isolated workers: shared temp directory -> (size, mtime) after the last clean-up
KEEP_IN_SHARED_TMP = set()
RETIRING = False
RUN_UID = None  # bytes, as /proc/key-users writes it
CGROUP = None  # the worker's RunCgroup, where the sandbox made one
RUN_CGROUP = "run"  # the leaf, inside the worker's cgroup, that runs join (sandbox.RUN_CGROUP)
# More than this still charged to the cgroup after a run's clean-up and a reclaim means
# something of the run outlived it (page cache it read is reclaimed; its files are gone):
# the worker retires, so the next run starts from zero in a fresh cgroup.
CGROUP_HELD_AFTER_RUN_BYTES = 64 << 20


def high_fd(fd):
    """`fd` moved to 10 or above (close-on-exec), clear of the fds 0-4 runs use."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class RunCgroup:
    """The worker's memory (and pids) cgroup, which holds the run's limits, and the leaf
    cgroup inside it (RUN_CGROUP) that each run joins as it starts: the kernel then charges
    all the run holds, its heap and also its memory files and tmpfs files (which its
    address-space limit does not see), against the run's memory limit, and bounds its
    processes by pids.max. The worker stays outside, so the OOM killer there finds only the
    run's processes. The sandbox made the cgroups and passed their directories as fds: they
    name the host's cgroup mounts, which stay writable through them while the worker's own
    copies of every mount are read-only; and they carry the sandbox's lock on each cgroup,
    which this worker holds, by keeping them open, for as long as it lives.

    The limits sit above the run's leaf because a cgroup namespace is rooted at the cgroup
    its maker is in: were a run to make one and mount the cgroup filesystem in it (the
    seccomp filter refuses that, see `run_syscall_filter`), the files it found would be the
    leaf's, whose limits do not lift the ones above them."""

    def __init__(self, config):
        self.version = config["version"]
        named = {name: high_fd(config[f"{name}_fd"]) for name in ("memory", "pids", "cpu", "cpuacct")
                 if config.get(f"{name}_fd") is not None}
        self.directories = list(named.values())  # kept open: they hold the lock
        self.directory = named["memory"]
        limit, swap_limit, events, usage = {
            1: ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.oom_control", "memory.usage_in_bytes"),
            2: ("memory.max", None, "memory.events", "memory.current"),
        }[self.version]
        leaf = RUN_CGROUP + "/"
        # A run joins the memory and pids leaves (v2: the one leaf of all controllers); the
        # worker stays out of them, so the OOM killer there finds only the run.
        joined = [named["memory"], *([named["pids"]] if "pids" in named else [])]
        self.join_fds = [self.open(leaf + "cgroup.procs", os.O_WRONLY, directory) for directory in joined]
        # v1: memory, then memory + swap (where swap is accounted), which may not be below it.
        self.limit_fds = [self.open(limit, os.O_RDWR)]
        try:
            if swap_limit:
                self.limit_fds.append(self.open(swap_limit, os.O_WRONLY))
        except FileNotFoundError:  # the kernel does not account swap
            pass
        self.pids_fd = None  # v2: in the memory cgroup's directory; v1: in the pids hierarchy's
        if self.version == 2 or "pids" in named:
            try:
                self.pids_fd = self.open("pids.max", os.O_WRONLY, named.get("pids", self.directory))
            except FileNotFoundError:  # v2 without the pids controller
                pass
        # The CPU time of all the run's processes: v2's cpu.stat (every cgroup has one), which
        # counts the leaf's processes in the worker's cgroup above it. In v1 the cpu and
        # cpuacct hierarchies hold no limit the OOM killer acts on, so the worker itself joins
        # its cgroups there and every run it forks starts inside (a join per run costs ~13 us
        # per hierarchy); cpuacct.usage then counts the worker too, whose own CPU time is
        # taken off (cpu_seconds), and the quota holds the worker and its run together, one
        # of which waits while the other computes.
        self.cpu_fd = None
        self.own_cpu_at_join = None  # v1: the worker's own CPU time when it joined (None: not inside)
        try:
            if self.version == 2:
                self.cpu_fd = self.open("cpu.stat", os.O_RDONLY)
            elif "cpuacct" in named or "cpu" in named:
                for name in ("cpu", "cpuacct"):
                    if name in named:
                        join = self.open("cgroup.procs", os.O_WRONLY, named[name])
                        os.write(join, b"0")
                        os.close(join)
                self.own_cpu_at_join = time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID)
                self.cpu_fd = self.open("cpuacct.usage", os.O_RDONLY, named.get("cpuacct", named.get("cpu")))
        except FileNotFoundError:
            pass
        self.cpu_quota = config.get("cpu_quota_cores")  # cores the runs get in all (None: no quota)
        # v1 counts an OOM kill in the killed process's own cgroup only (the leaf); v2 counts
        # it in every cgroup above too, and the leaf (no controller enabled for it) is charged
        # to ours anyway.
        self.events_fd = self.open((leaf if self.version == 1 else "") + events, os.O_RDONLY)
        self.usage_fd = self.open(usage, os.O_RDONLY)
        self.oom_kills = self.read_oom_kills()

    def open(self, name, flags, directory=None):
        return high_fd(os.open(name, flags | os.O_CLOEXEC, dir_fd=self.directory if directory is None else directory))

    def join(self):
        """In the run's process, before anything else: "0" is the writer itself."""
        for fd in self.join_fds:
            os.write(fd, b"0")

    def set_limits(self, memory_bytes, processes):
        """Before every run: memory.max (v1: memory.limit_in_bytes and
        memory.memsw.limit_in_bytes, so that no swap takes the run's memory files past it) =
        the run's memory limit, and pids.max = its process limit. Written every time, never
        skipped as already set: a run that could change them (one that is root, with
        `isolation="none"`) must not leave the next run its own. A cgroup that refuses
        (removed under us) fails the run and retires the worker."""
        global RETIRING
        try:
            current = os.pread(self.limit_fds[0], 64, 0).strip()
            lowering = current == b"max" or memory_bytes < int(current)
            # v1 keeps memory + swap >= memory at every step: lower memory first, raise it last.
            for fd in self.limit_fds if lowering else self.limit_fds[::-1]:
                os.write(fd, str(memory_bytes).encode())
            if self.pids_fd is not None:
                os.write(self.pids_fd, str(processes).encode())
        except OSError:
            RETIRING = True
            raise

    def read_oom_kills(self):
        """The cgroup's OOM kill count (the `oom_kill` line of memory.oom_control in v1,
        memory.events in v2)."""
        for line in os.pread(self.events_fd, 4096, 0).split(b"\n"):
            if line.startswith(b"oom_kill "):
                return int(line.split()[1])
        return 0

    def oom_kills_of_run(self):
        """How many of the run's processes the kernel killed at the limit."""
        before, self.oom_kills = self.oom_kills, self.read_oom_kills()
        return self.oom_kills - before

    def held(self):
        return int(os.pread(self.usage_fd, 64, 0))

    def cpu_seconds(self):
        """CPU seconds the worker's runs have used, all their processes, ever (a counter;
        in v1 the cgroup's count less the worker's own)."""
        text = os.pread(self.cpu_fd, 4096, 0)
        if self.version == 1:
            own = time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID) - self.own_cpu_at_join
            return int(text) / 1e9 - own
        for line in text.split(b"\n"):
            if line.startswith(b"usage_usec "):
                return int(line.split()[1]) / 1e6
        raise OSError("cpu.stat has no usage_usec line")

    def released(self):
        """True when no more than CGROUP_HELD_AFTER_RUN_BYTES stay charged once the run is
        gone and its files removed (after reclaiming page cache, should more be)."""
        if self.held() <= CGROUP_HELD_AFTER_RUN_BYTES:
            return True
        if self.version == 1:
            name, value = "memory.force_empty", b"0"
        else:
            name, value = "memory.reclaim", str(self.held()).encode()
        try:
            fd = self.open(name, os.O_WRONLY)
            try:
                os.write(fd, value)
            finally:
                os.close(fd)
        except OSError:  # v2 says EAGAIN when it could not reclaim all it was asked
            pass
        return self.held() <= CGROUP_HELD_AFTER_RUN_BYTES


def become(uid):
    """Drop to the run uid: no supplementary groups, that gid and uid."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def check(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def mount(source, target, fstype, flags, data=None):
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    check(LIBC.mount(encode(source), encode(target), encode(fstype), flags, encode(data)), f"mount {target}")


def is_under(path, parent):
    return path == parent or path.startswith(parent.rstrip("/") + "/")


class MountAttributes(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def make_read_only_recursively(path):
    """mount_setattr(AT_RECURSIVE, MOUNT_ATTR_RDONLY) (Linux 5.12+): every mount under `path`
    read-only in this mount namespace. False where the kernel cannot."""
    attributes = MountAttributes(MOUNT_ATTR_RDONLY, 0, 0, 0)
    return LIBC.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), AT_RECURSIVE,
                        ctypes.byref(attributes), ctypes.sizeof(attributes)) == 0


def isolate_filesystem(hidden, site_paths):
    """Make the whole tree read-only (no world-writable corner such as /run/lock is left to
    write to), cover each hidden directory with an empty tmpfs (writable only where it is
    /tmp, /var/tmp or /dev/shm), then bind the Python installation back (read-only) where
    it lay under one of them, so imports keep working."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    read_only = make_read_only_recursively("/")
    keep = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, *site_paths)}
    keep = sorted(p for p in keep if os.path.isdir(p))
    keep = [p for p in keep if not any(p != q and is_under(p, q) for q in keep)]
    hidden = sorted({os.path.realpath(h) for h in hidden if os.path.isdir(h) and os.path.realpath(h) != "/"})
    # A directory inside the Python installation (a dataset a package ships) is covered
    # after the installation is bound back, or the binding would show it again.
    inside_kept = [h for h in hidden if any(is_under(h, p) for p in keep)]
    hidden = [h for h in hidden if h not in inside_kept and not any(h != g and is_under(h, g) for g in hidden)]
    kept_fds = {p: os.open(p, os.O_PATH) for p in keep if any(is_under(p, h) for h in hidden)}
    for directory in hidden:
        shared = directory in ("/tmp", "/var/tmp", "/dev/shm")  # runs may write there; it is memory
        options = "mode=1777,size=512m" if shared else "mode=755,size=4m"
        mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, options)
    for path, fd in kept_fds.items():
        os.makedirs(path, exist_ok=True)
        mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
        os.close(fd)
    for directory in hidden:  # written only to bind the installation back: read-only from here
        if directory not in ("/tmp", "/var/tmp", "/dev/shm"):
            mount(None, directory, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for directory in inside_kept:
        if not any(is_under(p, directory) for p in keep):  # never the installation itself, nor above it
            mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "mode=755,size=4k")
    return read_only


SET_TAG = "\x00set"
"""A returned set or frozenset travels as {SET_TAG: [items]}, so that the judge can tell it
from a list (Python: {1, 2} != [1, 2]). A dict key that starts with NUL gets one more NUL
in front, so that no dict the program returns reads as a set. compare.py undoes both."""


def to_jsonable(value, depth=0):
    """The child's return value as plain JSON data: tuples become lists, sets are tagged
    (SET_TAG), dict keys become strings."""
    if depth > 200:
        raise ValueError("return value nested too deeply")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [to_jsonable(item, depth + 1) for item in value]
    if isinstance(value, (set, frozenset)):
        items = [to_jsonable(item, depth + 1) for item in value]
        try:  # sorted only so that the same set always reads the same in a reason
            items.sort()
        except TypeError:
            items.sort(key=repr)
        return {SET_TAG: items}
    if isinstance(value, dict):
        return {_escaped_key(str(key)): to_jsonable(item, depth + 1) for key, item in value.items()}
    raise TypeError(f"cannot serialise a {type(value).__name__}")


def _escaped_key(key):
    return "\x00" + key if key.startswith("\x00") else key


def resolve_entry_point(namespace, entry_point):
    """`name` -> a function; `Class().method` -> the method of a fresh instance."""
    if "()." in entry_point:
        class_name, method = entry_point.split("().", 1)
        return getattr(namespace[class_name](), method)
    return namespace[entry_point]


def std_streams(startup_streams):
    """sys.std* over fds 0-2, made as the interpreter makes them at start-up (`create_stdio`
    in CPython's Python/pylifecycle.c), because programs read their attributes (a common
    fast-I/O template tests `"r" in sys.stdout.mode`): raw files named "<stdin>" and so
    on, buffers the size of the files' block (which decides where `os.write(1, ...)` lands
    among buffered prints), text layers with `newline="\\n"` (no translation: "\\r\\n" input
    keeps its "\\r"), the start-up streams' encoding and errors, `mode` set, and stderr
    line-buffered. Made once in the worker while fds 0-2 are /dev/null; each child moves
    its own files onto those fds."""
    probe = os.memfd_create("probe")  # the kind of file a run's streams are
    try:
        block_size = os.fstat(probe).st_blksize
    finally:
        os.close(probe)
    streams = []
    for fd, mode, startup in zip(range(3), "rww", startup_streams):
        raw = io.FileIO(fd, mode, closefd=False)
        raw.name = ("<stdin>", "<stdout>", "<stderr>")[fd]
        buffered = (io.BufferedReader if mode == "r" else io.BufferedWriter)(raw, block_size)
        text = io.TextIOWrapper(buffered, encoding=startup.encoding, errors=startup.errors, newline="\n",
                                line_buffering=fd == 2, write_through=False)
        text.mode = mode
        streams.append(text)
    return tuple(streams)


def main_module(path):
    """A `__main__` module as `python3 path` starts it: the names and their order of
    `add_main_module` and `_PyRun_SimpleFileObject` in CPython."""
    module = types.ModuleType("__main__")
    module.__loader__ = sys.modules["_frozen_importlib_external"].SourceFileLoader("__main__", path)
    module.__annotations__ = {}
    module.__builtins__ = builtins
    module.__file__ = path
    module.__cached__ = None
    return module


def finish(code, program_globals=None, first_own_name=0, interrupted=False):
    """Exit as the interpreter does (`Py_FinalizeEx`, then `Py_RunMain`), in its order:
    wait for non-daemon threads; run the atexit handlers (their failures are reported,
    the status stays); flush sys.stdout and sys.stderr (a failure makes the status 120);
    restore the std streams from sys.__std*__ and clear the program's
    globals (from `first_own_name` on: the names the program added to its module), which
    runs `__del__` methods and lets file objects the program left open flush as they go;
    collect garbage (cycles among those objects); flush the original streams (failures ignored: they are finalizers); an uncaught
    KeyboardInterrupt ends by SIGINT. Then `os._exit`: the rest of finalization concerns
    the worker's objects, not the program's."""
    try:
        if "threading" in sys.modules:  # only then can there be threads to wait for
            sys.modules["threading"]._shutdown()
    except BaseException as error:  # noqa: BLE001 - reported, as CPython does
        report_unraisable(error, "threading._shutdown")
    try:
        atexit._run_exitfuncs()  # reports its handlers' exceptions itself
    except BaseException:  # noqa: BLE001
        pass
    if not flush_std_files():
        code = 120
    sys.stdin, sys.stdout, sys.stderr = (getattr(sys, name, None) for name in ("__stdin__", "__stdout__", "__stderr__"))
    if program_globals is not None:
        clear_globals(program_globals, first_own_name)
        collect_garbage()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a stream's finalizer failing changes nothing
            pass
    if interrupted:  # CPython's exit_sigint()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 130
    os._exit(code)


def collect_garbage():
    """A collection of the program's objects (the worker's are frozen). A full one costs
    a child ~0.15 ms however few objects there are (it empties the free lists), so it is
    done only when some of the program's objects have reached the oldest generation."""
    gc.collect(2 if gc.get_objects(generation=2) else 1)


def flush_std_files():
    """CPython's flush_std_files(): flush sys.stdout and sys.stderr unless None or closed;
    False when one fails (stdout's failure is reported)."""
    ok = True
    for stream in (sys.stdout, sys.stderr):
        if stream is None:
            continue
        try:
            if stream.closed:
                continue
        except BaseException:  # noqa: BLE001 - no `closed`: treated as open
            pass
        try:
            stream.flush()
        except BaseException as error:  # noqa: BLE001
            if stream is sys.stdout:
                report_unraisable(error, stream)
            ok = False
    return ok


def report_unraisable(error, owner):
    """What CPython's default unraisable hook writes, on fd 2 (sys.stderr may be the
    stream that failed)."""
    try:
        text = f"Exception ignored in: {owner!r}\n" + "".join(traceback.format_exception(error))
        os.write(2, text.encode("utf-8", "backslashreplace"))
    except BaseException:  # noqa: BLE001
        pass


def clear_globals(namespace, first):
    """`_PyModule_ClearDict` on the names from position `first` on: names with a single
    leading underscore first, then the rest, set to None in order. Only the program's own
    names: the ones before `first` are the worker's, and touching them would copy their
    pages in every child. (A program that rebinds one of those keeps it to the end.)"""
    own = list(itertools.islice(reversed(namespace), max(0, len(namespace) - first)))[::-1]
    for single_underscore in (True, False):
        for name in own:
            if not isinstance(name, str) or name == "__builtins__":
                continue
            if single_underscore and not (name[:1] == "_" and name[1:2] != "_"):
                continue
            try:
                if namespace.get(name) is not None:
                    namespace[name] = None
            except BaseException as error:  # noqa: BLE001 - a __del__ failing: reported, as CPython does
                report_unraisable(error, None)


def exit_code_of(error):
    """The exit status of an uncaught SystemExit (CPython's handle_system_exit): None is
    0, an int its low byte (-1 where it does not fit a C long), anything else is written
    to stderr and gives 1."""
    code = error.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if -(1 << 63) <= code < (1 << 63) else 0xFF
    try:
        if sys.stderr is not None:
            sys.stderr.write(str(code))
            sys.stderr.write("\n")
        else:
            os.write(2, str(code).encode("utf-8", "backslashreplace") + b"\n")
    except BaseException:  # noqa: BLE001
        pass
    return 1


def report_uncaught(error):
    """An uncaught exception, as CPython's PyErr_Print reports it: sys.last_* set, then
    sys.excepthook (the program may have its own) on the traceback without our frames
    (the exception's own `__traceback__` too: the default hook prints that one)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    error.__traceback__ = tb
    sys.last_type, sys.last_value, sys.last_traceback = type(error), error, tb
    hook = getattr(sys, "excepthook", None)
    try:
        if hook is None:
            raise RuntimeError("lost sys.excepthook")
        if hook is sys.__excepthook__ and sys.stderr is not None:
            # The default hook's own printer, in Python: it finds the program's lines
            # through linecache (compiled_program), where CPython's C printer reads the
            # file, which the program does not have.
            sys.stderr.write("".join(traceback.format_exception(type(error), error, tb)))
        else:
            hook(type(error), error, tb)
    except BaseException as hook_error:  # noqa: BLE001
        try:
            text = "Error in sys.excepthook:\n" + "".join(traceback.format_exception(hook_error))
            text += "\nOriginal exception was:\n" + "".join(traceback.format_exception(type(error), error, tb))
            os.write(2, text.encode("utf-8", "backslashreplace"))
        except BaseException:  # noqa: BLE001
            pass


_preludes = {}
AST_ONLY = 0x400  # ast.PyCF_ONLY_AST, without importing ast into every child


def prepared_prelude(text):
    """(module, code left to run) for a call problem's prelude, made once in the worker.

    The prelude's leading imports of modules the worker already holds (the usual
    `from typing import *` and friends) run here, into a module object that every child
    inherits and uses as its own fresh copy: bound here once, not name by name in each
    child. Whatever follows (constants, helper classes) is the dataset's code and runs in
    the child, like the program."""
    if text not in _preludes:
        if len(_preludes) >= 32:  # each holds a namespace every fork copies the page tables of
            _preludes.clear()
        with warnings.catch_warnings():  # dataset code: its warnings are not the caller's business
            warnings.simplefilter("ignore")
            tree = compile(text, "prelude.py", "exec", AST_ONLY)
            body = tree.body
            split = 0
            while split < len(body) and is_loaded_import(body[split]):
                split += 1
            module = types.ModuleType("solution")
            module.__builtins__ = builtins
            exec(compile(type(tree)(body=body[:split], type_ignores=[]), "prelude.py", "exec"), module.__dict__)
            rest = compile(type(tree)(body=body[split:], type_ignores=[]), "prelude.py", "exec") if body[split:] else None
        _preludes[text] = (module, rest)
    return _preludes[text]


def is_loaded_import(node):
    """An `import a.b` or `from a import ...` statement whose modules are all loaded."""
    kind = type(node).__name__
    if kind == "Import":
        return all(alias.name in sys.modules for alias in node.names)
    if kind != "ImportFrom" or node.level != 0 or node.module not in sys.modules or node.module == "__future__":
        return False
    # Names the module already has, and nothing else: `from json import tool` would load a
    # submodule into the worker for good.
    held = vars(sys.modules[node.module])
    return all(alias.name == "*" or alias.name in held for alias in node.names)


_program = (None, None)  # (source, compiled_program's answer) of the latest program only


def non_utf8_source(source, position):
    """CPython's error for a program file that is not UTF-8 and declares no encoding (a
    str with a lone surrogate, which the sandbox sends as its surrogatepass bytes)."""
    line = source.count(b"\n", 0, position) + 1
    return (f"SyntaxError: Non-UTF-8 code starting with '\\x{source[position]:02x}' in file {PROGRAM_NAME} "
            f"on line {line}, but no encoding declared; see https://peps.python.org/pep-0263/ for details\n").encode()


def compiled_program(source, request, uid):
    """(code, what compiling printed, syntax error text) for a program, compiled once for
    all the tests of a sample (they arrive one after another) so that every test's child
    inherits the code object. Only the latest program is kept: a run must not find other
    samples' programs in the memory it inherits."""
    global _program
    if _program[0] != source:
        _program = (None, None)
        # The program's lines for tracebacks (a lazy linecache entry, read only when one
        # is printed): the source is not a file the run could read.
        linecache.cache[PROGRAM_NAME] = (lambda: source,)
        _program = (source, compile_in_helper(source, request, uid))
    return _program[1]


def compile_in_helper(source, request, uid):
    """Compile in a forked helper under the run's memory and CPU limits and uid, and take
    the code object back marshalled. Compiling runs none of the program, but a few KB of
    source can make the compiler take gigabytes and seconds (nested finally blocks are
    compiled once per way out), which the worker itself must never spend. Whatever the
    helper cannot do within the limits (code None) the child compiles itself, under the
    same limits, and meets the same end."""
    if len(source) > COMPILE_IN_HELPER_BYTES:
        return None, b"", None
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.closerange(3, write_fd)
            os.closerange(write_fd + 1, MAX_FD)
            for limit, value in limits_for(request, uid)[:2]:  # CPU and address space
                resource.setrlimit(limit, value)
            if uid is not None:
                become(uid)
            with warnings.catch_warnings(record=True) as caught:
                try:
                    answer = ["code", marshal.dumps(compile(source, PROGRAM_NAME, "exec"))]
                except MemoryError:
                    answer = ["child", b""]
                except COMPILE_ERRORS as error:
                    answer = ["error", "".join(traceback.format_exception(error, limit=0)).encode()]
            notes = "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line) for w in caught)
            write_all(write_fd, marshal.dumps((*answer, notes.encode())))
        finally:
            os._exit(0)
    os.close(write_fd)
    try:
        data = read_within(read_fd, MAX_COMPILED_BYTES, request["wall_limit_s"])
    finally:
        os.close(read_fd)
        if data is None:
            os.kill(pid, signal.SIGKILL)
        _, status, rusage = os.wait4(pid, 0)
    # Compiling is the program's cost: one that takes longer than a test may, each child
    # compiles again and meets the limit itself. So does anything the helper did not finish.
    if not data or status != 0 or rusage.ru_utime + rusage.ru_stime > request["time_limit_s"]:
        return None, b"", None
    try:
        kind, blob, notes = marshal.loads(data)
        if kind == "code":
            return marshal.loads(blob), notes, None
    except (EOFError, ValueError, TypeError):
        return None, b"", None
    if kind == "error":
        return None, notes, blob
    return None, b"", None


def read_within(fd, cap, seconds):
    """All a pipe's data until EOF, or None past `cap` bytes or `seconds`."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + seconds
    chunks, size = [], 0
    while size <= cap:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not poller.poll(remaining * 1000):
            return None
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
    return None


def child_main(request, program, compile_notes, prelude, fds, limits, uid, source=""):
    """Runs in the forked child; never returns. Everything that can be done once in the
    worker is (see `prepare_worker`): on these machines each page a child writes costs a
    copy-on-write fault, so the child does as little as it can.

    Until the candidate's code starts, the child reports on STATUS_FD (a pipe only it
    holds): b"P" the problem's prelude failed, b"C" what follows is the program's doing
    (compiling it, when the worker's helper could not, then running it), b"S" it does not
    compile. Then it closes the pipe, so nothing the candidate does can write a status (a
    program that wrote b"P" could turn its own failure into a judge error).

    `program` is the code object, or the source where the worker's helper could not
    compile it; `prelude` is prepared_prelude()'s answer for call problems, else None.
    A request with `harness: "livecodebench"` runs it as LiveCodeBench's grader does
    (`_livecodebench`, which needs the `source` text)."""
    try:
        os.setsid()
        for target, fd in enumerate(fds):  # stdin, stdout, stderr, the result file, the status pipe
            os.dup2(fd, target)
        if CGROUP is not None:  # before anything else: all the run does from here on is charged there
            CGROUP.join()
        os.closerange(STATUS_FD + 1, MAX_FD)
        for limit, value in limits:
            resource.setrlimit(limit, value)
        if uid is not None:
            become(uid)
        elif CAPABILITIES_TO_DROP:
            drop_capabilities()
        LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)  # the worker's backstop handlers are not the program's
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        sys.argv = CHILD_ARGV
        sys.path.insert(0, CHILD_DIRECTORY)
        sys.stderr = sys.__stderr__ = CHILD_STREAMS[2]  # stdin and stdout already are
        arm_cpu_timer(request["time_limit_s"])
    except BaseException:  # noqa: BLE001 - set-up failed: report it, never run the program
        os.write(2, traceback.format_exc().encode())
        os._exit(242)  # no b"C": the sandbox's failure, not the program's

    if prelude is not None:  # a call problem: the module the worker prepared, and the rest of the prelude
        module, rest = prelude
        sys.modules["solution"] = module
    else:
        module = CHILD_MAIN
        sys.modules["__main__"] = module
    namespace = module.__dict__
    first_own_name = len(namespace)  # what finish() clears starts here: the rest is the worker's
    if prelude is not None and rest is not None:  # the problem's own code: its failure is the problem's
        try:
            exec(rest, namespace)
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
            os.write(STATUS_FD, b"P")
            finish(1)
    os.write(STATUS_FD, b"C")  # from here on, what happens is the program's doing
    if compile_notes:  # what the interpreter would have printed while compiling
        os.write(2, compile_notes)
    code = program
    if isinstance(program, str):  # the worker's helper could not compile it within the limits: here
        try:
            code = compile(program, PROGRAM_NAME, "exec")
        except COMPILE_ERRORS:
            traceback.print_exc(limit=0)
            os.write(STATUS_FD, b"S")
            finish(1)
        except BaseException:  # noqa: BLE001 - MemoryError: the memory limit, met while compiling
            traceback.print_exc(limit=0)
            finish(1)
    os.close(STATUS_FD)  # before any of the candidate's code runs
    if request.get("harness") == "livecodebench":
        hide_frames_from_recursion_limit(stack_depth())
        try:
            if request["kind"] == "call":
                _livecodebench.run_call(namespace, code, source, request["entry_point"], request["arguments"], RESULT_FD)
            _livecodebench.run_stdio(source, 1)
        finally:  # they exit; nothing of theirs may return into the worker's code
            os._exit(1)
    # In `python3 solution.py` the program's module is the stack's first frame; here our
    # frames lie below it. The limit counts them too, so it is raised by their number and
    # the program reads and sets it net of them: it gets CPython's depth (what recurses
    # 999 deep there does here; "[Previous line repeated 996 more times]") and its value.
    hide_frames_from_recursion_limit(stack_depth())
    status, interrupted = 0, False
    try:
        exec(code, namespace)
        if request["kind"] == "call":
            call_entry_point(namespace, request)
    except SystemExit as error:
        status = exit_code_of(error)
    except BaseException as error:  # noqa: BLE001 - the program's uncaught exception
        report_uncaught(error)
        status, interrupted = 1, isinstance(error, KeyboardInterrupt)
        del error
    finish(status, namespace, first_own_name, interrupted)


def hide_frames_from_recursion_limit(frames):
    get_limit, set_limit = sys.getrecursionlimit, sys.setrecursionlimit

    def getrecursionlimit():
        return get_limit() - frames

    def setrecursionlimit(limit, /):
        limit = operator.index(limit)  # CPython's TypeError for a non-integer
        if limit < 1:
            raise ValueError("recursion limit must be greater or equal than 1")
        set_limit(limit + frames)

    getrecursionlimit.__doc__, setrecursionlimit.__doc__ = get_limit.__doc__, set_limit.__doc__
    set_limit(get_limit() + frames)
    sys.getrecursionlimit, sys.setrecursionlimit = getrecursionlimit, setrecursionlimit


def stack_depth():
    """The number of Python frames on the stack, the caller's included."""
    depth, frame = 0, sys._getframe(1)
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    return depth


def call_entry_point(namespace, request):
    """Call the entry point on the test's arguments and write the return value to
    RESULT_FD. A function of its own so that, as after a plain call, the instance, the
    arguments and the value are gone (their `__del__` run) before the exit handlers."""
    function = resolve_entry_point(namespace, request["entry_point"])
    arguments = [json.loads(line) for line in request["arguments"]]
    value = function(*arguments)
    try:
        encoded = json.dumps(to_jsonable(value)).encode()
    except (TypeError, ValueError) as error:
        os.write(RESULT_FD, b"U" + str(error)[:300].encode())
    else:
        write_all(RESULT_FD, b"R" + encoded)


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(SockFilter))]


# System calls runs may not make, by architecture (audit arch, then numbers):
# - the kernel keyring calls (add_key, request_key, keyctl): keys are not namespaced and
#   outlive a run, so a run could leave them for later ones to read;
# - unshare and setns, and clone with a CLONE_NEW* flag: in a user namespace of its own a
#   run would hold every capability again, and with it could mount a cgroup filesystem of
#   its own and write its cgroup's limits where those files are its uid's (runs that keep
#   the caller's uid); clone3, whose flags lie in memory a filter cannot read, says ENOSYS,
#   on which glibc falls back to clone;
# - mount, umount2, pivot_root and the new mount API (open_tree, move_mount, fsopen,
#   fsconfig, fsmount, fspick, mount_setattr, open_tree_attr): refused even where a
#   namespace slipped past the above;
# - socket for AF_UNIX, and socketpair for datagram sockets: the network namespace holds
#   only abstract sockets, and a socket file on a host path the run can see (a cluster
#   agent's, dbus's, journald's; read-only mounts do not stop a connect) would take its
#   connection. A datagram socket sends to any address however it was made; a stream or
#   seqpacket pair (multiprocessing, asyncio) is connected for good, so it stays;
# - io_uring_setup, io_uring_enter and io_uring_register: a ring's requests (its own socket
#   and connect among them) are made by the kernel, past this filter;
# - flock, and fcntl's F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW and F_SETLEASE: a lock
#   or lease on a host file the run can read would block a host process that takes it, for
#   as long as the run lives. Refused (EPERM), not answered 0 with nothing held: a program
#   locking its own files (sqlite3 on a file) fails, saying so, rather than lose the
#   exclusion it asked for in silence. F_GETLK and F_OFD_GETLK stay.
RUN_REFUSED_SYSCALLS = {
    "x86_64": (0xC000003E, {
        "keyring": (248, 249, 250), "namespaces": (272, 308),
        "mounts": (165, 166, 155, 428, 429, 430, 431, 432, 433, 442, 467),
        "io_uring": (425, 426, 427), "flock": 73,
        "clone": 56, "clone3": 435, "socket": 41, "socketpair": 53, "fcntl": 72}),
    "aarch64": (0xC00000B7, {
        "keyring": (217, 218, 219), "namespaces": (97, 268),
        "mounts": (40, 39, 41, 428, 429, 430, 431, 432, 433, 442, 467),
        "io_uring": (425, 426, 427), "flock": 32,
        "clone": 220, "clone3": 435, "socket": 198, "socketpair": 199, "fcntl": 25}),
}
# CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID,
# CLONE_NEWNET (CLONE_NEWTIME, 0x80, is part of clone's exit signal, and only clone3 and
# unshare take it).
CLONE_NEW_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
AF_UNIX, SOCK_DGRAM, SOCK_TYPE_MASK = 1, 2, 0xF  # socket(2): the type's low bits, below its flags
F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW, F_SETLEASE = 6, 7, 37, 38, 1024
ENOSYS, EPERM = 38, 1


def run_syscall_filter():
    """A seccomp program refusing with EPERM the calls of RUN_REFUSED_SYSCALLS (clone,
    socket, socketpair and fcntl only with the arguments said there; and, on x86_64, every
    x32 and 32-bit entry point, under whose numbers they would slip through), clone3 with
    ENOSYS; None on other architectures. Installed on the worker, so every run,
    and every process a run makes, has it."""
    import platform

    if platform.machine() not in RUN_REFUSED_SYSCALLS:
        return None
    arch, calls = RUN_REFUSED_SYSCALLS[platform.machine()]
    load, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ/JGE/JSET|K, BPF_RET|K
    mask = 0x54  # BPF_ALU|BPF_AND|K
    allow, errno = 0x7FFF0000, 0x00050000  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | the errno
    # offsets in seccomp_data; of an argument, the low half (the kernel reads these as ints)
    nr, arch_offset, first_argument, second_argument = 0, 4, 16, 24
    refused = [*calls["keyring"], *calls["namespaces"], *calls["mounts"], *calls["io_uring"], calls["flock"]]
    program = [  # jump targets by name, resolved below
        (load, 0, 0, arch_offset),
        (jeq, 1, 0, arch),
        (ret, 0, 0, errno | EPERM),  # another architecture's entry point
        (load, 0, 0, nr),
        (jge, "refuse", 0, 0x40000000),  # x32
        *[(jeq, "refuse", 0, number) for number in refused],
        (jeq, "no such call", 0, calls["clone3"]),
        (jeq, "clone", 0, calls["clone"]),
        (jeq, "socket", 0, calls["socket"]),
        (jeq, "socketpair", 0, calls["socketpair"]),
        (jeq, "fcntl", "allow", calls["fcntl"]),
        "clone", (load, 0, 0, first_argument),  # the flags
        (jset, "refuse", "allow", CLONE_NEW_FLAGS),
        "socket", (load, 0, 0, first_argument),  # the family
        (jeq, "refuse", "allow", AF_UNIX),
        "socketpair", (load, 0, 0, second_argument),  # the type
        (mask, 0, 0, SOCK_TYPE_MASK),
        (jeq, "refuse", "allow", SOCK_DGRAM),
        "fcntl", (load, 0, 0, second_argument),  # the command
        *[(jeq, "refuse", 0, command) for command in (F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW, F_SETLEASE)],
        "allow", (ret, 0, 0, allow),
        "refuse", (ret, 0, 0, errno | EPERM),
        "no such call", (ret, 0, 0, errno | ENOSYS),
    ]
    labels, instructions = {}, []
    for item in program:
        if isinstance(item, str):
            labels[item] = len(instructions)
        else:
            instructions.append(item)
    resolved = []
    for index, (code, if_true, if_false, value) in enumerate(instructions):
        jump = lambda target: target if isinstance(target, int) else labels[target] - index - 1  # noqa: E731
        resolved.append(SockFilter(code, jump(if_true), jump(if_false), value))
    filters = (SockFilter * len(resolved))(*resolved)
    return SockFprog(len(resolved), filters), filters  # keep the array alive beside the pointer


class CapabilityHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapabilityData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities():
    """Without a uid of its own (a user namespace where the run is its root), a run keeps
    the namespace's capabilities and could unmount the tmpfs that hides the caller's
    files. Empty the bounding set (no exec can bring them back) and every set."""
    for capability in CAPABILITIES_TO_DROP:
        LIBC.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0)
    header = CapabilityHeader(LINUX_CAPABILITY_VERSION_3, 0)
    check(LIBC.capset(ctypes.byref(header), ctypes.byref((CapabilityData * 2)())), "capset")


class RunWait:
    """What the worker's timer handlers know of the run it waits for (one instance, WAIT)."""

    __slots__ = ("pid", "killed", "last_wall", "last_cpu", "cpu_limit", "latest", "wall_deadline",
                 "tree_cpu_base", "cores")

    def __init__(self):
        self.pid = None  # the run's main process; None while no run is waited for
        self.killed = False  # the backstop (or a stop) killed it
        self.last_wall = self.last_cpu = 0.0  # the last look past the wall-clock limit
        self.cpu_limit = 0.0
        self.latest = None  # the latest time the backstop may be put off to (None: no caller's deadline)
        self.wall_deadline = 0.0  # monotonic time of the wall-clock limit
        self.tree_cpu_base = None  # the cgroup's CPU counter at the fork (None: not counted there)
        self.cores = 1.0  # the most CPU the run's processes can use together, in cores

    def cpu(self):
        """CPU seconds the run has used so far: all its processes where the cgroup counts
        them, else its main process alone."""
        if self.tree_cpu_base is not None:
            return CGROUP.cpu_seconds() - self.tree_cpu_base
        return time.clock_gettime(process_cpu_clock(self.pid))


WAIT = RunWait()
# A stop (SIGUSR1) that came while no run was waited for: the caller stopping the run it
# sent (sandbox.RunStop) before its child started. Cleared as each request is read: a
# stop the caller sent for an earlier run has been handled by then (see RunStop.stop).
STOP_REQUESTED = [False]
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
        STOP_REQUESTED[0] = True


def wait_with_backstop(pid, request, started, tree_cpu_base):
    """Wait for the child; SIGKILL its group when the wall clock runs out (see on_backstop),
    or when its processes together reach the CPU limit (`tree_cpu_base`: the cgroup's CPU
    counter at the fork, None where there is none). Returns (wait status, rusage, killed
    by the backstop).

    One blocking wait4 under a real-time timer, and nothing else: until the child exits,
    every page of ours it shares that we write costs us a copy (the child's writes are its
    own cost), so the worker touches as little as it can until then (a pidfd and a poll
    object cost a few such copies per run)."""
    cap = request.get("wall_cap_s")
    WAIT.pid, WAIT.killed, WAIT.last_wall, WAIT.last_cpu = pid, False, started, 0.0
    WAIT.cpu_limit, WAIT.latest = request["time_limit_s"], None if cap is None else started + cap
    WAIT.wall_deadline = started + request["wall_limit_s"]
    WAIT.tree_cpu_base = tree_cpu_base
    WAIT.cores = (CGROUP.cpu_quota if CGROUP is not None and CGROUP.cpu_quota else None) or len(os.sched_getaffinity(0))
    first = request["wall_limit_s"] if tree_cpu_base is None else next_look(0.0, started)
    signal.setitimer(signal.ITIMER_REAL, first)
    if STOP_REQUESTED[0]:  # stopped before it started: the child may not lead its group yet
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


def leftover_children():
    """Pids of the zygote's children. As a subreaper it inherits every orphan of a run, so
    after the run's own child is reaped, anything listed here is something the run left."""
    fd = os.open(CHILDREN_FILE, os.O_RDONLY)
    try:
        return [int(pid) for pid in os.read(fd, 1 << 16).split()]
    finally:
        os.close(fd)


def sweep(uid):
    """Kill and reap every process left over from a run (daemons, double forks). Should
    some survive, the worker retires after its reply."""
    global RETIRING
    for _ in range(100):
        leftovers = leftover_children()
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
    RETIRING = RETIRING or bool(leftover_children())


def read_back(fd, cap, tail=False):
    """Up to `cap` + 1 bytes of a memory file (its last `cap` with `tail`)."""
    size = os.lseek(fd, 0, os.SEEK_END)
    if tail:
        return os.pread(fd, min(size, cap), max(0, size - cap))
    return os.pread(fd, min(size, cap + 1), 0)


CLOCK_PROCESS_CPUTIME_ID, SIGEV_SIGNAL = 2, 0


class SigEvent(ctypes.Structure):  # struct sigevent: 64 bytes on Linux
    _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                ("rest", ctypes.c_int * 12)]


class TimeSpec(ctypes.Structure):
    _fields_ = [("seconds", ctypes.c_long), ("nanoseconds", ctypes.c_long)]


class TimerSpec(ctypes.Structure):
    _fields_ = [("interval", TimeSpec), ("value", TimeSpec)]


KILL_EVENT = SigEvent(signo=signal.SIGKILL, notify=SIGEV_SIGNAL)


def arm_cpu_timer(seconds):
    """SIGKILL this process once its threads' CPU time reaches `seconds`, as the scheduler
    counts it (nanoseconds, the count rusage reports after the run): a POSIX timer on
    CLOCK_PROCESS_CPUTIME_ID, checked at each scheduler tick, so it fires within a tick
    after the limit and never before it. ITIMER_PROF and RLIMIT_CPU count sampled ticks
    instead, which on a shared host read up to a fifth over the scheduler's count: a
    program under its limit would be stopped. Not inherited by fork nor kept across exec;
    RLIMIT_CPU (see limits_for) is the backstop for those."""
    timer = ctypes.c_void_p()
    check(LIBC.timer_create(CLOCK_PROCESS_CPUTIME_ID, ctypes.byref(KILL_EVENT), ctypes.byref(timer)), "timer_create")
    whole = int(seconds)
    nanoseconds = min(int(round((seconds - whole) * 1e9)), 999_999_999)
    spec = TimerSpec(value=TimeSpec(whole, nanoseconds))
    check(LIBC.timer_settime(timer, 0, ctypes.byref(spec), None), "timer_settime")


def limits_for(request, uid):
    """The child's rlimits, as (resource, (soft, hard)) pairs. RLIMIT_CPU is a coarse
    backstop well above the limit (it counts sampled ticks; see arm_cpu_timer), for
    processes the precise timer does not cover; the verdict is the CPU time measured."""
    cpu_soft = math.ceil(2 * request["time_limit_s"]) + 1
    limits = [
        (resource.RLIMIT_CPU, (cpu_soft, cpu_soft + 1)),
        (resource.RLIMIT_AS, (request["memory_bytes"],) * 2),
        (resource.RLIMIT_FSIZE, (request["output_bytes"],) * 2),
        (resource.RLIMIT_NOFILE, (256, 256)),
        (resource.RLIMIT_CORE, (0, 0)),
    ]
    if uid is not None:
        limits.append((resource.RLIMIT_NPROC, (request["max_processes"],) * 2))
    return limits


NO_EXIT_STATUS = {"exit_code": 1, "signal": None, "cpu_s": 0.0, "wall_s": 0.0, "max_rss_kb": 0, "wall_timeout": False}


def run(request, blobs, config):
    source, stdin = blobs
    try:
        source = source.decode("utf-8")
    except UnicodeDecodeError as error:  # what CPython's file reader says, exit status 1
        return dict(NO_EXIT_STATUS, status="S"), [b"", non_utf8_source(source, error.start), b""]
    code, notes, syntax_error = compiled_program(source, request, config["uid"])
    if syntax_error is not None:  # nothing to run: reply as the child would have
        return dict(NO_EXIT_STATUS, status="S"), [b"", notes + syntax_error, b""]
    prelude = None
    if request["kind"] == "call":
        try:  # before the fork, so that every child inherits the module
            prelude = prepared_prelude(request["prelude"])
        except Exception as error:  # noqa: BLE001 - a broken problem, not the program's fault
            return {"error": f"the problem's prelude fails: {error!r}"[:2000]}, []
    uid = config["uid"]
    os.mkdir(CHILD_DIRECTORY, 0o700)  # the last run's is gone, or the worker retired
    fds = [os.memfd_create("stdin", os.MFD_ALLOW_SEALING)]
    fds += [os.memfd_create(name, 0) for name in ("stdout", "stderr", "result")]
    fds += os.pipe()[::-1]  # the status pipe: the child gets its write end
    try:
        write_all(fds[0], stdin)
        os.lseek(fds[0], 0, os.SEEK_SET)
        fcntl.fcntl(fds[0], fcntl.F_ADD_SEALS, STDIN_SEALS)  # read-only, however it is reopened
        if uid is not None:
            os.chown(CHILD_DIRECTORY, uid, uid)
        os.chdir(CHILD_DIRECTORY)  # the child inherits it
        limits = limits_for(request, uid)
        if CGROUP is not None:
            CGROUP.set_limits(request["memory_bytes"], request["max_processes"])
        # Frozen, the worker's objects are not the child's collector's business: its
        # collections (and finish()'s) see only the program's objects and copy no page of
        # ours. The worker itself goes on collecting as before.
        gc.freeze()
        started = time.monotonic()
        if STOP_REQUESTED[0]:  # stopped while it was being prepared: never started
            gc.unfreeze()
            return dict(NO_EXIT_STATUS, exit_code=None, wall_timeout=True, status=""), [b"", b"", b""]
        tree_cpu_base = CGROUP.cpu_seconds() if CGROUP is not None and CGROUP.cpu_fd is not None else None
        pid = os.fork()
        if pid == 0:
            child_main(request, source if code is None else code, notes, prelude, fds[:5], limits, uid, source)
        status, rusage, wall_timeout = wait_with_backstop(pid, request, started, tree_cpu_base)
        wall = time.monotonic() - started
        gc.unfreeze()
        os.close(fds.pop(4))  # only the child writes statuses (before reading them: the child is gone)
        sweep(uid)  # nothing to do unless the run left something (the backstop killed its group)
        # All its processes, those it made in sessions of their own included, until the sweep.
        tree_cpu = None if tree_cpu_base is None else CGROUP.cpu_seconds() - tree_cpu_base
        cap = request["output_bytes"]
        out = [read_back(fds[1], cap), read_back(fds[2], 4096, tail=True), read_back(fds[3], cap)]
        statuses = os.read(fds[4], 16)  # the child is gone: every write end is closed
    finally:
        for fd in fds:
            os.close(fd)
        os.chdir("/")
        clean_up_after_run()
    header = {
        "oom_kills": settle_cgroup(),
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


def settle_cgroup():
    """After the run's clean-up: how many of its processes the kernel killed at its memory
    limit; the worker retires if the cgroup still holds memory of the run."""
    global RETIRING
    if CGROUP is None:
        return 0
    try:
        kills = CGROUP.oom_kills_of_run()
        if not CGROUP.released():
            RETIRING = True
        return kills
    except OSError:  # the cgroup was removed under us (its files say ENODEV): a fresh worker makes another
        RETIRING = True
        return 0


def clean_up_after_run():
    """Remove the run's directory and whatever it left in the shared temp directories, so
    that the next run finds nothing of it. When that fails the worker retires after its
    reply (the sandbox starts a fresh one): a run must not poison the runs after it."""
    global RETIRING
    clean = remove_tree(CHILD_DIRECTORY)
    if RUN_UID is not None:  # keys the run made stay with its uid: a fresh worker has another
        with open("/proc/key-users", "rb") as handle:
            clean = clean and not any(line.split(b":")[0].strip() == RUN_UID for line in handle)
    for path, (size, mtime) in list(SHARED_TMP.items()):
        state = os.stat(path)
        # tmpfs counts a directory's size in entries, so an entry made and one removed in
        # the same clock tick still show.
        if (state.st_size, state.st_mtime_ns) != (size, mtime):
            with os.scandir(path) as entries:
                names = [entry.name for entry in entries]
            for name in names:
                if os.path.join(path, name) not in KEEP_IN_SHARED_TMP:
                    clean = remove_tree(os.path.join(path, name)) and clean
            state = os.stat(path)
            SHARED_TMP[path] = (state.st_size, state.st_mtime_ns)
    if not clean:
        RETIRING = True


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


def raise_stack_limit_and_reexec():
    """The stack limit only shapes the address space at exec, so set it and exec again."""
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    wanted = STACK_BYTES if hard == resource.RLIM_INFINITY else min(STACK_BYTES, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted and os.environ.get("MICROCODER_ZYGOTE_REEXEC") != "1":
        resource.setrlimit(resource.RLIMIT_STACK, (wanted, hard))
        os.environ["MICROCODER_ZYGOTE_REEXEC"] = "1"
        flags = sys.orig_argv[1:sys.orig_argv.index(sys.argv[0])]  # the interpreter options we were started with
        os.execv(sys.executable, [sys.executable, *flags, os.path.abspath(__file__), *sys.argv[1:]])


def warm_up():
    """Do once here what every child would otherwise do for the first time: the first
    compile() in a process costs ~1 ms of one-off set-up, the first text stream ~0.2 ms, and
    a function's first runs write its specialisation counters (a page copy each)."""
    compile(WARM_UP_PROGRAM, "warm_up.py", "exec")
    for _ in range(64):  # the exit path's own code, specialised here rather than in every child (~50 us each)
        clear_globals({"__name__": "x", "_a": 1, "b": [2], "c": 3}, 1)
    with open(os.devnull, "rb") as handle:
        io.TextIOWrapper(io.BufferedReader(io.FileIO(handle.fileno(), "r", closefd=False)), encoding="utf-8").read()


WARM_UP_PROGRAM = """
import sys
from collections import defaultdict
def solve(n: int, values: list[int]) -> int:
    total, seen = 0, defaultdict(int)
    for i, x in enumerate(values):
        if x % 2 == 0 and (x > 3 or not i):
            total += x * 2 ** i // 3
        seen[x] += 1
    squares = [y * y for y in values if y] + list({y: 1 for y in values})
    try:
        return max(total, sum(squares), key=lambda v: -v)
    except ValueError as error:
        raise SystemExit(f"{error!r:>10}") from None
class Solution:
    def go(self, *args, **kwargs):
        with open(0) as handle:
            return [line.split() for line in handle if line.strip()]
print(solve(int(input()), list(map(int, sys.stdin.read().split()))))
"""


def prepare_worker(config, requests, replies):
    """Do once, in the worker, what every child would otherwise do for itself: each child
    inherits the result. Returns the request and reply fds, moved off 0-3."""
    global CHILD_DIRECTORY, CHILD_FILE, CHILD_MAIN, CHILD_STREAMS, CHILDREN_FILE, WORKER_STDERR, RUN_UID
    # Move the pipes up and put /dev/null on fds 0-4, so that the streams every child
    # uses can be made here (they see a seekable file, as a child's stdin is) and no
    # memory file of a run lands on 0-3.
    requests, replies = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (requests, replies))
    worker_stderr = fcntl.fcntl(2, fcntl.F_DUPFD_CLOEXEC, 10)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in range(STATUS_FD + 1):
        if fd != null:
            os.dup2(null, fd)
    # The children's streams are made here, and are the worker's sys.std* as well (a
    # child that swapped them in would free the worker's, touching all their pages).
    CHILD_STREAMS = std_streams((sys.__stdin__, sys.__stdout__, sys.__stderr__))  # ours, made at start-up
    sys.stdin = sys.__stdin__ = CHILD_STREAMS[0]
    sys.stdout = sys.__stdout__ = CHILD_STREAMS[1]
    sys.stderr = sys.__stderr__ = WORKER_STDERR = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(worker_stderr, "w", closefd=False)), line_buffering=True)
    CHILD_DIRECTORY = os.path.join(config["tmp_root"], f"run-{os.getpid()}")
    os.chmod(config["tmp_root"], 0o711)  # runs reach their own directory in it, and nothing else
    if config["isolate_filesystem"]:  # these are the worker's own empty tmpfs mounts
        for path in ("/tmp", "/var/tmp", "/dev/shm"):
            if os.path.isdir(path):
                state = os.stat(path)
                SHARED_TMP[path] = (state.st_size, state.st_mtime_ns)
        KEEP_IN_SHARED_TMP.add(os.path.join("/tmp", os.path.relpath(config["tmp_root"], "/tmp").split(os.sep)[0]))
    CHILD_FILE = os.path.join(CHILD_DIRECTORY, "solution.py")
    CHILD_MAIN = main_module(CHILD_FILE)
    CHILDREN_FILE = f"/proc/self/task/{os.getpid()}/children"
    RUN_UID = None if config["uid"] is None else str(config["uid"]).encode()
    # The worker's environment is already the scrubbed one; only these name the run.
    os.environ["HOME"] = os.environ["TMPDIR"] = CHILD_DIRECTORY
    # Inherited by every child: exec of a setuid program gains nothing; programs get the
    # default signal actions (an interpreter start ignores SIGPIPE and SIGXFSZ, but the
    # limits rely on their default actions: a child killed by SIGXFSZ is over the output
    # limit); glibc sizes threads' stacks by RLIMIT_STACK, which the worker raised for
    # deep recursion, and 16 MiB keeps threads within the memory limit.
    LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    refused = run_syscall_filter()  # on the worker itself, so that every run inherits it
    if refused is not None:
        check(LIBC.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(refused[0]), 0, 0), "seccomp")
    for signum in (signal.SIGXFSZ, signal.SIGPIPE, signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGALRM, on_backstop)  # the wall-clock backstop; children restore the default
    signal.signal(signal.SIGUSR1, on_stop)  # the caller's stop; children restore the default
    _thread.stack_size(16 * 1024 * 1024)
    # -S skipped site, which is what defines quit() and exit(); programs use them.
    builtins.quit = _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)")
    builtins.exit = _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)")
    warm_up()
    # Everything made so far lives as long as the worker: keep the collector off it, so a
    # child's collections do not touch (and copy) the worker's pages.
    gc.freeze()
    return requests, replies


def main():
    raise_stack_limit_and_reexec()
    for name in ("LD_BIND_NOW", "PYTHONHASHSEED", "MICROCODER_ZYGOTE_REEXEC"):  # their work is done (see sandbox.Worker)
        os.environ.pop(name, None)  # runs see the scrubbed environment only
    config = json.loads(sys.argv[1])
    if config.get("cgroup"):  # before prepare_worker puts /dev/null on fds 0-4
        global CGROUP
        CGROUP = RunCgroup(config["cgroup"])
    # Started with -S: site-packages are on the path, but no .pth file ran here.
    sys.path.extend(path for path in config["site_paths"] if path not in sys.path)
    if config.get("private_ipc"):  # never the host's: these limits would be everyone's
        for path, value in IPC_LIMITS.items():
            with open(path, "w") as handle:
                handle.write(value)
    read_only = None
    if config["isolate_filesystem"]:  # after the limits: /proc is read-only from here on
        global CAPABILITIES_TO_DROP
        if config["uid"] is None:
            with open("/proc/sys/kernel/cap_last_cap") as handle:
                CAPABILITIES_TO_DROP = tuple(range(int(handle.read()) + 1))
        read_only = isolate_filesystem(config["hidden_paths"], config["site_paths"])
    os.makedirs(config["tmp_root"], exist_ok=True)
    LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # No parent-death signal here: it follows the parent *thread*. The zygote ends when
    # its request pipe reaches EOF, which happens however the caller exits.
    requests, replies = prepare_worker(config, 0, 1)
    write_message(replies, {"ready": True, "pid": os.getpid(), "read_only_root": read_only})
    while True:
        try:
            request, blobs = read_message(requests)
        except EOFError:
            return  # the caller is gone
        if request.get("op") == "exit":
            return
        STOP_REQUESTED[0] = False
        try:
            header, out = run(request, blobs, config)
        except Exception:  # noqa: BLE001 - report the zygote's own failure, keep serving
            header, out = {"error": traceback.format_exc()[-2000:]}, []
        if RETIRING:
            header = dict(header, retiring=True)
        write_message(replies, header, out)
        if RETIRING:
            return


if __name__ == "__main__":
    main()

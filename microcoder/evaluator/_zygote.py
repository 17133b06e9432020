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

The worker's rooms, each a file beside this one that it loads by path (none imports
anything of microcoder, and none imports this file):
  - `_zygote_confinement.py`: the cgroup and its run leaf, the mounts, the seccomp filter,
    the capabilities and uid;
  - `_zygote_program.py`: the program compiled in a helper, the call prelude prepared;
  - `_zygote_child.py`: the child: its limits, the run of the program, its exit;
  - `_zygote_serve.py`: the serve loop, the backstop and the clean-up after a run.
This file starts the worker: it confines it, prepares what every child inherits, and serves.
"""

import ctypes
import json
import os
import resource
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -P left our folder off the path
from _wire import write_message  # noqa: E402
from _zygote_child import PROGRAM_NAME, STATUS_FD, clear_globals, main_module, std_streams  # noqa: E402
from _zygote_confinement import (  # noqa: E402
    IPC_LIMITS, LIBC, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, RunCgroup,
    capabilities_to_drop, check, isolate_filesystem, run_syscall_filter)
from _zygote_program import prepared_prelude  # noqa: E402, F401 - benchmarks/fork_floor.py uses it from here
from _zygote_serve import Worker, on_backstop, on_stop, serve  # noqa: E402

del sys.path[0]

# Modules a typical solution imports; importing them once here saves every child the cost.
# Not `threading` or `random`: threading's at-fork handler costs every fork ~0.3 ms, and
# random pulls in hashlib and OpenSSL, whose mappings make every fork ~0.4 ms dearer
# (both measured); a program that needs them pays ~1 ms to import them.
PRELOAD = "bisect collections copy datetime decimal fractions functools heapq io itertools json math operator re string types typing"
for _name in PRELOAD.split():
    __import__(_name)
import _sitebuiltins  # noqa: E402
import fcntl  # noqa: E402
import gc  # noqa: E402
import _thread  # noqa: E402
import builtins  # noqa: E402
import io  # noqa: E402

STACK_BYTES = 512 * 1024 * 1024  # deep recursion in solutions (lru_cache recursion uses the C stack)


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


def prepare_worker(config, worker, requests, replies):
    """Do once, in the worker, what every child would otherwise do for itself: each child
    inherits the result, and `worker` holds what the runs use of it. Returns the request
    and reply fds, moved off 0-3."""
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
    worker.streams = std_streams((sys.__stdin__, sys.__stdout__, sys.__stderr__))  # ours, made at start-up
    sys.stdin = sys.__stdin__ = worker.streams[0]
    sys.stdout = sys.__stdout__ = worker.streams[1]
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(  # the worker's own, kept apart from the children's
        io.BufferedWriter(io.FileIO(worker_stderr, "w", closefd=False)), line_buffering=True)
    worker.run_directory = os.path.join(config["tmp_root"], f"run-{os.getpid()}")
    os.chmod(config["tmp_root"], 0o711)  # runs reach their own directory in it, and nothing else
    if config["isolate_filesystem"]:  # these are the worker's own empty tmpfs mounts
        for path in ("/tmp", "/var/tmp", "/dev/shm"):
            if os.path.isdir(path):
                state = os.stat(path)
                worker.shared_tmp[path] = (state.st_size, state.st_mtime_ns)
        worker.keep_in_shared_tmp.add(os.path.join("/tmp", os.path.relpath(config["tmp_root"], "/tmp").split(os.sep)[0]))
    worker.main_module = main_module(os.path.join(worker.run_directory, PROGRAM_NAME))
    worker.children_file = f"/proc/self/task/{os.getpid()}/children"
    # The worker's environment is already the scrubbed one; only these name the run.
    os.environ["HOME"] = os.environ["TMPDIR"] = worker.run_directory
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
    worker = Worker(config["uid"])
    if config.get("cgroup"):  # before prepare_worker puts /dev/null on fds 0-4
        worker.cgroup = RunCgroup(config["cgroup"])
    # Started with -S: site-packages are on the path, but no .pth file ran here.
    sys.path.extend(path for path in config["site_paths"] if path not in sys.path)
    if config.get("private_ipc"):  # never the host's: these limits would be everyone's
        for path, value in IPC_LIMITS.items():
            with open(path, "w") as handle:
                handle.write(value)
    read_only = None
    if config["isolate_filesystem"]:  # after the limits: /proc is read-only from here on
        if config["uid"] is None:
            worker.capabilities_to_drop = capabilities_to_drop()
        read_only = isolate_filesystem(config["hidden_paths"], config["site_paths"])
    os.makedirs(config["tmp_root"], exist_ok=True)
    LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # No parent-death signal here: it follows the parent *thread*. The zygote ends when
    # its request pipe reaches EOF, which happens however the caller exits.
    requests, replies = prepare_worker(config, worker, 0, 1)
    write_message(replies, {"ready": True, "pid": os.getpid(), "read_only_root": read_only})
    serve(worker, requests, replies)


if __name__ == "__main__":
    main()

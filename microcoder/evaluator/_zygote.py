"""The sandbox worker ("zygote"): a fresh interpreter that forks one child per program run.

Started by `sandbox.Worker` as `python -I _zygote.py CONFIG_JSON`, usually inside new
network and mount namespaces (`unshare --net --mount`). It imports nothing from
microcoder: it must not hold anything of the caller's but the programs and inputs it is
asked to run, because every child it forks inherits its memory. In particular the
expected outputs never come here; the caller compares.

Per run the zygote:
  1. makes a private directory in its own /tmp (a tmpfs nobody else sees), writes stdin;
  2. forks a child that starts a new session, sets rlimits (CPU, address space, file
     size, processes, open files), drops to a per-worker uid, closes every other file
     descriptor, and runs the program as `__main__` (or calls its entry point);
  3. waits with a wall-clock backstop, kills the child's process group, sweeps any
     escaped descendant (as the worker uid, `kill(-1, SIGKILL)`), reaps, reads the
     output files, removes the directory and replies.

Messages in both directions are framed as `_wire.py` says.
"""

import ctypes
import json
import math
import os
import resource
import select
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I left our folder off the path
from _wire import read_message, write_message  # noqa: E402

del sys.path[0]

# Modules a typical solution imports; importing them once here saves every child the cost.
# Not `threading` or `random`: threading's at-fork handler costs every fork ~0.3 ms, and
# random pulls in hashlib and OpenSSL, whose mappings make every fork ~0.4 ms dearer
# (both measured); a program that needs them pays ~1 ms to import them.
PRELOAD = "bisect collections copy datetime decimal fractions functools heapq io itertools json math operator re string types typing"
for _name in PRELOAD.split():
    __import__(_name)
import _sitebuiltins  # noqa: E402
import _thread  # noqa: E402
import builtins  # noqa: E402
import io  # noqa: E402
import traceback  # noqa: E402
import types  # noqa: E402
import warnings  # noqa: E402

LIBC = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 36, 38
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
STACK_BYTES = 512 * 1024 * 1024  # deep recursion in solutions (lru_cache recursion uses the C stack)
RESULT_FD = 3  # call mode: the child writes its verdict marker and return value here


def check(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def mount(source, target, fstype, flags, data=None):
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    check(LIBC.mount(encode(source), encode(target), encode(fstype), flags, encode(data)), f"mount {target}")


def is_under(path, parent):
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def isolate_filesystem(hidden, site_paths):
    """Cover each hidden directory with an empty tmpfs, then bind the Python installation
    back (read-only) where it lay under one of them, so imports keep working."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    keep = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, *site_paths)}
    keep = sorted(p for p in keep if os.path.isdir(p))
    keep = [p for p in keep if not any(p != q and is_under(p, q) for q in keep)]
    hidden = sorted({os.path.realpath(h) for h in hidden if os.path.isdir(h) and os.path.realpath(h) != "/"})
    hidden = [h for h in hidden if not any(h != g and is_under(h, g) for g in hidden)]
    kept_fds = {p: os.open(p, os.O_PATH) for p in keep if any(is_under(p, h) for h in hidden)}
    for directory in hidden:
        mode = "1777" if directory in ("/tmp", "/var/tmp", "/dev/shm") else "755"
        mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode},size=4g")
    for path, fd in kept_fds.items():
        os.makedirs(path, exist_ok=True)
        mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
        os.close(fd)


def to_jsonable(value, depth=0):
    """The child's return value as plain JSON data; tuples and sets become lists."""
    if depth > 200:
        raise ValueError("return value nested too deeply")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [to_jsonable(item, depth + 1) for item in value]
    if isinstance(value, (set, frozenset)):
        items = [to_jsonable(item, depth + 1) for item in value]
        try:
            return sorted(items)
        except TypeError:
            return sorted(items, key=repr)
    if isinstance(value, dict):
        return {str(key): to_jsonable(item, depth + 1) for key, item in value.items()}
    raise TypeError(f"cannot serialise a {type(value).__name__}")


def resolve_entry_point(namespace, entry_point):
    """`name` -> a function; `Class().method` -> the method of a fresh instance."""
    if "()." in entry_point:
        class_name, method = entry_point.split("().", 1)
        return getattr(namespace[class_name](), method)
    return namespace[entry_point]


def fresh_std_streams():
    """New sys.std* over fds 0-2, as the interpreter makes them at start-up."""
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8")
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8")
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8", errors="backslashreplace", line_buffering=True
    )


def finish(code):
    """What the interpreter does at exit: join non-daemon threads, atexit, flush."""
    try:
        if "threading" in sys.modules:  # only then can there be threads to wait for
            sys.modules["threading"]._shutdown()
        import atexit

        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - the program's own exit handlers failing
        code = code or 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            code = code or 120
    os._exit(code)


def exit_code_of(error):
    if error.code is None:
        return 0
    if isinstance(error.code, int):
        return error.code & 0xFF
    print(error.code, file=sys.stderr)
    return 1


_preludes = {}


def compiled_prelude(text):
    """Preludes repeat across every test of a problem: compile each once, in the worker,
    so every child inherits the code object."""
    if text not in _preludes:
        if len(_preludes) > 256:
            _preludes.clear()
        with warnings.catch_warnings():  # dataset code: its warnings are not the caller's business
            warnings.simplefilter("ignore")
            _preludes[text] = compile(text, "prelude.py", "exec")
    return _preludes[text]


def child_main(request, source, stdin_path, directory, result_fd, out_fd, err_fd, uid):
    """Runs in the forked child; never returns."""
    try:
        os.setsid()
        os.chdir(directory)
        os.dup2(os.open(stdin_path, os.O_RDONLY), 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.dup2(result_fd, RESULT_FD)
        os.closerange(RESULT_FD + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        time_limit = request["time_limit_s"]
        cpu_soft = math.ceil(time_limit) + 1
        limits = {
            resource.RLIMIT_CPU: (cpu_soft, cpu_soft + 1),
            resource.RLIMIT_AS: (request["memory_bytes"],) * 2,
            resource.RLIMIT_FSIZE: (request["output_bytes"],) * 2,
            resource.RLIMIT_NOFILE: (256, 256),
            resource.RLIMIT_CORE: (0, 0),
        }
        if uid is not None:
            limits[resource.RLIMIT_NPROC] = (request["max_processes"],) * 2
        for limit, value in limits.items():
            resource.setrlimit(limit, value)
        for signum in (signal.SIGXFSZ, signal.SIGPIPE, signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # The worker's own environment is already the scrubbed one (see main()).
        os.environ["HOME"] = os.environ["TMPDIR"] = directory
        sys.argv = ["solution.py"]
        sys.path[:0] = [directory]
        # glibc sizes new threads' stacks by RLIMIT_STACK, which the worker raised for deep
        # recursion; 16 MiB keeps threads within the memory limit.
        _thread.stack_size(16 * 1024 * 1024)
        fresh_std_streams()
        # CPU time of every thread; the default action ends the process. RLIMIT_CPU backs
        # it up should the program catch SIGPROF.
        signal.setitimer(signal.ITIMER_PROF, time_limit)
    except BaseException:  # noqa: BLE001 - set-up failed: report it, never run the program
        os.write(2, traceback.format_exc().encode())
        os._exit(242)

    result = os.fdopen(RESULT_FD, "wb", buffering=0)
    try:
        code = compile(source, os.path.join(directory, "solution.py"), "exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        traceback.print_exc(limit=0)
        result.write(b"S")
        finish(1)
    result.write(b"C")  # compiled: what follows is the program's own doing
    status = 0
    try:
        if request["kind"] == "stdin":
            main = types.ModuleType("__main__")
            main.__file__ = os.path.join(directory, "solution.py")
            main.__builtins__ = __builtins__
            sys.modules["__main__"] = main
            exec(code, main.__dict__)
        else:
            module = types.ModuleType("solution")
            module.__builtins__ = __builtins__
            sys.modules["solution"] = module
            exec(compiled_prelude(request["prelude"]), module.__dict__)
            exec(code, module.__dict__)
            function = resolve_entry_point(module.__dict__, request["entry_point"])
            arguments = [json.loads(line) for line in request["arguments"]]
            value = function(*arguments)
            try:
                encoded = json.dumps(to_jsonable(value)).encode()
            except (TypeError, ValueError) as error:
                result.write(b"U" + str(error)[:300].encode())
            else:
                result.write(b"R" + encoded)
    except SystemExit as error:
        status = exit_code_of(error)
    except BaseException:  # noqa: BLE001 - the program's uncaught exception
        traceback.print_exc()
        status = 1
    finish(status)


def wait_with_backstop(pid, wall_limit):
    """Wait for the child; SIGKILL its group when the wall clock runs out.
    Returns (wait status, rusage, wall seconds, killed by the backstop)."""
    started = time.monotonic()
    pidfd = os.pidfd_open(pid)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        timed_out = not poller.poll(wall_limit * 1000)
    finally:
        os.close(pidfd)
    if timed_out:
        kill_group(pid)
    _, status, rusage = os.wait4(pid, 0)
    return status, rusage, time.monotonic() - started, timed_out


def kill_group(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def sweep(uid):
    """Kill and reap every process left over from a run (daemons, double forks). As a
    subreaper the zygote inherits orphans, so /proc lists them as its children."""
    children_file = f"/proc/self/task/{os.getpid()}/children"
    for _ in range(100):
        with open(children_file) as handle:
            leftovers = [int(pid) for pid in handle.read().split()]
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


def read_capped(path, cap):
    with open(path, "rb") as handle:
        return handle.read(cap + 1)


def run(request, blobs, config, counter):
    source, stdin = blobs
    directory = os.path.join(config["tmp_root"], f"run-{os.getpid()}-{counter}")
    os.mkdir(directory, 0o700)
    uid = config["uid"]
    try:
        stdin_path = os.path.join(directory, ".stdin")
        with open(stdin_path, "wb") as handle:
            handle.write(stdin)
        paths = [os.path.join(directory, name) for name in (".stdout", ".stderr", ".result")]
        fds = [os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600) for path in paths]
        if uid is not None:
            os.chown(directory, uid, uid)
        if request["kind"] == "call":
            try:  # before the fork, so that every child inherits the code object
                compiled_prelude(request["prelude"])
            except (SyntaxError, ValueError, MemoryError, RecursionError) as error:
                return {"error": f"the problem's prelude does not compile: {error!r}"[:2000]}, []
        pid = os.fork()
        if pid == 0:
            child_main(request, source.decode("utf-8", "replace"), stdin_path, directory, fds[2], fds[0], fds[1], uid)
        for fd in fds:
            os.close(fd)
        status, rusage, wall, wall_timeout = wait_with_backstop(pid, request["wall_limit_s"])
        kill_group(pid)
        sweep(uid)
        cap = request["output_bytes"]
        stdout = read_capped(paths[0], cap)
        stderr = read_capped(paths[1], cap)[-4096:]
        result = read_capped(paths[2], cap)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    header = {
        "exit_code": os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "cpu_s": rusage.ru_utime + rusage.ru_stime,
        "wall_s": wall,
        "max_rss_kb": rusage.ru_maxrss,
        "wall_timeout": wall_timeout,
    }
    return header, [stdout, stderr, result]


def raise_stack_limit_and_reexec():
    """The stack limit only shapes the address space at exec, so set it and exec again."""
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    wanted = STACK_BYTES if hard == resource.RLIM_INFINITY else min(STACK_BYTES, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted and os.environ.get("MICROCODER_ZYGOTE_REEXEC") != "1":
        resource.setrlimit(resource.RLIMIT_STACK, (wanted, hard))
        os.environ["MICROCODER_ZYGOTE_REEXEC"] = "1"
        os.execv(sys.executable, [sys.executable, "-I", "-S", os.path.abspath(__file__), *sys.argv[1:]])


def warm_up():
    """Do once here what every child would otherwise do for the first time: the first
    compile() in a process costs ~1 ms of one-off set-up, the first text stream ~0.2 ms."""
    compile(WARM_UP_PROGRAM, "warm_up.py", "exec")
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


def main():
    raise_stack_limit_and_reexec()
    warm_up()
    # -S skipped site, which is what defines quit() and exit(); programs use them.
    builtins.quit = _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)")
    builtins.exit = _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)")
    config = json.loads(sys.argv[1])
    # Started with -S: site-packages are on the path, but no .pth file ran here.
    sys.path.extend(path for path in config["site_paths"] if path not in sys.path)
    if config["isolate_filesystem"]:
        isolate_filesystem(config["hidden_paths"], config["site_paths"])
    os.makedirs(config["tmp_root"], exist_ok=True)
    LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # No parent-death signal here: it follows the parent *thread*. The zygote ends when
    # its request pipe reaches EOF, which happens however the caller exits.
    requests, replies = 0, 1
    write_message(replies, {"ready": True, "pid": os.getpid()})
    counter = 0
    while True:
        try:
            request, blobs = read_message(requests)
        except EOFError:
            return  # the caller is gone
        if request.get("op") == "exit":
            return
        counter += 1
        try:
            header, out = run(request, blobs, config, counter)
        except Exception:  # noqa: BLE001 - report the zygote's own failure, keep serving
            header, out = {"error": traceback.format_exc()[-2000:]}, []
        write_message(replies, header, out)


if __name__ == "__main__":
    main()

"""The sandbox worker's child: one run of a program, in a process forked for it.

`child_main` moves the run's files onto fds 0-4, joins the run's cgroup leaf, sets the
limits (rlimits, `limits_for`, and a CPU timer, `arm_cpu_timer`), takes the run's uid (or
drops its capabilities), and runs the program as `__main__` or calls its entry point,
whose return value it writes as JSON (`to_jsonable`). It then exits as the interpreter
would (`finish`): threads, atexit handlers, the streams' flush, the program's globals
cleared, an uncaught exception reported as CPython reports it.

Part of the worker (`_zygote.py`), which loads it by path: it imports nothing of microcoder.
"""

import atexit
import builtins
import ctypes
import gc
import io
import itertools
import json
import math
import operator
import os
import resource
import signal
import sys
import traceback
import types

import _livecodebench
from _wire import write_all
from _zygote_confinement import LIBC, PR_SET_PDEATHSIG, become, check, drop_capabilities

RESULT_FD = 3  # call mode: b"R" + the return value's JSON, or b"U" + why it is not JSON
STATUS_FD = 4  # see child_main
MAX_FD = 1 << 16
COMPILE_ERRORS = (SyntaxError, ValueError, RecursionError, OverflowError)  # MemoryError is the limit's

# The program's file name in its code: tracebacks and warnings name it as they would for
# `python3 solution.py`, not by the run directory it happens to run in.
PROGRAM_NAME = "solution.py"
PROGRAM_ARGV = [PROGRAM_NAME]  # sys.argv, as `python3 solution.py` sets it

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


def child_main(request, program, compile_notes, prelude, fds, limits, worker, source=""):
    """Runs in the forked child; never returns. Everything that can be done once in the
    worker is (see `prepare_worker`): on these machines each page a child writes costs a
    copy-on-write fault, so the child does as little as it can.

    Until the candidate's code starts, the child reports on STATUS_FD (a pipe only it
    holds): b"P" the problem's prelude failed, b"C" what follows is the program's doing
    (compiling it, when the worker's helper could not, then running it), b"S" it does not
    compile. Then it closes the pipe, so nothing the candidate does can write a status (a
    program that wrote b"P" could turn its own failure into a judge error).

    `program` is the code object, or the source where the worker's helper could not
    compile it; `prelude` is prepared_prelude()'s answer for call problems, else None;
    `worker` is the worker's `_zygote_serve.Worker` (its cgroup, uid, run directory, and
    the streams and `__main__` module every child uses as they are).
    A request with `harness: "livecodebench"` runs it as LiveCodeBench's grader does
    (`_livecodebench`, which needs the `source` text)."""
    try:
        os.setsid()
        for target, fd in enumerate(fds):  # stdin, stdout, stderr, the result file, the status pipe
            os.dup2(fd, target)
        if worker.cgroup is not None:  # before anything else: all the run does from here on is charged there
            worker.cgroup.join()
        os.closerange(STATUS_FD + 1, MAX_FD)
        for limit, value in limits:
            resource.setrlimit(limit, value)
        if worker.uid is not None:
            become(worker.uid)
        elif worker.capabilities_to_drop:
            drop_capabilities(worker.capabilities_to_drop)
        LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)  # the worker's backstop handlers are not the program's
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        sys.argv = PROGRAM_ARGV
        sys.path.insert(0, worker.run_directory)
        sys.stderr = sys.__stderr__ = worker.streams[2]  # stdin and stdout already are
        arm_cpu_timer(request["time_limit_s"])
    except BaseException:  # noqa: BLE001 - set-up failed: report it, never run the program
        os.write(2, traceback.format_exc().encode())
        os._exit(242)  # no b"C": the sandbox's failure, not the program's

    if prelude is not None:  # a call problem: the module the worker prepared, and the rest of the prelude
        module, rest = prelude
        sys.modules["solution"] = module
    else:
        module = worker.main_module
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

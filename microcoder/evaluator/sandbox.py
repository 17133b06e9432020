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
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import threading
import warnings
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
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
    """RLIMIT_NPROC of a run (processes and threads), when runs have a uid of their own."""
    wall_factor: float = 3.0
    """Wall-clock backstop = wall_factor * time limit + 1 s. Verdicts use CPU time; the
    backstop only catches programs that sleep or block."""


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


def _default_hidden_paths(extra: Sequence[str]) -> list[str]:
    home = os.path.expanduser("~")
    return ["/root", "/home", "/tmp", "/var/tmp", "/dev/shm", "/mnt", "/media", "/srv", home, os.getcwd(), *extra]


class Worker:
    """One zygote process. Not thread-safe: the Sandbox hands it to one thread at a time."""

    def __init__(self, plan: IsolationPlan, config: SandboxConfig):
        self.plan, self.config = plan, config
        slot = next(_slots)
        self.uid = 100_000 + (os.getpid() % 32768) * 4096 + slot % 4096 if plan.switch_uid else None
        self._own_tmp: str | None = None
        self.unswept = False  # a run may have left processes the worker did not kill
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
        }
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
            start_new_session=True,  # a Ctrl-C at our terminal is ours to handle, not the worker's
        )
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

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def run(self, request: dict, source: bytes, stdin: bytes) -> tuple[dict, list[bytes]]:
        self.unswept = True  # until the worker's reply says it cleaned up after the run
        write_message(self.process.stdin.fileno(), request, [source, stdin])
        header, blobs = read_message(self.process.stdout.fileno())
        self.unswept = bool(header.get("retiring"))
        return header, blobs

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                write_message(self.process.stdin.fileno(), {"op": "exit"})
            except OSError:
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
        return "sandbox_error", "the run ended before the program started: " + stderr.decode("utf-8", "replace")[-1000:]
    if header["wall_timeout"] or cpu > time_limit_s or signum in (signal.SIGPROF, signal.SIGXCPU):
        if header["wall_timeout"]:
            how = "stopped by the wall-clock backstop"
        elif signum in (signal.SIGPROF, signal.SIGXCPU):
            how = "stopped by the CPU timer"  # the kernel's tick-based account may read a little under
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


class Sandbox:
    """A pool of workers. Thread-safe: `run_*` may be called from many threads at once;
    each call waits for a free worker. Use as a context manager or call `close()`."""

    def __init__(self, workers: int = 0, isolation: str = "auto", config: SandboxConfig | None = None):
        config = config or SandboxConfig(workers=workers, isolation=isolation)  # type: ignore[arg-type]
        self.config = config
        self.plan = isolation_plan(config.isolation)
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

    @property
    def run_uids(self) -> list[int]:
        """The uids runs of this sandbox's started workers use (empty when runs keep ours)."""
        with self._lock:
            return [worker.uid for worker in self._all if worker.uid is not None]

    def _start_worker(self) -> Worker:
        worker = Worker(self.plan, self.config)
        with self._lock:
            self._all.append(worker)
        return worker

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
        time_limit_s: float = 2.0,
        memory_limit_mb: int = 1024,
        output_limit_mb: float = 32,
    ) -> ProgramRun:
        """Run one program (`kind="stdin"`) or one call of its entry point (`kind="call"`,
        `arguments` one JSON value each) and say what happened."""
        if self._closed:
            raise RuntimeError("sandbox is closed")
        if kind not in ("stdin", "call"):
            raise ValueError(f"kind must be 'stdin' or 'call', got {kind!r}")
        output_bytes = int(output_limit_mb * 1024 * 1024)
        request = {
            "op": "run",
            "kind": kind,
            "entry_point": entry_point,
            "prelude": prelude,
            "arguments": list(arguments),
            "time_limit_s": time_limit_s,
            "wall_limit_s": self.config.wall_factor * time_limit_s + 1.0,
            "memory_bytes": int(memory_limit_mb * 1024 * 1024),
            "output_bytes": output_bytes,
            "max_processes": self.config.max_processes,
        }
        stdin_bytes = stdin.encode() if isinstance(stdin, str) else stdin
        worker = self._take_idle()
        try:
            if worker is None or not worker.alive:
                if worker is not None:
                    dead, worker = worker, None  # back in the pool as "not started" should a start fail
                    self._retire(dead)
                worker = self._start_worker()
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

    def run_program(self, source: str, stdin: str | bytes = b"", time_limit_s: float = 10.0,
                    memory_limit_mb: int = 2048) -> ProgramRun:
        """Run a whole program on stdin (kind `stdin`)."""
        return self.run(source, stdin, time_limit_s=time_limit_s, memory_limit_mb=memory_limit_mb)

    def run_programs(self, jobs: Sequence[tuple[str, str | bytes]], time_limit_s: float = 10.0,
                     memory_limit_mb: int = 2048) -> list[ProgramRun]:
        """Run (source, stdin) pairs in parallel; results in the same order."""
        return list(self.map(lambda job: self.run_program(job[0], job[1], time_limit_s, memory_limit_mb), jobs))

    def map(self, function, items):
        """`function` over `items` on the sandbox's own thread pool (one thread per worker)."""
        return self._executor.map(function, items)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
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


__all__ = ["Sandbox", "SandboxConfig", "ProgramRun", "STATUSES", "isolation_plan"]

"""Run untrusted programs outside our process, under limits enforced from outside.

A `Sandbox` is a pool of pre-started worker interpreters (`_zygote.py`), one per core by
default. Each run is a fresh process forked from a worker, so interpreter start-up is
paid once per worker, not once per test. See docs/sandbox.md for what is protected and
what is not.

Each worker runs under the strongest isolation the machine allows (namespaces, a uid of
its own: `isolation.py`) and, where the machine lets us make them, in a memory and a pids
cgroup of its own that hold its runs' limits (`cgroups.py`). This module holds the
limits, the workers, the pool and how a finished run is classified.
"""

from __future__ import annotations

import atexit
import contextlib
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
import time
import warnings
import weakref
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from microcoder.config_files import CommandConfig
from microcoder.evaluator._wire import read_message, write_message
from microcoder.evaluator.cgroups import (RUN_CPU_QUOTA_CORES, CgroupPlan, WorkerCgroups, make_worker_cgroups,
                                          retry_unremoved_cgroups, warn_without_cgroup, worker_cgroup_plan)
from microcoder.evaluator.isolation import Isolation, IsolationPlan, isolation_plan
from microcoder.problems import data_directories, data_directory_count

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
WORKER_DEATHS_PER_RUN = 2
"""Tries of a run whose worker dies under it, each on a fresh worker, before the sandbox
says who killed it (Sandbox._judge_worker_deaths): one death is retried, since the machine
(the OOM killer, an operator) kills workers far more often than a program can."""


class SandboxConfig(CommandConfig):
    """How the sandbox runs programs. Defaults suit a laptop CPU."""

    workers: int = Field(0, ge=0)
    """Worker processes (parallel runs); 0 = one per usable core."""
    isolation: Isolation = "auto"
    """`full` fails unless namespaces and uid switching are available; `none` uses neither."""
    hidden_paths: tuple[str, ...] = ()
    """Directories covered with an empty tmpfs in addition to the defaults (see module doc)."""
    max_processes: int = Field(64, gt=0)
    """Processes and threads of a run: RLIMIT_NPROC when runs have a uid of their own, and
    pids.max of the worker's cgroup where there is one."""
    wall_factor: float = Field(3.0, ge=0)
    """Wall-clock backstop = wall_factor * time limit + 1 s. Verdicts use CPU time; the
    backstop only catches programs that sleep or block: one still computing then (a tenth
    of a core or more, starved by a loaded host) is waited for until its CPU limit."""
    cgroup: Literal["auto", "required", "off"] = "auto"
    """A memory and pids cgroup per worker (memory held in memfds and tmpfs counts against
    a run's memory limit; `pids.max` = `max_processes`): `auto` where the machine lets us
    make one (one warning where not), `required` refuses to start without, `off` never."""


class SandboxFault(RuntimeError):
    """The machine failed a run (`ProgramRun.machine_fault`) where its caller has no way to
    leave it unjudged: what it was doing stops, saying so in one line."""


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
    machine_fault: bool = False
    """A `sandbox_error` of the machine's, not the program's nor the problem's: its worker
    died under it on every try, or the sandbox was closed under it. Judged again later, it
    may well run."""



def _default_hidden_paths(extra: Sequence[str]) -> list[str]:
    """The directories a worker covers with an empty tmpfs. `/run` (and `/var/run`, where it
    is not a link to it) holds the host's service sockets (dbus, journald, the container
    runtime's) and pid and lock files: none of it is a run's business."""
    home = os.path.expanduser("~")
    return ["/root", "/home", "/run", "/var/run", "/tmp", "/var/tmp", "/dev/shm", "/mnt", "/media", "/srv",
            home, os.getcwd(), *extra]


# What a worker never hides, though data was read there: the system's directories and
# those above them (the Python installation is bound back under a hidden directory, the
# system's libraries and programs are not).
SYSTEM_DIRECTORIES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sbin",
                      "/sys", "/usr")


def hideable(directories: Sequence[str]) -> list[str]:
    """The data directories a worker can cover with an empty tmpfs: all but a system
    directory, one inside a system directory, or one above any."""
    def system(directory: str) -> bool:
        return directory == "/" or any(directory == top or directory.startswith(top + "/") or
                                       top.startswith(directory.rstrip("/") + "/") for top in SYSTEM_DIRECTORIES)
    return [directory for directory in directories if not system(directory)]


class Worker:
    """One zygote process. Not thread-safe: the Sandbox hands it to one thread at a time."""

    def __init__(self, plan: IsolationPlan, config: SandboxConfig, cgroup_plan: CgroupPlan | None = None):
        self.plan, self.config = plan, config
        slot = next(_slots)
        self.uid = 100_000 + (os.getpid() % 32768) * 4096 + slot % 4096 if plan.switch_uid else None
        self._own_tmp: str | None = None
        self.data_directories = data_directories() if plan.isolate_filesystem else ()  # hidden from its runs
        self.unswept = False  # a run may have left processes the worker did not kill
        self.cgroups = WorkerCgroups()  # none until made
        directory_fds: dict[str, int] = {}
        if cgroup_plan is not None and cgroup_plan.available:
            try:
                self.cgroups, directory_fds = make_worker_cgroups(cgroup_plan, slot)
            except OSError as error:
                why = f"cannot make the worker's cgroup ({cgroup_plan.description}): {error}"
                if config.cgroup == "required":
                    raise RuntimeError(f"sandbox: {why}") from error
                warn_without_cgroup(why)  # this worker runs on rlimits alone; the next tries again
        if plan.isolate_filesystem:
            tmp_root = "/tmp/microcoder-runs"
        else:
            self._own_tmp = tempfile.mkdtemp(prefix="microcoder-sandbox-")
            os.chmod(self._own_tmp, 0o711)  # a run's uid must reach its own directory inside
            tmp_root = self._own_tmp
        zygote_config = {
            "uid": self.uid,
            "isolate_filesystem": plan.isolate_filesystem,
            "hidden_paths": [*_default_hidden_paths(config.hidden_paths), *hideable(self.data_directories)],
            "tmp_root": tmp_root,
            "private_ipc": "--ipc" in plan.command_prefix,
            "site_paths": [*site.getsitepackages(), site.getusersitepackages()],
            "cgroup": {"version": cgroup_plan.version, **directory_fds,
                       "cpu_quota_cores": RUN_CPU_QUOTA_CORES if self.cgroups.cpu else None} if directory_fds else None,
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
            self.cgroups.remove()
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

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def shows_data(self) -> bool:
        """Whether this process read data from a directory since this worker started, which
        its runs therefore see: it is replaced by a worker that hides that one too."""
        return self.plan.isolate_filesystem and len(self.data_directories) != data_directory_count()

    def run(self, request: dict, source: bytes, stdin: bytes) -> tuple[dict, list[bytes]]:
        self.unswept = True  # until the worker's reply says it cleaned up after the run
        write_message(self.process.stdin.fileno(), request, [source, stdin])
        header, blobs = read_message(self.process.stdout.fileno())
        self.unswept = bool(header.get("retiring"))
        return header, blobs

    def death(self) -> str:
        """How this worker, whose pipe just broke, ended (waits for it up to a second)."""
        try:
            code = self.process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return "its pipe broke while it was still running"
        return f"killed by {_signal_name(-code)}" if code < 0 else f"exited with code {code}"

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
        self.cgroups.remove()  # after the worker: only then can no run join them any more
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
        elif header.get("cpu_of") == "tree":
            how = "over the CPU limit, its processes together"
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
        self.cgroups = worker_cgroup_plan(config.cgroup)
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

    @property
    def memory_cgroups(self) -> list[str]:
        """The memory cgroup directory of each started worker (empty without cgroups)."""
        with self._lock:
            return [worker.cgroups.memory for worker in self._all if worker.cgroups.memory]

    @property
    def pids_cgroups(self) -> list[str]:
        """The pids cgroup directory of each started worker (v2: its memory cgroup's)."""
        with self._lock:
            return [worker.cgroups.pids for worker in self._all if worker.cgroups.pids]

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

    def _run_once(self, request: dict, source: bytes, stdin: bytes, deadline: float | None,
                  stop: RunStop | None) -> ProgramRun | tuple[dict, list[bytes]] | str:
        """One try of a run on one worker: the worker's reply, a ProgramRun when it never
        ran, or how the worker died under it (a str: the worker is retired)."""
        worker = self._take_idle()
        try:
            if worker is None or not worker.alive or worker.shows_data():
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
                header, blobs = worker.run(request, source, stdin)
            except (EOFError, OSError, ValueError):
                # The worker died under the run. Who killed it is decided by the caller
                # (_judge_worker_deaths) from how often it happens; here, only how.
                how = worker.death()
                self._retire(worker)
                worker = None
                return how
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
            return header, blobs
        finally:
            self._put_idle(worker)

    def _judge_worker_deaths(self, died: list[str]) -> ProgramRun:
        """The run of a program whose worker died under it on every try (`died`: how).

        Where runs have a uid of their own (`plan.switch_uid`) they cannot signal their
        worker, so its death is the machine's (the OOM killer, an operator, a shutdown):
        `sandbox_error`, which the evaluator makes a judge_error (no reward, no verdict).
        Where runs share the worker's uid, a program can kill its worker, and one that did
        so on a fresh worker again is taken to be doing it itself: `runtime_error`."""
        how = "; then ".join(died)
        if self.plan.switch_uid:
            return ProgramRun("sandbox_error", detail=f"its sandbox worker died under it {len(died)} times "
                                                      f"({how}); runs cannot signal their worker, so not the program's fault",
                              machine_fault=True)
        return ProgramRun("runtime_error", detail=f"the run killed its sandbox worker on {len(died)} fresh workers ({how})")

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
        source_bytes = source.encode("utf-8", "surrogatepass")
        died: list[str] = []  # how each worker that died under this run died
        outcome = self._run_once(request, source_bytes, stdin_bytes, deadline, stop)
        while isinstance(outcome, str):
            died.append(outcome)
            if self._closed:
                return ProgramRun("sandbox_error", detail=f"the sandbox was closed mid-run (its worker {outcome})",
                                  machine_fault=True)
            if len(died) == WORKER_DEATHS_PER_RUN:
                return self._judge_worker_deaths(died)
            outcome = self._run_once(request, source_bytes, stdin_bytes, deadline, stop)
        if isinstance(outcome, ProgramRun):  # it never ran: its deadline passed, or it was stopped
            return outcome
        header, blobs = outcome
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
        killed; each is reported to its caller as a `sandbox_error`, the sandbox having
        been closed mid-run) instead of waiting for them to end."""
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
    retry_unremoved_cgroups(seconds=2.0)


__all__ = ["Sandbox", "SandboxConfig", "SandboxFault", "ProgramRun", "RunStop", "STATUSES"]

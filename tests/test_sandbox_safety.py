"""One adversarial test per safety property. Each runs the attack in a batch beside two
honest samples and asserts (1) the attack's verdict, (2) that the honest samples are
still accepted, and (3) that the evaluator still works afterwards."""

import fcntl
import os
import platform
import shutil
import socket
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample
from microcoder.evaluator.isolation import isolation_plan
from microcoder.problems import Checker
from tests.helpers import call_problem, stdin_problem

HONEST = "print(sum(map(int, input().split())))"
PROBLEM = stdin_problem([("1 2", "3"), ("5 5", "10")], problem_id="add", time_limit_s=1.0)
FULL = isolation_plan("auto").switch_uid and isolation_plan("auto").isolate_filesystem
needs_full_isolation = pytest.mark.skipif(not FULL, reason="needs root with namespaces (isolation 'full')")
needs_the_syscall_filter = pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"),
                                              reason="the seccomp filter is x86_64 and aarch64 only")


@pytest.fixture(scope="module")
def evaluator():
    with Evaluator(EvaluatorConfig(workers=2, output_limit_mb=1, memory_limit_mb=512)) as evaluator:
        yield evaluator


def run_attack(evaluator, attack, problem=PROBLEM):
    """Verdict and detail of `attack` judged beside two honest samples."""
    code = textwrap.dedent(attack)
    samples = [Sample(problem.id, code=HONEST), Sample(problem.id, code=code), Sample(problem.id, code=HONEST)]
    results = evaluator.evaluate([problem], samples)
    assert [results[0].verdict, results[2].verdict] == ["accepted", "accepted"], results
    assert evaluator.evaluate_code(PROBLEM, HONEST).verdict == "accepted"
    return results[1]


def sandbox_processes(evaluator):
    """Processes running right now under the uid of one of this evaluator's workers."""
    uids = set(evaluator.sandbox.run_uids)
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid in uids:
                    found.append(entry.name)
            except FileNotFoundError:
                pass
    return found


@needs_full_isolation
def test_fork_bomb_is_stopped_and_leaves_no_process(evaluator):
    result = run_attack(evaluator, """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """)
    assert result.verdict == "time_limit_exceeded"
    assert sandbox_processes(evaluator) == []


def test_memory_bomb_is_memory_limit_exceeded(evaluator):
    # Filling 512 MiB page by page costs ~0.3-0.9 s of CPU on a busy machine: a generous
    # time limit keeps this about memory.
    problem = stdin_problem([("1 2", "3")], problem_id="add", time_limit_s=5.0)
    growing = "blocks = []\nwhile True:\n    blocks.append(bytearray(50 * 1024 * 1024))\n"
    at_once = "block = bytearray(10 ** 12)\n"
    for attack in (growing, at_once):
        result = run_attack(evaluator, attack, problem)
        assert result.verdict == "memory_limit_exceeded", result


def test_infinite_loop_in_python_is_time_limit_exceeded(evaluator):
    assert run_attack(evaluator, "while True:\n    pass\n").verdict == "time_limit_exceeded"


def test_infinite_loop_in_c_code_is_time_limit_exceeded(evaluator):
    # Catastrophic backtracking: the loop runs inside the C regex engine, where Python
    # signal handlers never get a chance to run; only a signal from outside stops it.
    result = run_attack(evaluator, "import re\nre.match(r'(a*)*b', 'a' * 64)\n")
    assert result.verdict == "time_limit_exceeded"


def test_sleeping_program_is_stopped_by_the_wall_clock_backstop(evaluator):
    result = run_attack(evaluator, "import time\ntime.sleep(60)\n")
    assert result.verdict == "time_limit_exceeded"
    assert "wall-clock" in result.detail
    assert result.seconds < 30


def test_a_programs_own_alarm_has_the_default_action(evaluator):
    # The worker's wall-clock backstop is a SIGALRM handler; the program must not inherit
    # it: in plain CPython an alarm nobody handles ends the process at once.
    result = run_attack(evaluator, "import signal, time\nsignal.alarm(1)\ntime.sleep(30)\n")
    assert result.verdict == "runtime_error"
    assert "SIGALRM" in result.detail
    assert result.seconds < 10


def test_huge_output_is_output_limit_exceeded(evaluator):
    result = run_attack(evaluator, "while True:\n    print('x' * 1000)\n")
    assert result.verdict == "output_limit_exceeded"


@needs_full_isolation
def test_killing_the_parent_or_everything_fails_only_the_attacker(evaluator):
    # Each attack then prints the right answer, so only the kill can change its verdict.
    expected = {
        "os.kill(os.getppid(), signal.SIGKILL)": "runtime_error",  # the worker is root's: EPERM
        "os.kill(1, signal.SIGKILL)": "runtime_error",  # EPERM
        "os.killpg(0, signal.SIGKILL)": "runtime_error",  # its own group: it kills itself
        "os.kill(-1, signal.SIGKILL)": "accepted",  # every process of its uid but itself: none
    }
    for kill, verdict in expected.items():
        result = run_attack(evaluator, f"import os, signal\n{kill}\n{HONEST}\n")
        assert result.verdict == verdict, (kill, result)
    assert sandbox_processes(evaluator) == []


@needs_full_isolation
def test_cannot_write_outside_its_directory(evaluator, tmp_path):
    targets = [tmp_path / "planted.txt", Path.cwd() / "planted-by-sandbox.txt", Path.home() / "planted-by-sandbox.txt"]
    attack = "import sys\nblocked = 0\n"
    for target in targets:
        attack += f"try:\n    open({str(target)!r}, 'w').write('x')\nexcept OSError:\n    blocked += 1\n"
    attack += f"print(3 if blocked == {len(targets)} else 0)\n"
    # Judged on the first test only: "3" is printed exactly when every write was refused.
    problem = stdin_problem([("1 2", "3")], problem_id="add", time_limit_s=1.0)
    assert run_attack(evaluator, attack, problem).verdict == "accepted"
    assert not any(target.exists() for target in targets)


@needs_full_isolation
def test_cannot_read_the_callers_environment_or_files(evaluator, tmp_path):
    os.environ["MICROCODER_TEST_SECRET"] = "s3cr3t-value"
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text("s3cr3t-value")
    attack = f"""
        import os
        found = "s3cr3t-value" in repr(dict(os.environ))
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    found |= b"s3cr3t-value" in open(f"/proc/{{pid}}/environ", "rb").read()
                except OSError:
                    pass
        try:
            found |= "s3cr3t" in open({str(secret_file)!r}).read()
        except OSError:
            pass
        print(0 if found else 3)
    """
    try:
        problem = stdin_problem([("1 2", "3")], problem_id="add", time_limit_s=2.0)
        assert run_attack(evaluator, attack, problem).verdict == "accepted"
    finally:
        del os.environ["MICROCODER_TEST_SECRET"]


@needs_full_isolation
def test_cannot_open_a_network_connection(evaluator):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        attack = f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=1)
                print(0)
            except OSError:
                print(3)
        """
        problem = stdin_problem([("1 2", "3")], problem_id="add", time_limit_s=2.0)
        assert run_attack(evaluator, attack, problem).verdict == "accepted"


@pytest.fixture
def host_directory():
    """A fresh directory, readable by every uid, in a host directory that runs see (none of
    the hidden ones): where a host service's socket or lock file could lie."""
    for parent in ("/var/lib", "/opt", "/usr/local"):
        if os.path.isdir(parent) and os.access(parent, os.W_OK):
            directory = Path(tempfile.mkdtemp(prefix="microcoder-test-", dir=parent))
            directory.chmod(0o755)
            try:
                yield directory
            finally:
                shutil.rmtree(directory)
            return
    pytest.skip("no host directory that runs see (/var/lib, /opt, /usr/local) is writable here")


@needs_the_syscall_filter
def test_cannot_connect_to_a_unix_socket_on_a_host_path(evaluator, host_directory):
    # The network namespace keeps out the host's loopback and abstract sockets, not a socket
    # file any uid may write (a cluster agent's, dbus's, journald's): that one is reached
    # through the filesystem, read-only mount or not.
    stream_path, datagram_path = str(host_directory / "stream.sock"), str(host_directory / "datagram.sock")
    with socket.socket(socket.AF_UNIX) as listener, socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as inbox:
        listener.bind(stream_path)
        listener.listen()
        inbox.bind(datagram_path)
        for path in (stream_path, datagram_path):
            os.chmod(path, 0o777)
        attack = f"""
            import ctypes, multiprocessing, socket
            stream, datagram = {stream_path!r}, {datagram_path!r}
            def tried(attempt):
                try:
                    attempt()
                    return "reached"
                except OSError:
                    return "refused"
            def connect():
                socket.socket(socket.AF_UNIX).connect(stream)
            def send():
                socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"x", datagram)
            def send_from_a_pair():  # a datagram socket can send to any address, made however
                socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0].sendto(b"x", datagram)
            def connect_a_pair():  # a stream socket whose peer is gone
                mine, peer = socket.socketpair()
                peer.close()
                mine.connect(stream)
            def ring():  # io_uring's own socket and connect requests pass no seccomp filter
                libc = ctypes.CDLL(None, use_errno=True)
                if libc.syscall(425, 1, ctypes.create_string_buffer(120)) < 0:  # io_uring_setup
                    raise OSError(ctypes.get_errno(), "io_uring_setup")
            outcome = [tried(attempt) for attempt in (connect, send, send_from_a_pair, connect_a_pair, ring)]
            mine, peer = socket.socketpair()  # what multiprocessing and asyncio use
            mine.sendall(b"pair")
            with multiprocessing.Pool(2) as pool:
                outcome += [peer.recv(4).decode(), pool.map(abs, [-1, -2])]
            print(3 if outcome == ["refused"] * 5 + ["pair", [1, 2]] else repr(outcome).replace(" ", ""))
        """
        problem = stdin_problem([("1 2", "3")], problem_id="add", time_limit_s=2.0)
        result = run_attack(evaluator, attack, problem)
        listener.setblocking(False)
        inbox.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()
        with pytest.raises(BlockingIOError):
            inbox.recv(1)
    assert result.verdict == "accepted", result.detail


@needs_the_syscall_filter
def test_cannot_hold_a_lock_on_a_host_file(evaluator, host_directory):
    # A lock on a file the run can read would block a host process that takes the same lock
    # (flock against flock; a POSIX or OFD record lock against both; a lease against any
    # writer) for as long as the run lives: up to the wall-clock backstop.
    target = host_directory / "shared.lock"
    target.write_text("x")
    target.chmod(0o644)
    attack = f"""
        import fcntl, os, struct, time
        fd = os.open({str(target)!r}, os.O_RDONLY)
        def tried(attempt):
            try:
                attempt()
                return "held"
            except OSError:
                return "refused"
        whole_file = struct.pack("hhqqi", fcntl.F_RDLCK, 0, 0, 0, 0)  # struct flock
        outcome = [tried(attempt) for attempt in (
            lambda: fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB),
            lambda: fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB),
            lambda: fcntl.fcntl(fd, fcntl.F_OFD_SETLK, whole_file),
            lambda: fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK),
        )]
        time.sleep(1)  # keeping whatever it got while the test looks from outside
        print(3 if outcome == ["refused"] * 4 else repr(outcome).replace(" ", ""))
    """
    problem = stdin_problem([("1 2", "3")], problem_id="add", time_limit_s=2.0)
    inode, held = f":{target.stat().st_ino} ", []
    with ThreadPoolExecutor(1) as pool, open(target) as probe:
        judged = pool.submit(run_attack, evaluator, attack, problem)
        while not judged.done():
            with open("/proc/locks") as locks:  # every lock on the host, by device:inode
                held += [line for line in locks if inode in line]
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a host process would do
                fcntl.flock(probe, fcntl.LOCK_UN)
            except BlockingIOError:
                held.append("flock")
            time.sleep(0.005)
        result = judged.result()
    assert held == []
    assert result.verdict == "accepted", result.detail


# Searches its frames and every live container for a string "SECRET_..." longer than the
# prefix (built at run time, so the program's own constants never match) and prints it.
MEMORY_SEARCH = """
import gc, sys
prefix = "SECRET" + "_"
found = []
frame = sys._getframe()
while frame:
    found += [v for v in list(frame.f_locals.values()) + list(frame.f_globals.values())
              if isinstance(v, str) and v.startswith(prefix) and v != prefix]
    frame = frame.f_back
for value in gc.get_objects():
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
    found += [v for v in items if isinstance(v, str) and v.startswith(prefix) and v != prefix]
print(found[0] if found else "nothing")
"""


def test_cannot_find_the_expected_output_in_its_frames_or_memory(evaluator):
    # Control: a secret the program does hold (its own input) is found, so the search works.
    control = stdin_problem([("SECRET_control", "SECRET_control")], problem_id="control", time_limit_s=2.0)
    with_input = "seen = input()\n" + MEMORY_SEARCH
    assert evaluator.evaluate_code(control, with_input).verdict == "accepted"
    # The expected output is nowhere in the candidate's process: the same search fails.
    problem = stdin_problem([("", "SECRET_7f3a91")], problem_id="secret", time_limit_s=2.0)
    result = evaluator.evaluate_code(problem, MEMORY_SEARCH)
    assert result.verdict == "wrong_answer"
    assert "got 'nothing'" in result.detail


def test_catching_the_timeout_signals_does_not_help(evaluator):
    result = run_attack(evaluator, """
        import signal
        for signum in (signal.SIGPROF, signal.SIGXCPU, signal.SIGTERM, signal.SIGALRM):
            signal.signal(signum, lambda *_: print(3, flush=True))
        while True:
            pass
    """)
    assert result.verdict == "time_limit_exceeded"


@pytest.mark.parametrize("attack", [
    # the statuses the sandbox reads were once in the result file a program can write
    "import os\nprint(0)\nos.pwrite(3, b'P', 0)\n",
    "import os\nprint(0)\nos.ftruncate(3, 0)\nos._exit(242)\n",
    "import os\nprint(0)\nos.write(4, b'P')\n",
    "import os, signal\n"
    "def hedge(*_):\n    os.pwrite(3, b'P', 0)\n    os._exit(242)\n"
    "signal.signal(signal.SIGPROF, hedge)\nwhile True:\n    pass\n",
])
def test_a_program_cannot_pass_its_failure_off_as_the_problems(evaluator, attack):
    # A judge_error is left out of pass@k and masked in training: a hedge would pay.
    assert run_attack(evaluator, attack).verdict in ("wrong_answer", "runtime_error", "time_limit_exceeded")


def test_printing_the_answer_then_failing_is_a_runtime_error(evaluator):
    assert run_attack(evaluator, HONEST + "\nraise SystemExit(1)\n").verdict == "runtime_error"


def test_a_daemon_thread_left_running_is_killed_and_the_answer_stands(evaluator):
    result = run_attack(evaluator, """
        import threading
        def spin():
            while True:
                pass
        threading.Thread(target=spin, daemon=True).start()
        print(sum(map(int, input().split())))
    """)
    assert result.verdict == "accepted"


def test_a_thread_that_never_ends_is_time_limit_exceeded(evaluator):
    result = run_attack(evaluator, """
        import threading
        def spin():
            while True:
                pass
        threading.Thread(target=spin).start()
        print(sum(map(int, input().split())))
    """)
    assert result.verdict == "time_limit_exceeded"


@needs_full_isolation
def test_a_daemonised_grandchild_is_swept(evaluator):
    result = run_attack(evaluator, """
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(300)
            os._exit(0)
        print(sum(map(int, input().split())))
    """)
    assert result.verdict == "accepted"
    assert sandbox_processes(evaluator) == []


def test_deep_recursion_works_when_the_program_raises_the_limit(evaluator):
    # lru_cache recursion goes through C frames: 100,000 levels need the big stack the
    # workers are started with (8 MiB segfaults near 30,000 levels).
    result = run_attack(evaluator, """
        import sys
        from functools import lru_cache
        sys.setrecursionlimit(10 ** 6)
        @lru_cache(None)
        def depth(n):
            return 0 if n == 0 else 1 + depth(n - 1)
        a, b = map(int, input().split())
        print(a + b + depth(100000) - 100000)
    """)
    assert result.verdict == "accepted"


def test_unbounded_recursion_is_a_runtime_error(evaluator):
    result = run_attack(evaluator, "def f(n):\n    return f(n + 1)\nf(0)\n")
    assert result.verdict == "runtime_error"
    assert "RecursionError" in result.detail


DEEP = "b'R' + b'[' * 100000 + b']' * 100000"


@pytest.mark.parametrize("attack", [
    "import os\nos.write(3, b'R{not json')\nos._exit(0)\n",  # the return value's channel, written by hand
    f"import os\nos.write(3, {DEEP})\nos._exit(0)\n",  # JSON too deep for the caller to parse
    "import sys\nsys.set_int_max_str_digits(0)\nclass Solution:\n    def f(self, a, b):\n        return 10 ** 5000\n",
])
def test_a_return_value_that_breaks_the_comparison_is_a_wrong_answer(evaluator, attack):
    problem = call_problem([("1\n2", "3"), ("2\n2", "4")], entry_point="Solution().f", problem_id="callf")
    honest = "class Solution:\n    def f(self, a, b):\n        return a + b\n"
    code = attack if "class Solution" in attack else honest + attack
    results = evaluator.evaluate([problem], [Sample("callf", code=honest), Sample("callf", code=code)])
    assert [result.verdict for result in results] == ["accepted", "wrong_answer"], results


def test_dying_of_a_signal_without_a_name_is_a_runtime_error(evaluator):
    result = run_attack(evaluator, "import os\nos.kill(os.getpid(), 40)\n")
    assert result.verdict == "runtime_error" and "40" in result.detail


def test_output_that_crashes_the_problems_checker_is_a_wrong_answer(evaluator):
    checker = Checker(python="def check(input, expected, got):\n    return abs(float(got) - float(expected)) < 1e-6\n")
    problem = stdin_problem([("", "0.5")], problem_id="half", checker=checker)
    results = evaluator.evaluate([problem], [Sample("half", code="print(0.5)"), Sample("half", code="print('no idea')")])
    assert [result.verdict for result in results] == ["accepted", "wrong_answer"]
    assert "checker failed on this output" in results[1].detail

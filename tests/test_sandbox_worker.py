"""What the worker prepares once and shares with every run it forks (compiled programs,
prelude modules, the run directory, std streams) must still look fresh to each run."""

import json
import platform
import textwrap

import pytest

from microcoder.evaluator import Evaluator, EvaluatorConfig
from microcoder.evaluator.isolation import isolation_plan
from microcoder.evaluator.sandbox import RUN_ENVIRONMENT, Sandbox
from tests.helpers import call_problem


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1) as sandbox:  # one worker: every run below shares it
        yield sandbox


def test_a_run_sees_none_of_the_last_runs_files(sandbox):
    litter = textwrap.dedent("""
        import os
        os.makedirs("deep/er", exist_ok=True)
        open("deep/er/file", "w").write("x")
        open(os.path.join(os.environ["TMPDIR"], "tmpfile"), "w").write("x")
        os.mkdir("locked")
        open("locked/inside", "w").write("x")
        os.chmod("locked", 0)
        print(sorted(os.listdir(".")))
    """)
    look = "import os\nprint(sorted(os.listdir('.')), os.getcwd() == os.environ['HOME'] == os.environ['TMPDIR'])"
    first = sandbox.run_program(litter)
    assert first.status == "ok" and first.stdout.split() == [b"['deep',", b"'locked',", b"'tmpfile']"]
    second = sandbox.run_program(look)
    assert second.status == "ok" and second.stdout == b"[] True\n"


def test_state_a_run_leaves_in_its_modules_does_not_reach_the_next(sandbox):
    # The prelude's imports are bound once in the worker; each run must still get its own copy.
    code = textwrap.dedent("""
        import json, collections
        from collections import deque
        collections.SEEN = getattr(collections, "SEEN", 0) + 1
        json.dumps = None
        print(collections.SEEN, deque.__name__)
    """)
    runs = [sandbox.run_program(code) for _ in range(3)]
    assert [run.stdout for run in runs] == [b"1 deque\n"] * 3
    prelude = "from collections import *\nimport math\nCALLS = []\n"
    solution = "def f(x):\n    CALLS.append(x)\n    math.floor = None\n    globals().pop('Counter')\n    return len(CALLS)\n"
    check = "def f(x):\n    return [len(CALLS), math.floor(2.5), Counter('aab')['a']]\n"
    calls = [sandbox.run(solution, kind="call", entry_point="f", prelude=prelude, arguments=[str(i)]) for i in range(3)]
    assert [json.loads(run.return_json) for run in calls] == [1, 1, 1]
    after = sandbox.run(check, kind="call", entry_point="f", prelude=prelude, arguments=["0"])
    assert json.loads(after.return_json) == [0, 2, 2]


def test_a_failing_prelude_import_is_the_problems_fault():
    problem = call_problem([("1", "1")], entry_point="f", problem_id="bad-import", prelude="from math import no_such_name\n")
    with Evaluator(EvaluatorConfig(workers=1)) as evaluator:
        result = evaluator.evaluate_code(problem, "def f(x):\n    return x\n")
        assert result.verdict == "judge_error" and "no_such_name" in result.detail
        fine = call_problem([("1", "1")], entry_point="f", problem_id="fine", prelude="from math import floor\n")
        assert evaluator.evaluate_code(fine, "def f(x):\n    return floor(x)\n").verdict == "accepted"


def test_a_source_too_large_for_the_worker_compiles_in_the_run(sandbox):
    padding = "# " + "a" * (1 << 20) + "\n"
    assert sandbox.run_program(padding + "print(3)\n").stdout == b"3\n"
    broken = sandbox.run_program(padding + "print(3\n")
    assert broken.status == "syntax_error" and "never closed" in broken.detail


def test_syntax_errors_and_compile_warnings_read_as_the_interpreter_prints_them(sandbox):
    broken = sandbox.run_program("x = (1,\nprint(x)\n")
    assert broken.status == "syntax_error" and "SyntaxError" in broken.detail and "solution.py" in broken.detail
    warned = sandbox.run_program("assert (1, 'always true')\nprint(1)\n")
    assert warned.status == "ok" and warned.stdout == b"1\n"
    assert b"SyntaxWarning: assertion is always true" in warned.stderr
    again = sandbox.run_program("assert (1, 'always true')\nprint(2)\n")  # compiled once, told every time
    assert b"SyntaxWarning" in again.stderr


def test_a_run_sees_only_the_scrubbed_environment(sandbox):
    run = sandbox.run_program("import os\nprint(sorted(os.environ))\n")
    assert run.stdout.decode().strip() == str(sorted([*RUN_ENVIRONMENT, "HOME", "TMPDIR"]))


def worker_peak_rss_mb(sandbox):
    [worker] = sandbox._all
    status = open(f"/proc/{worker.process.pid}/status").read()
    return int(status.split("VmHWM:")[1].split()[0]) / 1024


def compile_bomb(depth, breaks):
    """A few KB of source whose code object is gigabytes: each `finally` body is compiled
    once per way out of its `try`, and each `break` is another way out."""
    def level(remaining, indent):
        pad = " " * indent
        if remaining == 0:
            return pad + "c = c + 1\n"
        body = "".join(f"{pad}        if c: break\n" for _ in range(breaks))
        return f"{pad}while c:\n{pad}    try:\n{body}{pad}    finally:\n" + level(remaining - 1, indent + 8)
    return "def f(c):\n" + level(depth, 4) + "print('compiled')\n"


def test_compiling_a_compiler_bomb_costs_the_run_not_the_worker(sandbox):
    sandbox.run_program("print(1)")  # the worker is up
    before = worker_peak_rss_mb(sandbox)
    bomb = compile_bomb(5, 10)  # 2.5 KB; compiled in the worker itself, it took it to ~475 MB
    assert len(bomb) < 4000
    run = sandbox.run(bomb, time_limit_s=1.0, memory_limit_mb=256)
    assert run.status == "memory_limit_exceeded", run
    assert worker_peak_rss_mb(sandbox) - before < 64
    assert sandbox.run_program("print(2)").stdout == b"2\n"


def test_a_run_cannot_find_an_earlier_samples_program(sandbox):
    sandbox.run_program("print(1)  # the answer of sample " + "ONE-1234")
    search = textwrap.dedent("""
        import gc
        gc.unfreeze()  # the worker's objects are frozen in every run: list them too
        def holds(marker):
            for obj in gc.get_objects():
                texts = obj.keys() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
                if any(isinstance(text, str) and marker in text for text in texts):
                    return True
            return False
        # Markers joined at run time: a constant "a" + "b" would sit folded in this code's constants.
        print(holds(" ".join(["sample", "ONE-1234"])), holds(" ".join(["sample", "TWO-5678"])))  # sample TWO-5678
    """)
    assert sandbox.run_program(search).stdout == b"False True\n"  # its own program it finds


def test_a_tree_too_deep_to_remove_simply_does_not_stop_the_next_run(sandbox):
    deep = "import os\nfor _ in range(1500):\n    os.mkdir('d')\n    os.chdir('d')\nprint('deep')\n"
    assert sandbox.run_program(deep).stdout == b"deep\n"
    assert sandbox.run_program("import os\nprint(os.listdir('.'))").stdout == b"[]\n"


@pytest.mark.skipif(not (isolation_plan("auto").switch_uid and isolation_plan("auto").isolate_filesystem),
                    reason="needs root with namespaces (the shared temp directories are the worker's own)")
def test_what_a_run_leaves_in_the_shared_temp_directories_is_gone_for_the_next(sandbox):
    litter = "import os\nfor path in ('/tmp/beacon', '/var/tmp/beacon', '/dev/shm/beacon'):\n    open(path, 'w').write('x')\n"
    assert sandbox.run_program(litter).status == "ok"
    look = "import os\nprint([os.path.exists(p) for p in ('/tmp/beacon', '/var/tmp/beacon', '/dev/shm/beacon')])"
    assert sandbox.run_program(look).stdout == b"[False, False, False]\n"


def test_stdin_is_a_read_only_file_and_a_prelude_loads_nothing_new_into_the_worker(sandbox):
    attempt = textwrap.dedent("""
        import os
        for fd in (0, os.open("/proc/self/fd/0", os.O_RDWR)):  # as given, and reopened for writing
            try:
                os.pwrite(fd, b"XX", 0)
            except OSError as error:
                print(type(error).__name__)
        print(input())
    """)
    run = sandbox.run_program(attempt, stdin=b"given\n")
    assert run.stdout == b"PermissionError\nPermissionError\ngiven\n", run
    prelude = "from json import tool\n"  # a submodule nobody had loaded
    call = sandbox.run("def f():\n    return tool.__name__\n", kind="call", entry_point="f", prelude=prelude)
    assert call.return_json == '"json.tool"'
    after = sandbox.run_program("import sys\nprint('json.tool' in sys.modules)")
    assert after.stdout == b"False\n"


def test_string_hashes_are_the_same_on_every_worker_and_start():
    code = "print(hash('microcoder'), list({'a', 'b', 'c', 'd', 'e'}))"
    outputs = set()
    for _ in range(2):
        with Sandbox(workers=2) as sandbox:
            outputs.update(run.stdout for run in sandbox.run_programs([(code, "")] * 8))
            assert len(sandbox._all) == 2  # both workers answered
    assert len(outputs) == 1


def processes_of(uids):
    import os

    found = []  # living ones: a killed orphan may wait a while for init to reap it
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid in uids:
                state = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(entry)
        except (FileNotFoundError, ProcessLookupError):
            pass
    return found


def test_an_interrupted_run_does_not_hand_its_reply_to_the_next(monkeypatch):
    from microcoder.evaluator import sandbox as sandbox_module

    def interrupted(fd):
        raise KeyboardInterrupt  # e.g. Ctrl-C while we wait for the reply

    # Still running when interrupted: the worker is closed mid-run (killed after 5 s).
    daemon = "import os, time\nif os.fork() == 0:\n    os.setsid()\ntime.sleep(100)\n"
    with Sandbox(workers=1) as box:
        assert box.run_program("print('warm')").stdout == b"warm\n"
        uids = set(box.run_uids)
        if not uids:
            pytest.skip("runs have no uid of their own here (not root): their processes cannot be told apart")
        with monkeypatch.context() as patch:
            patch.setattr(sandbox_module, "read_message", interrupted)
            with pytest.raises(KeyboardInterrupt):
                box.run(daemon, time_limit_s=30)
        assert box.run_program("print('B')").stdout == b"B\n"
    # The interrupted run's worker could not sweep: closing it killed what the run left.
    assert not [pid for pid in processes_of(uids)], "the interrupted run left a process"


def test_a_worker_that_fails_to_start_once_does_not_break_its_slot(monkeypatch):
    import os
    import signal

    from microcoder.evaluator import sandbox as sandbox_module

    real_worker = sandbox_module.Worker
    failures = []

    def flaky_worker(*args, **kwargs):
        if not failures:
            failures.append(1)
            raise RuntimeError("sandbox worker failed to start")
        return real_worker(*args, **kwargs)

    with Sandbox(workers=1) as box:
        assert box.run_program("print(1)").stdout == b"1\n"
        [worker] = box._all
        os.kill(worker.process.pid, signal.SIGKILL)
        worker.process.wait()
        monkeypatch.setattr(sandbox_module, "Worker", flaky_worker)
        with pytest.raises(RuntimeError):
            box.run_program("print(2)")
        assert box.run_program("print(3)").stdout == b"3\n"


FULL = isolation_plan("auto").switch_uid and isolation_plan("auto").isolate_filesystem
needs_full_isolation = pytest.mark.skipif(not FULL, reason="needs root with namespaces")


@needs_full_isolation
def test_nothing_a_run_can_make_outlives_it_for_the_next(sandbox):
    leave = textwrap.dedent("""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        made = []
        for path in ("/run/lock/beacon", "/var/lock/beacon", "/etc/beacon", "/usr/beacon"):
            try:
                open(path, "w").write("x")
                made.append(path)
            except OSError:
                pass
        made.append(("shm", libc.shmget(0x4D43, 4096, 0o1666) >= 0))
        made.append(("mq", libc.mq_open(b"/beacon", os.O_CREAT | os.O_RDWR, 0o666, None) >= 0))
        # a key in the user keyring of the run's uid (add_key: syscall 248; -4 = that keyring)
        made.append(("key", libc.syscall(248, b"user", b"beacon", b"left by run 1", 13, -4) > 0))
        print(made)
    """)
    first = sandbox.run_program(leave)
    assert first.stdout == b"[('shm', False), ('mq', False), ('key', False)]\n", first


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="the seccomp filter is x86_64 and aarch64 only")
@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_a_run_can_make_no_namespace_and_mount_nothing(isolation):
    # In a user namespace of its own a run holds every capability again: with it, where its
    # cgroup's files are its uid's (runs that keep the caller's uid), it could mount a cgroup
    # filesystem and lift its own memory limit (tests/test_sandbox_cgroup.py). Every way in
    # is refused, at every isolation level; forks, threads and subprocesses still work.
    attack = textwrap.dedent("""
        import ctypes, os, subprocess, threading
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        def errno(result):
            return "ok" if result >= 0 else os.strerror(ctypes.get_errno())
        NEWUSER, NEWNS, NEWCGROUP, NEWPID, SIGCHLD = 0x10000000, 0x20000, 0x02000000, 0x20000000, 17
        clone, clone3 = {"x86_64": (56, 435), "aarch64": (220, 435)}[os.uname().machine]
        os.mkdir("target")
        tried = {
            "unshare": errno(libc.unshare(NEWUSER | NEWNS | NEWCGROUP)),
            "unshare user": errno(libc.unshare(NEWUSER)),
            "clone": errno(libc.syscall(clone, NEWUSER | SIGCHLD, 0, 0, 0, 0)),
            "clone pid": errno(libc.syscall(clone, NEWPID | SIGCHLD, 0, 0, 0, 0)),
            "clone3": errno(libc.syscall(clone3, 0, 0)),
            "setns": errno(libc.setns(os.open("/proc/self/ns/user", os.O_RDONLY), 0)),
            "mount": errno(libc.mount(b"none", b"target", b"tmpfs", 0, None)),
            "umount2": errno(libc.umount2(b"/proc", 2)),
            "fsopen": errno(libc.syscall(430, b"tmpfs", 0)),
        }
        print(sorted(set(tried.values())))
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        thread = threading.Thread(target=print, args=("thread",))
        thread.start()
        thread.join()
        print(os.waitpid(pid, 0)[1] >> 8, subprocess.run(["echo", "child"], capture_output=True).stdout.decode().strip())
    """)
    with Sandbox(workers=1, isolation=isolation) as box:
        result = box.run_program(attack)
    assert result.status == "ok", result
    lines = result.stdout.decode().splitlines()
    assert lines == ["['Function not implemented', 'Operation not permitted']", "thread", "7 child"], result


def test_without_a_uid_of_its_own_a_run_cannot_unmount_what_hides_our_files(monkeypatch, tmp_path):
    import os
    import shutil

    from microcoder.evaluator import sandbox as sandbox_module
    from microcoder.evaluator.isolation import IsolationPlan, command_succeeds

    unshare = shutil.which("unshare")
    prefix = (unshare, "--user", "--map-root-user", "--net", "--mount", "--ipc")
    if not unshare or not command_succeeds([*prefix, "true"]):
        pytest.skip("user namespaces are not available here")
    plan = IsolationPlan(prefix, False, True, "namespaces; runs keep the caller's uid")
    monkeypatch.setattr(sandbox_module, "isolation_plan", lambda mode: plan)
    secret = tmp_path / "expected-outputs.txt"  # under /tmp, which the worker covers
    secret.write_text("secret")
    attack = textwrap.dedent(f"""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        refused = libc.umount2(b"/tmp", 2) != 0  # MNT_DETACH: the host's /tmp would show
        print(refused, os.path.exists({str(secret)!r}))
    """)
    with Sandbox(workers=1) as box:
        assert box.run_program("print(1)").stdout == b"1\n"
        assert box.run_program(attack).stdout == b"True False\n"

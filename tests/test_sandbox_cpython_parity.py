"""A sandboxed run behaves as `python3 solution.py < input` does: one test per difference
the differential harness (benchmarks/differential.py) found and the worker now removes.
The expected stdout and exit statuses are CPython 3.11's, read off the harness's report;
tests/test_differential.py compares against a live `python3` as well."""

import signal
import textwrap

import pytest

from microcoder.evaluator.sandbox import Sandbox


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1) as sandbox:
        yield sandbox


def run(sandbox, source, stdin=b"", **call):
    return sandbox.run(textwrap.dedent(source), stdin, time_limit_s=5.0, **call)


def test_std_streams_have_the_attributes_cpython_gives_them(sandbox):
    # Fast-I/O templates test `"r" in file.mode`; the streams had no `mode` at all.
    result = run(sandbox, """
        import sys
        for stream in (sys.stdin, sys.stdout, sys.stderr):
            print(repr(stream), stream.mode, stream.errors, repr(stream.buffer), stream.buffer.raw.name)
    """)
    assert result.status == "ok", result.stderr
    assert result.stdout.decode().splitlines() == [
        "<_io.TextIOWrapper name='<stdin>' mode='r' encoding='utf-8'> r surrogateescape <_io.BufferedReader name='<stdin>'> <stdin>",
        "<_io.TextIOWrapper name='<stdout>' mode='w' encoding='utf-8'> w surrogateescape <_io.BufferedWriter name='<stdout>'> <stdout>",
        "<_io.TextIOWrapper name='<stderr>' mode='w' encoding='utf-8'> w backslashreplace <_io.BufferedWriter name='<stderr>'> <stderr>",
    ]


def test_the_fast_io_template_reading_file_mode_runs(sandbox):
    source = (__import__("pathlib").Path(__file__).parent / "fixtures" / "differential" / "stdin"
              / "fastio_rival_template.py").read_text()
    result = sandbox.run(source, b"3\n1 2 3\n")
    assert (result.status, result.stdout) == ("ok", b"6\n"), result.stderr


def test_crlf_input_keeps_its_carriage_returns(sandbox):
    # CPython's stdin has newline="\n": no universal-newline translation.
    result = run(sandbox, "s = input()\nprint(len(s), repr(s))", b"ab\r\ncd\r\n")
    assert result.stdout == b"3 'ab\\r'\n"


def test_a_lone_surrogate_is_written_as_its_byte(sandbox):
    # CPython's stdout uses surrogateescape under C.UTF-8; it used to be a UnicodeEncodeError.
    result = run(sandbox, 'print("\\udcff")')
    assert (result.status, result.stdout) == ("ok", b"\xff\n")


def test_os_write_lands_among_prints_where_a_block_sized_buffer_puts_it(sandbox):
    # stdout's buffer is the file's block size (4096), not 8192, which decides how much
    # of the prints CPython has written when os.write comes (8190 bytes, measured).
    result = run(sandbox, """
        import os
        for i in range(2000):
            print(i)
        os.write(1, b"direct\\n")
        print("end")
    """)
    numbers = "".join(f"{i}\n" for i in range(2000)).encode()
    assert result.stdout.index(b"direct\n") == 8190
    assert result.stdout.replace(b"direct\n", b"") == numbers + b"end\n"


def test_closing_stdout_or_setting_it_to_none_is_a_clean_exit(sandbox):
    # CPython skips a closed or None sys.stdout at exit; the worker used to exit 120.
    closed = run(sandbox, "import sys\nprint(6)\nsys.stdout.close()")
    gone = run(sandbox, "import sys\nprint(6)\nsys.stdout.flush()\nsys.stdout = None")
    assert (closed.status, closed.exit_code, closed.stdout) == ("ok", 0, b"6\n")
    assert (gone.status, gone.exit_code, gone.stdout) == ("ok", 0, b"6\n")


def test_a_failing_flush_at_exit_is_status_120_whatever_the_exit_code(sandbox):
    result = run(sandbox, "import os, sys\nprint('lost')\nos.close(1)\nsys.exit(3)")
    assert result.exit_code == 120


def test_output_left_in_the_original_stdout_is_flushed_at_exit(sandbox):
    # After sys.stdout is replaced, CPython still flushes the original stream at exit
    # (restored from sys.__stdout__); so must we, also what atexit handlers write to it.
    replaced = run(sandbox, """
        import sys
        print("first, original")
        sys.stdout = open(1, "w", closefd=False)
        print("second, replacement")
    """)
    assert replaced.stdout == b"second, replacement\nfirst, original\n"
    atexit_writes = run(sandbox, """
        import atexit, io, sys
        atexit.register(lambda: sys.__stdout__.write("from atexit\\n"))
        print("main")
        sys.stdout = io.StringIO()
    """)
    assert atexit_writes.stdout == b"main\nfrom atexit\n"


def test_the_programs_objects_are_finalized_at_exit(sandbox):
    # A file object left open flushes as it goes, and __del__ runs, after sys.stdout's flush.
    left_open = run(sandbox, 'out = open(1, "w")\nout.write("from the file\\n")\nprint("from print")')
    assert left_open.stdout == b"from print\nfrom the file\n"
    noisy = run(sandbox, """
        class Noisy:
            def __del__(self):
                print("deleted")
        keep = Noisy()
        print("main")
    """)
    assert noisy.stdout == b"main\ndeleted\n"
    detached = run(sandbox, "import sys\nbuffer = sys.stdout.detach()\nbuffer.write(b'through the buffer\\n')")
    assert (detached.exit_code, detached.stdout) == (120, b"through the buffer\n")


def test_a_call_solutions_instance_is_deleted_before_the_exit_handlers(sandbox):
    result = run(sandbox, """
        import atexit
        atexit.register(print, "atexit")
        class Solution:
            def __del__(self):
                print("instance deleted")
            def f(self, n):
                return n
    """, kind="call", entry_point="Solution().f", arguments=["3"])
    assert (result.status, result.return_json, result.stdout) == ("ok", "3", b"instance deleted\natexit\n")


def test_the_programs_excepthook_reports_its_uncaught_exception(sandbox):
    result = run(sandbox, """
        import sys
        sys.excepthook = lambda kind, value, tb: print("hook saw", kind.__name__, value)
        raise ValueError("boom")
    """)
    assert (result.exit_code, result.stdout) == (1, b"hook saw ValueError boom\n")


def test_an_uncaught_keyboard_interrupt_ends_by_sigint(sandbox):
    result = run(sandbox, "print('before')\nraise KeyboardInterrupt")
    assert (result.status, result.signal, result.stdout) == ("runtime_error", signal.SIGINT, b"before\n")


def test_sys_exit_with_an_int_beyond_a_c_long_is_status_255(sandbox):
    result = run(sandbox, "import sys\nsys.exit(2 ** 70)")
    assert (result.status, result.exit_code) == ("runtime_error", 255)


def test_main_has_the_names_cpython_gives_it(sandbox):
    result = run(sandbox, """
        import sys
        main = sys.modules["__main__"]
        print(sorted(vars(main)), __annotations__, __cached__, type(__loader__).__name__)
    """)
    assert result.stdout.decode() == (
        "['__annotations__', '__builtins__', '__cached__', '__doc__', '__file__', '__loader__', '__name__', "
        "'__package__', '__spec__', 'main', 'sys'] {} None SourceFileLoader\n")


@pytest.mark.parametrize("source", [
    "def f(values):\n    return values[3]\n\nprint(f([1, 2]))\n",
    "try:\n    1 / 0\nexcept ZeroDivisionError as error:\n    raise KeyError('k') from error\n",
    "x = 1\nprint(undefined_name + x)\n",
    "def f(:\n    pass\n",
    "import warnings\nwarnings.warn('careful')\nraise SystemExit('bye')\n",
])
def test_stderr_is_what_python3_solution_py_prints(sandbox, tmp_path, source):
    # No frame of the harness, the program's lines under its frames, and the program named
    # solution.py (as `python3 solution.py` names it, without the directory it runs in).
    (tmp_path / "solution.py").write_text(source)
    import subprocess
    import sys

    plain = subprocess.run([sys.executable, "solution.py"], cwd=tmp_path, capture_output=True)
    expected = plain.stderr.replace(str(tmp_path / "solution.py").encode(), b"solution.py")
    result = sandbox.run(source, b"", time_limit_s=5.0)
    assert result.stderr == expected
    assert result.exit_code == plain.returncode

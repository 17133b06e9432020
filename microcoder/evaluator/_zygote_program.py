"""The sandbox worker's programs: compiled once in the worker, before the fork, so that
every test's child inherits the work.

- `compiled_program`: a sample's program, compiled in a forked helper under the run's
  limits (a few KB of source can make the compiler take gigabytes), kept for the tests of
  that sample only;
- `prepared_prelude`: a call problem's prelude, its imports of modules the worker holds
  run here into a module every child uses as its own.

Part of the worker (`_zygote.py`), which loads it by path: it imports nothing of microcoder.
"""

import builtins
import linecache
import marshal
import os
import resource
import select
import signal
import sys
import time
import traceback
import types
import warnings

from _wire import write_all
from _zygote_child import COMPILE_ERRORS, MAX_FD, PROGRAM_NAME, limits_for
from _zygote_confinement import become

COMPILE_IN_HELPER_BYTES = 1 << 20  # larger sources: each child compiles them itself
MAX_COMPILED_BYTES = 16 << 20  # a larger code object is compiled by each child instead of kept

_preludes = {}  # {prelude text: prepared_prelude's answer}
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


_latest_program = {}  # {source: compiled_program's answer}, of the latest program only


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
    if source not in _latest_program:
        _latest_program.clear()
        # The program's lines for tracebacks (a lazy linecache entry, read only when one
        # is printed): the source is not a file the run could read.
        linecache.cache[PROGRAM_NAME] = (lambda: source,)
        _latest_program[source] = compile_in_helper(source, request, uid)
    return _latest_program[source]


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


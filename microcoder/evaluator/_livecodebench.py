"""Strict mode's run: a program run the way LiveCodeBench's grader runs it, in the sandbox.

Imported by the sandbox's child (`_zygote.child_main`) when a run asks for the
`livecodebench` harness, after the child is set up and the program's limits apply; the
expected outputs never come here (the judge compares in the caller's process, by
`compare.py`'s strict rules). The rules are read from LiveCodeBench's
lcb_runner/evaluation/testing_util.py (`run_test`, `grade_stdio`, `grade_call_based`,
`reliability_guard`) and compute_code_generation_metrics.py, written here in our words:

- Before anything of the program runs, a set of os, shutil and subprocess functions is
  replaced by None (calling one is a TypeError), `quit` and `help` are None, and the
  modules resource, psutil, tkinter, joblib and ipdb cannot be imported. LiveCodeBench
  does this in a process that has already imported numpy and multiprocessing (its
  grader's own imports), whose imports call functions the guard removes (numpy's calls
  os.putenv): they are imported here first too, so that `import numpy` finds numpy
  loaded, as there. To spare the ~0.1 s of CPU this costs, only for a program that
  imports something they could be reached through, or names one of them, or imports by a
  computed name (`HARNESS_LOADED`, `load_harness_modules`).
- The program is preceded by a header of star imports (string, re, datetime, collections,
  heapq, bisect, copy, math, random, statistics, itertools, functools, operator, io,
  sys, json, builtins, typing), plain imports of most of them, and a recursion limit of
  50,000; ints convert to text up to 50,000 digits (sys.set_int_max_str_digits).
- Stdin programs: a last statement `if __name__ == '__main__':` is replaced by its body;
  the program's top-level imports are hoisted, and everything else becomes the body of a
  function `wrapped_function` defined after the header, which is then called. A program
  that mentions "class Solution" fails (its class is inside the function). While it
  runs, sys.stdout is a fresh StringIO whose `close` takes one argument and does
  nothing: only what is written through that object is the output (os.write(1, ...), a
  stream opened on fd 1, a module-level `stdout` bound by the header's `from sys import
  *`: none of them is captured). sys.stdin is an object whose `read()` gives the whole
  input every time, `readline()` the next line, `readlines()` the input split on "\\n",
  `buffer.read()` the whole input as bytes and `buffer.readline()` the first line
  always; it cannot be iterated. fd 0 itself is /dev/null. SystemExit ends the program
  normally; any other exception is a failure.
- Call programs: the header and the program make a module (`tmp_sol`; the problem's
  prelude, where it has one, runs first); each line of the test's input is one JSON
  argument, blank lines included (a function of no arguments cannot be graded: "" is not
  JSON); the entry point's function is
  the attribute of that name of `Solution()` when the program's text contains "class
  Solution", else of the module. Its return value: a tuple becomes a list (at the top
  only); nested tuples stay tuples and dict keys keep their types, so that == in the
  judge compares what LiveCodeBench compares.

Not reproduced: the wall-clock alarm (our CPU limit applies), one Solution instance
shared by every test of a problem (each test is a fresh process here), `builtins.open`
replaced by a mock (a program's own `open` is the header's real one in both), and return
values that are not JSON data but compare equal to the expected value (a custom __eq__).
"""

from __future__ import annotations

import builtins
import io
import json
import os
import sys

STAR_IMPORTS = ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random", "statistics",
                "itertools", "functools", "operator", "io", "sys", "json", "builtins", "typing")
HEADER = ("".join(f"from {name} import *\n" for name in STAR_IMPORTS)
          + "".join(f"import {name}\n" for name in STAR_IMPORTS[:-2])
          + "sys.setrecursionlimit(50000)\n")
INT_MAX_STR_DIGITS = 50_000
DISABLED = {
    "os": ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork", "forkpty",
           "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown", "chmod", "chown",
           "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir"),
    "shutil": ("rmtree", "move", "chown"),
    "subprocess": ("Popen",),
}
UNIMPORTABLE = ("ipdb", "joblib", "resource", "psutil", "tkinter")
HARNESS_LOADED = ("numpy", "multiprocessing")
"""What LiveCodeBench's grading process has imported before its guard runs whose import
after the guard would fail (the rest of its imports import cleanly after it). A program
that imports only other standard modules cannot reach them; one that imports one of
them, or anything outside the standard library (scipy imports numpy), gets them
imported before the guard, as LiveCodeBench's process has them."""
TUPLE_TAG = "\x00tuple"
"""A nested tuple travels as {TUPLE_TAG: [items]} (compare.py makes it a tuple again)."""
DICT_TAG = "\x00dict"
"""A dict with a key that is not a str travels as {DICT_TAG: [[key, value], ...]}."""
SET_TAG = "\x00set"  # as _zygote.SET_TAG


def load_harness_modules(source: str, ast) -> None:
    """Import `HARNESS_LOADED` (those installed) when the program imports one of them or a
    module outside the standard library (see `HARNESS_LOADED`), or may import one by a
    name it computes (`__import__`, `importlib.import_module`), or names one anywhere."""
    if any(name in source for name in HARNESS_LOADED + ("__import__", "import_module")):
        names = set(HARNESS_LOADED)
    else:
        names = _imported_names(source, ast)
    if not any(name in HARNESS_LOADED or name not in sys.stdlib_module_names for name in names):
        return
    for name in HARNESS_LOADED:
        try:
            __import__(name)
        except ImportError:
            pass


def _imported_names(source: str, ast) -> set[str]:
    """The top-level names of the modules the program's import statements name."""
    try:
        tree = ast.parse(source)
    except Exception:  # noqa: BLE001 - it will not compile: nothing of it runs
        return set()
    names = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    return names | {node.module.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module and not node.level}


def guard() -> None:
    import shutil
    import subprocess

    owners = {"os": os, "shutil": shutil, "subprocess": subprocess}
    for owner, names in DISABLED.items():
        for name in names:
            setattr(owners[owner], name, None)
    builtins.quit = None
    builtins.help = None
    for name in UNIMPORTABLE:
        sys.modules[name] = None
    sys.set_int_max_str_digits(INT_MAX_STR_DIGITS)


def without_main_guard(source: str, ast) -> str:
    try:
        tree = ast.parse(source)
        last = tree.body[-1]
        if isinstance(last, ast.If) and ast.unparse(last.test).strip() == "__name__ == '__main__'":
            return ast.unparse(tree.body[:-1]) + "\n" + ast.unparse(last.body)
    except Exception:  # noqa: BLE001 - left as it is, as LiveCodeBench does
        pass
    return source


def wrapped(source: str, ast) -> str:
    """The header, the program's top-level imports, and the rest as `wrapped_function`;
    the source unchanged when that cannot be made."""
    try:
        tree = ast.parse(source)
        imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
        rest = [node for node in tree.body if not isinstance(node, (ast.Import, ast.ImportFrom))]
        function = ast.FunctionDef(name="wrapped_function",
                                   args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
                                   body=rest, decorator_list=[], lineno=-1)
        return HEADER + "\n" + ast.unparse(imports) + "\n" + ast.unparse(function)
    except Exception:  # noqa: BLE001
        return source


class Stdin:
    def __init__(self, text: str):
        self.text = text
        self.lines = io.StringIO(text)
        self.buffer = StdinBuffer(text)

    def read(self, *args):
        return self.text

    def readline(self, *args):
        return self.lines.readline(*args)

    def readlines(self, *args):
        return self.text.split("\n")

    def __getattr__(self, name):
        return getattr(self.lines, name)


class StdinBuffer:
    def __init__(self, text: str):
        self.data = text.encode("utf-8", "surrogateescape")

    def read(self, *args):
        return self.data

    def readline(self, *args):
        return self.data.split(b"\n")[0] + b"\n"


def report(error: BaseException) -> None:
    try:
        os.write(2, f"{type(error).__name__}: {error}"[:2000].encode("utf-8", "replace") + b"\n")
    except BaseException:  # noqa: BLE001
        pass


def run_stdio(source: str, stdout_fd: int) -> None:
    """Run a stdin program; write what it printed through sys.stdout to `stdout_fd` (fd 1,
    emptied first of whatever went there directly) and exit: 0, or 1 on a failure."""
    import ast

    chunks = [os.read(0, 1 << 20)]  # the input, before fd 0 becomes /dev/null
    while chunks[-1]:
        chunks.append(os.read(0, 1 << 20))
    inputs = b"".join(chunks).decode("utf-8", "surrogateescape")
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    saved = os.dup(stdout_fd)
    os.set_inheritable(saved, False)
    load_harness_modules(source, ast)
    guard()
    code = wrapped(without_main_guard(source, ast), ast)
    failed, captured = False, ""
    try:
        module = type(sys)("tmp_sol")
        exec(compile(code, "<string>", "exec"), module.__dict__)
        if "class Solution" in code:
            module.Solution()
        function = module.wrapped_function
    except BaseException as error:  # noqa: BLE001 - it does not compile or load: a failure
        report(error)
        os._exit(1)
    capture = io.StringIO()
    capture.close = lambda x: 1  # noqa: E731 - LiveCodeBench's: a no-op that takes an argument
    real_stdin, real_stdout = sys.stdin, sys.stdout
    sys.stdout, sys.stdin = capture, Stdin(inputs)
    try:
        function()
    except SystemExit:
        pass
    except BaseException as error:  # noqa: BLE001
        failed = True
        report(error)
    try:
        captured = capture.getvalue()
    except BaseException as error:  # noqa: BLE001 - the program really closed it
        failed = True
        report(error)
    sys.stdin, sys.stdout = real_stdin, real_stdout
    data = captured.encode("utf-8", "surrogatepass")
    os.ftruncate(saved, 0)
    os.lseek(saved, 0, os.SEEK_SET)
    view = memoryview(data)
    while view:
        view = view[os.write(saved, view):]
    os._exit(1 if failed else 0)


def run_call(namespace: dict, program, source: str, entry_point: str, arguments: list[str], result_fd: int) -> None:
    """Run a call program's entry point; write b"R" + its return value's JSON (see
    `as_json`) or b"U" + why there is none to `result_fd` and exit: 0, or 1 on a failure."""
    import ast

    load_harness_modules(source, ast)
    guard()
    name = entry_point.split("().", 1)[-1]
    namespace["__name__"] = "tmp_sol"  # the module LiveCodeBench makes
    try:
        exec(compile(HEADER, "<string>", "exec"), namespace)
        exec(program, namespace)
        owner = namespace["Solution"]() if "class Solution" in source else None
        function = getattr(owner, name) if owner is not None else namespace[name]
        value = function(*[json.loads(line) for line in arguments])
    except BaseException as error:  # noqa: BLE001 - SystemExit too: it escapes LiveCodeBench's handlers
        report(error)
        os._exit(1)
    if isinstance(value, tuple):
        value = list(value)
    try:
        encoded = json.dumps(as_json(value, 0)).encode()
    except (TypeError, ValueError, RecursionError) as error:
        os.write(result_fd, b"U" + str(error)[:300].encode())
    else:
        view = memoryview(b"R" + encoded)
        while view:
            view = view[os.write(result_fd, view):]
    os._exit(0)


def as_json(value, depth):
    """JSON data that decodes (compare._from_wire) to a value == compares as `value`
    does: tuples tagged, sets tagged, dicts with keys other than str tagged, numpy
    scalars as their Python value (== holds for them as for it)."""
    if depth > 200:
        raise ValueError("return value nested too deeply")
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, list):
        return [as_json(item, depth + 1) for item in value]
    if isinstance(value, tuple):
        return {TUPLE_TAG: [as_json(item, depth + 1) for item in value]}
    if isinstance(value, (set, frozenset)):
        items = [as_json(item, depth + 1) for item in value]
        try:
            items.sort()
        except TypeError:
            items.sort(key=repr)
        return {SET_TAG: items}
    if isinstance(value, dict):
        if all(type(key) is str for key in value):
            return {("\x00" + key if key.startswith("\x00") else key): as_json(item, depth + 1)
                    for key, item in value.items()}
        return {DICT_TAG: [[as_json(key, depth + 1), as_json(item, depth + 1)] for key, item in value.items()]}
    if isinstance(value, (bool, int, float, str)):  # subclasses (IntEnum ...): == as their value
        return as_json(type(value).__mro__[-2](value), depth)
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "shape", None) == ():
        return as_json(value.item(), depth)
    raise TypeError(f"cannot serialise a {type(value).__name__}")

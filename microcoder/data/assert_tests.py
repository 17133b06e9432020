"""Turn assert-style tests (HumanEval `check(candidate)`, MBPP `assert f(x) == y`) into
canonical `call` tests by recording what the reference solution does.

For each problem we build one harness program and run it in the sandbox (never in our
process). The harness defines the reference solution, wraps the entry point in a recorder
that logs the JSON of the arguments (taken before the call, since functions may mutate
them) and of the return value of every outermost call, runs the original asserts, and
prints the recorded calls as JSON lines. Each distinct argument list becomes a TestCase
whose expected output is the reference's return value.

Rules (docs/formats.md repeats them):
- the reference must pass its own asserts; if any assert fails the problem is rejected
  (we cannot tell whether the reference or the assert is wrong);
- a call whose arguments or result have no JSON form (set, nan/inf, custom object, dict
  with non-string keys) is dropped and counted; tuples are recorded as lists, and each
  call is replayed with its JSON-decoded arguments: if the result differs (the function
  relied on getting a tuple) the call is dropped;
- a problem whose asserts check a property of the result (`abs(f(x) - y) < 1e-6`,
  `poly(xs, f(xs))`) rather than `f(x) == y` still records the reference's exact value;
  it is flagged with `metadata["property_checked"]` and given a float tolerance.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from microcoder.data.literals import NotRepresentable
from microcoder.data.records import Row, RowRejected, base_metadata
from microcoder.evaluator.sandbox import SandboxFault
from microcoder.problems import DEFAULT_CALL_PRELUDE, Checker, Problem, TestCase

HARNESS_TIME_LIMIT_S = 30.0
"""CPU seconds for one problem's whole recording run (all its asserts)."""
HARNESS_MEMORY_LIMIT_MB = 2048
MAX_TESTS_PER_PROBLEM = 500
"""Distinct recorded calls kept per problem (first ones, in call order)."""
RECORD_MARK = "@@microcoder-record@@ "

# Runs in the sandbox. Filled in with repr()'d strings, so dataset text is data here.
_HARNESS = r'''
import inspect as _mc_inspect, io as _mc_io, json as _mc_json, sys as _mc_sys, traceback as _mc_traceback
import random as _mc_random
_mc_random.seed(0)  # tests that draw random inputs (HumanEval/38, /50, ...) record the same ones every build
_mc_stdout = _mc_sys.stdout
_mc_sys.stdout = _mc_io.StringIO()  # the reference's own prints must not mix with records


class _McNotJson(Exception):
    pass


def _mc_plain(value):
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        if value != value or value in (float("inf"), float("-inf")):
            raise _McNotJson("float %r" % value)
        return value
    if kind in (list, tuple):
        return [_mc_plain(item) for item in value]
    if kind is dict:
        if not all(type(key) is str for key in value):
            raise _McNotJson("dict with non-string keys")
        return {key: _mc_plain(item) for key, item in value.items()}
    raise _McNotJson(kind.__name__)


_mc_records = []
_mc_depth = [0]


def _mc_emit(record):
    _mc_stdout.write(MARK + _mc_json.dumps(record, allow_nan=False) + "\n")


_mc_namespace = {"__name__": "__mc_reference__"}
exec(compile(REFERENCE, "<reference>", "exec"), _mc_namespace)
_mc_original = _mc_namespace[ENTRY]


def _mc_recorder(*args, **kwargs):
    if _mc_depth[0]:
        return _mc_original(*args, **kwargs)  # a recursive call of the reference
    record = {}
    try:
        bound = _mc_inspect.signature(_mc_original).bind(*args, **kwargs)
        if bound.kwargs:
            raise _McNotJson("keyword-only arguments")
        record["args"] = _mc_plain(list(bound.args))
    except (_McNotJson, TypeError, ValueError, RecursionError) as error:
        record["not_json"] = "argument: %s" % error
    _mc_depth[0] += 1
    try:
        result = _mc_original(*args, **kwargs)
    finally:
        _mc_depth[0] -= 1
    if "args" in record:
        try:
            record["output"] = _mc_plain(result)
        except (_McNotJson, RecursionError) as error:
            record["not_json"] = "result: %s" % error
    _mc_records.append(record)
    return result


_mc_namespace[ENTRY] = _mc_recorder
_mc_failures = []
for _mc_index, _mc_test in enumerate(TESTS):
    _mc_start = len(_mc_records)
    try:
        exec(compile(_mc_test, "<test %d>" % _mc_index, "exec"), _mc_namespace)
        if CHECK_CALL:
            _mc_namespace["check"](_mc_recorder)
    except BaseException as error:
        _mc_failures.append("%s: %s" % (type(error).__name__, str(error)[:200]))
        del _mc_records[_mc_start:]  # calls of a failing assert are not trusted
# Replay each call with its arguments as they come back from JSON (tuples now lists): a
# call whose result then differs (or raises) depends on what JSON lost, and is dropped.
_mc_depth[0] += 1
for _mc_record in _mc_records:
    if "args" in _mc_record and "output" in _mc_record:
        try:
            _mc_again = _mc_plain(_mc_original(*_mc_json.loads(_mc_json.dumps(_mc_record["args"]))))
        except BaseException as error:
            _mc_again = ("raised", type(error).__name__)
        if _mc_again != _mc_record["output"]:
            _mc_record["not_json"] = "argument: replay with JSON arguments differs (tuples became lists?)"
_mc_depth[0] -= 1
for _mc_record in _mc_records:
    _mc_emit(_mc_record)
_mc_emit({"done": True, "failures": _mc_failures})
_mc_stdout.flush()  # the sandbox may end the process without flushing
_mc_sys.stdout = _mc_stdout
'''


def _strip_check_calls(test: str) -> str:
    """Remove top-level `check(...)` calls: the harness calls check with its recorder."""
    module = ast.parse(test)
    kept = [
        node
        for node in module.body
        if not (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id == "check"
        )
    ]
    return ast.unparse(ast.Module(body=kept, type_ignores=[]))


def _called_names(source: str) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            names.append(node.func.id)
    return names


def _defined_functions(source: str) -> list[str]:
    return [
        node.name
        for node in ast.parse(source).body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    ]


def _property_checked(tests: list[str], entry: str, candidate_names: set[str]) -> bool:
    """True when some assert does not compare a call of the function with `==`."""
    for test in tests:
        for node in ast.walk(ast.parse(test)):
            if not isinstance(node, ast.Assert):
                continue
            calls = [
                call
                for call in ast.walk(node.test)
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in candidate_names
            ]
            if not calls:
                continue
            test_node = node.test
            direct = (
                isinstance(test_node, ast.Compare)
                and len(test_node.ops) == 1
                and isinstance(test_node.ops[0], (ast.Eq, ast.Is))
                and any(operand in calls for operand in (test_node.left, *test_node.comparators))
            ) or (
                isinstance(test_node, ast.Call) and test_node in calls  # assert f(x)
            ) or (
                isinstance(test_node, ast.UnaryOp)
                and isinstance(test_node.op, ast.Not)
                and test_node.operand in calls  # assert not f(x)
            )
            if not direct:
                return True
    return False


class AssertSpec:
    """Everything needed to record one problem and build its Problem afterwards."""

    def __init__(self, fields: dict[str, Any], entry: str, reference: str, tests: list[str], check_call: bool):
        self.fields, self.entry, self.reference, self.tests, self.check_call = fields, entry, reference, tests, check_call

    def harness(self) -> str:
        return (
            f"MARK = {RECORD_MARK!r}\nREFERENCE = {self.reference!r}\nENTRY = {self.entry!r}\n"
            f"TESTS = {self.tests!r}\nCHECK_CALL = {self.check_call!r}\n" + _HARNESS
        )


def humaneval_spec(item: Row, source: str, licence: str) -> AssertSpec:
    """HumanEval and HumanEvalPack records -> AssertSpec (raises RowRejected)."""
    task_id = item.require("task_id")
    prompt = item.require("prompt")
    solution = item.require("canonical_solution")
    test = item.require("test")
    entry = item.require("entry_point")
    reference = prompt + solution
    try:
        test_code = _strip_check_calls(test)
    except SyntaxError as error:
        raise item.reject("test", f"does not parse: {error.msg}", "unparseable code") from None
    try:
        ast.parse(reference)
    except SyntaxError as error:
        raise item.reject("canonical_solution", f"prompt + solution does not parse: {error.msg}", "unparseable code") from None
    if entry not in _defined_functions(reference):
        raise item.reject("entry_point", f"{entry!r} is not defined by prompt + canonical_solution", "missing entry point")
    metadata = base_metadata(item, source, task_id, licence)
    metadata["reference_solution"] = reference
    if source == "humanevalpack":
        buggy = item.require("buggy_solution")
        metadata["buggy_solution"] = prompt + buggy
        for key in ("bug_type", "failure_symptoms"):
            if isinstance(item.record.get(key), str):
                metadata[key] = item.record[key]
    check_parameter = "candidate"
    for node in ast.parse(test_code).body:
        if isinstance(node, ast.FunctionDef) and node.name == "check" and node.args.args:
            check_parameter = node.args.args[0].arg
    if _property_checked([test_code], entry, {check_parameter, entry}):
        metadata["property_checked"] = True
    fields = {
        "id": f"{source}/{task_id}",
        "prompt": prompt,
        "kind": "call",
        "entry_point": entry,
        "starter_code": prompt,
        # The prompt defines helpers (`poly`, `encode_cyclic` ...) the solution may use;
        # its stub of the function itself is valid Python and gets replaced.
        "prelude": DEFAULT_CALL_PRELUDE + "\n" + prompt,
        "source": source,
        "metadata": metadata,
    }
    return AssertSpec(fields, entry, reference, [test_code], check_call=True)


def mbpp_spec(item: Row, licence: str) -> AssertSpec:
    task_id = item.require("task_id", (int, str))
    text = item.require("text")
    code = item.require("code").replace("\r\n", "\n")
    asserts = item.require("test_list", list)
    setup = item.record.get("test_setup_code") or ""
    challenge = item.record.get("challenge_test_list") or []
    if not asserts or not all(isinstance(a, str) for a in asserts):
        raise item.reject("test_list", "expected a non-empty list of assert strings", "unparseable tests")
    try:
        defined = _defined_functions(code)
    except SyntaxError as error:
        raise item.reject("code", f"does not parse: {error.msg}", "unparseable code") from None
    try:
        called = [name for test in asserts for name in _called_names(test)]
    except SyntaxError as error:
        raise item.reject("test_list", f"an assert does not parse: {error.msg}", "unparseable tests") from None
    entry = next((name for name in called if name in defined), None)
    if entry is None:
        raise item.reject("test_list", "the asserts call no function the reference code defines", "missing entry point")
    metadata = base_metadata(item, "mbpp", task_id, licence)
    metadata["reference_solution"] = code
    tests = [a for a in asserts] + [a for a in challenge if isinstance(a, str)]
    if _property_checked(tests, entry, {entry}):
        metadata["property_checked"] = True
    prompt = text.strip() + "\nYour code should pass these tests:\n\n" + "\n".join(asserts)
    fields = {
        "id": f"mbpp/{task_id}",
        "prompt": prompt,
        "kind": "call",
        "entry_point": entry,
        "prelude": DEFAULT_CALL_PRELUDE + ("\n" + setup if setup.strip() else ""),
        "source": "mbpp",
        "metadata": metadata,
    }
    reference = (setup + "\n" if setup.strip() else "") + code
    return AssertSpec(fields, entry, reference, tests, check_call=False)


def parse_recording(item: Row, spec: AssertSpec, stdout: str) -> Problem:
    """Build the Problem from the harness's output lines (raises RowRejected)."""
    records, done = [], None
    for line in stdout.splitlines():
        if line.startswith(RECORD_MARK):
            record = json.loads(line[len(RECORD_MARK):])
            if record.get("done"):
                done = record
            else:
                records.append(record)
    if done is None:
        raise item.reject("(harness)", "the recording run ended early", "reference fails in the harness")
    if done["failures"]:
        count = len(done["failures"])
        raise item.reject(
            "canonical_solution" if spec.check_call else "code",
            f"the reference fails {count} of its own asserts: {done['failures'][0]}",
            "reference fails its own tests",
        )
    tests: list[TestCase] = []
    seen: set[str] = set()
    for record in records:
        if "not_json" in record:
            item.drop(f"not JSON-representable {record['not_json'].split(' (')[0][:60]}")
            continue
        test_input = "\n".join(json.dumps(arg, ensure_ascii=False) for arg in record["args"])
        if test_input in seen:
            continue
        seen.add(test_input)
        if len(tests) >= MAX_TESTS_PER_PROBLEM:
            item.drop(f"over {MAX_TESTS_PER_PROBLEM} recorded calls")
            continue
        tests.append(TestCase(input=test_input, output=json.dumps(record["output"], ensure_ascii=False)))
    fields = dict(spec.fields)
    if spec.fields["metadata"].get("property_checked") and any("." in t.output for t in tests):
        fields["checker"] = Checker(float_tolerance=1e-6)
    return item.finish(fields, tests)


def convert_assert_rows(format: str, rows: list[Row], licence: str, sandbox: Any = None,
                        workers: int = 2) -> list[Problem | RowRejected]:
    """Record every row's asserts in the sandbox; returns a Problem or RowRejected per row."""
    results: list[Problem | RowRejected | None] = []
    jobs: list[tuple[int, AssertSpec]] = []
    for index, item in enumerate(rows):
        try:
            spec = mbpp_spec(item, licence) if format == "mbpp" else humaneval_spec(item, format, licence)
        except RowRejected as error:
            results.append(error)
            continue
        except NotRepresentable as error:
            results.append(item.reject("(row)", str(error), "not JSON-representable"))
            continue
        results.append(None)
        jobs.append((index, spec))
    if jobs:
        own_sandbox = sandbox is None
        if own_sandbox:
            from microcoder.evaluator.sandbox import Sandbox

            sandbox = Sandbox(workers=workers)
        try:
            runs = sandbox.run_programs(
                [(spec.harness(), "") for _, spec in jobs],
                time_limit_s=HARNESS_TIME_LIMIT_S,
                memory_limit_mb=HARNESS_MEMORY_LIMIT_MB,
            )
        finally:
            if own_sandbox:
                sandbox.close()
        for (index, spec), run in zip(jobs, runs):
            item = rows[index]
            stdout = run.stdout.decode("utf-8", "replace")
            if run.machine_fault:  # the machine's, not the row's: no reject, the conversion stops
                raise SandboxFault(f"{item.path}, row {item.row}: recording its tests: {run.detail}")
            try:
                if run.status != "ok" and RECORD_MARK + '{"done"' not in stdout:
                    tail = run.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [run.status]
                    raise item.reject("(harness)", f"recording run {run.status}: {tail[0][:200]}", f"reference {run.status}")
                results[index] = parse_recording(item, spec, stdout)
            except RowRejected as error:
                results[index] = error
    return [result for result in results if result is not None]

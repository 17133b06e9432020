"""`microcoder serve`: the real server, started as a subprocess on a free port, over HTTP.

The client side is the standard library's http.client, so that a test controls the bytes
sent (bad JSON, an oversized or chunked body) and can hang up in the middle of a stream.
"""

from __future__ import annotations

import dataclasses
import http.client
import importlib.util
import json
import os
import re
import select
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import types
import zipfile
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample, summarize  # noqa: E402
from microcoder.evaluator.cgroups import CGROUP_NAME, cgroup_plan  # noqa: E402
from microcoder.evaluator.isolation import isolation_plan  # noqa: E402
from microcoder.problems import write_problems  # noqa: E402
from microcoder.service.config import ServeConfig  # noqa: E402
from tests.helpers import call_problem, stdin_problem  # noqa: E402

TOKEN = "s3cret-token"
ADD = stdin_problem([("1 2\n", "3\n"), ("5 7\n", "12\n"), ("10 -4\n", "6\n")], problem_id="add")
ECHO = call_problem([('"ab"', '"ba"'), ('"xyz"', '"zyx"')], problem_id="rev")
ADD_CODE = "a, b = map(int, input().split())\nprint(a + b)\n"


class Server:
    """A `microcoder serve` subprocess; `url` once it printed its listening line."""

    def __init__(self, tmp_path: Path, *options: str):
        self.stderr = open(tmp_path / f"serve-{time.monotonic_ns()}.err", "w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "microcoder.cli", "serve", "--port", "0", *options],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        deadline, line = time.monotonic() + 120, ""
        while time.monotonic() < deadline and self.process.poll() is None:
            if select.select([self.process.stdout], [], [], 0.5)[0]:
                line = self.process.stdout.readline()
                if "listening on" in line:
                    break
        found = re.search(r"http://([\d.]+):(\d+)", line)
        if not found:
            self.stop()
            self.stderr.seek(0)
            raise RuntimeError(f"the server did not start: {line!r} {self.stderr.read()[-2000:]}")
        self.host, self.port = found.group(1), int(found.group(2))
        self.url = found.group(0)

    def connection(self, timeout: float = 60) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method: str, path: str, body=None, headers: dict | None = None, token: str | None = TOKEN):
        """(status, headers, decoded JSON or raw bytes)."""
        headers = dict(headers or {})
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        connection = self.connection()
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        finally:
            connection.close()
        try:
            return response.status, dict(response.getheaders()), json.loads(raw)
        except ValueError:
            return response.status, dict(response.getheaders()), raw

    def health(self) -> dict:
        return self.request("GET", "/health", token=None)[2]

    def stop(self, timeout: float = 60) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self.stderr.close()


def stream_rows(server: Server, body: dict) -> list[dict]:
    status, _, raw = server.request("POST", "/evaluate", body)
    assert status == 200, raw
    return [json.loads(line) for line in raw.decode().splitlines()]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve")
    problems = folder / "problems.jsonl"
    write_problems(problems, [ADD, ECHO])
    started = Server(folder, "--workers", "2", "--token", TOKEN, "--problems", str(problems),
                     "--max-body-mb", "0.05", "--max-run-timeout", "5")
    yield started
    assert started.stop() == 0


def test_health_needs_no_token_and_reports_the_pool(server):
    status, _, body = server.request("GET", "/health", token=None)
    assert status == 200
    assert body["status"] == "ok" and body["workers"] == 2 and body["problems"] == 2
    assert body["admitted"] == 0 and body["queue_limit"] == ServeConfig().queue_limit


def verl_payload(code: str, stdin: str | None = None, run_timeout: float = 5, memory: int = 1024) -> dict:
    """The body verl 0.9.1's sandbox_fusion client posts (utils.call_sandbox_api)."""
    return {"compile_timeout": run_timeout, "run_timeout": run_timeout, "code": code, "stdin": stdin,
            "memory_limit_MB": memory, "language": "python", "files": {}, "fetch_files": []}


def test_run_code_answers_in_sandbox_fusion_schema(server):
    status, _, body = server.request("POST", "/run_code", verl_payload("import sys\nprint(sys.stdin.read()[::-1])", "abc"))
    assert status == 200
    # SandboxFusion's RunCodeResponse and CommandRunResult, field for field.
    assert set(body) == {"status", "message", "compile_result", "run_result", "executor_pod_name", "files"}
    assert set(body["run_result"]) == {"status", "execution_time", "return_code", "stdout", "stderr"}
    assert body["status"] == "Success" and body["message"] == "" and body["compile_result"] is None
    assert body["files"] == {}
    result = body["run_result"]
    assert result["status"] == "Finished" and result["return_code"] == 0
    assert result["stdout"] == "cba\n" and result["stderr"] == ""
    assert isinstance(result["execution_time"], float) and 0 < result["execution_time"] < 5


@pytest.mark.parametrize("code, run_timeout, memory, status, run_status, return_code, stderr_has", [
    ("import sys\nsys.exit(3)\n", 5, 1024, "Failed", "Finished", 3, ""),
    ("raise ValueError('boom')\n", 5, 1024, "Failed", "Finished", 1, "ValueError: boom"),
    ("def f(:\n", 5, 1024, "Failed", "Finished", 1, "SyntaxError"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", 5, 1024, "Failed", "Finished", -9, ""),
    ("x = bytearray(2 * 1024 ** 3)\n", 5, 256, "Failed", "Finished", 1, "MemoryError"),
    ("while True:\n    pass\n", 0.5, 1024, "Failed", "TimeLimitExceeded", None, ""),
    ("print('fine')\n", 5, -1, "Success", "Finished", 0, ""),  # -1: the server's default memory limit
])
def test_run_code_statuses(server, code, run_timeout, memory, status, run_status, return_code, stderr_has):
    # What verl's client reads: status, run_result.status and return_code decide its verdict.
    code_, _, body = server.request("POST", "/run_code", verl_payload(code, run_timeout=run_timeout, memory=memory))
    assert code_ == 200, body
    assert (body["status"], body["run_result"]["status"], body["run_result"]["return_code"]) == (
        status, run_status, return_code)
    assert stderr_has in body["run_result"]["stderr"]


@pytest.mark.parametrize("change, field", [
    ({"language": "cpp"}, "language"),
    ({"files": {"data.txt": "aGVsbG8="}}, "files"),
    ({"fetch_files": ["out.txt"]}, "fetch_files"),
    ({"run_timeout": 6}, "run_timeout"),  # over this server's --max-run-timeout 5
    ({"run_timeout": 0}, "run_timeout"),
    ({"memory_limit_MB": 0}, "memory_limit_MB"),
    ({"code": None}, "code"),
    ({"stdin": 5}, "stdin"),
])
def test_run_code_refuses_what_it_does_not_support_naming_the_field(server, change, field):
    status, _, body = server.request("POST", "/run_code", {**verl_payload("print(1)"), **change})
    assert status == 422 and body["field"] == field, body
    assert field in body["detail"]


def assert_error_shape(body, status: int, field: str) -> None:
    """Our error: a JSON object of exactly `detail` and `field`, naming the field, with
    nothing of the server's internals (a traceback, a path of its install)."""
    assert isinstance(body, dict) and set(body) == {"detail", "field"}, body
    assert body["field"] == field, body
    for internal in ("Traceback", "File \"", "/microcoder/", "site-packages", "/sys/fs/cgroup", "/tmp/"):
        assert internal not in body["detail"], body


NESTED = b"[" * 20_000 + b"]" * 20_000  # past the C parser's own recursion guard (under --max-body-mb)
NESTED_PARSEABLE = b"[" * 500 + b"]" * 500  # parsed, but deeper than any request needs


def raw_run_code(**fields) -> bytes:
    """A /run_code body with `fields` given as raw JSON text (NaN, huge numbers, deep nesting)."""
    parts = [f'"code": "print(1)"', '"language": "python"'] + [f'"{name}": {value}' for name, value in fields.items()]
    return ("{" + ", ".join(parts) + "}").encode()


def evaluate_problem(**changes) -> dict:
    return {"problems": [{**ADD.model_dump(), "id": "p", **changes}], "samples": [{"problem_id": "p", "code": "1"}]}


@pytest.mark.parametrize("path, body, status, field", [
    # A lone surrogate (JSON's \\ud800) in any string: no program's input or source can hold it.
    ("/run_code", json.dumps(verl_payload("print(input())", "\ud800")).encode(), 422, "stdin"),
    ("/run_code", json.dumps(verl_payload("print('\udfff')")).encode(), 422, "code"),
    ("/evaluate", json.dumps(evaluate_problem(tests=[{"input": "1 \ud800\n", "output": "3\n"}])).encode(), 422,
     "problems.0.tests.0.input"),
    ("/evaluate", json.dumps({"samples": [{"problem_id": "add", "code": "print('\ud800')"}]}).encode(), 422,
     "samples.0.code"),
    # Nesting, even inside a field that is ignored.
    ("/run_code", raw_run_code(extra=NESTED.decode()), 400, "(body)"),
    ("/evaluate", b'{"samples": ' + NESTED + b"}", 400, "(body)"),
    ("/run_code", raw_run_code(extra=NESTED_PARSEABLE.decode()), 400, "(body)"),
    ("/evaluate", b'{"samples": ' + NESTED_PARSEABLE + b"}", 400, "(body)"),
    # compile_timeout is part of the request's deadline: a number of seconds, 0 or more.
    ("/run_code", raw_run_code(compile_timeout=-1000), 422, "compile_timeout"),
    ("/run_code", raw_run_code(compile_timeout="NaN"), 422, "compile_timeout"),
    ("/run_code", raw_run_code(compile_timeout="Infinity"), 422, "compile_timeout"),
    ("/run_code", raw_run_code(run_timeout="NaN"), 422, "run_timeout"),
    ("/run_code", raw_run_code(run_timeout="-Infinity"), 422, "run_timeout"),
    # A memory limit no machine has: the kernel would refuse it (setrlimit, the cgroup).
    ("/run_code", raw_run_code(memory_limit_MB=10**15), 422, "memory_limit_MB"),
    ("/run_code", raw_run_code(memory_limit_MB=2**62), 422, "memory_limit_MB"),
    ("/run_code", raw_run_code(memory_limit_MB="1" + "0" * 4000), 422, "memory_limit_MB"),
    # A request's problem with limits no run can have.
    ("/evaluate", json.dumps(evaluate_problem(time_limit_s=-1)).encode(), 422, "problems.0.time_limit_s"),
    ("/evaluate", json.dumps(evaluate_problem(time_limit_s=6)).encode(), 422, "problems.0.time_limit_s"),
    ("/evaluate", json.dumps(evaluate_problem(memory_limit_mb=10**15)).encode(), 422, "problems.0.memory_limit_mb"),
], ids=lambda value: value[:40].decode(errors="replace") if isinstance(value, bytes) else None)
def test_bad_fields_are_refused_at_the_door_as_json_naming_them(server, path, body, status, field):
    answer_status, _, answer = server.request("POST", path, body)
    assert answer_status == status, answer
    assert_error_shape(answer, status, field)
    assert server.health()["admitted"] == 0


@pytest.mark.parametrize("method, path, status, field", [
    ("GET", "/nope", 404, "(path)"),
    ("POST", "/run_jupyter", 404, "(path)"),
    ("GET", "/run_code", 405, "(method)"),
    ("DELETE", "/evaluate", 405, "(method)"),
    ("POST", "/health", 405, "(method)"),
])
def test_no_such_endpoint_or_method_answers_our_error_shape(server, method, path, status, field):
    answer_status, headers, answer = server.request(method, path, token=None)
    assert answer_status == status and headers.get("content-type") == "application/json"
    assert_error_shape(answer, status, field)


def test_a_sandbox_error_names_nothing_of_the_server():
    from microcoder.evaluator.sandbox import ProgramRun
    from microcoder.service.sandbox_fusion import run_code_response

    leak = ("Traceback (most recent call last):\n  File \"/opt/venv/lib/python3.11/site-packages/microcoder/"
            "evaluator/_zygote.py\", line 189\nOSError: [Errno 22] Invalid argument: '/sys/fs/cgroup/x/memory.max'")
    answer = run_code_response(ProgramRun("sandbox_error", stderr=b"", detail=leak))
    assert (answer["status"], answer["run_result"]["status"], answer["run_result"]["return_code"]) == (
        "SandboxError", "Error", None)
    assert_error_shape({"detail": answer["message"] + answer["run_result"]["stderr"], "field": ""}, 200, "")


def test_missing_field_and_bad_json_are_named(server):
    payload = verl_payload("print(1)")
    del payload["language"]
    status, _, body = server.request("POST", "/run_code", payload)
    assert (status, body["field"]) == (422, "language")
    for path in ("/run_code", "/evaluate"):
        status, _, body = server.request("POST", path, b'{"code": "print(1)", ')
        assert status == 400 and body["field"] == "(body)" and "not JSON" in body["detail"]


@pytest.mark.parametrize("path", ["/run_code", "/evaluate"])
@pytest.mark.parametrize("token", [None, "wrong", TOKEN[:-1]])
def test_a_missing_or_wrong_token_is_refused(server, path, token):
    status, headers, body = server.request("POST", path, verl_payload("print(1)"), token=token)
    assert status == 401 and body["field"] == "Authorization"
    assert headers.get("www-authenticate") == "Bearer"


def test_oversized_bodies_are_refused(server):
    big = verl_payload("print(1)\n" + "#" * 60_000)  # over --max-body-mb 0.05 (52,428 bytes)
    status, _, body = server.request("POST", "/run_code", big)
    assert status == 413 and body["field"] == "(body)"
    # Without a Content-Length (chunked), the count of bytes read stops it.
    payload = json.dumps(big).encode()
    chunks = (payload[start:start + 4096] for start in range(0, len(payload), 4096))
    connection = server.connection()
    try:
        connection.request("POST", "/run_code", body=chunks, encode_chunked=True,
                           headers={"Authorization": f"Bearer {TOKEN}", "Transfer-Encoding": "chunked"})
        response = connection.getresponse()
        assert response.status == 413 and json.loads(response.read())["field"] == "(body)"
    finally:
        connection.close()
    status, _, body = server.request("POST", "/run_code", verl_payload("print(1)\n" + "#" * 40_000))
    assert status == 200 and body["status"] == "Success"  # under the limit


HEAD_LIMIT = 16 * 1024


def head_of(size: int) -> bytes:
    """A GET /health whose request line and headers, blank line included, are `size` bytes."""
    start, end = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: ", b"\r\n\r\n"
    return start + b"a" * (size - len(start) - len(end)) + end


def send_raw(server: Server, pieces: list[bytes]) -> tuple[int, dict]:
    client = socket.create_connection((server.host, server.port), timeout=30)
    try:
        for piece in pieces:
            try:
                client.sendall(piece)
            except (BrokenPipeError, ConnectionResetError):  # refused before the rest was sent
                break
            if len(pieces) > 1:
                time.sleep(0.02)  # each piece its own read
        return read_answer(client)
    finally:
        client.close()


@pytest.mark.parametrize("size, in_pieces", [(64_000, False), (64_000, True), (HEAD_LIMIT + 1, False),
                                             (1 << 20, False)])
def test_headers_over_16_kib_are_a_json_400_however_they_arrive(server, size, in_pieces):
    head = head_of(size)
    pieces = [head[start:start + 4096] for start in range(0, len(head), 4096)] if in_pieces else [head]
    status, body = send_raw(server, pieces)
    assert status == 400, body
    assert_error_shape(body, 400, "(request)")
    assert "16384 bytes" in body["detail"], body


@pytest.mark.parametrize("size", [HEAD_LIMIT, HEAD_LIMIT - 1000])
def test_headers_at_the_limit_are_read(server, size):
    status, body = send_raw(server, [head_of(size)])
    assert status == 200 and body["status"] == "ok", body


def evaluate_batch():
    """Inline problems, ids of the server's --problems file, every kind of verdict."""
    inline = stdin_problem([("3\n", "9\n"), ("4\n", "16\n")], problem_id="square", time_limit_s=0.5)
    samples = [
        Sample("add", code=ADD_CODE),
        Sample("add", response="```python\n" + ADD_CODE + "```"),
        Sample("add", code="print(3)\n"),  # wrong on test 1
        Sample("add", code="a, b = map(int, input().split())\nassert a != 5\nprint(a + b)\n"),
        Sample("add", response="no code here"),
        Sample("rev", code="class Solution:\n    def solve(self, s):\n        return s[::-1]\n"),
        Sample("rev", code="class Solution:\n    def solve(self, s):\n        return s\n"),
        Sample("square", code="print(int(input()) ** 2)\n"),
        Sample("square", code="def broken(:\n"),
        Sample("square", code="while True:\n    pass\n"),
    ]
    return inline, samples


def comparable(row: dict) -> dict:
    """A result row without what differs from run to run: times, a run directory's number,
    and a timeout's measured seconds."""
    same = {key: value for key, value in row.items() if key not in ("seconds", "cpu_seconds", "index")}
    same["detail"] = re.sub(r"run-\d+", "run-N", same["detail"])
    if same["verdict"] == "time_limit_exceeded":
        same["detail"] = same["detail"].split(":")[0]
    return same


def test_evaluate_matches_in_process_evaluation(server, tmp_path):
    inline, samples = evaluate_batch()
    body = {"problems": [inline.model_dump()],
            "samples": [{key: value for key, value in dataclasses.asdict(sample).items() if value is not None}
                        for sample in samples]}
    rows = stream_rows(server, body)
    done = rows.pop()
    with Evaluator(EvaluatorConfig(workers=2)) as evaluator:
        expected = evaluator.evaluate([ADD, ECHO, inline], samples)
    assert sorted(row["index"] for row in rows) == list(range(len(samples)))
    by_index = {row["index"]: row for row in rows}
    for index, result in enumerate(expected):
        assert comparable(by_index[index]) == comparable(dataclasses.asdict(result)), index
    assert {result.verdict for result in expected} >= {"accepted", "wrong_answer", "runtime_error", "no_code",
                                                       "syntax_error", "time_limit_exceeded"}
    assert done == {"done": True, "samples": len(samples), "summary": summarize(expected)}
    assert server.health()["admitted"] == 0


def test_evaluate_strict_mode_per_request(server):
    # 1e-9 off: robust accepts, strict (LiveCodeBench) rejects.
    problem = stdin_problem([("\n", "0.5\n")], problem_id="half")
    body = {"problems": [problem.model_dump()], "samples": [{"problem_id": "half", "code": "print(0.500000001)"}]}
    assert stream_rows(server, body)[0]["verdict"] == "accepted"
    assert stream_rows(server, {**body, "mode": "strict"})[0]["verdict"] == "wrong_answer"


@pytest.mark.parametrize("body, field", [
    ({"samples": [{"problem_id": "nope", "code": "print(1)"}]}, "samples.0.problem_id"),
    ({"samples": [{"problem_id": "add", "code": "1"}, {"problem_id": "add", "respons": "x"}]}, "samples.1.respons"),
    ({"samples": [{"problem_id": "add"}]}, "samples.0.response"),
    ({"samples": []}, "samples"),
    ({"samples": [{"problem_id": "add", "code": "1"}], "mode": "lenient"}, "mode"),
    ({"problems": [{"id": "x", "prompt": "", "kind": "both", "tests": []}],
      "samples": [{"problem_id": "x", "code": "1"}]}, "problems.0.kind"),
    ({"problems": [ADD.model_dump(), ADD.model_dump()], "samples": [{"problem_id": "add", "code": "1"}]},
     "problems.1.id"),
    ({"problems": [{**ECHO.model_dump(), "tests": [{"input": "not json", "output": "1"}]}],
      "samples": [{"problem_id": "rev", "code": "1"}]}, "problems.0.tests.0.input"),
])
def test_evaluate_bad_input_names_the_field(server, body, field):
    status, _, answer = server.request("POST", "/evaluate", body)
    assert status == 422 and answer["field"] == field, answer
    assert server.health()["admitted"] == 0


@pytest.fixture(scope="module")
def small_server(tmp_path_factory):
    """One worker and room for two runs: a queue that fills."""
    started = Server(tmp_path_factory.mktemp("small"), "--workers", "1", "--queue-limit", "2")
    yield started
    assert started.stop() == 0


def wait_for(predicate, timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def test_a_full_queue_answers_503_at_once(small_server):
    sleeper = verl_payload("import time\ntime.sleep(2)\nprint('slept')\n", run_timeout=5)
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(small_server.request("POST", "/run_code", sleeper)))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    assert wait_for(lambda: small_server.health()["admitted"] == 2, 10)
    started = time.monotonic()
    status, headers, body = small_server.request("POST", "/run_code", verl_payload("print(1)"))
    assert status == 503 and headers.get("retry-after") == "1" and "queue full" in body["detail"]
    status, _, body = small_server.request("POST", "/evaluate", {"problems": [ADD.model_dump()],
                                                                   "samples": [{"problem_id": "add", "code": "1"}]})
    assert status == 503
    assert time.monotonic() - started < 1.5  # refused, not queued behind the sleepers
    for thread in threads:
        thread.join(30)
    assert [body["run_result"]["stdout"] for _, _, body in answers] == ["slept\n", "slept\n"]
    assert small_server.health()["admitted"] == 0
    status, _, body = small_server.request("POST", "/run_code", verl_payload("print(1)"))
    assert status == 200 and body["run_result"]["stdout"] == "1\n"
    # A batch that could never fit is a field error, not a wait.
    status, _, body = small_server.request("POST", "/evaluate", {"problems": [ADD.model_dump()], "samples": [
        {"problem_id": "add", "code": "1"}] * 3})
    assert status == 422 and body["field"] == "samples"


def test_a_client_that_disconnects_mid_batch_frees_the_workers(tmp_path):
    server = Server(tmp_path, "--workers", "1")
    try:
        hang_up_mid_batch(server)
    finally:
        assert server.stop() == 0


def hang_up_mid_batch(small_server: Server) -> None:
    # Twelve samples of ~0.6 s each on one worker (~7 s); the client reads one row and hangs up.
    slow = stdin_problem([("\n", "ok\n")], problem_id="slow")
    body = json.dumps({"problems": [slow.model_dump()], "samples": [
        {"problem_id": "slow", "code": "import time\ntime.sleep(0.6)\nprint('ok')\n"}] * 12}).encode()
    connection = small_server.connection()
    connection.request("POST", "/evaluate", body=body, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200
    first = json.loads(response.readline())
    assert first["verdict"] == "accepted"  # streamed: the first row came before the batch ended
    assert small_server.health()["admitted"] == 12
    connection.sock.shutdown(2)
    connection.close()
    left = time.monotonic()
    # Without the stop, the other samples would hold the worker for ~6 s more.
    assert wait_for(lambda: small_server.health()["admitted"] == 0, 3.0)
    assert time.monotonic() - left < 3.0
    status, _, answer = small_server.request("POST", "/run_code", verl_payload("print(2)"))
    assert status == 200 and answer["run_result"]["stdout"] == "2\n"


def children_by_parent() -> dict[int, list[int]]:
    """Every process's children, by parent pid, whichever of its threads started them."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry))
    return children


def descendants(pid: int) -> set[int]:
    children = children_by_parent()
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_shutdown_mid_run_leaves_no_sandbox_process(tmp_path):
    server = Server(tmp_path, "--workers", "2")
    spinner = verl_payload("while True:\n    pass\n", run_timeout=30)

    def spin() -> None:
        try:
            server.request("POST", "/run_code", spinner)
        except (OSError, http.client.HTTPException):
            pass  # the server may hang up on it at shutdown

    thread = threading.Thread(target=spin)
    thread.start()
    slow = stdin_problem([("\n", "ok\n")] * 5, problem_id="slow")
    batch = server.connection()
    batch.request("POST", "/evaluate", body=json.dumps({"problems": [slow.model_dump()], "samples": [
        {"problem_id": "slow", "code": "import time\ntime.sleep(1)\nprint('ok')\n"}] * 6}).encode())
    assert wait_for(lambda: server.health()["admitted"] == 7, 10)
    # Every process under the server seen while the spinning run and the batch's runs go on
    # (a batch's run may be between two tests at any one look).
    family: set[int] = set()
    assert wait_for(lambda: family.update(descendants(server.process.pid)) or len(family) >= 4, 15)
    time.sleep(0.5)
    family |= descendants(server.process.pid)
    started = time.monotonic()
    assert server.stop(timeout=45) == 0
    assert time.monotonic() - started < 30
    assert wait_for(lambda: not any(alive(pid) for pid in family), 5), [pid for pid in family if alive(pid)]
    thread.join(10)
    batch.close()


VERL_CLIENT = "verl/utils/reward_score/sandbox_fusion/utils.py"
VERL_WHEEL = "verl-0.9.1-py3-none-any.whl"


def verl_client():
    """verl 0.9.1's own SandboxFusion client, unmodified: `VERL_CLIENT` of an installed verl,
    else of the wheel scripts/install.sh downloads (verl itself pins a transformers this
    environment cannot have, so it is not installed). The file imports only the standard
    library and requests, so it loads alone, without the rest of verl."""
    spec = importlib.util.find_spec("verl")
    if spec is not None and spec.submodule_search_locations:
        source = (Path(list(spec.submodule_search_locations)[0]) / VERL_CLIENT.removeprefix("verl/")).read_text()
        origin = spec.origin
    else:
        folder = Path(os.environ.get("MICROCODER_WHEELS", Path.home() / ".cache/microcoder/wheels"))
        wheel = folder / VERL_WHEEL
        if not wheel.exists():
            pytest.skip(f"verl is not installed and {wheel} is absent (scripts/install.sh downloads it)")
        with zipfile.ZipFile(wheel) as archive:
            source = archive.read(VERL_CLIENT).decode()
        origin = f"{wheel}!{VERL_CLIENT}"
    pytest.importorskip("requests")
    client = types.ModuleType("verl_sandbox_fusion_utils")
    client.__file__ = origin
    exec(compile(source, origin, "exec"), client.__dict__)
    return client


def test_verl_sandbox_fusion_client_judges_through_us(server, tmp_path):
    """verl's own client (verl_client()) reads every verdict as verl should."""
    client = verl_client()
    no_token = Server(tmp_path, "--workers", "2")  # verl's client sends no Authorization header
    try:
        cases = {"inputs": ["1 2\n", "5 7\n", "2 2\n"], "outputs": ["3\n", "12\n", "4\n"]}
        url = no_token.url + "/run_code"
        assert client.check_correctness(url, cases, ADD_CODE, timeout=5)[0] == [True, True, True]
        assert client.check_correctness(url, cases, "print(3)", timeout=5)[0] == [True, False, False]
        assert client.check_correctness(url, cases, "raise SystemExit(2)", timeout=5)[0] == [-2, -2, -2]
        assert client.check_correctness(url, cases, "while True: pass", timeout=1)[0] == [-3, -3, -3]
    finally:
        assert no_token.stop() == 0


def running_worker(server: Server, spared: set[int]) -> int | None:
    """A sandbox worker of `server` (a child of it running _zygote.py), not in `spared`,
    with a run in progress (a child of its own)."""
    for pid in children(server.process.pid):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if pid not in spared and b"_zygote.py" in command and children(pid):
            return pid
    return None


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`, whichever of its threads started them."""
    return children_by_parent().get(pid, [])


def kill_the_worker_under_the_run(server: Server, times: int) -> None:
    """SIGKILL, from outside, the worker running the server's one run, `times` times: the
    sandbox retries a run whose worker died once on a fresh worker, which is killed too."""
    killed: set[int] = set()
    for _ in range(times):
        found: list = []
        assert wait_for(lambda: found.append(running_worker(server, killed)) or found[-1] is not None, 15), killed
        time.sleep(0.1)  # the run is under way (it sleeps for much longer)
        os.kill(found[-1], signal.SIGKILL)
        killed.add(found[-1])


needs_own_uid = pytest.mark.skipif(not isolation_plan("auto").switch_uid, reason="needs root: only where runs "
                                   "cannot signal their worker is its death the machine's fault")


@needs_own_uid
def test_a_killed_worker_is_a_sandbox_error_through_run_code_and_verls_client(tmp_path):
    """A worker killed from outside under a run, on each try, is the machine's fault: a
    SandboxError (verl's client: -1, "sandbox_error"), never the program's Failed (-2),
    with the cause one line in the log."""
    client = verl_client()
    judge = Server(tmp_path, "--workers", "1")
    try:
        sleeper = verl_payload("import time\ntime.sleep(20)\n", run_timeout=10)
        answers: list = []
        poster = threading.Thread(target=lambda: answers.append(judge.request("POST", "/run_code", sleeper, token=None)))
        poster.start()
        kill_the_worker_under_the_run(judge, times=2)
        poster.join(30)
        status, _, body = answers[0]
        assert status == 200, body
        assert (body["status"], body["run_result"]["status"], body["run_result"]["return_code"]) == (
            "SandboxError", "Error", None), body
        assert_error_shape({"detail": body["message"] + body["run_result"]["stderr"], "field": ""}, 200, "")
        # verl's own client, unmodified: the -1 it gives a sandbox that failed, not -2.
        judged: list = []
        checker = threading.Thread(target=lambda: judged.append(client.check_correctness(
            judge.url + "/run_code", {"inputs": [""], "outputs": ["x"]}, "import time\ntime.sleep(20)\n", timeout=10)))
        checker.start()
        kill_the_worker_under_the_run(judge, times=2)
        checker.join(30)
        (verdicts, metadata), = judged
        assert verdicts == [-1] and metadata[0]["status"] == "sandbox_error", metadata
        # The pool starts a fresh worker for the next run.
        status, _, body = judge.request("POST", "/run_code", verl_payload("print(4)"), token=None)
        assert status == 200 and body["run_result"]["stdout"] == "4\n"
    finally:
        assert judge.stop() == 0
    log = Path(judge.stderr.name).read_text()
    causes = [line for line in log.splitlines() if line.startswith("microcoder serve: sandbox error on /run_code: ")]
    assert len(causes) == 2 and all("died under it 2 times" in line for line in causes), log[-3000:]


@needs_own_uid
def test_a_killed_worker_is_a_judge_error_row_on_evaluate_with_its_cause_in_the_log(tmp_path):
    judge = Server(tmp_path, "--workers", "1")
    try:
        slow = stdin_problem([("\n", "ok\n")], problem_id="slow", time_limit_s=5)
        body = {"problems": [slow.model_dump()], "samples": [
            {"problem_id": "slow", "code": "import time\ntime.sleep(20)\nprint('ok')\n"}]}
        rows: list = []
        poster = threading.Thread(target=lambda: rows.extend(stream_rows(judge, body)))
        poster.start()
        kill_the_worker_under_the_run(judge, times=2)
        poster.join(30)
        row, done = rows
        assert row["verdict"] == "judge_error" and row["reward"] == 0.0, row
        assert_error_shape({"detail": row["detail"], "field": ""}, 200, "")
        assert "the sandbox could not run the program" in row["detail"], row
        assert done["summary"]["verdicts"] == {"judge_error": 1}, done
    finally:
        assert judge.stop() == 0
    log = Path(judge.stderr.name).read_text()
    causes = [line for line in log.splitlines() if line.startswith("microcoder serve: sandbox error on /evaluate: ")]
    assert len(causes) == 1 and "died under it 2 times" in causes[0], log[-3000:]


def test_a_judge_error_of_the_requests_own_problem_keeps_its_detail(server):
    # A broken prelude is the request's problem, not the sandbox's: the client sees why.
    broken = call_problem([("1", "1")], entry_point="f", problem_id="bad-prelude", prelude="def (:\n")
    row, _ = stream_rows(server, {"problems": [broken.model_dump()],
                                  "samples": [{"problem_id": "bad-prelude", "code": "def f(x):\n    return x\n"}]})
    assert row["verdict"] == "judge_error" and "the problem's prelude fails" in row["detail"], row


def retried_out(verdict, metadata: dict) -> bool:
    """verl's -1 after three 504s: its client gave up retrying a run that never got its
    time, as opposed to a request that timed out on the client's side."""
    return verdict == -1 and "Gateway Timeout (504)" in (metadata.get("api_request_error") or "")


@pytest.mark.slow
def test_verl_gets_a_timeout_not_an_api_error_within_its_own_deadline(tmp_path):
    """verl's client waits compile_timeout + run_timeout + 10 s. A program that sleeps at
    verl's default timeout (10: 31 s of our wall-clock backstop) is a timeout (-3) within
    that budget. A burst of busy loops larger than the pool can run within one budget is
    answered in time too: each loop that got its run_timeout is a timeout (-3); one that
    waited too long for a worker is a 504, which verl retries, and only after three of
    those an API error (-1) -- never a request that ran past verl's own deadline."""
    client = verl_client()
    judge = Server(tmp_path, "--workers", "2")
    try:
        url = judge.url + "/run_code"
        slept: list = []
        sleeper = threading.Thread(target=lambda: slept.append(client.check_correctness(
            url, {"inputs": [""], "outputs": ["x"]}, "import time\ntime.sleep(60)\n")))  # timeout: verl's default
        started = time.monotonic()
        sleeper.start()
        # Twelve cases of 3 s CPU each at timeout 3 (a 15 s budget) on the one worker left: 36 s of work.
        burst = {"inputs": [""] * 12, "outputs": ["x"] * 12}
        verdicts, metadata = client.check_correctness(url, burst, "while True:\n    pass\n", timeout=3)
        assert all(verdict == -3 or retried_out(verdict, entry) for verdict, entry in zip(verdicts, metadata)), [
            (verdict, entry.get("status"), entry.get("api_request_error")) for verdict, entry in zip(verdicts, metadata)]
        assert verdicts.count(-3) >= 6, verdicts  # the pool's worth of loops ran
        sleeper.join(40)
        assert slept and slept[0][0] == [-3], slept
        assert time.monotonic() - started < 30 + 2 or sleeper.is_alive() is False
        assert wait_for(lambda: judge.health()["admitted"] == 0, 5)
    finally:
        assert judge.stop() == 0


def correct_and_looping_burst(url: str, client, correct: int, loops: int, timeout: int) -> tuple[list, list]:
    """`correct` cases of a correct program and `loops` of a busy loop, all at once through
    verl's client (one check_correctness call per case, as verl's reward workers post):
    ([(verdict, metadata)] of the correct ones, the same of the loops)."""
    results: dict[str, list] = {"correct": [], "loop": []}
    lock = threading.Lock()

    def judge(kind: str, code: str, stdin: str, expected: str) -> None:
        verdicts, metadata = client.check_correctness(url, {"inputs": [stdin], "outputs": [expected]}, code,
                                                      timeout=timeout)
        with lock:
            results[kind].append((verdicts[0], metadata[0]))

    jobs = [("loop", "while True:\n    pass\n", "", "x")] * loops + [("correct", ADD_CODE, "2 3\n", "5\n")] * correct
    order = list(range(len(jobs)))
    random_order = __import__("random").Random(7)
    random_order.shuffle(order)  # loops and correct programs interleaved in the queue
    threads = [threading.Thread(target=judge, args=jobs[index]) for index in order]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    return results["correct"], results["loop"]


@pytest.mark.slow
def test_no_correct_program_reads_as_a_timeout_under_a_4x_oversubscribed_burst(tmp_path):
    """2 workers; at verl's timeout 1 (an 11 s budget) they run 22 s of loops within one
    budget, and the burst brings 88 (4x): 88 loops of 1 s CPU among 40 correct programs.
    Queue wait never becomes a verdict: no correct program is -3 (before, a run whose
    deadline passed in the queue was TimeLimitExceeded); a correct one is True, or -1 only
    after verl's three tries were each answered 504."""
    client = verl_client()
    judge = Server(tmp_path, "--workers", "2")
    try:
        correct, loops = correct_and_looping_burst(judge.url + "/run_code", client, correct=40, loops=88, timeout=1)
        assert len(correct) == 40 and len(loops) == 88
        assert [verdict for verdict, _ in correct].count(-3) == 0, correct
        assert all(verdict is True or retried_out(verdict, entry) for verdict, entry in correct), correct
        assert all(verdict == -3 or retried_out(verdict, entry) for verdict, entry in loops), loops
        print(f"correct: {sum(v is True for v, _ in correct)} True, {sum(v == -1 for v, _ in correct)} -1 after "
              f"three 504s; loops: {sum(v == -3 for v, _ in loops)} -3, {sum(v == -1 for v, _ in loops)} -1")
        assert wait_for(lambda: judge.health()["admitted"] == 0, 10)
    finally:
        assert judge.stop() == 0


def test_a_run_that_cannot_get_a_worker_before_its_deadline_is_a_504_at_the_deadline(tmp_path):
    # --client-grace 1.5: a request's deadline is compile_timeout + run_timeout + 0.5 s.
    # The one worker sleeps for 4.5 s (its own deadline: 2 + 2 + 0.5); a print(1) posted
    # behind it has 1.5 s. It must not wait for the worker (an answer at ~4.5 s, past its
    # client's budget) nor come back as a timeout: a 504 at its deadline, which verl retries.
    judge = Server(tmp_path, "--workers", "1", "--client-grace", "1.5")
    try:
        first: list = []
        sleeper = threading.Thread(target=lambda: first.append(judge.request("POST", "/run_code", {
            **verl_payload("import time\ntime.sleep(10)\n", run_timeout=2)}, token=None)))
        sleeper.start()
        assert wait_for(lambda: judge.health()["admitted"] == 1, 10)
        time.sleep(0.3)
        posted = time.monotonic()
        status, headers, body = judge.request("POST", "/run_code", {**verl_payload("print(1)", run_timeout=1),
                                                                    "compile_timeout": 0}, token=None)
        waited = time.monotonic() - posted
        assert status == 504 and headers.get("retry-after") == "1", body
        assert_error_shape(body, 504, "(server)")
        assert 1.5 <= waited < 1.5 + 1.0, waited  # by its deadline plus half the reply margin, not at ~4.5 s
        sleeper.join(30)
        # The sleeper had its run_timeout of wall time: a real timeout, SandboxFusion's verdict too.
        assert first[0][0] == 200 and first[0][2]["run_result"]["status"] == "TimeLimitExceeded"
    finally:
        assert judge.stop() == 0


@pytest.mark.parametrize("status, cpu_s, wall_s, signum, waited", [
    ("time_limit_exceeded", 0.0, 0.0, None, True),       # its deadline passed before it got a worker
    ("time_limit_exceeded", 0.2, 0.3, 9, True),          # started late, cut by the deadline at 0.3 s
    ("time_limit_exceeded", 1.0, 1.02, 9, False),        # used its CPU time
    ("time_limit_exceeded", 0.97, 0.99, 27, False),      # the CPU timer (SIGPROF) reads a little under
    ("time_limit_exceeded", 0.01, 4.0, 9, False),        # slept through its whole backstop
    ("time_limit_exceeded", 0.01, 1.5, 9, False),        # slept past run_timeout: SandboxFusion's timeout too
    ("ok", 0.01, 0.05, None, False),
    ("runtime_error", 0.01, 0.05, None, False),
])
def test_waited_out_tells_the_queue_from_the_program(status, cpu_s, wall_s, signum, waited):
    from microcoder.evaluator.sandbox import ProgramRun
    from microcoder.service.app import waited_out

    assert waited_out(ProgramRun(status, cpu_s=cpu_s, wall_s=wall_s, signal=signum), 1.0) is waited


def test_a_kept_alive_round_trip_takes_well_under_10_ms(server):
    # With Nagle's algorithm on the accepted socket, every answer but the first waits ~40 ms
    # for the client's delayed ACK; TCP_NODELAY removes that (~0.6 ms here when the machine
    # is quiet). The lower quartile, not the median: on a 2-core machine at load 16 the
    # median of this loop was ~10 ms of waiting for a core, which Nagle's stall is not.
    connection = server.connection()
    try:
        times = []
        for _ in range(25):
            started = time.perf_counter()
            connection.request("GET", "/health")
            response = connection.getresponse()
            assert response.status == 200
            response.read()
            times.append(time.perf_counter() - started)
    finally:
        connection.close()
    assert statistics.quantiles(times, n=4)[0] < 0.010, sorted(times)


def test_a_client_that_hangs_up_stops_its_run(tmp_path):
    judge = Server(tmp_path, "--workers", "1")
    try:
        connection = judge.connection()
        connection.request("POST", "/run_code", body=json.dumps(verl_payload("while True:\n    pass\n", run_timeout=20)))
        assert wait_for(lambda: judge.health()["admitted"] == 1, 10)
        time.sleep(0.3)
        connection.sock.shutdown(socket.SHUT_RDWR)
        connection.close()
        left = time.monotonic()
        # Without the stop, the loop would hold the one worker for its 20 s of CPU.
        assert wait_for(lambda: judge.health()["admitted"] == 0, 5)
        assert time.monotonic() - left < 5
        status, _, body = judge.request("POST", "/run_code", verl_payload("print(5)"), token=None)
        assert status == 200 and body["run_result"]["stdout"] == "5\n"
    finally:
        assert judge.stop() == 0


def test_every_refusal_under_overload_is_our_json_503(tmp_path):
    # 120 clients at once against one worker, a queue of 2 and so 66 requests in progress
    # at most: each answer is a run or our JSON 503 with Retry-After, never uvicorn's text.
    judge = Server(tmp_path, "--workers", "1", "--queue-limit", "2")
    answers: list = []
    barrier = threading.Barrier(120)

    def client() -> None:
        connection = judge.connection(timeout=60)
        try:
            connection.connect()
            barrier.wait(30)
            connection.request("POST", "/run_code", body=json.dumps(
                verl_payload("import time\ntime.sleep(0.5)\nprint('ran')\n")))
            response = connection.getresponse()
            answers.append((response.status, response.getheader("retry-after"),
                            response.getheader("content-type"), response.read()))
        finally:
            connection.close()

    try:
        threads = [threading.Thread(target=client) for _ in range(120)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(90)
        assert len(answers) == 120
        refused = [answer for answer in answers if answer[0] != 200]
        assert refused and len(refused) < 120
        for status, retry_after, content_type, body in refused:
            assert (status, retry_after, content_type) == (503, "1", "application/json"), body
            assert json.loads(body)["field"] == "(server)"
        assert all(json.loads(body)["run_result"]["stdout"] == "ran\n" for status, *_, body in answers if status == 200)
    finally:
        assert judge.stop() == 0


def test_shutdown_answers_json_503_and_exits_within_the_grace(tmp_path):
    judge = Server(tmp_path, "--workers", "1", "--shutdown-grace", "2")
    answers: list = []

    def post(code: str) -> None:
        connection = judge.connection()
        try:
            connection.request("POST", "/run_code", body=json.dumps(verl_payload(code, run_timeout=20)))
            response = connection.getresponse()
            answers.append((code, response.status, response.getheader("content-type"), response.read()))
        finally:
            connection.close()

    quick = "import time\ntime.sleep(0.5)\nprint('done')\n"
    threads = [threading.Thread(target=post, args=(code,)) for code in ("while True:\n    pass\n", quick)]
    for thread in threads:
        thread.start()
    assert wait_for(lambda: judge.health()["admitted"] == 2, 10)  # the loop runs, the sleeper waits for it
    judge.process.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    exited: list[float] = []
    waiter = threading.Thread(target=lambda: (judge.process.wait(10), exited.append(time.monotonic())))
    waiter.start()
    time.sleep(0.3)
    # A new connection during the grace: our 503, not a refused connection.
    status, headers, body = judge.request("POST", "/run_code", verl_payload("print(1)"), token=None)
    assert status == 503 and headers.get("retry-after") == "1" and body["detail"] == "the server is shutting down"
    waiter.join(10)
    assert judge.process.returncode == 0
    # The grace plus one second, from the signal to the process's end as this test sees it
    # (the server's own "stopped" line comes before the interpreter's teardown).
    reported = re.search(r"stopped ([\d.]+) s after the signal", judge.process.stdout.read())
    assert reported and float(reported.group(1)) < 2 + 1, reported
    assert exited and exited[0] - stopped < 2 + 1, exited[0] - stopped
    for thread in threads:
        thread.join(10)
    by_code = {code: (status, content_type, json.loads(body)) for code, status, content_type, body in answers}
    assert by_code["while True:\n    pass\n"][:2] == (503, "application/json")  # still running at the grace's end
    # The sleeper waited for the only worker, so it did not run either; either way, JSON.
    assert by_code[quick][1] == "application/json"
    judge.stderr.seek(0)
    log = judge.stderr.read()
    assert "Traceback" not in log and "Error" not in log, log
    judge.stop()


def worker_cgroups(pid: int) -> list[Path]:
    """The cgroups the sandbox of the server with this pid made for its workers (named
    after their maker's pid: evaluator/cgroups.py), in every hierarchy it makes them in."""
    plan = cgroup_plan()
    found = []
    for parent in {plan.memory_parent, plan.pids_parent} - {None}:
        for path in Path(parent).glob("microcoder-*"):
            name = CGROUP_NAME.fullmatch(path.name)
            if name and int(name.group("pid")) == pid and path.is_dir():
                found.append(path)
    return found


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1])
def test_a_stop_signal_answers_the_request_in_flight_and_leaves_no_cgroup(tmp_path, signum):
    """SIGHUP (the terminal closed) and every other signal the server can catch stop it as
    SIGTERM does: the request in flight answered within the grace, the "stopped" line,
    exit status 0, and no worker, run or cgroup left behind."""
    judge = Server(tmp_path, "--workers", "2", "--shutdown-grace", "3")
    pid = judge.process.pid
    made = worker_cgroups(pid)
    if cgroup_plan().available:
        assert len(made) >= 2, made  # the two workers' (memory, and pids where it is apart)
    answers: list = []
    sleeper = threading.Thread(target=lambda: answers.append(judge.request(
        "POST", "/run_code", verl_payload("import time\ntime.sleep(1)\nprint('slept')\n"), token=None)))
    sleeper.start()
    assert wait_for(lambda: judge.health()["admitted"] == 1, 10)
    family = descendants(pid)
    judge.process.send_signal(signum)
    assert judge.process.wait(10) == 0
    sleeper.join(10)
    status, _, body = answers[0]
    assert status == 200 and body["run_result"]["stdout"] == "slept\n", body
    assert re.search(rf"stopped [\d.]+ s after the signal \({signum.name}; grace 3 s\)", judge.process.stdout.read())
    assert worker_cgroups(pid) == [] and all(path.exists() is False for path in made), made
    assert wait_for(lambda: not any(alive(child) for child in family), 5)
    log = Path(judge.stderr.name).read_text()
    assert "Traceback" not in log, log
    judge.stop()


def test_the_stop_signals_are_those_that_would_end_it_but_its_own_faults():
    from microcoder.service.app import STOP_SIGNALS

    assert {signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGUSR1, signal.SIGRTMAX} <= set(
        STOP_SIGNALS)
    # A Python handler for a fault would return to the faulting instruction; Python ignores
    # SIGPIPE and SIGXFSZ; SIGKILL and SIGSTOP cannot be caught.
    assert set(STOP_SIGNALS).isdisjoint({signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT,
                                         signal.SIGTRAP, signal.SIGSYS, signal.SIGPIPE, signal.SIGXFSZ,
                                         signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD})


def test_serve_refuses_a_uvicorn_other_than_the_one_its_overrides_were_read_against():
    from microcoder.service.uvicorn_hooks import UVICORN_VERSION, UnsupportedUvicorn, check_uvicorn_version

    check_uvicorn_version()  # the pinned release is the one installed
    with pytest.raises(UnsupportedUvicorn, match=f"uvicorn 0.99.0 is installed.*uvicorn=={UVICORN_VERSION}"):
        check_uvicorn_version("0.99.0")


def partial_upload(server: Server, sent: bytes = b'{"code": "print(1)", ', declared: int = 1000) -> socket.socket:
    """A connection that sent its headers and the start of a `declared`-byte body, then stalls."""
    client = socket.create_connection((server.host, server.port), timeout=30)
    client.sendall(b"POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: " + str(declared).encode() + b"\r\n\r\n" + sent)
    return client


def read_answer(client: socket.socket) -> tuple[int, dict]:
    """(status, JSON body) of a raw HTTP/1.1 answer on `client`."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"content-length: (\d+)", head, re.IGNORECASE).group(1))
    while len(rest) < length:
        chunk = client.recv(65536)
        if not chunk:
            break
        rest += chunk
    return int(head.split()[1]), json.loads(rest[:length])


def test_stalled_uploads_are_answered_408_and_free_their_slots(tmp_path):
    # --queue-limit 2: 66 requests in progress at most. 70 clients that send half a body and
    # stall would hold every slot (and everyone else at 503) for as long as they like.
    judge = Server(tmp_path, "--workers", "1", "--queue-limit", "2", "--upload-timeout", "1")
    stalled: list[socket.socket] = []
    try:
        started = time.monotonic()
        stalled = [partial_upload(judge) for _ in range(70)]
        status, body = read_answer(stalled[0])
        assert status == 408 and body["field"] == "(body)" and "did not arrive within 1 s" in body["detail"], body
        assert time.monotonic() - started < 1 + 3
        assert wait_for(lambda: judge.request("POST", "/run_code", verl_payload("print(7)"), token=None)[0] == 200, 5)
        # 66 held a slot until their deadline; the ones past the bound were refused at once.
        statuses = Counter(read_answer(client)[0] for client in stalled[1:])
        assert set(statuses) <= {408, 503} and statuses[408] >= 65 - 1, statuses
    finally:
        for client in stalled:
            client.close()
        assert judge.stop() == 0


def test_a_client_gone_mid_upload_is_one_line_in_the_log(tmp_path):
    judge = Server(tmp_path, "--workers", "1")
    try:
        for _ in range(20):
            client = partial_upload(judge)
            time.sleep(0.05)
            client.close()
        assert wait_for(lambda: judge.health()["status"] == "ok" and judge.health()["admitted"] == 0, 5)
        status, _, body = judge.request("POST", "/run_code", verl_payload("print(8)"), token=None)
        assert status == 200 and body["run_result"]["stdout"] == "8\n"
    finally:
        assert judge.stop() == 0
    log = Path(judge.stderr.name).read_text()
    assert "Traceback" not in log, log[:3000]
    gone = [line for line in log.splitlines() if "disconnected during the upload of POST /run_code" in line]
    assert len(gone) == 20, log[:3000]
    assert len(log.splitlines()) <= 20 + 2, log[:3000]  # nothing else but those lines (and uvicorn's own)


@pytest.mark.parametrize("field", ["time_limit_s", "max_run_timeout_s", "queue_limit"])
@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf")])
def test_serve_refuses_a_limit_that_is_not_positive_and_finite(field, value):
    # nan compares false with every run_timeout, so a nan max_run_timeout_s would accept any
    rule = "positive" if field == "queue_limit" else "positive and finite"  # a count is finite as it is an int
    with pytest.raises(ValueError, match=f"{field} must be {rule}, got"):
        ServeConfig(**{field: value})

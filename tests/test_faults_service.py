"""Fault injection for `microcoder serve`: hostile and broken clients, on loopback.

Each case sends what a broken or hostile client sends (bad fields, bad bytes, bad HTTP,
slow or vanishing connections) and checks the promises of docs/serve.md: every answer is
JSON of the documented shape with no traceback or internal path, every field is checked
at the door and a bad one named, waiting is never a verdict, uploads have a deadline,
disconnects are one log line; and after each case the server is healthy (alive, /health
ok, nothing left admitted). All traffic is on 127.0.0.1, bounded in count and time.

    python -m tests.test_faults_service     # every case against one server, then "N cases, F failures"
    pytest tests/test_faults_service.py     # the same cases as tests
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from microcoder.problems import write_problems  # noqa: E402
from tests.helpers import stdin_problem  # noqa: E402
from tests.test_serve import ADD, ADD_CODE, Server, verl_payload, wait_for  # noqa: E402

UPLOAD_TIMEOUT_S = 1
INTERNALS = ("Traceback", 'File "', "/microcoder/", "site-packages", "/sys/fs/cgroup", "/tmp/", "/proc/")


def start_server(folder: Path, *options: str) -> Server:
    problems = folder / "problems.jsonl"
    write_problems(problems, [ADD])
    return Server(folder, "--workers", "2", "--queue-limit", "8", "--max-body-mb", "1",
                  "--upload-timeout", str(UPLOAD_TIMEOUT_S), "--problems", str(problems), *options)


# ----------------------------------------------------------------------- the client


def exchange(server: Server, data: bytes, timeout: float = 15, close_after_send: bool = False) -> list[tuple]:
    """Send raw bytes; [(status, headers, body)] of every answer read before the server
    closes or stops answering (pipelined requests get several)."""
    client = socket.create_connection((server.host, server.port), timeout=timeout)
    answers, buffer = [], b""
    try:
        client.sendall(data)
        if close_after_send:
            client.shutdown(socket.SHUT_WR)
        while True:
            while b"\r\n\r\n" not in buffer:
                chunk = client.recv(65536)
                if not chunk:
                    return answers
                buffer += chunk
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
            length = int(headers.get("content-length", "0"))
            while len(buffer) < length:
                chunk = client.recv(65536)
                if not chunk:
                    break
                buffer += chunk
            answers.append((int(lines[0].split()[1]), headers, buffer[:length]))
            buffer = buffer[length:]
            if headers.get("connection") == "close" or not buffer and len(answers) >= data.count(b"HTTP/1.1\r\n"):
                return answers
    except (TimeoutError, ConnectionError):
        return answers
    finally:
        client.close()


def post(path: str, body: bytes, extra_headers: bytes = b"") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n").encode() + extra_headers + b"\r\n" + body


def assert_json_error(answer: tuple, status: int | tuple[int, ...], field: str | None = None) -> dict:
    """An error of ours: the status, JSON of exactly {detail, field}, nothing internal."""
    got_status, headers, raw = answer
    assert got_status in ((status,) if isinstance(status, int) else status), (got_status, raw[:300])
    assert headers.get("content-type", "").startswith("application/json"), (headers, raw[:300])
    body = json.loads(raw)
    assert set(body) == {"detail", "field"}, body
    if field is not None:
        assert body["field"] == field, body
    for internal in INTERNALS:
        assert internal not in body["detail"], body
    return body


def only(answers: list[tuple]) -> tuple:
    assert len(answers) == 1, answers
    return answers[0]


# ------------------------------------------------------------------------ the cases

RUN_CODE = {"code": "print(1)", "language": "python", "stdin": "", "run_timeout": 2, "compile_timeout": 2,
            "memory_limit_MB": 256, "files": {}, "fetch_files": [], "extra": "ignored"}
RUN_CODE_STRINGS = ["code", "language", "stdin", "extra"]
EVALUATE = {"problems": [{**ADD.model_dump(), "id": "inline", "prompt": "Add two numbers.", "source": "s"}],
            "samples": [{"problem_id": "inline", "code": ADD_CODE}, {"problem_id": "add", "response": "x"}],
            "mode": "robust"}
EVALUATE_STRINGS = ["problems.0.id", "problems.0.prompt", "problems.0.kind", "problems.0.source",
                    "problems.0.tests.0.input", "problems.0.tests.0.output", "samples.0.problem_id",
                    "samples.0.code", "samples.1.response", "mode"]
MARK = "\u2063MARK\u2063"  # a placeholder no real value contains


def with_value(body: dict, dotted: str, value) -> dict:
    copy = json.loads(json.dumps(body))
    *parents, last = dotted.split(".")
    target = copy
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    target[int(last) if isinstance(target, list) else last] = value
    return copy


def invalid_utf8_in(path: str, body: dict, dotted: str):
    def case(server: Server) -> None:
        raw = json.dumps(with_value(body, dotted, "ab" + MARK + "cd"), ensure_ascii=False).encode()
        raw = raw.replace(MARK.encode(), b"\xff\xfe")
        error = assert_json_error(only(exchange(server, post(path, raw))), 400, "(body)")
        assert "not JSON" in error["detail"]
    return case


def lone_surrogate_in(path: str, body: dict, dotted: str):
    def case(server: Server) -> None:
        raw = json.dumps(with_value(body, dotted, "ab\ud800cd")).encode()  # ensure_ascii: the escape \ud800
        assert_json_error(only(exchange(server, post(path, raw))), 422, dotted)
    return case


def field_error(path: str, raw: bytes, status: int, field: str):
    def case(server: Server) -> None:
        assert_json_error(only(exchange(server, post(path, raw))), status, field)
    return case


def raw_run_code(**fields) -> bytes:
    parts = ['"code": "print(1)"', '"language": "python"'] + [f'"{name}": {value}' for name, value in fields.items()]
    return ("{" + ", ".join(parts) + "}").encode()


def evaluate_problem(**changes) -> bytes:
    return json.dumps({"problems": [{**ADD.model_dump(), "id": "p", **changes}],
                       "samples": [{"problem_id": "p", "code": "1"}]}).encode()


def no_such_path(server: Server) -> None:
    assert_json_error(only(exchange(server, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")), 404, "(path)")
    assert_json_error(only(exchange(server, post("/run_jupyter", b"{}"))), 404, "(path)")


def wrong_method(server: Server) -> None:
    assert_json_error(only(exchange(server, b"GET /run_code HTTP/1.1\r\nHost: x\r\n\r\n")), 405, "(method)")
    assert_json_error(only(exchange(server, b"DELETE /evaluate HTTP/1.1\r\nHost: x\r\n\r\n")), 405, "(method)")


def not_http(data: bytes):
    def case(server: Server) -> None:
        assert_json_error(only(exchange(server, data)), 400, "(request)")
    return case


def oversized_headers(server: Server) -> None:
    # 1 MiB of one header, 5,000 headers, and 64 KB of one header sent in one piece (one
    # read: h11's own limit sees only incomplete heads): each our JSON 400, and alive.
    for data in (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n",
                 b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(5000)) + b"\r\n",
                 b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 64_000 + b"\r\n\r\n"):
        error = assert_json_error(only(exchange(server, data)), 400, "(request)")
        assert "over 16384 bytes" in error["detail"], error


def oversized_head_pipelined(server: Server) -> None:
    # The limit holds on the next request's head too, read from what arrived with the first.
    big = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 64_000 + b"\r\n\r\n"
    answers = exchange(server, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + big)
    assert [answer[0] for answer in answers] == [200, 400], answers
    assert_json_error(answers[1], 400, "(request)")


def slowloris_headers(server: Server) -> None:
    # 40 connections send the start of their headers and never finish them. Ordinary
    # requests are answered meanwhile, and each slow one is a JSON 408 (headers) and a
    # closed connection at the deadline (uvicorn alone would hold them open forever).
    slow = [socket.create_connection((server.host, server.port), timeout=10) for _ in range(40)]
    try:
        started = time.monotonic()
        for client in slow:
            client.sendall(b"POST /run_code HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        answer = only(exchange(server, post("/run_code", json.dumps(verl_payload("print(5)")).encode())))
        assert answer[0] == 200 and json.loads(answer[2])["run_result"]["stdout"] == "5\n"
        for client in slow:
            raw = b""
            while chunk := client.recv(65536):
                raw += chunk
            head, _, body = raw.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 408"), raw[:200]
            assert_json_error((408, {"content-type": "application/json"}, body), 408, "(headers)")
        assert time.monotonic() - started < UPLOAD_TIMEOUT_S + 3
    finally:
        for client in slow:
            client.close()


def slowloris_body(server: Server) -> None:
    # A body that trickles (a byte every 0.3 s) is cut at the upload deadline: a 408.
    client = socket.create_connection((server.host, server.port), timeout=15)
    try:
        client.sendall(b"POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        started, answer = time.monotonic(), b""
        client.settimeout(0.3)
        while b"\r\n\r\n" not in answer and time.monotonic() - started < 10:
            try:
                client.sendall(b" ")
                answer += client.recv(65536)
            except TimeoutError:
                continue
            except ConnectionError:
                break
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert time.monotonic() - started < UPLOAD_TIMEOUT_S + 2
    finally:
        client.close()


def chunked_body_that_never_ends(server: Server) -> None:
    data = b"POST /evaluate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"sam\r\n"
    assert_json_error(only(exchange(server, data)), 408, "(body)")


def disconnect_mid_upload(server: Server) -> None:
    before = log_lines(server)
    for _ in range(5):
        client = socket.create_connection((server.host, server.port), timeout=5)
        client.sendall(b"POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{\"code\": ")
        time.sleep(0.05)
        client.close()
    assert wait_for(lambda: len(log_lines(server)) - len(before) >= 5, 5)
    new = log_lines(server)[len(before):]
    assert len(new) == 5 and all("disconnected during the upload of POST /run_code" in line for line in new), new


def hang_up_while_running(server: Server) -> None:
    # The client leaves while its run sleeps: the run is stopped, its slot freed.
    client = socket.create_connection((server.host, server.port), timeout=5)
    client.sendall(post("/run_code", json.dumps(verl_payload("import time\ntime.sleep(30)\n", run_timeout=20)).encode()))
    assert wait_for(lambda: server.health()["admitted"] == 1, 5)
    client.close()
    assert wait_for(lambda: server.health()["admitted"] == 0, 5)


def pipelined(server: Server) -> None:
    one = post("/run_code", json.dumps(verl_payload("print(1)")).encode())
    bad = post("/run_code", b"{not json")
    answers = exchange(server, one + bad + one)
    assert [answer[0] for answer in answers] == [200, 400, 200], answers
    assert_json_error(answers[1], 400, "(body)")


def oversized_body(server: Server) -> None:
    big = json.dumps(verl_payload("#" * (2 << 20))).encode()  # over --max-body-mb 1
    assert_json_error(only(exchange(server, post("/run_code", big))), 413, "(body)")


def top_level_not_an_object(server: Server) -> None:
    for raw in (b"[]", b"null", b"1", b'"run"', b"true"):
        for path in ("/run_code", "/evaluate"):
            assert_json_error(only(exchange(server, post(path, raw))), 422, "(body)")


def queue_wait_is_a_504_not_a_verdict(server: Server) -> None:
    # A server of its own: one worker held 4.5 s by a sleeper; a print(1) behind it with a
    # 1.5 s deadline (--client-grace 1.5) is a 504 at that deadline, not a timeout.
    with tempfile.TemporaryDirectory() as folder:
        judge = Server(Path(folder), "--workers", "1", "--client-grace", "1.5")
        try:
            sleeper = threading.Thread(target=lambda: judge.request(
                "POST", "/run_code", verl_payload("import time\ntime.sleep(10)\n", run_timeout=2), token=None))
            sleeper.start()
            assert wait_for(lambda: judge.health()["admitted"] == 1, 10)
            answer = only(exchange(judge, post("/run_code", json.dumps({**verl_payload("print(1)", run_timeout=1),
                                                                        "compile_timeout": 0}).encode())))
            assert_json_error(answer, 504, "(server)")
            assert answer[1].get("retry-after") == "1"
            sleeper.join(30)
        finally:
            assert judge.stop() == 0


def cpython_stderr(code: str) -> tuple[int, str]:
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "solution.py").write_bytes(code.encode("utf-8", "surrogatepass"))
        done = subprocess.run([sys.executable, "solution.py"], cwd=folder, capture_output=True, timeout=30)
    return done.returncode, done.stderr.decode(errors="replace")


def like_cpython(code: str, last_lines: int):
    """/run_code's return code and the last lines of its stderr are `python3 solution.py`'s."""
    def case(server: Server) -> None:
        status, _, raw = only(exchange(server, post("/run_code", json.dumps(verl_payload(code)).encode())))
        assert status == 200, raw
        result = json.loads(raw)["run_result"]
        expected_code, expected_stderr = cpython_stderr(code)
        assert result["return_code"] == expected_code
        assert result["stderr"].splitlines()[-last_lines:] == expected_stderr.splitlines()[-last_lines:], result
    return case


def source_not_utf8_like_cpython(server: Server) -> None:
    # A lone surrogate in the source reaches the sandbox only from Python callers (the
    # service refuses it at the door): the sandbox answers what CPython's file reader does.
    from microcoder.evaluator.sandbox import Sandbox

    code = "x = 1\nprint('\ud800')\n"
    with Sandbox(workers=1) as sandbox:
        run = sandbox.run(code, "\ud800", time_limit_s=5)  # a surrogate in stdin is no crash either
    expected_code, expected_stderr = cpython_stderr(code)
    assert (run.status, run.exit_code) == ("syntax_error", expected_code), run
    # CPython names the file by its absolute path; the sandbox's tracebacks say solution.py.
    expected = re.sub(r" in file \S+ on line", " in file solution.py on line", expected_stderr.strip())
    assert run.stderr.decode().strip() == expected


CASES: dict[str, object] = {
    # The cases of the issue, replayed.
    "surrogate in /run_code stdin": lone_surrogate_in("/run_code", RUN_CODE, "stdin"),
    "surrogate in /evaluate test input": lone_surrogate_in("/evaluate", EVALUATE, "problems.0.tests.0.input"),
    "100,000 brackets, /run_code (ignored field)": field_error(
        "/run_code", raw_run_code(extra="[" * 100_000 + "]" * 100_000), 400, "(body)"),
    "100,000 brackets, /evaluate": field_error("/evaluate", b'{"samples": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                                              400, "(body)"),
    "compile_timeout -1000": field_error("/run_code", raw_run_code(compile_timeout=-1000), 422, "compile_timeout"),
    "compile_timeout NaN": field_error("/run_code", raw_run_code(compile_timeout="NaN"), 422, "compile_timeout"),
    "compile_timeout Infinity": field_error("/run_code", raw_run_code(compile_timeout="Infinity"), 422,
                                            "compile_timeout"),
    "run_timeout 1e309": field_error("/run_code", raw_run_code(run_timeout="1e309"), 422, "run_timeout"),
    "memory_limit_MB 10**15": field_error("/run_code", raw_run_code(memory_limit_MB=10**15), 422, "memory_limit_MB"),
    "memory_limit_MB 2**62": field_error("/run_code", raw_run_code(memory_limit_MB=2**62), 422, "memory_limit_MB"),
    "memory_limit_MB of 4,000 digits": field_error("/run_code", raw_run_code(memory_limit_MB="9" * 4000), 422,
                                                   "memory_limit_MB"),
    "/evaluate time_limit_s -1": field_error("/evaluate", evaluate_problem(time_limit_s=-1), 422,
                                             "problems.0.time_limit_s"),
    "/evaluate memory_limit_mb 10**15": field_error("/evaluate", evaluate_problem(memory_limit_mb=10**15), 422,
                                                    "problems.0.memory_limit_mb"),
    "no such path": no_such_path,
    "wrong method": wrong_method,
    "queue wait is a 504, not a verdict": queue_wait_is_a_504_not_a_verdict,
    "disconnect mid-upload": disconnect_mid_upload,
    "stalled upload (slowloris body)": slowloris_body,
    "RecursionError says repeated 996 more times": like_cpython("def f():\n    f()\nf()\n", 3),
    "recursion 998 deep runs": like_cpython("def f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\nprint(f(998))\n", 1),
    "source that is not UTF-8": source_not_utf8_like_cpython,
    # Hostile clients of our own.
    "slowloris headers": slowloris_headers,
    "oversized headers": oversized_headers,
    "oversized head pipelined after a request": oversized_head_pipelined,
    "garbage request line": not_http(b"HELLO THERE\r\n\r\n"),
    "bad Content-Length": not_http(b"POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}"),
    "no Host header": not_http(b"GET /health HTTP/1.1\r\n\r\n"),
    "non-ASCII path": not_http("GET /h\u00e9alth HTTP/1.1\r\nHost: x\r\n\r\n".encode()),
    "bad chunk size": not_http(b"POST /run_code HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n"),
    "chunked body that never ends": chunked_body_that_never_ends,
    "hang up while running": hang_up_while_running,
    "pipelined requests": pipelined,
    "body over the limit": oversized_body,
    "top level not an object": top_level_not_an_object,
    **{f"invalid UTF-8 in /run_code {field}": invalid_utf8_in("/run_code", RUN_CODE, field)
       for field in RUN_CODE_STRINGS},
    **{f"invalid UTF-8 in /evaluate {field}": invalid_utf8_in("/evaluate", EVALUATE, field)
       for field in EVALUATE_STRINGS},
    **{f"lone surrogate in /run_code {field}": lone_surrogate_in("/run_code", RUN_CODE, field)
       for field in RUN_CODE_STRINGS},
    **{f"lone surrogate in /evaluate {field}": lone_surrogate_in("/evaluate", EVALUATE, field)
       for field in EVALUATE_STRINGS},
}


def log_lines(server: Server) -> list[str]:
    return [line for line in Path(server.stderr.name).read_text().splitlines() if line.startswith("microcoder serve:")]


def assert_healthy(server: Server) -> None:
    """Alive, /health ok, nothing left admitted, no traceback in its log."""
    assert server.process.poll() is None, "the server exited"
    assert wait_for(lambda: server.health()["admitted"] == 0, 10), server.health()
    assert server.health()["status"] == "ok"
    log = Path(server.stderr.name).read_text()
    assert "Traceback" not in log, log[-3000:]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    started = start_server(tmp_path_factory.mktemp("faults"))
    yield started
    assert started.stop() == 0


@pytest.mark.parametrize("name", list(CASES))
def test_fault(server, name):
    CASES[name](server)
    assert_healthy(server)


def main() -> int:
    failures = 0
    with tempfile.TemporaryDirectory() as folder:
        server = start_server(Path(folder))
        try:
            for name, case in CASES.items():
                try:
                    case(server)
                    assert_healthy(server)
                    print(f"ok    {name}")
                except Exception:  # noqa: BLE001 - a failed case is reported and counted
                    failures += 1
                    print(f"FAIL  {name}\n{traceback.format_exc()}")
        finally:
            code = server.stop()
    print(f"{len(CASES)} cases, {failures} failures; server exit status {code}")
    return 1 if failures or code else 0


if __name__ == "__main__":
    sys.exit(main())


def test_an_error_of_the_server_is_our_json_500_with_nothing_internal():
    """A bug of ours (here: the sandbox raises where it never should) is answered as our
    JSON 500; its traceback goes to the log only. Driven through the app's ASGI entry,
    every middleware included, with a Service whose sandbox fails."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor
    from types import SimpleNamespace

    from microcoder.service.app import Service, create_app
    from microcoder.service.config import ServeConfig

    def broken_run(*args, **kwargs):
        raise OSError(22, "Invalid argument", "/sys/fs/cgroup/microcoder/run-1/memory.max")

    service = Service(ServeConfig())
    service.evaluator = SimpleNamespace(sandbox=SimpleNamespace(run=broken_run))
    service.run_executor = ThreadPoolExecutor(max_workers=1)
    app = create_app(service)
    body = json.dumps(verl_payload("print(1)")).encode()
    sent: list[dict] = []

    async def call() -> None:
        service.loop, service.stopped = asyncio.get_running_loop(), asyncio.Event()
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive():
            if messages:
                return messages.pop()
            await asyncio.sleep(3600)  # the client stays

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": "/run_code", "raw_path": b"/run_code", "query_string": b"",
                 "root_path": "", "headers": [(b"host", b"x"), (b"content-length", str(len(body)).encode())],
                 "client": ("127.0.0.1", 5), "server": ("127.0.0.1", 8080)}
        with pytest.raises(OSError):  # Starlette re-raises for the server's log, after answering
            await app(scope, receive, send)

    try:
        asyncio.run(call())
    finally:
        service.run_executor.shutdown()
    start = next(message for message in sent if message["type"] == "http.response.start")
    headers = dict(start["headers"])
    answer = json.loads(b"".join(message.get("body", b"") for message in sent if message["type"] == "http.response.body"))
    assert_json_error((start["status"], {"content-type": headers[b"content-type"].decode()}, json.dumps(answer).encode()),
                      500, "(server)")
    assert "Invalid argument" not in answer["detail"]
    assert service.admitted == 0

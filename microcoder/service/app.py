"""The HTTP service: `/run_code` (SandboxFusion's), `/evaluate` (ours, streamed), `/health`.

One `Evaluator` (a pool of sandboxed worker processes) serves every request. The server
process only parses, admits, schedules and compares; programs run in the workers.

Admission: a request is admitted only while the runs (/run_code) and samples (/evaluate)
admitted and not yet finished stay within `queue_limit`; otherwise it gets 503 with
Retry-After at once. Nothing waits outside that bound.

Every answer is JSON. Order of checks, each a JSON error `{"detail": ..., "field": ...}`:
bytes that are not an HTTP request or a head over 16 KiB (400, `uvicorn_hooks.Protocol`),
headers deadline (408, `uvicorn_hooks.Protocol`), requests in progress (503), token (401), shutting down
(503), body size (413), body deadline (408), JSON and its nesting (400), lone surrogates
in any string (422), fields (422), admission (503); no such path (404) or method (405);
an error of ours (500, its traceback in the log only). Every 503 is ours, JSON with
Retry-After: uvicorn's own limit is off.

Deadlines: a /run_code request is answered within its client's budget, compile_timeout +
run_timeout + `client_grace_s` (verl's client waits that long), less REPLY_MARGIN_S for
the answer's way back; the handler keeps that deadline itself. The run's wall-clock
backstop is cut to what is left of it when the run gets a worker (queue wait counts),
and a client that hangs up stops its run. Waiting is never a verdict: a run that did
not get its run_timeout before the deadline because it waited is a 504 (`waited_out`),
which verl's client retries, not a TimeLimitExceeded.

Shutdown, at any of STOP_SIGNALS (SIGTERM, SIGINT, SIGHUP, ...): for `shutdown_grace_s`
the server keeps listening (new requests get 503) while the requests in progress finish;
what has not finished by then is answered 503, and the workers are killed with their
runs and their cgroups removed.

A run the sandbox could not run (its worker killed under it on both tries) is
SandboxFusion's `SandboxError` on /run_code and a `judge_error` row on /evaluate, its
cause one line in the log: never the program's verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import hmac
import json
import logging
import re
import signal
import socket
import sys
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import asdict

import uvicorn
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from microcoder.config_files import first_error
from microcoder.evaluator import EvaluationResult, Evaluator, EvaluatorConfig, Sample, summarize
from microcoder.evaluator.compare import JudgeMode
from microcoder.evaluator.sandbox import ProgramRun, RunStop
from microcoder.problems import Problem, ProblemFormatError, parse_problem, read_problems
from microcoder.service.config import ServeConfig
from microcoder.service.sandbox_fusion import (MACHINE_MEMORY_MB, SANDBOX_ERROR_MESSAGE, RunCodeRequest,
                                               run_code_response, shown)
from microcoder.service.uvicorn_hooks import Server, check_uvicorn_version, protocol_class

LOG = logging.getLogger("microcoder.serve")
"""One line per event the operator may want (a sandbox error's cause, a client gone
mid-upload, an unexpected error's traceback); never sent to a client."""

RETRY_AFTER_S = "1"
PROBLEM_FAULTS = ("problem has no tests", "broken test:", "the problem's prelude fails")
"""How the detail of a judge_error caused by the request's own problem begins, after its
"test N: " (the prelude's last error line, the test that cannot be compared: the client's
to see). Every other judge_error is the sandbox's fault (a worker that died under the
run, a worker that could not run it), whose detail names our internals: it goes to the log."""
_TEST_PREFIX = re.compile(r"test \d+: ")
REPLY_MARGIN_S = 1.0
"""A /run_code answer leaves this long before its client's budget ends (the way back,
and a loaded machine's scheduling)."""
SHUTDOWN_MARGIN_S = 0.25
"""Requests still running at the end of the shutdown grace are answered this long before it."""
EXTRA_REQUESTS = 64
"""HTTP requests in progress allowed beyond the queue limit (those being read, refused or
streamed); past queue_limit + this, a request gets 503 before its body is read."""
MAX_NESTING = 64
"""Deepest JSON nesting a request body may have (a canonical problem needs 4)."""
_SURROGATE = re.compile("[\ud800-\udfff]")


class RequestError(Exception):
    """A request we refuse: HTTP status, the field at fault, and why."""

    def __init__(self, status: int, field: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.field, self.message, self.headers = status, field, message, headers


class SampleIn(BaseModel):
    """One sample of /evaluate: `response` (code is extracted) or `code` (used as is)."""

    model_config = ConfigDict(extra="forbid")

    problem_id: str
    response: str | None = None
    code: str | None = None


class EvaluateRequest(BaseModel):
    """/evaluate's body. Samples name a problem of `problems` or of the server's --problems."""

    model_config = ConfigDict(extra="forbid")

    samples: list[SampleIn] = Field(min_length=1)
    problems: list[dict] = Field(default_factory=list)
    """Canonical problems (docs/formats.md), validated as the problems file is."""
    mode: JudgeMode | None = None
    """Comparison rules; the server's --mode when absent."""


class _BatchStopped(Exception):
    """Raised from a batch's result callback: its client left, or the server is stopping."""


class Service:
    """The evaluator, the loaded problems and the admission count, shared by all requests."""

    def __init__(self, config: ServeConfig):
        self.config = config
        self.problems: dict[str, Problem] = (
            {problem.id: problem for problem in read_problems(config.problems)} if config.problems else {})
        self.evaluator: Evaluator | None = None
        self.run_executor: ThreadPoolExecutor | None = None
        self.stopping = threading.Event()
        self.stop_deadline = float("inf")  # time.monotonic() at which the shutdown grace ends
        self.stopped: asyncio.Event | None = None  # set on the loop when stopping begins
        self.loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self.admitted = 0
        self.in_progress = 0  # HTTP requests being handled (on the loop's thread only)

    def begin_stop(self) -> None:
        """Stop admitting; requests in progress have the grace to finish. Safe in a signal handler."""
        if not self.stopping.is_set():
            self.stop_deadline = time.monotonic() + self.config.shutdown_grace_s
            self.stopping.set()
            if self.loop is not None and self.stopped is not None:
                with contextlib.suppress(RuntimeError):  # the loop is closed already
                    self.loop.call_soon_threadsafe(self.stopped.set)

    def start(self) -> None:
        """Start the workers now (each runs one empty program), not on the first request."""
        config = self.config
        self.evaluator = Evaluator(EvaluatorConfig(workers=config.workers, mode=config.mode,
                                                   time_limit_s=config.time_limit_s,
                                                   memory_limit_mb=config.memory_limit_mb))
        sandbox = self.evaluator.sandbox
        sandbox.run_programs([("pass", "")] * sandbox.size, time_limit_s=config.time_limit_s)
        # One thread per worker for /run_code; its queue is bounded by admission.
        self.run_executor = ThreadPoolExecutor(max_workers=sandbox.size, thread_name_prefix="run_code")

    def close(self) -> None:
        """Stop admitting, drop queued /run_code calls and kill the workers with their runs."""
        self.stopping.set()
        if self.run_executor is not None:
            self.run_executor.shutdown(wait=False, cancel_futures=True)
        if self.evaluator is not None:
            self.evaluator.close(kill=True)

    def admit(self, units: int) -> None:
        with self._lock:
            if self.stopping.is_set():
                raise RequestError(503, "(server)", "the server is shutting down", {"Retry-After": RETRY_AFTER_S})
            if self.admitted + units > self.config.queue_limit:
                raise RequestError(503, "(server)", f"queue full: {self.admitted} runs or samples admitted, "
                                   f"limit {self.config.queue_limit}; retry later", {"Retry-After": RETRY_AFTER_S})
            self.admitted += units

    def release(self, units: int) -> None:
        with self._lock:
            self.admitted -= units


async def read_json(request: Request, limit: int, timeout_s: float):
    """The body as JSON, refusing more than `limit` bytes before reading them all, and a
    body that has not all arrived within `timeout_s` (408: a stalled or trickling upload
    holds a request slot, which others need)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise RequestError(413, "(body)", f"body of {declared} bytes is over the limit of {limit} bytes")
    chunks, size = [], 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise RequestError(413, "(body)", f"body is over the limit of {limit} bytes")
                chunks.append(chunk)
    except TimeoutError:
        LOG.warning("%s: the body of %s %s did not arrive within %g s (%d bytes read): answered 408",
                    _peer(request), request.method, request.url.path, timeout_s, size)
        raise RequestError(408, "(body)", f"the body did not arrive within {timeout_s:g} s ({size} bytes read)",
                           {"Connection": "close"}) from None
    except ClientDisconnect:
        LOG.warning("%s: disconnected during the upload of %s %s (%d bytes read)", _peer(request), request.method,
                    request.url.path, size)
        raise RequestError(499, "(client)", "the client closed the connection") from None
    try:
        body = json.loads(b"".join(chunks))
    except (ValueError, UnicodeDecodeError) as error:
        raise RequestError(400, "(body)", f"the body is not JSON: {error}") from None
    except RecursionError:  # the C parser's own guard, at about the interpreter's recursion limit
        raise RequestError(400, "(body)", f"the body is nested more than {MAX_NESTING} levels deep") from None
    check_strings(body)
    return body


def _peer(request: Request) -> str:
    return f"{request.client.host}:{request.client.port}" if request.client else "a client"


def check_strings(body) -> None:
    """400 for JSON nested more than MAX_NESTING levels; 422 naming the first string (or
    key) that is not Unicode text: JSON's \\ud800 escapes decode to lone surrogates, which no
    program's source, stdin or answer can hold as UTF-8. Walked without recursion."""
    todo = [((), body, 0)]
    while todo:
        path, item, depth = todo.pop()
        if depth > MAX_NESTING:
            raise RequestError(400, "(body)", f"the body is nested more than {MAX_NESTING} levels deep")
        if isinstance(item, str):
            found = _SURROGATE.search(item)
            if found:
                field = ".".join(str(part) for part in path) or "(body)"
                raise RequestError(422, field, f"{field}: not Unicode text: a lone surrogate "
                                   f"(\\u{ord(found.group()):04x}) at character {found.start()}")
        elif isinstance(item, dict):
            for key, child in reversed(item.items()):
                if _SURROGATE.search(key):
                    field = ".".join(str(part) for part in path) or "(body)"
                    raise RequestError(422, field, f"{field}: a key is not Unicode text (a lone surrogate)")
                todo.append(((*path, key), child, depth + 1))
        elif isinstance(item, list):
            todo.extend(((*path, index), child, depth + 1) for index, child in reversed(list(enumerate(item))))


def validated(model: type[BaseModel], body):
    """`body` as `model`, or a 422 naming the first field at fault (e.g. samples.3.problem_id)."""
    try:
        return model.model_validate(body)
    except ValidationError as error:
        field, message = first_error(error, whole="(body)")
        raise RequestError(422, field, f"{field}: {message}") from None


def check_limits(problem: Problem, where: str, max_time_limit_s: float) -> None:
    """422 naming the field for a request's problem whose limits no run can have: a time
    limit over the server's --max-run-timeout (`Problem` itself refuses one that is not
    positive and finite), a memory limit that is not positive or is more than the
    machine's memory."""
    time_limit = problem.time_limit_s
    if time_limit is not None and time_limit > max_time_limit_s:
        raise RequestError(422, f"{where}.time_limit_s", f"{where}.time_limit_s: must be at most "
                           f"this server's limit of {max_time_limit_s} s, got {shown(time_limit)}")
    memory = problem.memory_limit_mb
    if memory is not None and not 0 < memory <= MACHINE_MEMORY_MB:
        raise RequestError(422, f"{where}.memory_limit_mb", f"{where}.memory_limit_mb: must be positive and at "
                           f"most this machine's memory ({MACHINE_MEMORY_MB} MiB), got {shown(memory)}")


def resolve_batch(batch: EvaluateRequest, loaded: dict[str, Problem],
                  max_time_limit_s: float) -> tuple[dict[str, Problem], list[Sample]]:
    """The problems the samples need (the request's first, then the loaded file's) and the
    samples; 422 naming the field for a bad problem, a duplicate id or an unknown id."""
    problems: dict[str, Problem] = {}
    for index, record in enumerate(batch.problems):
        try:
            problem = parse_problem(record, "request", index)
        except ProblemFormatError as error:
            raise RequestError(422, f"problems.{index}.{error.field}",
                               f"problems.{index}.{error.field}: {error.message}") from None
        if problem.id in problems:
            raise RequestError(422, f"problems.{index}.id", f"problems.{index}.id: duplicate id {problem.id!r}")
        check_limits(problem, f"problems.{index}", max_time_limit_s)
        problems[problem.id] = problem
    samples = []
    for index, sample in enumerate(batch.samples):
        if sample.problem_id not in problems:
            if sample.problem_id not in loaded:
                where = "the request's problems" + (" or the server's --problems file" if loaded else
                                                    " (the server loaded no --problems file)")
                raise RequestError(422, f"samples.{index}.problem_id", f"samples.{index}.problem_id: "
                                   f"unknown problem id {sample.problem_id!r}, not in {where}")
            problems[sample.problem_id] = loaded[sample.problem_id]
        if sample.response is None and sample.code is None:
            raise RequestError(422, f"samples.{index}.response",
                               f"samples.{index}.response: a sample needs 'response' or 'code'")
        samples.append(Sample(sample.problem_id, response=sample.response, code=sample.code))
    return problems, samples


def _line(record: dict) -> bytes:
    return (json.dumps(record) + "\n").encode()


async def _send_json(send, status: int, body: dict, headers: dict[str, str]) -> None:
    payload = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
           *((name.lower().encode(), value.encode()) for name, value in headers.items())]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": payload})


def _shutting_down() -> RequestError:
    return RequestError(503, "(server)", "the server is shutting down", {"Retry-After": RETRY_AFTER_S})


def _no_time_to_run() -> RequestError:
    # 504: the status verl's client retries (after 1 s, then 2 s), and a client-side
    # failure after its retries (-1 for verl), never a verdict on the program.
    return RequestError(504, "(server)", "the run did not get its run_timeout before this request's deadline: "
                        "it waited too long for a worker; retry", {"Retry-After": RETRY_AFTER_S})


def waited_out(run: ProgramRun, run_timeout: float) -> bool:
    """Whether a run's time_limit_exceeded is the queue's doing, not the program's: it
    used neither run_timeout of CPU (ours) nor run_timeout of wall time (SandboxFusion's
    limit) before the deadline, cut by the time it waited for a worker, ended it, or it
    never started. Such a run says nothing about the program."""
    return (run.status == "time_limit_exceeded" and run.signal not in (signal.SIGPROF, signal.SIGXCPU)
            and run.cpu_s < run_timeout and run.wall_s < run_timeout)


class _Gate:
    """ASGI middleware before everything else: counts the HTTP requests in progress and
    refuses, with our JSON 503 and Retry-After, one past queue_limit + EXTRA_REQUESTS (the
    bound uvicorn's limit_concurrency would put, answered as ours). A request that uvicorn
    cancels at the end of a shutdown is answered 503, not a traceback."""

    def __init__(self, app, service: Service):
        self.app, self.service = app, service
        self.limit = service.config.queue_limit + EXTRA_REQUESTS

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        service = self.service
        if service.in_progress >= self.limit:
            await _send_json(send, 503, {"detail": f"{service.in_progress} requests in progress, limit {self.limit}; "
                                         "retry later", "field": "(server)"}, {"Retry-After": RETRY_AFTER_S})
            return
        started = False

        async def tracked(message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        service.in_progress += 1
        try:
            await self.app(scope, receive, tracked)
        except asyncio.CancelledError:
            if not service.stopping.is_set():
                raise
            if not started:  # cancelled by uvicorn past the grace: the client still gets an answer
                error = _shutting_down()
                with contextlib.suppress(Exception):
                    await _send_json(send, 503, {"detail": error.message, "field": error.field}, error.headers)
        finally:
            service.in_progress -= 1


async def _first(*awaitables, timeout: float | None = None) -> set:
    """Wait for the first of `awaitables` (futures or coroutines) to finish, at most
    `timeout` seconds; returns the finished ones and cancels the coroutines' tasks left."""
    tasks = [asyncio.ensure_future(item) for item in awaitables]
    owned = [task for task, item in zip(tasks, awaitables) if asyncio.iscoroutine(item)]
    try:
        done, _ = await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in owned:
            task.cancel()
    return done


async def _client_left(request: Request) -> None:
    """Returns once the client has hung up (the body is read: the next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def create_app(service: Service) -> FastAPI:
    """The app serving `service`: /health, and /run_code and /evaluate behind the bearer
    token; every refusal in our JSON shape; `_Gate` in front of it all. The handlers find
    the service on `app.state.service`."""
    app = FastAPI(title="microcoder evaluator", lifespan=_lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.service = service
    app.add_exception_handler(RequestError, _refuse)
    app.add_exception_handler(HTTPException, _no_route)
    app.add_exception_handler(Exception, _internal_error)
    app.add_api_route("/health", _health, methods=["GET"])
    app.add_api_route("/run_code", _run_code, methods=["POST"], dependencies=[Depends(_check_token)])
    app.add_api_route("/evaluate", _evaluate, methods=["POST"], dependencies=[Depends(_check_token)])
    app.add_middleware(_Gate, service=service)
    return app


def _service(request: Request) -> Service:
    return request.app.state.service


@asynccontextmanager
async def _lifespan(app: FastAPI):
    """Start the workers before the first request; close them after the last."""
    service: Service = app.state.service
    service.loop, service.stopped = asyncio.get_running_loop(), asyncio.Event()
    if service.stopping.is_set():
        service.stopped.set()
    await run_in_threadpool(service.start)
    yield
    await run_in_threadpool(service.close)


# ------------------------------------------------------------------ refusals


async def _refuse(request: Request, error: RequestError) -> JSONResponse:
    return JSONResponse({"detail": error.message, "field": error.field}, error.status, headers=error.headers)


async def _no_route(request: Request, error: HTTPException) -> JSONResponse:
    # Starlette's own refusals (no such path, a method the path does not take) in our shape.
    if error.status_code == 405:
        field, detail = "(method)", f"{request.method} is not allowed on {request.url.path}"
    elif error.status_code == 404:
        field, detail = "(path)", f"no endpoint {request.url.path}; there are /run_code, /evaluate and /health"
    else:
        field, detail = "(request)", str(error.detail)
    return JSONResponse({"detail": detail, "field": field}, error.status_code, headers=error.headers)


async def _internal_error(request: Request, error: Exception) -> JSONResponse:
    # A bug of ours: the traceback goes to the log (Starlette logs it after this answer),
    # the client gets our shape and nothing of the server's internals.
    return JSONResponse({"detail": "internal error of the server; its log has the cause", "field": "(server)"},
                        500)


def _check_token(request: Request) -> None:
    token = _service(request).config.token
    if token is None:
        return
    given = request.headers.get("authorization", "").encode()
    if not hmac.compare_digest(given, f"Bearer {token}".encode()):  # constant time
        raise RequestError(401, "Authorization", "missing or wrong bearer token",
                           {"WWW-Authenticate": "Bearer"})


# ------------------------------------------------------------------ /health


async def _health(request: Request) -> JSONResponse:
    service = _service(request)
    sandbox = service.evaluator.sandbox if service.evaluator else None
    body = {"status": "stopping" if service.stopping.is_set() else "ok",
            "workers": sandbox.size if sandbox else 0,
            "isolation": sandbox.plan.description if sandbox else "",
            "admitted": service.admitted, "queue_limit": service.config.queue_limit,
            "problems": len(service.problems)}
    return JSONResponse(body, 503 if service.stopping.is_set() else 200)


# ------------------------------------------------------------------ /run_code


async def _run_code(request: Request) -> JSONResponse:
    arrived = time.monotonic()
    service = _service(request)
    config = service.config
    if service.stopping.is_set():
        raise _shutting_down()
    args = validated(RunCodeRequest, await read_json(request, config.max_body_bytes, config.upload_timeout_s))
    if args.run_timeout > config.max_run_timeout_s:
        raise RequestError(422, "run_timeout", f"run_timeout: {args.run_timeout} is over this server's "
                           f"limit of {config.max_run_timeout_s} s")
    memory = config.memory_limit_mb if args.memory_limit_MB == -1 else args.memory_limit_MB
    # The client's budget (verl's requests.post timeout), less the answer's way back.
    deadline = arrived + args.compile_timeout + args.run_timeout + config.client_grace_s - REPLY_MARGIN_S
    stop = RunStop()
    future = _submit_run(service, args, memory, deadline, stop)
    run = await _answer_in_time(service, request, future, stop, deadline)
    if run.status == "sandbox_error":
        LOG.warning("sandbox error on /run_code: %s", " | ".join(run.detail.strip().splitlines()))
    if waited_out(run, args.run_timeout):
        raise _no_time_to_run()
    return JSONResponse(run_code_response(run))


def _submit_run(service: Service, args: RunCodeRequest, memory_limit_mb: int, deadline: float,
                stop: RunStop) -> Future:
    """Admit one run and hand it to the run threads; it is released when the run ends."""
    service.admit(1)
    try:
        future = service.run_executor.submit(
            service.evaluator.sandbox.run, args.code, args.stdin or "",
            time_limit_s=args.run_timeout, memory_limit_mb=memory_limit_mb, deadline=deadline, stop=stop)
    except RuntimeError:  # the executor shut down between admit and submit
        service.release(1)
        raise _shutting_down() from None
    # Released when the run ends, not when the request's coroutine does: a run that was
    # stopped holds its worker until its process group is gone.
    future.add_done_callback(lambda _: service.release(1))
    return future


async def _answer_in_time(service: Service, request: Request, future: Future, stop: RunStop,
                          deadline: float) -> ProgramRun:
    """The run of `future`, or a refusal (the run stopped) when the handler's deadline
    passes, the client hangs up, or a shutdown's grace ends first."""
    result = asyncio.wrap_future(future)
    # The handler's own deadline: whatever holds the run up (a worker busy with a batch,
    # a loaded machine reaping it), the client hears from us before its budget ends.
    answer_by = deadline + REPLY_MARGIN_S / 2
    done = await _first(result, _client_left(request), service.stopped.wait(),
                        timeout=max(answer_by - time.monotonic(), 0))
    if result not in done:
        if not done:  # past the handler's deadline
            stop.stop()
            future.cancel()
            raise _no_time_to_run()
        if not service.stopping.is_set():  # the client hung up: nobody wants this run any more
            stop.stop()
            future.cancel()
            raise RequestError(499, "(client)", "the client closed the connection")
        left = min(service.stop_deadline - SHUTDOWN_MARGIN_S, answer_by) - time.monotonic()
        if result not in await _first(result, timeout=max(left, 0)):
            stop.stop()
            future.cancel()
            raise _shutting_down()
    return result.result()


# ------------------------------------------------------------------ /evaluate


async def _evaluate(request: Request) -> StreamingResponse:
    service = _service(request)
    config = service.config
    if service.stopping.is_set():
        raise _shutting_down()
    batch = validated(EvaluateRequest, await read_json(request, config.max_body_bytes, config.upload_timeout_s))
    if len(batch.samples) > config.queue_limit:
        raise RequestError(422, "samples", f"samples: {len(batch.samples)} samples, more than this server's "
                           f"queue limit of {config.queue_limit}; split the batch")
    problems, samples = resolve_batch(batch, service.problems, config.max_run_timeout_s)
    evaluator = service.evaluator.judging(batch.mode or config.mode)
    positions = _sample_positions(samples)
    service.admit(len(samples))
    streamed = _StreamedBatch(service, positions)
    threading.Thread(target=streamed.judge, args=(evaluator, problems, samples), name="evaluate", daemon=True).start()
    return StreamingResponse(streamed.lines(), media_type="application/x-ndjson")


def _sample_positions(samples: list[Sample]) -> dict[tuple[str, int], int]:
    """{(problem_id, sample_index): position in the request}. A result row carries `index`,
    the sample's position (rows come in the order samples finish); evaluate() numbers
    samples per problem in order."""
    seen: Counter[str] = Counter()
    position: dict[tuple[str, int], int] = {}
    for index, sample in enumerate(samples):
        position[(sample.problem_id, seen[sample.problem_id])] = index
        seen[sample.problem_id] += 1
    return position


def sandbox_fault(result: EvaluationResult) -> bool:
    """Whether a result row is a judge_error of the sandbox's (not of the request's problem)."""
    if result.verdict != "judge_error":
        return False
    test = _TEST_PREFIX.match(result.detail)
    return not result.detail[test.end() if test else 0:].startswith(PROBLEM_FAULTS)


class _StreamedBatch:
    """One admitted /evaluate batch: judged on a thread of its own (`judge`), its rows
    passed to the loop through a queue and streamed to the client as NDJSON (`lines`)."""

    def __init__(self, service: Service, positions: dict[tuple[str, int], int]):
        self.service, self.positions = service, positions
        self.loop = asyncio.get_running_loop()
        self.rows: asyncio.Queue = asyncio.Queue()
        self.client_gone = threading.Event()

    def post(self, item) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is listening
            self.loop.call_soon_threadsafe(self.rows.put_nowait, item)

    def on_result(self, result: EvaluationResult) -> None:
        # Raising here stops the batch: evaluate() cancels the work units not yet
        # started, so a client that left (or a shutdown) frees the workers within
        # the samples already running.
        if self.client_gone.is_set() or self.service.stopping.is_set():
            raise _BatchStopped
        if sandbox_fault(result):
            # The sandbox's own errors name its paths: the cause goes to the log, the row
            # stays a judge_error (not the program's fault: out of pass@k, no reward).
            LOG.warning("sandbox error on /evaluate: %s", " | ".join(result.detail.strip().splitlines()))
            test = _TEST_PREFIX.match(result.detail)
            result = dataclasses.replace(result, detail=(test.group() if test else "") + SANDBOX_ERROR_MESSAGE)
        self.post(("row", result))

    def judge(self, evaluator: Evaluator, problems: dict[str, Problem], samples: list[Sample]) -> None:
        try:
            self.post(("done", evaluator.evaluate(problems, samples, self.on_result)))
        except _BatchStopped:
            self.post(("error", "the batch was stopped: the server is shutting down"))
        except Exception:  # noqa: BLE001 - reported to the client, the server goes on
            LOG.exception("an /evaluate batch failed")
            self.post(("error", "the batch failed: an internal error of the server; its log has the cause"))
        finally:
            self.service.release(len(samples))

    async def next_row(self):
        got = asyncio.ensure_future(self.rows.get())
        if got not in await _first(got, self.service.stopped.wait()):
            left = self.service.stop_deadline - SHUTDOWN_MARGIN_S - time.monotonic()
            if got not in await _first(got, timeout=max(left, 0)):
                got.cancel()
                return "error", "the batch was stopped: the server is shutting down"
        return got.result()

    async def lines(self):
        try:
            while True:
                kind, item = await self.next_row()
                if kind == "row":
                    yield _line({"index": self.positions[(item.problem_id, item.sample_index)], **asdict(item)})
                elif kind == "done":
                    yield _line({"done": True, "samples": len(item), "summary": summarize(item)})
                    return
                else:
                    yield _line({"error": item})
                    return
        finally:  # the stream ended, or was cancelled because the client disconnected
            self.client_gone.set()


STOP_SIGNALS: tuple[int, ...] = (
    *(getattr(signal, name) for name in ("SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGALRM",
                                         "SIGVTALRM", "SIGPROF", "SIGIO", "SIGPWR", "SIGSTKFLT", "SIGXCPU")
      if hasattr(signal, name)),
    *range(signal.SIGRTMIN, signal.SIGRTMAX + 1))
"""The signals that stop the server cleanly (the grace, then every worker, run and cgroup
closed): every signal whose default action ends a process and that it can catch, but
those the kernel sends for a fault of the process itself (SIGSEGV, SIGBUS, SIGILL, SIGFPE,
SIGTRAP, SIGSYS, SIGABRT: after one, nothing it does can be trusted) and those Python
ignores (SIGPIPE, SIGXFSZ). SIGHUP is among them: a server started in a terminal that
closes stops as it would on SIGTERM. Only SIGKILL (or a fault) leaves the workers'
cgroups behind, for the next sandbox started to remove (evaluator/cgroups.py)."""


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # real-time signals past SIGRTMIN have no name
        return f"signal {signum}"


def run_server(config: ServeConfig) -> None:
    """Serve until a stop signal (STOP_SIGNALS: SIGTERM, SIGINT, SIGHUP, ...), then stop
    every batch and close every worker. The process's last act (`microcoder serve`): it
    returns with the garbage collector off and its signal handlers still in place."""
    check_uvicorn_version()
    service = Service(config)  # reads --problems before anything starts
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("microcoder serve: %(message)s"))
    LOG.addHandler(handler)
    LOG.setLevel(logging.INFO)
    LOG.propagate = False
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say so (accepted
    # ones inherit the listener's protocol). Without it a kept-alive request waits ~40 ms
    # for the client's delayed ACK of the response's first segment (Nagle).
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    listener.bind((config.host, config.port))
    port = listener.getsockname()[1]
    url = f"http://{config.host}:{port}"

    def listening() -> None:  # tests and scripts wait for this line
        sandbox = service.evaluator.sandbox
        print(f"microcoder serve: listening on {url} ({sandbox.size} workers, isolation: "
              f"{sandbox.plan.description}, {len(service.problems)} problems loaded, "
              f"token {'required' if config.token else 'off'})", flush=True)

    async def grace() -> None:
        # Still listening: new requests get our 503 (not a refused connection) while those
        # in progress finish or, at its end, answer 503 themselves.
        while service.in_progress and time.monotonic() < service.stop_deadline:
            await asyncio.sleep(0.05)

    server = Server(uvicorn.Config(create_app(service), log_level="warning", http=protocol_class(config.upload_timeout_s),
                                   ws="none", lifespan="on",
                                   # What is left after our own grace: the answers being written.
                                   timeout_graceful_shutdown=0.5,
                                   # Ours decide (_Gate, Service.admit), as JSON with Retry-After:
                                   # uvicorn's own limit answers a plain-text 503.
                                   limit_concurrency=None, backlog=max(2048, config.queue_limit + EXTRA_REQUESTS)),
                    on_started=listening,
                    # new requests get 503; running batches stop at their next sample
                    on_stop_signal=service.begin_stop, drain=grace)
    if threading.current_thread() is threading.main_thread():  # where Python runs signal handlers
        # Not restored: the process ends after this function, and a signal during the
        # interpreter's teardown (whose atexit handlers retry unremoved cgroups) must not
        # cut it short.
        for signum in STOP_SIGNALS:
            signal.signal(signum, server.stop_on_signal)
    try:
        server.run(sockets=[listener])
    finally:
        listener.close()
        service.close()  # already done by the lifespan unless startup failed; closing twice is fine
    if server.stop_signal is not None and service.stop_deadline != float("inf"):
        signalled = service.stop_deadline - config.shutdown_grace_s
        print(f"microcoder serve: stopped {time.monotonic() - signalled:.2f} s after the signal "
              f"({_signal_name(server.stop_signal)}; grace {config.shutdown_grace_s:g} s)", flush=True)
    # What is left is the interpreter's teardown, whose collections over every object
    # FastAPI, pydantic and the evaluator made took 0.35 s of the 0.37 s between this
    # line and the process's end on an idle machine (up to 1.15 s were seen at load 6-10,
    # past "grace plus at most a second"); they free nothing the exit does not. Workers,
    # runs and cgroups are gone already; atexit handlers still run.
    gc.disable()
    gc.freeze()

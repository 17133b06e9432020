"""Every place microcoder reaches into uvicorn's internals, read against uvicorn 0.54.0.

The HTTP service (app.py) runs on uvicorn with three answers of its own that uvicorn's
public API has no seam for, and a shutdown of its own; each is an override of a uvicorn
internal, kept here so that app.py names none of them and this file is the list of what
an upgrade must re-check. `check_uvicorn_version` refuses any other release (run_server
calls it first; tests/test_serve.py pins it). Of h11 (0.16.0 here) only public API is
used: Connection, its next_event, their_state and trailing_data. What is overridden, and why:

- `H11Protocol.__init__`'s `self.conn` (h11's connection, used by uvicorn for every
  parse) replaced by `HeadLimitedConnection`: a request head over HEAD_LIMIT_BYTES is
  refused however its bytes arrive;
- `H11Protocol.data_received` / `connection_lost` wrapped (the headers deadline, a JSON
  408), and `send_400_response` (uvicorn's answer to what h11 cannot parse) replaced by
  our JSON 400;
- `uvicorn.Server`'s `startup`, `shutdown` and `handle_exit` wrapped, each handing over to
  a callable of the service's (`Server`), and `capture_signals` replaced (run_server
  holds the signal handlers instead, through `Server.stop_on_signal`);
- attributes read: `H11Protocol.cycle` (the request being answered), `.transport`,
  `.loop`; `Server.started`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Awaitable, Callable

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from microcoder.pins import refuse_other_release

UVICORN_VERSION = "0.54.0"
"""The uvicorn release this module was read against (pyproject.toml pins it)."""
HEAD_LIMIT_BYTES = 16 * 1024
"""Largest request head (request line and headers, their line ends and the blank line
included): h11's own limit on an incomplete one, held here on every one."""
_HEAD_END = re.compile(rb"\n\r?\n")  # h11's end of a head (it accepts bare \n line ends)


class UnsupportedUvicorn(RuntimeError):
    """The installed uvicorn is not the release this module's overrides were read against."""


def check_uvicorn_version(installed: str | None = None) -> None:
    """Raise UnsupportedUvicorn unless uvicorn is UVICORN_VERSION, the release whose
    internals the overrides below were read against (run_server checks it first)."""
    refuse_other_release("uvicorn", uvicorn.__version__ if installed is None else installed, UVICORN_VERSION,
                         "microcoder/service/uvicorn_hooks.py", error=UnsupportedUvicorn)


class HeadLimitedConnection(h11.Connection):
    """h11's server side, refusing a request head over HEAD_LIMIT_BYTES however its bytes
    arrive. h11 checks its limit only while a head is incomplete, so one that arrived
    whole in one read (a 64 KB header sent at once) was parsed at any size. Checked on the
    bytes received and not yet parsed each time h11 is about to read a head, the next
    pipelined one included; the refusal is h11's own RemoteProtocolError, which uvicorn
    answers through `Protocol.send_400_response`."""

    def __init__(self) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=HEAD_LIMIT_BYTES)
        self.refused: str | None = None

    def next_event(self):
        if self.refused is None and self.their_state is h11.IDLE:  # a request's head comes next
            pending = self.trailing_data[0]
            if len(pending) >= HEAD_LIMIT_BYTES and not _HEAD_END.search(pending, 0, HEAD_LIMIT_BYTES):
                self.refused = f"the request line and headers are over {HEAD_LIMIT_BYTES} bytes"
        if self.refused is not None:
            raise h11.RemoteProtocolError(self.refused, error_status_hint=431)
        return super().next_event()


class Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol (h11) with three answers of ours: what it cannot parse as
    a request (a bad request line, a bad Content-Length) and a head over HEAD_LIMIT_BYTES
    are our JSON 400 instead of its plain text (`send_400_response`), and headers that have
    not all arrived `headers_timeout_s` after their first byte are a JSON 408 (uvicorn
    waits for them forever: each such client holds a connection). The connection is closed
    after either."""

    headers_timeout_s = 10.0
    headers_timer: asyncio.TimerHandle | None = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.conn = HeadLimitedConnection()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.cycle is not None and not self.cycle.response_complete:  # a request's headers are in
            self.stop_headers_timer()
        elif self.headers_timer is None and not self.transport.is_closing():  # the next request's first bytes
            self.headers_timer = self.loop.call_later(self.headers_timeout_s, self.headers_too_slow)

    def stop_headers_timer(self) -> None:
        if self.headers_timer is not None:
            self.headers_timer.cancel()
            self.headers_timer = None

    def headers_too_slow(self) -> None:
        self.headers_timer = None
        if (self.cycle is not None and not self.cycle.response_complete) or self.transport.is_closing():
            return
        self.answer_and_close(408, "Request Timeout", "(headers)",
                              f"the request's headers did not arrive within {self.headers_timeout_s:g} s")

    def connection_lost(self, exc: Exception | None) -> None:
        self.stop_headers_timer()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        # uvicorn's `msg` is the same for every parse error; our connection says why it refused.
        why = self.conn.refused or msg
        self.answer_and_close(400, "Bad Request", "(request)", f"not an HTTP request this server can read: {why}")

    def answer_and_close(self, status: int, reason: str, field: str, detail: str) -> None:
        # Written as bytes: h11 has no request to answer (none was parsed).
        payload = json.dumps({"detail": detail, "field": field}).encode()
        self.transport.write(f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
                             f"content-length: {len(payload)}\r\nconnection: close\r\n\r\n".encode() + payload)
        self.transport.close()


def protocol_class(headers_timeout_s: float) -> type[Protocol]:
    """`Protocol` with its headers deadline set, for `uvicorn.Config(http=...)`."""
    return type("Protocol", (Protocol,), {"headers_timeout_s": headers_timeout_s})


class Server(uvicorn.Server):
    """uvicorn's server, handing its start, its stop signal and its shutdown to the service:
    `on_started()` once it listens, `on_stop_signal()` at each stop signal (before uvicorn's
    own handling: a second SIGINT still skips what is left of the grace), and `drain()`
    awaited before uvicorn's shutdown (the grace, still listening). It ends the process
    normally after its shutdown (uvicorn re-raises the signal, which would kill the
    process before the service's own clean-up could report)."""

    def __init__(self, config: uvicorn.Config, on_started: Callable[[], None], on_stop_signal: Callable[[], None],
                 drain: Callable[[], Awaitable[None]]):
        super().__init__(config)
        self.on_started, self.on_stop_signal, self.drain = on_started, on_stop_signal, drain
        self.stop_signal: int | None = None  # the first signal received

    def stop_on_signal(self, signum: int, frame) -> None:
        """The signal handler run_server installs for each stop signal."""
        self.handle_exit(signum, frame)

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if self.started:  # the lifespan has started the workers
            self.on_started()

    def handle_exit(self, sig: int, frame) -> None:
        if self.stop_signal is None:
            self.stop_signal = sig
        self.on_stop_signal()
        super().handle_exit(sig, frame)  # a second SIGINT skips what is left of the grace, as in uvicorn

    async def shutdown(self, sockets=None) -> None:
        await self.drain()
        await super().shutdown(sockets)

    @contextlib.contextmanager
    def capture_signals(self):
        # run_server holds the handlers, for its stop signals, from before the workers start
        # to the process's end: uvicorn's cover SIGINT and SIGTERM during its own run only.
        yield

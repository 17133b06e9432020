"""The one config of `microcoder serve`."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from microcoder.config_files import CommandConfig
from microcoder.evaluator.compare import JudgeMode
from microcoder.evaluator.sandbox import DEFAULT_MEMORY_LIMIT_MB, DEFAULT_TIME_LIMIT_S


class ServeConfig(CommandConfig):
    """How the service listens, judges and bounds its work. Defaults suit a laptop CPU."""

    host: str = "127.0.0.1"
    """Address to listen on; 0.0.0.0 for every interface (then set a token)."""
    port: int = Field(8080, ge=0, le=65535)
    """TCP port (SandboxFusion's own default); 0 picks a free one, printed at start."""
    workers: int = Field(0, ge=0)
    """Sandbox workers (parallel runs); 0 = one per usable core."""
    token: str | None = None
    """Require 'Authorization: Bearer TOKEN' on /run_code and /evaluate (or set MICROCODER_SERVE_TOKEN, which
    keeps it out of the process list)."""
    problems: Path | None = None
    """Canonical problems JSONL loaded at start; /evaluate samples may name its ids."""
    mode: JudgeMode = "robust"
    """/evaluate's comparison rules when a request names none: robust or strict."""
    queue_limit: int = Field(1024, gt=0)
    """Runs (/run_code) plus samples (/evaluate) admitted at once, running or waiting;
    a request that would go over it gets 503 with Retry-After, never a longer backlog."""
    max_body_mb: float = Field(64.0, gt=0)
    """Largest request body in MiB; more is 413."""
    time_limit_s: float = Field(DEFAULT_TIME_LIMIT_S, gt=0)
    """CPU seconds per test for problems that set none."""
    memory_limit_mb: int = Field(DEFAULT_MEMORY_LIMIT_MB, gt=0)
    """MiB of address space per run for problems that set none, and for /run_code
    requests whose memory_limit_MB is -1 (SandboxFusion's "no limit")."""
    max_run_timeout_s: float = Field(60.0, gt=0)
    """Largest run_timeout /run_code accepts, in seconds (a bound on how long one run holds a worker)."""
    client_grace_s: float = Field(10.0, gt=1.0)
    """Seconds a /run_code client waits beyond compile_timeout + run_timeout (verl 0.9.1's
    client: 10). A request is answered within compile_timeout + run_timeout +
    client_grace_s - 1 s of its arrival, queue wait included (docs/serve.md, "Deadlines"),
    so the grace must be more than that 1 s (app.REPLY_MARGIN_S)."""
    upload_timeout_s: float = Field(10.0, gt=0)
    """Seconds a request's headers may take to arrive from their first byte, and its body
    once its headers have; slower is answered 408 and the connection closed (a stalled
    client must not hold a slot or a connection)."""
    shutdown_grace_s: float = Field(5.0, gt=0)
    """After a stop signal (SIGTERM, SIGINT, SIGHUP, ...: app.STOP_SIGNALS): how long
    requests in progress may take to finish (new ones get 503) before they are answered
    503 and the workers killed."""

    @field_validator("token")
    @classmethod
    def _token_not_blank(cls, token: str | None) -> str | None:
        if token is not None and not token.strip():
            raise ValueError("must not be empty")
        return token

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * 1024 * 1024)

"""The one config of `microcoder serve`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from microcoder.evaluator.compare import JUDGE_MODES, JudgeMode
from microcoder.evaluator.sandbox import DEFAULT_MEMORY_LIMIT_MB, DEFAULT_TIME_LIMIT_S


@dataclass(frozen=True)
class ServeConfig:
    """How the service listens, judges and bounds its work. Defaults suit a laptop CPU."""

    host: str = "127.0.0.1"
    """Address to listen on; 0.0.0.0 for every interface (then set a token)."""
    port: int = 8080
    """TCP port (SandboxFusion's own default); 0 picks a free one, printed at start."""
    workers: int = 0
    """Sandbox workers (parallel runs); 0 means one per usable core."""
    token: str | None = None
    """When set, /run_code and /evaluate need `Authorization: Bearer <token>`."""
    problems: Path | None = None
    """Canonical problems JSONL loaded at start; /evaluate samples may name its ids."""
    mode: JudgeMode = "robust"
    """/evaluate's comparison rules when a request names none."""
    queue_limit: int = 1024
    """Runs (/run_code) plus samples (/evaluate) admitted at once, running or waiting;
    a request that would go over it gets 503 with Retry-After, never a longer backlog."""
    max_body_mb: float = 64.0
    """Largest request body; more is 413."""
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    """CPU seconds per test for problems that set none."""
    memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB
    """MiB of address space per run for problems that set none, and for /run_code
    requests whose memory_limit_MB is -1 (SandboxFusion's "no limit")."""
    max_run_timeout_s: float = 60.0
    """Largest run_timeout /run_code accepts (a bound on how long one run holds a worker)."""
    client_grace_s: float = 10.0
    """Seconds a /run_code client waits beyond compile_timeout + run_timeout (verl 0.9.1's
    client: 10). A request is answered within compile_timeout + run_timeout +
    client_grace_s - 1 s of its arrival, queue wait included (docs/serve.md, "Deadlines")."""
    upload_timeout_s: float = 10.0
    """Seconds a request's headers may take to arrive from their first byte, and its body
    once its headers have; slower is answered 408 and the connection closed (a stalled
    client must not hold a slot or a connection)."""
    shutdown_grace_s: float = 5.0
    """After a stop signal (SIGTERM, SIGINT, SIGHUP, ...: app.STOP_SIGNALS): how long
    requests in progress may take to finish (new ones get 503) before they are answered
    503 and the workers killed."""

    def __post_init__(self) -> None:
        if self.mode not in JUDGE_MODES:
            raise ValueError(f"mode must be one of {', '.join(JUDGE_MODES)}, got {self.mode!r}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be 0-65535, got {self.port}")
        for name in ("queue_limit", "max_body_mb", "time_limit_s", "memory_limit_mb", "max_run_timeout_s",
                     "client_grace_s", "upload_timeout_s", "shutdown_grace_s"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):  # nan and inf too: `<= 0` let them through
                raise ValueError(f"{name} must be positive and finite, got {value}")
        if self.client_grace_s <= 1.0:
            # The answer leaves 1 s before the client's budget ends (app.REPLY_MARGIN_S); with
            # no more grace than that, a run could not have its run_timeout before the deadline.
            raise ValueError(f"client_grace_s must be more than 1 s, got {self.client_grace_s}")
        if self.workers < 0:
            raise ValueError(f"workers must be 0 (one per core) or more, got {self.workers}")
        if self.token is not None and not self.token.strip():
            raise ValueError("token must not be empty")

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * 1024 * 1024)

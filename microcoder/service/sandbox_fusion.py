"""SandboxFusion's `/run_code`, for Python: the request and the response, field for field.

Taken from SandboxFusion's source (bytedance/SandboxFusion, `sandbox/server/sandbox_api.py`
and `sandbox/runners/types.py`) and checked against the client verl 0.9.1 uses for
`reward.sandbox_fusion.url` (`verl/utils/reward_score/sandbox_fusion/utils.py`), which
reads `status`, `run_result.status`, `run_result.return_code`, `run_result.stdout`,
`run_result.stderr`, `run_result.execution_time` and `compile_result`.

Where we differ from SandboxFusion (docs/serve.md, "SandboxFusion compatibility"):
- `language` must be `python`; anything else is a 422 naming the field (SandboxFusion
  runs ~30 languages);
- `files` and `fetch_files` must be empty (SandboxFusion writes and reads files in the
  run's directory); `compile_timeout` (a finite number, 0 or more) only adds to the
  request's deadline (Python is not compiled);
- `run_timeout` is a CPU-time limit, with a wall-clock backstop of 3 x run_timeout + 1 s
  for programs that sleep or block (SandboxFusion's is wall-clock only);
- `memory_limit_MB: -1` (SandboxFusion's "no limit") means the server's default limit,
  and no limit may exceed the machine's memory;
- a `SandboxError` says only that the sandbox failed: why (its paths, its traceback) is
  in the server's log, never in an answer;
- stdout over 32 MiB is cut and the run `Failed` (SandboxFusion has no output limit).
"""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field, field_validator

from microcoder.evaluator.sandbox import ProgramRun

MACHINE_MEMORY_MB = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
"""The largest memory limit a request may ask for: beyond the machine's memory a limit
limits nothing (and past 2**63 bytes the kernel refuses it)."""


def shown(number: float) -> str:
    """A number for an error message, however many digits it was sent with."""
    text = str(number)
    return text if len(text) <= 24 else f"a number of {len(text)} digits"


class RunCodeRequest(BaseModel):
    """SandboxFusion's `RunCodeRequest`. Unknown fields are ignored, as SandboxFusion does."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    code: str
    language: str
    compile_timeout: float = 10
    run_timeout: float = 10
    memory_limit_MB: int = -1
    stdin: str | None = None
    files: dict[str, str | None] = Field(default_factory=dict)
    fetch_files: list[str] = Field(default_factory=list)

    @field_validator("language")
    @classmethod
    def _only_python(cls, language: str) -> str:
        if language != "python":
            raise ValueError(f"only 'python' is supported here, got {language!r}")
        return language

    @field_validator("files")
    @classmethod
    def _no_files(cls, files: dict[str, str | None]) -> dict[str, str | None]:
        # SandboxFusion skips files whose content is null; verl sends {}.
        if any(content is not None for content in files.values()):
            raise ValueError("files are not supported here: send the program's inputs on stdin")
        return files

    @field_validator("fetch_files")
    @classmethod
    def _no_fetch_files(cls, fetch_files: list[str]) -> list[str]:
        if fetch_files:
            raise ValueError("fetch_files is not supported here: the run's directory is discarded")
        return fetch_files

    @field_validator("run_timeout")
    @classmethod
    def _positive_timeout(cls, run_timeout: float) -> float:
        if not run_timeout > 0:
            raise ValueError(f"must be positive, got {shown(run_timeout)}")
        return run_timeout

    @field_validator("compile_timeout")
    @classmethod
    def _compile_timeout(cls, compile_timeout: float) -> float:
        # Ignored for Python, but part of the client's budget (the request's deadline).
        if not compile_timeout >= 0:
            raise ValueError(f"must be 0 or more, got {shown(compile_timeout)}")
        return compile_timeout

    @field_validator("memory_limit_MB")
    @classmethod
    def _memory(cls, memory: int) -> int:
        if memory == 0 or memory < -1:
            raise ValueError(f"must be positive, or -1 for the server's default, got {shown(memory)}")
        if memory > MACHINE_MEMORY_MB:
            raise ValueError(f"must be at most this machine's memory ({MACHINE_MEMORY_MB} MiB), got {shown(memory)}")
        return memory


SANDBOX_ERROR_MESSAGE = "the sandbox could not run the program; the server's log says why"


def run_code_response(run: ProgramRun) -> dict:
    """SandboxFusion's `RunCodeResponse` for one finished run of ours.

    `status`: `Success` (exit code 0), `Failed` (non-zero exit code, killed, over a limit,
    or timed out) or `SandboxError` (the sandbox could not run it). `run_result.status`:
    `Finished`, `TimeLimitExceeded` (return_code null) or `Error`. A run killed by a signal
    has return_code -signal, as SandboxFusion's `python file.py` under asyncio reports.
    """
    stdout = run.stdout.decode("utf-8", "replace")
    stderr = run.stderr.decode("utf-8", "replace")
    message = ""
    if run.status == "sandbox_error":
        # Why is in the server's log: the sandbox's own errors name its paths and internals.
        status, run_status, return_code, message = "SandboxError", "Error", None, SANDBOX_ERROR_MESSAGE
        stderr = ""
    elif run.status == "time_limit_exceeded":
        status, run_status, return_code = "Failed", "TimeLimitExceeded", None
    else:
        return_code = -run.signal if run.signal else run.exit_code
        status = "Success" if run.status == "ok" else "Failed"
        run_status = "Finished"
        if run.status in ("output_limit_exceeded", "memory_limit_exceeded"):
            message = run.detail
    return {
        "status": status,
        "message": message,
        "compile_result": None,
        "run_result": {
            "status": run_status,
            "execution_time": run.wall_s,
            "return_code": return_code,
            "stdout": stdout,
            "stderr": stderr,
        },
        "executor_pod_name": None,
        "files": {},
    }

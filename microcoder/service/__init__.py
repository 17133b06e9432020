"""The evaluator as an HTTP service (`microcoder serve`; docs/serve.md).

- `config.py`: `ServeConfig`, the one config of the service (no web imports, so the CLI
  can state its defaults without loading FastAPI);
- `sandbox_fusion.py`: SandboxFusion's `/run_code` request and response, and the mapping
  from our sandbox's `ProgramRun` to that response;
- `app.py`: the FastAPI app (`/run_code`, `/evaluate`, `/health`), its admission control
  and the uvicorn server that runs it;
- `uvicorn_hooks.py`: every override of uvicorn's internals (the JSON 400 and 408, the
  request-head limit, the shutdown grace), with the uvicorn release they were read against.

Untrusted code runs only in the evaluator's sandboxed worker processes, never in the
server's own.
"""

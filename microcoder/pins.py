"""The one refusal of a library release other than the one our hooks were read against.

Where microcoder reaches into another library's private parts (TRL's trainer methods,
vLLM's worker, uvicorn's server), those parts live in one hooks module per library, read
against one pinned release. At start-up the hooks module calls `refuse_other_release`: any
other release stops the run with one message saying what to install, or how to check the
hooks against the installed release and accept it by an environment variable naming it.
"""

from __future__ import annotations

import os


def refuse_other_release(library: str, installed: str, pinned: str, hooks: str, accept_env: str | None = None,
                         how_to_check: str = "", error: type[Exception] = RuntimeError) -> None:
    """Raise `error` unless `installed` is `pinned`, or `accept_env` is set to `installed`.

    hooks: the module whose overrides were read against `pinned` (named in the message).
    accept_env: the variable whose value accepts that one other release (None: no other is
    accepted); how_to_check: the command that must pass before accepting it.
    """
    if installed == pinned or (accept_env is not None and os.environ.get(accept_env) == installed):
        return
    message = (f"{library} {installed} is installed, but microcoder reaches into internals of {library} {pinned} "
               f"({hooks}), which another release may have changed. Install {library}=={pinned}")
    if accept_env is None:
        raise error(message + ".")
    raise error(f"{message}; or check the hooks against {library} {installed} ({accept_env}={installed} "
                f"{how_to_check} must pass) and keep {accept_env}={installed} set to run on it.")

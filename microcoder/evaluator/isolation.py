"""How the sandbox's workers are isolated: the strongest this machine allows.

Strongest first (chosen by `isolation="auto"`):
- running as root: each worker in its own network namespace (no network but a down
  loopback), IPC namespace (no SysV IPC or message queues) and mount namespace (every
  mount read-only; /root, /home, /tmp, the caller's home and working directory covered
  by empty tmpfs; the Python installation bound back read-only), and each run under a
  uid of its own worker, so the run cannot signal or read our processes, RLIMIT_NPROC
  stops fork bombs, and leftovers are killed by uid;
- not root, user namespaces allowed: the same namespaces, but runs keep our uid (and
  drop every capability);
- neither: rlimits, a private directory, a scrubbed environment and process-group kills.

The namespaces are made by `unshare` around the worker (`IsolationPlan.command_prefix`);
the worker (`_zygote.py`) sets up the mounts and switches uids inside them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args


@dataclass(frozen=True)
class IsolationPlan:
    """How workers are started: the command they run under and what it gives them."""

    command_prefix: tuple[str, ...]
    switch_uid: bool
    isolate_filesystem: bool
    description: str


def command_succeeds(command: Sequence[str]) -> bool:
    """Whether `command` runs and exits 0 (within 10 s): how a namespace is probed."""
    try:
        return subprocess.run(list(command), capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


Isolation = Literal["auto", "full", "none"]
ISOLATION_MODES: tuple[str, ...] = get_args(Isolation)

_plans: dict[str, IsolationPlan] = {}


def isolation_plan(mode: str = "auto") -> IsolationPlan:
    """Find the strongest isolation this machine allows (cached)."""
    if mode not in ISOLATION_MODES:
        raise ValueError(f"isolation must be one of {', '.join(ISOLATION_MODES)}, got {mode!r}")
    if mode in _plans:
        return _plans[mode]
    unshare = shutil.which("unshare")
    root = os.geteuid() == 0
    if mode == "none":
        plan = IsolationPlan((), False, False, "none: rlimits and process groups only")
    elif root and unshare and command_succeeds([unshare, "--net", "--mount", "--ipc", "true"]):
        plan = IsolationPlan((unshare, "--net", "--mount", "--ipc"), True, True,
                             "network+mount+IPC namespaces, a uid per worker")
    elif root:
        plan = IsolationPlan((), True, False, "a uid per worker; no namespaces (unshare unavailable)")
    elif unshare and command_succeeds([unshare, "--user", "--map-root-user", "--net", "--mount", "--ipc", "true"]):
        prefix = (unshare, "--user", "--map-root-user", "--net", "--mount", "--ipc")
        plan = IsolationPlan(prefix, False, True, "network+mount+IPC namespaces; runs keep the caller's uid")
    else:
        plan = IsolationPlan((), False, False, "none available: rlimits and process groups only")
    if mode == "full" and not (plan.switch_uid and plan.isolate_filesystem):
        raise RuntimeError(f"isolation='full' is not available here (best: {plan.description}); run as root")
    _plans[mode] = plan
    return plan


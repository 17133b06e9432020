"""The workloads the benchmarks share: for the evaluator's speed benchmarks the trivial add
problems (stdin and call), the programs that solve them, and the RL-like mix of rollouts;
for the vLLM benchmarks the model they sample (`float32_model`).

A helper module, not a benchmark: evaluator_speed.py, fork_floor.py, evaluator_cost_split.py,
serve_speed.py, vllm_parity.py and vllm_weight_copy.py import it, and it imports none of
them (tests/test_layering.py).
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

from microcoder.problems import Problem

TIME_LIMIT_S = 1.0
"""CPU seconds per test of the add problems."""

CORRECT = "a, b = map(int, input().split())\nprint(a + b)\n"
CORRECT_CALL = "class Solution:\n    def add(self, a: int, b: int) -> int:\n        return a + b\n"
LOOP = "while True:\n    pass\n"


def busy(milliseconds: float) -> str:
    """Python that burns about this much CPU, then continues."""
    return (
        "import time as _t\n_end = _t.process_time() + %f\nwhile _t.process_time() < _end:\n    pass\n" % (milliseconds / 1000)
    )


SLOW_CORRECT = busy(50) + CORRECT


def stdin_problem(tests: int) -> Problem:
    rows = [{"input": f"{i} {i * 7}\n", "output": f"{i + i * 7}\n"} for i in range(tests)]
    return Problem(id="add", prompt="", kind="stdin", tests=rows, time_limit_s=TIME_LIMIT_S)


def call_problem(tests: int) -> Problem:
    rows = [{"input": f"{i}\n{i * 7}", "output": f"{i + i * 7}"} for i in range(tests)]
    return Problem(id="addc", prompt="", kind="call", entry_point="Solution().add", tests=rows, time_limit_s=TIME_LIMIT_S)


def rl_mix(samples: int, tests: int, seed: int = 0, loops: int = 4, slow: int = 4) -> list[str]:
    """`loops` infinite loops, `slow` correct programs that burn ~50 ms per test, and of the
    rest half correct, a quarter wrong (on a random test), a quarter crashing (on a random
    test): what a policy's rollouts look like early in training."""
    rng = random.Random(seed)
    rest = samples - loops - slow
    codes = [LOOP] * loops + [SLOW_CORRECT] * slow
    for index in range(rest):
        if index < rest // 2:
            codes.append(CORRECT)
        elif index < rest * 3 // 4:
            bad = rng.randrange(tests)
            codes.append(f"a, b = map(int, input().split())\nprint(a + b + (1 if a == {bad} else 0))\n")
        else:
            crash_at = rng.randrange(tests)
            codes.append(f"a, b = map(int, input().split())\nassert a != {crash_at}\nprint(a + b)\n")
    rng.shuffle(codes)
    return codes


def float32_model(smoke: bool):
    """(model, tokenizer) in float32: the default model, or with `smoke` a tiny random one with
    64-dimension heads (vLLM's CPU attention refuses the default tiny model's 16), saved to a
    temporary folder so that vLLM can start from it."""
    import torch

    from microcoder.policy.model import DEFAULT_MODEL, load_model_and_tokenizer, save_tiny_model

    if not smoke:
        return load_model_and_tokenizer(DEFAULT_MODEL, torch.float32)
    folder = save_tiny_model(Path(tempfile.mkdtemp(prefix="vllm-smoke-")) / "tiny", 0, hidden_size=256)
    return load_model_and_tokenizer(str(folder), torch.float32)


def spinners_in_new_sessions(count: int) -> str:
    """A program that forks `count` processes, each in a session of its own (out of reach of
    its process group and of the scheduler's grouping by session), then spins with them."""
    return ("import os\n"
            f"for _ in range({count}):\n"
            "    if os.fork() == 0:\n"
            "        os.setsid()\n"
            "        while True:\n"
            "            pass\n"
            "while True:\n"
            "    pass\n")


HALF_A_SECOND = ("import time\nwhile time.process_time() < 0.5:\n"
                 "    for _ in range(20000):\n        pass\nprint('done')\n")
"""An honest program that needs 0.5 s of CPU, checking the clock only now and then."""


def old_tree(against: str, keep: list) -> Path:
    """A checkout of `against`: the path itself when it is a directory, else a new git
    worktree of that commit (removed at exit)."""
    import atexit
    import shutil
    import subprocess

    if Path(against).is_dir():
        return Path(against).resolve()
    repo = Path(__file__).resolve().parents[1]
    folder = Path(tempfile.mkdtemp(prefix="benchmark-old-")) / "tree"
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", str(folder), against], check=True,
                   capture_output=True)

    def remove() -> None:
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(folder)], capture_output=True)
        shutil.rmtree(folder.parent, ignore_errors=True)  # the temporary folder around the tree

    atexit.register(remove)
    keep.append(folder)
    return folder


def paired_ratio(olds: list[float], news: list[float]) -> tuple[float, float, float]:
    """The geometric mean of the ratios news[i] / olds[i] and its two-sided 95% interval (t on
    the log ratios, n - 1 degrees of freedom; nan with one pair). Each pair is measured side
    by side, so that a load both shared cancels in its ratio."""
    import math
    import statistics

    from scipy import stats

    logs = [math.log(new / old) for old, new in zip(olds, news)]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), math.nan, math.nan
    half = float(stats.t.ppf(0.975, len(logs) - 1)) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)

"""Every script in benchmarks/ runs in its --smoke mode (tiny sizes) and exits 0, so that a
change to what a benchmark calls breaks a test instead of the benchmark, found months later.

Scripts that read ../shared/data or a data build use it where it is present and otherwise
take their own documented way (a message, or hand-made problems in place of the build)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "benchmarks"
# Seconds each takes on a loaded 2-core machine; those over ~20 s are marked slow.
QUICK = ["evaluator_cost_split", "fork_floor", "evaluator_leaks", "differential", "reference_cpu_variation",
         "time_limit_changes", "reward_test_budget", "corpus_adequacy", "serve_overload", "livecodebench_agreement",
         "noisy_neighbour", "statement_readings", "corpus_scale"]
SLOW = ["evaluator_accuracy", "evaluator_speed", "serve_load", "serve_speed", "train_step", "base_model_passrate",
        "reward_cache", "generate_options", "vllm_parity", "vllm_weight_copy"]
HELPERS = ["workloads"]  # modules the benchmarks share, not benchmarks themselves


def test_every_benchmark_has_a_smoke_run_here():
    scripts = sorted(path.stem for path in BENCHMARKS.glob("*.py") if path.stem not in HELPERS)
    assert scripts == sorted(QUICK + SLOW)
    for name in scripts:
        assert '"--smoke"' in (BENCHMARKS / f"{name}.py").read_text(), name


def smoke(name: str, timeout: float) -> None:
    environment = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(BENCHMARKS / f"{name}.py"), "--smoke"], cwd=REPO, env=environment,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{name} --smoke exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.stdout.strip(), f"{name} --smoke printed nothing"


@pytest.mark.parametrize("name", QUICK)
def test_benchmark_smoke(name):
    smoke(name, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_benchmark_smoke_slow(name):
    smoke(name, timeout=1200)


@pytest.mark.slow
def test_the_interleaved_comparison_runs_this_checkout_against_itself():
    environment = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(BENCHMARKS / "evaluator_speed.py"), "--against", str(REPO),
                           "--interleave", "2", "--samples", "2", "--tests", "2"], cwd=REPO, env=environment,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| trivial ")]
    assert [row.split(" | ")[0] for row in rows] == ["| trivial stdin", "| trivial call"]
    assert all(row.split(" | ")[1] == "2" for row in rows)  # two turns each

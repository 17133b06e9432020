"""Several training processes on CPU (torchrun, a gloo group): batch sizes stay global,
the held-out eval runs once, and each process saves and restores its own generators.

`accelerate launch --cpu` starts one process whatever --num_processes says (accelerate's
CPU launcher is single-process without mpirun), so the processes come from torchrun,
which `accelerate launch --multi_gpu` also uses on GPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each test trains the tiny model (tens of seconds on 2 cores)

PRESET = Path(__file__).parents[1] / "configs" / "microcoder-tiny.yaml"
# micro_batch_size 2 x 2 processes divides ppo_mini_batch_size x group_size = 4.
SIZES = ["micro_batch_size=2", "heldout_size=2", "save_every=1", "save_total_limit=3"]


def train(run_dir: Path, processes: int, *overrides: str, resume: bool = False) -> list[dict]:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
    command = [*launcher, "-m", "microcoder.cli", "train", "--config", str(PRESET), *SIZES, *overrides]
    command += ["--resume", str(run_dir)] if resume else [f"run_dir={run_dir}"]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "MICROCODER_TRACEBACK": "1"}  # a failure shows its place
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=environment)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> tuple[Path, list[dict]]:
    run_dir = tmp_path_factory.mktemp("two") / "run"
    return run_dir, train(run_dir, 2, "total_steps=3")


def test_two_processes_sample_the_global_batch_and_evaluate_once(straight, tmp_path):
    run_dir, rows = straight
    one = train(tmp_path / "one", 1, "total_steps=1")
    # train_batch_size 2 prompts x 4 responses in all, whatever the process count.
    assert [row["groups_generated"] for row in rows[1:]] == [2, 2, 2] and one[1]["groups_generated"] == 2
    # fraction_masked is a count over the 8 responses of both processes (not 4 of one).
    assert all((row["fraction_masked"] * 8) % 1 == 0 for row in rows[1:])
    assert [row["step"] for row in rows] == [0, 1, 2, 3]  # one line per step: one process writes
    checkpoint = run_dir / "checkpoints" / "checkpoint-6"
    states = [json.loads((checkpoint / f"microcoder_state_{rank}.json").read_text()) for rank in (0, 1)]
    assert states[0]["mask_generator"] != states[1]["mask_generator"]  # each process's own stream
    assert not (checkpoint / "microcoder_state.json").exists()
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 3


def test_a_resumed_two_process_run_draws_what_an_uninterrupted_one_draws(straight, tmp_path):
    straight_dir, uninterrupted = straight
    run_dir = tmp_path / "run"
    train(run_dir, 2, "total_steps=2")
    resumed = train(run_dir, 2, "total_steps=3", resume=True)
    assert [row["step"] for row in resumed] == [0, 1, 2, 3]
    # The mask's U(0,1) draws come from each process's own restored generator: with every
    # response of the random-init model truncated and qualifying, the masked fraction of
    # step 3 depends on nothing else. A process restoring another's state would differ.
    assert resumed[3]["fraction_qualifying"] == uninterrupted[3]["fraction_qualifying"] == 1.0
    assert resumed[3]["fraction_masked"] == uninterrupted[3]["fraction_masked"]
    # The run's budget so far continues from the checkpoint: 2 groups x 4 responses a step.
    for rows in (resumed, uninterrupted):
        assert [(row["groups_generated_total"], row["responses_judged_total"]) for row in rows[1:]] == [
            (2, 8), (4, 16), (6, 24)]
    assert resumed[3]["seconds_total"] > resumed[2]["seconds_total"] > 0
    for rank in (0, 1):  # and each process's generators end where the uninterrupted run's did
        name = f"checkpoints/checkpoint-6/microcoder_state_{rank}.json"
        states = [json.loads((folder / name).read_text()) for folder in (run_dir, straight_dir)]
        for state in states:  # seconds differ run to run
            assert state.pop("totals")["groups_generated_total"] == 6
        assert states[0] == states[1], rank

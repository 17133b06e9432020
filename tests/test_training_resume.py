"""`--resume` on a run whose newest checkpoint does not load: it continues from the newest
that does, saying which file failed, or stops with one line naming the files, before
anything is built (microcoder/training/checkpoints.py). The run is microcoder-tiny's: 2
steps of 2 optimizer updates, checkpoint-2 and checkpoint-4."""

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from microcoder.cli import app
from microcoder.training.checkpoints import checkpoint_fault, checkpoint_files
from microcoder.training.config import load_config
from microcoder.training.metrics import METRICS_FILE
from microcoder.training.run import run_training
from tests.training_support import ScriptedEvaluator, tiny_problems

pytestmark = pytest.mark.slow  # trains the tiny model (seconds on 2 cores)

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
RESUME_READS = ["config.json", "model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth",
                "trainer_state.json", "microcoder_state.json"]
"""What a one-process resume reads from a checkpoint: transformers' files and ours."""


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("runs") / "run"
    config = load_config(CONFIGS / "microcoder-tiny.yaml", [f"run_dir={run}"])
    return run_training(config, problems=tiny_problems(), evaluator=ScriptedEvaluator())


def copy_of(run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    return copy


def cut_short(path: Path) -> None:
    """What a kill during the file's write or a full disk leaves: its first half."""
    os.truncate(path, path.stat().st_size // 2)


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / METRICS_FILE).read_text().splitlines()]


def test_every_file_the_resume_reads_is_checked(finished_run, tmp_path):
    folder = tmp_path / "checkpoint-4"
    shutil.copytree(finished_run / "checkpoints" / "checkpoint-4", folder)
    assert checkpoint_files(folder, processes=1) == RESUME_READS
    assert checkpoint_fault(folder) is None
    for name in RESUME_READS:
        whole = (folder / name).read_bytes()
        cut_short(folder / name)
        assert checkpoint_fault(folder).startswith(f"{folder / name} "), name
        (folder / name).unlink()  # a save killed before it wrote this file
        assert checkpoint_fault(folder) == f"{folder / name} is missing"
        (folder / name).write_bytes(whole)
    assert checkpoint_fault(folder) is None
    # Two processes read one RNG file and one state file each.
    assert checkpoint_files(folder, processes=2)[-5:] == ["rng_state_0.pth", "rng_state_1.pth", "trainer_state.json",
                                                          "microcoder_state_0.json", "microcoder_state_1.json"]


def test_resume_falls_back_to_the_newest_checkpoint_that_loads(finished_run, tmp_path, capsys):
    run = copy_of(finished_run, tmp_path)
    cut_short(run / "checkpoints" / "checkpoint-4" / "optimizer.pt")
    with open(run / METRICS_FILE, "a") as metrics:  # killed while writing a next step's line
        metrics.write('{"step": 3, "reward_me')
    capsys.readouterr()
    config = load_config(run / "config.yaml", [f"run_dir={run}"])
    run_training(config, resume=True, problems=tiny_problems(), evaluator=ScriptedEvaluator())

    out = capsys.readouterr().out.splitlines()
    said = [line for line in out if line.startswith("--resume")]
    # The held-out evaluation at the end says in the log that it starts and what it found.
    evaluation = [line for line in out if line.startswith("heldout_accuracy: ")]
    assert len(evaluation) == 2 and "held-out problems x 1, up to" in evaluation[0], out
    assert evaluation[1].split(" in ")[0] == f"heldout_accuracy: {read_metrics(run)[-1]['heldout_accuracy']:.3f}"
    assert said == [f"--resume: {run}/checkpoints/checkpoint-4/optimizer.pt is cut short (no zip end record, which "
                    "torch.save writes last): moved to unusable-checkpoint-4; resuming from checkpoint-2"]
    # Step 2 was redone from checkpoint-2's state (metrics cut back to step 1, not 2) as
    # the uninterrupted run did it.
    original, again = read_metrics(finished_run), read_metrics(run)
    assert [record["step"] for record in again] == [0, 1, 2]
    assert again[:2] == original[:2]
    for key in ("loss", "reward_mean", "response_length_mean", "entropy", "temperature", "groups_generated_total",
                "responses_judged_total"):
        assert again[2][key] == pytest.approx(original[2][key], rel=1e-5, abs=1e-7), key
    # The bad folder is kept aside, out of the resume's and the rotation's reach; the new
    # checkpoint-4 loads.
    folders = sorted(path.name for path in (run / "checkpoints").iterdir() if path.is_dir())
    assert folders == ["checkpoint-2", "checkpoint-4", "unusable-checkpoint-4"]
    assert checkpoint_fault(run / "checkpoints" / "checkpoint-4") is None
    assert json.loads((run / "summary.json").read_text())["final_checkpoint"].endswith("checkpoint-4")


def test_resume_stops_in_one_line_when_no_checkpoint_loads(finished_run, tmp_path):
    run = copy_of(finished_run, tmp_path)
    cut_short(run / "checkpoints" / "checkpoint-4" / "model.safetensors")
    for name in ("trainer_state.json", "microcoder_state.json"):  # a save killed before its last files
        (run / "checkpoints" / "checkpoint-2" / name).unlink()
    metrics = (run / METRICS_FILE).read_text()

    result = CliRunner().invoke(app, ["train", "--resume", str(run)], env={"COLUMNS": "1000"})
    assert result.exit_code == 2, result.output
    checkpoints = run / "checkpoints"
    assert result.output.splitlines() == [
        f"error: --resume: no checkpoint under {checkpoints} loads: {checkpoints}/checkpoint-4/model.safetensors "
        "does not load (Error while deserializing header: incomplete metadata, file not fully covered); "
        f"{checkpoints}/checkpoint-2/trainer_state.json is missing"]
    # Nothing was changed: no folder set aside, no metrics line dropped.
    assert sorted(path.name for path in checkpoints.iterdir() if path.is_dir()) == ["checkpoint-2", "checkpoint-4"]
    assert (run / METRICS_FILE).read_text() == metrics

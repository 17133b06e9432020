"""The experiment runner and reporter on a tiny grid (2 arms x 2 seeds x 2 steps, CPU)."""

import json
import shutil
from pathlib import Path

import pytest

from microcoder.experiments.report import report_all
from microcoder.experiments.runner import run_experiment, run_state
from microcoder.experiments.spec import load_spec
from microcoder.training.trainer import run_training
from tests.training_support import ScriptedEvaluator, tiny_problems

SPEC = Path(__file__).parent / "fixtures" / "experiments" / "tiny.yaml"


def tiny_train(calls):
    def train(config, resume):
        calls.append((config.run_dir, config.seed, config.learning_rate, resume))
        return run_training(config, resume=resume, problems=(tiny_problems()[0], []), evaluator=ScriptedEvaluator())
    return train


def test_a_grid_runs_resumes_and_reports_one_curve_per_arm(tmp_path):
    calls = []
    outcomes = run_experiment(SPEC, tmp_path, train=tiny_train(calls), log=lambda line: None)
    assert [(o.arm, o.seed, o.status) for o in outcomes] == [
        ("base_lr", 0, "started"), ("base_lr", 1, "started"), ("high_lr", 0, "started"), ("high_lr", 1, "started")]
    assert [(seed, lr) for _, seed, lr, _ in calls] == [(0, 0.001), (1, 0.001), (0, 0.01), (1, 0.01)]
    grid = tmp_path / "tiny"
    assert all(run_state(grid / arm / f"seed-{seed}") == "finished" for arm in ("base_lr", "high_lr")
               for seed in (0, 1))

    # Interrupt one run after its first checkpoint (as a kill would leave it) and one before any.
    killed = grid / "high_lr" / "seed-1"
    for checkpoint in (killed / "checkpoints").glob("checkpoint-*"):
        if checkpoint.name != "checkpoint-2":
            shutil.rmtree(checkpoint)
    (killed / "summary.json").unlink()
    lines = (killed / "metrics.jsonl").read_text().splitlines()
    (killed / "metrics.jsonl").write_text(lines[0] + "\n")
    early = grid / "base_lr" / "seed-0"
    shutil.rmtree(early)
    early.mkdir()
    (early / "metrics.jsonl").write_text("")
    calls.clear()
    outcomes = run_experiment(SPEC, tmp_path, train=tiny_train(calls), log=lambda line: None)
    assert [o.status for o in outcomes] == ["started", "skipped", "skipped", "resumed"]
    assert [(Path(run_dir).name, resume) for run_dir, _, _, resume in calls] == [("seed-0", False), ("seed-1", True)]
    steps = [json.loads(line)["step"] for line in (killed / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]  # step 1 kept, step 2 redone from the checkpoint

    [(figure, report)] = report_all(tmp_path)
    assert figure.is_file() and figure.stat().st_size > 10_000
    text = report.read_text()
    for arm in ("base_lr", "high_lr"):
        rows = [line for line in text.splitlines() if line.startswith(f"| {arm} |")]
        assert len(rows) == 3 and all(line.endswith("| 2 | 2 |") for line in rows)  # last step 2, two seeds
    assert "Runs not finished: none." in text and "> A test grid; no finding." in text


def test_a_bad_arm_fails_before_any_run(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(SPEC.read_text().replace("high_lr: [learning_rate=0.01]", "high_lr: [learning_rat=0.01]")
                    .replace("../../../configs", str(Path(__file__).parents[1] / "configs")))
    with pytest.raises(ValueError, match=r"bad.yaml: arms.high_lr: unknown config key 'learning_rat'"):
        load_spec(spec)
    spec.write_text("name: x\narms: {a: []}\nmetrics: [reward]\n")
    with pytest.raises(ValueError, match=r"metrics: 'reward' is not a metrics.jsonl key"):
        load_spec(spec)

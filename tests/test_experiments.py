"""The experiment runner and reporter on a tiny grid (2 arms x 2 seeds x 2 steps, CPU)."""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from microcoder.experiments.layout import run_state
from microcoder.experiments.publish import NUMBERS_BEGIN, SUMMARY_BEGIN, VERDICTS_BEGIN
from microcoder.experiments.report import report_all
from microcoder.experiments.runner import run_experiment
from microcoder.experiments.spec import load_spec
from microcoder.experiments.verdict import paired_verdict, value_at
from microcoder.training.config import load_config
from microcoder.training.plots import read_metrics
from microcoder.training.run import run_training
from tests.training_support import ScriptedEvaluator, tiny_problems

SPEC = Path(__file__).parent / "fixtures" / "experiments" / "tiny.yaml"


def tiny_train(calls):
    def train(config, resume):
        calls.append((config.run_dir, config.seed, config.learning_rate, resume))
        return run_training(config, resume=resume, problems=(tiny_problems()[0], []), evaluator=ScriptedEvaluator())
    return train


@pytest.mark.slow
def test_a_grid_runs_resumes_and_reports_one_curve_per_arm(tmp_path):
    calls = []
    outcomes = run_experiment(SPEC, tmp_path, train=tiny_train(calls), log=lambda line: None)
    assert [(o.arm, o.seed, o.status) for o in outcomes] == [  # seed-major: every arm gets seed 0 first
        ("base_lr", 0, "started"), ("high_lr", 0, "started"), ("base_lr", 1, "started"), ("high_lr", 1, "started")]
    assert [(seed, lr) for _, seed, lr, _ in calls] == [(0, 0.001), (0, 0.01), (1, 0.001), (1, 0.01)]
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
    assert [o.status for o in outcomes] == ["started", "skipped", "skipped", "resumed"]  # base 0, high 0, base 1, high 1
    assert [(Path(run_dir).name, resume) for run_dir, _, _, resume in calls] == [("seed-0", False), ("seed-1", True)]
    steps = [json.loads(line)["step"] for line in (killed / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]  # step 1 kept, step 2 redone from the checkpoint

    [(figure, report)] = report_all(tmp_path)
    assert figure.is_file() and figure.stat().st_size > 10_000
    text = report.read_text()
    for arm in ("base_lr", "high_lr"):
        rows = [line for line in text.splitlines() if line.startswith(f"| {arm} |") and "| 2 | 2 |" in line]
        assert len(rows) == 3  # one per metric: last step 2, two seeds
    assert "Runs not finished: none." in text and "> A test grid; no finding." in text
    # The declared finding gets a verdict computed from the runs: high_lr - base_lr of each
    # seed's mean ratio_deviation over steps 1-2, paired by seed.
    differences = []
    for seed in (0, 1):
        means = [value_at(read_metrics(grid / arm / f"seed-{seed}" / "metrics.jsonl"), "ratio_deviation", [1, 2])
                 for arm in ("high_lr", "base_lr")]
        differences.append(means[0] - means[1])
    verdict = paired_verdict(differences, "greater")
    [row] = [line for line in text.splitlines() if line.startswith("| 1 | A higher learning rate")]
    assert f"0: {differences[0]:+.3f}, 1: {differences[1]:+.3f}" in row and f"**{verdict.verdict}**" in row
    assert f"{verdict.mean:+.3f} +- {verdict.se:.3f} | {verdict.t:.2f} (1), p {verdict.p:.3f} | {verdict.mde:.3f} |" in row

    # A control that another spec repeats (the same resolved config and seed) is not trained
    # again: its folder records the finished run, and the report reads that run.
    shared_spec = write_spec(tmp_path, name="tiny_shared", findings=[], arms={"control": []})
    outcomes = run_experiment(shared_spec, tmp_path, train=refuse, log=lambda line: None)
    assert [(o.arm, o.seed, o.status) for o in outcomes] == [("control", 0, "shared"), ("control", 1, "shared")]
    record = tmp_path / "tiny_shared" / "control" / "seed-1"
    assert sorted(path.name for path in record.iterdir()) == ["config.yaml", "shared.yaml"]
    assert yaml.safe_load((record / "shared.yaml").read_text()) == {"run": "tiny/base_lr/seed-1"}
    assert run_state(record) == "finished"
    report = dict((path.parent.name, path) for _, path in report_all(tmp_path))["tiny_shared"]
    shared_rows = [line.split("|", 2)[2] for line in report.read_text().splitlines() if line.startswith("| control |")]
    assert shared_rows and shared_rows == [line.split("|", 2)[2] for line in text.splitlines()
                                           if line.startswith("| base_lr |")]
    assert "Shared runs (the same resolved config and seed, run once and read from there): " \
           "control/seed-0 is tiny/base_lr/seed-0; control/seed-1 is tiny/base_lr/seed-1." in report.read_text()
    assert "Wall minutes in all: 0 in this grid's own runs, " in report.read_text()  # all of it is tiny's
    # any other config trains (here: refuses to, which shows it was asked)
    shared_spec = write_spec(tmp_path, name="tiny_shared", findings=[], arms={"other": ["learning_rate=0.02"]})
    with pytest.raises(Interrupted):
        run_experiment(shared_spec, tmp_path, train=refuse, log=lambda line: None)


@pytest.mark.slow
def test_a_spec_sharing_the_heldout_start_evaluates_each_seeds_step_0_once_under_the_runs_root(tmp_path, monkeypatch):
    from microcoder.experiments.sharing import config_identity
    from microcoder.training.trainer import MicroCoderTrainer

    evaluations = []
    real = MicroCoderTrainer.heldout_accuracies

    def counted(self, *args, **kwargs):
        evaluations.append("start" if self.state.global_step == 0 else "end")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(MicroCoderTrainer, "heldout_accuracies", counted)

    def train(config, resume):
        return run_training(config, resume=resume, problems=tiny_problems(), evaluator=ScriptedEvaluator())

    root = tmp_path / "runs"
    spec = write_spec(tmp_path, name="tiny_start", share_heldout_start=True, overrides=["heldout_size=2"])
    outcomes = run_experiment(spec, root, train=train, log=lambda line: None)
    assert [o.status for o in outcomes] == ["started"] * 4
    # 2 arms x 2 seeds: step 0 once per seed (the second arm reads it), the end once per run
    assert sorted(evaluations) == ["end"] * 4 + ["start"] * 2
    assert len(list((root / "heldout-start").glob("heldout-start-*.json"))) == 2
    for seed in (0, 1):
        runs = [root / "tiny_start" / arm / f"seed-{seed}" for arm in ("base_lr", "high_lr")]
        configs = [yaml.safe_load((run / "config.yaml").read_text()) for run in runs]
        assert {config["heldout_start_cache"] for config in configs} == {str((root / "heldout-start").resolve())}
        starts = [read_metrics(run / "metrics.jsonl") for run in runs]
        assert starts[0][0]["heldout_accuracy"] == starts[1][0]["heldout_accuracy"]
        # where the cache lives is not what the run trains: the same run without it is the same run
        assert config_identity({**configs[0], "heldout_start_cache": None}, []) == config_identity(configs[0], [])


def test_a_bad_arm_fails_before_any_run(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(SPEC.read_text().replace("high_lr: [learning_rate=0.01]", "high_lr: [learning_rat=0.01]")
                    .replace("../../../configs", str(Path(__file__).parents[1] / "configs")))
    with pytest.raises(ValueError, match=r"bad.yaml: arms.high_lr: unknown config key 'learning_rat'"):
        load_spec(spec)
    spec.write_text("name: x\narms: {a: []}\nmetrics: [reward]\n")
    with pytest.raises(ValueError, match=r"metrics: 'reward' is not a metrics.jsonl key"):
        load_spec(spec)


def write_spec(tmp_path: Path, **changes) -> Path:
    """The tiny spec with `changes` (base made absolute), written under tmp_path."""
    raw = yaml.safe_load(SPEC.read_text())
    raw["base"] = str((SPEC.parent / raw["base"]).resolve())
    if "arms" in changes:  # the tiny spec's computed finding names its own arms
        raw["findings"] = [finding for finding in raw["findings"] if isinstance(finding, str)]
    raw.update(changes)
    path = tmp_path / f"{raw['name']}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


class Interrupted(Exception):
    pass


def refuse(config, resume):
    raise Interrupted(f"asked to train {config.run_dir}")


@pytest.mark.slow
def test_a_length_extension_arm_trains_its_phases_in_order_and_resumes_between_them(tmp_path):
    spec = write_spec(tmp_path, name="extend", seeds=[0], overrides=["heldout_size=0", "total_steps=3"],
                      arms={"short_then_long": {"overrides": ["max_new_tokens=8"],
                                                "then": [{"at_step": 2, "overrides": ["max_new_tokens=16"]}]}})
    calls = []

    def stop_after_first_phase(config, resume):
        calls.append((config.total_steps, config.max_new_tokens, resume))
        tiny_train([])(config, resume)
        if len(calls) == 1:
            raise Interrupted  # killed between the phases

    with pytest.raises(Interrupted):
        run_experiment(spec, tmp_path / "runs", train=stop_after_first_phase, log=lambda line: None)
    run_dir = tmp_path / "runs" / "extend" / "short_then_long" / "seed-0"
    assert run_state(run_dir, 3) == "interrupted"  # its summary says 2 steps of 3
    [outcome] = run_experiment(spec, tmp_path / "runs", train=stop_after_first_phase, log=lambda line: None)
    assert outcome.status == "resumed"
    assert calls == [(2, 8, False), (3, 16, True)]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # A random-init tiny model never stops early: each step's longest response is the limit.
    assert [(row["step"], row["response_length_max"]) for row in rows] == [(1, 8), (2, 8), (3, 16)]
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["max_new_tokens"] == 16
    assert run_state(run_dir, 3) == "finished"


def test_a_phase_may_not_change_the_batch_or_end_after_the_run(tmp_path):
    spec = write_spec(tmp_path, name="bad", arms={"a": {"then": [{"at_step": 1, "overrides": ["train_batch_size=4"]}]}})
    with pytest.raises(ValueError, match=r"arms.a: then\[0\]: train_batch_size cannot change within a run"):
        load_spec(spec)
    spec = write_spec(tmp_path, name="bad", arms={"a": {"then": [{"at_step": 2, "overrides": []}]}})
    with pytest.raises(ValueError, match=r"arms.a: then\[0\].at_step: 2 must be after 0 and before total_steps \(2\)"):
        load_spec(spec)


@pytest.mark.slow
def test_parallel_runs_go_to_worker_processes_with_progress_lines(tmp_path):
    arms = {"base_lr": [], "high_lr": ["learning_rate=0.01"], "broken": [f"problems={tmp_path / 'missing.jsonl'}"]}
    spec = write_spec(tmp_path, name="parallel", seeds=[0], overrides=["heldout_size=0"], arms=arms)
    lines = []
    outcomes = run_experiment(spec, tmp_path / "runs", log=lines.append, parallel=2)
    # A run that fails does not stop the others; it is reported, with its traceback in its log.
    assert sorted((o.arm, o.status) for o in outcomes) == [("base_lr", "started"), ("broken", "failed"),
                                                           ("high_lr", "started")]
    grid = tmp_path / "runs" / "parallel"
    assert any("broken seed 0: FAILED" in line for line in lines) and any("1 run(s) FAILED" in line for line in lines)
    assert "Traceback" in (grid / "broken" / "seed-0.train.log").read_text()
    for arm in ("base_lr", "high_lr"):
        assert run_state(grid / arm / "seed-0") == "finished"
        assert "held-out accuracy" in (grid / arm / "seed-0.train.log").read_text()  # the worker's own output
        assert any(line.startswith(f"  {arm} seed 0: step 2/2,") for line in lines), lines
    with pytest.raises(ValueError, match="custom train"):
        run_experiment(spec, tmp_path / "runs", train=tiny_train([]), parallel=2)


def test_run_time_overrides_apply_to_every_arm_before_the_arms_own(tmp_path):
    spec, folder = load_spec(SPEC, extra=("learning_rate=0.5", "max_new_tokens=12"))
    from microcoder.experiments.spec import arm_config

    assert arm_config(spec, folder, "base_lr", 0, tmp_path).learning_rate == 0.5
    assert arm_config(spec, folder, "high_lr", 0, tmp_path).learning_rate == 0.01  # the arm's own wins
    assert arm_config(spec, folder, "high_lr", 0, tmp_path).max_new_tokens == 12


def test_an_arm_may_bring_its_own_base_configs_layered_in_order(tmp_path):
    (tmp_path / "scale.yaml").write_text("max_new_tokens: 24\nlearning_rate: 0.003\n")
    configs = Path(__file__).parents[1] / "configs"
    spec = write_spec(tmp_path, name="bases", arms={
        "grpo": {"base": [str(configs / "grpo-tiny.yaml"), "scale.yaml"], "overrides": ["learning_rate=0.002"]},
        "plain": []})
    from microcoder.experiments.spec import arm_config

    loaded, folder = load_spec(spec)
    grpo, plain = (arm_config(loaded, folder, arm, 0, tmp_path) for arm in ("grpo", "plain"))
    assert (grpo.beta, grpo.eps_high, grpo.max_new_tokens, grpo.learning_rate) == (0.001, 0.2, 24, 0.002)
    assert (plain.beta, plain.eps_high, plain.max_new_tokens) == (0.0, 0.28, 16)  # the spec's base
    (tmp_path / "scale.yaml").unlink()
    with pytest.raises(FileNotFoundError, match=r"bases.yaml: arms.grpo.base: .*scale.yaml does not exist"):
        load_spec(spec)


def fake_run(run_dir: Path, batch: int, rows: list[dict], **summary) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (run_dir / "config.yaml").write_text(f"train_batch_size: {batch}\ngroup_size: 4\n")
    (run_dir / "summary.json").write_text(json.dumps({"steps": len(rows), **summary}))


def test_the_report_draws_relative_data_and_the_time_split_and_publishes_a_redrawable_grid(tmp_path):
    grid = tmp_path / "runs" / "batch"
    grid.mkdir(parents=True)
    (grid / "spec.yaml").write_text(yaml.safe_dump({
        "name": "batch", "arms": {"small": [], "large": []}, "seeds": [0, 1], "x_axis": "relative_data",
        "metrics": ["reward_mean", "time_split"],
        "findings": ["The middle wins.", {"claim": "Large ends higher", "metric": "reward_mean", "arms": ["large", "small"],
                                          "direction": "greater"}]}))
    for arm, batch in (("small", 2), ("large", 4)):
        for seed in (0, 1):
            fake_run(grid / arm / f"seed-{seed}", batch, [
                {"step": step, "reward_mean": 0.1 * step + seed, "seconds_rollout": 2.0 * batch,
                 "seconds_reward": 1.0, "seconds_update": 3.0 + seed,
                 # large judged behind its sampling (reward_overlap); small predates the key
                 **({"seconds_reward_visible": 0.25} if arm == "large" else {})} for step in (1, 2, 3)],
                 seconds=60.0 * (batch + seed), **({"resumed": True} if (arm, seed) == ("large", 1) else {}))
    docs = tmp_path / "docs"
    [(figure, report)] = report_all(tmp_path / "runs", docs=docs)
    text = report.read_text()
    # The arms differ only in their timing: the finding comparing them is not a verdict on them.
    idle = "**mechanism idle** (large and small are equal in every non-timing value)"
    assert idle in text and idle in (docs / "README.md").read_text()
    assert "| [batch](batch.md) | Large ends higher | reward_mean: large - small at last |" in (
        docs / "README.md").read_text()
    # large: seeds 0.3 and 1.3 at step 3 -> mean 0.8, SE 0.5; last three points 0.2 and 1.2 -> 0.7 +- 0.5;
    # each seed moved 0.3 - 0.1 = 0.2 from step 1
    assert "| large | reward_mean | 0.600 +- 0.500 | 0.800 +- 0.500 | 0.700 +- 0.500 | +0.200 +- 0.000 | 3 | 2 |" \
        in text
    # wall minutes: small 2 and 3, large 4 and 5 (one of them resumed)
    assert "| small | 0.0 +- 0.0 | 0.0 +- 0.0 | 0 +- 0 | 0 +- 0 | 2.0-3.0 | 2 |" in text
    assert "| large | 0.0 +- 0.0 | 0.0 +- 0.0 | 0 +- 0 | 0 +- 0 | 4.0-5.0 | 2 |" in text
    assert "Wall minutes in all: 14 in this grid's own runs; 1 resumed run(s) (large) count from the resume." in text
    assert "| large | seconds_rollout (all steps) | | | 8.0 +- 0.0 s | | | 2 |" in text
    assert "| small | seconds_update (all steps) | | | 3.5 +- 0.5 s | | | 2 |" in text
    assert "| large | seconds_reward_visible (all steps) | | | 0.2 +- 0.0 s | | | 2 |" in text
    # runs from before reward_overlap: the reward's visible time is all of it
    assert "| small | seconds_reward_visible (all steps) | | | 1.0 +- 0.0 s | | | 2 |" in text
    from matplotlib.image import imread
    assert (docs / "batch.png").is_file() and imread(docs / "batch.png").shape[0] > 300
    published = docs / "data" / "batch"
    assert sorted(path.name for path in (published / "large" / "seed-1").iterdir()) == [
        "config.yaml", "metrics.jsonl", "summary.json"]
    page = docs / "batch.md"
    written = page.read_text().replace("No reading written yet", "Reproduced: the hand-written verdict")
    page.write_text(written)
    [(_, redrawn)] = report_all(published, docs=docs)  # the published folder is a grid of its own
    assert redrawn.read_text() == text
    after = page.read_text()
    assert "Reproduced: the hand-written verdict" in after and after.count(NUMBERS_BEGIN) == 1
    assert after.count(VERDICTS_BEGIN) == 1 and idle in after
    assert "| large | reward_mean | 0.600 +- 0.500 |" in after


def test_publishing_counts_the_verdicts_in_the_records_summary_and_writes_nothing_outside_the_record(tmp_path):
    grid = tmp_path / "runs" / "lr"
    grid.mkdir(parents=True)
    (grid / "spec.yaml").write_text(yaml.safe_dump({
        "name": "lr", "arms": {"low": [], "high": []}, "seeds": [0, 1, 2], "metrics": ["reward_mean"],
        "findings": [{"claim": "High ends higher", "metric": "reward_mean", "arms": ["high", "low"],
                      "direction": "greater"},
                     {"claim": "Low ends higher", "metric": "reward_mean", "arms": ["low", "high"],
                      "direction": "greater"}]}))
    for arm, base in (("low", 0.1), ("high", 0.5)):
        for seed in (0, 1, 2):
            # high - low per seed: 0.4, 0.5, 0.6 -> mean 0.5, SE 0.058: one reproduced, one contradicted
            fake_run(grid / arm / f"seed-{seed}", 2, [{"step": 1, "reward_mean": base + (0.1 * seed if arm == "high" else 0)}])
    # A repository README two folders above the record, with the block the report once rewrote there.
    (tmp_path / ".git").mkdir()
    front = tmp_path / "README.md"
    written = ("# x\n<!-- COUNTS: written by `microcoder experiment report --record results/experiments`; edits here "
               "are lost -->\nstale\n<!-- /COUNTS -->\nkept\n")
    front.write_text(written)
    docs = tmp_path / "results" / "experiments"
    report_all(tmp_path / "runs", docs=docs)
    # t = 0.5 / 0.0577 = 8.66 on 2 df: p = (1 - 8.66 / sqrt(77)) / 2 = 0.0065 each way; Holm (m = 2) doubles
    # each direction's smaller p: 0.013, both kept
    counts = ("Of 2 findings, 2 scored by a one-sided t test at 5%: 1 reproduced, 1 contradicted; after Holm's "
              "correction across the 2: 1 reproduced, 1 contradicted.")
    assert front.read_text() == written
    assert f"{SUMMARY_BEGIN}\n{counts}\n\n" in (docs / "README.md").read_text()
    assert sorted(path.name for path in tmp_path.iterdir()) == [".git", "README.md", "results", "runs"]
    # The page names its grid from the repository's root, not as the path was given (absolute here).
    assert "redraw: `microcoder experiment report results/experiments/data/lr`." in (docs / "lr.md").read_text()


def per_problem_run(run_dir: Path, start: list[int], end: list[int]) -> None:
    """A finished run with its per-problem held-out files (training.run's layout)."""
    # Problems t0-0, t0-1, t1-0, t1-1: two templates of two instances each.
    scores = lambda values: {"heldout_accuracy": {f"t{index // 2}-{index % 2}": float(v)
                                                  for index, v in enumerate(values)}}
    fake_run(run_dir, 4, [{"step": 0, "heldout_accuracy": sum(start) / len(start)},
                          {"step": 2, "heldout_accuracy": sum(end) / len(end)}])
    (run_dir / "heldout_start.json").write_text(json.dumps({"accuracies": {}, "scores": scores(start)}))
    (run_dir / "heldout_end.json").write_text(json.dumps({"step": 2, "accuracies": {}, "scores": scores(end)}))


def test_a_heldout_finding_is_paired_by_problem_and_seed_where_runs_kept_their_per_problem_files(tmp_path):
    grid = tmp_path / "runs" / "pair"
    grid.mkdir(parents=True)
    (grid / "spec.yaml").write_text(yaml.safe_dump({
        "name": "pair", "arms": {"a": [], "b": []}, "seeds": [0, 1], "metrics": ["heldout_accuracy"],
        "findings": [{"claim": "a ends higher", "metric": "heldout_accuracy", "arms": ["a", "b"],
                      "direction": "greater"}]}))
    same = [0, 1, 0, 1]
    per_problem_run(grid / "a" / "seed-0", same, [1, 1, 1, 0])
    per_problem_run(grid / "b" / "seed-0", same, [1, 0, 1, 0])  # d = 0, 1, 0, 0: mean 0.25, var 0.25 / 4
    per_problem_run(grid / "a" / "seed-1", same, [1, 1, 0, 1])
    per_problem_run(grid / "b" / "seed-1", same, [0, 1, 0, 0])  # d = 1, 0, 0, 1: mean 0.5, var 1/3 / 4
    # By seed: d = 0.25, 0.5, SE 0.125, t = 3 on 1 df: p = 1/2 - atan(3)/pi = 0.102, inconclusive.
    # By problem, problems independent: mean 0.375, SE = sqrt(0.0625 + 0.0833) / 2 = 0.191, t = 1.964 on
    # 3 + 3 = 6 df, above t_{0.95,6} = 1.943 (t tables): p 0.049.
    # By template: residuals from each seed's mean, seed 0: -0.25, 0.75, -0.25, -0.25; seed 1: 0.5, -0.5,
    # -0.5, 0.5; T_t0 = (-0.25 + 0.75 + 0.5 - 0.5) / 8 = 0.0625, T_t1 = -0.0625; SE^2 = 2/1 * 2 * 0.0625^2,
    # SE 0.125, t = 3 on 1 df: p 0.102. No verdict word: these are statements about the trained models.
    docs = tmp_path / "docs"
    [(_, report)] = report_all(grid, docs=docs)
    expected = ("| +0.375: by problem SE 0.191 (6 df), p 0.049; by template SE 0.125 (1 df), p 0.102 "
                "(2 seeds, 8 problem-results, 2 templates) |")
    assert expected in report.read_text() and expected in (docs / "pair.md").read_text()
    assert "1 of the 1 held-out findings have per-problem files" in (docs / "README.md").read_text()
    assert "not a verdict" in (docs / "README.md").read_text() and "not a verdict" in (docs / "pair.md").read_text()
    published = docs / "data" / "pair" / "a" / "seed-1"
    assert (published / "heldout_start.json").is_file() and (published / "heldout_end.json").is_file()
    [(_, redrawn)] = report_all(docs / "data" / "pair")  # the published files alone carry the pairing
    assert expected in redrawn.read_text()
    (grid / "b" / "seed-1" / "heldout_end.json").unlink()  # a run that kept none: that seed is left out
    [(_, fewer)] = report_all(grid, docs=docs)
    assert "(1 seeds, 4 problem-results, 2 templates)" in fewer.read_text()
    # A grid part-way through its rerun: not counted as paired for every seed.
    assert "0 of the 1 held-out findings have per-problem files for every seed, 1 for some seeds" in (
        docs / "README.md").read_text()
    (grid / "b" / "seed-0" / "heldout_end.json").unlink()  # a's runs have theirs, no seed of b does
    [(_, none)] = report_all(grid)
    assert "| per-problem files for some runs, but no seed has them for every arm compared |" in none.read_text()


def test_a_record_with_no_grid_says_so_rather_than_keep_a_stale_summary(tmp_path):
    from microcoder.experiments.publish import SUMMARY_END, publish_summary

    readme = tmp_path / "next" / "README.md"
    readme.parent.mkdir()
    readme.write_text(f"# In progress\n\nkept\n\n{SUMMARY_BEGIN}\n| a table of a grid since moved |\n{SUMMARY_END}\n")
    publish_summary(readme.parent)
    assert readme.read_text() == (f"# In progress\n\nkept\n\n{SUMMARY_BEGIN}\nNo grid is published under data/.\n"
                                  f"{SUMMARY_END}\n")


def test_the_summary_names_the_published_runs_whose_step_0_evaluation_is_not_published(tmp_path):
    from microcoder.experiments.publish import unpublished_start_caches
    from microcoder.training.run import load_problem_split, start_key

    data = tmp_path / "docs" / "data"
    grid = data / "limits"
    grid.mkdir(parents=True)
    (grid / "spec.yaml").write_text(yaml.safe_dump({"name": "limits", "arms": {"short": [], "long": []}, "seeds": [0],
                                                    "metrics": ["heldout_accuracy"]}))
    configs = {}
    for arm, tokens in (("short", 64), ("long", 128)):
        configs[arm] = load_config(None, [f"max_new_tokens={tokens}", "heldout_size=4",
                                          f"heldout_start_cache={tmp_path / 'elsewhere'}"])
        fake_run(grid / arm / "seed-0", 4, [{"step": 0, "heldout_accuracy": 0.5}, {"step": 1, "heldout_accuracy": 0.5}])
        (grid / arm / "seed-0" / "config.yaml").write_text(yaml.safe_dump(configs[arm].model_dump(mode="json")))
    cache = data / "heldout-start"
    cache.mkdir()
    key = lambda arm: start_key(configs[arm], load_problem_split(configs[arm])[1])
    assert key("short") != key("long")  # two limits: two starting evaluations
    (cache / f"heldout-start-{key('short')}.json").write_text('{"accuracies": {}, "scores": {}}')
    assert unpublished_start_caches(data) == {"limits/long/seed-0": key("long")}
    report_all(grid, docs=tmp_path / "docs")
    assert "(1, read by 1 runs; a run of the same config and seed that trains evaluates its starting model again" in (
        tmp_path / "docs" / "README.md").read_text()
    (cache / f"heldout-start-{key('long')}.json").write_text('{"accuracies": {}, "scores": {}}')
    report_all(grid, docs=tmp_path / "docs")
    assert "so `run --restore` of the record evaluates nothing" in (tmp_path / "docs" / "README.md").read_text()


def test_a_grid_in_progress_is_reported_from_each_arms_finished_runs(tmp_path):
    grid = tmp_path / "grid"
    grid.mkdir()
    (grid / "spec.yaml").write_text(yaml.safe_dump({
        "name": "partial", "arms": {"a": [], "b": []}, "seeds": [0, 1, 2], "metrics": ["reward_mean"],
        "findings": [{"claim": "a ends higher", "metric": "reward_mean", "arms": ["a", "b"], "direction": "greater"}]}))
    rows = lambda seed, steps: [{"step": step, "reward_mean": 0.1 * step + seed} for step in steps]
    fake_run(grid / "a" / "seed-0", 4, rows(0, (1, 2, 3)))
    fake_run(grid / "a" / "seed-1", 4, rows(1, (1, 2, 3)))
    judged = [json.loads(line) for line in (grid / "a" / "seed-1" / "metrics.jsonl").read_text().splitlines()]
    judged[1]["fraction_unscorable"], judged[2]["fraction_unscorable"] = 0.25, 0.5  # the sandbox failed mid-run
    judged[2]["heldout_accuracy"] = float("nan")  # every held-out sample a judge error: nothing measured
    (grid / "a" / "seed-1" / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in judged))
    fake_run(grid / "a" / "seed-2", 4, rows(2, (1,)))  # still running: one step logged
    (grid / "a" / "seed-2" / "summary.json").unlink()
    fake_run(grid / "b" / "seed-0", 4, rows(0, (1, 2)))  # no finished run yet: reported as it is
    (grid / "b" / "seed-0" / "summary.json").unlink()
    (grid / "b" / "seed-1").mkdir()
    (grid / "b" / "seed-1" / "metrics.jsonl").write_text("")  # died at start
    [(_, report)] = report_all(grid)
    text = report.read_text()
    # a: seeds 0 and 1 only; step 3: 0.3 and 1.3 -> 0.8 +- 0.5 (with seed 2, only step 1 would be shown)
    assert "| a | reward_mean | 0.600 +- 0.500 | 0.800 +- 0.500 | 0.700 +- 0.500 | +0.200 +- 0.000 | 3 | 2 |" in text
    # b: the one run with rows; the empty one has no step and is left out rather than emptying the curve
    assert "| b | reward_mean | 0.100 +- 0.000 | 0.200 +- 0.000 | 0.150 +- 0.000 | +0.100 +- 0.000 | 2 | 1 |" in text
    assert "Runs not finished: a/seed-2, b/seed-0, b/seed-1, b/seed-2 (an arm with a finished run" in text
    # The verdict reads finished runs alone: b's seed 0 has no last step yet, so nothing is paired
    # (were it read, seed 0 would pair a's step 3 with b's step 2).
    assert "| 1 | a ends higher | reward_mean: a - b at last (greater in the paper) | - | - | - | - | - " \
           "| **inconclusive** (no seed measured both sides) | - |" in text
    assert ("**Runs with judge errors: a/seed-1 (steps 2-3, up to 50%), a/seed-1 (held-out all judge errors at "
            "step 3).**") in text
    # publishing mirrors the grid: a run deleted from it (to be redone) leaves the docs too
    docs = tmp_path / "docs"
    report_all(grid, docs=docs)
    assert (docs / "data" / "partial" / "a" / "seed-1").is_dir()
    import shutil
    shutil.rmtree(grid / "a" / "seed-1")
    report_all(grid, docs=docs)
    assert not (docs / "data" / "partial" / "a" / "seed-1").exists()
    assert (docs / "data" / "partial" / "a" / "seed-0").is_dir()


def test_an_arm_whose_only_run_has_evaluated_step_0_is_reported(tmp_path):
    grid = tmp_path / "grid"
    grid.mkdir()
    (grid / "spec.yaml").write_text(yaml.safe_dump({
        "name": "early", "arms": {"a": [], "b": []}, "seeds": [0], "metrics": ["heldout_accuracy"]}))
    fake_run(grid / "a" / "seed-0", 4, [{"step": 0, "heldout_accuracy": 0.5}, {"step": 2, "heldout_accuracy": 0.75}])
    fake_run(grid / "b" / "seed-0", 4, [{"step": 0, "heldout_accuracy": 0.5}])  # training: held-out at step 0 only
    (grid / "b" / "seed-0" / "summary.json").unlink()
    [(_, report)] = report_all(grid)
    text = report.read_text()
    assert "| a | heldout_accuracy | 0.500 +- 0.000 | 0.750 +- 0.000 | 0.750 +- 0.000 | +0.250 +- 0.000 | 2 | 1 |" in text
    assert "| b | heldout_accuracy | 0.500 +- 0.000 | 0.500 +- 0.000 | - | - | 0 | 1 |" in text


def test_spec_vars_are_substituted_into_overrides_and_steps_and_replaced_at_run_time(tmp_path):
    from microcoder.experiments.spec import arm_phases, evaluate

    assert evaluate("L*3/2", {"L": 64}) == 96 and isinstance(evaluate("L/4", {"L": 64}), int)
    assert evaluate("(S - 2) // 3", {"S": 8}) == 2 and evaluate("L/3", {"L": 64}) == pytest.approx(21.333, abs=1e-3)
    for bad, message in (("L**2", "only numbers"), ("__import__('os')", "only numbers"), ("M", "unknown variable 'M'"),
                         ("L/0", "divides by zero"), ("L +", "not an arithmetic expression")):
        with pytest.raises(ValueError, match=message):
            evaluate(bad, {"L": 64})
    spec = write_spec(tmp_path, name="vars", vars={"L": 16, "S": 4}, overrides=["total_steps=${S}"],
                      arms={"extend": {"overrides": ["max_new_tokens=${L/2}"],
                                       "then": [{"at_step": "${S/2}", "overrides": ["max_new_tokens=${L}"]}]}})
    loaded, folder = load_spec(spec)
    phases = arm_phases(loaded, folder, "extend", 0, tmp_path)
    assert [(c.total_steps, c.max_new_tokens) for c in phases] == [(2, 8), (4, 16)]
    loaded, folder = load_spec(spec, variables={"L": 32, "S": 10})
    phases = arm_phases(loaded, folder, "extend", 0, tmp_path)
    assert [(c.total_steps, c.max_new_tokens) for c in phases] == [(5, 16), (10, 32)]
    with pytest.raises(ValueError, match=r"vars.yaml: vars: --var X: the spec has no such variable \(it has: L, S\)"):
        load_spec(spec, variables={"X": 1})
    with pytest.raises(ValueError, match=r"arms.extend.then\[0\].at_step: '\$\{S/2\}' is 2.5, not a whole step"):
        load_spec(spec, variables={"S": 5})


SPECS = sorted(path for path in (Path(__file__).parents[1] / "configs" / "experiments").glob("*.yaml")
               if path.name != "cpu-scale.yaml")
# Long runs: one seed each, a figure with quoted findings only (no verdict), outside the protocol.
LONG_SPECS = sorted((Path(__file__).parents[1] / "configs" / "experiments" / "long").glob("*.yaml"))


def test_every_shipped_spec_loads_and_its_arms_differ(tmp_path):
    from microcoder.experiments.spec import arm_phases

    assert {path.stem for path in SPECS} == {"main", "evaluator_decimal", "temperature", "data",
                                              "context_length", "truncation_mask", "batch_size", "kl_clip"}
    for path in SPECS:
        spec, folder = load_spec(path)
        assert spec.findings and len(spec.arms) >= 2 and len(spec.seeds) >= 2, path
        plans = [[config.model_dump() for config in arm_phases(spec, folder, arm, 0, tmp_path)] for arm in spec.arms]
        assert all(a != b for i, a in enumerate(plans) for b in plans[i + 1:]), path
    spec, _ = load_spec(SPECS[[p.stem for p in SPECS].index("main")])
    assert len(spec.seeds) >= 3


def test_the_main_specs_arms_are_the_shipped_presets_at_cpu_scale(tmp_path):
    from microcoder.experiments.spec import arm_config
    from microcoder.training.config import load_config

    configs = Path(__file__).parents[1] / "configs"
    spec, folder = load_spec(configs / "experiments" / "main.yaml", variables={"L": 128})
    for arm in ("grpo", "dapo", "microcoder"):
        preset = yaml.safe_load((configs / f"{arm}.yaml").read_text())
        config = arm_config(spec, folder, arm, 0, tmp_path).model_dump()
        differing = {key for key, value in load_config(configs / f"{arm}.yaml").model_dump().items()
                     if key in preset and config[key] != value}
        # Every key the preset sets is kept (DAPO's L_cache is L/4: 32 of 128 as in the preset).
        assert differing == set(), arm
        assert config["dynamic_sampling_max_rounds"] == (2 if arm == "dapo" else 4)  # 2 refill rounds on CPU
        assert config["max_new_tokens"] == 128 and config["heldout_long_factor"] == 2


def test_a_run_being_trained_is_neither_removed_nor_trained_again_by_a_second_runner(tmp_path):
    """A grid restarted while an earlier runner's worker still trained a run removed that
    run's folder (no checkpoint yet: "fresh") and trained it again beside the first."""
    from microcoder.experiments.runner import RunInUse, run_phases

    run_dir = tmp_path / "arm" / "seed-0"
    seen = []

    def first(config, resume):  # while this one trains, a second runner reaches the run
        run_dir.mkdir(parents=True)
        (run_dir / "metrics.jsonl").write_text('{"step": 0}\n')
        with pytest.raises(RunInUse, match=re.escape(f"{run_dir} is being trained by pid {os.getpid()}")):
            run_phases([config], run_dir, lambda *_: seen.append("second trained"))
        seen.append((run_dir / "metrics.jsonl").read_text())

    config = SimpleNamespace(total_steps=2, updates_per_step=1)
    assert run_phases([config], run_dir, first) == "started"
    assert seen == ['{"step": 0}\n']  # the second neither trained nor removed the folder
    assert run_phases([config], run_dir, lambda *_: seen.append("later")) == "started"  # the lock is released
    assert seen[-1] == "later"


def finish_as_planned(spec_path: Path, root: Path) -> None:
    """Every run of the spec under `root` finished as the runner would plan it (its config.yaml
    the planned config), with made-up metrics: what a finished grid leaves, without training."""
    from microcoder.experiments.spec import arm_phases

    spec, folder = load_spec(spec_path)
    start_cache = root / "heldout-start" if spec.share_heldout_start else None
    grid = root / spec.name
    grid.mkdir(parents=True)
    (grid / "spec.yaml").write_text(yaml.safe_dump(spec.model_dump(), sort_keys=False))
    for seed in spec.seeds:
        for index, arm in enumerate(spec.arms):
            run_dir = grid / arm / f"seed-{seed}"
            config = arm_phases(spec, folder, arm, seed, run_dir, start_cache)[-1]
            run_dir.mkdir(parents=True)
            (run_dir / "config.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json")))
            rows = [{"step": step, "reward_mean": 0.1 * step + index, "response_length_mean": 10.0 + seed,
                     "ratio_deviation": 0.01 * (step + index + seed)} for step in range(1, config.total_steps + 1)]
            (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
            (run_dir / "summary.json").write_text(json.dumps({"steps": config.total_steps}))


def test_a_fresh_root_restores_a_published_grid_and_its_controls_twins(tmp_path):
    """A grid spanning sittings on machines whose runs folder does not survive: the finished
    runs come back from the published data (the report's copy), not from training again."""
    finish_as_planned(SPEC, tmp_path / "first")
    docs = tmp_path / "docs"
    [(_, page)] = report_all(tmp_path / "first", docs=docs)
    published = docs / "data"

    fresh = tmp_path / "fresh"
    outcomes = run_experiment(SPEC, fresh, train=refuse, log=lambda line: None, restore_from=(published,))
    assert [o.status for o in outcomes] == ["restored"] * 4
    restored = fresh / "tiny" / "high_lr" / "seed-1"
    assert yaml.safe_load((restored / "restored.yaml").read_text()) == {
        "from": str((published / "tiny" / "high_lr" / "seed-1").resolve())}
    assert (restored / "metrics.jsonl").read_text() == (
        tmp_path / "first" / "tiny" / "high_lr" / "seed-1" / "metrics.jsonl").read_text()
    assert [o.status for o in run_experiment(SPEC, fresh, train=refuse, log=lambda line: None)] == ["skipped"] * 4
    [(_, again)] = report_all(fresh, docs=tmp_path / "again")
    assert again.read_text() == page.read_text()

    # Another spec's control with base_lr's config: the published twin is restored at its own
    # place and shared, as it would be had it finished under this root.
    twin_spec = write_spec(tmp_path, name="tiny_twin", findings=[], arms={"control": []})
    elsewhere = tmp_path / "elsewhere"
    (tmp_path / "nothing").mkdir()
    outcomes = run_experiment(twin_spec, elsewhere, train=refuse, log=lambda line: None,
                              restore_from=(tmp_path / "nothing", published))  # folders tried in order
    assert [o.status for o in outcomes] == ["shared", "shared"]
    assert yaml.safe_load((elsewhere / "tiny_twin" / "control" / "seed-0" / "shared.yaml").read_text()) == {
        "run": "tiny/base_lr/seed-0"}
    assert run_state(elsewhere / "tiny" / "base_lr" / "seed-0") == "finished"
    assert not (elsewhere / "tiny" / "high_lr").exists()

    # A mistyped folder fails before anything is placed, rather than restoring nothing and
    # training every run again.
    with pytest.raises(FileNotFoundError, match="no-such-folder"):
        run_experiment(SPEC, tmp_path / "typo", train=refuse, log=lambda line: None,
                       restore_from=(tmp_path / "no-such-folder",))
    assert not (tmp_path / "typo").exists()

    # A published run of another config is not restored: that run trains (here: is refused).
    changed = write_spec(tmp_path, name="tiny", overrides=["heldout_size=0", "learning_rate=0.002"])
    with pytest.raises(Interrupted, match="base_lr/seed-0"):
        run_experiment(changed, tmp_path / "third", train=refuse, log=lambda line: None, restore_from=(published,))


def test_require_per_problem_restores_the_runs_that_kept_their_files_and_trains_the_others(tmp_path):
    """A grid published before runs kept per-problem held-out files, rerun over sittings: a
    run (or a twin) without them trains again, one with them comes back from the record."""
    finish_as_planned(SPEC, tmp_path / "first")
    for run in (tmp_path / "first" / "tiny" / "base_lr" / "seed-1", tmp_path / "first" / "tiny" / "high_lr" / "seed-0"):
        for name in ("heldout_start.json", "heldout_end.json"):
            (run / name).write_text('{"scores": {}}')
    report_all(tmp_path / "first", docs=tmp_path / "docs")
    published = tmp_path / "docs" / "data"

    trained = []

    def record(config, resume):  # trains nothing: which runs were asked for is the point
        trained.append(Path(config.run_dir).relative_to(Path(config.run_dir).parents[2]).as_posix())

    outcomes = run_experiment(SPEC, tmp_path / "fresh", train=record, log=lambda line: None,
                              restore_from=(published,), restore_per_problem_only=True)
    assert [(o.arm, o.seed, o.status) for o in outcomes] == [
        ("base_lr", 0, "started"), ("high_lr", 0, "restored"), ("base_lr", 1, "restored"), ("high_lr", 1, "started")]
    assert trained == ["tiny/base_lr/seed-0", "tiny/high_lr/seed-1"]
    for run in ("base_lr/seed-1", "high_lr/seed-0"):
        assert (tmp_path / "fresh" / "tiny" / run / "heldout_end.json").is_file()

    # Another spec's control has base_lr's config: seed 1's twin kept its files and is
    # shared; seed 0's did not, so that control trains instead of sharing it.
    twin_spec = write_spec(tmp_path, name="tiny_twin", findings=[], arms={"control": []})
    trained.clear()
    outcomes = run_experiment(twin_spec, tmp_path / "twin", train=record, log=lambda line: None,
                              restore_from=(published,), restore_per_problem_only=True)
    assert [o.status for o in outcomes] == ["started", "shared"]
    assert trained == ["tiny_twin/control/seed-0"]
    # Nor is a finished run under ROOT without them (the first root's base_lr/seed-0).
    trained.clear()
    outcomes = run_experiment(twin_spec, tmp_path / "first", train=record, log=lambda line: None,
                              restore_from=(published,), restore_per_problem_only=True)
    assert [o.status for o in outcomes] == ["started", "shared"] and trained == ["tiny_twin/control/seed-0"]

    # The flag chooses among restored runs, so it needs a folder to restore from.
    with pytest.raises(ValueError, match="--restore"):
        run_experiment(SPEC, tmp_path / "other", train=refuse, log=lambda line: None, restore_per_problem_only=True)


def test_publishing_a_grid_redraws_the_published_grids_that_share_its_runs(tmp_path):
    """A control shared by two grids lives in one: republishing that grid (a rerun) changes
    the other's numbers too, so its page is redrawn from the record with it."""
    root, docs = tmp_path / "runs", tmp_path / "docs"
    finish_as_planned(SPEC, root)
    twin_spec = write_spec(tmp_path, name="tiny_twin", findings=[], arms={"control": []})
    assert [o.status for o in run_experiment(twin_spec, root, train=refuse, log=lambda line: None)] == ["shared"] * 2
    report_all(root, docs=docs)
    assert "| control | response_length_mean | 10.500 +- 0.500 |" in (docs / "tiny_twin.md").read_text()
    for seed in (0, 1):  # the rerun of the control's runs logs other lengths
        metrics = root / "tiny" / "base_lr" / f"seed-{seed}" / "metrics.jsonl"
        rows = [{**json.loads(line), "response_length_mean": 10.0} for line in metrics.read_text().splitlines()]
        metrics.write_text("".join(json.dumps(row) + "\n" for row in rows))
    report_all(root / "tiny", docs=docs)  # the grid that holds the control, alone
    twin_page = (docs / "tiny_twin.md").read_text()
    assert "| control | response_length_mean | 10.000 +- 0.000 |" in twin_page
    [(_, regenerated)] = report_all(docs / "data" / "tiny_twin")
    assert regenerated.read_text().split("## Numbers\n", 1)[1].strip() in twin_page

    # The control moved: in the record, the run a shared record names is itself one (its grid
    # was published from a root where it shared the other way). Publishing names the pair.
    control = docs / "data" / "tiny" / "base_lr" / "seed-0"
    shutil.rmtree(control)
    control.mkdir()
    (control / "shared.yaml").write_text(yaml.safe_dump({"run": "tiny_twin/control/seed-0"}))
    with pytest.raises(ValueError, match=r"tiny_twin/control/seed-0 -> tiny/base_lr/seed-0 \(a shared record itself\)"):
        report_all(root / "tiny_twin", docs=docs)


def test_two_runners_restoring_the_same_twin_at_once_both_read_it_whole(tmp_path, monkeypatch):
    """A twin lies at another grid's place, outside the lock of the run restoring it: a second
    runner's copy may land there first. Neither fails, and the place holds one whole copy."""
    from microcoder.experiments import sharing

    finish_as_planned(SPEC, tmp_path / "first")
    report_all(tmp_path / "first", docs=tmp_path / "docs")
    published = tmp_path / "docs" / "data"
    twin_spec = write_spec(tmp_path, name="tiny_twin", findings=[], arms={"control": []})
    root = tmp_path / "root"
    copy = shutil.copytree

    def copy_while_another_runner_restores(source, target, **kwargs):
        place = root / Path(source).relative_to(published)
        if not place.exists():  # the other runner's rename lands while this copy is under way
            copy(source, place)
        return copy(source, target, **kwargs)

    monkeypatch.setattr(sharing.shutil, "copytree", copy_while_another_runner_restores)
    outcomes = run_experiment(twin_spec, root, train=refuse, log=lambda line: None, restore_from=(published,))
    assert [o.status for o in outcomes] == ["shared", "shared"]
    place = root / "tiny" / "base_lr" / "seed-0"
    assert sorted(path.name for path in place.iterdir()) == ["config.yaml", "metrics.jsonl", "summary.json"]
    assert not list(place.parent.glob(".*"))  # this runner's own copy was removed


def test_the_step_0_evaluations_a_grid_read_are_published_and_restored(tmp_path):
    first = tmp_path / "first"
    spec = write_spec(tmp_path, name="tiny_start", share_heldout_start=True)
    finish_as_planned(spec, first)
    cache = tmp_path / "cache"  # where the runs say they read step 0 from (any folder)
    cache.mkdir()
    (cache / "heldout-start-k1.json").write_text('{"accuracies": {"heldout_accuracy": 0.5}, "scores": {}}')
    for config_path in first.glob("tiny_start/*/seed-*/config.yaml"):
        config = yaml.safe_load(config_path.read_text())
        config_path.write_text(yaml.safe_dump({**config, "heldout_start_cache": str(cache)}))
    report_all(first, docs=tmp_path / "docs")
    published = tmp_path / "docs" / "data"
    assert (published / "heldout-start" / "heldout-start-k1.json").read_text() == (
        cache / "heldout-start-k1.json").read_text()
    fresh = tmp_path / "fresh"
    outcomes = run_experiment(spec, fresh, train=refuse, log=lambda line: None, restore_from=(published,))
    assert [o.status for o in outcomes] == ["restored"] * 4  # the cache's place is not part of a run's identity
    assert (fresh / "heldout-start" / "heldout-start-k1.json").read_text() == (
        cache / "heldout-start-k1.json").read_text()


def test_a_finished_run_of_another_config_stops_the_grid_before_any_run(tmp_path):
    """An edited spec over a finished grid: skipping the old runs would report them as the new
    experiment; the runner names them and the keys that differ, and trains nothing."""
    finish_as_planned(SPEC, tmp_path)
    changed = write_spec(tmp_path, name="tiny", overrides=["heldout_size=0", "learning_rate=0.002"],
                         arms={"base_lr": [], "high_lr": ["learning_rate=0.01", "beta=0.01"]})
    with pytest.raises(ValueError) as error:
        run_experiment(changed, tmp_path, train=refuse, log=lambda line: None)
    message = str(error.value)
    assert f"{tmp_path / 'tiny' / 'base_lr' / 'seed-0'} (learning_rate)" in message
    assert f"{tmp_path / 'tiny' / 'high_lr' / 'seed-1'} (beta)" in message


@pytest.mark.slow
def test_a_killed_runners_workers_end_with_it(tmp_path):
    """Parallel runs live in worker processes; SIGKILL the runner and they must not train on."""
    script = tmp_path / "runner.py"
    script.write_text(textwrap.dedent("""
        import os, sys, time
        from concurrent.futures import ProcessPoolExecutor
        from multiprocessing import get_context
        from pathlib import Path
        from microcoder.experiments.runner import end_with_parent
        if __name__ == "__main__":
            pool = ProcessPoolExecutor(1, mp_context=get_context("spawn"), initializer=end_with_parent,
                                       initargs=(os.getpid(),))
            Path(sys.argv[1]).write_text(str(pool.submit(os.getpid).result()))
            pool.submit(time.sleep, 120)
            time.sleep(1)
            os.kill(os.getpid(), 9)
    """))
    pid_file = tmp_path / "worker.pid"
    # No pipes: a worker that outlived the runner would hold them open and stall this call.
    subprocess.run([sys.executable, str(script), str(pid_file)], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=120, cwd=Path(__file__).parents[1])
    worker = int(pid_file.read_text())
    for _ in range(100):
        if not Path(f"/proc/{worker}").exists() or "zombie" in Path(f"/proc/{worker}/status").read_text():
            break
        time.sleep(0.1)
    else:
        os.kill(worker, 9)
        pytest.fail("the worker outlived its runner")


DOCS = Path(__file__).parents[1] / "results" / "experiments"


def test_no_two_committed_runs_share_a_resolved_config_and_seed():
    """A control that several specs use is run once; the other specs hold a shared record
    (config.yaml and shared.yaml) that names the run and has the same resolved config."""
    from microcoder.experiments.layout import load_grid_spec, shared_target
    from microcoder.experiments.sharing import run_identity

    owners: dict[str, Path] = {}
    records = 0
    for config in sorted((DOCS / "data").glob("*/*/seed-*/config.yaml")):
        run = config.parent
        identity = run_identity(run, load_grid_spec(run.parents[1]))
        assert identity is not None, run
        target = shared_target(run)
        if target is None:
            assert identity not in owners, f"{run} has the resolved config and seed of {owners[identity]}"
            owners[identity] = run
            continue
        records += 1
        assert not (run / "metrics.jsonl").exists(), f"{run}: a shared record holds no metrics of its own"
        assert (target / "metrics.jsonl").is_file() and shared_target(target) is None, run
        assert run_identity(target, load_grid_spec(target.parents[1])) == identity, f"{run} and {target} differ"
    assert owners and records >= 1


def test_the_published_specs_are_the_record_the_pages_report():
    """The pages' verdicts come from the published specs (results/experiments/data/*/spec.yaml),
    the record of the runs committed beside them. Every shipped spec is what its published
    grid ran (arms, findings, vars), or what its grid in progress under next/ runs: a spec
    edited after its runs ships with its rerun under way, never alone, or the pages would
    report another experiment; a long-run spec is held to this once its grid is published.
    Every committed run is an arm of its grid's spec, and every published grid but a long
    run's computes a verdict."""
    from microcoder.experiments.layout import load_grid_spec

    published = sorted((DOCS / "data").glob("*/spec.yaml"))
    long_names = {load_spec(path)[0].name for path in LONG_SPECS}
    for path in [*SPECS, *LONG_SPECS]:
        spec, _ = load_spec(path)
        in_progress = DOCS / "next" / "data" / spec.name
        grid = in_progress if (in_progress / "spec.yaml").is_file() else DOCS / "data" / spec.name
        if path in LONG_SPECS and not (grid / "spec.yaml").is_file():
            continue  # its runs are not published yet
        assert load_grid_spec(grid).model_dump() == spec.model_dump(), path
    for path in published:
        spec = load_grid_spec(path.parent)
        assert spec.computed_findings or spec.name in long_names, path
        arms = {config.parents[1].name for config in path.parent.glob("*/seed-*/config.yaml")}
        assert arms and arms <= set(spec.arms), path


def test_the_shipped_specs_follow_the_protocol(tmp_path):
    """Greedy held-out on at least 96 problems (or a set's whole split) at step 0, shared per
    seed, and the end; at least 5 seeds; DAPO's overlong penalty only in the main comparison's
    DAPO arms, where it is under test; a header that states the spec's cost and minimum
    detectable effect."""
    from microcoder.experiments.spec import arm_config

    for path in SPECS:
        spec, folder = load_spec(path)
        header = path.read_text().split("\nname:", 1)[0]
        assert "cost" in header and "Minimum detectable effect" in header, path
        assert len(spec.seeds) >= 5 and spec.share_heldout_start, path
        for arm in spec.arms:
            config = arm_config(spec, folder, arm, 0, tmp_path)
            assert config.heldout_temperature == 0 and config.eval_every == 0, (path, arm)
            assert config.heldout_size >= 96 or config.problems == "decimal", (path, arm)
            assert (config.overlong_cache_length > 0) == (spec.name == "main" and arm.startswith("dapo")), (path, arm)


def test_the_long_runs_are_mains_arms_run_longer(tmp_path):
    """configs/experiments/long/main_long.yaml: one seed of each of main's own arms (the
    group-matched DAPO aside), differing from main's configs only in the run's length and
    where it evaluates and saves; at least 200 steps; no computed finding (one seed has no
    variance to test against)."""
    from microcoder.experiments.spec import arm_config

    root = Path(__file__).parents[1] / "configs" / "experiments"
    long, long_folder = load_spec(root / "long" / "main_long.yaml")
    main, main_folder = load_spec(root / "main.yaml")
    assert long.seeds == [0] and not long.computed_findings and set(long.arms) < set(main.arms)
    for arm in long.arms:
        ran = arm_config(long, long_folder, arm, 0, tmp_path).model_dump()
        short = arm_config(main, main_folder, arm, 0, tmp_path).model_dump()
        assert ran["total_steps"] >= 200 and 0 < ran["eval_every"] < ran["total_steps"]
        assert {key for key in ran if ran[key] != short[key]} == {"total_steps", "eval_every", "save_every"}, arm


def test_the_learning_rate_trial_differs_from_the_protocol_in_the_rate_alone(tmp_path):
    """configs/trials/learning_rate.yaml is the measurement behind cpu-scale.yaml's rate
    (results/experiments/README.md, "Protocol"): its arms differ in learning_rate only, and one
    of them is the rate the shipped specs run at."""
    from microcoder.experiments.spec import arm_phases

    root = Path(__file__).parents[1] / "configs"
    spec, folder = load_spec(root / "trials" / "learning_rate.yaml")
    configs = {arm: arm_phases(spec, folder, arm, 0, tmp_path)[0].model_dump() for arm in spec.arms}
    first, second = configs.values()
    assert {key for key in first if first[key] != second[key]} == {"learning_rate"}
    shipped = yaml.safe_load((root / "experiments" / "cpu-scale.yaml").read_text())["learning_rate"]
    assert float(shipped) in {config["learning_rate"] for config in configs.values()}


def test_the_default_run_trial_measured_the_shipped_default(tmp_path):
    """configs/trials/default_run_lr.yaml is the measurement behind TrainConfig's learning
    rate (results/default_run.md): its arm is `microcoder train` as it ships, up to the run's
    place, seed and shared step-0 cache."""
    from microcoder.experiments.spec import arm_phases

    root = Path(__file__).parents[1] / "configs"
    spec, folder = load_spec(root / "trials" / "default_run_lr.yaml")
    [arm] = spec.arms
    trial = arm_phases(spec, folder, arm, 0, tmp_path)[0].model_dump()
    shipped = load_config(None).model_dump()  # what `microcoder train` runs
    assert {key for key in trial if trial[key] != shipped[key]} <= {"run_dir", "heldout_start_cache"}


GENERATED = re.compile(r"<!-- (VERDICTS|NUMBERS|SUMMARY)[^>]*-->.*?<!-- /\1 -->", re.S)
PAIR = re.compile(r"([+-]?\d+\.\d+) (?:\+- |\(SE )(\d+\.\d+)")
"""A mean and its SE: "+0.035 +- 0.016" or "+0.048 (SE 0.019)"."""
SE_ALONE = re.compile(r"(?<!\()\bSE (\d+\.\d+)")
"""An SE quoted alone ("has SE 0.017"): one of the blocks' SEs."""
P_VALUE = re.compile(r"\bp (?:= )?(0\.\d{3}|< 0\.001)(?![\d-])")
"""A p-value, "p 0.046", "p = 0.046" or "p < 0.001"."""
P_RANGE = re.compile(r"\bp (?:= )?(0\.\d+)-(0\.\d+)")
"""A range of p-values, "p 0.16-0.36": each end one of the blocks' p-values at its precision."""


def close(value: str, figures: list[float]) -> bool:
    """Whether `value` is one of `figures` rounded to the places it is written with."""
    places = len(value.split(".")[1])
    return any(abs(figure - float(value)) <= 0.5 * 10 ** -places + 1e-9 for figure in figures)


def unquoted_figures(prose: str, blocks: str) -> list[str]:
    """The figures in `prose` that are not figures of the generated `blocks` (at the
    precision they are written with): means with their SE, SEs alone, p-values, p ranges."""
    pairs = [(float(mean), float(se)) for mean, se in PAIR.findall(blocks)]
    errors = [se for _, se in pairs] + [float(se) for se in re.findall(r"\bSE (\d+\.\d+)", blocks)]
    p_values = [float(p) for p in re.findall(r"\bp (0\.\d+)", blocks)]
    wrong = []
    for mean, se in PAIR.findall(prose):
        if not any(close(mean, [value]) and close(se, [error]) for value, error in pairs):
            wrong.append(f"{mean} +- {se}")
    wrong += [f"SE {se}" for se in SE_ALONE.findall(prose) if not close(se, errors)]
    wrong += [f"p {p}" for p in P_VALUE.findall(prose) if f"p {p}" not in blocks]
    wrong += [f"p {low}-{high}" for low, high in P_RANGE.findall(prose)
              if not (close(low, p_values) and close(high, p_values))]
    return wrong


def test_an_unchecked_figure_form_in_the_prose_is_caught():
    """Each form a reading quotes a figure in is checked against the report's blocks."""
    blocks = "| +0.035 +- 0.016 | 1.14 (4), p 0.160 | 0.45 (4), p 0.339 | by template SE 0.021 (23 df), p < 0.001 |"
    assert unquoted_figures("+0.035 +- 0.016 (+0.04 (SE 0.02)), SE 0.021, p 0.160, p = 0.339, p < 0.001, "
                            "p 0.16-0.34", blocks) == []
    assert unquoted_figures("+0.036 +- 0.016, +0.035 (SE 0.017), SE 0.030, p 0.161, p = 0.338, p 0.16-0.36",
                            blocks) == ["+0.036 +- 0.016", "+0.035 +- 0.017", "SE 0.030", "p 0.161", "p 0.338",
                                        "p 0.16-0.36"]


def test_figures_quoted_in_the_experiment_pages_are_the_reports():
    """A reading quotes the report, never its own arithmetic: every "mean +- SE" (or "mean
    (SE x)"), SE, p-value ("p x", "p = x") and range of p-values written around a page's
    generated blocks is one of the figures in them (or in the summary; the record's README,
    which speaks of every page, in any page's), at the precision it is written with."""
    summary = "".join(block.group(0) for block in GENERATED.finditer((DOCS / "README.md").read_text()))
    every = "".join(block.group(0) for page in sorted(DOCS.glob("*.md"))
                    for block in GENERATED.finditer(page.read_text()))
    for page in [*sorted(DOCS.glob("*.md")), *sorted((DOCS / "trials").glob("*.md"))]:
        text = page.read_text()
        blocks = "".join(block.group(0) for block in GENERATED.finditer(text)) + summary
        if page == DOCS / "README.md":
            blocks += every
        wrong = unquoted_figures(GENERATED.sub("", text), blocks)
        assert not wrong, f"{page.name}: {', '.join(wrong)} not figures of its report"


VERDICT_WORDS = re.compile(r"reproduc|contradict|inconclusive|beyond|within .*noise|untestable|idle|evidence")


def test_the_by_problem_column_carries_no_verdict_word_and_its_note_is_on_every_page_with_it():
    """The by-problem analysis holds the trained models fixed: a statement about them, never a
    verdict, in its cells or in the prose around them; each page that prints the column says so."""
    from microcoder.experiments.pages import PAIRING_CAVEAT

    checked = 0
    for page in [*sorted(DOCS.glob("*.md")), *sorted((DOCS / "trials").glob("*.md"))]:
        text = page.read_text()
        tables = [line for line in text.splitlines() if line.startswith("| #")]
        if not tables:
            continue
        checked += 1
        assert all(line.endswith("| by problem, these trained models (mean: SE, p) |") for line in tables), page.name
        assert PAIRING_CAVEAT in text, page.name
        for line in text.splitlines():
            if line.startswith("| ") and line.split("|")[1].strip().isdigit():
                cell = line.rstrip(" |").rsplit("|", 1)[1]
                assert not VERDICT_WORDS.search(cell), f"{page.name}: {cell}"
        assert "problem-sampling noise" not in GENERATED.sub("", text), page.name
    assert checked >= 5, f"only {checked} pages print the by-problem column"


def test_a_page_prints_p_under_0001_as_such_and_no_detectable_effect_where_the_se_is_0():
    """Three places would print p 0.000 for p < 0.0005, and 3.04 x an SE of 0 is no detectable
    effect: "p < 0.001" and "-" instead, in the cells and on every published page."""
    from microcoder.experiments.pages import detectable_cell, p_text

    assert (p_text(0.0004), p_text(0.0005), p_text(0.042)) == ("p < 0.001", "p 0.001", "p 0.042")
    assert detectable_cell(paired_verdict([0.1, 0.1], "greater")) == "-"
    assert detectable_cell(paired_verdict([0.1, 0.3], "greater")) != "-"
    for page in [*sorted(DOCS.glob("*.md")), *sorted((DOCS / "trials").glob("*.md")), DOCS.parents[1] / "README.md"]:
        text = page.read_text()
        assert not re.search(r"\bp (= )?0\.0+\b(?!\d)", text), page.name


def test_every_seeds_for_power_figure_has_its_range_and_every_token_count_says_what_it_counts():
    """The seeds 80% power needs come from a few seeds' sd: each figure of the record's power
    table, and each grid's total, carries its 95% range. The budget's tokens are those
    generated (DAPO's filter drops groups from the loss), and the pages say so."""
    summary = (DOCS / "README.md").read_text()
    table = summary.split("| seeds for 80% (95% range) |", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    assert table
    for line in table:
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        assert re.fullmatch(r"\d+ \(\d+-\d+\)", cells[5]), line
        assert all(re.fullmatch(r"[\d.]+ \([\d.]+-[\d.]+\)", cell) for cell in cells[6:]), line
    for total in re.findall(r"\n(\w+) at \d+ seeds ([^;]*);", summary):
        assert total[1].startswith("(95% range "), total
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()
        assert "trained batches' responses" not in text, page.name
        if "| arm | groups generated |" in text:
            assert "| tokens generated |" in text and "not tokens that enter the loss" in text, page.name


def test_the_record_says_what_was_decided_after_the_data_and_the_front_readme_agrees():
    """Every `confound:` exclusion of a published spec is listed with its date and commit in
    the record's "Decided after the data"; the front README says what the record says of
    per-problem files."""
    readme = (DOCS / "README.md").read_text()
    decided = readme.split("\n## Decided after the data\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in decided.splitlines() if re.match(r"\| \d{4}-\d\d-\d\d \| [0-9a-f]{7} \|", line)]
    for row in rows:
        commit = row.split("|")[2].strip()
        subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=DOCS.parents[1], check=True)
    confounded = {path.parent.name for path in (DOCS / "data").glob("*/spec.yaml")
                  if any(finding.get("confound") for finding in yaml.safe_load(path.read_text()).get("findings", []))}
    assert confounded and all(any(f"`confound:` on {name}'s" in row for row in rows) for name in confounded)
    assert any("2 SE" in row and "t test" in row for row in rows)
    # the front page and the table of headlines it links (results/README.md); the engine
    # comparison's quotes are checked against its report in test_compare_engines.py
    front = " ".join(((DOCS.parents[1] / "README.md").read_text() + (DOCS.parent / "README.md").read_text()).split())
    assert "Every published run has its per-problem" in front and "not yet for all" not in front
    assert "Every published run now has its per-problem files" in readme


def test_the_detectable_effects_and_powers_quoted_are_the_reports():
    """The experiments README's per-spec held-out detectable effects (its cost table) and the
    power at the paper's main effects, and the main comparison's paper effects and detectable
    effects the front README quotes, are the summary's numbers."""
    from microcoder.experiments.findings import published_rows
    from microcoder.experiments.verdict import SCORED

    rows = published_rows(DOCS / "data")
    readme = GENERATED.sub("", (DOCS / "README.md").read_text())
    front = GENERATED.sub("", (DOCS.parents[1] / "README.md").read_text() + (DOCS.parent / "README.md").read_text())
    cost_table = readme.split("\n| spec | arms x seeds", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    table = {line.split("|")[1].strip(): line.split("|")[6].strip() for line in cost_table}
    for name, quoted in table.items():
        effects = sorted(round(row.verdict.mde, 3) for row in rows if row.spec.name == name
                         and row.finding.metric.startswith("heldout_accuracy") and row.verdict.verdict in SCORED)
        shown = f"{effects[0]:.3f}" if effects[0] == effects[-1] else f"{effects[0]:.3f}-{effects[-1]:.3f}"
        assert quoted.split(" (")[0] == shown, (name, quoted, shown)
    scored = [row for row in rows
              if row.verdict.verdict in SCORED and row.finding.metric.startswith("heldout_accuracy")]
    overall = f"{min(row.verdict.mde for row in scored):.3f}-{max(row.verdict.mde for row in scored):.3f}"
    powers = sorted(row.verdict.power_at(row.finding.paper_effect) for row in rows
                    if row.spec.name == "main" and row.finding.paper_effect is not None)
    power_range = f"{powers[0]:.2f}-{powers[-1]:.2f}"
    assert overall in readme and f"power is {power_range}" in readme.replace("\n", " ")
    main = [row for row in rows if row.spec.name == "main" and row.finding.paper_effect is not None]
    paper = sorted(abs(row.finding.paper_effect) for row in main)
    detectable = sorted(round(row.verdict.mde, 3) for row in main)
    assert (f"({paper[0]:.3f}-{paper[-1]:.3f}) are below what 5 seeds detect there "
            f"({detectable[0]:.3f}-{detectable[-1]:.3f})") in " ".join(front.split())


def test_compare_runs_counts_a_reruns_non_timing_values_equal_close_or_different(tmp_path):
    """scripts/compare_runs.py, the check behind the record's reproduced-rerun counts."""
    first, second = tmp_path / "published", tmp_path / "rerun"
    for run, rows in ((first, [{"step": 1, "reward_mean": 0.5, "loss": 0.1, "seconds_rollout": 3.0},
                               {"step": 2, "reward_mean": 0.25, "heldout_accuracy": 0.5}]),
                      (second, [{"step": 1, "reward_mean": 0.5, "loss": 0.10000001, "seconds_rollout": 9.0},
                                {"step": 2, "reward_mean": 0.3, "heldout_accuracy": 0.75, "extra": 1}])):
        run.mkdir()
        (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    script = Path(__file__).parents[1] / "scripts" / "compare_runs.py"
    out = subprocess.run([sys.executable, str(script), str(first), str(second)], capture_output=True, text=True,
                         check=True).stdout
    # step 1: reward equal, loss within 1e-4, the timing key ignored; step 2: reward and
    # held-out differ, `extra` only in the rerun.
    assert out.splitlines()[-1] == "1 pairs: 1 equal, 1 close, 2 different, 1 missing (non-timing values; close: within 0.0001)"
    assert "  step 2 heldout_accuracy: 0.5 vs 0.75" in out.splitlines()

"""Every entry point that runs programs reads its default limits from one place
(microcoder.evaluator.sandbox), so changing a default there changes it everywhere."""

import inspect

from microcoder.evaluator.evaluate import EvaluatorConfig
from microcoder.evaluator.sandbox import DEFAULT_MEMORY_LIMIT_MB, DEFAULT_OUTPUT_LIMIT_MB, DEFAULT_TIME_LIMIT_S, Sandbox
from microcoder.service.config import ServeConfig
from microcoder.training.config import TrainConfig


def test_the_configs_default_to_the_sandbox_limits():
    evaluator = EvaluatorConfig()
    assert (evaluator.time_limit_s, evaluator.memory_limit_mb, evaluator.output_limit_mb) == (
        DEFAULT_TIME_LIMIT_S, DEFAULT_MEMORY_LIMIT_MB, DEFAULT_OUTPUT_LIMIT_MB)
    serve = ServeConfig()
    assert (serve.time_limit_s, serve.memory_limit_mb) == (DEFAULT_TIME_LIMIT_S, DEFAULT_MEMORY_LIMIT_MB)
    assert TrainConfig().reward_time_limit_s == DEFAULT_TIME_LIMIT_S


def test_a_direct_sandbox_run_defaults_to_the_same_limits():
    for method in (Sandbox.run, Sandbox.run_program, Sandbox.run_programs):
        parameters = inspect.signature(method).parameters
        assert parameters["time_limit_s"].default == DEFAULT_TIME_LIMIT_S
        assert parameters["memory_limit_mb"].default == DEFAULT_MEMORY_LIMIT_MB


def test_evaluate_without_limit_options_uses_the_evaluator_defaults(monkeypatch, tmp_path):
    """`microcoder evaluate` leaves unset options to EvaluatorConfig instead of its own copies."""
    from typer.testing import CliRunner

    import microcoder.evaluator.command as command
    from microcoder.cli import app

    seen = {}
    monkeypatch.setattr(command, "run_evaluate", lambda job, console, default=None: seen.setdefault("config", job.evaluator))
    result = CliRunner().invoke(app, ["evaluate", "--out", str(tmp_path / "results.jsonl")])
    assert result.exit_code == 0, result.output
    assert seen["config"] == EvaluatorConfig()
    seen.clear()
    CliRunner().invoke(app, ["evaluate", "--time-limit", "3.5", "--memory-limit", "512", "--out", str(tmp_path / "r.jsonl")])
    assert (seen["config"].time_limit_s, seen["config"].memory_limit_mb) == (3.5, 512)

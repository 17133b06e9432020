"""Each command's options are made from its config (microcoder.cli.config_options): one
declaration per setting, in the config, with its type, bounds and docstring; the flag, the
help and the stated default come from there, and nothing else declares them."""

import re
from pathlib import Path

import pytest
import typer
from pydantic import Field
from typer.main import get_command
from typer.testing import CliRunner

from microcoder.cli import app, config_options, option_help, shown_default
from microcoder.config_files import CommandConfig
from microcoder.evaluator.evaluate import EvaluatorConfig
from microcoder.policy.config import ModelEvalConfig
from microcoder.service.config import ServeConfig
from microcoder.training.probe import ProbeConfig


def rendered_help(application, *command: str) -> str:
    result = CliRunner().invoke(application, [*command, "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    return result.output


OWN_OPTIONS = {"eval-model": {"window"}, "temperature-probe": {"target_from", "out", "write_config", "base_config"},
               "evaluate": {"problems", "samples", "out", "resume"}, "serve": set()}
"""The options of each command that set no field of its config."""
RENAMED = {"evaluate": {"time_limit_s": "time-limit", "memory_limit_mb": "memory-limit"},
           "serve": {"time_limit_s": "time-limit", "memory_limit_mb": "memory-limit",
                     "max_run_timeout_s": "max-run-timeout", "client_grace_s": "client-grace",
                     "upload_timeout_s": "upload-timeout", "shutdown_grace_s": "shutdown-grace"}}
"""Flags kept from before their fields had units in their names."""
CONFIGS = {"eval-model": ModelEvalConfig, "temperature-probe": ProbeConfig, "evaluate": EvaluatorConfig,
           "serve": ServeConfig}


@pytest.mark.parametrize("command", sorted(CONFIGS))
def test_every_field_is_an_option_with_its_docstring_and_default(command):
    config = CONFIGS[command]
    text = rendered_help(app, command)
    params = {param.name: param for param in get_command(app).commands[command].params}
    assert set(params) - set(config.model_fields) == OWN_OPTIONS[command]
    for name, info in config.model_fields.items():
        flag = RENAMED.get(command, {}).get(name, name.replace("_", "-"))
        entry = re.search(rf"\n  --{flag}[ /=<].*?(?=\n  -|\Z)", text, re.DOTALL)
        assert entry, (command, name)
        line = " ".join(entry.group(0).split())
        assert " ".join(info.description.split()[:6]).rstrip(".") in line, (name, line)  # the docstring is the help
        if info.default is not None:
            assert f"[default: {shown_default(info.default)}]" in line, (name, line)


def test_the_configs_are_models_whose_every_field_has_a_doc():
    for config in CONFIGS.values():
        assert issubclass(config, CommandConfig)
        for name in config.model_fields:
            assert option_help(config, name)


class MadeUpConfig(CommandConfig):
    rounds: int = Field(7, gt=0)
    """A default no help string anywhere writes out."""
    names: tuple[str, ...] = ("a", "b")
    """Names, repeatable or comma-separated."""
    label: str | None = None
    """A label."""
    fast: bool = False
    """Go fast."""


def made_up_app(config=MadeUpConfig):
    made_up = typer.Typer(rich_markup_mode=None)
    seen = []

    @made_up.command()
    @config_options(config, flags={"rounds": "count"})
    def run(config: config, other: int = typer.Option(3, help="Not a field.")) -> None:
        seen.append((config, other))

    @made_up.command()
    def spare() -> None:  # a second command, so that `run` keeps its name
        pass

    return made_up, seen


def test_the_help_and_default_shown_are_whatever_the_config_says():
    made_up, _ = made_up_app()
    text = " ".join(rendered_help(made_up, "run").split())
    assert "--count <int> A default no help string anywhere writes out [default: 7]." in text
    assert "Names, repeatable or comma-separated [default: a,b]." in text
    assert "--fast / --no-fast Go fast [default: off]." in text and "A label." in text


def test_options_given_build_the_config_and_the_rest_keep_its_defaults():
    made_up, seen = made_up_app()
    runner = CliRunner()
    assert runner.invoke(made_up, ["run", "--names", "x,y", "--names", "z", "--fast", "--other", "4"]).exit_code == 0
    assert runner.invoke(made_up, ["run"]).exit_code == 0
    assert seen == [(MadeUpConfig(names=("x", "y", "z"), fast=True), 4), (MadeUpConfig(), 3)]
    refused = runner.invoke(made_up, ["run", "--count", "0"])
    assert refused.exit_code == 2 and "--count: rounds must be positive, got 0" in " ".join(refused.output.split())


def test_a_field_without_a_docstring_stops_the_command_line_from_being_built():
    class Undocumented(CommandConfig):
        rounds: int = 7
        """Documented."""
        quiet: bool = False

    with pytest.raises(TypeError, match="Undocumented.quiet has no docstring"):
        made_up_app(Undocumented)


def test_a_refused_value_is_one_line_naming_the_option(tmp_path):
    refused = CliRunner().invoke(app, ["serve", "--port", "70000"], env={"COLUMNS": "400"})
    assert refused.exit_code == 2
    assert refused.output.strip() == "error: --port: port must be 0-65535, got 70000"
    refused = CliRunner().invoke(app, ["eval-model", "--since", "Feb 2025", "--out", str(tmp_path / "x")],
                                 env={"COLUMNS": "400"})
    assert refused.exit_code == 2 and "--since: since must be a date YYYY-MM-DD, got 'Feb 2025'" in refused.output
    assert not Path(tmp_path / "x").exists()


@pytest.mark.parametrize("config, values, message", [
    (ServeConfig, {"queue_limit": float("nan")}, "queue_limit must be positive, got nan"),
    (ServeConfig, {"client_grace_s": 1.0}, "client_grace_s must be more than 1.0 and finite, got 1.0"),
    (ServeConfig, {"mode": "loose"}, "mode must be one of robust or strict, got 'loose'"),
    (EvaluatorConfig, {"time_limit_s": float("inf")}, "time_limit_s must be positive and finite, got inf"),
    (EvaluatorConfig, {"isolation": "some"}, "isolation must be one of auto, full or none, got 'some'"),
    (ProbeConfig, {"n": 1}, "n must be 2 or more, got 1"),
    (ModelEvalConfig, {"since": "2025-03-01", "until": "2025-02-01"}, "since 2025-03-01 is after until 2025-02-01"),
    (ModelEvalConfig, {"nn": 2}, "nn: no such setting"),
])
def test_each_config_refuses_in_one_line_by_its_fields_rule(config, values, message):
    with pytest.raises(ValueError) as error:
        config(**values)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)

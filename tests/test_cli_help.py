"""The defaults the CLI's help states are the configs' own: read from the config's field
defaults when the help is shown (microcoder.cli.ConfigDefaults), never written out."""

import dataclasses
import re

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from microcoder.cli import app, config_defaults, field_default, shown_default
from microcoder.evaluator.evaluate import EvaluatorConfig
from microcoder.policy.evaluation import ModelEvalConfig
from microcoder.service.config import ServeConfig
from microcoder.training.probe import ProbeConfig


def rendered_help(application, *command: str) -> str:
    result = CliRunner().invoke(application, [*command, "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    return result.output


NOT_FIELDS = {"eval-model": {"window"}, "temperature-probe": {"target_from", "out", "write_config", "base_config"},
              "evaluate": {"problems", "samples"}, "serve": set()}


@pytest.mark.parametrize("command, config", [("eval-model", ModelEvalConfig),
                                             ("temperature-probe", ProbeConfig), ("evaluate", EvaluatorConfig),
                                             ("serve", ServeConfig)])
def test_help_states_each_fields_default_from_the_config(command, config):
    text = rendered_help(app, command)
    cli_command = get_command(app).commands[command]
    fields = {f.name for f in dataclasses.fields(config)}
    # Options that set no config field; any other option missing its field (a renamed field,
    # an option-to-field mapping dropped) fails here instead of losing its stated default.
    assert {param.name for param in cli_command.params if param.default is None
            and cli_command.fields.get(param.name, param.name) not in fields} == NOT_FIELDS[command]
    checked = 0
    for param in cli_command.params:
        field = cli_command.fields.get(param.name, param.name)
        if param.default is not None or field not in fields:
            continue
        value = field_default(config, field)
        entry = re.search(rf"\n  --{param.name.replace('_', '-')}[ /=].*?(?=\n  -|\Z)", text, re.DOTALL)
        line = " ".join(entry.group(0).split())
        if value is not None and "[default: the" not in line:
            assert f"[default: {shown_default(value)}]" in line, (param.name, line)
            checked += 1
    assert checked >= 5


@dataclasses.dataclass
class MadeUpConfig:
    rounds: int = 7
    """A default no help string anywhere writes out."""
    names: tuple[str, ...] = ("a", "b")
    label: str | None = None


def test_the_default_shown_is_whatever_the_config_says():
    # A command over a made-up config: nothing but the config holds 7 or "a,b".
    made_up = typer.Typer(rich_markup_mode=None)

    @made_up.command(cls=config_defaults(f"{__name__}:MadeUpConfig", count="rounds"))
    def run(count: int = typer.Option(None, help="Rounds to run."),
            names: str = typer.Option(None, help="Names."),
            label: str = typer.Option(None, help="A label."),
            other: int = typer.Option(None, help="No such field.")) -> None:
        pass

    @made_up.command()
    def spare() -> None:  # a second command, so that `run` keeps its name
        pass

    text = " ".join(rendered_help(made_up, "run").split())
    assert "Rounds to run [default: 7]." in text and "Names [default: a,b]." in text
    assert "A label." in text and "No such field." in text and text.count("[default:") == 2


def test_each_command_has_one_name():
    # No hidden aliases: a command is found under the name its help lists, and only there.
    def hidden(group, prefix=""):
        for name, command in group.commands.items():
            if command.hidden:
                yield prefix + name
            if hasattr(command, "commands"):
                yield from hidden(command, f"{prefix}{name} ")

    assert list(hidden(get_command(app))) == []
    assert "eval" not in get_command(app).commands


def test_rendered_help_shows_the_stated_defaults():
    # Under rich markup "[default: 8]" reads as a tag and vanishes from the printed help.
    result = CliRunner().invoke(app, ["temperature-probe", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "Responses per prompt [default: 8]." in result.output


def test_python_dash_m_sees_every_command():
    # `python -m microcoder.cli` ran app() before the experiment commands were registered.
    import subprocess
    import sys

    shown = subprocess.run([sys.executable, "-m", "microcoder.cli", "experiment", "--help"],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    listed = [line.split()[0] for line in shown.stdout.split("Commands:", 1)[1].splitlines() if line.strip()]
    assert listed == ["run", "report"]


def test_an_error_is_one_line_and_its_traceback_is_shown_on_request():
    from typer.testing import CliRunner

    runner = CliRunner()
    quiet = runner.invoke(app, ["train", "total_steps=-1"], env={"MICROCODER_TRACEBACK": ""})
    assert quiet.exit_code == 2 and "error: total_steps: must be >= 1" in quiet.output
    assert "Traceback" not in quiet.output and "load_config" not in quiet.output
    loud = runner.invoke(app, ["train", "total_steps=-1"], env={"MICROCODER_TRACEBACK": "1"})
    assert loud.exit_code == 2 and "error: total_steps: must be >= 1" in loud.output
    assert "Traceback" in loud.output and "load_config" in loud.output  # where it was raised

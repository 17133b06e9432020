"""The defaults the CLI's help states are the configs' own (they are written out by hand)."""

import dataclasses
import re

import pytest
from typer.main import get_command

from microcoder.cli import app
from microcoder.policy.evaluation import ModelEvalConfig
from microcoder.training.probe import ProbeConfig


def shown(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


@pytest.mark.parametrize("command, config", [("eval-model", ModelEvalConfig), ("temperature-probe", ProbeConfig)])
def test_help_defaults_are_the_configs(command, config):
    defaults = {field.name: field.default for field in dataclasses.fields(config)
                if field.default is not dataclasses.MISSING and field.default is not None}
    checked = 0
    for param in get_command(app).commands[command].params:
        stated = re.search(r"\[default: ([^\]]+)\]", getattr(param, "help", None) or "")
        if stated and param.name in defaults and " " not in stated.group(1):  # not prose such as "the embedded ..."
            assert stated.group(1) == shown(defaults[param.name]), param.name
            checked += 1
    assert checked >= 5  # the pattern found the stated defaults


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
    from typer.testing import CliRunner

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

"""The `microcoder` command line. Each command parses its options into the typed config of
its entry point and calls it; no logic lives here."""

from __future__ import annotations

import typer

from microcoder.data.cli import data_app

app = typer.Typer(help="microcoder: RL training, evaluation and data for code models.", no_args_is_help=True)
app.add_typer(data_app, name="data")


if __name__ == "__main__":
    app()

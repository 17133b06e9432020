"""`microcoder data ...` commands."""

from __future__ import annotations

import typer

data_app = typer.Typer(help="Convert and build problem sets.", no_args_is_help=True)

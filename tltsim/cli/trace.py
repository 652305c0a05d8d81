"""`tlt trace …`: inspect response-length traces."""

from __future__ import annotations

import typer

app = typer.Typer(help="Inspect response-length traces: list, stats, plot.", no_args_is_help=True)

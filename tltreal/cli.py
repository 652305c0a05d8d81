"""`tlt real …`: real execution (owned by the real-engine work). Imports torch lazily."""

from __future__ import annotations

import typer

app = typer.Typer(help="Run the real engine (needs the `real` extra: torch, triton).", no_args_is_help=True)

"""`tlt sim …`: simulate rollout steps (owned by the simulator-core work)."""

from __future__ import annotations

import typer

app = typer.Typer(help="Simulate RL rollout steps under speculative-decoding policies.", no_args_is_help=True)

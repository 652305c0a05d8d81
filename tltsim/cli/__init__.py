"""The one command-line tool, ``tlt``.

Sub-commands live one per module (``trace``, ``sim``, ``real``, ``demo``) and are mounted here.
:func:`main` turns :class:`~tltsim.errors.InputError` into one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys

import typer

from tltsim.errors import EXIT_INPUT_ERROR, InputError

app = typer.Typer(
    name="tlt",
    help="Simulate, compare, run and validate adaptive speculative decoding for RL rollouts.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _mount() -> None:
    from tltreal.cli import app as real_app
    from tltsim.cli.demo import demo
    from tltsim.cli.sim import app as sim_app
    from tltsim.cli.trace import app as trace_app

    app.add_typer(trace_app, name="trace")
    app.add_typer(sim_app, name="sim")
    app.add_typer(real_app, name="real")
    app.command("demo")(demo)


_mount()


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except InputError as exc:
        print(f"tlt: error: {exc}", file=sys.stderr)
        sys.exit(EXIT_INPUT_ERROR)

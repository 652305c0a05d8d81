"""The one command-line tool, ``tlt``: the entry point, light enough to answer Ctrl-C at once.

The app and its commands are built in :mod:`tltcli.cli`; importing them (typer, and a command's
module with pandas and the simulator when it runs) takes up to a second, and an interrupt in that
time raised ``KeyboardInterrupt`` out of the console script's ``from tltcli import main``: a
traceback. So this module imports nothing heavy: :func:`main` imports the app itself and answers an
interrupt there as one mid-command is answered (exit 130, one line). ``from tltcli import app`` (and
every other name of :mod:`tltcli.cli`) still works.
"""

from __future__ import annotations

import signal
import sys

from tltcli.interrupted import INTERRUPTED

__all__ = ["INTERRUPTED", "main"]


def main() -> None:
    """Console-script entry point: import the commands, then run :func:`tltcli.cli.main`."""
    try:
        from tltcli.cli import main as run
    except KeyboardInterrupt:  # Ctrl-C while importing: nothing was read or written yet
        print(INTERRUPTED, file=sys.stderr)
        sys.exit(128 + signal.SIGINT)
    run()


def __getattr__(name: str) -> object:
    """``tltcli.app`` and the other names of :mod:`tltcli.cli`, imported when first asked for."""
    if name.startswith("__") or name == "cli":  # dunders, and the submodule while it is being imported
        raise AttributeError(name)
    import importlib

    cli = importlib.import_module("tltcli.cli")  # not `from tltcli import cli`: that asks this hook again
    try:
        return getattr(cli, name)
    except AttributeError:
        raise AttributeError(f"module 'tltcli' has no attribute '{name}'") from None

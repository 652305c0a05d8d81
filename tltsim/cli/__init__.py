"""The one command-line tool, ``tlt``.

Sub-commands live one per module (``trace``, ``sim``, ``sweep``, ``real``, ``demo``, ``report``) and are mounted here.
:func:`main` turns :class:`~tltsim.errors.InputError` into one line on stderr and exit code 2.
"""

from __future__ import annotations

import signal
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


def _version(value: bool) -> None:
    if value:
        import platform

        from tltsim import __version__

        typer.echo(f"tlt {__version__} (Python {platform.python_version()})")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print tlt's version and exit.")) -> None:
    """Simulate, compare, run and validate adaptive speculative decoding for RL rollouts."""


def _mount() -> None:
    from tltreal.cli import app as real_app
    from tltsim.cli.demo import demo
    from tltsim.cli.report import report
    from tltsim.cli.sim import app as sim_app
    from tltsim.cli.sweep import app as sweep_app
    from tltsim.cli.trace import app as trace_app
    from tltsim.cli.validate import profile, validate

    real_app.command("profile")(profile)
    app.add_typer(trace_app, name="trace")
    app.add_typer(sim_app, name="sim")
    app.add_typer(sweep_app, name="sweep")
    app.add_typer(real_app, name="real")
    app.command("demo")(demo)
    app.command("validate")(validate)
    app.command("report")(report)


_mount()


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler, ``timeout``, ``kill``) raised like Ctrl-C, so that every ``finally``
    and every temp-folder cleanup runs; nothing half written survives either signal."""


_terminated = False


def _on_sigterm(signum: int, frame: object) -> None:
    global _terminated
    _terminated = True
    raise Terminated


def main() -> None:
    """Console-script entry point: input errors are one line and exit 2; Ctrl-C exits 130 and
    SIGTERM 143 (the shell's 128 + signal), both after cleaning up. (Typer turns an interrupt into
    exit 130 itself; the flag tells the two signals apart.)"""
    global _terminated
    _terminated = False
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        app()
    except InputError as exc:
        print(f"tlt: error: {exc}", file=sys.stderr)
        sys.exit(EXIT_INPUT_ERROR)
    except (SystemExit, KeyboardInterrupt) as exc:
        code = exc.code if isinstance(exc, SystemExit) else 128 + signal.SIGINT
        if _terminated:
            print("tlt: terminated (SIGTERM); nothing half written was left behind", file=sys.stderr)
            sys.exit(128 + signal.SIGTERM)
        if code == 128 + signal.SIGINT:
            print("tlt: interrupted; nothing half written was left behind", file=sys.stderr)
            sys.exit(code)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)

"""The one command-line tool, ``tlt``: the typer app and its error handling.

Sub-commands live one per module (``trace``, ``sim``, ``sweep``, ``real``, ``cost``, ``model``,
``scenario``, ``demo``, ``report``) and are mounted here.
:func:`main` turns :class:`~tltcore.errors.InputError` into one line on stderr and exit code 2. The
console script enters through :func:`tltcli.main`, which imports this module (typer, pandas, every
sub-command: a second or more) where a Ctrl-C can still be answered in one line.
"""

from __future__ import annotations

import signal
import sys

import typer

from tltcli.interrupted import INTERRUPTED
from tltcore.errors import EXIT_INPUT_ERROR, InputError

try:  # typer 0.2x vendors click; older typer uses click itself
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover
    from click import exceptions as click_errors  # type: ignore[no-redef]

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

        from tltcore import __version__

        typer.echo(f"tlt {__version__} (Python {platform.python_version()})")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print tlt's version and exit.")) -> None:
    """Simulate, compare, run and validate adaptive speculative decoding for RL rollouts."""


def _mount() -> None:
    from tltcli.cost import app as cost_app
    from tltcli.demo import demo
    from tltcli.gpu import app as gpu_app
    from tltcli.model import app as model_app
    from tltcli.real import app as real_app
    from tltcli.report import report
    from tltcli.scenario import app as scenario_app
    from tltcli.sim import app as sim_app
    from tltcli.sim_capacity import capacity
    from tltcli.sweep import app as sweep_app
    from tltcli.trace import app as trace_app
    from tltcli.validate import validate

    app.add_typer(trace_app, name="trace")

    sim_app.command("capacity")(capacity)
    app.add_typer(sim_app, name="sim")
    app.add_typer(sweep_app, name="sweep")
    app.add_typer(real_app, name="real")
    app.add_typer(cost_app, name="cost")
    app.add_typer(model_app, name="model")
    app.add_typer(scenario_app, name="scenario")
    app.add_typer(gpu_app, name="gpu")
    app.command("demo")(demo)
    app.command("validate")(validate)
    app.command("report")(report)
    app.command("advise")(__import__("tltcli.advise", fromlist=["advise"]).advise)


_mount()


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler, ``timeout``, ``kill``) raised like Ctrl-C, so that every ``finally``
    and every temp-folder cleanup runs; nothing half written survives either signal."""


_terminated = False


def _on_sigterm(signum: int, frame: object) -> None:
    global _terminated
    _terminated = True
    raise Terminated


def _usage_line(exc: click_errors.ClickException) -> str:
    """A click usage error (unknown option, bad value, missing argument) as the one line every other
    bad input gets, keeping click's own suggestion ("Did you mean --trace?") and naming the help."""
    text = " ".join(exc.format_message().split())
    ctx = exc.ctx if isinstance(exc, click_errors.UsageError) else None
    return f"{text} (see '{ctx.command_path} --help')" if ctx is not None else text


def main() -> None:
    """Console-script entry point: input errors, click's usage errors included, are one line and exit
    2; Ctrl-C exits 130 and SIGTERM 143 (the shell's 128 + signal), both after cleaning up. (Typer
    turns an interrupt into exit 130 itself; the flag tells the two signals apart.)"""
    global _terminated
    _terminated = False
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        code = app(prog_name="tlt", standalone_mode=False)
        code = code if isinstance(code, int) else 0
    except click_errors.NoArgsIsHelpError as exc:  # `tlt sim`: the help, as typer shows it
        from typer import rich_utils

        rich_utils.rich_format_error(exc)
        code = exc.exit_code
    except click_errors.ClickException as exc:
        print(f"tlt: error: {_usage_line(exc)}", file=sys.stderr)
        code = EXIT_INPUT_ERROR if isinstance(exc, click_errors.UsageError) else exc.exit_code
    except typer.Abort:  # end of input at a prompt
        print("tlt: aborted", file=sys.stderr)
        code = 1
    except InputError as exc:
        print(f"tlt: error: {exc}", file=sys.stderr)
        code = EXIT_INPUT_ERROR
    except KeyboardInterrupt:
        code = 128 + signal.SIGINT
    finally:
        signal.signal(signal.SIGTERM, previous)
    if code == 128 + signal.SIGINT:
        if _terminated:
            print("tlt: terminated (SIGTERM); nothing half written was left behind", file=sys.stderr)
            sys.exit(128 + signal.SIGTERM)
        print(INTERRUPTED, file=sys.stderr)
    sys.exit(code)

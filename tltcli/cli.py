"""The one command-line tool, ``tlt``: the typer app and its error handling.

Sub-commands live one per module (``trace``, ``sim``, ``sweep``, ``real``, ``cost``, ``model``,
``scenario``, ``demo``, ``report``, ...) and are listed in :data:`COMMANDS`; a command's module is
imported only when it runs, so ``tlt --help`` starts in ~0.2 s rather than ~1 s.
:func:`main` turns :class:`~tltcore.errors.InputError` into one line on stderr and exit code 2. The
console script enters through :func:`tltcli.main`, which imports this module (typer) where a Ctrl-C
can still be answered in one line.
"""

from __future__ import annotations

import importlib
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from difflib import get_close_matches

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

from tltcli.interrupted import INTERRUPTED
from tltcore.errors import EXIT_INPUT_ERROR, InputError

try:  # typer 0.2x vendors click; older typer uses click itself
    import typer._click as click
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover
    import click  # type: ignore[no-redef]
    from click import exceptions as click_errors  # type: ignore[no-redef]

@dataclass(frozen=True)
class LazyCommand:
    """A top-level command imported only when it runs (or its own help is asked for).

    ``load`` names a function of this module returning the typer sub-app or command function;
    ``summary`` is the line ``tlt --help`` lists, so that listing imports no command (pandas,
    pyarrow, numpy and the simulator take ~0.5 s, a second under load). Tests pin each summary to the
    loaded command's own help and the listing to the one a fully loaded app prints."""

    load: Callable[[], object]
    summary: str


def _import(target: str) -> Callable[[], object]:
    module, _, attribute = target.partition(":")
    return lambda: getattr(importlib.import_module(module), attribute)


def _sim_app() -> object:
    """``tlt sim`` with ``capacity`` mounted (it lives in its own module and imports ``tltcli.sim``)."""
    from tltcli.sim import app as sim_app
    from tltcli.sim_capacity import capacity

    if not any(info.name == "capacity" for info in sim_app.registered_commands):
        sim_app.command("capacity")(capacity)
    return sim_app


# listed by `tlt --help` in this order (typer's: commands, then groups)
COMMANDS: dict[str, LazyCommand] = {
    "demo": LazyCommand(_import("tltcli.demo:demo"), "Analyse a trace's long tail, simulate it under SD "
                        "policies and whole RL runs, write reports/demo/."),
    "validate": LazyCommand(_import("tltcli.validate:validate"), "Run a scenario's steps for real and in "
                            "simulation; report the simulator's error."),
    "report": LazyCommand(_import("tltcli.report:report"), "Write a report (README with figures, tables, "
                          "versions and the commands) for a run or a sweep."),
    "advise": LazyCommand(_import("tltcli.advise:advise"), "Recommend a speculative-decoding setting for these "
                          "RL rollouts: simulate a small grid of settings at several seeds, rank them by median "
                          "rollout time with the spread, and export the winner for vLLM and SGLang."),
    "trace": LazyCommand(_import("tltcli.trace:app"), "Inspect response-length traces: list, fetch, stats, "
                         "plot, import."),
    "sim": LazyCommand(_sim_app, "Simulate RL rollout steps under speculative-decoding policies."),
    "sweep": LazyCommand(_import("tltcli.sweep:app"), "Sweep scenario fields over grids, zips and random "
                         "samples, resumably, locally or on Ray."),
    "real": LazyCommand(_import("tltcli.real:app"), "Run the real engine (needs the `real` extra: torch, "
                        "triton)."),
    "cost": LazyCommand(_import("tltcli.cost:app"), "Cost tables from the cost model calibrated on measured GPU "
                        "profiles."),
    "model": LazyCommand(_import("tltcli.model:app"), "The models tlt knows: the bundled catalog, a model's "
                         "shape, fetching a config.json."),
    "scenario": LazyCommand(_import("tltcli.scenario:app"), "Scenarios from an RL framework's own config (verl, "
                            "NeMo-RL)."),
    "gpu": LazyCommand(_import("tltcli.gpu:app"), "GPU validation campaign (needs the `real` extra: torch, "
                       "triton)."),
}


def load_command(name: str) -> click.Command:
    """The click command typer builds for top-level command ``name``, exactly as if it had been
    mounted on the root app (a one-entry app with a callback, so a one-command sub-app stays a group)."""
    target = COMMANDS[name].load()
    holder = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    holder.callback()(lambda: None)
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name)
    else:
        holder.command(name)(target)
    group = typer.main.get_command(holder)
    assert isinstance(group, TyperGroup)
    return group.commands[name]


class LazyGroup(TyperGroup):
    """The root ``tlt`` group: a command's module is imported when the command is looked up to run,
    not when the root is built or lists its commands."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*COMMANDS, *(n for n in self.commands if n not in COMMANDS)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            if self._listing:  # `tlt --help`: the summary, nothing imported
                return TyperCommand(name=cmd_name, help=COMMANDS[cmd_name].summary)
            self.commands[cmd_name] = load_command(cmd_name)
        return self.commands.get(cmd_name)

    _listing = False

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple:
        """Typer's own, with its "Did you mean" drawn from every command (typer draws it from the ones
        already imported, none here)."""
        try:
            return self._click_resolve_command(ctx, args)
        except click_errors.UsageError as exc:
            matches = get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if matches:
                exc.message = f"{exc.message.rstrip('.')}. Did you mean {', '.join(repr(m) for m in matches)}?"
            raise

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def load_all(self) -> LazyGroup:
        """Every command imported (the docs' CLI reference walks ``commands``)."""
        for name in COMMANDS:
            if name not in self.commands:
                self.commands[name] = load_command(name)
        return self


app = typer.Typer(
    name="tlt",
    help="Simulate, compare, run and validate adaptive speculative decoding for RL rollouts.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    cls=LazyGroup,
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

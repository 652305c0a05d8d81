"""The root ``tlt`` group imports a command's module only when the command runs (issue 43: ``tlt
--help`` in well under 0.5 s). Pinned here: the listing's summaries are the commands' own help, the
listing is the one a fully loaded app prints, and listing the commands imports none of them."""

from __future__ import annotations

import subprocess
import sys

import typer.main
from typer.testing import CliRunner

from tltcli.cli import COMMANDS, app, load_command


def _words(text: str) -> list[str]:
    return text.split()


def test_each_summary_is_the_commands_own_help():
    for name in COMMANDS:
        command = load_command(name)
        first_paragraph = (command.help or "").split("\n\n")[0]
        assert _words(COMMANDS[name].summary) == _words(first_paragraph), name


def test_the_listing_is_the_loaded_apps_listing():
    lazy = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "100"})
    root = typer.main.get_command(app).load_all()
    assert set(root.commands) == set(COMMANDS)
    loaded = root.get_command(root.make_context("tlt", [], resilient_parsing=True), "sim")
    assert loaded is root.commands["sim"]
    assert lazy.exit_code == 0
    for name, entry in COMMANDS.items():  # every command listed, in order, with its summary
        assert name in lazy.output
        assert " ".join(_words(entry.summary)[:4]) in " ".join(_words(lazy.output))
    listed = [line.split()[1] for line in lazy.output.splitlines()
              if line.startswith("│ ") and len(line.split()) > 2 and line.split()[1] in COMMANDS]
    assert listed == list(COMMANDS)


def test_listing_the_commands_imports_none_of_them():
    code = ("import sys\nfrom tltcli.cli import main\nsys.argv = ['tlt', '--help']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "heavy = sorted(m for m in ('pandas', 'numpy', 'pyarrow', 'tltsim', 'tltcli.sim', 'tltcore.policy')"
            " if m in sys.modules)\nprint('HEAVY', heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out


def test_a_command_runs_and_a_mistyped_one_is_one_line():
    runner = CliRunner()
    assert runner.invoke(app, ["model", "list"]).exit_code == 0
    bad = runner.invoke(app, ["simm"])
    assert bad.exit_code == 2 and "No such command" in bad.output and "Did you mean 'sim'?" in bad.output


def test_a_trace_command_leaves_the_scenario_schema_unimported():
    """``tlt trace`` shows the ``trace.*`` scenario fields in its help; they are written when the help
    is shown, so ``tlt trace list`` (or ``stats``) starts without the scenario schema and the policy
    and cost modules it pulls in (a fifth of their start)."""
    code = ("import sys\nfrom tltcli.cli import main\nsys.argv = ['tlt', 'trace', 'list']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('HEAVY', sorted(m for m in ('tltsim.scenario', 'tltcore.policy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out

"""Hostile output paths for every tlt command that writes a results folder.

Each case is one command (``WRITERS``) crossed with one hostile ``--out`` (``TARGETS``) or one
output that overlaps what the command reads (``OVERLAPS``). Every case must end the way bad input
ends everywhere in tlt: exit 2, exactly one ``tlt: error:`` line naming ``--out``, no traceback, the
file system exactly as it was (every file's bytes compared), and all of it before any work, in well
under :data:`BOUND_S` seconds. The three data-loss cases of issue 21 are here by name:
``report-replaces-its-run``, ``report-plants-inside-its-run`` and ``trace-plot-into-users-folder``.

The commands read only inputs that ship with the repository (our own trace ``tlt_grpo_arith_seed0``,
bundled scenarios), so the corpus runs in a clone without ``../shared``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_output_safety import snapshot

from conftest import invoke_bounded
from tltcore.atomic import MARKER, atomic_dir

BOUND_S = 20.0
TRACE = "tlt_grpo_arith_seed0"
SPEC = """name = "tiny"
base = "aime_qwen7b_64xh100"
[scenario]
trace.name = "tlt_grpo_arith_seed0"
[[axes]]
kind = "grid"
policies = ["no-sd"]
"""


def _run_folder(root: Path) -> str:
    """A `tlt sim run` results folder (what `tlt report` reads), made without simulating."""
    with atomic_dir(root / "run", kind="sim-run") as d:
        (d / "summary.csv").write_text("policy,makespan_s\nno-sd,1.0\n")
        (d / "events.parquet").write_bytes(b"PAR1")
        (d / "scenario.resolved.toml").write_text("seed = 0\n")
    return "run"


def _spec(root: Path) -> str:
    (root / "tiny.toml").write_text(SPEC)
    return "tiny.toml"


#: command -> (its tlt kind, how to build its argv from the --out text and the case's root folder)
WRITERS: dict[str, tuple[str, Callable[[str, Path], list[str]]]] = {
    "sim run": ("sim-run", lambda out, root: ["sim", "run", "--trace", TRACE, "--policy", "no-sd",
                                              "--perfetto", "off", "--out", out]),
    "demo": ("demo", lambda out, root: ["demo", "--trace", TRACE, "--out", out]),
    "report": ("report", lambda out, root: ["report", _run_folder(root), "--out", out]),
    "validate": ("validation", lambda out, root: ["validate", "--out", out]),
    "trace plot": ("trace-plot", lambda out, root: ["trace", "plot", TRACE, "--out", out]),
    "real rl": ("real-rl", lambda out, root: ["real", "rl", "--tiny", "--out", out]),
    "sweep run": ("sweep", lambda out, root: ["sweep", "run", _spec(root), "--out", out]),
}
COMMANDS = (*WRITERS, "real generate", "real profile")


def _user_folder(root: Path, kind: str) -> str:
    (root / "mydata").mkdir()
    (root / "mydata" / "thesis.tex").write_text("\\chapter{years of work}")
    return "mydata"


def _user_file(root: Path, kind: str) -> str:
    (root / "notes.txt").write_text("keep me")
    return "notes.txt"


def _under_file(root: Path, kind: str) -> str:
    (root / "notes.txt").write_text("keep me")
    return "notes.txt/out"


def _cwd(root: Path, kind: str) -> str:
    (root / "keep.txt").write_text("keep me")
    return "."


def _parent(root: Path, kind: str) -> str:
    (root / "sub").mkdir()
    return ".."


def _empty(root: Path, kind: str) -> str:
    return ""


def _long(root: Path, kind: str) -> str:
    return "x" * 300


def _broken_link(root: Path, kind: str) -> str:
    (root / "link").symlink_to(root / "nowhere")
    return "link"


def _other_kind(root: Path, kind: str) -> str:
    """Another command's results: a report must not replace a run, nor a run a report."""
    other = "report" if kind == "sim-run" else "sim-run"
    with atomic_dir(root / "theirs", kind=other) as d:
        (d / "summary.csv").write_text("policy\nno-sd\n")
    return "theirs"


def _legacy_marker(root: Path, kind: str) -> str:
    """A results folder of a tlt that did not record kinds: which command wrote it is unknown."""
    (root / "old").mkdir()
    (root / "old" / "summary.csv").write_text("policy\nno-sd\n")
    (root / "old" / MARKER).write_text(json.dumps({"tool": "tlt", "version": "0.2.0", "entries": ["summary.csv"]}))
    return "old"


def _own_kind_plus_user_file(root: Path, kind: str) -> str:
    if kind == "sweep":  # a sweep folder is the sweep's own append-only store: covered in test_sweep
        return _user_folder(root, kind)
    with atomic_dir(root / "mine", kind=kind) as d:
        (d / "README.md").write_text("tlt wrote this")
    (root / "mine" / "my-notes.md").write_text("the user added this")
    return "mine"


TARGETS: dict[str, Callable[[Path, str], str]] = {
    "users-folder": _user_folder, "users-file": _user_file, "under-a-file": _under_file, "current-folder": _cwd,
    "parent-folder": _parent, "empty": _empty, "long-name": _long, "broken-link": _broken_link,
    "other-commands-results": _other_kind, "kindless-old-results": _legacy_marker,
    "own-results-plus-users-file": _own_kind_plus_user_file,
}


@dataclass(frozen=True)
class Case:
    id: str
    argv: Callable[[Path], list[str]]  # builds the files and returns the argv; cwd is the case's root
    expect: str = "--out"


def _cross(command: str, target: str) -> Case:
    kind, build = WRITERS[command]
    make = TARGETS[target]
    name = f"{command.replace(' ', '-')}:{target}"
    if (command, target) == ("trace plot", "users-folder"):
        name = "trace-plot-into-users-folder"
    return Case(name, lambda root: build(make(root, kind), root))


def _report_into_run(root: Path) -> list[str]:
    return ["report", _run_folder(root), "--out", "run"]


def _report_inside_run(root: Path) -> list[str]:
    return ["report", _run_folder(root), "--out", "run/inner"]


def _report_around_run(root: Path) -> list[str]:
    (root / "a").mkdir()
    _run_folder(root / "a")
    return ["report", "a/run", "--out", "a"]


def _report_same_via_link(root: Path) -> list[str]:
    run = _run_folder(root)
    (root / "alias").symlink_to(root / run)
    return ["report", run, "--out", "alias"]


def _sim_scenario_inside_out(root: Path) -> list[str]:
    with atomic_dir(root / "r", kind="sim-run") as d:
        (d / "scenario.resolved.toml").write_text('policies = ["no-sd"]\n[trace]\nname = "tlt_grpo_arith_seed0"\n')
    return ["sim", "run", "--scenario", "r/scenario.resolved.toml", "--perfetto", "off", "--out", "r"]


def _demo_scenario_inside_out(root: Path) -> list[str]:
    with atomic_dir(root / "d", kind="demo") as d:
        (d / "scenario.resolved.toml").write_text('policies = ["no-sd"]\n[trace]\nname = "tlt_grpo_arith_seed0"\n')
    return ["demo", "--scenario", "d/scenario.resolved.toml", "--trace", TRACE, "--out", "d"]


def _plot_trace_inside_out(root: Path) -> list[str]:
    with atomic_dir(root / "p", kind="trace-plot") as d:
        (d / "t.csv").write_text("prompt_id,response_tokens\np,5\np,7\n")
    return ["trace", "plot", "p/t.csv", "--out", "p"]


def _validate_scenario_inside_out(root: Path) -> list[str]:
    with atomic_dir(root / "v", kind="validation") as d:
        (d / "s.toml").write_text('policies = ["no-sd"]\n')
    return ["validate", "--scenario", "v/s.toml", "--out", "v"]


def _rl_pretrained_is_out(root: Path) -> list[str]:
    with atomic_dir(root / "pre", kind="model") as d:
        (d / "config.json").write_text("{}")
    return ["real", "rl", "--tiny", "--pretrained", "pre", "--out", "pre"]


OVERLAPS: list[Case] = [
    Case("report-replaces-its-run", _report_into_run),
    Case("report-plants-inside-its-run", _report_inside_run),
    Case("report-around-its-run", _report_around_run),
    Case("report-into-a-link-to-its-run", _report_same_via_link),
    Case("sim-run-replaces-its-scenario", _sim_scenario_inside_out),
    Case("demo-replaces-its-scenario", _demo_scenario_inside_out),
    Case("trace-plot-replaces-its-trace", _plot_trace_inside_out),
    Case("validate-replaces-its-scenario", _validate_scenario_inside_out),
    Case("real-rl-replaces-its-pretrained-policy", _rl_pretrained_is_out),
]

#: Targets a sweep folder reports in its own words ("is not a tlt sweep folder"), still naming --out.
CASES: list[Case] = [_cross(c, t) for c in WRITERS for t in TARGETS] + OVERLAPS


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_output_is_one_line_exit_2_and_nothing_changes(case: Case, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "root"
    root.mkdir()
    monkeypatch.chdir(root)
    argv = case.argv(root)
    before = snapshot(tmp_path)
    start = time.process_time()  # CPU time: the case's work, which a loaded machine does not stretch
    res = invoke_bounded(BOUND_S * 3, *argv)
    elapsed = time.process_time() - start
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, (argv, res.returncode, res.stdout[-500:], res.stderr[-2000:])
    assert "Traceback" not in res.stderr + res.stdout
    assert len(lines) == 1 and lines[0].startswith("tlt: error:"), res.stderr
    assert case.expect in lines[0], lines[0]
    assert snapshot(tmp_path) == before, "a refused command changed the file system"
    assert elapsed < BOUND_S, f"refused only after {elapsed:.1f} s: check --out before the work"


def test_every_writer_meets_every_target() -> None:
    assert len(CASES) == len(WRITERS) * len(TARGETS) + len(OVERLAPS)
    assert {"report-replaces-its-run", "report-plants-inside-its-run", "trace-plot-into-users-folder"} <= {
        c.id for c in CASES}

"""Hostile inputs for ``tlt sweep run``, ``tlt sweep status``, ``tlt sweep points`` and ``tlt report``.

One data-driven corpus (:data:`CASES`), one contract per case:

* ``error``: exit code 2, exactly one stderr line, starting ``tlt: error:`` and naming the file or
  field (``words``); no traceback; every file under the case's folder byte for byte as before
  (nothing written, nothing lost).
* ``warning``: the right answer is to recover. Exit code 0 and exactly one ``tlt: warning:`` line
  naming the damaged file; the folder is unchanged (a reader only reads), or, for a command that
  repairs, ``recovered`` asserts exactly what changed (the damaged part moved aside with its bytes,
  only its point evaluated again).
* ``usage``: a malformed option value is refused by the option parser itself (click's message as one line, exit
  2), before tlt runs; nothing written.

Every case runs in-process under a SIGALRM bound (``timeout_s``): a command that blocks (a FIFO given
as a spec used to wait forever for a writer) fails the case instead of hanging the suite. Each case
runs in its own temp folder, which is also the working directory, so default output paths land where
the snapshot sees them.

No ``from __future__ import annotations``: the corpus-coverage test loads this module without
registering it in ``sys.modules``, where ``dataclasses`` cannot resolve string annotations.
"""

import os
import shutil
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from conftest import invoke_bounded, invoke_cli
from tltsim.sweep import SweepStore, load_spec, run_sweep

COMMANDS = ("sweep run", "sweep status", "sweep points", "report")

TINY = """
[scenario]
policies = ["elastic+beg-mab"]
trace.name = "intern_s1_math"
trace.prompts_per_step = 2
cluster.gpus = 8
"""
GOOD_AXES = '[[axes]]\n"seed" = [1, 2]\n'


# ---- the case folder --------------------------------------------------------------------------------
@dataclass
class Ctx:
    """One case's folder and the prebuilt results it may copy in; ``notes`` carries what ``make``
    learnt (a damaged file's name, the attempts before a run) to ``words`` and ``recovered``."""

    tmp: Path
    built: dict[str, Path]
    notes: dict[str, Any] = field(default_factory=dict)

    def spec(self, body: str = GOOD_AXES, name: str = "spec.toml") -> Path:
        path = self.tmp / name
        path.write_text(TINY + body, encoding="utf-8")
        return path

    def sweep(self) -> Path:
        """A finished two-point sweep, one part file per point, with its spec beside it."""
        shutil.copy(self.built["spec"], self.tmp / "spec.toml")
        dest = self.tmp / "sweep"
        shutil.copytree(self.built["sweep"], dest)
        self.notes["parts"] = sorted((dest / "results").glob("part-*.parquet"))
        self.notes["attempts"] = _attempts(dest)
        return dest

    def run(self) -> Path:
        """A finished `tlt sim run` rollout folder."""
        dest = self.tmp / "run"
        shutil.copytree(self.built["run"], dest)
        return dest


def _attempts(sweep: Path) -> dict[str, str]:
    rows = SweepStore(sweep).read()
    return dict(zip(rows["key"], rows["attempt"], strict=True))


# ---- the cases ----------------------------------------------------------------------------------------
Make = Callable[[Ctx], list[str]]


@dataclass(frozen=True)
class Case:
    """One hostile input: ``make`` builds it under the case folder and returns the arguments after
    the command; ``words`` (formatted with ``tmp`` and ``ctx.notes``) must appear in the one line."""

    id: str
    command: str
    make: Make
    words: tuple[str, ...] = ()
    outcome: str = "error"  # error | warning | usage
    recovered: Callable[[Ctx, subprocess.CompletedProcess], None] | None = None
    warnings_before_error: int = 0  # an error that follows warnings about files it could not use
    xfail: str | None = None
    timeout_s: float = 30.0


def _spec_text(body: str | bytes) -> Callable[[Ctx], Path]:
    def make(ctx: Ctx) -> Path:
        path = ctx.tmp / "spec.toml"
        if isinstance(body, bytes):
            path.write_bytes(body)
        else:
            path.write_text(body, encoding="utf-8")
        return path
    return make


def _fifo(ctx: Ctx) -> Path:
    path = ctx.tmp / "spec.toml"
    os.mkfifo(path)
    return path


def _folder(ctx: Ctx) -> Path:
    path = ctx.tmp / "spec.toml"
    path.mkdir()
    return path


_THOUSAND = ", ".join(str(i) for i in range(1000))
#: (id, how to make the spec, the words its error must hold besides the spec's path)
BAD_SPECS: list[tuple[str, Callable[[Ctx], Path], tuple[str, ...]]] = [
    ("toml-syntax", _spec_text(TINY + "[[axes]\nseed = [1\n"), ("not valid TOML",)),
    ("unknown-top-level-key", _spec_text("axis = []\n" + TINY), ("field 'axis'", "did you mean axes")),
    ("unknown-field", _spec_text(TINY + '[[axes]]\n"cluster.gpux" = ["H100"]\n'), ("axes[0].cluster.gpux",)),
    ("section-as-field", _spec_text(TINY + '[[axes]]\n"cluster" = [1]\n'), ("is a section",)),
    ("zip-unequal", _spec_text(TINY + '[[axes]]\nkind = "zip"\n"cluster.gpus" = [4, 8]\n"cluster.tp" = [2]\n'),
     ("equal lengths",)),
    ("wrong-type", _spec_text(TINY + '[[axes]]\n"cluster.gpus" = ["eight"]\n'), ("axes[0].cluster.gpus",)),
    ("bad-kind", _spec_text(TINY + '[[axes]]\nkind = "grd"\nseed = [1]\n'), ("axes[0].kind", "did you mean grid")),
    ("random-without-n", _spec_text(TINY + '[[axes]]\nkind = "random"\n"drafter.quality" = { uniform = [0, 1] }\n'),
     ("axes[0].n",)),
    ("random-n-zero", _spec_text(TINY + '[[axes]]\nkind = "random"\nn = 0\n"drafter.quality" = { uniform = [0, 1] }\n'),
     ("axes[0].n",)),
    ("random-n-huge", _spec_text(TINY + '[[axes]]\nkind = "random"\nn = 100001\n"drafter.quality" = '
                                 '{ uniform = [0, 1] }\n'), ("axes[0].n",)),
    ("random-unknown-distribution", _spec_text(TINY + '[[axes]]\nkind = "random"\nn = 2\n"drafter.quality" = '
                                               '{ normal = [0, 1] }\n'), ("axes[0].drafter.quality",)),
    ("loguniform-from-zero", _spec_text(TINY + '[[axes]]\nkind = "random"\nn = 2\n"cost.sd_overhead_s" = '
                                        '{ loguniform = [0, 1] }\n'), ("loguniform needs low > 0",)),
    ("int-fractional-bounds", _spec_text(TINY + '[[axes]]\nkind = "random"\nn = 2\n"engine.catch_up_limit" = '
                                         '{ int = [1.5, 3] }\n'), ("integer bounds",)),
    ("uniform-reversed", _spec_text(TINY + '[[axes]]\nkind = "random"\nn = 2\n"drafter.quality" = '
                                    '{ uniform = [1, 0] }\n'), ("low <= high",)),
    ("random-seed-negative", _spec_text(TINY + '[[axes]]\nkind = "random"\nn = 2\nseed = -1\n"drafter.quality" = '
                                        '{ uniform = [0.5, 1] }\n'), ("axes[0].seed",)),
    ("field-on-two-axes", _spec_text(TINY + '[[axes]]\nseed = [1]\n[[axes]]\nseed = [2]\n'), ("varied by both",)),
    ("axes-a-number", _spec_text("axes = 5\n" + TINY), ("field 'axes'",)),
    ("axis-a-number", _spec_text("axes = [1, 2]\n" + TINY), ("field 'axes[0]'",)),
    ("empty-list", _spec_text(TINY + "[[axes]]\nseed = []\n"), ("axes[0].seed", "non-empty list")),
    ("scalar-not-list", _spec_text(TINY + "[[axes]]\nseed = 3\n"), ("axes[0].seed", "non-empty list")),
    ("axis-without-fields", _spec_text(TINY + '[[axes]]\nkind = "zip"\n'), ("at least one dotted field",)),
    ("unknown-base", _spec_text('base = "no_such_scenario"\n' + GOOD_AXES), ("no_such_scenario",)),
    ("base-a-number", _spec_text("base = 3\n" + GOOD_AXES), ("field 'base'",)),
    ("scenario-a-number", _spec_text("scenario = 3\n" + GOOD_AXES), ("field 'scenario'",)),
    ("name-a-number", _spec_text("name = 5\n" + TINY + GOOD_AXES), ("field 'name'",)),
    ("over-a-million-points", _spec_text(TINY + f'[[axes]]\nseed = [{_THOUSAND}, 1000]\n"drafter.quality" = '
                                         f'[{_THOUSAND.replace(", ", ".0, ")}.0]\n'), ("1,001,000 points",)),
    ("value-no-point-can-use", _spec_text(TINY + '[[axes]]\n"cluster.gpu" = ["H100", "H2O"]\n'),
     ("axes[0].cluster.gpu", "'H2O'")),
    ("nul-byte", _spec_text(TINY + "[[axes]]\nseed = [1]\x00\n"), ("not valid TOML",)),
    ("not-utf8", _spec_text(b"\xff\xfe[[axes]]\nseed = [1]\n"), ("cannot read",)),
    ("missing-file", lambda ctx: ctx.tmp / "nope.toml", ("not found",)),
    ("a-folder", _folder, ("is a folder",)),
    ("a-fifo", _fifo, ("FIFO",)),
]


def _spec_cases() -> list[Case]:
    """Every bad spec against every command that reads a spec (run, status with --out, points)."""
    cases = []
    for name, make_spec, words in BAD_SPECS:
        for command, extra in (("sweep run", ["--out", "out"]), ("sweep status", ["--out", "out"]),
                               ("sweep points", [])):
            def make(ctx: Ctx, make_spec: Callable[[Ctx], Path] = make_spec, extra: list[str] = extra) -> list[str]:
                path = make_spec(ctx)
                ctx.notes["spec"] = path
                return [str(path), *extra]
            expect = ("{spec}", *words)
            if command == "sweep status" and name == "a-folder":  # to status, a folder is a sweep folder
                expect = ("--out", "not both")
            cases.append(Case(f"{command.replace(' ', '-')}:spec-{name}", command, make, expect))
    return cases


# -- damaged sweep folders
def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[:120])


def _garbage(p: Path) -> None:
    p.write_bytes(b"PAR1" + bytes(range(256)) * 4 + b"PAR1")


def _empty(p: Path) -> None:
    p.write_bytes(b"")


def _wrong_columns(p: Path) -> None:
    pd.DataFrame({"colour": ["red"], "n": [1]}).to_parquet(p)


DAMAGE = {"truncated": _truncate, "garbage": _garbage, "zero-bytes": _empty, "wrong-columns": _wrong_columns}


def _damaged_part(how: Callable[[Path], None]) -> Callable[[Ctx], Path]:
    def make(ctx: Ctx) -> Path:
        sweep = ctx.sweep()
        part = ctx.notes["parts"][0]
        how(part)
        ctx.notes["file"] = part
        ctx.notes["bytes"] = part.read_bytes()
        ctx.notes["hit"] = pd.read_parquet(ctx.built["sweep"] / "results" / part.name)["key"].iloc[0]
        return sweep
    return make


def _damaged_points(how: Callable[[Path], None] | None) -> Callable[[Ctx], Path]:
    def make(ctx: Ctx) -> Path:
        sweep = ctx.sweep()
        target = sweep / "points.parquet"
        if how is None:
            target.unlink()
            os.mkfifo(target)
        else:
            how(target)
        ctx.notes["file"] = target
        return sweep
    return make


def _part_recomputed(ctx: Ctx, proc: subprocess.CompletedProcess) -> None:
    """Only the damaged part's point ran again; the part was moved aside with its bytes."""
    sweep, part = ctx.tmp / "sweep", ctx.notes["file"]
    moved = part.with_name(part.name + ".damaged")
    assert not part.exists() and moved.read_bytes() == ctx.notes["bytes"]
    assert "moved aside" in proc.stderr
    assert "2 points: 1 done before, 1 ok and 0 failed now, 0 pending" in proc.stdout, proc.stdout
    after, before = _attempts(sweep), ctx.notes["attempts"]
    assert set(after) == set(before)
    assert {k for k in before if before[k] != after[k]} == {ctx.notes["hit"]}


def _points_rebuilt(ctx: Ctx, proc: subprocess.CompletedProcess) -> None:
    sweep = ctx.tmp / "sweep"
    rebuilt = pd.read_parquet(sweep / "points.parquet")
    pd.testing.assert_frame_equal(rebuilt, pd.read_parquet(ctx.built["sweep"] / "points.parquet"))
    assert "rebuilt from the spec" in proc.stderr and _attempts(sweep) == ctx.notes["attempts"]


def _only_new(folder: str) -> Callable[[Ctx, subprocess.CompletedProcess], None]:
    """A report that went on: everything but its new ``folder`` is byte for byte as before."""
    def check(ctx: Ctx, proc: subprocess.CompletedProcess) -> None:
        before, after = ctx.notes["before"], snapshot(ctx.tmp)
        new = {k for k in after if k == folder or k.startswith(folder + "/")}
        assert {k: v for k, v in after.items() if k not in new} == before
        assert f"{folder}/README.md" in new
    return check


def _sweep_cases() -> list[Case]:
    cases = []
    for name, how in DAMAGE.items():
        damaged = _damaged_part(how)
        cases += [
            Case(f"sweep-status:part-{name}", "sweep status", lambda ctx, d=damaged: [str(d(ctx))],
                 ("{file}", "is damaged"), outcome="warning"),
            Case(f"sweep-status-json:part-{name}", "sweep status", lambda ctx, d=damaged: [str(d(ctx)), "--json"],
                 ("{file}",), outcome="warning"),
            Case(f"sweep-points:part-{name}", "sweep points",
                 lambda ctx, d=damaged: [str(ctx.tmp / "spec.toml"), "--out", str(d(ctx))], ("{file}",),
                 outcome="warning"),
            Case(f"sweep-run:part-{name}", "sweep run",
                 lambda ctx, d=damaged: [str(ctx.tmp / "spec.toml"), "--out", str(d(ctx)), "--workers", "1"],
                 ("{file}", "moved aside"), outcome="warning", recovered=_part_recomputed, timeout_s=90),
        ]
    for name, how in (("truncated", _truncate), ("garbage", _garbage), ("fifo", None)):
        damaged = _damaged_points(how)
        cases += [
            Case(f"sweep-status:points-{name}", "sweep status", lambda ctx, d=damaged: [str(d(ctx))],
                 ("{file}", "is damaged"), outcome="warning"),
            Case(f"sweep-run:points-{name}", "sweep run",
                 lambda ctx, d=damaged: [str(ctx.tmp / "spec.toml"), "--out", str(d(ctx)), "--workers", "1"],
                 ("{file}", "rebuilt"), outcome="warning", recovered=_points_rebuilt, timeout_s=90),
        ]
    return cases


def _sweep_json(text: str | None) -> Make:
    def make(ctx: Ctx) -> list[str]:
        sweep = ctx.sweep()
        if text is None:
            (sweep / "sweep.json").unlink()
            os.mkfifo(sweep / "sweep.json")
        else:
            (sweep / "sweep.json").write_text(text, encoding="utf-8")
        ctx.notes["sweep"] = sweep
        return [str(sweep)]
    return make


def _no_points(ctx: Ctx) -> list[str]:
    sweep = ctx.sweep()
    (sweep / "points.parquet").unlink()
    return [str(sweep)]


def _user_folder(ctx: Ctx) -> Path:
    mine = ctx.tmp / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    return mine


def _a_file(ctx: Ctx) -> Path:
    path = ctx.tmp / "notes.txt"
    path.write_text("mine")
    return path


def _run_args(*extra: str) -> Make:
    return lambda ctx: [str(ctx.spec()), "--out", "out", *extra]


OPTION_CASES = [
    Case("sweep-run:limit-zero", "sweep run", _run_args("--limit", "0"), ("--limit", ">= 1")),
    Case("sweep-run:limit-negative", "sweep run", _run_args("--limit", "-3"), ("--limit", ">= 1")),
    Case("sweep-run:limit-text", "sweep run", _run_args("--limit", "many"), ("--limit",), outcome="usage"),
    Case("sweep-run:workers-zero", "sweep run", _run_args("--workers", "0"), ("--workers",)),
    Case("sweep-run:backend-unknown", "sweep run", _run_args("--backend", "slurm"), ("--backend",), outcome="usage"),
    Case("sweep-run:address-without-ray", "sweep run", _run_args("--address", "h:6379"), ("--address",)),
    Case("sweep-run:out-is-a-file", "sweep run", lambda ctx: [str(ctx.spec()), "--out", str(_a_file(ctx))],
         ("notes.txt", "not a folder")),
    Case("sweep-run:out-is-a-users-folder", "sweep run",
         lambda ctx: [str(ctx.spec()), "--out", str(_user_folder(ctx))], ("mine", "not a tlt sweep folder")),
    Case("sweep-status:not-a-sweep-folder", "sweep status", lambda ctx: [str(_user_folder(ctx))],
         ("mine", "not a tlt sweep folder")),
    Case("sweep-status:empty-folder", "sweep status", lambda ctx: [str((ctx.tmp / "e").mkdir() or ctx.tmp / "e")],
         ("not a tlt sweep folder",)),
    Case("sweep-status:sweep-json-garbage", "sweep status", _sweep_json("{oops"), ("{sweep}", "no sweep.json")),
    Case("sweep-status:sweep-json-a-list", "sweep status", _sweep_json("[1, 2]"), ("{sweep}",)),
    Case("sweep-status:sweep-json-fifo", "sweep status", _sweep_json(None), ("{sweep}",)),
    Case("sweep-status:no-points-table", "sweep status", _no_points, ("no points.parquet",)),
    Case("sweep-status:folder-and-out", "sweep status", lambda ctx: [str(ctx.sweep()), "--out", "x"],
         ("--out", "not both")),
    Case("sweep-status:missing-target", "sweep status", lambda ctx: [str(ctx.tmp / "gone")], ("gone", "not found")),
    Case("sweep-points:out-etc", "sweep points", lambda ctx: [str(ctx.spec()), "--out", "/etc"],
         ("/etc", "--out", "not a sweep folder tlt wrote")),
    Case("sweep-points:out-is-a-users-folder", "sweep points",
         lambda ctx: [str(ctx.spec()), "--out", str(_user_folder(ctx))], ("mine", "not a sweep folder tlt wrote")),
    Case("sweep-points:out-is-an-empty-folder", "sweep points",
         lambda ctx: [str(ctx.spec()), "--out", str((ctx.tmp / "e").mkdir() or ctx.tmp / "e")],
         ("not a sweep folder tlt wrote",)),
    Case("sweep-points:out-is-a-file", "sweep points", lambda ctx: [str(ctx.spec()), "--out", str(_a_file(ctx))],
         ("notes.txt", "not a sweep folder tlt wrote")),
    Case("sweep-status:spec-out-is-a-users-folder", "sweep status",
         lambda ctx: [str(ctx.spec()), "--out", str(_user_folder(ctx))], ("mine", "not a sweep folder tlt wrote")),
    Case("sweep-points:show-negative", "sweep points", lambda ctx: [str(ctx.spec()), "--show", "-1"], ("--show",)),
    Case("sweep-points:show-text", "sweep points", lambda ctx: [str(ctx.spec()), "--show", "all"], ("--show",),
         outcome="usage"),
]


# -- report
def _tlt_folder(ctx: Ctx, kind: str) -> Path:
    """A results folder another tlt command wrote (as `tlt advise` writes one: README.md, the scenario
    advised on and the recommended one), which `tlt report` cannot render."""
    from tltcore.atomic import atomic_dir

    with atomic_dir(ctx.tmp / "folder", kind=kind) as d:
        for name in ("README.md", "scenario.resolved.toml", "recommended.toml", "ranking.csv"):
            (d / name).write_text("x\n")
    return ctx.tmp / "folder"


def _summary(edit: Callable[[pd.DataFrame], pd.DataFrame] | None = None, raw: bytes | None = None) -> Make:
    def make(ctx: Ctx) -> list[str]:
        run = ctx.run()
        path = run / "summary.csv"
        if raw is not None:
            path.write_bytes(raw)
        elif edit is not None:
            edit(pd.read_csv(path)).to_csv(path, index=False)
        ctx.notes["file"] = path
        return [str(run), "--out", str(ctx.tmp / "rep")]
    return make


def _run_file(name: str, how: Callable[[Path], None]) -> Make:
    def make(ctx: Ctx) -> list[str]:
        run = ctx.run()
        how(run / name)
        ctx.notes["file"] = run / name
        return [str(run), "--out", str(ctx.tmp / "rep")]
    return make


def _to_fifo(p: Path) -> None:
    p.unlink()
    os.mkfifo(p)


def _to_folder(p: Path) -> None:
    p.unlink()
    p.mkdir()


def _all_parts_damaged(ctx: Ctx) -> list[str]:
    sweep = ctx.sweep()
    for p in ctx.notes["parts"]:
        _truncate(p)
    return [str(sweep), "--out", str(ctx.tmp / "rep")]


def _no_results(ctx: Ctx) -> list[str]:
    sweep = ctx.sweep()
    for p in ctx.notes["parts"]:
        p.unlink()
    return [str(sweep), "--out", str(ctx.tmp / "rep")]


def _results_without_speedup(ctx: Ctx) -> list[str]:
    sweep = ctx.sweep()
    for p in ctx.notes["parts"]:
        df = pd.read_parquet(p)
        df.drop(columns=["speedup", "policy"]).to_parquet(p, index=False)
    return [str(sweep), "--out", str(ctx.tmp / "rep")]


def _report_damaged_part(ctx: Ctx) -> list[str]:
    sweep = _damaged_part(_garbage)(ctx)
    ctx.notes["before"] = snapshot(ctx.tmp)
    return [str(sweep), "--out", str(ctx.tmp / "rep")]


def _only_summary(ctx: Ctx) -> list[str]:
    folder = ctx.tmp / "half"
    folder.mkdir()
    (folder / "summary.csv").write_text("policy,step\nno-sd,0\n")
    return [str(folder), "--out", str(ctx.tmp / "rep")]


REPORT_CASES = [
    Case("report:missing-folder", "report", lambda ctx: [str(ctx.tmp / "gone"), "--out", str(ctx.tmp / "rep")],
         ("gone", "no such folder")),
    Case("report:empty-folder", "report",
         lambda ctx: [str((ctx.tmp / "e").mkdir() or ctx.tmp / "e"), "--out", str(ctx.tmp / "rep")],
         ("neither a sweep folder",)),
    Case("report:a-users-folder", "report", lambda ctx: [str(_user_folder(ctx)), "--out", str(ctx.tmp / "rep")],
         ("mine", "neither a sweep folder")),
    Case("report:a-file", "report", lambda ctx: [str(_a_file(ctx)), "--out", str(ctx.tmp / "rep")],
         ("notes.txt",)),
    Case("report:only-a-summary", "report", _only_summary, ("half", "events.parquet")),
    Case("report:summary-lacks-columns", "report", _summary(lambda df: df.drop(columns=["makespan_s",
                                                                                        "idle_fraction"])),
         ("{file}", "makespan_s, idle_fraction")),
    Case("report:summary-lacks-policy", "report", _summary(lambda df: df.drop(columns=["policy"])),
         ("{file}", "lacks column policy")),
    Case("report:summary-header-only", "report", _summary(lambda df: df.iloc[0:0]), ("{file}", "no rows")),
    Case("report:summary-text-for-numbers", "report", _summary(lambda df: df.assign(makespan_s="slow")),
         ("{file}", "row 2", "makespan_s", "'slow'")),
    Case("report:summary-empty-file", "report", _summary(raw=b""), ("{file}", "not a readable CSV")),
    Case("report:summary-binary", "report", _summary(raw=bytes(range(256)) * 8), ("{file}",)),
    Case("report:summary-other-table", "report", _summary(raw=b"a,b\n1,2\n"), ("{file}", "lacks columns")),
    Case("report:summary-fifo", "report", _run_file("summary.csv", _to_fifo), ("{file}", "FIFO")),
    Case("report:summary-a-folder", "report", _run_file("summary.csv", _to_folder), ("{file}", "is a folder")),
    Case("report:events-truncated", "report", _run_file("events.parquet", _truncate),
         ("{file}", "not a readable event log")),
    Case("report:events-other-table", "report", _run_file("events.parquet", _wrong_columns),
         ("{file}", "lacks columns")),
    Case("report:events-fifo", "report", _run_file("events.parquet", _to_fifo), ("{file}", "FIFO")),
    Case("report:scenario-garbage", "report",
         _run_file("scenario.resolved.toml", lambda p: p.write_text("[[[ not toml")), ("{file}",)),
    Case("report:sweep-every-part-damaged", "report", _all_parts_damaged, ("no readable results",),
         warnings_before_error=2),
    Case("report:sweep-without-results", "report", _no_results, ("no results yet",)),
    Case("report:sweep-results-lack-columns", "report", _results_without_speedup, ("lack column(s)",)),
    Case("report:sweep-part-damaged", "report", _report_damaged_part, ("{file}", "is damaged"), outcome="warning",
         recovered=_only_new("rep"), timeout_s=60),
    Case("report:an-advise-folder", "report",
         lambda ctx: [str(_tlt_folder(ctx, "advise")), "--out", str(ctx.tmp / "rep")],
         ("tlt advise", "{tmp}/folder/README.md", "recommended.toml")),
    Case("report:a-demo-folder", "report", lambda ctx: [str(_tlt_folder(ctx, "demo")), "--out", str(ctx.tmp / "rep")],
         ("tlt demo results", "{tmp}/folder/README.md")),
    Case("report:out-is-the-input", "report", lambda ctx: [str(ctx.run()), "--out", str(ctx.tmp / "run")],
         ("--out", "input")),
    Case("report:out-inside-the-input", "report", lambda ctx: [str(ctx.run()), "--out", str(ctx.tmp / "run" / "rep")],
         ("--out", "input")),
    Case("report:out-is-the-sweep", "report", lambda ctx: [str(ctx.sweep()), "--out", str(ctx.tmp / "sweep")],
         ("--out", "input")),
    Case("report:out-contains-the-input", "report", lambda ctx: [str(ctx.run()), "--out", str(ctx.tmp)],
         ("--out",)),
]

CASES: list[Case] = [*_spec_cases(), *_sweep_cases(), *OPTION_CASES, *REPORT_CASES]


# ---- running a case ---------------------------------------------------------------------------------
def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: a file's bytes, a link's target, what else it is (never opened)."""
    out: dict[str, tuple] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        mode = p.lstat().st_mode
        if stat.S_ISLNK(mode):
            out[rel] = ("link", os.readlink(p))
        elif stat.S_ISDIR(mode):
            out[rel] = ("dir",)
        elif stat.S_ISREG(mode):
            out[rel] = ("file", p.read_bytes())
        else:
            out[rel] = ("special", stat.S_IFMT(mode))
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """Built once: a finished two-point sweep split into one part per point, and a rollout run."""
    root = tmp_path_factory.mktemp("hostile-built")
    spec = root / "spec.toml"
    spec.write_text(TINY + GOOD_AXES, encoding="utf-8")
    sweep = root / "sweep"
    run_sweep(load_spec(spec), sweep, workers=1)
    store = SweepStore(sweep)
    rows, merged = store.read(), sorted(store.results.glob("part-*.parquet"))
    for key, group in rows.groupby("key"):
        store.write_point(group.reset_index(drop=True), key)
    for p in merged:
        p.unlink()
    run = root / "run"
    res = invoke_cli("sim", "run", "--trace", "intern_s1_math", "--set", "trace.prompts_per_step=2", "--set",
                     "cluster.gpus=8", "--steps", "1", "--out", str(run))
    assert res.returncode == 0, res.stderr
    return {"spec": spec, "sweep": sweep, "run": run}


def _params() -> list:
    return [pytest.param(c, id=c.id, marks=[pytest.mark.xfail(reason=c.xfail, strict=False)] if c.xfail else [])
            for c in CASES]


def test_the_corpus_covers_every_command_and_is_large():
    assert {c.command for c in CASES} == set(COMMANDS)
    assert len(CASES) >= 60 and len({c.id for c in CASES}) == len(CASES)
    assert all(c.outcome in ("error", "warning", "usage") for c in CASES)


@pytest.mark.parametrize("case", _params())
def test_hostile_input(case: Case, built, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # default outputs (results/sweeps/...) land inside the snapshot
    ctx = Ctx(tmp_path, built)
    args = case.make(ctx)
    before = snapshot(tmp_path)
    proc = invoke_bounded(case.timeout_s, *case.command.split(), *args)
    after = snapshot(tmp_path)
    words = [w.format(tmp=tmp_path, **ctx.notes) for w in case.words]
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text, text
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    if case.outcome == "usage":
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("tlt: error:"), proc.stderr
        assert f"see 'tlt {case.command} --help'" in lines[0], lines[0]
        assert all(w in proc.stderr for w in words), (words, proc.stderr)
        assert after == before
        return
    if case.outcome == "error":
        assert proc.returncode == 2, (proc.returncode, text)
        assert len(lines) == 1 + case.warnings_before_error, proc.stderr
        assert all(line.startswith("tlt: warning:") for line in lines[:-1]), proc.stderr
        line = lines[-1]
        assert line.startswith("tlt: error:"), proc.stderr
        assert after == before, "an error case changed files"
    else:
        assert proc.returncode == 0, (proc.returncode, text)
        assert len(lines) == 1 and lines[0].startswith("tlt: warning:"), proc.stderr
        line = lines[0]
        if case.recovered is not None:
            case.recovered(ctx, proc)
        else:
            assert after == before, "a reader changed files"
    missing = [w for w in words if w not in line]
    assert not missing, f"{missing} not in: {line}"

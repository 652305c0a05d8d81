"""Hostile input for `tlt advise`: every bad flag, scenario or output folder is refused before anything is
simulated or written.

Each case in :data:`CASES` is one command line. It must end as bad input ends everywhere in tlt: exit 2,
exactly one stderr line starting with ``tlt: error:`` that names the flag or field, no traceback, and the
case's folder exactly as it was (no report written, no user file replaced, no folder created), within
:data:`BOUND_S` seconds. The cases use the ``intern_s1_math`` length profile, so they need no trace files.
(For the integrator: add this module to ``tests/hostile/test_corpus_coverage.py``'s CORPUS and ``advise``
to its EVERY_COMMAND.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_output_safety import snapshot

from conftest import invoke_bounded

BOUND_S = 20.0
COMMANDS = ("advise",)


@dataclass(frozen=True)
class Case:
    id: str
    argv: Callable[[Path], list[str]]
    flag: str  # the flag or field the one error line must name
    words: str = ""  # more words it must hold


def _base(root: Path, *extra: str, out: str | None = None) -> list[str]:
    return ["advise", "--trace", "intern_s1_math", "--gpus", "8", "--tp", "2", "--set", "trace.prompts_per_step=4",
            "--quick", "--out", out or str(root / "report"), *extra]


def _user_folder(root: Path) -> str:
    (root / "mine").mkdir()
    (root / "mine" / "notes.txt").write_text("mine")
    return str(root / "mine")


def _user_file(root: Path) -> str:
    (root / "notes.txt").write_text("mine")
    return str(root / "notes.txt")


def _inside_a_sim_run(root: Path) -> str:
    from tltcore.atomic import atomic_dir

    with atomic_dir(root / "r", kind="sim-run") as d:
        (d / "summary.csv").write_text("policy\n")
    return str(root / "r" / "inner")


def _bad_toml(root: Path) -> str:
    (root / "s.toml").write_text("[cluster\ngpus = 8\n")
    return str(root / "s.toml")


def _unknown_field(root: Path) -> str:
    (root / "s.toml").write_text("[cluster]\ngpus = 8\ntp = 2\nflux_capacitor = 1\n")
    return str(root / "s.toml")


CASES: list[Case] = [
    Case("unknown-scenario", lambda r: ["advise", "--scenario", "no_such_scenario", "--out", str(r / "o")],
         "scenario"),
    Case("malformed-scenario-toml", lambda r: ["advise", "--scenario", _bad_toml(r), "--out", str(r / "o")], "s.toml"),
    Case("scenario-unknown-field", lambda r: ["advise", "--scenario", _unknown_field(r), "--out", str(r / "o")],
         "flux_capacitor"),
    Case("missing-trace", lambda r: ["advise", "--trace", str(r / "nope.csv"), "--out", str(r / "o")], "--trace"),
    Case("gpu-typo", lambda r: _base(r, "--gpu", "H2O"), "cluster.gpu"),
    Case("gpus-not-divisible", lambda r: _base(r, "--gpus", "7"), "gpus"),
    Case("tp-zero", lambda r: _base(r, "--tp", "0"), "tp"),
    Case("unknown-model", lambda r: _base(r, "--model", "Qwen9-1T"), "--model"),
    Case("unknown-drafter", lambda r: _base(r, "--drafter", "medusa"), "--drafter"),
    Case("negative-quality", lambda r: _base(r, "--quality", "-1"), "--quality"),
    Case("bogus-policy", lambda r: _base(r, "--policy", "bogus"), "--policy", "bogus"),
    Case("huge-tree", lambda r: _base(r, "--policy", "static:1000_64_1000"), "--policy"),
    Case("bad-shape", lambda r: _base(r, "--shape", "8_4_999"), "--shape"),
    Case("threshold-zero", lambda r: _base(r, "--threshold", "0"), "--threshold"),
    Case("bad-switch", lambda r: _base(r, "--switch", "sideways"), "--switch"),
    Case("seeds-zero", lambda r: _base(r, "--seeds", "0"), "--seeds"),
    Case("seeds-huge", lambda r: _base(r, "--seeds", "100000"), "--seeds"),
    Case("rl-steps-negative", lambda r: _base(r, "--rl-steps", "-1"), "--rl-steps"),
    Case("workers-zero", lambda r: _base(r, "--workers", "0"), "--workers"),
    Case("unknown-executor", lambda r: _base(r, "--executor", "slurm"), "--executor"),
    Case("address-without-ray", lambda r: _base(r, "--address", "head:6379"), "--address"),
    Case("set-unknown-field", lambda r: _base(r, "--set", "cluster.flux=1"), "cluster.flux"),
    Case("set-bad-value", lambda r: _base(r, "--set", "engine.max_batch=-5"), "engine.max_batch"),
    Case("set-without-equals", lambda r: _base(r, "--set", "engine.max_batch"), "--set"),
    Case("out-onto-user-folder", lambda r: _base(r, out=_user_folder(r)), "--out", "not created by tlt"),
    Case("out-onto-user-file", lambda r: _base(r, out=_user_file(r)), "--out"),
    Case("out-is-cwd", lambda r: _base(r, out="."), "--out"),
    # issue 39's red team: each used to be a traceback, silent, or accepted meaning nothing
    Case("shape-without-underscores", lambda r: _base(r, "--shape", "4-1-4"), "--shape", "depth_topk_verify"),
    Case("shape-that-never-drafts", lambda r: _base(r, "--shape", "0_1_1"), "--shape", "never drafts"),
    Case("shape-off", lambda r: _base(r, "--shape", "off"), "--shape", "no SD"),
    Case("threshold-above-max-batch", lambda r: _base(r, "--threshold", "5000"), "--threshold", "max_batch"),
    Case("two-hundred-thresholds", lambda r: _base(r, *[x for k in range(1, 201) for x in ("--threshold", str(k))]),
         "--threshold", "200 times"),
    Case("quick-with-seeds", lambda r: _base(r, "--seeds", "5"), "--seeds", "--quick runs 1"),
    Case("quick-with-rl-steps", lambda r: _base(r, "--rl-steps", "3"), "--rl-steps", "--quick"),
    Case("out-inside-a-sim-run-folder", lambda r: _base(r, out=_inside_a_sim_run(r)), "--out",
         "inside"),
    Case("ngram-with-quality", lambda r: _base(r, "--drafter", "ngram", "--quality", "0.9"), "drafter.quality",
         "n-gram"),
]


def test_case_ids_are_unique() -> None:
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_advise_is_refused_in_one_line(case: Case, tmp_path: Path) -> None:
    root = tmp_path / "case"
    root.mkdir()
    argv = case.argv(root)
    before = snapshot(root)
    proc = invoke_bounded(BOUND_S, *argv)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("tlt: error:"), proc.stderr
    assert case.flag in lines[0] and case.words in lines[0], lines[0]
    assert snapshot(root) == before

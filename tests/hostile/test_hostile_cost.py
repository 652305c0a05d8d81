"""Hostile input for `tlt cost build`: every bad flag is refused before anything is priced or written.

Each case in :data:`CASES` is one command line. It must end as bad input ends everywhere in tlt:
exit 2, exactly one stderr line starting with ``tlt: error:`` that names the flag, no traceback, and
the case's folder exactly as it was (no table written, no user file replaced, no folder created),
within :data:`BOUND_S` seconds. The refusals all happen before the profiles are read, so the cases need
no GPU profiles.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_output_safety import snapshot

from conftest import invoke_bounded

BOUND_S = 20.0
COMMANDS = ("cost build",)


@dataclass(frozen=True)
class Case:
    id: str
    argv: Callable[[Path], list[str]]
    flag: str  # the flag the one error line must name
    words: str = ""  # more words it must hold


def _base(root: Path, *, gpu: str = "H100", model: str = "Qwen2.5-7B", tp: str = "1",
          out: str | None = None) -> list[str]:
    return ["cost", "build", "--gpu", gpu, "--model", model, "--tp", tp, "--out", out or str(root / "t.parquet")]


def _user_file(root: Path) -> str:
    (root / "mine.parquet").write_bytes(b"PAR1 a user's own table PAR1")
    return str(root / "mine.parquet")


CASES: list[Case] = [
    Case("unknown-gpu", lambda r: _base(r, gpu="TPU-v5"), "--gpu", "unknown GPU"),
    Case("gpu-typo", lambda r: _base(r, gpu="H10O"), "--gpu", "unknown GPU"),
    Case("gpu-without-profiles", lambda r: _base(r, gpu="B200"), "--gpu", "no measured profiles"),
    Case("gpu-table-only", lambda r: _base(r, gpu="cpu-calibrated"), "--gpu", "no measured profiles"),
    Case("unknown-model", lambda r: _base(r, model="Qwen9-1T"), "--model", "unknown model"),
    Case("model-missing-config", lambda r: _base(r, model=str(r / "nope" / "config.json")), "--model"),
    Case("tp-zero", lambda r: _base(r, tp="0"), "--tp", "must be in"),
    Case("tp-negative", lambda r: _base(r, tp="-4"), "--tp", "must be in"),
    Case("tp-not-dividing-heads", lambda r: _base(r, tp="3"), "--tp", "attention heads"),
    Case("tp-huge", lambda r: _base(r, tp="100000"), "--tp", "must be in"),
    Case("out-onto-user-file", lambda r: _base(r, out=_user_file(r)), "--out", "not written by tlt cost build"),
    Case("out-into-missing-folder", lambda r: _base(r, out=str(r / "no" / "such" / "t.parquet")), "--out",
         "does not exist"),
    Case("out-not-parquet", lambda r: _base(r, out=str(r / "t.csv")), "--out", "Parquet"),
    Case("out-is-a-folder", lambda r: _base(r, out=str(r)), "--out"),
    Case("bad-collectives", lambda r: [*_base(r), "--collectives", "psychic"], "--collectives"),
    Case("bad-shape", lambda r: [*_base(r), "--shape", "0_0_0"], "--shape"),
    Case("batch-zero", lambda r: [*_base(r), "--batch", "0"], "--batch"),
]


def test_case_ids_are_unique() -> None:
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_cost_build_is_refused_in_one_line(case: Case, tmp_path: Path) -> None:
    root = tmp_path / "case"
    root.mkdir()
    argv = case.argv(root)
    before = snapshot(root)
    proc = invoke_bounded(BOUND_S, *argv)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("tlt: error:"), proc.stderr
    assert case.flag in lines[0] and case.words in lines[0], lines[0]
    assert snapshot(root) == before

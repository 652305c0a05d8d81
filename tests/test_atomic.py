"""Atomic writes leave either the old file or the complete new one, never a partial file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tltcore.atomic import atomic_dir, write_text, write_with


def test_failed_writer_leaves_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "r.csv"
    write_text(target, "old")

    def broken(p: Path) -> None:
        p.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_with(target, broken)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.csv"]


def commit_then_fail(out: Path, old: tuple[str, str], new: tuple[str, str], error: BaseException) -> None:
    """Write the results folder ``out`` holding ``old`` (name, text), then start a write of ``new``
    into it that ``error`` interrupts (and check that ``error`` comes out of it)."""
    with atomic_dir(out, kind="sim-run") as d:
        (d / old[0]).write_text(old[1])
    with pytest.raises(type(error)), atomic_dir(out, kind="sim-run") as d:
        (d / new[0]).write_text(new[1])
        raise error


def test_atomic_dir_swaps_whole_folder(tmp_path: Path) -> None:
    out = tmp_path / "res"
    commit_then_fail(out, ("a", "1"), ("b", "2"), ValueError("bad input"))
    assert sorted(p.name for p in out.iterdir()) == [".tlt-results.json", "a"]
    with atomic_dir(out, kind="sim-run") as d:
        (d / "c").write_text("3")
    assert sorted(p.name for p in out.iterdir()) == [".tlt-results.json", "c"]
    assert [p.name for p in tmp_path.iterdir()] == ["res"]

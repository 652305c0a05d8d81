"""Output safety: tlt never deletes or renames what it did not create, and writes survive crashes,
signals and concurrent writers.

The path corpus runs ``tlt sim run --out PATH`` (refused targets fail before any simulation, so each
case costs milliseconds) and asserts the contract of every bad input: exit 2, one ``tlt: error:``
line naming ``--out``, no traceback, and the file system exactly as it was.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from test_atomic import commit_then_fail

from conftest import REPO, hang_seconds, invoke_cli, needs_shared_traces
from tltcore.atomic import MARKER, atomic_dir, check_output_dir, read_marker, sweep_stale, write_text, write_with
from tltcore.errors import InputError

SIM = ("sim", "run", "--trace", "polytrace_rl_rollouts", "--step", "0", "--policy", "no-sd", "--perfetto", "off",
       "--seeds", "1")


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None for folders): equal snapshots = nothing lost."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = None
        for f in filenames:
            p = Path(dirpath, f)
            if p.is_symlink():
                out[os.path.relpath(p, root)] = b"link:" + os.readlink(p).encode()
            elif p.is_file():
                out[os.path.relpath(p, root)] = p.read_bytes()
            else:  # a FIFO: reading it would block
                out[os.path.relpath(p, root)] = b"special"
    return out


def _thesis(root: Path) -> str:
    (root / "mydata").mkdir()
    (root / "mydata" / "thesis.tex").write_text("\\chapter{years of work}")
    return "mydata"


def _results_with_user_file(root: Path) -> str:
    with atomic_dir(root / "res", kind="sim-run") as d:
        (d / "summary.csv").write_text("a\n1\n")
    (root / "res" / "notes.md").write_text("mine")
    return "res"


def _file(root: Path) -> str:
    (root / "f.txt").write_text("keep me")
    return "f.txt"


def _under_file(root: Path) -> str:
    (root / "f.txt").write_text("keep me")
    return "f.txt/sub"


def _deep_under_file(root: Path) -> str:
    (root / "f.txt").write_text("keep me")
    return "f.txt/a/b/c"


def _readonly_parent(root: Path) -> str:
    (root / "ro").mkdir()
    (root / "ro").chmod(0o555)
    return "ro/out"


def _readonly_target(root: Path) -> str:
    (root / "rot").mkdir()
    (root / "rot").chmod(0o555)
    return "rot"


def _fake_marker(root: Path) -> str:
    (root / "fake").mkdir()
    (root / "fake" / MARKER).write_text("not json")
    (root / "fake" / "data.csv").write_text("1")
    return "fake"


def _foreign_marker(root: Path) -> str:
    (root / "other").mkdir()
    (root / "other" / MARKER).write_text(json.dumps({"tool": "other", "entries": ["data.csv"]}))
    (root / "other" / "data.csv").write_text("1")
    return "other"


def _hidden_only(root: Path) -> str:
    (root / "h").mkdir()
    (root / "h" / ".git").mkdir()
    return "h"


def _symlink_to_user_dir(root: Path) -> str:
    (root / "real").mkdir()
    (root / "real" / "paper.pdf").write_bytes(b"%PDF")
    (root / "link").symlink_to(root / "real")
    return "link"


def _broken_symlink(root: Path) -> str:
    (root / "dangling").symlink_to(root / "nowhere")
    return "dangling"


def _symlink_to_file(root: Path) -> str:
    (root / "f.txt").write_text("keep me")
    (root / "lf").symlink_to(root / "f.txt")
    return "lf"


def _fifo(root: Path) -> str:
    os.mkfifo(root / "pipe")
    return "pipe"


def _home_like(root: Path) -> str:
    for name in ("Documents", "Desktop", ".bashrc"):
        (root / "home" / name).parent.mkdir(exist_ok=True)
        if name.startswith("."):
            (root / "home" / name).write_text("alias ll='ls -l'")
        else:
            (root / "home" / name).mkdir()
    return "home"


def _nested_user_dir(root: Path) -> str:
    (root / "proj" / "src").mkdir(parents=True)
    (root / "proj" / "src" / "main.py").write_text("print(1)")
    return "proj"


def _results_parent(root: Path) -> str:
    """A folder holding earlier tlt results (each marked) is not itself a results folder."""
    for name in ("a1", "b2"):
        with atomic_dir(root / "results" / name, kind="sim-run") as d:
            (d / "summary.csv").write_text("x")
    return "results"


def _nothing(root: Path) -> str:
    return ""


def _dot(root: Path) -> str:
    (root / "x").write_text("1")
    return "."


def _dotdot(root: Path) -> str:
    (root / "sub").mkdir()
    return ".."


def _long_name(root: Path) -> str:
    return "a" * 300


def _long_path(root: Path) -> str:
    return "/".join(["d" * 200] * 22)


def _long_name_under(root: Path) -> str:
    (root / "ok").mkdir()
    return "ok/" + "é" * 200  # 400 bytes in UTF-8


def _nul(root: Path) -> str:
    return "a\x00b"


def _slash_root(root: Path) -> str:
    return "/"


def _proc(root: Path) -> str:
    return "/proc/self"


def _dev_null(root: Path) -> str:
    return "/dev/null"


def _etc(root: Path) -> str:
    return "/etc"


def _user_file_named_like_output(root: Path) -> str:
    (root / "summary.csv").mkdir()  # a folder where tlt would write a file: not tlt's, not empty?
    (root / "summary.csv" / "x").write_text("1")
    return "summary.csv"


def _marked_with_extra_dir(root: Path) -> str:
    with atomic_dir(root / "r2", kind="sim-run") as d:
        (d / "summary.csv").write_text("x")
    (root / "r2" / "figures").mkdir()
    return "r2"


def _marked_entries_not_list(root: Path) -> str:
    (root / "m").mkdir()
    (root / "m" / MARKER).write_text(json.dumps({"tool": "tlt", "entries": "everything"}))
    (root / "m" / "thesis.tex").write_text("x")
    return "m"


def _dir_cwd_parent(root: Path) -> str:
    return str(root.parent)


# (name, set-up returning the --out text, what the error must say)
REFUSED: list[tuple[str, Callable[[Path], str], str]] = [
    ("thesis", _thesis, "not created by tlt"),
    ("results-plus-user-file", _results_with_user_file, "notes.md"),
    ("existing-file", _file, "not a folder"),
    ("under-file", _under_file, "is a file"),
    ("deep-under-file", _deep_under_file, "is a file"),
    ("readonly-parent", _readonly_parent, "not writable"),
    ("readonly-target", _readonly_target, "not writable"),
    ("garbage-marker", _fake_marker, "not created by tlt"),
    ("other-tools-marker", _foreign_marker, "not created by tlt"),
    ("hidden-only", _hidden_only, ".git"),
    ("symlink-to-user-dir", _symlink_to_user_dir, "not created by tlt"),
    ("broken-symlink", _broken_symlink, "broken symbolic link"),
    ("symlink-to-file", _symlink_to_file, "not a folder"),
    ("fifo", _fifo, "not a folder"),
    ("home-like", _home_like, "not created by tlt"),
    ("nested-user-dir", _nested_user_dir, "not created by tlt"),
    ("folder-of-results", _results_parent, "not created by tlt"),
    ("empty-string", _nothing, "current folder"),
    ("dot", _dot, "current folder"),
    ("dotdot", _dotdot, "current folder"),
    ("long-name", _long_name, "255"),
    ("long-path", _long_path, "too long"),
    ("long-utf8-name", _long_name_under, "255"),
    ("root", _slash_root, "--out"),
    ("proc", _proc, "--out"),
    ("dev-null", _dev_null, "not a folder"),
    ("etc", _etc, "not created by tlt"),
    ("folder-named-like-a-file", _user_file_named_like_output, "not created by tlt"),
    ("marked-plus-user-folder", _marked_with_extra_dir, "figures"),
    ("marker-entries-not-a-list", _marked_entries_not_list, "not created by tlt"),
    ("parent-of-cwd", _dir_cwd_parent, "current folder"),
]


@pytest.mark.parametrize("name,setup,expect", REFUSED, ids=[c[0] for c in REFUSED])
def test_refused_out_is_one_line_exit_2_and_nothing_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             name: str, setup: Callable[[Path], str],
                                                             expect: str) -> None:
    if os.geteuid() == 0 and name.startswith("readonly"):
        pytest.skip("root ignores permission bits")
    work = tmp_path / "work"
    work.mkdir()
    out = setup(work)
    monkeypatch.chdir(work if name != "dotdot" else work / "sub")
    before = snapshot(tmp_path)
    res = invoke_cli(*SIM, "--out", out)
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tlt: error:") and "--out" in lines[0], res.stderr
    assert expect in lines[0], lines[0]
    assert "Traceback" not in res.stderr
    assert snapshot(tmp_path) == before


def test_refused_in_milliseconds_before_simulating(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("x")
    t0 = time.process_time()  # CPU time: a loaded machine stretches wall time, not the work done
    res = invoke_cli("sim", "run", "--scenario", "dapo_qwen32b_polytrace", "--steps", "5", "--out",
                     str(tmp_path / "f.txt"))
    assert res.returncode == 2 and time.process_time() - t0 < 2.0


@needs_shared_traces()
def test_sim_run_never_deletes_a_file_it_did_not_write(tmp_path: Path) -> None:
    """The issue's reproduction, then --force: the new results land beside thesis.tex, which survives."""
    mydata = tmp_path / "mydata"
    mydata.mkdir()
    (mydata / "thesis.tex").write_text("years")
    res = invoke_cli(*SIM, "--out", str(mydata))
    assert res.returncode == 2 and (mydata / "thesis.tex").read_text() == "years"
    res = invoke_cli(*SIM, "--out", str(mydata), "--force")
    assert res.returncode == 0, res.stderr
    assert (mydata / "thesis.tex").read_text() == "years"
    assert {"summary.csv", "events.parquet", "thesis.tex"} <= {p.name for p in mydata.iterdir()}
    assert read_marker(mydata) is None  # never marked: a later run without --force still refuses
    assert invoke_cli(*SIM, "--out", str(mydata)).returncode == 2
    assert [p.name for p in tmp_path.iterdir()] == ["mydata"]  # no temp folders left


@needs_shared_traces()
def test_results_are_replaced_only_when_tlt_wrote_them(tmp_path: Path) -> None:
    out = tmp_path / "res"
    assert invoke_cli(*SIM, "--out", str(out)).returncode == 0
    first = (out / "summary.csv").read_bytes()
    assert read_marker(out) == ["bound.csv", "events.parquet", "scenario.resolved.toml", "summary.csv", "warnings.csv"]
    assert invoke_cli(*SIM, "--seed", "3", "--out", str(out)).returncode == 0  # ours: replaced whole
    assert (out / "summary.csv").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["res"]
    assert (out / "summary.csv").read_bytes() != first or True  # content may coincide; the swap is the point
    (out / "my-notes.md").write_text("mine")
    res = invoke_cli(*SIM, "--out", str(out))
    assert res.returncode == 2 and "my-notes.md" in res.stderr
    assert (out / "my-notes.md").read_text() == "mine"


@needs_shared_traces()
def test_default_results_folders_of_other_scenarios_survive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Default out is results/sim/<hash>: a second scenario adds a folder, never removes the first."""
    monkeypatch.chdir(tmp_path)
    assert invoke_cli(*SIM).returncode == 0
    assert invoke_cli(*SIM, "--seed", "5").returncode == 0
    assert len(list((tmp_path / "results" / "sim").iterdir())) == 2


def test_empty_existing_folder_and_symlink_to_results_are_used(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with atomic_dir(empty, kind="sim-run") as d:
        (d / "a.txt").write_text("1")
    assert read_marker(empty) == ["a.txt"]
    target = tmp_path / "store" / "r"
    with atomic_dir(target, kind="sim-run") as d:
        (d / "a.txt").write_text("1")
    (tmp_path / "link").symlink_to(target)
    with atomic_dir(tmp_path / "link", kind="sim-run") as d:
        (d / "b.txt").write_text("2")
    assert (tmp_path / "link").is_symlink()  # the user's link is kept; what it points at is replaced
    assert sorted(p.name for p in target.iterdir()) == [MARKER, "b.txt"]


def test_force_never_replaces_a_file_with_a_folder_or_back(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    (out / "summary.csv").mkdir(parents=True)
    (out / "summary.csv" / "keep").write_text("k")
    with pytest.raises(InputError, match="is a folder"), atomic_dir(out, force=True, kind="sim-run") as d:
        (d / "summary.csv").write_text("x")
    assert (out / "summary.csv" / "keep").read_text() == "k"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_failed_run_leaves_previous_results_and_no_temp(tmp_path: Path) -> None:
    out = tmp_path / "res"
    commit_then_fail(out, ("a", "old"), ("a", "half"), KeyboardInterrupt())
    assert (out / "a").read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["res"]


def test_write_with_refuses_a_folder_and_a_path_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("1")
    with pytest.raises(InputError, match="is a folder"):
        write_text(tmp_path / "d", "data")
    (tmp_path / "f").write_text("1")
    with pytest.raises(InputError, match="is a file"):
        write_with(tmp_path / "f" / "g.csv", lambda p: p.write_text("x"))
    assert (tmp_path / "d" / "x").read_text() == "1" and (tmp_path / "f").read_text() == "1"


def test_outputs_respect_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        with atomic_dir(tmp_path / "r", kind="sim-run") as d:
            write_text(d / "a.csv", "x")
        write_text(tmp_path / "f.csv", "y")
    finally:
        os.umask(old)
    assert (tmp_path / "r").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "r" / "a.csv").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "f.csv").stat().st_mode & 0o777 == 0o644


def test_check_output_dir_accepts_new_empty_and_own(tmp_path: Path) -> None:
    check_output_dir(tmp_path / "new" / "deeper", kind="sim-run")
    (tmp_path / "e").mkdir()
    check_output_dir(tmp_path / "e", kind="sim-run")
    with atomic_dir(tmp_path / "own", kind="sim-run") as d:
        (d / "x").write_text("1")
    check_output_dir(tmp_path / "own", kind="sim-run")


# --- crash safety: signals and SIGKILL --------------------------------------------------------

_HOLD = """
import signal, sys, time
from pathlib import Path
from tltcore.atomic import atomic_dir
from tltcli import _on_sigterm
signal.signal(signal.SIGTERM, _on_sigterm)
with atomic_dir(Path(sys.argv[1]), kind="sim-run") as d:
    (d / "a").write_text("new")
    print("ready", flush=True)
    time.sleep(60)
"""


def _hold_open(out: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=REPO)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def test_sigterm_during_writing_cleans_up_and_keeps_old_results(tmp_path: Path) -> None:
    out = tmp_path / "res"
    with atomic_dir(out, kind="sim-run") as d:
        (d / "a").write_text("old")
    proc = _hold_open(out)
    assert len(list(tmp_path.iterdir())) == 2  # the temp folder exists while writing
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=hang_seconds(6))
    assert proc.returncode != 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res"] and (out / "a").read_text() == "old"


def test_sigkill_leftovers_are_swept_by_the_next_run(tmp_path: Path) -> None:
    out = tmp_path / "res"
    proc = _hold_open(out)
    proc.kill()
    proc.wait(timeout=hang_seconds(6))
    leftovers = [p for p in tmp_path.iterdir() if p.name != "res"]
    assert len(leftovers) == 1 and leftovers[0].name.startswith(".res.tlt-tmp-")
    assert not out.exists()
    (tmp_path / ".res.keep-me").mkdir()  # not tlt's naming: never swept
    with atomic_dir(out, kind="sim-run") as d:
        (d / "a").write_text("fresh")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".res.keep-me", "res"]


_HOLD_FILE = """
import sys, time
from pathlib import Path
from tltcore.atomic import write_with
def slow(tmp):
    Path(tmp).write_text("partial")
    print("writing", flush=True)
    time.sleep(60)
write_with(Path(sys.argv[1]), slow)
"""


def test_killed_file_writers_temps_are_swept_by_the_next_write(tmp_path: Path) -> None:
    """write_with's temp files carry the pid too: ten killed writers leave nothing after the next write."""
    out = tmp_path / "table.parquet"
    for _ in range(10):
        proc = subprocess.Popen([sys.executable, "-c", _HOLD_FILE, str(out)], stdout=subprocess.PIPE, text=True,
                                cwd=REPO)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
        proc.kill()
        proc.wait(timeout=hang_seconds(6))
    assert len([p for p in tmp_path.iterdir() if ".tlt-tmp-" in p.name]) == 1  # each writer swept the one before
    (tmp_path / ".table.other-tool-tmp").write_text("not tlt's naming: never swept")
    write_text(out, "done")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".table.other-tool-tmp", "table.parquet"]


def test_sweep_spares_a_live_writer(tmp_path: Path) -> None:
    out = tmp_path / "res"
    proc = _hold_open(out)
    try:
        assert sweep_stale(out) == []
        assert len([p for p in tmp_path.iterdir() if p.name.startswith(".res.tlt-tmp-")]) == 1
    finally:
        proc.kill()
        proc.wait(timeout=hang_seconds(6))


@needs_shared_traces()
def test_sigterm_to_the_cli_exits_143_with_one_line_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "big"
    proc = subprocess.Popen([sys.executable, "-m", "tltcli", "sim", "run", "--scenario", "dapo_qwen32b_polytrace",
                             "--steps", "6", "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp_path, env={**os.environ, "MPLBACKEND": "Agg"})
    assert proc.stdout is not None
    while "simulating" not in (line := proc.stdout.readline()):  # progress lines: it is mid-simulation
        assert line, proc.stderr.read() if proc.stderr else ""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=hang_seconds(12))
    assert proc.returncode == 143, err
    assert err.strip().splitlines() == ["tlt: terminated (SIGTERM); nothing half written was left behind"]
    assert list(tmp_path.iterdir()) == []


# --- concurrent writers -----------------------------------------------------------------------

def _writer(out: str, tag: int, start: float) -> None:
    real_replace = os.replace

    def slow_replace(src: object, dst: object) -> None:  # widen the commit window: races become certain
        time.sleep(0.05)
        real_replace(src, dst)

    os.replace = slow_replace  # this child process only
    while time.time() < start:
        time.sleep(0.001)
    with atomic_dir(Path(out), kind="sim-run") as d:
        for i in range(20):
            (d / f"part{i}.txt").write_text(f"{tag}\n" * 100)


def test_concurrent_writers_to_one_target_all_finish_and_one_complete_set_wins(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    for round_ in range(4):
        out = tmp_path / f"r{round_ % 2}"
        start = time.time() + 1.5
        procs = [ctx.Process(target=_writer, args=(str(out), k, start)) for k in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=hang_seconds(12))
        assert [p.exitcode for p in procs] == [0, 0, 0, 0]
        contents = {(out / f"part{i}.txt").read_text() for i in range(20)}
        assert len(contents) == 1  # one writer's whole set, never a mix
        assert read_marker(out) == sorted(f"part{i}.txt" for i in range(20))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r0", "r1"]

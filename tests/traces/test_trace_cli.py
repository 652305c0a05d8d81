"""`tlt trace list|fetch|stats|plot` and `tlt demo` from a user's point of view.

The first tests need the catalogued traces of ``../shared/traces``; the rest act as a fresh clone
(``TLT_SHARED_DIR`` pointed at an empty folder, an empty cache) and never skip. `tlt trace fetch` is
tested against a made-up upstream (``tests/fake_upstream.py``) served from 127.0.0.1 or file://.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_upstream import BASE, UPSTREAM_PATH, fresh_clone_env, make_upstream, serve

from conftest import needs_shared_traces
from tltcore.atomic import MARKER

needs_shared = needs_shared_traces()


@needs_shared
def test_list_shows_catalog_and_locations(cli) -> None:
    res = cli("trace", "list")
    assert res.returncode == 0, res.stderr
    for name in ("polytrace_rl_rollouts", "r1distill_qwen1.5b_aime_8samples", "intern_s1_math"):
        assert name in res.stdout
    assert "not found" not in res.stdout and "DIFFERS" not in res.stdout


@needs_shared
def test_stats_formats(cli) -> None:
    res = cli("trace", "stats", "polytrace_rl_rollouts", "--by", "source", "--format", "json")
    assert res.returncode == 0, res.stderr
    rows = {r["source"]: r for r in json.loads(res.stdout)}
    assert rows["polytrace/verl_dapo_qwen2.5-32b"]["n"] == 4608
    assert round(rows["polytrace/verl_dapo_qwen2.5-32b"]["p99"]) == 2711
    csv = cli("trace", "stats", "polytrace_rl_rollouts", "--by", "source,step", "--format", "csv")
    assert csv.returncode == 0 and csv.stdout.splitlines()[0].startswith("source,step,n,mean")
    table = cli("trace", "stats", "polytrace_rl_rollouts", "--by", "source")
    assert "10,112" in table.stdout and "4,608" in table.stdout


@needs_shared
def test_plot_writes_png_and_pdf(cli, tmp_path: Path) -> None:
    res = cli("trace", "plot", "polytrace_rl_rollouts", "--out", str(tmp_path / "p"))
    assert res.returncode == 0, res.stderr
    names = sorted(p.name for p in (tmp_path / "p").iterdir() if p.name != MARKER)
    assert names == ["polytrace_rl_rollouts_length_cdf.pdf", "polytrace_rl_rollouts_length_cdf.png",
                     "polytrace_rl_rollouts_straggler.pdf", "polytrace_rl_rollouts_straggler.png"]
    assert all((tmp_path / "p" / n).stat().st_size > 1000 for n in names)


@needs_shared
def test_demo_writes_report_atomically(cli, tmp_path: Path) -> None:
    out = tmp_path / "demo"
    res = cli("demo", "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert {"README.md", "trace_stats.csv", "length_cdf.png", "length_cdf.pdf"} <= {p.name for p in out.iterdir()}
    readme = (out / "README.md").read_text()
    assert "4,608" in readme and "elastic+beg-mab" in readme
    assert {"sim_summary.csv", "rollout_timeline.png", "makespan.pdf", "scenario.resolved.toml"} <= {
        p.name for p in out.iterdir()}
    bad = cli("demo", "--trace", "nope_not_a_trace", "--out", str(tmp_path / "bad"))
    assert bad.returncode == 2 and not (tmp_path / "bad").exists()
    assert list(tmp_path.iterdir()) == [out]  # no temp folders left behind


# ---- a fresh clone: no ../shared, empty cache -------------------------------------------------------


@pytest.fixture
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key, value in fresh_clone_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    return tmp_path


@pytest.fixture
def upstream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    up = make_upstream(tmp_path)
    for key, value in fresh_clone_env(tmp_path, up).items():
        monkeypatch.setenv(key, value)
    return up


def _cache(root: Path) -> Path:
    return root / "cache" / "tlt" / "traces"


def test_fresh_clone_search_path_has_no_shared_and_ends_with_the_cache(fresh: Path) -> None:
    from tltsim.traces.catalog import search_path

    path = search_path()
    assert path[-1] == _cache(fresh) and fresh / "no-shared" / "traces" in path
    assert not any(p.parent.name == "shared" for p in path)


def test_fresh_clone_list_says_how_to_get_each_trace(cli, fresh: Path) -> None:
    res = cli("trace", "list")
    assert res.returncode == 0, res.stderr
    text = "".join(res.stdout.replace("│", " ").split())  # the table folds long cells: compare without spaces
    assert "notfound" not in text and text.count("notdownloaded") == 4  # the fifth file ships with the repo:
    row = next(line for line in res.stdout.splitlines() if "tlt_grpo_arith_seed0 " in line)
    assert "not downloaded" not in row and " ok " in row  # found, checksum ok (its path cell may fold)
    assert text.count("notdownloaded—tlttracefetch") == 3  # the three downloadable ones; ServeGen says why not


def test_fresh_clone_stats_of_a_missing_trace_says_fetch(cli, fresh: Path) -> None:
    res = cli("trace", "stats", "polytrace_rl_rollouts")
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "tlt trace fetch polytrace_rl_rollouts" in res.stderr


def test_fresh_clone_demo_falls_back_and_says_so_in_one_line(cli, fresh: Path) -> None:
    """`make run` in a clone without ../shared: exit 0 on the parametric profile, one note line."""
    out = fresh / "demo"
    res = cli("demo", "--out", str(out))
    assert res.returncode == 0, res.stderr
    notes = [line for line in res.stderr.splitlines() if line.startswith("tlt: note:")]
    assert len(notes) == 1 and "intern_s1_math" in notes[0] and "tlt trace fetch polytrace_rl_rollouts" in notes[0]
    readme = (out / "README.md").read_text()
    assert "`intern_s1_math`" in readme and "tlt trace fetch polytrace_rl_rollouts" in readme


def test_named_missing_trace_is_not_replaced_by_the_fallback(cli, fresh: Path) -> None:
    res = cli("demo", "--trace", "polytrace_rl_rollouts", "--out", str(fresh / "d"))
    assert res.returncode == 2 and "tlt trace fetch polytrace_rl_rollouts" in res.stderr
    assert not (fresh / "d").exists()


# ---- tlt trace fetch ---------------------------------------------------------------------------------


def test_fetch_over_http_verifies_converts_caches_then_hits_the_cache(cli, upstream, tmp_path: Path) -> None:
    with serve(upstream.mirror) as server:
        res = cli("trace", "fetch", "fake_aime", "--mirror", server.url + "/ok")
        assert res.returncode == 0, res.stderr
        cached = _cache(tmp_path) / "fake_aime.csv"
        assert cached.read_bytes() == upstream.converted and "sha256 ok" in res.stdout
        assert server.requests == ["/ok/" + BASE.split(".com/")[1] + UPSTREAM_PATH.replace(" ", "%20")]
        assert sorted(p.name for p in cached.parent.iterdir()) == ["fake_aime.csv"]  # no temp left
        again = cli("trace", "fetch", "fake_aime", "--mirror", server.url + "/ok")
        assert again.returncode == 0 and "cache hit" in again.stdout and len(server.requests) == 1
        forced = cli("trace", "fetch", "fake_aime", "--force", "--mirror", server.url + "/ok")
        assert forced.returncode == 0 and "fetched" in forced.stdout and len(server.requests) == 2
    stats = cli("trace", "stats", "fake_aime", "--format", "json")  # the cache is on the search path
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)[0]["n"] == 16 and json.loads(stats.stdout)[0]["max"] == 16000


def test_fetch_from_a_file_url_mirror_and_a_damaged_cache_copy_is_replaced(cli, upstream, tmp_path: Path) -> None:
    res = cli("trace", "fetch", "fake_aime")  # TLT_TRACE_MIRROR is the file:// mirror
    assert res.returncode == 0, res.stderr
    cached = _cache(tmp_path) / "fake_aime.csv"
    cached.write_bytes(b"damaged")
    again = cli("trace", "fetch", "fake_aime")
    assert again.returncode == 0 and "fetched" in again.stdout and cached.read_bytes() == upstream.converted


def test_fetch_without_converter_stores_the_file_as_is(cli, upstream, tmp_path: Path) -> None:
    assert cli("trace", "fetch", "fake_noconvert").returncode == 0
    assert (_cache(tmp_path) / "fake_noconvert.csv").read_bytes() == upstream.raw


@pytest.mark.parametrize(("name", "expected"), [
    ("fake_badsum", "checksum mismatch"),
    ("fake_wrongconvert", "the converted file has sha256"),
    ("fake_gone", "cannot download"),
    ("fake_unavailable", "it was resampled; ask a colleague"),
    ("fake_nosource", "no download source"),
    ("fake_aimee", "did you mean fake_aime"),
])
def test_fetch_refusals_are_one_line_and_cache_nothing(cli, upstream, tmp_path: Path, name: str,
                                                       expected: str) -> None:
    res = cli("trace", "fetch", name)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and res.stderr.startswith("tlt: error: ")
    assert expected in res.stderr and "Traceback" not in res.stderr
    cache = _cache(tmp_path)
    assert not cache.exists() or list(cache.iterdir()) == []


def test_fetch_server_down_is_one_line(cli, upstream) -> None:
    from fake_upstream import closed_port

    res = cli("trace", "fetch", "fake_aime", "--mirror", f"http://127.0.0.1:{closed_port()}")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "Connection refused" in res.stderr


@pytest.mark.timing  # a wall-clock deadline is what it checks: run alone, not beside the parallel suite
def test_fetch_timeout_is_a_deadline_on_the_whole_download(upstream, tmp_path: Path) -> None:
    """A mirror that sends the right file at a byte a second never makes one wait long: the timeout
    must still end the download at its deadline, and the deadline is shared by a fetch's files."""
    import time
    from urllib.parse import quote

    from fake_upstream import sha

    from tltcore.errors import InputError
    from tltsim.traces.fetch import download

    with serve(upstream.mirror) as server:
        url = f"{server.url}/drip/{BASE.split('.com/')[1]}{quote(UPSTREAM_PATH)}"
        start = time.monotonic()
        with pytest.raises(InputError, match=r"/drip/.*: download not finished within 1.5 s \(TLT_FETCH_TIMEOUT"):
            download(url, tmp_path / "x", len(upstream.raw), sha(upstream.raw), timeout=1.5)
        assert time.monotonic() - start < 1.5 + 3  # not the 10 s the mirror drips for (or the hours of the file)
        with pytest.raises(InputError, match="not finished within 9 s"):  # an earlier file used the time up
            download(url.replace("/drip/", "/ok/"), tmp_path / "y", len(upstream.raw), sha(upstream.raw), timeout=9,
                     deadline=time.monotonic() - 1)
        assert len(server.requests) == 1  # the second was never asked for


def test_fetch_of_a_profile_or_a_shipped_trace_downloads_nothing(cli, fresh: Path) -> None:
    assert "parametric profile" in cli("trace", "fetch", "intern_s1_math").stdout
    res = cli("trace", "fetch", "tlt_grpo_arith_seed0")
    assert res.returncode == 0 and "already available" in res.stdout and not _cache(fresh).exists()


def test_progress_bar_for_large_downloads_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from tltsim.traces import fetch

    with fetch._progress(10 << 20, "x") as advance:
        assert advance is None  # pytest's stderr is not a terminal: no bar, a failure stays one line
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    with fetch._progress(10 << 20, "x") as advance:
        assert advance is not None
        advance(1 << 20)
    with fetch._progress(1000, "x") as advance:
        assert advance is None  # small: no bar


def test_catalog_fetch_sources_are_pinned() -> None:
    """Every downloadable entry names files under a commit-pinned URL with their size and sha256, and a
    converter that exists; the others say why they cannot be downloaded."""
    import re

    from tltsim.traces.catalog import catalog
    from tltsim.traces.upstream import CONVERTERS

    for entry in catalog().values():
        if entry.file is None or entry.fetch is None:
            continue
        if entry.fetch.unavailable is not None:
            assert len(entry.fetch.unavailable) > 40 and not entry.fetch.files
            continue
        assert re.fullmatch(r"https://raw\.githubusercontent\.com/[^/]+/[^/]+/[0-9a-f]{40}/", entry.fetch.base_url)
        assert entry.fetch.convert in CONVERTERS and entry.fetch.files
        for _path, size, digest in entry.fetch.files:
            assert size > 0 and re.fullmatch(r"[0-9a-f]{64}", digest)
    fetchable = {n for n, e in catalog().items() if e.fetch is not None and e.fetch.unavailable is None}
    assert fetchable == {"polytrace_rl_rollouts", "polytrace_search_r1_multiturn", "r1distill_qwen1.5b_aime_8samples"}


# ---- tlt trace plot: the results-folder rules -------------------------------------------------------

TRACE = "tlt_grpo_arith_seed0"  # ships with the repository


def test_plot_refuses_a_users_folder_and_force_writes_into_it_without_deleting(cli, tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / f"{TRACE}_length_cdf.png").write_bytes(b"my own figure")
    (mine / "notes.txt").write_text("keep")
    res = cli("trace", "plot", TRACE, "--out", str(mine))
    assert res.returncode == 2 and "--force" in res.stderr
    assert (mine / f"{TRACE}_length_cdf.png").read_bytes() == b"my own figure"
    forced = cli("trace", "plot", TRACE, "--out", str(mine), "--force")
    assert forced.returncode == 0, forced.stderr
    assert (mine / "notes.txt").read_text() == "keep" and (mine / f"{TRACE}_straggler.pdf").is_file()


def test_plot_folder_is_a_tlt_results_folder_replaced_by_the_next_plot(cli, tmp_path: Path) -> None:
    out = tmp_path / "p"
    assert cli("trace", "plot", TRACE, "--out", str(out)).returncode == 0
    assert json.loads((out / MARKER).read_text())["kind"] == "trace-plot"
    again = cli("trace", "plot", TRACE, "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted([MARKER] + [f"{TRACE}_{k}.{e}" for k in (
        "length_cdf", "straggler") for e in ("pdf", "png")])


def test_plot_default_folder_is_per_trace(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = cli("trace", "plot", TRACE)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "reports" / "traces" / TRACE / f"{TRACE}_straggler.png").is_file()

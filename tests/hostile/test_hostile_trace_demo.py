"""Hostile input for `tlt trace fetch|plot|list|stats` and `tlt demo` in a clone without ../shared.

Each case in :data:`CASES` is one command line in one hostile setting: a made-up upstream served from
127.0.0.1 that answers 404/500, lies about its length, truncates, corrupts, redirects to a file, sends
garbage or never answers; a cache folder that is a file or cannot be created; an output folder that is
a user's, a file, a FIFO or the trace itself; a trace that is a FIFO. Every case must end as bad
input ends everywhere in tlt: exit 2, exactly one ``tlt: error:`` line with the expected words, no
traceback, every byte under the case's folder as it was (nothing cached, nothing overwritten), and
within :data:`BOUND_S` seconds (an alarm turns a hang into a failure). Malformed trace *files* are
tests/traces/test_trace_hostile.py's corpus, not repeated here.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fake_upstream import closed_port, fresh_clone_env, make_upstream, serve
from test_output_safety import snapshot

from conftest import REPO, invoke_bounded
from tltcore.atomic import atomic_dir

BOUND_S = 20.0
COMMANDS = ("trace fetch", "trace plot", "trace list", "trace stats", "demo")
OURS = "tlt_grpo_arith_seed0"  # ships with the repository


@dataclass(frozen=True)
class Ctx:
    root: Path  # the case's own folder: cache, outputs, user files (snapshotted)
    http: str  # http://127.0.0.1:PORT of the hostile server (append /MODE)


@dataclass(frozen=True)
class Case:
    id: str
    command: str
    argv: Callable[[Ctx], list[str]]
    expect: str  # words the one error line must hold
    env: dict[str, str] = field(default_factory=dict)
    setup: Callable[[Ctx], object] | None = None


def _fetch(name: str, mode: str | None = None) -> Callable[[Ctx], list[str]]:
    return lambda c: ["trace", "fetch", name, *(["--mirror", f"{c.http}/{mode}"] if mode else [])]


def _users_folder(c: Ctx) -> str:
    (c.root / "mine").mkdir()
    (c.root / "mine" / f"{OURS}_length_cdf.png").write_bytes(b"my figure")
    (c.root / "mine" / "thesis.tex").write_text("years of work")
    return str(c.root / "mine")


def _a_file(c: Ctx) -> str:
    (c.root / "notes.txt").write_text("keep me")
    return str(c.root / "notes.txt")


def _under_a_file(c: Ctx) -> str:
    return _a_file(c) + "/out"


def _fifo(c: Ctx) -> str:
    os.mkfifo(c.root / "pipe.csv")
    return str(c.root / "pipe.csv")


def _trace_copy(c: Ctx) -> str:
    (c.root / "data").mkdir(exist_ok=True)
    dest = c.root / "data" / "t.csv"
    dest.write_bytes((REPO / "traces" / f"{OURS}.csv").read_bytes())
    return str(dest)


def _demo_results(c: Ctx) -> str:
    with atomic_dir(c.root / "demo-results", kind="demo") as d:
        (d / "README.md").write_text("a demo")
    return str(c.root / "demo-results")


def _cache_is_a_file(c: Ctx) -> None:
    (c.root / "cache" / "tlt").mkdir(parents=True)
    (c.root / "cache" / "tlt" / "traces").write_text("not a folder")


def _cache_root_is_a_file(c: Ctx) -> None:
    (c.root / "cache").write_text("not a folder")


def _cache_target_is_a_folder(c: Ctx) -> None:
    (c.root / "cache" / "tlt" / "traces" / "fake_aime.csv").mkdir(parents=True)
    (c.root / "cache" / "tlt" / "traces" / "fake_aime.csv" / "x").write_text("keep")


def _bad_catalog(c: Ctx) -> None:
    (c.root / "bad.toml").write_text("[traces.x\nfile = ")


CASES: list[Case] = [
    # ---- trace fetch: names and catalog
    Case("fetch-unknown-name", "trace fetch", _fetch("fake_aimee"), "did you mean fake_aime"),
    Case("fetch-empty-name", "trace fetch", _fetch(""), "unknown trace ''"),
    Case("fetch-path-traversal-name", "trace fetch", _fetch("../../etc/passwd"), "unknown trace"),
    Case("fetch-unavailable-entry", "trace fetch", _fetch("fake_unavailable"), "resampled"),
    Case("fetch-entry-without-source", "trace fetch", _fetch("fake_nosource"), "no download source"),
    Case("fetch-catalog-missing", "trace fetch", _fetch("fake_aime"), "cannot read the trace catalog",
         env={"TLT_TRACE_CATALOG": "/nonexistent/catalog.toml"}),
    Case("fetch-catalog-not-toml", "trace fetch", _fetch("fake_aime"), "cannot read the trace catalog",
         env={"TLT_TRACE_CATALOG": "{root}/bad.toml"}, setup=_bad_catalog),
    # ---- trace fetch: what the server sends
    Case("fetch-checksum-pinned-differs", "trace fetch", _fetch("fake_badsum", "ok"), "checksum mismatch"),
    Case("fetch-corrupted-bytes", "trace fetch", _fetch("fake_aime", "corrupt"), "checksum mismatch"),
    Case("fetch-converted-differs", "trace fetch", _fetch("fake_wrongconvert", "ok"), "the converted file"),
    Case("fetch-http-404", "trace fetch", _fetch("fake_aime", "404"), "HTTP 404"),
    Case("fetch-http-500", "trace fetch", _fetch("fake_aime", "500"), "HTTP 500"),
    Case("fetch-upstream-file-missing", "trace fetch", _fetch("fake_gone", "ok"), "HTTP 404"),
    Case("fetch-upstream-file-missing-file-url", "trace fetch", _fetch("fake_gone"), "cannot download"),
    Case("fetch-truncated-with-length", "trace fetch", _fetch("fake_aime", "short"), "nothing was cached"),
    Case("fetch-truncated-without-length", "trace fetch", _fetch("fake_aime", "nolen-short"), "truncated"),
    Case("fetch-too-long-without-length", "trace fetch", _fetch("fake_aime", "nolen-long"), "more than"),
    Case("fetch-content-length-lie", "trace fetch", _fetch("fake_aime", "lie"), "announces 1,000,000,000,000"),
    Case("fetch-server-never-answers", "trace fetch", _fetch("fake_aime", "hang"), "no answer within 1 s",
         env={"TLT_FETCH_TIMEOUT": "1"}),
    Case("fetch-drip-feed-past-the-deadline", "trace fetch", _fetch("fake_aime", "drip"), "not finished within 2 s",
         env={"TLT_FETCH_TIMEOUT": "2"}),
    Case("fetch-garbage-response", "trace fetch", _fetch("fake_aime", "garbage"), "broken HTTP response"),
    Case("fetch-redirect-to-file-url", "trace fetch", _fetch("fake_aime", "redirect-file"), "HTTP 302"),
    Case("fetch-server-down", "trace fetch",
         lambda c: ["trace", "fetch", "fake_aime", "--mirror", f"http://127.0.0.1:{closed_port()}"],
         "Connection refused"),
    Case("fetch-mirror-ftp-scheme", "trace fetch", lambda c: ["trace", "fetch", "fake_aime", "--mirror", "ftp://x"],
         "only http://, https:// and file://"),
    Case("fetch-mirror-not-a-url", "trace fetch", lambda c: ["trace", "fetch", "fake_aime", "--mirror", "mirror"],
         "only http://"),
    Case("fetch-mirror-bad-host", "trace fetch",
         lambda c: ["trace", "fetch", "fake_aime", "--mirror", "http://[::1"], "cannot download"),
    Case("fetch-mirror-env-ftp", "trace fetch", _fetch("fake_aime"), "only http://",
         env={"TLT_TRACE_MIRROR": "ftp://example.org"}),
    Case("fetch-timeout-not-a-number", "trace fetch", _fetch("fake_aime", "ok"), "TLT_FETCH_TIMEOUT",
         env={"TLT_FETCH_TIMEOUT": "soon"}),
    Case("fetch-timeout-zero", "trace fetch", _fetch("fake_aime", "ok"), "TLT_FETCH_TIMEOUT",
         env={"TLT_FETCH_TIMEOUT": "0"}),
    # ---- trace fetch: the cache folder
    Case("fetch-cache-is-a-file", "trace fetch", _fetch("fake_aime", "ok"), "is a file, not a folder",
         setup=_cache_is_a_file),
    Case("fetch-cache-parent-is-a-file", "trace fetch", _fetch("fake_aime", "ok"), "cannot write the trace cache",
         setup=_cache_root_is_a_file),
    Case("fetch-cache-cannot-be-created", "trace fetch", _fetch("fake_aime", "ok"), "cannot write the trace cache",
         env={"XDG_CACHE_HOME": "/proc/self/tlt-cache"}),
    Case("fetch-cache-target-is-a-folder", "trace fetch", _fetch("fake_aime", "ok"), "is a folder",
         setup=_cache_target_is_a_folder),
    # ---- trace plot: the results-folder rules
    Case("plot-out-users-folder", "trace plot", lambda c: ["trace", "plot", OURS, "--out", _users_folder(c)],
         "pass --force"),
    Case("plot-out-is-a-file", "trace plot", lambda c: ["trace", "plot", OURS, "--out", _a_file(c)],
         "not a folder"),
    Case("plot-out-under-a-file", "trace plot", lambda c: ["trace", "plot", OURS, "--out", _under_a_file(c)],
         "is a file"),
    Case("plot-out-is-the-trace", "trace plot", lambda c: ["trace", "plot", (t := _trace_copy(c)), "--out", t],
         "is the input"),
    Case("plot-out-holds-the-trace-even-forced", "trace plot",
         lambda c: ["trace", "plot", _trace_copy(c), "--out", str(c.root / "data"), "--force"], "contains the input"),
    Case("plot-out-inside-the-trace", "trace plot",
         lambda c: ["trace", "plot", (t := _trace_copy(c)), "--out", t + "/figs"], "lies inside the input"),
    Case("plot-out-another-kind", "trace plot", lambda c: ["trace", "plot", OURS, "--out", _demo_results(c)],
         "not trace-plot results"),
    Case("plot-out-empty", "trace plot", lambda c: ["trace", "plot", OURS, "--out", ""], "is the current folder"),
    Case("fetch-mirror-port-not-a-number", "trace fetch",
         lambda c: ["trace", "fetch", "fake_aime", "--mirror", "http://127.0.0.1:port"], "cannot download"),
    Case("plot-out-is-a-fifo", "trace plot", lambda c: ["trace", "plot", OURS, "--out", _fifo(c)], "not a folder"),
    Case("plot-trace-is-a-fifo", "trace plot",
         lambda c: ["trace", "plot", _fifo(c), "--out", str(c.root / "p")], "unknown trace"),
    Case("plot-trace-not-downloaded", "trace plot",
         lambda c: ["trace", "plot", "polytrace_rl_rollouts", "--out", str(c.root / "p")],
         "tlt trace fetch polytrace_rl_rollouts"),
    Case("plot-out-checked-before-any-work", "trace plot",  # the --out error comes first, not the --by one
         lambda c: ["trace", "plot", OURS, "--by", "nope", "--out", _users_folder(c)], "pass --force"),
    Case("plot-missing-trace-with-bad-out", "trace plot",
         lambda c: ["trace", "plot", str(c.root / "nope.csv"), "--out", _a_file(c)], "unknown trace"),
    Case("plot-bad-colour-column", "trace plot",
         lambda c: ["trace", "plot", OURS, "--by", "nope", "--out", str(c.root / "p")], "cannot colour by"),
    # ---- trace list / stats
    Case("list-catalog-not-toml", "trace list", lambda c: ["trace", "list"], "cannot read the trace catalog",
         env={"TLT_TRACE_CATALOG": "{root}/bad.toml"}, setup=_bad_catalog),
    Case("list-catalog-is-a-folder", "trace list", lambda c: ["trace", "list"], "cannot read the trace catalog",
         env={"TLT_TRACE_CATALOG": "{root}"}),
    Case("stats-not-downloaded", "trace stats", lambda c: ["trace", "stats", "r1distill_qwen1.5b_aime_8samples"],
         "tlt trace fetch r1distill_qwen1.5b_aime_8samples"),
    Case("stats-unavailable-says-why", "trace stats", lambda c: ["trace", "stats", "servegen_deepseek_r1_sampled"],
         "not downloadable"),
    Case("stats-trace-is-a-fifo", "trace stats", lambda c: ["trace", "stats", _fifo(c)], "unknown trace"),
    Case("stats-misspelt-name", "trace stats", lambda c: ["trace", "stats", "polytrace_rl_rollout"],
         "did you mean polytrace_rl_rollouts"),
    # ---- demo
    Case("demo-out-is-a-file", "demo", lambda c: ["demo", "--out", _a_file(c)], "not a folder"),
    Case("demo-out-users-folder", "demo", lambda c: ["demo", "--out", _users_folder(c)], "pass --force"),
    Case("demo-out-under-a-file", "demo", lambda c: ["demo", "--out", _under_a_file(c)], "is a file"),
    Case("demo-out-another-kind", "demo", lambda c: ["demo", "--out", _plot_results(c)], "not demo results"),
    Case("demo-named-trace-not-downloaded", "demo",
         lambda c: ["demo", "--trace", "polytrace_rl_rollouts", "--out", str(c.root / "d")],
         "tlt trace fetch polytrace_rl_rollouts"),
    Case("demo-trace-misspelt", "demo", lambda c: ["demo", "--trace", "intern_s1_mat", "--out", str(c.root / "d")],
         "did you mean intern_s1_math"),
    Case("demo-trace-is-a-fifo", "demo", lambda c: ["demo", "--trace", _fifo(c), "--out", str(c.root / "d")],
         "unknown trace"),
    Case("demo-out-is-the-trace", "demo", lambda c: ["demo", "--trace", (t := _trace_copy(c)), "--out", t],
         "is the input"),
]


def _plot_results(c: Ctx) -> str:
    with atomic_dir(c.root / "plots", kind="trace-plot") as d:
        (d / "a.png").write_bytes(b"png")
    return str(c.root / "plots")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    up_root = tmp_path_factory.mktemp("upstream")
    upstream = make_upstream(up_root)
    with serve(upstream.mirror) as srv:
        yield upstream, srv


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_trace_and_demo_input(case: Case, server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    upstream, srv = server
    root = tmp_path / "case"
    root.mkdir()
    ctx = Ctx(root, srv.url)
    monkeypatch.chdir(root)
    made_up = upstream if case.command == "trace fetch" else None  # the made-up catalog only for fetch
    for key, value in (fresh_clone_env(tmp_path, made_up) | {"XDG_CACHE_HOME": str(root / "cache")}).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))  # matplotlib's font cache is not the case's
    for key, value in case.env.items():
        monkeypatch.setenv(key, value.format(root=root))
    if case.setup is not None:
        case.setup(ctx)
    argv = case.argv(ctx)
    before = snapshot(root)
    start = time.process_time()  # CPU time: the case's work, which a loaded machine does not stretch
    res = invoke_bounded(BOUND_S + 5, *argv)
    elapsed = time.process_time() - start
    lines = res.stderr.splitlines()
    assert res.returncode == 2, (case.id, res.returncode, res.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("tlt: error: "), (case.id, res.stderr[-2000:])
    assert "Traceback" not in res.stderr + res.stdout
    assert case.expect in lines[0], (case.id, lines[0])
    assert snapshot(root) == before, f"{case.id}: files changed"
    assert elapsed < BOUND_S, (case.id, elapsed)


def test_the_corpus_is_large_and_reaches_every_command() -> None:
    assert len(CASES) >= 40 and len({c.id for c in CASES}) == len(CASES)
    assert {c.command for c in CASES} == set(COMMANDS)

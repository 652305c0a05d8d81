"""Sweeps: spec parsing, resumption after SIGKILL, failed points, the Ray backend, the CLI.

Points are tiny (the parametric ``intern_s1_math`` profile, 2 prompt groups, 4-8 GPUs, one step), so
a real evaluation takes about a second; the kill test uses a slow fake evaluation that logs every
call, which is what proves that no finished point is evaluated again.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import hang_seconds, invoke_bounded, invoke_cli
from tltcore.errors import InputError
from tltsim.scenario import policy_names
from tltsim.sweep import SweepStore, expand, load_spec, parse_spec, run_sweep
from tltsim.sweep.runner import PointResult, result_rows
from tltsim.sweep.spec import iter_points

HERE = Path(__file__).resolve().parent
TINY = """
[scenario]
policies = ["elastic+beg-mab"]
trace.name = "intern_s1_math"
trace.prompts_per_step = 2
cluster.gpus = 8
"""
BOOKKEEPING = ["attempt", "wall_s", "finished_at", "host"]


def spec_file(tmp_path: Path, body: str, name: str = "spec.toml", scenario: str = TINY) -> Path:
    path = tmp_path / name
    path.write_text(scenario + body, encoding="utf-8")
    return path


def raw_rows(out: Path) -> pd.DataFrame:
    """Every stored row, without the reader's deduplication."""
    files = sorted((out / "results").glob("part-*.parquet"))
    return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True) if files else pd.DataFrame()


# ---- spec -----------------------------------------------------------------------------------------
def test_spec_grid_zip_random_expand_to_resolved_points(tmp_path):
    path = spec_file(tmp_path, """
[[axes]]
kind = "grid"
"cluster.gpu" = ["H100", "H20"]
policies = ["elastic:16+beg-mab", "static:8_4_32,elastic+beg-mab"]

[[axes]]
kind = "zip"
cluster.gpus = [4, 8]
cluster.tp = [2, 4]

[[axes]]
kind = "random"
n = 3
seed = 7
"cost.sd_overhead_s" = { loguniform = [1e-4, 1e-2] }
"engine.catch_up_limit" = { int = [4, 64] }
"acceptance.mode" = { choice = ["expected", "stochastic"] }
"engine.switch_prefill_fraction" = { uniform = [0.1, 0.5] }
""")
    spec = load_spec(path)
    assert spec.axis_fields == ("cluster.gpu", "policies", "cluster.gpus", "cluster.tp", "cost.sd_overhead_s",
                                "engine.catch_up_limit", "acceptance.mode", "engine.switch_prefill_fraction")
    points = expand(spec)
    assert len(points) == 2 * 2 * 2 * 3 and len({p.key for p in points}) == len(points)
    assert all(p.invalid is None for p in points)
    first = points[0].scenario
    assert first.cluster.gpu == "H100" and policy_names(first.policies) == ("elastic:16+beg-mab",)
    assert first.trace.prompts_per_step == 2 and first.trace.name == "intern_s1_math"  # [scenario] kept
    assert points[len(points) // 2].scenario.cluster.gpu == "H20"
    assert policy_names(points[6].scenario.policies) == ("static:8_4_32", "elastic+beg-mab")  # a list value from text
    assert {(p.scenario.cluster.gpus, p.scenario.cluster.tp) for p in points} == {(4, 2), (8, 4)}
    samples = [p.values for p in points[:3]]
    for v in samples:
        assert 1e-4 <= v["cost.sd_overhead_s"] <= 1e-2 and 0.1 <= v["engine.switch_prefill_fraction"] <= 0.5
        assert isinstance(v["engine.catch_up_limit"], int) and 4 <= v["engine.catch_up_limit"] <= 64
    assert [p.values for p in expand(load_spec(path))] == [p.values for p in points]  # seeded: reproducible
    other = path.read_text().replace("seed = 7", "seed = 8")
    assert [p.values for p in expand(parse_spec(other, path=path))][:3] != samples
    # a single [axes] table is one grid axis; no axes at all is the base scenario as one point
    one = parse_spec(TINY + '[axes]\n"engine.switch" = ["reprefill", "catch_up"]\n', path=path)
    assert [p.scenario.engine.switch for p in expand(one)] == ["reprefill", "catch_up"]
    assert len(expand(parse_spec(TINY, path=path))) == 1


@pytest.mark.parametrize(("body", "field", "words"), [
    ('[[axes]]\n"cluster.gpux" = ["H100"]\n', "axes[0].cluster.gpux", "did you mean cluster.gpu"),
    ('[[axes]]\nkind = "zip"\n"cluster.gpus" = [4, 8]\n"cluster.tp" = [2, 4, 8]\n', "axes[0].cluster.tp",
     "equal lengths: cluster.gpus has 2, cluster.tp has 3"),
    ('[[axes]]\n"cluster.gpus" = ["eight"]\n', "axes[0].cluster.gpus", "must be an integer"),
    ('[[axes]]\n"cluster.gpu" = ["H100", "H2O"]\n', "axes[0].cluster.gpu", "value 'H2O' makes every point invalid"),
    ('[[axes]]\nkind = "grd"\n"cluster.gpu" = ["H100"]\n', "axes[0].kind", "did you mean grid"),
    ('[[axes]]\nkind = "random"\nn = 2\n"cluster.gpu" = { uniform = [1, 2] }\n', "axes[0].cluster.gpu",
     "use choice"),
    ('[[axes]]\nkind = "random"\n"seed" = { int = [0, 9] }\n', "axes[0].n", "needs n ="),
    ('[[axes]]\n"seed" = [1]\n[[axes]]\nseed = [2]\n', "axes[1].seed", "varied by both axes[0] (grid) and axes[1]"),
    ('[[axes]]\n"cluster" = [1]\n', "axes[0].cluster", "is a section"),
    ('axis = []\n', "axis", "did you mean axes"),
])
def test_spec_errors_name_the_file_and_the_axis(tmp_path, body, field, words):
    path = spec_file(tmp_path, body, scenario="")
    with pytest.raises(InputError) as info:
        expand(load_spec(path))
    text = str(info.value)
    assert str(path) in text and f"field '{field}'" in text and words in text, text
    assert "\n" not in text


def test_bad_spec_on_the_command_line_is_one_line_exit_2_and_writes_nothing(tmp_path):
    path = spec_file(tmp_path, '[[axes]]\n"cluster.gpux" = ["H100"]\n')
    proc = invoke_cli("sweep", "run", str(path), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and "did you mean cluster.gpu" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("x")
    ok = spec_file(tmp_path, '[[axes]]\n"seed" = [1]\n', name="ok.toml")
    proc = invoke_cli("sweep", "run", str(ok), "--out", str(tmp_path / "mine"))
    assert proc.returncode == 2 and "not a tlt sweep folder" in proc.stderr
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["thesis.tex"]


# ---- store ----------------------------------------------------------------------------------------
def test_reader_keeps_one_attempt_per_key_whatever_the_files_hold(tmp_path):
    """Duplicates from an interrupted compaction, a retried error or two concurrent runs are read once."""
    path = spec_file(tmp_path, '[[axes]]\n"seed" = [1, 2]\n')
    spec = load_spec(path)
    a, b = expand(spec)
    store = SweepStore(tmp_path / "out")
    store.check_writable()
    frame = pd.DataFrame({"policy": ["no-sd", "p"], "step": [0, 0], "speedup": [1.0, 1.5]})
    first = store.write_point(result_rows(a, PointResult(a.key, frame, None, "", 1.0, "h"), spec.axis_fields), a.key)
    (store.results / "part-copy.parquet").write_bytes(first.read_bytes())  # a compaction that died before deleting
    boom = PointResult(b.key, None, "ValueError: boom", "tb", 1.0, "h")
    store.write_point(result_rows(b, boom, spec.axis_fields), b.key)
    time.sleep(0.01)
    retried = PointResult(b.key, frame, None, "", 1.0, "h")
    store.write_point(result_rows(b, retried, spec.axis_fields), b.key)
    store.write_point(result_rows(b, PointResult(b.key, None, "later error", "", 1.0, "h"), spec.axis_fields), b.key)
    (store.results / ".part-x.tlt-tmp-999999999-abc.parquet").write_bytes(b"half a file")  # SIGKILL mid-write
    df = store.read()
    assert sorted(df["key"]) == sorted([a.key, a.key, b.key, b.key])
    assert set(df[df["key"] == b.key]["attempt"]) == {retried.attempt}  # ok beats a newer error
    assert store.status_by_key() == {a.key: "ok", b.key: "ok"}
    assert store.compact() == 5 and len(list(store.results.glob("part-*"))) == 1
    pd.testing.assert_frame_equal(store.read(), df)
    assert store.remove_stale_temps() == [store.results / ".part-x.tlt-tmp-999999999-abc.parquet"]


# ---- runs -----------------------------------------------------------------------------------------
def test_sigkilled_sweep_resumes_with_one_result_per_point_and_recomputes_nothing(tmp_path):
    path = spec_file(tmp_path, "[[axes]]\nseed = [" + ", ".join(str(i) for i in range(12)) + "]\n")
    keys = {p.key for p in expand(load_spec(path))}
    out, log1, log2 = tmp_path / "out", tmp_path / "calls1.log", tmp_path / "calls2.log"
    cmd = [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(HERE)!r}); import kill_helper; "
           "kill_helper.main()", str(path), str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SWEEP_CALL_LOG": str(log1)}
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_s = hang_seconds(18)  # a hang guard: 90 s on an idle machine, more under load
    deadline = time.monotonic() + wait_s
    while len(list((out / "results").glob("part-*.parquet"))) < 3:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"the sweep committed nothing in {wait_s:.0f} s"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its worker processes, mid-run
    proc.wait(timeout=hang_seconds(6))
    committed = set(SweepStore(out).status_by_key())
    assert 3 <= len(committed) < len(keys) and committed <= keys
    before = raw_rows(out)
    resumed = subprocess.run(cmd, env={**env, "SWEEP_CALL_LOG": str(log2)}, capture_output=True, text=True,
                             timeout=hang_seconds(24))
    assert resumed.returncode == 0, resumed.stderr
    assert f"skipped={len(committed)}" in resumed.stdout
    second_calls = log2.read_text().split()
    assert sorted(second_calls) == sorted(keys - committed)  # each unfinished point once, no finished one
    rows = raw_rows(out)
    assert rows.groupby("key")["attempt"].nunique().eq(1).all() and set(rows["key"]) == keys  # one result each
    assert len(rows) == 2 * len(keys) and (rows["status"] == "ok").all()
    kept = rows[rows["key"].isin(committed)].sort_values(["key", "row"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, before.sort_values(["key", "row"]).reset_index(drop=True))  # untouched
    assert not [p for p in out.rglob(".*") if "tlt-tmp" in p.name]


def test_failing_point_is_recorded_the_rest_finish_and_status_reports_it(tmp_path):
    """One point fails inside the simulation (an unknown trace source), one cannot be simulated at all
    (2 GPUs at TP 4) and is recorded without a worker; the two valid ones finish; --retry-failed
    evaluates only the simulation failure again."""
    path = spec_file(tmp_path, """
[[axes]]
kind = "zip"
"trace.source" = ["profile/intern_s1_math", "bogus", "profile/intern_s1_math", "profile/intern_s1_math"]
"cluster.gpus" = [4, 4, 2, 2]
"cluster.tp" = [4, 4, 4, 2]
""")
    out = tmp_path / "out"
    proc = invoke_cli("sweep", "run", str(path), "--out", str(out), "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    assert "4 points: 0 done before, 2 ok and 2 failed now, 0 pending" in proc.stdout
    df = SweepStore(out).read()
    by_key = df.drop_duplicates("key").set_index(["trace.source", "cluster.gpus", "cluster.tp"])
    ok = by_key.loc[("profile/intern_s1_math", 4, 4)]
    assert ok["status"] == "ok" and ok["error"] == ""
    assert set(df[df["key"] == ok["key"]]["policy"]) == {"no-sd", "elastic+beg-mab"}
    assert by_key.loc[("profile/intern_s1_math", 2, 2)]["status"] == "ok"
    bogus = by_key.loc[("bogus", 4, 4)]
    assert bogus["status"] == "error" and "no source 'bogus'" in bogus["error"] and "trace.source" in bogus["error"]
    assert "Traceback" in bogus["traceback"]
    invalid = by_key.loc[("profile/intern_s1_math", 2, 4)]
    assert invalid["status"] == "error" and "not divisible by tp=4" in invalid["error"]
    status = invoke_cli("sweep", "status", str(out), "--json")
    data = json.loads(status.stdout)
    assert (data["done"], data["failed"], data["pending"]) == (2, 2, 0)
    assert {f["trace.source"] for f in data["failures"]} == {"bogus", "profile/intern_s1_math"}
    text = invoke_cli("sweep", "status", str(path), "--out", str(out)).stdout
    assert "2 done" in text and "2 failed" in text and "no source 'bogus'" in text
    before = df.drop_duplicates("key").set_index("key")["attempt"]
    again = invoke_cli("sweep", "run", str(path), "--out", str(out), "--retry-failed")
    assert again.returncode == 0 and "3 done before, 0 ok and 1 failed now" in again.stdout
    after = SweepStore(out).read().drop_duplicates("key").set_index("key")["attempt"]
    changed = {k for k in before.index if before[k] != after[k]}
    assert changed == {bogus["key"]}
    listed = invoke_cli("sweep", "points", str(path), "--out", str(out)).stdout
    assert "invalid: " in listed and "error" in listed and "ok" in listed


def test_limit_runs_part_of_a_sweep_and_help_teaches_by_example(tmp_path):
    path = spec_file(tmp_path, '[[axes]]\n"engine.switch" = ["reprefill", "catch_up"]\n')
    out = tmp_path / "out"
    report = run_sweep(load_spec(path), out, workers=1, limit=1)
    assert (report.ok, report.pending, report.total) == (1, 1, 2)
    assert json.loads(invoke_cli("sweep", "status", str(out), "--json").stdout)["pending"] == 1
    assert sorted(p.name for p in out.iterdir()) == ["base.resolved.toml", "points.parquet", "results", "spec.toml",
                                                     "sweep.json"]
    assert (out / "spec.toml").read_text() == path.read_text()
    for cmd in ("run", "status", "points"):
        assert "Example: tlt sweep" in invoke_cli("sweep", cmd, "--help").stdout


def test_ray_backend_without_ray_is_one_line_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    path = spec_file(tmp_path, '[[axes]]\n"seed" = [1]\n')
    proc = invoke_cli("sweep", "run", str(path), "--out", str(tmp_path / "out"), "--backend", "ray")
    assert proc.returncode == 2 and "Ray is not installed" in proc.stderr and "tlt[ray]" in proc.stderr
    assert not (tmp_path / "out").exists()


# ---- Ray ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module (starting Ray takes seconds on 2 cores)."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield ray
    ray.shutdown()


def test_ray_backend_gives_the_local_backend_results(tmp_path, local_ray):
    path = spec_file(tmp_path, """
[[axes]]
"cluster.gpu" = ["H100", "H20"]
[[axes]]
kind = "random"
n = 2
seed = 3
"acceptance.mode" = { choice = ["expected", "stochastic"] }
"drafter.quality" = { uniform = [0.8, 1.0] }
""")
    spec = load_spec(path)
    local = run_sweep(spec, tmp_path / "local", backend="local", workers=2)
    ray = run_sweep(spec, tmp_path / "ray", backend="ray", workers=2)
    assert local.ok == ray.ok == 4 and local.failed == ray.failed == 0
    assert local_ray.is_initialized()  # a Ray the sweep did not start is left running
    a = SweepStore(tmp_path / "local").read().drop(columns=BOOKKEEPING)
    b = SweepStore(tmp_path / "ray").read().drop(columns=BOOKKEEPING)
    assert len(a) == 8 and a["acceptance.mode"].nunique() >= 1
    pd.testing.assert_frame_equal(a, b)


# ---- damaged files, --limit accounting, big grids ---------------------------------------------------
def _split_into_parts(out: Path) -> dict[str, Path]:
    """Rewrite a (compacted) sweep's results as one part file per point, as an uncompacted run leaves
    them; returns {key: its part file}."""
    store = SweepStore(out)
    rows = store.read()
    old = sorted(store.results.glob("part-*.parquet"))
    parts = {key: store.write_point(group.reset_index(drop=True), key) for key, group in rows.groupby("key")}
    for p in old:
        p.unlink()
    return parts


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def test_a_damaged_part_is_one_warning_for_status_and_run_recomputes_just_its_points(tmp_path):
    path = spec_file(tmp_path, '[[axes]]\n"seed" = [1, 2, 3]\n')
    out = tmp_path / "out"
    assert invoke_cli("sweep", "run", str(path), "--out", str(out), "--workers", "1").returncode == 0
    parts = _split_into_parts(out)
    attempts = SweepStore(out).read().drop_duplicates("key").set_index("key")["attempt"]
    hit = sorted(parts)[1]
    damaged = parts[hit]
    damaged.write_bytes(damaged.read_bytes()[:200])  # a copy cut short
    cut = damaged.read_bytes()
    status = invoke_cli("sweep", "status", str(out), "--json")
    lines = _warnings(status.stderr)
    assert status.returncode == 0 and len(lines) == 1, status.stderr
    assert lines[0].startswith("tlt: warning:") and str(damaged) in lines[0] and "Traceback" not in status.stderr
    counts = json.loads(status.stdout)
    assert (counts["done"], counts["pending"]) == (2, 1)  # the other points are still read
    assert damaged.read_bytes() == cut  # status only reads
    run = invoke_cli("sweep", "run", str(path), "--out", str(out), "--workers", "1")
    lines = _warnings(run.stderr)
    assert run.returncode == 0 and len(lines) == 1 and str(damaged) in lines[0] and "moved aside" in lines[0]
    assert "3 points: 2 done before, 1 ok and 0 failed now, 0 pending" in run.stdout
    after = SweepStore(out).read().drop_duplicates("key").set_index("key")["attempt"]
    assert {k for k in attempts.index if attempts[k] != after[k]} == {hit}  # only its point ran again
    kept = damaged.with_name(damaged.name + ".damaged")
    assert kept.read_bytes() == cut and not damaged.exists()  # moved aside, never deleted
    again = invoke_cli("sweep", "status", str(out), "--json")
    assert again.stderr == "" and json.loads(again.stdout)["done"] == 3


def test_a_damaged_points_table_is_rebuilt_by_run_and_replaced_by_the_results_in_status(tmp_path):
    path = spec_file(tmp_path, '[[axes]]\n"seed" = [1, 2]\n')
    out = tmp_path / "out"
    assert run_sweep(load_spec(path), out, workers=1, limit=1).pending == 1
    good = (out / "points.parquet").read_bytes()
    (out / "points.parquet").write_bytes(b"PAR1 not really")
    status = invoke_cli("sweep", "status", str(out), "--json")
    lines = _warnings(status.stderr)
    assert status.returncode == 0 and len(lines) == 1 and "points.parquet is damaged" in lines[0], status.stderr
    counts = json.loads(status.stdout)
    assert (counts["points"], counts["done"], counts["pending"]) == (2, 1, 1)  # the total from sweep.json
    run = invoke_cli("sweep", "run", str(path), "--out", str(out), "--workers", "1")
    assert run.returncode == 0 and "rebuilt from the spec" in run.stderr and len(_warnings(run.stderr)) == 1
    assert "2 points: 1 done before, 1 ok and 0 failed now, 0 pending" in run.stdout
    pd.testing.assert_frame_equal(pd.read_parquet(out / "points.parquet"), pd.read_parquet(io.BytesIO(good)))


def test_limit_counts_each_point_once_and_refuses_zero(tmp_path):
    path = spec_file(tmp_path, '[[axes]]\n"seed" = [1, 2, 3]\n')
    out = tmp_path / "out"
    for bad in ("0", "-2"):
        res = invoke_cli("sweep", "run", str(path), "--out", str(out), "--limit", bad)
        lines = _warnings(res.stderr)
        assert res.returncode == 2 and len(lines) == 1 and "--limit" in lines[0] and ">= 1" in lines[0]
        assert not out.exists()
    first = invoke_cli("sweep", "run", str(path), "--out", str(out), "--limit", "1", "--workers", "1")
    assert "3 points: 0 done before, 1 ok and 0 failed now, 2 pending" in first.stdout, first.stdout
    second = invoke_cli("sweep", "run", str(path), "--out", str(out), "--limit", "1", "--workers", "1")
    assert "3 points: 1 done before, 1 ok and 0 failed now, 1 pending" in second.stdout, second.stdout
    assert "1 points to run (1 already have results)" in second.stdout


def test_points_of_a_big_grid_resolves_only_what_it_lists(tmp_path, monkeypatch):
    """The count is the axes' product; only the listed points are resolved (validated, hashed)."""
    import tltsim.sweep.spec as spec_mod

    seeds = ", ".join(str(i) for i in range(40))
    path = spec_file(tmp_path, f'[[axes]]\nseed = [{seeds}]\n"drafter.quality" = [{seeds.replace(", ", ".0, ")}.0]\n')
    calls = []
    real = spec_mod.validate_point
    monkeypatch.setattr(spec_mod, "validate_point", lambda data: calls.append(1) or real(data))
    res = invoke_cli("sweep", "points", str(path), "--show", "3")
    assert res.returncode == 0, res.stderr
    assert "1,600 points" in res.stdout and "the first 3 listed" in res.stdout and len(calls) == 3
    bad = invoke_cli("sweep", "points", str(path), "--show", "-1")
    assert bad.returncode == 2 and "--show" in bad.stderr


def test_points_of_a_million_point_grid_lists_its_head_at_once(tmp_path):
    """Before: every point was resolved first (more than 150 s for 90,000). A CPU-time bound makes a
    regression a failure, not a hang (:func:`conftest.invoke_bounded`: 60 s of CPU, which a loaded
    machine does not stretch)."""
    seeds = ", ".join(str(i) for i in range(1000))
    path = spec_file(tmp_path, f'[[axes]]\nseed = [{seeds}]\n"drafter.quality" = [{seeds.replace(", ", ".0, ")}.0]\n')
    res = invoke_bounded(60, "sweep", "points", str(path), "--show", "2")
    assert res.returncode == 0 and "1,000,000 points" in res.stdout, res.stderr


def test_iter_points_gives_expands_points_in_order(tmp_path):
    path = spec_file(tmp_path, """
[[axes]]
"cluster.gpu" = ["H100", "H20"]
[[axes]]
kind = "random"
n = 3
seed = 5
"drafter.quality" = { uniform = [0.8, 1.0] }
[[axes]]
kind = "zip"
"cluster.gpus" = [4, 8]
"cluster.tp" = [2, 4]
""")
    spec = load_spec(path)
    lazy = list(iter_points(spec))
    assert [(p.index, p.key, dict(p.values)) for p in lazy] == [(p.index, p.key, dict(p.values))
                                                                  for p in expand(spec)]
    assert spec.size == len(lazy) == 12


def test_a_fifo_as_the_spec_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "spec.toml"
    os.mkfifo(fifo)
    for cmd in ("run", "points", "status"):
        res = invoke_cli("sweep", cmd, str(fifo))
        assert res.returncode == 2 and "FIFO" in res.stderr and str(fifo) in res.stderr, res.stderr


def test_compaction_leaves_a_damaged_part_where_it_is(tmp_path):
    """Compaction deletes only what it read: a damaged part is neither merged nor deleted (a run moves
    it aside first; a reader warns about it once)."""
    path = spec_file(tmp_path, '[[axes]]\n"seed" = [1, 2]\n')
    spec = load_spec(path)
    a, b = expand(spec)
    store = SweepStore(tmp_path / "out")
    store.check_writable()
    frame = pd.DataFrame({"policy": ["no-sd"], "step": [0], "speedup": [1.0]})
    for p in (a, b):
        store.write_point(result_rows(p, PointResult(p.key, frame, None, "", 1.0, "h"), spec.axis_fields), p.key)
    bad = store.results / "part-00000000000000000000-1-bad.parquet"
    bad.write_bytes(b"PAR1 cut short")
    assert store.compact() == 2
    assert bad.read_bytes() == b"PAR1 cut short" and len(list(store.results.glob("part-*.parquet"))) == 2
    assert set(store.status_by_key()) == {a.key, b.key} and list(store.damaged) == [bad]
    assert store.quarantine_damaged() == [bad.with_name(bad.name + ".damaged")]

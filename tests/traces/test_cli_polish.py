"""The rough edges a new user met in `tlt trace …` and `tlt demo`, one test (or more) each.

Traces that show an edge are written here as small CSV fixtures, so each test says exactly which
rows make the difference; the catalogued traces in ../shared/traces are used where the edge was
reported on them.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest

from conftest import SHARED, needs_shared_traces

matplotlib.use("Agg")

POLY = "polytrace_rl_rollouts"
DAPO = "polytrace/verl_dapo_qwen2.5-32b"
needs_traces = needs_shared_traces()


def _write_trace(path: Path, *, groups: int = 4, samples: int = 8, sources: tuple[str, ...] = ("my/run1",),
                 steps: int = 2, extra: dict[str, list[str]] | None = None) -> Path:
    """A small canonical CSV trace: ``sources`` x ``steps`` x ``groups`` prompts x ``samples``."""
    rng = np.random.default_rng(7)
    rows = [{"source": src, "step": st, "prompt_id": f"p{g}", "sample_idx": i, "prompt_tokens": 64,
             "response_tokens": int(rng.integers(20, 900))}
            for src in sources for st in range(steps) for g in range(groups) for i in range(samples)]
    df = pd.DataFrame(rows)
    for col, values in (extra or {}).items():
        df[col] = [values[i % len(values)] for i in range(len(df))]
    df.to_csv(path, index=False)
    return path


def _no_nan_json(text: str) -> object:
    """``json.loads`` as a strict parser would: a bare NaN/Infinity is an error."""
    def refuse(name: str) -> object:
        raise ValueError(f"invalid JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def _one_error_line(res) -> str:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert len(lines) == 1 and lines[0].startswith("tlt: error:") and "Traceback" not in res.stderr, res.stderr
    return lines[0]


# ---- 1. tlt demo --trace X simulates X ---------------------------------------------------------------
def test_demo_simulates_the_trace_it_analyses(cli, tmp_path: Path) -> None:
    """Before: the report was titled by --trace but the simulation ran the scenario's own trace."""
    trace = _write_trace(tmp_path / "mini.csv", groups=6, steps=1)
    out = tmp_path / "demo"
    old = os.umask(0o022)
    try:
        res = cli("demo", "--trace", str(trace), "--out", str(out))
    finally:
        os.umask(old)
    assert res.returncode == 0, res.stderr
    resolved = tomllib.loads((out / "scenario.resolved.toml").read_text())
    assert resolved["trace"]["name"] == str(trace)
    assert "source" not in resolved["trace"] and "step" not in resolved["trace"]  # the scenario's, for its trace
    summary = pd.read_csv(out / "sim_summary.csv")
    assert (summary["tokens"] == pd.read_csv(trace)["response_tokens"].sum()).all()  # every response of X
    readme = (out / "README.md").read_text()
    assert f"# tlt demo: the long tail of `{trace}`" in readme
    assert f"one RL step of `{trace}`" in readme
    assert f"--trace {trace} --set trace.source=none --set trace.step=none" in readme
    # 6. the report folder and its files get what the umask gives
    assert out.stat().st_mode & 0o777 == 0o755
    assert {p.stat().st_mode & 0o777 for p in out.iterdir()} == {0o644}


@needs_traces
def test_demo_keeps_the_scenarios_selection_for_its_own_trace() -> None:
    """The same trace (by name or by path) keeps the scenario's trace.source and trace.step."""
    from tltcli.demo import _with_trace
    from tltsim.scenario import load_scenario

    s = load_scenario("dapo_qwen32b_polytrace")
    for same in (None, POLY, str(SHARED / "traces" / f"{POLY}.csv")):
        kept, flags = _with_trace(s, same)
        assert kept == s and flags == ""
    other, flags = _with_trace(s, "r1distill_qwen1.5b_aime_8samples")
    assert other.trace.name == "r1distill_qwen1.5b_aime_8samples"
    assert other.trace.source is None and other.trace.step is None and other.model == s.model
    assert "--trace r1distill_qwen1.5b_aime_8samples" in flags


# ---- 2. --by keeps empty keys and sorts numbers as numbers ----------------------------------------------
def test_stats_by_keeps_empty_keys_and_sorts_numeric_text_keys(cli, tmp_path: Path) -> None:
    """Before: rows with an empty key vanished, and text keys 1, 10, 2 sorted as text."""
    trace = _write_trace(tmp_path / "t.csv", extra={"bucket": ["10", "2", "", "1"]})
    res = cli("trace", "stats", str(trace), "--by", "bucket", "--format", "json")
    assert res.returncode == 0, res.stderr
    rows = _no_nan_json(res.stdout)
    assert [r["bucket"] for r in rows] == ["1", "2", "10", "(empty)", "all"]
    assert sum(r["n"] for r in rows[:-1]) == rows[-1]["n"] == len(pd.read_csv(trace))
    table = cli("trace", "stats", str(trace), "--by", "bucket")
    assert table.stdout.index("│ 2 ") < table.stdout.index("│ 10 ") < table.stdout.index("│ (empty)")


@needs_traces
def test_stats_by_a_partly_empty_column_of_a_real_trace_counts_every_row(cli) -> None:
    for col in ("response_cap", "trainer_step"):  # empty for the runs that do not record them
        res = cli("trace", "stats", POLY, "--by", col, "--format", "json")
        rows = _no_nan_json(res.stdout)
        assert sum(r["n"] for r in rows[:-1]) == rows[-1]["n"] == 16000, col
        assert rows[-2][col] == "(empty)"
    steps = [r["local_index"] for r in _no_nan_json(cli("trace", "stats", POLY, "--by", "local_index",
                                                            "--format", "json").stdout)[:-1]]
    assert steps == sorted(steps, key=int) and steps.index("10") > steps.index("9")


def test_trace_stats_groups_missing_and_blank_keys_together() -> None:
    from tltsim.traces.stats import EMPTY_KEY, trace_stats

    df = pd.DataFrame({"source": "s", "step": 0, "group_id": ["a", "a", "b", "b", "c", "c"],
                       "response_tokens": [1, 2, 3, 4, 5, 6], "hit_cap": False,
                       "k": [None, " ", "x", "x", np.nan, "y"]})
    out = trace_stats(df, ["k"])
    assert list(out["k"]) == ["x", "y", EMPTY_KEY, "all"]
    assert list(out["n"]) == [2, 1, 3, 6]


# ---- 3. one-sample groups: "–" in tables, null in JSON ---------------------------------------------------
def test_undefined_statistics_are_null_in_json_and_a_dash_in_tables(cli, tmp_path: Path) -> None:
    """Before: a bare NaN in --format json (invalid JSON) and 'nan×' in the table."""
    trace = _write_trace(tmp_path / "single.csv", samples=1)  # no group has two samples: group_tail undefined
    res = cli("trace", "stats", str(trace), "--by", "step", "--format", "json")
    assert res.returncode == 0, res.stderr
    rows = _no_nan_json(res.stdout)  # raises on NaN
    assert [r["group_tail"] for r in rows] == [None, None, None]
    assert all(isinstance(r["mean"], float) for r in rows)
    table = cli("trace", "stats", str(trace), "--by", "step")
    assert "nan" not in table.stdout.lower()
    assert len(re.findall(r"│\s+– │", table.stdout)) == 3  # group max/mean of each row
    csv = cli("trace", "stats", str(trace), "--format", "csv")
    assert "nan" not in csv.stdout.lower()


# ---- 4. distinct, unit-bearing column names --------------------------------------------------------------
def test_stats_table_headers_are_distinct_and_name_their_units(tmp_path: Path) -> None:
    """Before: two columns were both called 'max' (longest response, and the largest straggler factor)."""
    from tltcli.trace import STAT_LABELS, stats_table
    from tltsim.traces import read_trace, trace_stats

    out = trace_stats(read_trace(_write_trace(tmp_path / "t.csv")), ["source"])
    headers = [str(c.header) for c in stats_table(out, ["source"], "t").columns]
    assert len(headers) == len(set(headers)), headers
    for col, label in STAT_LABELS.items():
        assert col in ("n", "steps") or re.search(r"tok|×|%", label), (col, label)
    assert "max\ntok" in headers and "straggler\nmax ×" in headers


# ---- 5. --source, and the trace.* fields documented ------------------------------------------------------
@needs_traces
def test_source_option_filters_stats_and_plot(cli, tmp_path: Path) -> None:
    res = cli("trace", "stats", POLY, "--source", DAPO, "--format", "json")
    assert res.returncode == 0, res.stderr
    (row,) = _no_nan_json(res.stdout)
    assert row["n"] == 4608
    both = _no_nan_json(cli("trace", "stats", POLY, "--source", DAPO, "--source",
                            "polytrace/rllm_deepcoder_14b_16k", "--by", "source", "--format", "json").stdout)
    assert [r["source"] for r in both] == ["polytrace/rllm_deepcoder_14b_16k", DAPO, "all"]
    plot = cli("trace", "plot", POLY, "--source", DAPO, "--out", str(tmp_path / "p"))
    assert plot.returncode == 0, plot.stderr
    assert len(list((tmp_path / "p").glob("*.png"))) == 2


@needs_traces
@pytest.mark.parametrize("command", ["stats", "plot"])
def test_unknown_source_is_one_line_naming_the_option_the_sources_and_the_closest(cli, tmp_path: Path,
                                                                                  command: str) -> None:
    res = cli("trace", command, POLY, "--source", "verl_dapo_qwen2.5-32", "--out", str(tmp_path / "p")) \
        if command == "plot" else cli("trace", command, POLY, "--source", "verl_dapo_qwen2.5-32")
    line = _one_error_line(res)
    assert "'--source'" in line and f"did you mean {DAPO}?" in line
    for src in (DAPO, "polytrace/rllm_deepcoder_14b_16k", "polytrace/verl_video_qwen2.5-vl-7b"):
        assert src in line
    assert not (tmp_path / "p").exists()


def test_trace_help_documents_every_trace_field(cli) -> None:
    from tltsim.scenario import TraceSection, field_paths

    text = " ".join(cli("trace", "--help").stdout.split())
    trace_fields = [f for f in field_paths() if f.startswith("trace.")]
    assert len(trace_fields) == len(TraceSection.model_fields)
    for dotted in trace_fields:
        assert f"{dotted}:" in text, dotted
    assert "(default r1distill_qwen1.5b_aime_8samples)" in text and "(default true)" in text
    assert "trace.source" in " ".join(cli("trace", "stats", "--help").stdout.split())


# ---- 6. permissions follow the umask ---------------------------------------------------------------------
@needs_traces
@pytest.mark.parametrize(("umask", "folder", "file"), [(0o022, 0o755, 0o644), (0o027, 0o750, 0o640)])
def test_plot_outputs_get_the_umask_permissions(cli, tmp_path: Path, umask: int, folder: int, file: int) -> None:
    """Not 0700/0600 (what mkstemp/mkdtemp create) but what any program would create."""
    out = tmp_path / "new" / "plots"
    old = os.umask(umask)
    try:
        res = cli("trace", "plot", POLY, "--source", DAPO, "--out", str(out))
    finally:
        os.umask(old)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "new").stat().st_mode & 0o777 == folder
    assert out.stat().st_mode & 0o777 == folder
    assert {p.stat().st_mode & 0o777 for p in out.iterdir()} == {file}


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="needs Linux /proc")
def test_umask_is_read_without_setting_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Setting the umask to read it leaves a window where another thread creates world-writable files."""
    from tltcore.atomic import write_text

    old = os.umask(0o022)
    try:
        def no_umask(mask: int) -> int:
            raise AssertionError("os.umask called while writing")

        monkeypatch.setattr(os, "umask", no_umask)
        write_text(tmp_path / "a.txt", "x")
        monkeypatch.undo()
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o644


# ---- 7. distinct, fixed colours; legends off the data ----------------------------------------------------
KNOWN = ["no-sd", "verl", "tlt-base", "static-drafter", "tlt", "tlt-no-spot", "tlt-periodic", "tlt-no-elastic",
         "tlt-no-mab", "speco-bubble", "elastic+beg-mab", "beg-mab", "static", "vllm-table", "sglang-ema",
         "greedy-oracle"]


def test_known_policies_and_presets_have_fixed_distinct_colours() -> None:
    from analysis.style import POLICY_COLORS, colors_for

    assert set(KNOWN) <= set(POLICY_COLORS)
    assert len(set(POLICY_COLORS.values())) == len(POLICY_COLORS)
    together = colors_for(KNOWN)
    assert together == {n: POLICY_COLORS[n] for n in KNOWN}
    assert colors_for(["tlt"])["tlt"] == colors_for(["tlt", "my/run1"])["tlt"] == POLICY_COLORS["tlt"]


def test_colours_never_collide_within_a_figure_and_do_not_depend_on_order() -> None:
    """Before: a hash into a 12-colour palette; my/run1 and my/run2 (and real sources) shared a colour."""
    from analysis.style import POLICY_COLORS, SOURCE_COLORS, colors_for

    pair = colors_for(["my/run2", "my/run1"])
    assert pair["my/run1"] != pair["my/run2"]
    assert pair == colors_for(["my/run1", "my/run2"])
    assert len(set(SOURCE_COLORS.values())) == len(SOURCE_COLORS)
    many = colors_for([f"name{i}" for i in range(60)] + ["no-sd", "tlt"])
    assert len(set(many.values())) == len(many) == 62
    assert many["tlt"] == POLICY_COLORS["tlt"]
    same_family = colors_for(["static:8_4_32", "static:4_2_6", "elastic:16:3+beg-mab"])
    assert len(set(same_family.values())) == 3
    assert POLICY_COLORS["elastic+beg-mab"] == same_family["elastic:16:3+beg-mab"]
    assert POLICY_COLORS["static"] in same_family.values()


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _legend_clear_of_axes(fig) -> None:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = [leg for ax in fig.axes for leg in [ax.get_legend()] if leg is not None] + list(fig.legends)
    assert legends
    for leg in legends:
        box = leg.get_window_extent(renderer)
        for ax in fig.axes:
            assert not _overlaps(box, ax.get_window_extent(renderer)), (box, ax.get_window_extent(renderer))


def test_trace_figures_colour_sources_apart_and_keep_legends_off_the_axes(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    from analysis.trace_plots import length_cdf, straggler_factor
    from tltsim.traces import read_trace

    df = read_trace(_write_trace(tmp_path / "t.csv", sources=("my/run1", "my/run2", "polytrace/search_r1_qwen2.5-7b",
                                                             "task-hardness-analysis/aime")))
    for fig in (length_cdf(df), straggler_factor(df)):
        colours = [line.get_color() for line in fig.axes[0].get_lines()]
        assert len(colours) == 4 and len(set(colours)) == 4
        assert fig.axes[0].get_xlabel() and fig.axes[0].get_ylabel()
        _legend_clear_of_axes(fig)
        plt.close(fig)


def test_rollout_figures_colour_policies_apart_and_keep_legends_off_the_axes() -> None:
    import matplotlib.pyplot as plt

    from analysis.rollout_plots import makespan_bars, rollout_timeline
    from analysis.style import POLICY_COLORS

    policies = ["no-sd", "static:8_4_32", "static:4_2_6"]
    rows = []
    for p in policies:
        for w in range(2):
            for i in range(20):
                rows.append({"policy": p, "step": 0, "kind": "decode", "phase": "rollout", "worker": w,
                             "t_start": float(i),
                             "t_end": i + 1.0, "batch_size": 20 - i, "depth": 0 if p == "no-sd" else 4})
    fig = rollout_timeline(pd.DataFrame(rows))
    _legend_clear_of_axes(fig)
    sd_colours = [h.get_color() for h in fig.axes[0].get_legend().legend_handles][2:-2]  # then idle, training
    assert len(sd_colours) == 2 and len(set(sd_colours)) == 2
    plt.close(fig)
    summary = pd.DataFrame({"policy": policies, "makespan_s": [3.0, 2.0, 1.5], "speedup": [1.0, 1.5, 2.0]})
    fig = makespan_bars(summary)
    bars = [matplotlib.colors.to_hex(b.get_facecolor()) for b in fig.axes[0].patches]
    assert bars[0] == POLICY_COLORS["no-sd"].lower() and len(set(bars)) == 3
    plt.close(fig)


# ---- 8. help teaches by example; typos get suggestions ---------------------------------------------------
@pytest.mark.parametrize(("args", "example"), [
    (("trace", "list"), "Example: tlt trace list"),
    (("trace", "stats"), "Example: tlt trace stats "),
    (("trace", "plot"), "Example: tlt trace plot "),
    (("demo",), "Example: tlt demo "),
    (("report",), "Examples: tlt sim run --preset tlt"),
])
def test_help_has_an_example_line(cli, args: tuple[str, ...], example: str) -> None:
    res = cli(*args, "--help")
    assert res.returncode == 0, res.stderr
    assert example in " ".join(res.stdout.split())


@pytest.mark.parametrize(("args", "hint"), [
    (("trace", "stats", POLY, "--bi", "source"), "--by"),
    (("trace", "plot", POLY, "--sorce", DAPO), "--source"),
    (("demo", "--trac", "x"), "--trace"),
    (("report", "x", "--ou", "y"), "--out"),
    (("trace", "stat", POLY), "Did you mean 'stats'?"),
    (("trce",), "Did you mean 'trace'?"),
])
def test_typos_in_options_and_commands_suggest_the_closest(cli, args: tuple[str, ...], hint: str) -> None:
    res = cli(*args)
    assert res.returncode == 2
    assert hint in res.stderr, res.stderr


def test_unknown_scenario_field_in_set_suggests_the_closest(cli, tmp_path: Path) -> None:
    line = _one_error_line(cli("sim", "run", "--set", "trace.sorce=x", "--out", str(tmp_path / "r")))
    assert "field 'trace.sorce'" in line and "did you mean trace.source" in line
    assert not (tmp_path / "r").exists()

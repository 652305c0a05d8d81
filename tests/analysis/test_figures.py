"""Every figure function renders from a small fixture with labelled axes, and draws what it claims.

Fixtures are tiny simulated runs (the parametric ``intern_s1_math`` profile, 8 prompt groups, 8 GPUs),
so each figure is checked on real simulator output, not on hand-made frames that could drift from
the schema.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import LineCollection

from analysis.memory_plots import cuda_graph_memory
from analysis.report import curve_configs
from analysis.rl_plots import accept_over_steps, speedup_bars, step_breakdown
from analysis.rollout_plots import (
    TRAIN_COLOUR,
    gpu_utilisation,
    makespan_bars,
    rollout_timeline,
    utilisation_over_time,
)
from analysis.sd_plots import sd_speedup_heatmap, sd_speedup_vs_batch
from analysis.style import paper_rc, save_figure
from analysis.sweep_plots import response_curves, response_surface, with_elastic_columns
from analysis.trace_plots import length_cdf, straggler_factor
from analysis.validation_report import makespan_bars as validation_makespan_bars
from conftest import require_real_traces
from tltcore.policy.base import SDConfig, max_tree_nodes
from tltcore.sd_speedup import grid_configs, sd_speedup_table
from tltsim.rl.run import compare_presets
from tltsim.scenario import Scenario, apply_override, compare_policies, prepare


def _scenario(**sets: str) -> Scenario:
    base = {"trace.prompts_per_step": "8", "trace.num_steps": "3", "trace.cap": "8192", "cluster.gpus": "8",
            "cluster.tp": "2", "spot.samples_per_s": "2000", "spot.checkpoint_every": "32", "spot.max_samples": "64"}
    s = Scenario()
    for k, v in {**base, **sets}.items():
        s = apply_override(s, k, v)
    return s


@pytest.fixture(scope="module")
def rl_run() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    require_real_traces()
    s = apply_override(_scenario(), "presets", "tlt,static-drafter,tlt-base")
    return compare_presets(s)


@pytest.fixture(scope="module")
def rollout_run() -> tuple[pd.DataFrame, pd.DataFrame]:
    require_real_traces()
    s = apply_override(_scenario(**{"trace.num_steps": "1"}), "policies", "elastic+beg-mab,static:8_4_32")
    return compare_policies(s)


@pytest.fixture(scope="module")
def sd_tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    require_real_traces()
    inputs = prepare(_scenario())
    grid = sd_speedup_table(inputs.cost, inputs.accept, grid_configs([2, 4, 8], [4, 16, 32]), [1])
    curves = sd_speedup_table(inputs.cost, inputs.accept, [SDConfig.parse(c) for c in ("8_4_8", "8_4_32")],
                              [1, 4, 16, 64, 256])
    return grid, curves


def _data_axes(fig: plt.Figure) -> list[plt.Axes]:
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def assert_labelled(fig: plt.Figure) -> None:
    """Every panel has a title or is one of a labelled set; the x and y axes carry labels (shared
    axes: on the outer panels); colour bars are labelled."""
    axes = _data_axes(fig)
    assert axes
    assert any(ax.get_xlabel().strip() for ax in axes), "no x label"
    assert any(ax.get_ylabel().strip() for ax in axes), "no y label"
    for ax in axes:
        bottom = ax.get_subplotspec() is None or ax.get_subplotspec().is_last_row()
        left = ax.get_subplotspec() is None or ax.get_subplotspec().is_first_col()
        assert ax.get_xlabel().strip() or not bottom, f"x axis of {ax.get_title()!r} unlabelled"
        assert ax.get_ylabel().strip() or not left, f"y axis of {ax.get_title()!r} unlabelled"
    for cb in (ax for ax in fig.axes if ax.get_label() == "<colorbar>"):
        assert cb.get_ylabel().strip() or cb.get_xlabel().strip(), "colour bar unlabelled"


def rendered(fig: plt.Figure, tmp_path: Path, stem: str) -> plt.Figure:
    assert_labelled(fig)
    paths = save_figure(fig, tmp_path / stem)
    assert [p.suffix for p in paths] == [".png", ".pdf"] and all(p.stat().st_size > 1000 for p in paths)
    assert png_dpi(paths[0]) == pytest.approx(paper_rc()["savefig.dpi"], rel=1e-3)  # not savefig's 100
    return fig


def png_dpi(path: Path) -> float:
    from PIL import Image

    with Image.open(path) as im:
        return float(im.info["dpi"][0])


def tick_texts(axis) -> list[str]:
    """The labels an axis shows (major and minor), as drawn."""
    axis.figure.canvas.draw()
    return [t.get_text() for t in (*axis.get_ticklabels(), *axis.get_ticklabels(minor=True)) if t.get_text()]


def test_the_same_figure_saved_twice_is_the_same_bytes(tmp_path, monkeypatch):
    """A PDF carried its creation date, so identical runs wrote different files: saved on two
    different dates (matplotlib reads the date from SOURCE_DATE_EPOCH when set), the bytes agree."""
    def figure() -> plt.Figure:
        fig, ax = plt.subplots()
        ax.plot([1, 2, 3], [3, 1, 2])
        ax.set(title="t", xlabel="x", ylabel="y")
        return fig

    files = []
    for day, stem in ((0, "a"), (400, "b")):
        monkeypatch.setenv("SOURCE_DATE_EPOCH", str(day * 86400))
        files.append(save_figure(figure(), tmp_path / stem))
    for first, second in zip(*files, strict=True):
        assert first.read_bytes() == second.read_bytes(), first.name
    assert b"CreationDate" not in files[0][1].read_bytes()


# ---- traces ---------------------------------------------------------------------------------------
def test_length_cdf_and_straggler_factor(tmp_path):
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"source": np.repeat(["a", "b"], 40), "step": np.tile(np.repeat([0, 1], 20), 2),
                       "response_tokens": rng.lognormal(6, 1, 80).astype(int) + 1})
    rendered(length_cdf(df), tmp_path, "cdf")
    fig = straggler_factor(df)
    line = fig.axes[0].get_lines()[0]
    s = df[df["source"] == "a"].groupby("step")["response_tokens"].agg(["max", "mean"])
    np.testing.assert_allclose(line.get_ydata(), s["max"] / s["mean"])
    rendered(fig, tmp_path, "straggler")


def test_straggler_factor_labels_whole_steps_and_plain_factors():
    """Two steps gave step ticks 1.0, 1.5, 2.0; factors within one decade read ``2.2×10^0``."""
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"source": "a", "step": np.repeat([1, 2], 20),
                       "response_tokens": rng.lognormal(6, 0.6, 40).astype(int) + 1})
    ax = straggler_factor(df).axes[0]
    lo, hi = ax.get_xlim()
    steps = [x for x in ax.get_xticks() if lo <= x <= hi]
    assert steps == [1, 2]
    labels = tick_texts(ax.yaxis)
    assert labels and not any("times" in t or "^" in t for t in labels), labels
    assert all(float(t) > 0 for t in labels)
    plt.close(ax.figure)


# ---- rollouts and RL runs -------------------------------------------------------------------------
def test_rollout_timeline_draws_spot_training_only_where_it_happened(rl_run, tmp_path):
    events, _, _ = rl_run
    fig = rollout_timeline(events)
    titles = [ax.get_title(loc="left") for ax in _data_axes(fig)]
    assert [t.split(":")[0] for t in titles] == ["verl", "tlt", "static-drafter", "tlt-base"]

    def train_segments(ax: plt.Axes) -> int:
        return sum(len(c.get_segments()) for c in ax.collections if isinstance(c, LineCollection)
                   and len(c.get_colors()) and np.allclose(c.get_colors()[0][:3], plt.matplotlib.colors.to_rgb(
                       TRAIN_COLOUR)))

    trained = events[(events["kind"] == "train")].groupby("policy").size()
    panels = dict(zip([t.split(":")[0] for t in titles], _data_axes(fig), strict=True))
    assert train_segments(panels["tlt"]) == trained["tlt"] > 0
    assert train_segments(panels["verl"]) == train_segments(panels["static-drafter"]) == 0
    rendered(fig, tmp_path, "timeline")


def test_gpu_utilisation_integrates_to_busy_worker_seconds_and_never_trains_while_generating(rl_run, tmp_path):
    events, _, _ = rl_run
    u = utilisation_over_time(events, "tlt", points=2000)
    assert u["generating"].iloc[0] == 1.0  # every worker prefills at the start
    assert (u["generating"] + u["training"] <= 1.0 + 1e-12).all()
    assert u["training"].max() > 0
    assert utilisation_over_time(events, "verl")["training"].max() == 0
    # the busy share integrates to the generating worker-seconds (per worker, merged spans)
    gen = events[(events["policy"] == "verl") & (events["worker"] >= 0) & (events["phase"] == "rollout")
                 & events["kind"].isin(["prefill", "decode", "switch_reprefill", "catch_up"])]
    n = gen["worker"].nunique()
    fine = utilisation_over_time(events, "verl", points=20000)
    dt = fine["t"].iloc[1] - fine["t"].iloc[0]
    busy_s = float((gen["t_end"] - gen["t_start"]).sum())
    assert abs(fine["generating"].sum() * dt * n - busy_s) / busy_s < 0.01
    rendered(gpu_utilisation(events), tmp_path, "utilisation")


def test_makespan_bars(rollout_run, tmp_path):
    _, summary = rollout_run
    rendered(makespan_bars(summary), tmp_path, "makespan")


@pytest.mark.parametrize("names", [["no-sd"], ["no-sd", "cost-aware:phases=4:prior_weight=2",
                                               "elastic:128:3+static:8_4_32", "vllm-table:4=5,16=3,above=1"]])
def test_makespan_bars_title_fits_inside_the_figure(names):
    """Long policy names pushed the axes right and the title over them past the figure's edge."""
    summary = pd.DataFrame({"policy": names, "makespan_s": np.linspace(100, 50, len(names)),
                            "speedup": 100 / np.linspace(100, 50, len(names))})
    fig = makespan_bars(summary)
    renderer = fig.canvas.get_renderer()
    titles = [t for t in (fig._suptitle, *(ax.title for ax in fig.axes)) if t is not None and t.get_text()]
    assert len(titles) == 1
    box, page = titles[0].get_window_extent(renderer), fig.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1
    plt.close(fig)


def test_step_breakdown_stacks_every_phase_to_the_step_time(rl_run, tmp_path):
    _, _, summary = rl_run
    fig = step_breakdown(summary)
    ax = fig.axes[0]
    tops = {}
    for bars in ax.containers:
        for rect, name in zip(bars, summary["preset"], strict=True):
            tops[name] = max(tops.get(name, 0.0), rect.get_y() + rect.get_height())
    for row in summary.itertuples():
        assert tops[row.preset] == pytest.approx(row.total_s / row.steps, rel=1e-9)
    rendered(fig, tmp_path, "breakdown")


def test_speedup_bars_mark_out_of_memory_and_the_one_x_line(tmp_path):
    table = pd.DataFrame({"setting": ["7B", "7B", "32B", "32B"], "preset": ["tlt", "tlt-base"] * 2,
                          "speedup": [1.5, 0.9, np.nan, np.nan], "status": ["ok", "ok", "oom", "oom"]})
    fig = speedup_bars(table, group="setting", series="preset")
    ax = fig.axes[0]
    assert sum(t.get_text() == "OOM" for t in ax.texts) == 2
    assert any(np.allclose(line.get_ydata(), 1.0) for line in ax.get_lines())
    heights = [r.get_height() for c in ax.containers for r in c]
    assert heights == [1.5, 0.0, 0.9, 0.0]
    rendered(fig, tmp_path, "speedup")


def test_accept_over_steps_plots_each_preset_with_sd(rl_run, tmp_path):
    _, steps, _ = rl_run
    fig = accept_over_steps(steps, references={"paper: adapted 6.53": 6.53})
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert labels == ["tlt", "static-drafter", "tlt-base", "paper: adapted 6.53"]  # verl has no SD
    tlt = steps[steps["preset"] == "tlt"]
    np.testing.assert_allclose(fig.axes[0].get_lines()[0].get_ydata(), tlt["mean_accept_length"])
    rendered(fig, tmp_path, "accept")


# ---- SD speedup -----------------------------------------------------------------------------------
def test_sd_speedup_table_is_accept_times_decode_over_sd_time(sd_tables):
    grid, curves = sd_tables
    inputs = prepare(_scenario())
    row = curves[(curves["config"] == "8_4_32") & (curves["batch"] == 16)].iloc[0]
    ctx = np.full(16, 2048)
    c = SDConfig.parse("8_4_32")
    expected = inputs.accept.expected_accept_length(c) * inputs.cost.decode_time(ctx) / inputs.cost.sd_time(ctx, c)
    assert row["speedup"] == pytest.approx(expected, rel=1e-12)
    big = curves[curves["config"] == "8_4_32"].sort_values("batch")["speedup"].to_numpy()
    assert (np.diff(big) <= 1e-9).all() and big[-1] < big[0]  # SD pays less as the batch grows
    valid = {(d, v) for d in (2, 4, 8) for v in (4, 16, 32) if v <= max_tree_nodes(d, 4)}
    assert set(zip(grid["depth"], grid["verify_tokens"], strict=True)) == valid and len(valid) < 9


def test_sd_heatmap_cells_are_the_table_and_invalid_trees_blank(sd_tables, tmp_path):
    grid, _ = sd_tables
    fig = sd_speedup_heatmap(grid)
    img = fig.axes[0].images[0].get_array()
    pivot = grid.pivot_table(index="depth", columns="verify_tokens", values="speedup")
    np.testing.assert_allclose(np.ma.filled(img.astype(float), np.nan), pivot.to_numpy(), equal_nan=True)
    assert np.isnan(img.astype(float).filled(np.nan)).sum() == 9 - len(grid)  # the trees too small to verify
    rendered(fig, tmp_path, "heatmap")


def test_sd_speedup_vs_batch(sd_tables, tmp_path):
    _, curves = sd_tables
    fig = sd_speedup_vs_batch(curves)
    assert [line.get_label() for line in fig.axes[0].get_lines()][:2] == ["8_4_8", "8_4_32"]
    rendered(fig, tmp_path, "vs_batch")


def test_sd_speedup_vs_batch_ticks_are_the_whole_batch_sizes():
    """A log-2 axis with a scalar formatter labelled the batches 1.0, 2.0, ... (and 0.5, 512.0)."""
    curves = pd.DataFrame({"config": "4_1_4", "batch": [1, 4, 16, 64], "speedup": [2.0, 1.6, 1.2, 0.9]})
    ax = sd_speedup_vs_batch(curves).axes[0]
    assert list(ax.get_xticks()) == [1, 4, 16, 64]
    assert tick_texts(ax.xaxis) == ["1", "4", "16", "64"]
    plt.close(ax.figure)


def test_sd_vs_batch_shows_the_chains_beside_the_trees():
    """The report drew TLT's trees only, so a chain recommendation (advise's 4_1_4, vLLM's tables, a
    run's static chain) had no curve to read."""
    shapes = curve_configs(["no-sd", "static:3_1_3", "vllm-table", "tlt"])  # "tlt" is a preset: no shapes
    assert shapes == ["1_1_1", "3_1_3", "4_1_4", "5_1_5", "8_4_8", "8_4_16", "8_4_32", "8_4_48"]


# ---- sweeps, memory, validation -------------------------------------------------------------------
@pytest.fixture
def sweep_rows() -> pd.DataFrame:
    rows = [{"cluster.gpu": g, "policy": f"elastic:{t}+{inner}", "step": st,
             "speedup": (2.0 if g == "H100" else 0.8) + t / 1000 + st * 0.01}
            for g in ("H100", "H20") for t in (8, 32, 128) for inner in ("beg-mab", "static:8_4_32")
            for st in (0, 1, 2)]
    return with_elastic_columns(pd.DataFrame(rows))


def test_with_elastic_columns_splits_threshold_and_inner_policy():
    df = with_elastic_columns(pd.DataFrame({"policy": ["elastic:8+beg-mab", "elastic+static:8_4_32", "no-sd"]}))
    assert df["elastic_threshold"].tolist()[:2] == [8.0, 32.0] and np.isnan(df["elastic_threshold"].iloc[2])
    assert df["inner_policy"].tolist() == ["beg-mab", "static:8_4_32", "no-sd"]


def test_response_surface_cells_are_medians_per_panel(sweep_rows, tmp_path):
    fig = response_surface(sweep_rows, "elastic_threshold", "cluster.gpu", facet="inner_policy")
    panels = _data_axes(fig)
    assert [ax.get_title() for ax in panels] == ["inner_policy = beg-mab", "inner_policy = static:8_4_32"]
    img = panels[0].images[0].get_array()
    part = sweep_rows[sweep_rows["inner_policy"] == "beg-mab"]
    med = part.groupby(["cluster.gpu", "elastic_threshold"])["speedup"].median()
    ys = [t.get_text() for t in panels[0].get_yticklabels()]
    assert img[ys.index("H20"), 2] == pytest.approx(med[("H20", 128.0)])
    assert img[ys.index("H100"), 0] == pytest.approx(med[("H100", 8.0)])
    rendered(fig, tmp_path, "surface")


def test_response_curves(sweep_rows, tmp_path):
    fig = response_curves(sweep_rows, "elastic_threshold", "cluster.gpu", facet="inner_policy", log_x=True)
    line = next(ln for ln in _data_axes(fig)[0].get_lines() if ln.get_label() == "H20")
    np.testing.assert_allclose(line.get_xdata(), [8, 32, 128])
    np.testing.assert_allclose(line.get_ydata(), [0.818, 0.842, 0.938])
    rendered(fig, tmp_path, "curves")


def test_cuda_graph_memory(tmp_path):
    table = pd.DataFrame({"case": ["naive", "bucketed"] * 2, "source": ["paper"] * 2 + ["model"] * 2,
                          "gb": [30.39, 10.69, 29.8, 10.6]})
    fig = cuda_graph_memory(table)
    assert [round(r.get_height(), 2) for c in fig.axes[0].containers for r in c] == [30.39, 10.69, 29.8, 10.6]
    rendered(fig, tmp_path, "graphs")


def test_sim_vs_real_makespan_bars(tmp_path):
    """Medians over the rounds as bars; the real bar's whisker spans the rounds' min to max."""
    m = pd.DataFrame({"step": [0, 0], "policy": ["no-sd", "elastic+beg-mab"], "real_s": [10.0, 6.0],
                      "real_min_s": [9.0, 5.5], "real_max_s": [12.0, 6.0],
                      "calibrated_predicted_s": [10.5, 6.4], "calibrated_measured_s": [10.2, 6.1]})
    fig = validation_makespan_bars(m)
    whiskers = [seg for c in fig.axes[0].containers if getattr(c, "has_xerr", False)
                for seg in c.lines[2][0].get_segments()]
    assert sorted((round(a[0], 6), round(b[0], 6)) for a, b in whiskers) == [(5.5, 6.0), (9.0, 12.0)]
    rendered(fig, tmp_path, "sim_vs_real")


@pytest.mark.parametrize("context", [0, 15, 16, 17, 2048])
def test_sd_speedup_table_rows_are_the_scalar_times_exactly(context):
    """The table prices by columns from paged-KV sums; every row's decode and SD seconds are the floats
    ``decode_time`` and ``sd_time`` give for that batch, and the speedup is (accept x decode) / sd."""
    inputs = prepare(_scenario())
    configs = [SDConfig.parse(c) for c in ("1_1_1", "4_1_4", "8_4_32")]
    table = sd_speedup_table(inputs.cost, inputs.accept, configs, [1, 2, 7, 64, 300], context_tokens=context)
    for r in table.itertuples(index=False):
        ctx = np.full(r.batch, context)
        c = SDConfig.parse(r.config)
        assert r.decode_s == inputs.cost.decode_time(ctx) and r.sd_s == inputs.cost.sd_time(ctx, c)
        assert r.speedup == inputs.accept.expected_accept_length(c) * r.decode_s / r.sd_s

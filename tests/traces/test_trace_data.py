"""Catalog, search path, statistics, workloads and the Intern-S1 profile on real data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import needs_shared_traces
from tltsim.errors import InputError
from tltsim.traces import build_workload, catalog, load_trace, trace_stats
from tltsim.traces.catalog import find_file, search_path, sha256_of
from tltsim.traces.profiles import INTERN_S1_MATH
from tltsim.traces.stats import top_share


@needs_shared_traces()
def test_polytrace_stats_reproduce_sources_md() -> None:
    """`tlt trace stats polytrace_rl_rollouts --by source` equals the table in SOURCES.md."""
    s = trace_stats(load_trace("polytrace_rl_rollouts"), ["source"]).set_index("source")
    dapo = s.loc["polytrace/verl_dapo_qwen2.5-32b"]
    got = (dapo["n"], round(dapo["mean"]), dapo["p50"], round(dapo["p99"]), dapo["max"])
    assert got == (4608, 581, 466, 2711, 10112)
    assert round(dapo["top5_share"], 3) == 0.193 and round(dapo["group_tail"], 2) == 2.21
    assert 9.6 < dapo["straggler_min"] < 9.8 and 18.4 < dapo["straggler_max"] < 18.5
    coder = s.loc["polytrace/rllm_deepcoder_14b_16k"]
    assert (coder["n"], round(coder["mean"]), coder["p50"], coder["max"]) == (640, 9382, 9900, 16000)
    video = s.loc["polytrace/verl_video_qwen2.5-vl-7b"]
    assert (video["n"], round(video["mean"]), video["p50"], round(video["p99"])) == (10752, 177, 159, 315)
    every = s.loc["all"]
    assert (every["n"], round(every["mean"]), every["p50"], round(every["p99"])) == (16000, 662, 183, 14345)
    assert round(every["top5_share"], 3) == 0.617


@needs_shared_traces()
def test_catalog_checksums_match_shared_files() -> None:
    for entry in catalog().values():
        if entry.file is None:
            continue
        path = find_file(entry.file)
        assert path is not None, entry.name
        assert sha256_of(path) == entry.sha256, entry.name
        assert len(load_trace(entry.name)) == entry.rows


def test_search_path_env_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mine.csv").write_text("response_tokens\n5\n7\n")
    monkeypatch.setenv("TLT_TRACE_PATH", str(tmp_path))
    assert search_path()[0] == tmp_path
    assert load_trace("mine.csv")["response_tokens"].tolist() == [5, 7]


def test_top_share_and_straggler_by_hand() -> None:
    assert top_share(np.array([1] * 19 + [81])) == pytest.approx(81 / 100)
    df = pd.DataFrame({"source": "s", "step": [0, 0, 1, 1], "prompt_id": ["a", "a", "b", "b"],
                       "group_id": ["a", "a", "b", "b"], "sample_idx": [0, 1, 0, 1],
                       "prompt_tokens": 1, "response_tokens": [10, 30, 5, 5], "hit_cap": [False, True, False, False]})
    st = trace_stats(df).iloc[0]
    assert st["straggler_max"] == pytest.approx(1.5) and st["straggler_min"] == pytest.approx(1.0)
    assert st["hit_cap_frac"] == 0.25 and st["steps"] == 2
    with pytest.raises(InputError, match="--by"):
        trace_stats(df, ["nope"])


@needs_shared_traces()
def test_per_step_trace_yields_its_steps() -> None:
    df = load_trace("polytrace_rl_rollouts")
    dapo = df[df["source"] == "polytrace/verl_dapo_qwen2.5-32b"]
    steps = build_workload(dapo)
    assert [s.step for s in steps] == list(range(6))
    assert all(s.n_requests == 768 and s.n_groups == 96 for s in steps)
    sub = build_workload(dapo, steps=[2], prompts_per_step=10, samples_per_prompt=4, seed=1)
    assert len(sub) == 1 and sub[0].n_requests == 40 and sub[0].n_groups == 10
    with pytest.raises(InputError, match="steps"):
        build_workload(dapo, steps=[99])


@needs_shared_traces()
def test_stepless_trace_is_sampled_into_groups_without_replacement() -> None:
    df = load_trace("r1distill_qwen1.5b_aime_8samples")
    whole = build_workload(df)
    assert len(whole) == 1 and whole[0].n_requests == 4768
    assert (whole[0].prompt_tokens == 128).all()  # the trace has no prompt lengths: default used
    steps = build_workload(df, prompts_per_step=64, seed=3)
    assert len(steps) == 596 // 64
    seen = np.concatenate([np.unique(s.group_ids) for s in steps])
    assert len(seen) == len(np.unique(seen)) == 9 * 64  # no group repeats before the pool is exhausted
    more = build_workload(df, prompts_per_step=64, num_steps=12, seed=3)
    assert len(more) == 12 and all(s.n_groups == 64 for s in more)
    again = build_workload(df, prompts_per_step=64, seed=3)
    assert all(np.array_equal(a.response_tokens, b.response_tokens) for a, b in zip(steps, again, strict=True))
    other = build_workload(df, prompts_per_step=64, seed=4)
    assert not np.array_equal(steps[0].group_ids, other[0].group_ids)


@needs_shared_traces()
def test_cap_censors_long_responses() -> None:
    df = load_trace("r1distill_qwen1.5b_aime_8samples")
    (w,) = build_workload(df, cap=8000)
    assert w.response_tokens.max() == 8000
    assert w.hit_cap[w.response_tokens == 8000].all()
    assert w.hit_cap.sum() == (df["response_tokens"] >= 8000).sum()


def test_intern_s1_profile_matches_published_mixture() -> None:
    df = INTERN_S1_MATH.sample(4000, 8, cap=10**6, seed=0)
    expected_mean = np.dot(INTERN_S1_MATH.weights, INTERN_S1_MATH.output_means)
    assert df["response_tokens"].mean() == pytest.approx(expected_mean, rel=0.02)
    assert df["prompt_tokens"].mean() == pytest.approx(np.dot(INTERN_S1_MATH.weights, INTERN_S1_MATH.input_means),
                                                       rel=0.03)
    capped = INTERN_S1_MATH.sample(500, 8, cap=16384, seed=0)
    assert capped["response_tokens"].max() == 16384 and capped["hit_cap"].any()
    assert (capped["response_tokens"] >= 1).all()
    assert capped.groupby("group_id").size().eq(8).all()
    pd.testing.assert_frame_equal(INTERN_S1_MATH.sample(10, seed=5), INTERN_S1_MATH.sample(10, seed=5))
    assert len(load_trace("intern_s1_math")) == 512 * 8

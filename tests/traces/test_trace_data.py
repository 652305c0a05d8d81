"""Catalog, search path, statistics, workloads and the Intern-S1 profile on real data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import needs_shared_traces
from tltcore.errors import InputError
from tltcore.input_files import sha256_of
from tltsim.traces import build_workload, catalog, load_trace, trace_stats
from tltsim.traces.catalog import find_file, search_path
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


# ---- converters of `tlt trace fetch` (tltsim/traces/upstream.py), on hand-made upstream files ----------


def test_aime_converter_keeps_one_copy_sorted_and_marks_the_cap(tmp_path: Path) -> None:
    import csv

    from fake_upstream import upstream_csv

    from tltsim.traces.upstream import AIME_COLUMNS, task_hardness_aime

    (tmp_path / "u.csv").write_bytes(upstream_csv())
    data = task_hardness_aime({"x": tmp_path / "u.csv"})
    assert data.count(b"\r\n") == 17  # header + 16 rows, csv's line ends as in the catalogued file
    rows = list(csv.DictReader(data.decode().splitlines()))
    assert list(rows[0]) == AIME_COLUMNS and len(rows) == 16  # the results/ duplicates are dropped
    assert [r["prompt_id"] for r in rows[:9:8]] == ["aime_1999_I_12", "aime_2001_II_3"]
    assert [r["sample_idx"] for r in rows[:8]] == [str(k) for k in range(8)]
    capped = [r for r in rows if r["hit_cap"] == "1"]
    assert [(r["prompt_id"], r["sample_idx"], r["response_tokens"]) for r in capped] == [
        ("aime_2001_II_3", "7", "16000")]
    assert rows[0]["correct"] == "1" and rows[1]["correct"] == "0" and rows[0]["run"] == "run0"


def _jsonl(path: Path, records: list[dict]) -> Path:
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_polytrace_converter_global_prompt_index_tp0_only_and_dapo_flags(tmp_path: Path) -> None:
    import csv

    from tltsim.traces.upstream import POLYTRACE_RUNS, polytrace_packed_lengths

    verl = POLYTRACE_RUNS[0][0]
    rec = {"step": 0, "n_sampling": 2, "validate": False}
    files = {
        f"{verl}/packed_lengths_step_0.jsonl": _jsonl(tmp_path / "a.jsonl", [
            {**rec, "rank": 4, "dp_rank": 1, "tp_rank": 0, "local_index": 0, "input": 7, "output": [5, 6]},
            {**rec, "rank": 0, "dp_rank": 0, "tp_rank": 0, "local_index": 1, "input": 8, "output": [1, 2]},
            {**rec, "rank": 0, "dp_rank": 0, "tp_rank": 0, "local_index": 0, "input": 9, "output": [3, 4]},
            {**rec, "rank": 1, "dp_rank": 0, "tp_rank": 1, "local_index": 0, "input": 9, "output": [3, 4]},
            {**rec, "rank": 0, "dp_rank": 0, "tp_rank": 0, "local_index": 0, "input": 9, "output": [9],
             "validate": True},
        ]),
        f"{verl}/dapo_filter_indices.jsonl": _jsonl(tmp_path / "f.jsonl", [
            {"workload_step": 0, "trainer_step": 1, "kept_prompt_indices": [0, 2], "used_prompt_indices": [2]}]),
    }
    rows = list(csv.DictReader(polytrace_packed_lengths(files).decode().splitlines()))
    assert [(r["prompt_id"], r["sample_idx"], r["response_tokens"]) for r in rows] == [
        ("s0_p0", "0", "3"), ("s0_p0", "1", "4"), ("s0_p1", "0", "1"), ("s0_p1", "1", "2"),
        ("s0_p2", "0", "5"), ("s0_p2", "1", "6")]  # dp-major: 2 prompts per dp rank, tp rank 1 dropped
    assert [(r["dapo_kept"], r["dapo_used"]) for r in rows[::2]] == [("1", "0"), ("0", "0"), ("1", "1")]
    assert {r["trainer_step"] for r in rows} == {"1"} and {r["hit_cap"] for r in rows} == {""}


def test_search_r1_converter_sums_turns_and_tools(tmp_path: Path) -> None:
    import csv

    from tltsim.traces.upstream import polytrace_search_r1

    rec = {"step": 3, "prompt_group_id": 5, "sample_id": 1, "prompt_len": 300, "final_response_len": 1200,
           "max_response_len": 3000, "turn_count": 2, "tool_call_count": 1, "finish_reason": "stop",
           "turns": [{"completion_tokens": 40, "engine_latency_s": 1.23456}, {"completion_tokens": 131,
                                                                               "engine_latency_s": 2.0}],
           "tool_calls": [{"response_token_len": 1027, "latency_s": 0.074059}]}
    files = {"x/multiturn_workload_step_3.jsonl": _jsonl(tmp_path / "s.jsonl", [rec, {**rec, "validate": True}])}
    (row,) = csv.DictReader(polytrace_search_r1(files).decode().splitlines())
    assert (row["prompt_id"], row["model_generated_tokens"], row["tool_response_tokens"]) == ("s3_g5", "171", "1027")
    assert (row["turn_completion_tokens"], row["turn_engine_latency_s"], row["tool_latency_s"]) == (
        "40;131", "1.235;2.000", "0.0741")


def test_converter_on_the_wrong_layout_is_one_input_error(tmp_path: Path) -> None:
    from tltcore.errors import InputError
    from tltsim.traces.upstream import convert

    (tmp_path / "u.csv").write_text("path,tok_len\nexperiment_archive/r/a/b/c/d/2001/I/3/gen_0/x,notanumber\n")
    with pytest.raises(InputError, match="task_hardness_aime"):
        convert("task_hardness_aime", {"x": tmp_path / "u.csv"})
    (tmp_path / "b.jsonl").write_text("{not json\n")
    with pytest.raises(InputError, match="not JSON lines"):
        convert("polytrace_search_r1", {"a_step_0.jsonl": tmp_path / "b.jsonl"})


@needs_shared_traces()
def test_fetch_converters_reproduce_the_catalogued_files_when_upstream_is_at_hand() -> None:
    """With ../shared: the shared copies carry the catalogued sha256 that fetch's converters must
    reproduce from upstream (checked when the session was built; upstream is not reachable here)."""
    from tltsim.traces.catalog import catalog, find_file

    for entry in catalog().values():
        if entry.fetch is not None and entry.fetch.files:
            found = find_file(entry.file)
            assert found is not None and sha256_of(found) == entry.sha256

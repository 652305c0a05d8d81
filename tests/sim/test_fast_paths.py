"""The fast path's building blocks, each against what it replaces, to the last bit: the uniform stream
(draws ahead, rewinds), the SD block pricer given the caller's row sums and at any KV block size,
the plain-phase pricer against the per-span pricer, the prefill pricer's element-wise forwards, and
the RL run's per-step metrics against :func:`tltcore.summary.summarize_step`."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needs_shared_traces
from tltcore.cost import RooflineCostModel
from tltcore.hardware import get_gpu
from tltcore.model_shape import get_model
from tltcore.policy.base import SDConfig
from tltcore.summary import summarize_step
from tltsim.rollout.fast.paths import pricers_of
from tltsim.rollout.fast.uniforms import UniformStream

SHAPES = [SDConfig(8, 4, 48), SDConfig(8, 4, 8), SDConfig(4, 1, 4), SDConfig(12, 8, 64), SDConfig(1, 1, 1)]


def _rooflines():
    qwen7b, qwen32b, h100 = get_model("Qwen2.5-7B"), get_model("Qwen2.5-32B"), get_gpu("h100")
    return [RooflineCostModel(qwen7b, h100), RooflineCostModel(qwen32b, h100, tp=4, kv_block_size=12),
            RooflineCostModel(qwen32b, h100, tp=4, kv_block_size=1), RooflineCostModel(qwen7b, h100, kv_block_size=32),
            RooflineCostModel(qwen7b, h100, tp=2, smoothness=4.0, kernel_latency_s=2e-6, kernels_per_layer=9)]


def test_uniform_stream_is_the_generators_stream_with_rewinds():
    a, b = np.random.default_rng(7), np.random.default_rng(7)
    stream = UniformStream(b)
    rng = np.random.default_rng(1)
    got, want = [], []
    for _ in range(400):
        n = int(rng.integers(1, 3000))
        take = stream.random(n)
        back = int(rng.integers(0, n + 1))
        stream.pos -= back  # give back the last `back` of them
        got.append(take[:n - back].copy())
        want.append(a.random(n - back))
    assert np.array_equal(np.concatenate(got), np.concatenate(want))


def test_sd_block_prices_with_the_callers_row_sums_and_any_block_size():
    rng = np.random.default_rng(4)
    for cost in _rooflines():
        price = pricers_of(cost).sd
        assert price is not None
        for b in (1, 3, 8, 21, 64, 300):
            for config in SHAPES:
                rows = rng.integers(1, 40_000, size=(int(rng.integers(1, 12)), b), dtype=np.int64)
                want = [cost.sd_time(r, config) for r in rows]
                assert price(rows, config) == want
                assert price(rows, config, np.add.reduce(rows, axis=1)) == want
                assert price(rows, config) == want  # the memoised constants serve again


def test_plain_phase_prices_equal_the_per_span_pricer():
    rng = np.random.default_rng(5)
    for cost in _rooflines():
        p = pricers_of(cost)
        span, phase = p.plain, p.phase
        if span is None:
            assert phase is None
            continue
        bs = cost.kv_block_size
        for _ in range(40):
            spans = int(rng.integers(1, 30))
            n = rng.integers(1, 3 * bs + 5, spans)
            start = rng.integers(0, 5000, spans)
            batches = [rng.integers(-200, 30_000, int(rng.integers(1, 700))) for _ in range(spans)]
            b = np.array([len(c) for c in batches])
            ctx_sum = np.array([int(c.sum()) + len(c) * int(s) for c, s in zip(batches, start, strict=True)])
            hist = np.array([np.bincount(c % bs, minlength=bs) for c in batches])
            got = phase(n, b, ctx_sum, hist, start).tolist()
            want = [span(c + s, int(k)) for c, s, k in zip(batches, start, n, strict=True)]
            assert got == want


def test_prefill_prices_of_the_sharp_roofline_are_element_wise_forwards():
    """The vectorised forwards (sharp roofline) and the per-pass loop (smooth one) both equal the
    pass-by-pass prefill sum; the deep check is in test_speed_span_cost."""
    from tltsim.rollout.scheduling import prefill_passes

    rng = np.random.default_rng(6)
    for cost in _rooflines():
        price = pricers_of(cost).prefill
        for budget in (7, 512, 2048):
            new = rng.integers(0, 3000, 60)
            cached = rng.integers(0, 9000, 60)
            for target, drafter in ((True, False), (False, True), (True, True)):
                total, passes = 0.0, 0
                for a, c in prefill_passes(new, cached, budget):
                    if target:
                        total += cost.prefill_time(a, c)
                    if drafter:
                        total += cost.drafter_prefill_time(a, c)
                    passes += 1
                assert price(new, cached, budget, target, drafter) == (total, passes)


@needs_shared_traces()
@pytest.mark.parametrize("mode", ["expected", "stochastic"])
def test_rl_step_metrics_equal_summarize_step(mode):
    from tltsim.rl.run import _step_metrics, compare_presets
    from tltsim.scenario import resolve

    s = resolve(None, [("presets", ("tlt", "tlt-no-elastic"), "t"), ("trace.num_steps", 2, "t"),
                       ("trace.prompts_per_step", 8, "t"), ("trace.cap", 3000, "t"), ("cluster.gpus", 72, "t"),
                       ("cluster.tp", 2, "t"),
                       ("acceptance.mode", mode, "t")]).scenario
    events, _, _ = compare_presets(s)
    assert s.n_workers > 8  # numpy sums 8 or more per-worker terms pairwise: the same call must be made
    for preset, part in events.groupby("policy", sort=False):
        step_list = sorted(set(part["step"].tolist()))
        accept, idle, frac = _step_metrics(part.reset_index(drop=True), step_list, s.cluster.gpus, s.cluster.tp)
        for i, step in enumerate(step_list):
            want = summarize_step(part[part["step"] == step].reset_index(drop=True), gpus=s.cluster.gpus,
                                  tp=s.cluster.tp)
            assert (idle[i], frac[i]) == (want.gpu_idle_s, want.idle_fraction), (preset, step)
            assert accept[i] == want.mean_accept_length or (np.isnan(accept[i]) and np.isnan(want.mean_accept_length))


def test_sd_rows_priced_with_their_own_batches_equal_sd_time():

    rng = np.random.default_rng(8)
    for cost in _rooflines():
        price = pricers_of(cost).rows
        assert price is not None
        bs = cost.kv_block_size
        for config in SHAPES:
            rows = [rng.integers(1, 40_000, int(rng.integers(1, 400))) for _ in range(int(rng.integers(1, 40)))]
            paged = np.array([bs * int(np.sum(-(-r // bs))) for r in rows])
            ctx_sum = np.array([int(r.sum()) for r in rows])
            batch = np.array([len(r) for r in rows])
            assert price(paged, ctx_sum, batch, config).tolist() == [cost.sd_time(r, config) for r in rows]


def test_the_ngram_drafters_model_free_cost_is_priced_as_called():
    """tlt-base's n-gram drafter (ModelFreeDraftCost over a roofline): SD blocks, rows of mixed
    batches, plain spans and prefills (its drafter prefill is free) equal the call-by-call cost."""
    from tltcore.drafter.kinds import ModelFreeDraftCost
    from tltsim.rollout.scheduling import prefill_passes

    rng = np.random.default_rng(9)
    for base in _rooflines()[:4]:
        cost = ModelFreeDraftCost(base, lookup_s=7e-5)
        p = pricers_of(cost)
        span, rows_price, plain, prefill = p.sd, p.rows, p.plain, p.prefill
        assert None not in (span, rows_price, plain, prefill)
        for config in (SDConfig(4, 1, 4), SDConfig(8, 1, 8), SDConfig(1, 1, 1)):
            for b in (1, 5, 40, 300):
                block = rng.integers(1, 30_000, size=(int(rng.integers(1, 9)), b))
                assert span(block, config) == [cost.sd_time(r, config) for r in block]
            batches = [rng.integers(1, 30_000, int(rng.integers(1, 300))) for _ in range(20)]
            bs = base.kv_block_size
            got = rows_price(np.array([bs * int(np.sum(-(-r // bs))) for r in batches]),
                             np.array([int(r.sum()) for r in batches]), np.array([len(r) for r in batches]), config)
            assert got.tolist() == [cost.sd_time(r, config) for r in batches]
        ctx = rng.integers(1, 30_000, 50)
        assert [plain(ctx, n) for n in (1, 7, 100)] == [cost.decode_span_time(ctx, n) for n in (1, 7, 100)]
        new, cached = rng.integers(0, 3000, 40), rng.integers(0, 9000, 40)
        for target, drafter in ((True, False), (False, True), (True, True)):
            total, passes = 0.0, 0
            for a, c in prefill_passes(new, cached, 1024):
                if target:
                    total += cost.prefill_time(a, c)
                if drafter:
                    total += cost.drafter_prefill_time(a, c)
                passes += 1
            assert prefill(new, cached, 1024, target, drafter) == (total, passes)


def test_trace_json_text_equals_the_encoders_bytes():
    """trace.json built as text is byte for byte what json.dumps writes for chrome_trace: escaped
    names (quotes, non-ASCII), zero-length spans, counters, several policies and steps; non-finite
    times take the encoder."""
    import json

    from tltcore.events import EventLog
    from tltcore.policy.base import NO_SD
    from tltsim.perfetto import chrome_trace, chrome_trace_json

    frames = []
    for policy in ('elastic+beg-mab', 'wé"ird\\name'):
        log = EventLog(run_id="r", source="sim", policy=policy, coalesce=True)
        for step in range(2):
            log.step = step
            log.span(0, "prefill", 0.0, 0.0125, batch=3, tokens=3, prefill_tokens=900)
            log.decode(0, 0.0125, 1.0 / 3.0, 7, 3, NO_SD, 21.0)
            log.decode(0, 1.0 / 3.0, 2.5e-7 + 1.0 / 3.0, 1, 2, SDConfig(4, 1, 4), 7.0, 8, 3.0)
            log.span(1, "idle", 0.0, 0.0)
            log.span(-1, "stage", 0.0, 2.0, batch=5, tokens=40)
        frames.append(log.frame())
    import pandas as pd

    ev = pd.concat(frames, ignore_index=True)
    assert chrome_trace_json(ev) == json.dumps(chrome_trace(ev), separators=(",", ":"))
    bad = ev.copy()
    bad.loc[2, "t_end"] = float("inf")
    assert chrome_trace_json(bad) == json.dumps(chrome_trace(bad), separators=(",", ":"))


@pytest.mark.parametrize("last", ["prefill", "switch_reprefill", "catch_up", "decode"])
def test_rl_step_metrics_count_every_busy_kind_as_work(last):
    """A worker whose last busy row is not a decode (a prefill of one-token responses, a switch's
    re-prefill, a catch-up) finishes at that row's end in both the summary and the RL step metrics."""
    from tltcore.events import CLUSTER, EventLog
    from tltcore.policy.base import NO_SD
    from tltsim.rl.run import _step_metrics

    log = EventLog(run_id="r", source="sim", policy="p")
    log.span(CLUSTER, "stage", 0.0, 10.0, batch=4)
    for w in range(2):
        log.span(w, "prefill", 0.0, 1.0, batch=2, tokens=2, prefill_tokens=100)
        log.decode(w, 1.0, 4.0 + w, 3, 2, NO_SD, 6.0)
    if last == "decode":
        log.decode(1, 5.0, 7.5, 2, 1, NO_SD, 2.0)
    else:
        log.span(1, last, 5.0, 7.5, batch=1, prefill_tokens=50)
    events = log.frame()
    _, idle, frac = _step_metrics(events, [0], gpus=4, tp=2)
    want = summarize_step(events, gpus=4, tp=2)
    assert (idle[0], frac[0]) == (want.gpu_idle_s, want.idle_fraction)
    assert want.gpu_idle_s == pytest.approx(2 * (10.0 - 4.0) + 2 * (10.0 - 7.5))

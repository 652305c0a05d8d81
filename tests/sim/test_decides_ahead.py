"""The block path for policies that decide every iteration (``tltsim.rollout.fast.ahead``, the
``DecidesAhead`` hint ``sglang-ema`` offers) gives the reference's event log bit for bit: the EMA and
the choice folded in one call per block, the block cut where the answer changes, the unused draws given
back. ``tests/sim/test_fast_identical.py`` wraps every policy in a recorder that hides the hint, so
this file runs the policies bare and compares the frames (no view comparison here)."""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

import pandas as pd
import pytest

from conftest import needs_shared_traces
from tltcore.policy.base import DecidesAhead
from tltcore.policy.sglang_ema import SglangEma
from tltsim.rollout.fast import ahead
from tltsim.scenario import prepare, resolve, run_policy

# the default; depths that flip often (no hysteresis, a fast EMA); depth 0 among the candidates; one range
POLICIES = ("sglang-ema", "sglang-ema:depths=1,2,4,8:hysteresis=0:smoothing=0.9",
            "sglang-ema:depths=0,1,3,7", "sglang-ema:depths=2,5:ranges=1")


def _frames(spec: str, seed: int, mode: str) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    s = resolve(None, [("policies", (spec,), "test"), ("acceptance.mode", mode, "test"), ("seed", seed, "test"),
                       ("trace.prompts_per_step", 12, "test"), ("trace.cap", 6000, "test"),
                       ("trace.num_steps", 2, "test"), ("cluster.gpus", 4, "test"),
                       ("cluster.tp", 4, "test")]).scenario
    assert s.n_workers == 1  # one worker's blocks, each on its own (the rounds of many: below)
    inputs = prepare(s)
    block = ahead.run_expected_block if mode == "expected" else ahead.run_block
    with mock.patch.object(ahead, block.__name__, wraps=block) as blocks:
        fast = run_policy(s, spec, inputs)
    slow = run_policy(s, spec, replace(inputs, engine=replace(inputs.engine, fast=False)))
    return fast, slow, blocks.call_count


def test_sglang_ema_offers_the_block_hint():
    assert isinstance(SglangEma(), DecidesAhead)


def test_engine_priced_rows_fold_as_the_policy_prices_them():
    """``ahead(..., prices=)`` (the engine priced the policy's chains, ``ahead_shapes``) answers and
    leaves the state its own pricing does, on rows whose best depth flips (200 requests: depth 1 at
    short contexts, depth 3 at long ones), so a price read one row off moves the cut."""
    import numpy as np

    from tltcore.cost import RooflineCostModel
    from tltcore.hardware import get_gpu
    from tltcore.model_shape import get_model
    from tltcore.policy.base import BatchView, SDConfig

    cost = RooflineCostModel(get_model("Qwen2.5-7B"), get_gpu("h100"))
    b = 200
    rows = np.repeat(np.array([200, 200, 30000, 200, 30000], dtype=np.int64)[:, None], b, axis=1)
    emitted = [300] * len(rows)
    out = []
    for engine_priced in (False, True):
        policy = SglangEma(cost_model=cost, hysteresis=0.0, prior_accept_rate=0.6)
        model, shapes = policy.ahead_shapes()
        assert model is cost and [c.depth for c in shapes] == list(policy.depths)
        prices = [cost.sd_rows_times(rows, c) for c in shapes] if engine_priced else None
        m, pending = policy.ahead(SDConfig.chain(1), b, emitted, rows, prices)
        after = policy.decide(BatchView(b, tuple(rows[m].tolist())))
        out.append((m, pending, policy.accept_rate(b), after))
    assert out[0] == out[1]
    assert out[0][0] == 2 and out[0][1].config.depth == 3  # the answer flipped at the first long row
    assert SglangEma(depths=(0, 1, 3), cost_model=cost).ahead_shapes() is None  # depth 0: decode_time, not a chain
    assert SglangEma().ahead_shapes() is None  # no cost model: the proxy prices by batch size


@needs_shared_traces()
@pytest.mark.parametrize("mode", ["stochastic", "expected"])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("spec", POLICIES)
def test_blocks_of_one_iteration_spans_equal_the_reference(spec, seed, mode):
    fast, slow, blocks = _frames(spec, seed, mode)
    assert blocks > 0  # the block path ran
    pd.testing.assert_frame_equal(fast, slow, check_exact=True)


@needs_shared_traces()
@pytest.mark.parametrize("mode", ["stochastic", "expected"])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("spec", POLICIES)
def test_blocks_of_many_workers_together_equal_the_reference(spec, seed, mode):
    """Eight workers' blocks a round at a time (``AheadBlocks``), both acceptance modes: different
    shapes and batch sizes in one round, blocks cut at different iterations (a draw mapped with
    another worker's shape, a price with another's batch, a padded request counted, or a rewind off
    by one fails it)."""
    s = resolve(None, [("policies", (spec,), "test"), ("acceptance.mode", mode, "test"),
                       ("seed", seed, "test"), ("trace.prompts_per_step", 24, "test"), ("trace.cap", 9000, "test"),
                       ("trace.num_steps", 2, "test"), ("cluster.gpus", 32, "test"),
                       ("cluster.tp", 4, "test")]).scenario
    assert s.n_workers == 8
    inputs = prepare(s)
    with mock.patch.object(ahead.AheadBlocks, "round", autospec=True, side_effect=ahead.AheadBlocks.round) as rounds:
        fast = run_policy(s, spec, inputs)
    slow = run_policy(s, spec, replace(inputs, engine=replace(inputs.engine, fast=False)))
    assert rounds.call_count > 0
    pd.testing.assert_frame_equal(fast, slow, check_exact=True)


class _Shown:
    """The policy the simulator built, recording the views it is shown; its block hint kept."""

    def __init__(self, inner, shown: list) -> None:
        self.inner, self.shown, self.name = inner, shown, inner.name

    def decide(self, view):
        self.shown.append(view)
        return self.inner.decide(view)

    def observe(self, outcome) -> None:
        self.inner.observe(outcome)

    def reset(self, step: int) -> None:
        self.inner.reset(step)

    def ahead(self, *args):
        return self.inner.ahead(*args)

    def ahead_shapes(self):
        return self.inner.ahead_shapes()


@needs_shared_traces()
@pytest.mark.parametrize("mode", ["stochastic", "expected"])
@pytest.mark.parametrize("spec", POLICIES[:2])
def test_blocks_show_the_views_the_reference_shows(spec, mode):
    """The views a policy is asked with between blocks are the reference's views at those points,
    field for field (the clock, the iteration count, the recent-accept estimate a block folded,
    the contexts): each policy's views on the block path are a subsequence of the reference's, in
    order. An estimate or a clock folded wrongly changes no event row while no policy reads it."""
    from tltcore.policy import registry

    s = resolve(None, [("policies", (spec,), "test"), ("acceptance.mode", mode, "test"), ("seed", 0, "test"),
                       ("trace.prompts_per_step", 24, "test"), ("trace.cap", 9000, "test"),
                       ("trace.num_steps", 2, "test"), ("cluster.gpus", 32, "test"),
                       ("cluster.tp", 4, "test")]).scenario
    inputs = prepare(s)
    build = registry.make_policy

    def shown_by(engine) -> list[list]:
        shown: list[list] = []

        def make(*args, **kwargs):
            shown.append([])
            return _Shown(build(*args, **kwargs), shown[-1])

        with mock.patch.object(registry, "make_policy", make):
            run_policy(s, spec, replace(inputs, engine=engine))
        return shown

    fast, slow = shown_by(inputs.engine), shown_by(replace(inputs.engine, fast=False))
    assert len(fast) == len(slow) == s.n_workers
    assert isinstance(_Shown(SglangEma(), []), DecidesAhead)
    for got, want in zip(fast, slow, strict=True):
        assert 0 < len(got) < len(want)  # the blocks skipped the views they folded
        it = iter(want)
        assert all(any(view == w for w in it) for view in got)  # in order, each one of the reference's


def test_a_resumed_block_decides_at_its_first_row_as_decide_would():
    """``ahead(..., asked=False)`` (``ResumesAhead``: a block run on the policy's standing answer, no
    ``decide`` asked) leaves the state and gives the answers of ``decide`` at row 0 followed by the
    asked fold over the same block, and gives the block back (``m == 0``) where row 0 switches."""
    import numpy as np

    from tltcore.cost import RooflineCostModel
    from tltcore.hardware import get_gpu
    from tltcore.model_shape import get_model
    from tltcore.policy.base import BatchView, ResumesAhead, SDConfig, resumes_ahead

    cost = RooflineCostModel(get_model("Qwen2.5-7B"), get_gpu("h100"))
    b = 200
    for first_ctx in (200, 30000):  # row 0 keeps depth 1 (short contexts), or switches to 3 (long)
        rows = np.repeat(np.array([first_ctx, 200, 30000, 200], dtype=np.int64)[:, None], b, axis=1)
        emitted = [300] * len(rows)
        got = []
        for resumed in (False, True):
            policy = SglangEma(cost_model=cost, hysteresis=0.0, prior_accept_rate=0.6)
            policy.decide(BatchView(b, (200,) * b))  # a standing answer (depth 1) in this range
            config = policy.ahead_resume(b)
            assert config == SDConfig.chain(1)
            if resumed:
                m, pending = policy.ahead(config, b, emitted, rows, asked=False)
            else:
                answer = policy.decide(BatchView(b, tuple(rows[0].tolist())))
                m, pending = (0, answer) if answer.config != config else policy.ahead(config, b, emitted, rows)
            got.append((m, pending, policy.accept_rate(b), policy.ahead_resume(b)))
        assert got[0] == got[1]
        assert (got[0][0] == 0) == (first_ctx == 30000)
    assert isinstance(SglangEma(), ResumesAhead) and resumes_ahead(SglangEma()) is not None
    assert SglangEma().ahead_resume(10) is None  # no standing answer before the range's first decision


def test_range_of_is_the_last_range_at_or_below_the_batch():
    policy = SglangEma(ranges=(4, 64, 128))
    for batch in (1, 3, 4, 5, 63, 64, 65, 127, 128, 129, 10_000):
        want = max([0] + [i for i, lower in enumerate(policy.ranges) if batch >= lower])
        assert policy.range_of(batch) == want, batch


@needs_shared_traces()
@pytest.mark.parametrize("mode", ["stochastic", "expected"])
def test_resumed_blocks_and_waiting_requests_equal_the_reference(mode):
    """Blocks resumed after a finish (no ``decide``), given back where their first row switches,
    expected-mode blocks run on through finishes (the rows' batches shrinking inside a block, the
    ranges' EMAs switched mid-block: ``ranges=1,3,6``), and workers with requests waiting
    (``engine.max_batch`` 6: a finish admits, so the worker's own loop takes over) give the
    reference's event log."""
    spec = "sglang-ema:depths=1,2,4,8:hysteresis=0:smoothing=0.9:ranges=1,3,6"
    calls: list[tuple[bool, int]] = []
    shrank: list[int] = []  # the kept iterations of blocks whose batch shrank inside them
    fold = SglangEma.ahead

    def counted(self, config, batch_size, emitted, ctx_rows, prices=None, asked=True, batches=None):
        m, pending = fold(self, config, batch_size, emitted, ctx_rows, prices, asked, batches)
        calls.append((asked, m))
        if batches is not None and batches[0] != batches[m - 1]:
            shrank.append(m)
        return m, pending

    # 8 workers, nothing waiting; 2 workers of at most 6 requests, the rest waiting
    layouts = ([("trace.prompts_per_step", 24, "test"), ("trace.cap", 9000, "test"), ("cluster.gpus", 32, "test")],
               [("trace.prompts_per_step", 4, "test"), ("trace.cap", 3000, "test"), ("cluster.gpus", 8, "test"),
                ("engine.max_batch", 6, "test")])
    for waiting, layout in enumerate(layouts):
        s = resolve(None, [("policies", (spec,), "test"), ("acceptance.mode", mode, "test"), ("seed", 0, "test"),
                           ("trace.num_steps", 2, "test"), ("cluster.tp", 4, "test"), *layout]).scenario
        inputs = prepare(s)
        calls.clear()
        shrank.clear()
        with mock.patch.object(SglangEma, "ahead", counted):
            fast = run_policy(s, spec, inputs)
        slow = run_policy(s, spec, replace(inputs, engine=replace(inputs.engine, fast=False)))
        pd.testing.assert_frame_equal(fast, slow, check_exact=True)
        assert calls  # the block path ran
        if not waiting:
            assert any(not asked for asked, _ in calls)  # blocks resumed without a decide
            if mode == "stochastic":
                assert (False, 0) in calls  # a resumed block given back at its first row
            else:
                assert shrank  # blocks ran on through finishes


@pytest.mark.parametrize("hysteresis", [0.0, 0.02, 0.3])
@pytest.mark.parametrize("seed", range(6))
def test_the_numpy_fold_answers_and_leaves_the_state_the_loop_does(seed, hysteresis, monkeypatch):
    """``ahead``'s fold scores a long block's decisions in one numpy pass and re-scores exactly only those
    near the hysteresis bound (``SglangEma._fold``): the same cut, answer and EMAs as the loop, on blocks
    whose prices wander around the bound (ties to the last bit included) and across the batch ranges."""
    import copy

    import numpy as np

    from tltcore.policy import sglang_ema
    from tltcore.policy.base import SDConfig

    rng = np.random.default_rng(seed)
    for case in range(40):
        policy = SglangEma(hysteresis=hysteresis, smoothing=float(rng.uniform(0.05, 0.9)))
        b = int(rng.integers(1, 200))
        depth = policy.depths[int(rng.integers(0, len(policy.depths)))]
        policy._current[policy.range_of(b)] = depth
        policy._rate[policy.range_of(b)] = float(rng.uniform(0.1, 0.999))
        k = int(rng.integers(1, 60))
        emitted = rng.integers(b, b * (depth + 1) + 1, k).tolist()
        base = rng.uniform(0.01, 0.02, len(policy.depths))
        prices = [list(base[i] * (1 + rng.normal(0, 0.05 if case % 2 else 1e-12, k))) for i in range(len(base))]
        if case % 5 == 0:  # every depth priced the same
            prices = [list(prices[policy.depths.index(depth)])] * len(base)
        if case % 7 == 0:  # rows priced at zero: every score 0.0, a tie to the last bit
            for col in prices:
                col[k // 2:] = [0.0] * (k - k // 2)
        batches = None if case % 3 else rng.integers(max(1, b - 70), b + 1, k).tolist()
        if batches is not None:
            batches[0] = b
        asked = bool(case % 4)
        got = []
        for rows in (10**9, 1):
            monkeypatch.setattr(sglang_ema, "FOLD_ROWS", rows)
            p = copy.deepcopy(policy)
            answer = p.ahead(SDConfig.chain(depth), b, emitted, np.zeros((k, b), dtype=np.int64), prices,
                             asked=asked, batches=batches)
            got.append((answer, p._rate, p._current))
        assert got[0] == got[1]


def test_the_folds_scores_are_decides_to_the_last_bit():
    """``SglangEma._scores`` (the fold's and the loop's scoring) is ``chain_tokens(rate, d) / cost`` as
    :meth:`SglangEma.score` computes it, float for float, rates of 1 and non-positive costs included."""
    import numpy as np

    from tltcore.policy.sglang_ema import chain_tokens

    rng = np.random.default_rng(7)
    policy = SglangEma(depths=(1, 2, 3, 5, 7))
    for _ in range(2000):
        rate = float(rng.choice([rng.uniform(0.0, 0.999), 1.0, 1.0 + rng.uniform(0, 1)]))
        costs = tuple(float(c) for c in rng.choice([rng.uniform(1e-3, 1e-1), 0.0, -1e-3], size=5, p=[0.9, 0.05, 0.05]))
        want = [chain_tokens(rate, d) / c if c > 0 else 0.0 for d, c in zip(policy.depths, costs, strict=True)]
        assert policy._scores(rate, costs) == want

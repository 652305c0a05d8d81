"""The engine's fast paths (``EngineConfig.fast``, on by default) give bit-identical results to the
reference per-row path: the same event log, summary and per-step table, for every bundled scenario,
every preset, seeds 0-2, expected and stochastic acceptance, a queueing and a KV-limited case; and the
policies are shown the same views (:class:`_Recording`): a fast path that got a view wrong (say the
recent-accept estimate of an expected-mode SD tail) changes no event row while no policy reads that
field, and would go unseen by the event logs alone.

Kept short: each case is a few prompt groups on a few workers (the paths differ in how they step,
not in scale)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from unittest import mock

import pandas as pd
import pytest

import tltsim
from conftest import needs_shared_traces
from tltcore.policy import registry
from tltcore.policy.base import BatchView, PlainPhases, wants_remaining_hint
from tltsim.rl.presets import PRESET_NAMES
from tltsim.rl.run import compare_presets
from tltsim.scenario import compare_policies, prepare, resolve

SCENARIOS = sorted(p.stem for p in (Path(tltsim.__file__).parent / "data" / "scenarios").glob("*.toml"))
SMALL = [("trace.prompts_per_step", 4, "test"), ("trace.cap", 3000, "test"), ("cluster.gpus", 8, "test"),
         ("cluster.tp", 4, "test")]


class _Recording:
    """The policy the simulator built, recording every view it is shown with the plain-phase promise
    (``plain_above``) it held just before: the views the fast path may skip (module docstring of
    :mod:`tltcore.policy.base`)."""

    def __init__(self, inner, shown: list[tuple[BatchView, int | None]]) -> None:
        self.inner, self.shown, self.name = inner, shown, inner.name

    @property
    def wants_remaining_hint(self) -> bool:
        return wants_remaining_hint(self.inner)

    def decide(self, view: BatchView):
        promise = self.inner.plain_above() if isinstance(self.inner, PlainPhases) else None
        self.shown.append((view, promise))
        return self.inner.decide(view)

    def observe(self, outcome) -> None:
        self.inner.observe(outcome)

    def reset(self, step: int) -> None:
        self.inner.reset(step)


class _RecordingPlain(_Recording):
    """:class:`_Recording` of a policy that offers the plain-phase promise (kept, so the fast path
    runs its closed-form plain phases as it does unrecorded)."""

    def plain_above(self) -> int | None:
        return self.inner.plain_above()


def _recorded(run, s, inputs):
    """``run(s, inputs)`` with every policy the scenario builds recorded: (its result, the views each
    policy was shown, one list per policy in the order they were built)."""
    build, shown = registry.make_policy, []

    def make(*args, **kwargs):
        policy = build(*args, **kwargs)
        shown.append([])
        return (_RecordingPlain if isinstance(policy, PlainPhases) else _Recording)(policy, shown[-1])

    with mock.patch.object(registry, "make_policy", make):
        return run(s, inputs), shown


def _same_views(fast: list[list[tuple[BatchView, int | None]]], slow: list[list[tuple[BatchView, int | None]]],
                asked: bool = True) -> None:
    """Each policy was shown, on the fast path, the reference path's views, field for field and in
    order, less only views the policy's plain-phase promise let the engine skip (a batch above the
    promised size: the fast path runs such plain phases in closed form without asking)."""
    assert len(fast) == len(slow)
    for k, (got, want) in enumerate(zip(fast, slow, strict=True)):
        j = 0
        for view, promise in want:
            if j < len(got) and got[j][0] == view:
                j += 1
                continue
            assert promise is not None and view.batch_size > promise, (
                f"policy {k}: the fast path showed {got[j][0] if j < len(got) else 'nothing'} where the reference "
                f"showed {view}")
        assert j == len(got), f"policy {k}: the fast path showed {got[j][0]}, the reference never did"
    assert any(fast) or not asked, "no policy was asked anything"


def _both(s, run, asked: bool = True):
    """The fast and the reference run of ``run(s, inputs)``, the views every policy was shown already
    compared (``asked``: some policy must have been asked; a scenario of no SD at all, such as
    ``validation_partial_cpu``, runs its plain phases in closed form and asks nothing)."""
    inputs = prepare(s)
    assert inputs.engine.fast  # the default
    slow = replace(inputs, engine=replace(inputs.engine, fast=False))
    (fast_out, fast_views), (slow_out, slow_views) = _recorded(run, s, inputs), _recorded(run, s, slow)
    _same_views(fast_views, slow_views, asked)
    return fast_out, slow_out


def _same(fast, slow) -> None:
    for a, b in zip(fast, slow, strict=True):
        pd.testing.assert_frame_equal(a, b, check_exact=True)


def _policies(s, inputs):
    return compare_policies(s, inputs)


def _presets(s, inputs):
    return compare_presets(s, inputs)


@needs_shared_traces()
@pytest.mark.parametrize("mode", ["expected", "stochastic"])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", SCENARIOS)
def test_bundled_scenarios_fast_equals_reference(name, seed, mode):
    s = resolve(name, [*SMALL, ("seed", seed, "test"), ("acceptance.mode", mode, "test"),
                       ("trace.num_steps", 2, "test")]).scenario
    _same(*_both(s, _policies, asked=any(p.name != "no-sd" for p in s.policies)))


@needs_shared_traces()
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_preset_fast_equals_reference(seed):
    s = resolve(None, [*SMALL, ("seed", seed, "test"), ("presets", PRESET_NAMES, "test"),
                       ("trace.num_steps", 2, "test"), ("acceptance.mode", "stochastic", "test")]).scenario
    _same(*_both(s, _presets))


@needs_shared_traces()
@pytest.mark.parametrize("mode", ["expected", "stochastic"])
def test_queueing_and_kv_limited_fast_equals_reference(mode):
    policies = ("no-sd", "elastic:2+beg-mab", "static:8_4_32", "elastic:2+static:4_1_4", "sglang-ema", "greedy-oracle",
                "cost-aware", "cost-aware:lengths=known:recheck=5")
    common = [("policies", policies, "test"), ("acceptance.mode", mode, "test"), ("trace.prompts_per_step", 4, "test"),
              ("trace.cap", 2000, "test"), ("trace.num_steps", 2, "test")]
    queueing = resolve(None, [*common, ("cluster.gpus", 8, "test"), ("cluster.tp", 4, "test"),
                              ("engine.max_batch", 3, "test")]).scenario
    kv_limited = resolve(None, [*common, ("cluster.gpus", 2, "test"), ("cluster.tp", 1, "test"),
                                ("engine.kv_mem_fraction", 0.2, "test")]).scenario
    inputs = prepare(kv_limited)
    reserve = sum(int((w.prompt_tokens + w.response_tokens).sum()) for w in inputs.workloads[:1])
    assert inputs.engine.kv_capacity_tokens * kv_limited.n_workers < reserve  # the KV cache does limit the batch
    for s in (queueing, kv_limited):
        _same(*_both(s, _policies))


class _Held:
    """Speculates for ``hold`` iterations at a time, alternating two shapes (exercises SD spans that
    end at their hold, not at a finish, on the block path)."""

    def __init__(self, hold: int) -> None:
        self.hold, self.name, self.asked = hold, f"held:{hold}", 0

    def decide(self, view):
        from tltcore.policy.base import Decision, SDConfig

        self.asked += 1
        return Decision(SDConfig(4, 1, 4) if self.asked % 2 else SDConfig(8, 4, 32), self.hold)

    def observe(self, outcome) -> None:
        return None

    def reset(self, step: int) -> None:
        return None


@needs_shared_traces()
@pytest.mark.parametrize("mode", ["expected", "stochastic"])
@pytest.mark.parametrize("hold", [2, 3, 7, 50])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sd_spans_ending_at_their_hold_fast_equals_reference(hold, seed, mode):
    from tltsim.rollout import simulate_step

    s = resolve(None, [*SMALL, ("acceptance.mode", mode, "test")]).scenario
    inputs = prepare(s)

    def once(fast: bool):
        res = simulate_step(inputs.workload, policies=[_Held(hold) for _ in range(s.n_workers)], cost=inputs.cost,
                            accept=inputs.accept, engine=replace(inputs.engine, fast=fast, max_batch=5), seed=seed)
        return res.events, pd.DataFrame({"finish": res.finish_times})

    _same(once(True), once(False))


@needs_shared_traces()
@pytest.mark.parametrize("mode", ["expected", "stochastic"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_wide_batches_fast_equals_reference(seed, mode):
    """Batches of ~64 per worker, lengths up to 12k tokens: whole plain phases, SD tails that run many
    spans at a time and stop where the answer changes (BEG-MAB's buckets without the elastic switch,
    the vLLM table's rows, a cost-aware policy that reads the remaining lengths), SD at every batch
    size, both modes."""
    policies = ("no-sd", "beg-mab", "elastic:16+beg-mab", "static:8_4_32", "vllm-table",
                "cost-aware:lengths=known:recheck=5", "elastic:24+static:4_1_4")
    s = resolve(None, [("policies", policies, "test"), ("acceptance.mode", mode, "test"), ("seed", seed, "test"),
                       ("trace.prompts_per_step", 16, "test"), ("trace.cap", 12000, "test"),
                       ("trace.num_steps", 2, "test"), ("cluster.gpus", 8, "test"), ("cluster.tp", 4, "test")]).scenario
    _same(*_both(s, _policies))


@needs_shared_traces()
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stochastic_tails_of_many_workers_together_equal_reference(seed):
    """Eight workers whose stochastic SD tails run together, a block per round (tltsim.rollout.fast.tails):
    different shapes in one round (BEG-MAB's buckets), tails that end at different rounds, a
    plain-phase promise above the table's last row (a draw or price with another worker's shape,
    or a rewind off by one, fails it)."""
    policies = ("beg-mab", "elastic:12+beg-mab", "vllm-table", "static:4_1_4", "elastic:8+static:8_4_16")
    s = resolve(None, [("policies", policies, "test"), ("acceptance.mode", "stochastic", "test"),
                       ("seed", seed, "test"), ("trace.prompts_per_step", 24, "test"), ("trace.cap", 9000, "test"),
                       ("trace.num_steps", 2, "test"), ("cluster.gpus", 32, "test"),
                       ("cluster.tp", 4, "test")]).scenario
    assert s.n_workers == 8
    _same(*_both(s, _policies))


class _Alternating:
    """Ten one-iteration SD rounds, then ten plain ones, over and over (BEG-MAB-like holds of 1)."""

    name = "alternating"

    def __init__(self) -> None:
        self.rounds = 0

    def decide(self, view: BatchView):
        from tltcore.policy.base import NO_SD, Decision, SDConfig

        return Decision(SDConfig(4, 1, 4) if self.rounds % 20 < 10 else NO_SD, 1)

    def observe(self, outcome) -> None:
        self.rounds += 1

    def reset(self, step: int) -> None:
        return None


@pytest.mark.parametrize("mode", ["expected", "stochastic"])
def test_one_iteration_sd_leaves_drafters_up_to_date_as_the_reference_does(mode):
    """Prompts of 5 tokens: admitted drafters lag by 6, under the catch-up limit, so no catch-up runs
    before the first SD round; an SD iteration brings every drafter up to date, so the plain rounds
    after it leave a lag of 10, and only a drafter that kept its old lag would be caught up."""
    import numpy as np
    from rollout_fixtures import Work

    from tltcore.acceptance import paper_qwen32b_tp4
    from tltcore.cost import RooflineCostModel
    from tltcore.hardware import get_gpu
    from tltcore.model_shape import get_model
    from tltsim.rollout import EngineConfig, simulate_step

    w = Work(0, np.array([f"g{i}" for i in range(6)]), np.full(6, 5, dtype=np.int64),
             np.array([200, 220, 240, 260, 280, 300], dtype=np.int64))
    cost = RooflineCostModel(get_model("Qwen2.5-7B"), get_gpu("h100"))
    out = [simulate_step(w, policies=[_Alternating()], cost=cost, accept=paper_qwen32b_tp4(),
                         engine=EngineConfig(fast=fast, acceptance_mode=mode), deal_mode="trace").events
           for fast in (True, False)]
    pd.testing.assert_frame_equal(out[0], out[1], check_exact=True)
    assert "catch_up" not in out[0]["kind"].tolist()


@needs_shared_traces()
@pytest.mark.parametrize("mode", ["expected", "stochastic"])
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", SCENARIOS)
def test_policies_deciding_ahead_fast_equals_reference(name, seed, mode):
    """``sglang-ema`` bare (the recorder above hides its block hint, ``DecidesAhead``): its blocks of
    one-iteration spans, expected and stochastic, one worker's or many workers' a round at a time,
    give the reference's event log and summary on every bundled scenario."""
    from tltsim.rollout.fast import ahead

    policies = ("sglang-ema", "sglang-ema:depths=1,2,4,8:hysteresis=0:smoothing=0.9")
    s = resolve(name, [*SMALL, ("seed", seed, "test"), ("acceptance.mode", mode, "test"),
                       ("trace.num_steps", 2, "test"), ("policies", policies, "test")]).scenario
    inputs = prepare(s)
    block = ahead.run_expected_block if mode == "expected" else ahead.run_block
    with (mock.patch.object(ahead, block.__name__, wraps=block) as blocks,
          mock.patch.object(ahead.AheadBlocks, "round", autospec=True, side_effect=ahead.AheadBlocks.round) as rounds):
        fast = compare_policies(s, inputs)
    _same(fast, compare_policies(s, replace(inputs, engine=replace(inputs.engine, fast=False))))
    assert blocks.call_count + rounds.call_count > 0  # one worker's blocks, or the workers' a round at a time

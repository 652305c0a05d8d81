"""``tlt validate`` in rounds: every run kept and simulated with its own round's cost table, the spread
over rounds, the noise check against the error, and the rotation of the policies' order.

None of these depends on how fast this machine is: the real runs here are tiny and only their
structure is checked; the numbers under test are given, not measured.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")

from tltcore.acceptance import paper_qwen32b_tp4  # noqa: E402
from tltcore.cost import TableCostModel, table_frame  # noqa: E402
from tltreal.model.weights import random_model  # noqa: E402
from tltreal.validation.replay import (  # noqa: E402
    balanced_order,
    reference_run,
    replay_requests,
    rotated,
    with_extra_tokens,
)
from tltreal.validation.validate import (  # noqa: E402
    PINNED_DEPTH,
    MeasuredAcceptance,
    ValidationResult,
    compare,
    headline,
    makespan_spread,
    median_table,
    native_engine,
    noise_check,
    real_round,
)
from tltsim.traces.workload import StepWorkload  # noqa: E402

from .tiny_models import TINY  # noqa: E402


def test_rotation_puts_every_policy_in_every_position_once_over_as_many_rounds():
    specs = ["no-sd", "a", "b", "c"]
    orders = [rotated(specs, r) for r in range(len(specs))]
    assert all(sorted(o) == sorted(specs) for o in orders)
    for i in range(len(specs)):
        assert sorted(o[i] for o in orders) == sorted(specs)  # each position sees every policy
    assert rotated(specs, len(specs)) == specs


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7])
def test_a_williams_order_balances_positions_and_predecessors(n: int) -> None:
    """Over one period (n repeats, 2n for odd n) every item runs in each position equally often and right
    after each other item equally often; a rotation does the first only (each item keeps its predecessor)."""
    from collections import Counter
    from itertools import pairwise

    items = [f"p{i}" for i in range(n)]
    period = n if n % 2 == 0 else 2 * n
    orders = [balanced_order(items, r) for r in range(period)]
    assert all(sorted(o) == items for o in orders)
    assert balanced_order(items, period) == orders[0]
    for i in range(n):
        assert Counter(o[i] for o in orders) == dict.fromkeys(items, period // n)
    follows = Counter(pair for o in orders for pair in pairwise(o))
    assert all(follows[(a, b)] == period // n for a in items for b in items if a != b)
    if n >= 3:
        rotations = Counter(pair for r in range(n) for pair in pairwise(rotated(items, r)))
        assert len(rotations) == n  # each item always behind the same one
    assert balanced_order([], 3) == []


def _makespans() -> pd.DataFrame:
    """Two (step, policy) pairs over three rounds; round 2 is a slow spell for the first pair."""
    return pd.DataFrame({
        "step": [0, 0, 0, 0, 0, 0], "policy": ["p", "p", "p", "q", "q", "q"], "repeat": [0, 1, 2, 0, 1, 2],
        "real_s": [1.0, 1.1, 1.6, 2.0, 2.0, 2.2],
        "calibrated_measured_s": [1.02, 1.0, 1.1, 2.1, 1.9, 2.0],
        "calibrated_measured_err": [0.02, -0.10, -0.30, 0.05, -0.05, 0.01],
    })


def test_spread_gives_median_min_max_and_noise_per_step_and_policy():
    spread = makespan_spread(_makespans()).set_index("policy")
    assert spread.loc["p", ["real_s", "real_min_s", "real_max_s"]].tolist() == [1.1, 1.0, 1.6]
    assert spread.loc["p", "noise"] == pytest.approx(0.6 / 1.1)  # (max - min) / median
    assert spread.loc["q", "noise"] == pytest.approx(0.2 / 2.0)
    assert spread.loc["p", ["calibrated_measured_err", "calibrated_measured_err_min",
                            "calibrated_measured_err_max"]].tolist() == [-0.10, -0.30, 0.02]
    assert spread.loc["q", "calibrated_measured_err"] == pytest.approx(0.01)
    assert spread.loc["q", "calibrated_measured_s"] == 2.0
    assert spread.loc["p", "rounds"] == 3


def test_headline_is_the_median_over_pairs_of_each_pairs_median_error_with_the_rounds_spread():
    # per (step, policy), the median error over rounds: p -0.10, q 0.01, so the headline is 0.055 (pooling
    # every run would give 0.05, the median of the rounds' medians 0.075); each round alone: the median
    # |err| over (step, policy): round 0 0.035, round 1 0.075, round 2 0.155
    mid, lo, hi = headline(_makespans(), "calibrated_measured_err")
    assert (mid, lo, hi) == pytest.approx((0.055, 0.035, 0.155))


def test_noise_check_refuses_the_error_only_when_the_noise_exceeds_it():
    m = _makespans()
    check = noise_check(m, ["measured"])
    # p: median |run / 1.1 - 1| over [1.0, 1.1, 1.6] = 0.1 / 1.1; q: over [2.0, 2.0, 2.2] = 0
    assert check.median == pytest.approx(np.median([0.1 / 1.1, 0.0]))  # 0.045 < the 0.055 error: claimed
    assert check.range_median == pytest.approx(np.median([0.6 / 1.1, 0.1]))  # (max - min) / median, kept beside
    assert check.error == pytest.approx(0.055) and check.rounds == 3
    assert check.claims == {"measured": "5.5%"} and check.warning is None
    noisy = m.assign(real_s=[1.0, 1.2, 1.6, 2.0, 2.4, 2.2])  # p: 0.2 / 1.2 = 0.17, q: 0.2 / 2.2 = 0.09
    refused = noise_check(noisy, ["measured"])
    assert refused.claims == {"measured": None}
    assert refused.warning is not None and "no error claimed" in refused.warning
    one = noise_check(m[m["repeat"] == 0], ["measured"])  # one round: no noise measured, nothing claimed
    assert one.claims == {"measured": None} and "one round" in one.warning


def test_median_table_is_the_point_by_point_median_of_the_rounds():
    rows = [{"kind": "decode", "batch_size": b, "context": 64, "seconds": 0.0} for b in (1, 2)]
    rounds = [table_frame(rows).assign(seconds=s) for s in ([1.0, 4.0], [3.0, 2.0], [2.0, 9.0])]
    assert median_table(rounds)["seconds"].tolist() == [2.0, 4.0]


def _table(scale: float) -> TableCostModel:
    """A made-up cost table (the wiring under test, not a machine): per-iteration seconds grow with
    the batch; ``scale`` multiplies every entry."""
    rows = []
    for b in (1, 2, 4, 8):
        for c in (8, 64, 256):
            rows.append({"kind": "decode", "batch_size": b, "context": c, "seconds": scale * 1e-3 * (1 + b / 8)})
            rows.append({"kind": "sd", "batch_size": b, "context": c, "depth": 3, "topk": 1, "verify_tokens": 3,
                         "seconds": scale * 2e-3 * (1 + b / 8)})
        for n in (1, 8, 64):
            rows.append({"kind": "prefill", "batch_size": b, "context": n, "seconds": scale * 1e-3 * b})
            rows.append({"kind": "drafter_prefill", "batch_size": b, "context": n, "seconds": scale * 5e-4 * b})
    return TableCostModel.from_frame(table_frame(rows), {"context_rule": "max"})


def test_every_run_is_simulated_with_its_own_rounds_table_and_kept():
    """Two rounds of real runs on a tiny target; round 2's table is twice round 1's. Each round's
    simulated makespan must follow its own table (x2), every run must appear, and the accept-length
    row must pool both rounds' runs (none is picked by its timing)."""
    from tltsim.rollout import simulate_policy_step

    target = random_model(TINY, seed=3, dtype=torch.float32, std=0.1)
    w = StepWorkload(step=0, source="t", group_ids=np.repeat(["g0", "g1"], 3), prompt_tokens=np.full(6, 8),
                     response_tokens=np.array([5, 9, 14, 20, 30, 40]), hit_cap=np.zeros(6, bool))
    requests = replay_requests(w, vocab_size=TINY.vocab_size, seed=0)
    reference = reference_run(target, with_extra_tokens(requests, PINNED_DEPTH), max_batch=8)
    accept = paper_qwen32b_tp4()
    specs = ["no-sd", "static:3_1_3"]
    runs = [r for repeat in (0, 1) for r in real_round(target, requests, specs, accept, reference, max_batch=8,
                                                        seed=0, repeat=repeat)]
    assert [(r.policy, r.repeat) for r in runs] == [("no-sd", 0), ("static:3_1_3", 0), ("static:3_1_3", 1),
                                                    ("no-sd", 1)]  # the second round's order is rotated
    # Round 2's static run reports one more token per SD iteration (a run as another policy's timing
    # could make it): the accept-length row must pool both rounds, not keep one.
    second = next(r for r in runs if r.policy == "static:3_1_3" and r.repeat == 1)
    second.iterations = second.iterations.assign(accept_length=second.iterations["accept_length"] + 1.0)
    # the analytic slot gets a table too: only the calibrated columns are checked here
    result = ValidationResult(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), [], pd.DataFrame(),
                              [_table(1.0), _table(2.0)], _table(1.0))
    compare([w], specs, runs, result, engine=native_engine(8), simulate=simulate_policy_step, seed=0,
            deal_mode="shuffle", accept_sources=lambda real: {"measured": MeasuredAcceptance(real.accepted, accept)})
    m = result.makespans.set_index(["policy", "repeat"]).sort_index()
    assert len(m) == 4
    for spec in specs:
        assert m.loc[(spec, 1), "calibrated_measured_s"] == pytest.approx(2 * m.loc[(spec, 0), "calibrated_measured_s"],
                                                                          rel=1e-9)
        assert m.loc[(spec, 1), "real_s"] == next(r.makespan for r in runs if r.policy == spec and r.repeat == 1)
    sd = pd.concat([r.iterations for r in runs if r.policy == "static:3_1_3"])
    pooled = float(np.average(sd["accept_length"], weights=sd["batch_size"]))
    acc = result.acceptance.set_index("policy")
    assert acc.loc["static:3_1_3", "real"] == pytest.approx(pooled)
    assert set(result.sim_events["repeat"]) == {0, 1}


class _SleepyPolicy:
    """A no-SD policy that sleeps at every decision: time the wall clock sees and the thread does not.
    Its decisions hold one iteration, so the engine asks at every one (a longer plain hold is run
    without asking)."""

    def __init__(self, seconds: float) -> None:
        from tltcore.policy.base import NoSD

        self.inner, self.seconds, self.decisions = NoSD(), seconds, 0
        self.name = self.inner.name

    def decide(self, view):
        import time

        from tltcore.policy.base import NO_SD, Decision

        self.decisions += 1
        time.sleep(self.seconds)
        return Decision(NO_SD)

    def observe(self, outcome) -> None:
        self.inner.observe(outcome)

    def reset(self, step: int) -> None:
        self.inner.reset(step)


def test_thread_clock_leaves_out_time_the_thread_did_not_run():
    """A run whose policy sleeps 20 ms per iteration (the thread off the core, as when another process
    holds it): on the thread clock the makespan leaves the sleeps out, its wall_s keeps them; on the
    wall clock the makespan has them."""
    target = random_model(TINY, seed=3, dtype=torch.float32, std=0.1)
    w = StepWorkload(step=0, source="t", group_ids=np.array(["g0", "g1"]), prompt_tokens=np.full(2, 4),
                     response_tokens=np.array([6, 8]), hit_cap=np.zeros(2, bool))
    requests = replay_requests(w, vocab_size=TINY.vocab_size, seed=0)
    policy = _SleepyPolicy(0.02)
    thread = reference_run(target, requests, max_batch=2, policy=policy, clock="thread")
    slept = policy.decisions * 0.02
    stage = thread.events[thread.events["kind"] == "stage"]
    makespan = float(stage["t_end"].iloc[0])
    assert policy.decisions >= 7
    assert thread.wall_s >= slept and makespan < thread.wall_s - 0.9 * slept
    policy = _SleepyPolicy(0.02)
    wall = reference_run(target, requests, max_batch=2, policy=policy, clock="wall")
    assert wall.wall_s >= policy.decisions * 0.02
    with pytest.raises(ValueError, match="clock"):
        reference_run(target, requests, max_batch=2, clock="sundial")


def _sd_table(sd_scale: float) -> TableCostModel:
    """:func:`_table` with the 3_1_3 SD iteration ``sd_scale`` times a plain one: SD's verdict is in the
    table (accept length about 2.3 with the paper's acceptance: it pays at 1.0, loses at 5.0)."""
    out = []
    for b in (1, 2, 4, 8):
        for c in (8, 64, 256):
            out.append({"kind": "decode", "batch_size": b, "context": c, "seconds": 1e-3 * (1 + b / 8)})
            out.append({"kind": "sd", "batch_size": b, "context": c, "depth": 3, "topk": 1, "verify_tokens": 3,
                        "seconds": sd_scale * 1e-3 * (1 + b / 8)})
        for n in (1, 8, 64):
            out.append({"kind": "prefill", "batch_size": b, "context": n, "seconds": 1e-3 * b})
            out.append({"kind": "drafter_prefill", "batch_size": b, "context": n, "seconds": 5e-4 * b})
    return TableCostModel.from_frame(table_frame(out), {"context_rule": "max"})


@pytest.mark.parametrize(("sd_scale", "speculates"), [(1.0, True), (5.0, False)])
def test_cost_aware_runs_on_the_real_engine_priced_by_the_given_table(sd_scale, speculates):
    """The same policy object as in the simulator, on the native engine: it decides from the table it
    is given (SD as cheap as a plain iteration: it speculates; five times dearer: it never does),
    the run stays lossless (speculative_run checks the output against the plain run), and without a
    table it is refused with one line before anything runs."""
    from tltcore.errors import InputError

    target = random_model(TINY, seed=3, dtype=torch.float32, std=0.1)
    w = StepWorkload(step=0, source="t", group_ids=np.repeat(["g0", "g1"], 3), prompt_tokens=np.full(6, 8),
                     response_tokens=np.array([5, 9, 14, 20, 30, 40]), hit_cap=np.zeros(6, bool))
    requests = replay_requests(w, vocab_size=TINY.vocab_size, seed=0)
    reference = reference_run(target, with_extra_tokens(requests, PINNED_DEPTH), max_batch=8)
    spec = "cost-aware:arms=3_1_3"
    (run,) = real_round(target, requests, [spec], paper_qwen32b_tp4(), reference, max_batch=8, seed=0,
                        cost_model=_sd_table(sd_scale))
    used = {c for c in run.iterations["config"] if c.enabled}
    assert bool(used) is speculates
    with pytest.raises(InputError, match="cost table"):
        real_round(target, requests, [spec], paper_qwen32b_tp4(), reference, max_batch=8, seed=0)


def test_the_profile_runs_on_an_engine_sized_as_the_replays(monkeypatch):
    """tlt validate's profile points run on engines with the replay's slots and length (a bigger KV slab
    made decode 2-4% slower on this CPU); a grid without a size keeps point-sized engines."""
    from tltreal.validation import profiler

    made = []

    class Recording(profiler.EngineConfig):
        def __init__(self, **kw) -> None:
            made.append((kw["max_batch"], kw["max_len"]))
            super().__init__(**kw)

    monkeypatch.setattr(profiler, "EngineConfig", Recording)
    target = random_model(TINY, seed=3, dtype=torch.float32, std=0.1)
    sized = profiler.ProfileGrid(batch_sizes=(2,), contexts=(16,), prefill_lengths=(4,), iterations=2, warmup=1,
                                 decode_warmup=1, repeats=1, engine_max_batch=8, engine_max_len=300)
    for point in profiler.profile_points(sized):
        profiler.measure_point(target, sized, point, {})
    assert made and all(b == 8 and n == 300 for b, n in made)
    made.clear()
    plain = profiler.ProfileGrid(batch_sizes=(2,), contexts=(16,), prefill_lengths=(4,), iterations=2, warmup=1,
                                 decode_warmup=1, repeats=1)
    for point in profiler.profile_points(plain):
        profiler.measure_point(target, plain, point, {})
    assert made and all(b == 2 and n < 40 for b, n in made)

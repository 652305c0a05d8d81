"""The upper bound (a makespan lower bound): no registered policy beats it, on small synthetic
workloads over seeds, switch modes, a queue and a KV limit; and it is tight enough to mean something
(the best policy comes within 10% of it where nothing is queued), so a bound 10% tighter fails here."""

from __future__ import annotations

import re

import numpy as np
import pytest
from rollout_fixtures import Work

from conftest import needs_shared_traces
from tltcore.acceptance import ChainAcceptance, paper_qwen32b_tp4
from tltcore.cost import RooflineCostModel
from tltcore.cost.protocol import PerConfigSDTimes
from tltcore.drafter.state import INITIAL_DRAFTER
from tltcore.errors import InputError
from tltcore.hardware import get_gpu
from tltcore.model_shape import get_model
from tltcore.policy.base import NO_SD, SDConfig
from tltcore.policy.registry import make_policy
from tltsim.rollout import EngineConfig, simulate_step
from tltsim.upper_bound import admission_progress, makespan_lower_bound, policy_shape_set, worker_lower_bound

SPECS = ("no-sd", "static:4_1_4", "static:8_4_32", "beg-mab", "elastic:8+beg-mab", "elastic:8:3+static:8_4_16",
         "sglang-ema", "vllm-table", "greedy-oracle", "cost-aware", "cost-aware:lengths=known")
COSTS = {"7b": RooflineCostModel(get_model("Qwen2.5-7B"), get_gpu("H100"), tp=4),
         "32b": RooflineCostModel(get_model("Qwen2.5-32B"), get_gpu("H100"), tp=4)}
ACCEPT = paper_qwen32b_tp4()


def _workload(seed: int, n_groups: int = 12, per_group: int = 4) -> Work:
    """Long-tailed responses (lognormal, a cap that several hit), prompts of 50-300 tokens."""
    rng = np.random.default_rng(seed)
    n = n_groups * per_group
    resp = np.minimum(rng.lognormal(6.5, 1.0, n).astype(np.int64) + 1, 4000)
    return Work(0, np.repeat(np.arange(n_groups), per_group), rng.integers(50, 300, n), resp)


def _makespans(work: Work, cost, engine: EngineConfig, seed: int, workers: int) -> dict[str, float]:
    out = {}
    for spec in SPECS:
        policies = [make_policy(spec, seed=seed, accept_model=ACCEPT, cost_model=cost) for _ in range(workers)]
        out[spec] = simulate_step(work, policies=policies, cost=cost, accept=ACCEPT, engine=engine, seed=seed).makespan
    return out


def _bound(work: Work, cost, engine: EngineConfig, seed: int, workers: int):
    shapes = policy_shape_set(make_policy(s, accept_model=ACCEPT, cost_model=cost) for s in SPECS)
    return makespan_lower_bound(work, n_workers=workers, cost=cost, accept=ACCEPT, engine=engine, shapes=shapes,
                                seed=seed)


@pytest.mark.parametrize("model", ["7b", "32b"])
@pytest.mark.parametrize("switch", ["reprefill", "catch_up"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_policy_beats_the_bound_and_the_best_comes_within_10_percent(model: str, switch: str, seed: int) -> None:
    cost, work = COSTS[model], _workload(seed)
    engine = EngineConfig(max_batch=256, switch=switch)
    bound = _bound(work, cost, engine, seed, 2)
    assert not bound.queued.any()
    makespans = _makespans(work, cost, engine, seed, 2)
    for spec, m in makespans.items():
        assert m >= bound.makespan, f"{spec} beat the bound: {m} < {bound.makespan}"
    assert min(makespans.values()) < 1.10 * bound.makespan, makespans  # a 10% tighter bound would be beaten


@pytest.mark.parametrize("model", ["7b", "32b"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_bound_holds_and_is_tight_with_a_queue_and_a_kv_limit(model: str, seed: int) -> None:
    cost, work = COSTS[model], _workload(seed)
    for engine in (EngineConfig(max_batch=5), EngineConfig(max_batch=256, kv_capacity_tokens=12_000)):
        bound = _bound(work, cost, engine, seed, 2)
        assert bound.queued.all()
        makespans = _makespans(work, cost, engine, seed, 2)
        for spec, m in makespans.items():
            assert m >= bound.makespan, f"{spec} beat the bound: {m} < {bound.makespan}"
        assert min(makespans.values()) < 1.10 * bound.makespan, makespans


def test_admission_progress_brackets_the_engine() -> None:
    """Two slots, responses of 11, 5, 9 and 3 tokens (10, 4, 8, 2 left after prefill): request 2
    starts when request 1 ends (progress 4 at the earliest, 4 + A at the latest), request 3 when the
    next one ends."""
    p, t = np.array([5, 5, 5, 5]), np.array([11, 5, 9, 3])
    early = admission_progress(p, t, EngineConfig(max_batch=2), 0.0)
    late = admission_progress(p, t, EngineConfig(max_batch=2), 3.0)
    assert early.tolist() == [0, 0, 4, 10]
    assert late.tolist() == [0, 0, 7, 13]


class FlatCost(PerConfigSDTimes):
    """Times that ignore contexts: the bound is hand-computable."""

    def prefill_time(self, new, cached):
        return 0.5

    def drafter_prefill_time(self, new, cached):
        return 0.25

    def decode_time(self, ctx):
        return 0.01

    def decode_span_time(self, ctx, n):
        return 0.01 * n

    def sd_time(self, ctx, config):
        return 0.01 + 0.002 * config.depth


def test_bound_by_hand() -> None:
    """One prefill pass (0.5 s) plus, per unit of progress, the cheaper of plain decode (0.01 s per
    token) and a 3-chain at acceptance 0.5 (0.016 s per 1.875 tokens), over the longest response."""
    prompts, responses = np.array([10, 20, 30]), np.array([101, 51, 1])
    chain = SDConfig.chain(3)
    args = {"cost": FlatCost(), "accept": ChainAcceptance((0.5,)), "engine": EngineConfig()}
    sd, _ = worker_lower_bound(prompts, responses, shapes=(chain,), **args)
    assert sd == pytest.approx(0.5 + 100 * 0.016 / 1.875)
    plain, _ = worker_lower_bound(prompts, responses, shapes=(), **args)
    assert plain == pytest.approx(0.5 + 100 * 0.01)
    run = simulate_step(Work(0, np.arange(3), prompts, responses), policies=[make_policy("no-sd")], cost=FlatCost(),
                        accept=None, engine=EngineConfig(), seed=0)
    assert run.makespan == pytest.approx(plain)  # no-sd meets its bound exactly here


def test_a_policy_of_unknown_shapes_cannot_be_bounded() -> None:
    class Mystery:
        name = "mystery"

    with pytest.raises(InputError, match="mystery"):
        policy_shape_set([Mystery()])  # type: ignore[list-item]
    assert policy_shape_set([make_policy("no-sd")]) == () and NO_SD not in policy_shape_set(
        [make_policy("static:4_1_4")])


@needs_shared_traces()
def test_sim_run_prints_and_saves_the_bound(tmp_path) -> None:
    import pandas as pd
    from typer.testing import CliRunner

    from tltcli import app

    out = tmp_path / "res"
    result = CliRunner().invoke(app, ["sim", "run", "--scenario", "aime_qwen7b_64xh100", "--gpus", "8",
                                      "--set", "trace.prompts_per_step=8", "--policy", "cost-aware",
                                      "--policy", "greedy-oracle", "--perfetto", "off", "--seeds", "1",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("upper bound:"))
    bound = float(re.search(r"under ([0-9.]+) s", line)[1])
    summary = pd.read_csv(out / "summary.csv")
    assert (summary["makespan_s"] >= bound).all()
    assert summary["makespan_s"].min() < 1.1 * bound


def test_the_bound_line_says_it_bounds_expected_lengths_under_stochastic_acceptance(tmp_path):
    """Both `tlt sim run` paths (one seed, several) print the bound; only a stochastic run adds that
    the bound is on expected accept lengths (a lucky draw may finish below it)."""
    from conftest import invoke_cli

    base = ("sim", "run", "--trace", "intern_s1_math", "--set", "trace.prompts_per_step=4", "--set",
            "cluster.gpus=8", "--policy", "elastic:16+static:4_1_4", "--perfetto", "off")
    caveat = "(a bound on expected accept lengths: stochastic runs may dip below)"
    for seeds in ("1", "2"):
        for mode, shown in (("expected", False), ("stochastic", True)):
            res = invoke_cli(*base, "--seeds", seeds, "--acceptance", mode, "--out", str(tmp_path / f"{mode}{seeds}"))
            assert res.returncode == 0, res.stderr
            line = next(x for x in res.stdout.splitlines() if x.startswith("upper bound:"))
            assert (caveat in " ".join(res.stdout.split())) is shown, (seeds, mode, line)


@pytest.mark.parametrize("model", ["7b", "32b", "ngram"])
def test_cells_priced_together_equal_each_cell_priced_alone(model: str) -> None:
    """The bound prices every grid cell's shapes over all cells at once (paged-KV sums); each cell's
    least time per unit of progress is the float the per-cell form gives, on ragged batches, contexts
    around the KV block size and with plain decode only."""
    from tltcore.drafter.kinds import ModelFreeDraftCost
    from tltsim.upper_bound import _per_progress, _per_progress_cells, _rates

    rng = np.random.default_rng(7)
    cost = ModelFreeDraftCost(COSTS["7b"]) if model == "ngram" else COSTS[model]
    cells = [rng.integers(1, 9000, int(b)) for b in rng.integers(1, 300, 40)]
    cells += [np.full(3, cost.kv_block_size * k + d, dtype=np.int64) for k in (1, 7) for d in (-1, 0, 1)]
    shapes = policy_shape_set(make_policy(s, accept_model=ACCEPT, cost_model=cost) for s in SPECS)
    # a shape accepting nothing: plain decode (priced from the cells' sums) is every cell's least
    useless = [*_rates((), ACCEPT, INITIAL_DRAFTER), (SDConfig.chain(4), 1.0 if model != "ngram" else 0.5)]
    for rates in (_rates(shapes, ACCEPT, INITIAL_DRAFTER), _rates((), ACCEPT, INITIAL_DRAFTER), useless):
        assert _per_progress_cells(cost, cells, rates) == [_per_progress(cost, c, rates) for c in cells]
    assert _per_progress_cells(cost, cells, useless) == [cost.decode_time(c) for c in cells]

"""Spec strings build the right policies; every bad spec is one InputError naming it."""

from __future__ import annotations

import numpy as np
import pytest

from tltcore.cost.protocol import PerConfigSDTimes
from tltcore.drafter.state import INITIAL_DRAFTER, DrafterState
from tltcore.errors import InputError
from tltcore.policy.bandits import UCB1, EpsilonGreedy
from tltcore.policy.base import NoSD, SDConfig, SDPolicy, Static
from tltcore.policy.beg_mab import BucketedEpsilonGreedy
from tltcore.policy.elastic import Elastic
from tltcore.policy.oracle import GreedyOracle
from tltcore.policy.registry import POLICY_NAMES, make_policy
from tltcore.policy.sglang_ema import SglangEma
from tltcore.policy.vllm_table import VllmTable


class FlatAcceptance:
    def expected_accept_length(self, config: SDConfig, drafter: DrafterState = INITIAL_DRAFTER) -> float:
        return 1.0 + 0.5 * config.depth


class FlatCost(PerConfigSDTimes):
    def decode_time(self, ctx: np.ndarray) -> float:
        return 0.01

    def sd_time(self, ctx: np.ndarray, config: SDConfig) -> float:
        return 0.02


MODELS = {"accept_model": FlatAcceptance(), "cost_model": FlatCost()}


@pytest.mark.parametrize(("spec", "kind"), [
    ("no-sd", NoSD), ("static", Static), ("static:8_4_16", Static), ("beg-mab", BucketedEpsilonGreedy),
    ("eps-greedy", EpsilonGreedy), ("ucb1", UCB1), ("vllm-table", VllmTable), ("sglang-ema", SglangEma),
    ("greedy-oracle", GreedyOracle), ("elastic+beg-mab", Elastic), ("elastic+static:8_4_16", Elastic),
    ("elastic:16:5+beg-mab", Elastic), ("elastic+greedy-oracle", Elastic),
])
def test_each_spec_builds_its_policy(spec: str, kind: type) -> None:
    policy = make_policy(spec, seed=3, **MODELS)
    assert isinstance(policy, kind)
    assert isinstance(policy, SDPolicy)
    assert policy.name == spec


def test_every_base_name_builds() -> None:
    for name in POLICY_NAMES:
        assert make_policy(name, **MODELS).name == name


def test_arguments_reach_the_policy() -> None:
    elastic = make_policy("elastic:16:5+beg-mab:eps=0.05:window=100:thresholds=1,8", seed=9)
    assert isinstance(elastic, Elastic) and (elastic.threshold, elastic.consecutive) == (16, 5)
    inner = elastic.inner
    assert isinstance(inner, BucketedEpsilonGreedy)
    assert (inner.eps, inner.window, inner.thresholds, inner.seed) == (0.05, 100, (1, 8), 9)
    static = make_policy("static:8_4_16")
    assert isinstance(static, Static) and static.config == SDConfig(8, 4, 16)
    assert make_policy("static:8_4_48").config.verify_tokens == 48  # TLT's widest arm
    table = make_policy("vllm-table:2=8_4_16,8=3,above=1")
    assert isinstance(table, VllmTable)
    assert table.table == ((2, SDConfig(8, 4, 16)), (8, SDConfig.chain(3)))
    assert table.above == SDConfig.chain(1)
    ema = make_policy("sglang-ema:depths=1,2:ranges=1,32:prior=0.5")
    assert isinstance(ema, SglangEma) and ema.depths == (1, 2) and ema.prior_accept_rate == 0.5
    ucb = make_policy("ucb1:c=0.5:arms=8_4_32,8_4_8")
    assert isinstance(ucb, UCB1) and ucb.c == 0.5 and len(ucb.arms) == 2


@pytest.mark.parametrize("spec", [
    "", "  ", "bogus", "elastic", "elastic+", "+no-sd", "no-sd+beg-mab", "elastic+elastic+no-sd",
    "elastic:x+beg-mab", "elastic:0+beg-mab", "elastic:1:2:3+no-sd", "static:8x4", "static:1_1_5",
    "static:8_4_16:8_4_8", "no-sd:1", "beg-mab:eps", "beg-mab:eps=1.5", "beg-mab:foo=1",
    "beg-mab:window=0", "beg-mab:arms=8_4_16,8_4_16", "ucb1:c=-1", "vllm-table:4", "vllm-table:x=3",
    "vllm-table:8=2,4=3", "sglang-ema:depths=", "sglang-ema:smoothing=0", "greedy-oracle", "elastic+greedy-oracle",
    "oracle", "cost-aware", "elastic+cost-aware",
])
def test_bad_specs_are_input_errors(spec: str) -> None:
    with pytest.raises(InputError) as err:
        make_policy(spec)
    message = str(err.value)
    assert "beg-mab" in message and "elastic" in message  # lists the valid names
    if spec.strip():
        assert spec.strip() in message


def test_which_specs_need_a_cost_model_and_their_shapes_from_the_spec_alone():
    """A real engine must be profiled before a priced policy runs on it, and its profile grid must hold
    every shape the policy may choose: both known from the spec, with no model at hand."""
    from tltcore.policy.registry import needs_cost_model, spec_shapes

    assert needs_cost_model("cost-aware") and needs_cost_model("elastic:8+cost-aware:lengths=known")
    assert needs_cost_model("greedy-oracle:arms=4_1_4")
    assert not any(needs_cost_model(s) for s in ("no-sd", "static:4_1_4", "elastic+beg-mab", "sglang-ema"))
    assert spec_shapes("cost-aware:arms=4_1_4,8_4_16") == (SDConfig(4, 1, 4), SDConfig(8, 4, 16))
    assert spec_shapes("elastic:8+static:6_4_16") == (SDConfig(6, 4, 16),)
    assert spec_shapes("no-sd") == ()


#: (spec at an option's documented bound, the same spec just past it): the registry's docstring
#: promises these numbers, and each ``MAX_*`` constant beside its policy is pinned here.
BOUNDS = [
    ("cost-aware:phases=64", "cost-aware:phases=65"),
    ("cost-aware:recheck=1048576", "cost-aware:recheck=1048577"),
    ("cost-aware:prior_weight=1048576", "cost-aware:prior_weight=1048577"),
    ("cost-aware:arms=" + ",".join(f"{d}_1_{d}" for d in range(1, 65)),
     "cost-aware:arms=" + ",".join(f"{d}_1_{d}" for d in range(1, 65)) + ",8_4_32"),
    ("beg-mab:window=100000", "beg-mab:window=100001"),
    ("eps-greedy:window=100000", "eps-greedy:window=100001"),
    ("beg-mab:thresholds=1,1000000", "beg-mab:thresholds=1,1000001"),
    ("beg-mab:thresholds=" + ",".join(map(str, range(64))), "beg-mab:thresholds=" + ",".join(map(str, range(65)))),
    ("ucb1:c=10", "ucb1:c=10.5"),
    ("sglang-ema:hysteresis=1", "sglang-ema:hysteresis=1.01"),
    ("sglang-ema:ranges=1,1000000", "sglang-ema:ranges=1,1000001"),
    ("sglang-ema:ranges=" + ",".join(map(str, range(1, 65))), "sglang-ema:ranges=" + ",".join(map(str, range(1, 66)))),
    ("vllm-table:1000000=3", "vllm-table:1000001=3"),
    ("vllm-table:" + ",".join(f"{b}=1" for b in range(1, 4097)),
     "vllm-table:" + ",".join(f"{b}=1" for b in range(1, 4098))),
    ("elastic:1000000+beg-mab", "elastic:1000001+beg-mab"),
    ("elastic:32:1048576+beg-mab", "elastic:32:1048577+beg-mab"),
]


@pytest.mark.parametrize(("at", "past"), BOUNDS, ids=[b[1][:40] for b in BOUNDS])
def test_every_numeric_option_has_its_documented_upper_bound(at: str, past: str) -> None:
    """issue 39: ``cost-aware:phases=100000`` ran 150 s for 19% of a 32-response step; every number a
    spec takes has a bound, and the bound itself is accepted."""
    assert make_policy(at, **MODELS).name == at
    with pytest.raises(InputError) as err:
        make_policy(past, **MODELS)
    assert past in str(err.value)


@pytest.mark.parametrize(("spec", "says"), [
    ("static:0_1_1", "depth 0"), ("static:0_4_32", "depth 0"), ("static:off", "never drafts"),
    ("static:0", "never drafts"), ("elastic+static:off", "never drafts"), ("sglang-ema:depths=0", "never draft"),
    ("greedy-oracle:arms=off", "never drafts"), ("beg-mab:arms=off", "never draft"), ("ucb1:arms=off", "never draft"),
    ("vllm-table:4=off", "never drafts"), ("vllm-table:4=0,above=0", "never drafts"),
    ("vllm-table:4=0_1_1", "depth 0"), ("beg-mab:arms=8_4_16,0_1_1", "depth 0"),
])
def test_a_spec_that_never_drafts_is_refused_no_sd_says_it(spec: str, says: str) -> None:
    """issue 39: an SD name that never drafts ran as no SD under its SD name; ``no-sd`` says that."""
    with pytest.raises(InputError) as err:
        make_policy(spec, **MODELS)
    assert spec in str(err.value) and says in str(err.value)
    for drafts in ("sglang-ema:depths=0,1,3", "beg-mab:arms=8_4_8,off:thresholds=1,2", "vllm-table:4=2,above=0",
                   "vllm-table:4=0,above=2"):
        make_policy(drafts, **MODELS)  # off beside a drafting choice stays a policy's option


@pytest.mark.parametrize(("spec", "option"), [
    ("cost-aware:prior=0.7:prior=0.2", "'prior' is given twice"), ("beg-mab:eps=0.1:eps=0.2", "'eps' is given twice"),
    ("sglang-ema:depths=1,3:depths=7", "'depths' is given twice"), ("vllm-table:4=2,above=3,above=off", "'above'"),
    ("cost-aware:prior_weight=inf", "prior_weight must be a finite"), ("ucb1:c=nan", "c must be a finite"),
    ("sglang-ema:hysteresis=inf", "hysteresis must be a finite"),
])
def test_repeated_and_non_finite_options_are_refused(spec: str, option: str) -> None:
    with pytest.raises(InputError) as err:
        make_policy(spec, **MODELS)
    assert spec in str(err.value) and option in str(err.value)

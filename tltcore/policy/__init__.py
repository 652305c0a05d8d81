"""The policy layer shared by the simulator and the real engine. Imports no SimPy, torch or vLLM.

One mechanism per module: ``base`` (the contract: SDConfig, BatchView, Decision, Outcome),
``elastic`` (TLT's elastic SD switch), ``beg_mab`` (TLT's bucketed ε-greedy tuner), ``bandits``
(plain ε-greedy, UCB1), ``vllm_table`` and ``sglang_ema`` (peer systems), ``oracle`` (the greedy
oracle: per iteration, no bound), ``cost_aware`` (ours: a cost-aware switch and shape picker),
``recent_accept`` (the engines' accept-length estimate), ``registry`` (spec strings -> policies).
When and where the drafter trains (worker states, spot training, checkpoints) is the Spot Trainer's
contract: :mod:`tltcore.spot_coordinator`.
"""

from tltcore.policy.bandits import UCB1, EpsilonGreedy
from tltcore.policy.base import (
    HOLD_UNTIL_EVENT,
    NO_SD,
    BatchView,
    Decision,
    NoSD,
    Outcome,
    SDConfig,
    SDPolicy,
    Static,
    max_tree_nodes,
)
from tltcore.policy.beg_mab import DEFAULT_ARMS, BegMab, BucketedEpsilonGreedy
from tltcore.policy.cost_aware import CostAware
from tltcore.policy.elastic import Elastic
from tltcore.policy.oracle import GreedyOracle
from tltcore.policy.recent_accept import RecentAccept
from tltcore.policy.registry import POLICY_NAMES, WRAPPER_NAMES, check_spec, make_policy
from tltcore.policy.sglang_ema import SglangEma
from tltcore.policy.vllm_table import VllmTable

__all__ = ["DEFAULT_ARMS", "HOLD_UNTIL_EVENT", "NO_SD", "POLICY_NAMES", "UCB1", "WRAPPER_NAMES", "BatchView",
           "BegMab", "BucketedEpsilonGreedy", "CostAware", "Decision", "Elastic", "EpsilonGreedy", "GreedyOracle",
           "NoSD", "Outcome", "RecentAccept", "SDConfig", "SDPolicy", "SglangEma", "Static", "VllmTable", "check_spec",
           "make_policy", "max_tree_nodes"]

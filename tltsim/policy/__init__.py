"""The policy layer shared by the simulator and the real engine. Imports no SimPy, torch or vLLM.

One mechanism per module: ``elastic`` (TLT's elastic SD switch), ``beg_mab`` (TLT's bucketed
ε-greedy tuner), ``bandits`` (plain ε-greedy, UCB1), ``vllm_table`` and ``sglang_ema`` (peer
systems), ``oracle`` (upper bound), ``registry`` (spec strings -> policy objects).
"""

from tltsim.policy.bandits import UCB1, EpsilonGreedy
from tltsim.policy.base import NO_SD, BatchView, NoSD, Outcome, SDConfig, SDPolicy, Static, max_tree_nodes
from tltsim.policy.beg_mab import DEFAULT_ARMS, BegMab, BucketedEpsilonGreedy
from tltsim.policy.elastic import Elastic
from tltsim.policy.oracle import Oracle
from tltsim.policy.registry import POLICY_NAMES, WRAPPER_NAMES, make_policy
from tltsim.policy.sglang_ema import SglangEma
from tltsim.policy.vllm_table import VllmTable

__all__ = ["DEFAULT_ARMS", "NO_SD", "POLICY_NAMES", "UCB1", "WRAPPER_NAMES", "BatchView", "BegMab",
           "BucketedEpsilonGreedy", "Elastic", "EpsilonGreedy", "NoSD", "Oracle", "Outcome", "SDConfig",
           "SDPolicy", "SglangEma", "Static", "VllmTable", "make_policy", "max_tree_nodes"]

"""Rollout simulation, laid out by concept: ``entities`` (engine limits, live requests),
``dealing`` (responses to workers), ``scheduling`` (admission and prefill packing), ``worker`` (one
worker's decode loop and the elastic switch), ``simulation`` (SimPy over workers and steps)."""

from tltcore.dealing import DEAL_MODES, deal
from tltcore.engine_limits import SWITCH_MODES
from tltsim.rollout.entities import ACCEPTANCE_MODES, EngineConfig, StepRequests
from tltsim.rollout.simulation import RolloutResult, RolloutRun, StepResult, simulate_policy_step, simulate_step

__all__ = ["ACCEPTANCE_MODES", "DEAL_MODES", "SWITCH_MODES", "EngineConfig", "RolloutResult", "RolloutRun",
           "StepRequests", "StepResult", "deal", "simulate_policy_step", "simulate_step"]

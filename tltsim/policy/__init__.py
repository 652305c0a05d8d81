"""The policy layer shared by the simulator and the real engine. Imports no SimPy, torch or vLLM."""

from tltsim.policy.base import NO_SD, BatchView, NoSD, Outcome, SDConfig, SDPolicy, Static

__all__ = ["NO_SD", "BatchView", "NoSD", "Outcome", "SDConfig", "SDPolicy", "Static"]

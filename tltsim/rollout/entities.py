"""What a rollout worker holds: its engine limits and the live requests, as aligned arrays.

Requests are kept column-wise (one numpy array per attribute, one entry per running request) because
every decode iteration touches all of them; a request object per response would make the simulator's
hot path Python-bound.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Protocol

import numpy as np

from tltcore.engine_limits import EngineLimits

ACCEPTANCE_MODES = ("expected", "stochastic")


class StepRequests(Protocol):
    """What the rollout needs of a step's workload (``tltsim.traces.workload.StepWorkload`` fits)."""

    step: int
    group_ids: np.ndarray
    prompt_tokens: np.ndarray
    response_tokens: np.ndarray


@dataclass(frozen=True)
class EngineConfig(EngineLimits):
    """The simulated worker's engine: the shared limits (:class:`~tltcore.engine_limits.EngineLimits`)
    plus what only a simulation has.

    ``kv_capacity_tokens``: the KV cache of one worker in tokens (all its GPUs together).
    ``acceptance_mode``: accept lengths drawn per request (``stochastic``) or their expectation.
    ``mixed_prefill``: requests admitted while others decode join the next decode iteration, as vLLM
    schedules them, so their prefill costs only its marginal time (the pass minus the fixed cost of
    any forward, priced as a one-token prefill); off, every admission is a pass of its own (the native
    engine). ``closed_form`` and ``coalesce`` exist so tests can prove that advancing in spans equals
    plain stepping.
    """

    kv_capacity_tokens: int = 10**12
    acceptance_mode: str = "expected"
    closed_form: bool = True
    coalesce: bool = True
    mixed_prefill: bool = False

    @classmethod
    def of(cls, limits: EngineLimits, **extra: Any) -> EngineConfig:
        """The simulated engine for the shared ``limits`` (a scenario's ``engine`` section is one)
        and the simulation's own fields ``extra``."""
        return cls(**{f.name: getattr(limits, f.name) for f in fields(EngineLimits)}, **extra)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.kv_capacity_tokens < 1:
            raise ValueError(f"invalid engine config {self!r}")
        if self.acceptance_mode not in ACCEPTANCE_MODES:
            raise ValueError(f"acceptance_mode must be one of {ACCEPTANCE_MODES}")


class LiveRequests:
    """The running requests of one worker, column-wise.

    ``prompt``/``target``: prompt and final response lengths; ``rem``: tokens still to emit;
    ``ctx``: prompt + whole tokens emitted (what policies and cost models see); ``gen``: tokens
    emitted, fractional in expected-value mode (only kept there); ``lag``: tokens the drafter has
    not seen yet (a newly prefilled request's drafter has seen nothing).
    """

    def __init__(self, expected: bool) -> None:
        self.expected = expected
        self.dtype = np.float64 if expected else np.int64
        self.prompt = np.zeros(0, dtype=np.int64)
        self.target = np.zeros(0, dtype=np.int64)
        self.gen = np.zeros(0, dtype=self.dtype)
        self.rem = np.zeros(0, dtype=self.dtype)
        self.ctx = np.zeros(0, dtype=np.int64)
        self.lag = np.zeros(0, dtype=self.dtype)

    def __len__(self) -> int:
        return len(self.prompt)

    def add(self, prompt: np.ndarray, target: np.ndarray) -> None:
        """Admit requests whose prefill has just emitted their first token."""
        n = len(prompt)
        one = np.ones(n, dtype=self.dtype)
        self.prompt = np.concatenate([self.prompt, prompt])
        self.target = np.concatenate([self.target, target])
        self.gen = np.concatenate([self.gen, one])
        self.rem = np.concatenate([self.rem, target.astype(self.dtype) - 1])
        self.ctx = np.concatenate([self.ctx, prompt + 1])
        self.lag = np.concatenate([self.lag, (prompt + 1).astype(self.dtype)])

    def advance(self, step: np.ndarray, eps: float) -> None:
        """Emit ``step`` tokens per request (never more than ``rem``)."""
        self.rem -= step
        if self.expected:
            self.gen += step
            self.ctx = self.prompt + np.floor(self.gen + eps).astype(np.int64)
        else:  # integer progress: ctx carries it (saves an op per iteration)
            self.ctx += step

    def drop(self, keep: np.ndarray) -> None:
        self.prompt, self.target, self.gen = self.prompt[keep], self.target[keep], self.gen[keep]
        self.rem, self.ctx, self.lag = self.rem[keep], self.ctx[keep], self.lag[keep]

"""What a rollout worker holds: its engine limits and the live requests, as aligned arrays.

Requests are kept column-wise (one numpy array per attribute, one entry per running request) because
every decode iteration touches all of them; a request object per response would make the simulator's
hot path Python-bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

ACCEPTANCE_MODES = ("expected", "stochastic")
#: What the engine does when a policy switches SD on (``Decision.switch_on``):
#: ``reprefill`` — every live request is re-prefilled through target and drafter at a fraction of the
#: prefill budget (TLT's mechanism: its engine keeps no target hidden states while SD is off);
#: ``catch_up`` — only the drafter runs over the tokens it has not seen (the native engine keeps the
#: target's hidden states, so the target needs no re-prefill);
#: ``in_step`` — the drafter runs in every iteration, drafting or not, so it never lags and the switch
#: costs nothing extra (vLLM: an engine built with a draft model runs it even at steps its
#: batch-size schedule gives 0 draft tokens; that cost is in the decode times it is calibrated with).
SWITCH_MODES = ("reprefill", "catch_up", "in_step")


class StepRequests(Protocol):
    """What the rollout needs of a step's workload (``tltsim.traces.workload.StepWorkload`` fits)."""

    step: int
    group_ids: np.ndarray
    prompt_tokens: np.ndarray
    response_tokens: np.ndarray


@dataclass(frozen=True)
class EngineConfig:
    """Per-worker engine limits and simulation switches.

    ``kv_capacity_tokens``: the KV cache of one worker in tokens (all its GPUs together).
    ``switch``/``switch_prefill_fraction``: see :data:`SWITCH_MODES`; the re-prefill runs in passes
    of ``prefill_budget * switch_prefill_fraction`` tokens (TLT: 1/4). ``catch_up_limit``: a request
    whose drafter has missed more than this many tokens is caught up in a separate drafter pass
    before an SD iteration (fewer are folded into the iteration's first draft step, as the native
    engine does). ``mixed_prefill``: requests admitted while others decode join the next decode
    iteration, as vLLM schedules them, so their prefill costs only its marginal time (the pass minus
    the fixed cost of any forward, priced as a one-token prefill); off, every admission is a pass of
    its own (the native engine). ``closed_form`` and ``coalesce`` exist so tests can prove that
    advancing in spans equals plain stepping.
    """

    max_batch: int = 256
    kv_capacity_tokens: int = 10**12
    prefill_budget: int = 8192
    switch: str = "reprefill"
    switch_prefill_fraction: float = 0.25
    catch_up_limit: int = 16
    acceptance_mode: str = "expected"
    closed_form: bool = True
    coalesce: bool = True
    mixed_prefill: bool = False

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.prefill_budget < 1 or self.kv_capacity_tokens < 1 or self.catch_up_limit < 1:
            raise ValueError(f"invalid engine config {self!r}")
        if not 0 < self.switch_prefill_fraction <= 1:
            raise ValueError("switch_prefill_fraction must be in (0, 1]")
        if self.acceptance_mode not in ACCEPTANCE_MODES:
            raise ValueError(f"acceptance_mode must be one of {ACCEPTANCE_MODES}")
        if self.switch not in SWITCH_MODES:
            raise ValueError(f"switch must be one of {SWITCH_MODES}")

    @property
    def switch_budget(self) -> int:
        return max(1, int(self.prefill_budget * self.switch_prefill_fraction))


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

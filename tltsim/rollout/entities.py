"""What a rollout worker holds: its engine limits and the live requests, as aligned arrays.

Requests are kept column-wise (one numpy array per attribute, one entry per running request) because
every decode iteration touches all of them; a request object per response would make the simulator's
hot path Python-bound.
"""

from __future__ import annotations

from collections.abc import Callable
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


class FinishCounts:
    """A progress callback (``progress(n)``: ``n`` more responses finished) that also takes a burst of
    counts in one call: ``many(counts)`` has the effect of ``progress(n)`` for each ``n`` in order. A
    plain phase retires a whole worker's responses at once, one count per span (~2.8M calls in a
    100-step, 3-seed run); a subclass that folds a burst without a call per count (the CLI's progress
    lines) saves that much Python. Any other callable is called once per count."""

    def __call__(self, n: int) -> None:
        raise NotImplementedError

    def many(self, counts: list[int]) -> None:
        for n in counts:
            self(n)


def finish_many(progress: Callable[[int], None]) -> Callable[[list[int]], None]:
    """``progress`` called once per count of a burst, in order (:class:`FinishCounts`)."""
    if isinstance(progress, FinishCounts):
        return progress.many

    def each(counts: list[int]) -> None:
        for n in counts:
            progress(n)

    return each


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
    plain stepping; ``fast`` (on by default) selects the engine's fast paths (whole plain phases in
    closed form, SD blocks and tails in vectorised passes, pricers mirroring the roofline, no SimPy
    clock: :mod:`tltsim.rollout.fast`), which give bit-identical event logs and results: off, the
    reference per-row path runs.
    """

    kv_capacity_tokens: int = 10**12
    acceptance_mode: str = "expected"
    closed_form: bool = True
    coalesce: bool = True
    fast: bool = True
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

    The columns are rows of one 2-D block per dtype (int64; float64 in expected mode), so admitting
    or dropping requests is one concatenation or gather per block instead of one per column; the
    attributes are views into the blocks, updated in place.
    """

    _INT_ONLY = ("prompt", "target", "gen", "rem", "ctx", "lag")  # integer progress: one block
    _INTS, _FLOATS = ("prompt", "target", "ctx"), ("gen", "rem", "lag")  # expected mode: two blocks

    def __init__(self, expected: bool) -> None:
        self.expected = expected
        self.dtype = np.float64 if expected else np.int64
        if expected:
            self._ints = np.zeros((3, 0), dtype=np.int64)
            self._floats = np.zeros((3, 0), dtype=np.float64)
        else:
            self._ints = np.zeros((6, 0), dtype=np.int64)
            self._floats = None
        self._bind()

    def _bind(self) -> None:
        if self._floats is None:
            self.prompt, self.target, self.gen, self.rem, self.ctx, self.lag = self._ints
        else:
            self.prompt, self.target, self.ctx = self._ints
            self.gen, self.rem, self.lag = self._floats

    def __len__(self) -> int:
        return self._ints.shape[1]

    def add(self, prompt: np.ndarray, target: np.ndarray) -> None:
        """Admit requests whose prefill has just emitted their first token."""
        n = len(prompt)
        if self._floats is None:
            new = np.empty((6, n), dtype=np.int64)
            new[0], new[1], new[2], new[3], new[4], new[5] = prompt, target, 1, target - 1, prompt + 1, prompt + 1
            self._ints = np.concatenate([self._ints, new], axis=1)
        else:
            ints = np.empty((3, n), dtype=np.int64)
            ints[0], ints[1], ints[2] = prompt, target, prompt + 1
            flts = np.empty((3, n), dtype=np.float64)
            flts[0], flts[1], flts[2] = 1.0, target.astype(np.float64) - 1, (prompt + 1).astype(np.float64)
            self._ints = np.concatenate([self._ints, ints], axis=1)
            self._floats = np.concatenate([self._floats, flts], axis=1)
        self._bind()

    def advance(self, step: np.ndarray, eps: float) -> None:
        """Emit ``step`` tokens per request (never more than ``rem``)."""
        self.rem -= step
        if self.expected:
            self.gen += step
            np.add(self.prompt, np.floor(self.gen + eps).astype(np.int64), out=self.ctx)
        else:  # integer progress: ctx carries it (saves an op per iteration)
            self.ctx += step

    def after_plain(self, keep: np.ndarray, iters: int, prompt: np.ndarray, target: np.ndarray,
                    decoded: np.ndarray) -> None:
        """The live set after a plain phase of ``iters`` iterations
        (:mod:`tltsim.rollout.fast.plain_phase`): the requests at indices ``keep``, each having emitted
        ``iters`` more tokens, then new ones (``prompt``, ``target``) admitted during the phase and
        ``decoded`` iterations into it -- the columns :meth:`add` and ``iters`` one-token
        :meth:`advance` steps (and the drafter's lag growing with them) leave. Whole numbers
        throughout, so in expected mode the float columns are the step-by-step float sums exactly."""
        n = len(prompt)
        ints = self._ints.take(keep, axis=1)
        ctx_new = prompt + 1 + decoded
        if self._floats is None:
            ints[3] -= iters
            ints[4] += iters
            ints[5] += iters
            new = np.empty((6, n), dtype=np.int64)
            new[0], new[1], new[2], new[3], new[4], new[5] = prompt, target, 1, target - 1 - decoded, ctx_new, ctx_new
            self._ints = np.concatenate([ints, new], axis=1)
        else:
            flts = self._floats.take(keep, axis=1)
            ints[2] += iters
            flts[0] += iters
            flts[1] -= iters
            flts[2] += iters
            new_i = np.empty((3, n), dtype=np.int64)
            new_i[0], new_i[1], new_i[2] = prompt, target, ctx_new
            new_f = np.empty((3, n), dtype=np.float64)
            new_f[0], new_f[1], new_f[2] = 1 + decoded, target - 1 - decoded, ctx_new
            self._ints = np.concatenate([ints, new_i], axis=1)
            self._floats = np.concatenate([flts, new_f], axis=1)
        self._bind()

    def after_sd(self, keep: np.ndarray, rem: np.ndarray, gen: np.ndarray, eps: float) -> None:
        """Expected mode, after SD spans: the requests at indices ``keep``, with their remaining and
        emitted tokens taken from ``rem``/``gen`` (all requests' values, in live order), their contexts
        as :meth:`advance` derives them, and their drafters up to date (lag 0)."""
        ints = self._ints.take(keep, axis=1)
        flts = np.empty((3, len(keep)))
        flts[0], flts[1], flts[2] = gen[keep], rem[keep], 0.0
        np.add(ints[0], np.floor(flts[0] + eps).astype(np.int64), out=ints[2])
        self._ints, self._floats = ints, flts
        self._bind()

    def drop(self, keep: np.ndarray) -> None:
        idx = keep.nonzero()[0]
        self._ints = self._ints.take(idx, axis=1)
        if self._floats is not None:
            self._floats = self._floats.take(idx, axis=1)
        self._bind()

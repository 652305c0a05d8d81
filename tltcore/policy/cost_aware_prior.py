"""Cost-aware's acceptance estimate: the prior's per-position reach and the scales it learns online.

Per draft position ``i`` (1..D, D the deepest candidate) a scale ``s_i`` on the prior's reach: the
expected accepted draft tokens of shape ``c`` are ``sum_i R_c[i] * s_i`` where ``R_c[i]`` is the prior
probability that at least ``i`` tokens are accepted (the acceptance model's ``reach`` when it has one,
as the simulator's presets do; else its expected accept length spread evenly over the positions;
without an acceptance model a constant per-position rate ``prior``). Every SD outcome is one linear
observation ``accepted per request-iteration = R_c . s`` weighted by its request-iterations, so ``s`` is
a ridge regression towards ``s = 1`` (the prior counts as ``prior_weight`` request-iterations that saw
each position's prior reach, the largest over the candidates), solved from sufficient statistics: one
estimate shared by all batch sizes and shapes. :meth:`AcceptanceEstimate.decay` multiplies the
statistics by ``memory`` so a retrained or staler drafter is relearnt.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Protocol, cast, runtime_checkable

import numpy as np

from tltcore.drafter.state import INITIAL_DRAFTER, DrafterState
from tltcore.policy.base import SDConfig
from tltcore.policy.oracle import OracleAcceptance


@runtime_checkable
class ReachAcceptance(OracleAcceptance, Protocol):
    """An acceptance model that also gives, per draft position ``i``, the probability that at least
    ``i`` draft tokens are accepted (the simulator's positional presets, frozen dataclasses): the prior
    the learnt per-position scales multiply. Its reach is a function of its value, so the prior's accept
    lengths are shared by every policy built on an equal model (:func:`prior_accept_lengths`). Other
    models give only the expected accept length."""

    def reach(self, config: SDConfig, drafter: DrafterState) -> np.ndarray: ...


class AcceptanceEstimate:
    """The learnt acceptance of ``candidates`` (module docstring)."""

    def __init__(self, accept_model: OracleAcceptance | None, candidates: tuple[SDConfig, ...], prior: float,
                 prior_weight: float) -> None:
        self.accept_model, self.candidates = accept_model, candidates
        self.prior, self.prior_weight = prior, prior_weight
        self.depth = max(c.depth for c in candidates)
        # a protocol check is ~20 us (typing walks the protocol's attributes): made once, not per shape
        self._positional = isinstance(accept_model, ReachAcceptance)
        self._reach: dict[SDConfig, np.ndarray] = {}
        self._outer: dict[SDConfig, np.ndarray] = {}  # np.outer of each shape's prior reach with itself
        self._info: np.ndarray | None = None  # _prior_info, once computed
        self._ridge: tuple[np.ndarray, np.ndarray] | None = None  # (diag(prior), prior) of scales(), once computed
        self._stacked: tuple[np.ndarray, np.ndarray, bool] | None = None  # _stacked_reach, once built
        self._gram = np.zeros((self.depth, self.depth))
        self._moment = np.zeros(self.depth)
        self._scales: np.ndarray | None = None
        self._accepts: Sequence[float] | None = None  # accept_length per candidate, for these scales
        self._observed = False  # an SD outcome entered the statistics (the scales are no longer the prior's)
        self._shared = accept_model is None or self._positional  # the prior's accept lengths are shareable

    def prior_reach(self, config: SDConfig) -> np.ndarray:
        """P(at least i draft tokens accepted), i = 1..D (zero past the shape's depth), by the prior."""
        hit = self._reach.get(config)
        if hit is None:
            hit = np.zeros(self.depth)
            d = min(config.depth, self.depth)
            model = self.accept_model
            if self._positional:
                reach = cast(ReachAcceptance, model).reach(config, INITIAL_DRAFTER)
                hit[:d] = np.asarray(reach, dtype=float)[:d]
            elif model is not None:
                extra = float(model.expected_accept_length(config, INITIAL_DRAFTER)) - 1.0
                hit[:d] = min(max(extra, 0.0), float(d)) / d if d else 0.0
            else:
                hit[:d] = self.prior ** np.arange(1, d + 1)
            self._reach[config] = hit
        return hit

    def _prior_info(self) -> np.ndarray:
        """Per position, the squared largest prior reach over the candidates: what one request-iteration
        observing that position tells about its scale (floored so every position stays determined).
        Fixed by the candidates and the prior, so computed once (it was a twentieth of a simulation)."""
        if self._info is None:
            top = np.max([self.prior_reach(c) for c in self.candidates], axis=0)
            self._info = np.maximum(top, 1e-3) ** 2
        return self._info

    def _ridge_terms(self) -> tuple[np.ndarray, np.ndarray]:
        """(diag(prior), prior) of :meth:`scales`: fixed by the candidates and the prior, built once."""
        if self._ridge is None:
            prior = self.prior_weight * self._prior_info()
            self._ridge = (np.diag(prior), prior)
        return self._ridge

    def scales(self) -> np.ndarray:
        """The learned per-position scales ``s`` (ridge towards 1, see module docstring)."""
        if self._scales is None:
            diag, prior = self._ridge_terms()
            self._scales = np.linalg.solve(self._gram + diag, self._moment + prior)
        return self._scales

    def observations_ahead(self, config: SDConfig, request_iterations: np.ndarray,
                           accepted: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What :meth:`observe` of ``config``'s ``request_iterations`` and ``accepted`` tokens, one by one in
        order, would make of the estimate, the state left untouched: (every candidate's
        :meth:`accept_length` now and after each of the first ``j`` observations, ``j = 1..len``, one row
        each in candidate order; the statistics after each ``j``, grams and moments, row ``j - 1``). The
        statistics are the running sums :meth:`observe` adds one by one (``numpy.cumsum`` adds them in that
        order), the ridge solved per row by one stacked ``numpy.linalg.solve`` (the same LAPACK call per
        matrix) and each row's products as :meth:`_stacked_reach` forms them, so every float is the one the
        rounds compute (``tests/policy/test_cost_aware_held.py`` pins it). Only for candidates that all
        speculate and observations of at least one request-iteration each."""
        x = self.prior_reach(config)
        outer = self._outer.get(config)
        if outer is None:
            outer = self._outer[config] = np.outer(x, x)
        rows = len(request_iterations) + 1
        grams = np.empty((rows, self.depth, self.depth))
        grams[0] = self._gram
        grams[1:] = request_iterations[:, None, None] * outer
        np.cumsum(grams, axis=0, out=grams)
        moments = np.empty((rows, self.depth))
        moments[0] = self._moment
        moments[1:] = accepted[:, None] * x
        np.cumsum(moments, axis=0, out=moments)
        diag, prior = self._ridge_terms()
        scales = np.linalg.solve(grams + diag, (moments + prior)[:, :, None])  # (rows, D, 1): each row's column
        reach, depths, every = self._stacked_reach()
        if not every:
            raise ValueError("observations_ahead needs candidates that all speculate")
        extra = np.matmul(reach[None], scales[:, None]).reshape(rows, len(depths))
        return np.minimum(np.maximum(extra, 0.0), depths) + 1.0, grams[1:], moments[1:]

    def set_observed(self, gram: np.ndarray, moment: np.ndarray) -> None:
        """The statistics after observations made elsewhere (:meth:`observations_ahead`'s)."""
        self._gram[:] = gram
        self._moment[:] = moment
        self._scales = self._accepts = None
        self._observed = True

    def accept_length(self, config: SDConfig) -> float:
        """Predicted tokens emitted per request per iteration with ``config`` (bonus included)."""
        if not config.enabled:
            return 1.0
        extra = float(self.prior_reach(config) @ self.scales())
        return 1.0 + min(max(extra, 0.0), float(config.depth))

    def accept_lengths(self) -> Sequence[float]:
        """:meth:`accept_length` of every candidate, kept until the scales change: every evaluation
        needs all of them and most see no new SD outcome (while off, none at all). Python floats: a
        dozen of them are faster to combine in plain Python than through numpy's per-call overhead.
        Before any SD outcome they are the prior's, shared by the process (:func:`prior_accept_lengths`)."""
        if self._accepts is None:
            if self._observed or not self._shared:
                # accept_length of every candidate in one call (after every SD outcome, and cost-aware
                # observes one per span, a dozen method calls and dot products cost ~100 us per evaluation)
                reach, depths, every = self._stacked_reach()
                # 1 + min(max(extra, 0), depth) per speculating candidate, element-wise (the same IEEE
                # operations as accept_length's, NaN kept as the builtins keep it)
                live = (np.minimum(np.maximum(np.matmul(reach, self.scales()[:, None]).ravel(), 0.0), depths)
                        + 1.0).tolist() if len(reach) else []
                if every:
                    self._accepts = tuple(live)
                else:
                    it = iter(live)
                    self._accepts = tuple(1.0 if not c.enabled else next(it) for c in self.candidates)
            else:
                self._accepts = prior_accept_lengths(self.accept_model, self.candidates, self.prior,
                                                     self.prior_weight)
        return self._accepts

    def _stacked_reach(self) -> tuple[np.ndarray, np.ndarray, bool]:
        """(the speculating candidates' prior reaches as a stack of ``(1, D)`` rows, their depths as floats,
        whether every candidate speculates). ``numpy.matmul`` of the stack with the scales as a
        ``(D, 1)`` column computes each candidate's ``reach @ scales`` by the very dot-product loop a
        single ``reach @ scales`` runs (a ``(1, D) @ (D, 1)`` product per stack entry), so every float is
        :meth:`accept_length`'s (``tests/policy/test_cost_aware.py`` pins it); a plain ``(m, D) @ (D,)``
        product would take BLAS's matrix-vector kernel, whose sums may round differently."""
        if self._stacked is None:
            live = [self.prior_reach(c) for c in self.candidates if c.enabled]
            stack = np.array(live)[:, None, :] if live else np.zeros((0, 1, self.depth))
            depths = np.array([float(c.depth) for c in self.candidates if c.enabled])
            self._stacked = (stack, depths, len(live) == len(self.candidates))
        return self._stacked

    def observe(self, config: SDConfig, request_iterations: int, accepted: float) -> None:
        """One SD outcome: ``accepted`` draft tokens over ``request_iterations`` at shape ``config``."""
        x = self.prior_reach(config)
        outer = self._outer.get(config)
        if outer is None:  # np.outer of a shape's reach with itself, the same array at every outcome
            outer = self._outer[config] = np.outer(x, x)
        self._gram += request_iterations * outer
        self._moment += accepted * x
        self._scales = self._accepts = None
        self._observed = True

    def decay(self, memory: float) -> None:
        """A new rollout step: the statistics keep the share ``memory``."""
        self._gram *= memory
        self._moment *= memory
        self._scales = self._accepts = None


@lru_cache(maxsize=256)
def prior_accept_lengths(accept_model: OracleAcceptance | None, candidates: tuple[SDConfig, ...], prior: float,
                         prior_weight: float) -> tuple[float, ...]:
    """The candidates' accept lengths at the prior (before any SD outcome): the same for every policy
    built on an equal acceptance model, so a process computes them once. A fresh policy's first decision
    spent ~40% of its time re-deriving them (12 reaches, a ridge solve, 12 dot products), once per
    rollout step where the validation builds a policy per run. Only models whose reach is a function of
    their value (:class:`ReachAcceptance`, or none) are asked for."""
    fresh = AcceptanceEstimate(accept_model, candidates, prior, prior_weight)
    return tuple(fresh.accept_length(c) for c in candidates)

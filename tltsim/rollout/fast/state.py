"""What a worker on the fast paths keeps between units of work, beside the worker's own state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tltcore.policy.base import (
    DecidesAhead,
    DecidesByBatch,
    Decision,
    HoldsAhead,
    SDConfig,
    decides_ahead,
    decides_by_batch,
    holds_ahead,
    plain_phase_bound,
)
from tltsim.rollout.fast.event_blocks import SimEventLog
from tltsim.rollout.fast.uniforms import UniformStream
from tltsim.rollout.worker import RolloutWorker


@dataclass
class FastWorker:
    """A worker on the fast paths. ``stream``: its acceptance draws, rewindable (also the worker's
    ``uniforms``); ``log``: the run's event log, which takes column blocks; ``sums``: numpy's sums of
    ``b`` equal accept lengths, by value then ``b`` (shared by the run's workers); ``accepted``: the
    accepted tokens of a span of ``n`` expected-mode iterations at ``b`` requests (``b`` copies of ``n``
    accepted-token increments added one by one, summed as numpy sums them), by accept length then
    ``(b, n)`` (shared too); ``plain_bound``:
    the policy's plain-phase hint (:mod:`tltsim.rollout.fast`), None without one or once a phase
    declined; ``pending``: a decision an SD tail asked the policy for and did not run (the next unit
    runs it); ``in_tail``: its stochastic SD tail runs with the other workers' tails; ``in_block``: its
    next block of the block hint runs with the other workers' blocks; ``ahead``: the
    policy's block hint (:mod:`tltsim.rollout.fast.ahead`), None without one or without an acceptance
    sampler; ``shapes``: the shapes the hint prices at every row of a block, where it prices them with
    the worker's own cost model (the engine then prices them for it), else None; ``held``: the policy's
    held-spans hint (:mod:`tltsim.rollout.fast.held_spans`), where it prices with the worker's own cost
    model, else None; ``by_batch``: the policy's batch-size-only hint (its expected-mode tails then build
    no views or Outcomes), else None."""

    worker: RolloutWorker
    log: SimEventLog
    sums: dict[float, dict[int, float]]
    accepted: dict[float, dict[tuple[int, int], float]]
    stream: UniformStream = field(init=False)
    plain_bound: Callable[[], int | None] | None = field(init=False)
    ahead: DecidesAhead | None = field(init=False)
    pending: Decision | None = None
    in_tail: bool = False
    in_block: bool = False
    shapes: tuple[SDConfig, ...] | None = field(init=False)
    held: HoldsAhead | None = field(init=False)
    by_batch: DecidesByBatch | None = field(init=False)

    def __post_init__(self) -> None:
        self.stream = UniformStream(self.worker.rng)
        self.plain_bound = plain_phase_bound(self.worker.policy) if self.worker.eng.closed_form else None
        w = self.worker
        self.ahead = decides_ahead(w.policy) if w.sampler is not None else None
        priced = self.ahead.ahead_shapes() if self.ahead is not None else None
        self.shapes = priced[1] if priced is not None and priced[0] is w.cost else None
        held = holds_ahead(w.policy)
        self.held = held if held is not None and held.held_cost() is w.cost else None
        self.by_batch = decides_by_batch(w.policy)

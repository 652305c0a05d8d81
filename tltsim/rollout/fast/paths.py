"""The door: a worker's next unit of work run an accelerated way, and a step's workers run without SimPy.

:class:`FastPaths` is a worker's :class:`~tltsim.rollout.worker.Accelerator`. Per unit it does what
:meth:`RolloutWorker.run <tltsim.rollout.worker.RolloutWorker.run>` of the policy's decision does,
choosing the accelerated path by what the decision allows:

* a policy's plain-phase hint holds at this batch size: the whole plain phase in closed form
  (:mod:`tltsim.rollout.fast.plain_phase`), the policy not asked;
* a plain decision: the worker's own plain span (the reference's);
* an SD decision held one iteration: :func:`~tltsim.rollout.fast.spans.speculate_one`, or, where the
  policy offers the block hint, a block of such spans (:func:`~tltsim.rollout.fast.ahead.run_block`,
  with the other workers' blocks a block per round where the cost model has a row pricer; expected
  mode: :func:`~tltsim.rollout.fast.ahead.run_expected_block`);
* held until the next event with nothing waiting (no admission can end a span): the spans of the
  decision back to back, asking the policy between them as the worker's loop would
  (:mod:`tltsim.rollout.fast.expected_tail`; stochastic: :mod:`tltsim.rollout.fast.tails`, with the
  other workers' tails a block per round where the cost model has a row pricer);
* any other hold, nothing waiting: the spans of the decision and of the policy's later answers with
  the same shape in chunks (:mod:`tltsim.rollout.fast.held_spans`: expected mode many per numpy pass,
  stochastic finish to finish with the draws taken at once);
* any other hold: one span in blocks of iterations (:mod:`tltsim.rollout.fast.spans`).

:func:`run_step` replaces the SimPy clock, which only ordered the workers: each runs its own loop
to the end, except that stochastic SD tails of several workers run together, and so do their
blocks of the block hint (:class:`~tltsim.rollout.fast.ahead.AheadBlocks`).
"""

from __future__ import annotations

from collections import deque

from tltcore.acceptance import AcceptSampler
from tltcore.cost import CostModel
from tltcore.cost.protocol import CostModelBase
from tltcore.drafter.state import DrafterState
from tltcore.policy.base import HOLD_UNTIL_EVENT
from tltsim.rollout.fast import ahead, expected_tail, held_spans, plain_phase, spans, tails
from tltsim.rollout.fast.event_blocks import SimEventLog
from tltsim.rollout.fast.state import FastWorker
from tltsim.rollout.worker import _EPS, Pricers, RolloutWorker, _min


def pricers_of(cost: CostModel) -> Pricers:
    """The batched forms ``cost`` declares (:meth:`~tltcore.cost.protocol.CostModel.paged_kv_times`),
    or no pricers where it declares none (then every price is one cost call); the plain-decode ones
    only where plain decoding is memory-bound (what their closed form assumes)."""
    paged = cost.paged_kv_times() if isinstance(cost, CostModelBase) else None
    if paged is None:
        return Pricers()
    plain = paged.memory_bound_decode
    return Pricers(sd=paged.sd_rows_times, prefill=paged.prefill_passes_time,
                   plain=paged.decode_span_time_of if plain else None,
                   phase=paged.decode_spans_time if plain else None,
                   rows=paged.sd_times_from_sums, block=int(paged.kv_block_size))


class FastRun:
    """What a run's workers share on the fast paths: the vectorised pricers, built once per run,
    the event log (which takes column blocks) and numpy's sums of
    ``b`` equal accept lengths and of ``b`` equal accepted-token counts that expected-mode tails reuse."""

    def __init__(self, cost: CostModel, log: SimEventLog) -> None:
        self.pricers = pricers_of(cost)
        self.log = log
        self.sums: dict[float, dict[int, float]] = {}
        self.accepted: dict[float, dict[tuple[int, int], float]] = {}


class FastPaths:
    """One worker's door to the accelerated paths (module docstring); ``state`` is what they keep."""

    def __init__(self, state: FastWorker) -> None:
        self.state = state
        self.tails: tails.StochasticTails | None = None  # the step's tails run together, if any
        self.blocks: ahead.AheadBlocks | None = None  # the step's blocks of the block hint, together, if any

    def step(self, worker: RolloutWorker) -> None:
        """The worker's next unit of work after admission (module docstring)."""
        fast = self.state
        if fast.plain_bound is not None:
            bound = fast.plain_bound()
            if bound is not None and len(worker.live) > bound and plain_phase.run_phase(fast, bound):
                return
        decision = fast.pending
        if decision is None:
            decision = worker.decide()
        else:
            fast.pending = None
        config = decision.config
        if not config.enabled:
            worker.run(decision)
            return
        hold = worker.hold(decision)
        worker.prepare_sd(decision)
        if hold == 1:
            if fast.ahead is not None and not decision.switch_on:
                if self.blocks is not None:
                    self.blocks.enter(fast, decision, fast.ahead)
                    return  # the round retires
                if worker.expected:
                    ahead.run_expected_block(fast, decision, fast.ahead)
                else:
                    ahead.run_block(fast, decision, fast.ahead)
            else:
                spans.speculate_one(worker, config)
        elif hold == HOLD_UNTIL_EVENT and worker.next_waiting >= len(worker.q_resp) and worker.sampler is not None:
            if worker.expected:
                expected_tail.run_tail(fast, decision)
            elif self.tails is not None:
                self.tails.enter(fast, decision)
            else:
                tails.run_tail(fast, decision)
            return  # tails retire as they go
        elif worker.expected and worker.next_waiting >= len(worker.q_resp) and worker.sampler is not None:
            held_spans.run_held(fast, decision, hold)
            return  # the spans retire as they go
        elif worker.next_waiting >= len(worker.q_resp) and worker.sampler is not None:
            held_spans.run_held_draws(fast, decision, hold)
            return  # the spans retire as they go
        elif worker.expected:
            spans.speculate_expected_blocks(fast, config, hold)
        else:
            spans.speculate_blocks(fast, config, hold)
        if _min(worker.live.rem) <= _EPS:
            worker.retire()


def accelerate(worker: RolloutWorker, run: FastRun) -> FastPaths:
    """Put ``worker`` on the fast paths: its door, the run's pricers, its draws from a rewindable stream."""
    fast = FastWorker(worker, run.log, run.sums, run.accepted)
    door = FastPaths(fast)
    worker.fast, worker.pricers, worker.uniforms = door, run.pricers, fast.stream
    return door


def run_step(workers: list[FastPaths], run: FastRun, sampler: AcceptSampler | None, drafter: DrafterState,
             stochastic: bool) -> None:
    """One step's workers, each to its end without a SimPy clock (workers never interact within a step
    and the event log is sorted by worker and time) -- except that stochastic SD tails of several
    workers run together, a block per worker per round (:mod:`tltsim.rollout.fast.tails`), and so
    do the blocks of policies that offer the block hint (:class:`~tltsim.rollout.fast.ahead.AheadBlocks`),
    where the cost model has a row pricer."""
    together = blocks = None
    if run.pricers.rows is not None and sampler is not None and len(workers) > 1:
        if stochastic:
            together = tails.StochasticTails(run.pricers.rows, run.pricers.block, sampler, drafter)
        if any(door.state.ahead is not None for door in workers):
            blocks = ahead.AheadBlocks(run.pricers.rows, run.pricers.block, sampler, drafter)
        for door in workers:
            door.tails, door.blocks = together, blocks
    queue = deque(door.state for door in workers)
    while queue or (together is not None and together.members) or (blocks is not None and blocks.members):
        while queue:
            fast = queue.popleft()
            while fast.worker.advance():
                if fast.in_tail or fast.in_block:
                    break
        if together is not None and together.members:
            queue.extend(together.round())
        if blocks is not None and blocks.members:
            queue.extend(blocks.round())

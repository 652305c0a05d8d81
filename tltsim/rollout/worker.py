"""One rollout worker's continuous-batching engine, stepped by the simulation: the reference model.

Each unit of work (:meth:`RolloutWorker.advance`) is one of:

* **admission + prefill** of waiting requests (see :mod:`tltsim.rollout.scheduling`); prefill emits
  each request's first token, as real engines do, so decode produces the remaining ones;
* **a decision**: the worker's own policy sees a :class:`BatchView` and returns a :class:`Decision`;
* **the switch**, when the decision has ``switch_on``: a ``switch`` marker, then either a
  ``switch_reprefill`` of every live request through target and drafter (TLT), a drafter
  ``catch_up`` (the native engine), or nothing (``in_step``: vLLM's drafter runs every iteration),
  as :data:`~tltcore.engine_limits.SWITCH_MODES` says;
* **drafter catch-up** of requests whose drafter missed more than ``catch_up_limit`` tokens (e.g.
  admitted while SD was on, or after plain iterations under a policy that toggles SD);
* **a decode span**: up to ``decision.hold`` iterations with the decided config, ending early at the
  first finishing request. A plain span is priced by the cost model's closed form
  (:meth:`~tltcore.cost.CostModel.decode_span_time`); an SD span (:meth:`RolloutWorker.speculate`)
  loops over iterations, each emitting every request's accept length (bonus included), never
  beyond what it has left: the expected value (fractional progress) in ``expected`` mode, a draw
  through :class:`~tltcore.acceptance.AcceptSampler` in ``stochastic`` mode. The policy is told one
  :class:`Outcome` per span.

That is the model, and this module is all of it. Workers never interact within a step, so each keeps
a local clock and the SimPy process yields once per closed event row. With ``engine.fast`` (the
default) the worker hands each unit after admission to its :class:`Accelerator` instead -- the one
door to :mod:`tltsim.rollout.fast`, whose paths give the same numbers bit for bit -- and prices long
prefills and plain spans with the run's vectorised :class:`Pricers`. The primitives below
(admission, prefill, switch, catch-up, plain span, draws, the close of an SD span, retirement) serve
both.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from tltcore.acceptance import AcceptanceModel, AcceptSampler
from tltcore.cost import CostModel
from tltcore.drafter.state import DrafterState
from tltcore.errors import InputError
from tltcore.events import EventLog
from tltcore.policy.base import NO_SD, BatchView, Decision, Outcome, SDConfig, SDPolicy, wants_remaining_hint
from tltcore.policy.recent_accept import RecentAccept
from tltsim.rollout.entities import EngineConfig, LiveRequests, finish_many
from tltsim.rollout.scheduling import admissible, prefill_passes

_EPS = 1e-9
_VECTOR_PASSES = 4  # prefills of more passes than this are priced in one vectorised call
_sum, _min = np.add.reduce, np.minimum.reduce  # skip ndarray.sum's Python wrapper on the hot path


class Uniforms(Protocol):
    """Where acceptance draws take their uniform numbers: the worker's RNG (the reference) or a
    rewindable stream of it (:class:`tltsim.rollout.fast.uniforms.UniformStream`)."""

    def random(self, n: int) -> np.ndarray: ...


class Accelerator(Protocol):
    """The door to :mod:`tltsim.rollout.fast`: the worker's next unit of work after admission, run
    an accelerated way (bit for bit what :meth:`RolloutWorker.run` of the policy's decision does)."""

    def step(self, worker: RolloutWorker) -> None: ...


@dataclass(frozen=True)
class Pricers:
    """A run's vectorised prices: the cost model's batched forms
    (:class:`~tltcore.cost.protocol.PagedKVTimes`), each equal bit for bit to the call-by-call prices
    it replaces; None where the cost model has none, and all None on the reference path. ``prefill``
    and ``plain`` serve the shared primitives; ``sd``, ``rows`` and ``phase`` the fast paths (SD
    blocks, SD rows of many spans, whole plain phases); ``block`` is the paged-KV block size they
    price by (1 without them)."""

    sd: Callable[..., Any] | None = None
    prefill: Callable[..., tuple[float, int]] | None = None
    plain: Callable[[np.ndarray, int], float] | None = None
    phase: Callable[..., np.ndarray] | None = None
    rows: Callable[..., np.ndarray] | None = None
    block: int = 1


REFERENCE_PRICES = Pricers()


class RolloutWorker:
    """One worker's requests for one step, with a local clock starting at ``t0``."""

    def __init__(self, idx: int, prompts: np.ndarray, responses: np.ndarray, *, policy: SDPolicy,
                 cost: CostModel, accept: AcceptanceModel | None, sampler: AcceptSampler | None,
                 engine: EngineConfig, rng: np.random.Generator, log: EventLog, drafter: DrafterState,
                 recent: RecentAccept, step: int, t0: float, on_finish: Callable[[int], None] | None = None,
                 ids: np.ndarray | None = None, deadline: float | None = None, hint: bool | None = None) -> None:
        self.idx, self.step_no = idx, step
        self.q_prompt = prompts.astype(np.int64)
        self.q_resp = np.maximum(responses.astype(np.int64), 1)
        self.q_reserve = self.q_prompt + self.q_resp  # KV each waiting request reserves (scheduling docstring)
        self.next_waiting = 0
        self.policy, self.cost, self.accept, self.sampler = policy, cost, accept, sampler
        self.eng, self.rng, self.log, self.drafter, self.recent = engine, rng, log, drafter, recent
        self.on_finish = on_finish
        # a burst of retirements, one count per span (a plain phase's): on_finish per count, in order
        self.on_finish_many = finish_many(on_finish) if on_finish is not None else None
        # the reference's pricing, draws and loop; tltsim.rollout.fast.accelerate replaces all three
        self.pricers = REFERENCE_PRICES
        self.uniforms: Uniforms = rng  # the acceptance draws' uniform numbers
        self.fast: Accelerator | None = None
        # the trace's remaining lengths, only for a policy that asks (BatchView.remaining_hint: clairvoyant);
        # ``hint``: the answer already known (a run asks each policy once, not every worker and step)
        self.hint = wants_remaining_hint(policy) if hint is None else hint
        self.expected = engine.acceptance_mode == "expected"
        self.live = LiveRequests(self.expected)
        self.t = t0
        self.iteration = 0
        self.need_admit = True
        self.finish_time = t0
        self.row_closed = False  # an event row closed since the SimPy process last yielded
        self.lag_dirty = True  # some live drafter may lag (False: every lag is 0, no catch-up scan needed)
        self._mixed_base: float | None = None
        self._accept_len: dict[SDConfig, float] = {}
        self.done_t: list[float] = []  # when responses finished, and how many each time (DataCoverage's input)
        self.done_n: list[int] = []
        self.done_tokens: list[np.ndarray] = []
        # which request finished when (``ids``: each queued request's index in the step's workload), for
        # strategies that keep the first groups to finish; kept by admit/retire, i.e. on the reference
        # path only (RolloutRun(track_requests=True) runs it), None when not asked
        self.ids = ids
        self.live_ids = np.zeros(0, dtype=np.int64)
        self.done_ids: list[np.ndarray] = []
        # the rollout stops at ``deadline`` (a strategy's stop condition, RolloutRun.step(stop=)): work
        # that would end after it is not done (the iteration in flight is lost), and ``cut`` says the
        # worker stopped with requests left; None (the default): run to the end, as ever
        self.deadline = deadline
        self.cut = False

    # ---- the reference loop ------------------------------------------------------------------------
    def advance(self) -> bool:
        """One unit of work (admission, the switch, a decode span). False when the worker is done."""
        while self.need_admit:  # prefill priority; again if some responses ended at prefill
            self.admit()
        if self.deadline is not None and (self.cut or (len(self.live) and self.t >= self.deadline)):
            self.stop()
            return False
        if len(self.live) == 0:
            self.log.flush(self.idx)
            self.finish_time = self.t
            return False
        if self.fast is not None:
            self.fast.step(self)
        else:
            self.run(self.decide())
        return True

    def stop(self) -> None:
        """Stop at the deadline with requests left: the GPUs were busy until it (the unit in flight is
        lost), so the worker finishes there."""
        self.cut = True
        self.log.flush(self.idx)
        self.finish_time = float(self.deadline)

    def unfinished(self) -> tuple[np.ndarray, np.ndarray]:
        """(index in the step's workload, whole tokens emitted) of every request not finished: the live
        ones and those still waiting (none emitted); needs ``ids``."""
        if self.ids is None:
            raise ValueError("unfinished requests need request ids (RolloutRun(track_requests=True))")
        waiting = self.ids[self.next_waiting:]
        return (np.concatenate([self.live_ids, waiting]),
                np.concatenate([self.live.ctx - self.live.prompt, np.zeros(len(waiting), dtype=np.int64)]))

    def decide(self) -> Decision:
        """The policy's decision for the live batch as it stands."""
        live = self.live
        view = BatchView(len(live), tuple(live.ctx.tolist()), self.t, self.iteration, self.recent.value, self.idx,
                         self.step_no, self.drafter, tuple(live.rem.tolist()) if self.hint else ())
        return self.policy.decide(view)

    def hold(self, decision: Decision) -> int:
        """Iterations the decision may run for (one at a time unless spans are allowed)."""
        return decision.hold if self.eng.closed_form else 1

    def run(self, decision: Decision) -> None:
        """A decode span of ``decision``, SD brought up to date first; then the finished retire."""
        if decision.config.enabled:
            self.prepare_sd(decision)
            self.speculate(decision.config, self.hold(decision))
        else:
            self.plain(self.hold(decision))
        if _min(self.live.rem) <= _EPS:
            self.retire()

    def prepare_sd(self, decision: Decision) -> None:
        """Before an SD span: the switch when the decision turns SD on, then catch-up of lagging drafters."""
        live = self.live
        if self.eng.switch == "in_step":
            live.lag[:] = 0  # the drafter ran alongside every earlier iteration
        if decision.switch_on:
            self.switch(decision.config)
        if self.lag_dirty:  # else every lag is 0
            self.catch_up(live.lag > self.eng.catch_up_limit)

    def speculate(self, config: SDConfig, hold: int) -> None:
        """Up to ``hold`` SD iterations, stopping after the first one in which a request finishes."""
        live = self.live
        b, t0 = len(live), self.t
        emitted_total = 0.0
        accepted = np.zeros(b)
        n = 0
        while True:
            dt = self.cost.sd_time(live.ctx, config)
            if self.deadline is not None and self.t + dt > self.deadline:
                self.cut = True  # this iteration would end after the stop: not done
                break
            drawn = self.draw(config, b)
            step = np.minimum(live.rem, drawn)
            emitted = float(_sum(step))
            accepted += drawn - 1  # verification's result, whole (see Outcome)
            emitted_total += emitted
            self.recent.update(emitted / b)
            self.t += dt
            n += 1
            live.advance(step, _EPS)
            if n >= hold or _min(live.rem) <= _EPS:
                break
        if n == 0:
            return
        live.lag[:] = 0
        self.lag_dirty = False
        self.iteration += n
        self.close_sd_span(config, b, n, t0, emitted_total, accepted)

    # ---- admission, prefill and the drafter's state ----------------------------------------------
    def admit(self) -> None:
        """Admit waiting requests FCFS under max_batch and the KV reservation; prefill them."""
        self.need_admit = False
        lo = self.next_waiting
        if lo >= len(self.q_reserve):  # nothing waits
            return
        reserve = self.q_reserve[lo:]
        live = self.live
        kv_used = int(_sum(live.prompt)) + int(_sum(live.target))  # the live requests' reservations
        fits = admissible(reserve, self.eng.max_batch - len(live), self.eng.kv_capacity_tokens - kv_used)
        if fits == 0:
            if len(live) == 0:
                raise InputError(
                    f"a request of {int(self.q_prompt[lo])} prompt + {int(self.q_resp[lo])} response tokens "
                    f"needs {int(reserve[0])} KV tokens but a rollout worker holds only "
                    f"{self.eng.kv_capacity_tokens}; raise cluster.tp (more GPUs per worker) or "
                    "engine.kv_mem_fraction, or cap the responses (trace.cap)", field="cluster.tp")
            return
        hi = lo + fits
        prompts = self.q_prompt[lo:hi]
        t, passes = self.admission_prefill(prompts, len(live))
        if self.deadline is not None and self.t + t > self.deadline:
            self.cut = True  # the prefill would end after the stop: they stay waiting
            return
        self.next_waiting = hi
        self.log.span(self.idx, "prefill", self.t, self.t + t, iterations=passes, batch=fits, tokens=fits,
                      prefill_tokens=int(_sum(prompts)))
        self.row_closed = True
        self.t += t
        resp = self.q_resp[lo:hi]
        live.add(prompts, resp)
        if self.ids is not None:
            self.live_ids = np.concatenate([self.live_ids, self.ids[lo:hi]])
        self.lag_dirty = True
        # one-token responses are done at prefill (every other live request still has tokens to emit:
        # finished ones were retired after the span that finished them)
        if _min(resp) <= 1:
            self.retire()

    def admission_prefill(self, prompts: np.ndarray, n_live: int) -> tuple[float, int]:
        """Time and passes of the prefill of newly admitted ``prompts`` while ``n_live`` others run."""
        t, passes = self.prefill(prompts, np.zeros(len(prompts), dtype=np.int64), self.eng.prefill_budget,
                                 target=True, drafter=False)
        if self.eng.mixed_prefill and n_live:  # folded into the next decode iteration
            if self._mixed_base is None:
                one = np.ones(1, dtype=np.int64)
                self._mixed_base = self.cost.prefill_time(one, one - 1)
            t = max(0.0, t - self._mixed_base)
        return t, passes

    def prefill(self, new: np.ndarray, cached: np.ndarray, budget: int, *, target: bool,
                drafter: bool) -> tuple[float, int]:
        """Time and number of passes of a prefill through the target and/or the drafter (a long one,
        such as the switch's re-prefill, priced in one vectorised call where the run has a pricer)."""
        price = self.pricers.prefill
        if price is not None and int(_sum(new)) > _VECTOR_PASSES * budget:
            return price(new, cached, budget, target, drafter)
        total, passes = 0.0, 0
        for new_a, old_a in prefill_passes(new, cached, budget):
            if target:
                total += self.cost.prefill_time(new_a, old_a)
            if drafter:
                total += self.cost.drafter_prefill_time(new_a, old_a)
            passes += 1
        return total, passes

    def switch(self, config: SDConfig) -> None:
        """SD switches on: bring every live request's drafter up to date (engine's switch mode)."""
        self.log.span(self.idx, "switch", self.t, self.t, batch=len(self.live), config=config)
        if self.eng.switch == "reprefill":
            ctx = self.live.ctx
            t, passes = self.prefill(ctx, np.zeros(len(ctx), dtype=np.int64), self.eng.switch_budget,
                                     target=True, drafter=True)
            self.log.span(self.idx, "switch_reprefill", self.t, self.t + t, iterations=passes, batch=len(ctx),
                          prefill_tokens=int(_sum(ctx)))
            self.t += t
            self.live.lag[:] = 0
        elif self.eng.switch == "catch_up":
            self.catch_up(self.live.lag > _EPS)
        self.row_closed = True

    def catch_up(self, which: np.ndarray) -> None:
        """Drafter-only prefill over the tokens the drafter of the ``which`` requests has missed."""
        if not which.any():
            return
        ctx = self.live.ctx[which]
        new = np.minimum(ctx, np.ceil(self.live.lag[which] - _EPS).astype(np.int64))
        t, passes = self.prefill(new, ctx - new, self.eng.prefill_budget, target=False, drafter=True)
        self.log.span(self.idx, "catch_up", self.t, self.t + t, iterations=passes, batch=int(which.sum()),
                      prefill_tokens=int(_sum(new)))
        self.t += t
        self.live.lag[which] = 0
        self.row_closed = True

    # ---- decode primitives -------------------------------------------------------------------------
    def plain(self, hold: int) -> None:
        """Up to ``hold`` plain iterations, to the first finish, in the cost model's closed form."""
        live = self.live
        b, rem, t0 = len(live), live.rem, self.t
        if hold > 1:
            n = min(hold, max(1, math.ceil(float(_min(rem)) - _EPS)))
            price = self.pricers.plain
            dt = price(live.ctx, n) if price is not None else self.cost.decode_span_time(live.ctx, n)
        else:
            n = 1
            dt = self.cost.decode_time(live.ctx)
        if self.deadline is not None and t0 + dt > self.deadline:
            n, dt = self.within_deadline(n)
            if n == 0:
                self.cut = True
                return
        if not self.expected:
            # whole tokens: every live request has >= ceil(min rem) >= n left, so each emits exactly n
            step = n
            emitted = float(n * b)
        else:
            step = np.minimum(rem, n)
            emitted = float(_sum(step))
        self.t = t0 + dt
        self.iteration += n
        live.advance(step, _EPS)
        live.lag += step
        self.lag_dirty = True
        self.policy.observe(Outcome(NO_SD, b, round(emitted), dt, time=self.t, worker=self.idx, iterations=n))
        if self.log.decode(self.idx, t0, self.t, n, b, NO_SD, emitted):
            self.row_closed = True

    def within_deadline(self, n: int) -> tuple[int, float]:
        """The most plain iterations of the ``n`` planned that end by the deadline, and their time (the
        closed form is increasing in iterations: a bisection over it)."""
        ctx, room = self.live.ctx, float(self.deadline) - self.t
        lo, hi, best = 1, n - 1, (0, 0.0)
        while lo <= hi:
            mid = (lo + hi) // 2
            dt = self.cost.decode_span_time(ctx, mid)
            if dt <= room:
                best, lo = (mid, dt), mid + 1
            else:
                hi = mid - 1
        return best

    def mean_accept(self, config: SDConfig) -> float:
        """The expected accept length of ``config`` with the worker's drafter (computed once)."""
        a = self._accept_len.get(config)
        if a is None:
            a = self._accept_len[config] = float(self.accept.expected_accept_length(config, self.drafter))
        return a

    def draw(self, config: SDConfig, b: int) -> np.ndarray | float:
        """Per-request accept lengths (stochastic) or the expected one (expected mode)."""
        if self.accept is None or self.sampler is None:
            raise InputError(f"policy {self.policy.name} chose SD config {config.name} but no acceptance model "
                             "was given", field="acceptance")
        if self.expected:
            return self.mean_accept(config)
        return self.sampler.draw(config, b, self.uniforms, self.drafter)

    def close_sd_span(self, config: SDConfig, b: int, n: int, t0: float, emitted_total: float,
                      accepted: np.ndarray) -> None:
        """What every SD span ends with, however it was stepped: the policy hears the span's outcome
        (``accepted``: tokens accepted per request over the span) and the event log gets its row."""
        acc = float(_sum(accepted))
        self.policy.observe(Outcome(config, b, round(emitted_total), self.t - t0, config.verify_tokens * b * n,
                                    round(acc), self.t, self.idx, n, tuple(accepted.tolist())))
        if self.log.decode(self.idx, t0, self.t, n, b, config, emitted_total, config.verify_tokens * b * n, acc):
            self.row_closed = True

    def retire(self) -> None:
        """Retire the finished requests (some are: callers check), freeing their slots and KV."""
        live = self.live
        done = live.rem <= _EPS
        target = live.target[done]
        self.done_tokens.append(target)
        self.done_t.append(self.t)
        self.done_n.append(len(target))
        if self.ids is not None:
            self.done_ids.append(self.live_ids[done])
            self.live_ids = self.live_ids[~done]
        live.drop(~done)
        self.need_admit = True
        if self.on_finish is not None:
            self.on_finish(len(target))

    @property
    def done_at(self) -> list[np.ndarray]:
        """The finish time of every finished response, in finishing order (one array)."""
        return [np.repeat(np.array(self.done_t, dtype=np.float64), self.done_n)] if self.done_t else []

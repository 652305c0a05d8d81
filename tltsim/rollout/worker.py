"""One rollout worker's continuous-batching engine, stepped by the simulation.

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
  first finishing request. Plain spans use the cost model's closed form
  (:meth:`~tltcore.cost.CostModel.decode_span_time`); with ``engine.fast``, while the policy promises
  plain spans above a batch size (``plain_above``, :mod:`tltcore.policy.base`), the whole phase of
  them, admissions and prefills included, is computed at once (:meth:`RolloutWorker._plain_phase`,
  :mod:`tltsim.rollout.plain_phase`) and its rows go to the log as one column block; SD spans loop over iterations (with
  ``engine.fast`` in stochastic mode, their accept lengths are drawn in blocks:
  :meth:`RolloutWorker._speculate_blocks`, and a block's times priced in one vectorised call,
  :mod:`tltsim.rollout.span_cost`, as are long prefills such as the switch's). An SD iteration
  emits each request's accept length (bonus included), never beyond what it has left: the
  expected value (fractional progress) in ``expected`` mode, a draw from the worker's seeded RNG through
  :class:`~tltcore.acceptance.AcceptSampler` in ``stochastic`` mode. The policy is told one
  :class:`Outcome` per span.

Workers never interact within a step, so each keeps a local clock and the SimPy process yields once
per closed event row (the reference path). ``engine.fast`` runs one-iteration SD spans without the
span loop, scans for lagging drafters only after admissions or plain spans, and runs a held SD
decision's spans back to back without returning here: in expected mode many spans per numpy pass
(:meth:`RolloutWorker._expected_tail`), in stochastic mode span after span
(:meth:`RolloutWorker._stochastic_tail`), or with the other workers' tails a block per round
(:mod:`tltsim.rollout.tails`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from tltcore.acceptance import AcceptanceModel, AcceptSampler
from tltcore.cost import CostModel
from tltcore.drafter.state import DrafterState
from tltcore.errors import InputError
from tltcore.policy.base import (
    HOLD_UNTIL_EVENT,
    NO_SD,
    BatchView,
    Decision,
    Outcome,
    SDConfig,
    SDPolicy,
    plain_phase_bound,
    wants_remaining_hint,
)
from tltcore.policy.recent_accept import RecentAccept
from tltsim.rollout.entities import EngineConfig, LiveRequests
from tltsim.rollout.event_blocks import SimEventLog
from tltsim.rollout.plain_phase import fcfs_admissions, phase_spans
from tltsim.rollout.scheduling import admissible, prefill_passes
from tltsim.rollout.span_cost import (
    block_size,
    plain_phase_pricer,
    plain_pricer,
    prefill_pricer,
    sd_rows_pricer,
    span_pricer,
)

_EPS = 1e-9
_VECTOR_PASSES = 4  # prefills of more passes than this are priced in one vectorised call
_PRICE_ROWS = 4  # SD blocks of at least this many iterations are priced in one call (below, per row is cheaper)
_BLOCK_DRAWS = 4096  # accept lengths drawn at once by the block SD path (iterations x requests)
_TAIL_CELLS = 1 << 18  # iterations x requests of one chunk of an expected-mode SD tail
_sum, _min = np.add.reduce, np.minimum.reduce  # skip ndarray.sum's Python wrapper on the hot path


class _Uniforms:
    """The uniform numbers of a worker's RNG as a stream that can be rewound (the fast path's
    acceptance draws). ``random(n)`` returns the next ``n`` numbers of ``rng.random``'s stream -- the
    ones ``rng.random(n)`` would return there, since a Generator's doubles do not depend on how the
    calls are chunked -- generated ahead in chunks; ``pos -= m`` gives back the last ``m`` taken (at
    most the last call's). The worker's RNG serves nothing else, so drawing ahead changes nothing."""

    __slots__ = ("buf", "pos", "rng")
    CHUNK = 8192

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng, self.buf, self.pos = rng, np.empty(0), 0

    def random(self, n: int) -> np.ndarray:
        end = self.pos + n
        if end > len(self.buf):
            self.buf = np.concatenate([self.buf[self.pos:], self.rng.random(max(n, self.CHUNK))])
            self.pos, end = 0, n
        out = self.buf[self.pos:end]
        self.pos = end
        return out


class RolloutWorker:
    """One worker's requests for one step, with a local clock starting at ``t0``."""

    def __init__(self, idx: int, prompts: np.ndarray, responses: np.ndarray, *, policy: SDPolicy,
                 cost: CostModel, accept: AcceptanceModel | None, sampler: AcceptSampler | None,
                 engine: EngineConfig, rng: np.random.Generator, log: SimEventLog, drafter: DrafterState,
                 recent: RecentAccept, step: int, t0: float, on_finish: Callable[[int], None] | None = None,
                 pricers: dict[str, object] | None = None) -> None:
        self.idx, self.step_no = idx, step
        self.q_prompt = prompts.astype(np.int64)
        self.q_resp = np.maximum(responses.astype(np.int64), 1)
        self.q_reserve = self.q_prompt + self.q_resp  # KV each waiting request reserves (scheduling docstring)
        self.next_waiting = 0
        self.policy, self.cost, self.accept, self.sampler = policy, cost, accept, sampler
        self.eng, self.rng, self.log, self.drafter, self.recent = engine, rng, log, drafter, recent
        self.on_finish = on_finish
        # the trace's remaining lengths, only for a policy that asks (BatchView.remaining_hint: clairvoyant)
        self.hint = wants_remaining_hint(policy)
        self.expected = engine.acceptance_mode == "expected"
        self.live = LiveRequests(self.expected)
        self.kv_used = 0
        self.t = t0
        self.iteration = 0
        self.need_admit = True
        self.finish_time = t0
        self.row_closed = False
        self.fast = engine.fast
        # a block's SD times in one vectorised call where the cost model allows (span_cost docstring),
        # the pricers built once per run (``pricers``: the run's cache, shared by its workers)
        pricers = {} if pricers is None else pricers
        if engine.fast:
            if "sd" not in pricers:
                pricers.update(sd=span_pricer(cost), prefill=prefill_pricer(cost), plain=plain_pricer(cost),
                               phase=plain_phase_pricer(cost), rows=sd_rows_pricer(cost))
            self._price, self._price_prefill = pricers["sd"], pricers["prefill"]
            self._price_plain, self._price_phase, self._price_rows = pricers["plain"], pricers["phase"], pricers["rows"]
        else:
            self._price = self._price_prefill = self._price_plain = self._price_phase = self._price_rows = None
        self._pending: Decision | None = None  # a decision an SD tail asked for and did not run
        self.tails = None  # the step's StochasticTails, when the run advances stochastic SD tails together
        self.in_tail = False  # this worker's stochastic SD tail is running there
        self._sums_cache: dict = pricers.setdefault("sums", {})  # numpy's sums of b equal values, by value and b
        # a policy's promise of plain spans above a batch size (tltcore.policy.base): whole plain
        # phases in closed form (tltsim.rollout.plain_phase), on the fast path with spans allowed
        self._plain_bound = plain_phase_bound(policy) if engine.fast and engine.closed_form else None
        self.lag_dirty = True  # some live drafter may lag (fast path: skip the catch-up scan when not)
        self._uniforms: _Uniforms | None = None  # the fast path's acceptance draws (_stream)
        self._mixed_base: float | None = None
        self._accept_len: dict[SDConfig, float] = {}
        self._done_t: list[float] = []  # when responses finished, and how many each time (DataCoverage's input)
        self._done_n: list[int] = []
        self.done_tokens: list[np.ndarray] = []

    # ---- admission, prefill and the drafter's state ----------------------------------------------
    def _admit(self) -> None:
        """Admit waiting requests FCFS under max_batch and the KV reservation; prefill them."""
        self.need_admit = False
        lo = self.next_waiting
        if self.fast and lo >= len(self.q_reserve):  # nothing waits
            return
        reserve = self.q_reserve[lo:]
        if self.fast:  # the live requests' reservations (the reference path keeps a running total)
            self.kv_used = int(_sum(self.live.prompt)) + int(_sum(self.live.target))
        fits = admissible(reserve, self.eng.max_batch - len(self.live), self.eng.kv_capacity_tokens - self.kv_used)
        if fits == 0:
            if len(self.live) == 0 and len(reserve):
                raise InputError(
                    f"a request of {int(self.q_prompt[lo])} prompt + {int(self.q_resp[lo])} response tokens "
                    f"needs {int(reserve[0])} KV tokens but a rollout worker holds only "
                    f"{self.eng.kv_capacity_tokens}; raise cluster.tp (more GPUs per worker) or "
                    "engine.kv_mem_fraction, or cap the responses (trace.cap)", field="cluster.tp")
            return
        hi = lo + fits
        self.next_waiting = hi
        self.kv_used += int(_sum(reserve[:fits]))
        prompts = self.q_prompt[lo:hi]
        t, passes = self._admission_prefill(prompts, len(self.live))
        self.log.span(self.idx, "prefill", self.t, self.t + t, iterations=passes, batch=fits, tokens=fits,
                      prefill_tokens=int(_sum(prompts)))
        self.row_closed = True
        self.t += t
        resp = self.q_resp[lo:hi]
        self.live.add(prompts, resp)
        self.lag_dirty = True
        # one-token responses are done at prefill (every other live request still has tokens to emit:
        # finished ones were retired after the span that finished them)
        if not self.fast or _min(resp) <= 1:
            self._retire()

    def _admission_prefill(self, prompts: np.ndarray, n_live: int) -> tuple[float, int]:
        """Time and passes of the prefill of newly admitted ``prompts`` while ``n_live`` others run."""
        t, passes = self._prefill(prompts, np.zeros(len(prompts), dtype=np.int64), self.eng.prefill_budget,
                                  target=True, drafter=False)
        if self.eng.mixed_prefill and n_live:  # folded into the next decode iteration
            if self._mixed_base is None:
                one = np.ones(1, dtype=np.int64)
                self._mixed_base = self.cost.prefill_time(one, one - 1)
            t = max(0.0, t - self._mixed_base)
        return t, passes

    def _prefill(self, new: np.ndarray, cached: np.ndarray, budget: int, *, target: bool,
                 drafter: bool) -> tuple[float, int]:
        """Time and number of passes of a prefill through the target and/or the drafter (a long one,
        such as the switch's re-prefill, priced in one vectorised call where the cost model allows)."""
        if self._price_prefill is not None and int(_sum(new)) > _VECTOR_PASSES * budget:
            return self._price_prefill(new, cached, budget, target, drafter)
        total, passes = 0.0, 0
        for new_a, old_a in prefill_passes(new, cached, budget):
            if target:
                total += self.cost.prefill_time(new_a, old_a)
            if drafter:
                total += self.cost.drafter_prefill_time(new_a, old_a)
            passes += 1
        return total, passes

    def _switch(self, config: SDConfig) -> None:
        """SD switches on: bring every live request's drafter up to date (engine's switch mode)."""
        self.log.span(self.idx, "switch", self.t, self.t, batch=len(self.live), config=config)
        if self.eng.switch == "reprefill":
            ctx = self.live.ctx
            t, passes = self._prefill(ctx, np.zeros(len(ctx), dtype=np.int64), self.eng.switch_budget,
                                      target=True, drafter=True)
            self.log.span(self.idx, "switch_reprefill", self.t, self.t + t, iterations=passes, batch=len(ctx),
                          prefill_tokens=int(_sum(ctx)))
            self.t += t
            self.live.lag[:] = 0
        elif self.eng.switch == "catch_up":
            self._catch_up(self.live.lag > _EPS)
        self.row_closed = True

    def _catch_up(self, which: np.ndarray) -> None:
        """Drafter-only prefill over the tokens the drafter of the ``which`` requests has missed."""
        if not which.any():
            return
        ctx = self.live.ctx[which]
        new = np.minimum(ctx, np.ceil(self.live.lag[which] - _EPS).astype(np.int64))
        t, passes = self._prefill(new, ctx - new, self.eng.prefill_budget, target=False, drafter=True)
        self.log.span(self.idx, "catch_up", self.t, self.t + t, iterations=passes, batch=int(which.sum()),
                      prefill_tokens=int(_sum(new)))
        self.t += t
        self.live.lag[which] = 0
        self.row_closed = True

    # ---- decode --------------------------------------------------------------------------------
    def advance(self) -> bool:
        """One unit of work (admission, the switch, a decode span). False when the worker is done."""
        while self.need_admit:  # prefill priority; again if some responses ended at prefill
            self._admit()
        live = self.live
        b = len(live)
        if b == 0:
            self.log.flush(self.idx)
            self.finish_time = self.t
            return False
        if self._plain_bound is not None:
            bound = self._plain_bound()
            if bound is not None and b > bound and self._plain_phase(bound):
                return True
        decision = self._pending
        if decision is None:
            view = BatchView(b, tuple(live.ctx.tolist()), self.t, self.iteration, self.recent.value, self.idx,
                             self.step_no, self.drafter, tuple(live.rem.tolist()) if self.hint else ())
            decision = self.policy.decide(view)
        else:
            self._pending = None
        config = decision.config
        hold = decision.hold if self.eng.closed_form else 1
        if config.enabled:
            if self.eng.switch == "in_step":
                live.lag[:] = 0  # the drafter ran alongside every earlier iteration
            if decision.switch_on:
                self._switch(config)
            if self.lag_dirty or not self.fast:  # after an SD span every lag is 0 until admissions or plain spans
                self._catch_up(live.lag > self.eng.catch_up_limit)
            if not self.fast:
                self._speculate(config, hold)
            elif hold == 1:
                self._speculate_one(config)
            elif not self.expected:
                if hold == HOLD_UNTIL_EVENT and self.next_waiting >= len(self.q_resp) and \
                        type(self.recent) is RecentAccept and self.sampler is not None:
                    if self.tails is not None:  # run with the other workers' tails (tltsim.rollout.tails)
                        self.tails.enter(self, decision)
                    else:
                        self._stochastic_tail(decision)  # retires as it goes
                    return True
                self._speculate_blocks(config, hold)
            elif hold == HOLD_UNTIL_EVENT and self.next_waiting >= len(self.q_resp) and \
                    type(self.recent) is RecentAccept and self.sampler is not None:
                self._expected_tail(decision)  # retires as it goes
                return True
            else:
                self._speculate_expected_blocks(config, hold)
        else:
            self._plain(hold)
        if _min(live.rem) <= _EPS:
            self._retire()
        return True

    def _plain(self, hold: int) -> None:
        live = self.live
        b, rem, t0 = len(live), live.rem, self.t
        if hold > 1:
            n = min(hold, max(1, math.ceil(float(_min(rem)) - _EPS)))
            price = self._price_plain
            dt = price(live.ctx, n) if price is not None else self.cost.decode_span_time(live.ctx, n)
        else:
            n = 1
            dt = self.cost.decode_time(live.ctx)
        if self.fast and not self.expected:
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

    def _plain_phase(self, bound: int) -> bool:
        """Every plain span from here until the batch, after an event's admissions, is at or below
        ``bound`` (the policy's ``plain_above``), in closed form (:mod:`tltsim.rollout.plain_phase`):
        the event rows, clock, retirements, admissions with their prefills, live set and queue the
        per-span path leaves, bit for bit. The policy is asked nothing (its contract) and told the
        phase's last span. False, having done nothing, where it does not apply (fractional progress
        in expected mode, after SD)."""
        live = self.live
        n_old = len(live)
        if self.expected:
            if not all(np.array_equal(c, np.floor(c)) for c in (live.rem, live.gen, live.lag)):
                return False
            finish0 = live.rem.astype(np.int64)
        else:
            finish0 = live.rem
        lo, eng = self.next_waiting, self.eng
        admitted: list[int] = []
        rounds: list[int] = []
        if lo < len(self.q_resp):
            sched = fcfs_admissions(finish0.tolist(), (live.prompt + live.target).tolist(),
                                    self.q_reserve[lo:].tolist(), self.q_resp[lo:].tolist(), eng.max_batch,
                                    eng.kv_capacity_tokens)
            if sched is None:  # cannot happen after the admission loop; the per-span path then
                self._plain_bound = None
                return False
            admitted, rounds = sched
        adm = np.array(admitted, dtype=np.int64)
        na = len(adm)
        a_prompt, a_resp = self.q_prompt[lo:lo + na], self.q_resp[lo:lo + na]
        admit = np.concatenate([np.zeros(n_old, dtype=np.int64), adm])
        finish = np.concatenate([finish0, adm + a_resp - 1])
        c0 = np.concatenate([live.ctx, a_prompt + 1 - adm])
        price = self._price_phase
        ph = phase_spans(admit, finish, c0, bound, block_size(self.cost) if price is not None else None)
        spans = ph.spans
        if spans == 0:
            self._plain_bound = None
            return False
        if price is not None:
            dts = price(ph.n, ph.b, ph.ctx_sum, ph.hist, ph.start)
        else:  # one cost call per span, over the span's contexts in live order
            dts = np.array([self.cost.decode_span_time(c0[(ph.first <= j) & (ph.last >= j)] + int(ph.start[j - 1]),
                                                       int(ph.n[j - 1])) for j in range(1, spans + 1)],
                           dtype=np.float64)
        # admission rounds within the phase (at its last event too): consecutive runs of equal (iteration, round)
        n_in = int(np.searchsorted(adm, ph.end, side="right"))
        if n_in:
            key = adm[:n_in] * (n_in + 1) + np.array(rounds[:n_in], dtype=np.int64)
            g_first = np.flatnonzero(np.diff(key, prepend=-1))
            g_end = np.append(g_first[1:], n_in)
            g_span = ph.first[n_old + g_first] - 1  # the span each round follows (1-based)
        else:
            g_first = g_end = g_span = np.zeros(0, dtype=np.int64)
        n_rounds = len(g_first)
        # the order of it all: span j, then the rounds at its end
        span_pos = np.arange(spans) + np.searchsorted(g_span, np.arange(1, spans + 1), side="left")
        round_pos = g_span + np.arange(n_rounds)
        inc = np.empty(spans + n_rounds + 1)
        inc[0] = self.t
        inc[1 + span_pos] = dts
        r_rows: list[tuple[int, int, int]] = []  # (passes, batch, prompt tokens) per round
        if n_rounds:
            r_t = []
            mixed = eng.mixed_prefill
            for g0, g1, g in zip(g_first.tolist(), g_end.tolist(), (g_first + n_old).tolist(), strict=True):
                prompts = a_prompt[g0:g1]
                at = int(adm[g0])
                n_live = int(np.count_nonzero(finish[:g] > at)) if mixed else 0  # live before this prefill
                t, passes = self._admission_prefill(prompts, n_live)
                r_t.append(t)
                r_rows.append((passes, g1 - g0, int(_sum(prompts))))
            inc[1 + round_pos] = r_t
        clock = np.add.accumulate(inc)  # the clock after each span and prefill, added in order
        self._log_phase(spans, n_rounds, span_pos, round_pos, clock, ph, r_rows)
        # retirements: at the end of their span, or (one-token responses) after their round's prefill
        ids = np.arange(n_old + n_in)
        first, last = ph.first[:n_old + n_in], ph.last[:n_old + n_in]
        plain_done = (last >= first) & (last <= spans)
        when = np.full(n_old + n_in, -1, dtype=np.int64)
        when[plain_done] = span_pos[last[plain_done] - 1]
        if n_rounds:
            gid = np.repeat(np.arange(n_rounds), g_end - g_first)
            quick = last[n_old:] < first[n_old:]
            when[n_old:][quick] = round_pos[gid[quick]]
        done = ids[when >= 0]
        order = done[np.argsort(when[done], kind="stable")]
        if len(order):
            targets = np.concatenate([live.target, a_resp[:n_in]])
            self.done_tokens.append(targets[order])
            at_pos, counts = np.unique(when[order], return_counts=True)
            self._done_t.extend(clock[at_pos + 1].tolist())
            counts_l = counts.tolist()
            self._done_n.extend(counts_l)
            if self.on_finish is not None:
                for c in counts_l:
                    self.on_finish(c)
        # the policy hears the last span (its contract: the same state as hearing every one)
        j = spans - 1
        n_last, b_last = int(ph.n[j]), int(ph.b[j])
        self.policy.observe(Outcome(NO_SD, b_last, n_last * b_last, float(dts[j]), time=float(clock[span_pos[j] + 1]),
                                    worker=self.idx, iterations=n_last))
        # the live set and queue at the phase's end
        end = ph.end
        keep = np.flatnonzero(last[:n_old] > spans)
        new = n_old + np.flatnonzero(last[n_old:] > spans)
        live.after_plain(keep, end, a_prompt[new - n_old], a_resp[new - n_old], end - adm[new - n_old])
        self.next_waiting = lo + n_in
        self.t = float(clock[-1])
        self.iteration += end
        self.lag_dirty = True
        self.need_admit = True  # admissions at the last event are done; asking again admits nothing (or raises)
        return True

    def _log_phase(self, spans: int, n_rounds: int, span_pos: np.ndarray, round_pos: np.ndarray, clock: np.ndarray,
                   ph, r_rows: list[tuple[int, int, int]]) -> None:
        """A plain phase's decode and prefill rows, in the order the per-span path closes them."""
        log, w = self.log, self.idx
        n, b = ph.n, ph.b
        skip = 0
        if log.continues(w, int(b[0]), NO_SD):
            # the first span continues an open plain row of the same batch (coalesced, as log.decode does)
            log.decode(w, float(clock[0]), float(clock[1]), int(n[0]), int(b[0]), NO_SD, float(n[0] * b[0]))
            skip = 1
        log.flush(w)
        total = spans + n_rounds
        kinds = np.zeros(total, dtype=np.int8)  # 0: decode, 1: prefill
        iters = np.empty(total, dtype=np.int64)
        batch = np.empty(total, dtype=np.int64)
        tokens = np.empty(total, dtype=np.int64)
        prefill = np.zeros(total, dtype=np.int64)
        iters[span_pos], batch[span_pos], tokens[span_pos] = n, b, n * b
        if n_rounds:
            kinds[round_pos] = 1
            r = np.array(r_rows, dtype=np.int64).reshape(-1, 3)
            iters[round_pos], batch[round_pos], prefill[round_pos] = r[:, 0], r[:, 1], r[:, 2]
            tokens[round_pos] = r[:, 1]  # prefill emits each admitted request's first token
        sl = slice(skip, total)
        log.block(w, kinds[sl], ("decode", "prefill"), clock[:-1][sl], clock[1:][sl], iters[sl], batch[sl],
                  tokens[sl], prefill[sl])

    def _speculate(self, config: SDConfig, hold: int) -> None:
        """Up to ``hold`` SD iterations, stopping after the first one in which a request finishes."""
        live = self.live
        b, t0 = len(live), self.t
        emitted_total = 0.0
        accepted = np.zeros(b)
        n = 0
        while True:
            dt = self.cost.sd_time(live.ctx, config)
            drawn = self._draw(config, b)
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
        live.lag[:] = 0
        self.lag_dirty = False
        self.iteration += n
        self._close_sd_span(config, b, n, t0, emitted_total, accepted)

    def _close_sd_span(self, config: SDConfig, b: int, n: int, t0: float, emitted_total: float,
                       accepted: np.ndarray) -> None:
        """What every SD span ends with, however it was stepped: the policy hears the span's outcome
        (``accepted``: tokens accepted per request over the span) and the event log gets its row."""
        acc = float(_sum(accepted))
        self.policy.observe(Outcome(config, b, round(emitted_total), self.t - t0, config.verify_tokens * b * n,
                                    round(acc), self.t, self.idx, n, tuple(accepted.tolist())))
        if self.log.decode(self.idx, t0, self.t, n, b, config, emitted_total, config.verify_tokens * b * n, acc):
            self.row_closed = True

    def _speculate_blocks(self, config: SDConfig, hold: int) -> None:
        """:meth:`_speculate` in stochastic mode, drawing the accept lengths of several iterations at
        once (:meth:`_stochastic_span`), then the span's Outcome and row."""
        live = self.live
        b, t0 = len(live), self.t
        if self.accept is None or self.sampler is None:
            self._draw(config, b)  # raises: no acceptance model
        recent = self.recent
        fold = type(recent) is RecentAccept  # the EMA folded inline (RecentAccept.update, same operations)
        n, t, ema, emitted_total, drawn_total = self._stochastic_span(config, hold, t0, recent.value,
                                                                      None if fold else recent)
        if fold:
            recent.value = ema
        self.t = t
        if self.lag_dirty:  # else every lag is already 0
            live.lag[:] = 0
            self.lag_dirty = False
        self.iteration += n
        accepted = (drawn_total - n).astype(np.float64)  # whole numbers: the per-iteration float sums exactly
        self._close_sd_span(config, b, n, t0, emitted_total, accepted)

    def _stochastic_span(self, config: SDConfig, hold: int, t: float, ema: float | None,
                         recent: RecentAccept | None) -> tuple[int, float, float | None, float, np.ndarray]:
        """One stochastic SD span from the live state, in blocks of iterations: ``(iterations, clock,
        recent-accept EMA, tokens emitted, accept draws per request)`` after it (the EMA folded
        here unless ``recent`` is given to update).

        Until the first request finishes nothing is clipped, so the iterations of a block are cumulative
        sums of its draws; the block ends the span at its first iteration in which a request finishes
        (or at ``hold``), and the uniform stream is rewound to exactly the draws the iterations used
        (the draws of ``k`` iterations of ``b`` requests are the next ``k * b`` numbers of the
        per-iteration stream, in order: :class:`_Uniforms`). A block never spans more iterations than
        the shortest remaining response, since every iteration emits at least one token per request,
        and is sized to about the iterations that response needs at the expected accept length (the
        rest would be drawn and rewound; a span longer than its first block takes another). Times,
        the recent-accept estimate and the emitted totals are still added one iteration at a time, in
        the same order."""
        live = self.live
        b = len(live)
        cost, price = self.cost, self._price
        uniforms = self._stream()
        draw, drafter = self.sampler.draw, self.drafter
        mean = self._accept_len.get(config)
        if mean is None:
            mean = self._accept_len[config] = float(self.accept.expected_accept_length(config, drafter))
        keep = 1.0 - self.recent.weight
        emitted_total = 0.0
        drawn_total = None
        n = 0
        cap = max(2, _BLOCK_DRAWS // b)
        rem, ctx = live.rem, live.ctx
        end = rem + ctx  # prompt + response: a request is done when its context reaches it
        while True:
            shortest = int(_min(rem))
            k = min(hold - n, shortest, cap, int(shortest / mean * 1.25) + 2)
            # rows[j]: the contexts after j iterations of this block, unclipped (row 0: now)
            rows = np.empty((k + 1, b), dtype=np.int64)
            rows[0] = ctx
            rows[1:] = draw(config, k * b, uniforms, drafter).reshape(k, b)
            np.cumsum(rows, axis=0, out=rows)
            hit = np.logical_or.reduce(rows[1:] >= end, axis=1)
            used = int(hit.argmax()) + 1
            finish = bool(hit[used - 1])
            if not finish:
                used = k
            elif used < k:  # rewind: only the draws of the iterations that ran
                uniforms.pos -= (k - used) * b
            sums = np.add.reduce(rows[:used + 1], axis=1)  # the contexts' sum before each iteration, and after
            emitted = (sums[1:] - sums[:-1]).tolist()  # tokens of each iteration (whole numbers, exact)
            span_drawn = rows[used] - ctx
            drawn_total = span_drawn if drawn_total is None else drawn_total + span_drawn
            if finish:  # the last iteration clipped at each request's end
                np.minimum(rows[used], end, out=ctx)
                emitted[-1] = int(_sum(ctx)) - int(sums[used - 1])
            else:
                ctx[:] = rows[used]
            np.subtract(end, ctx, out=rem)
            dts = price(rows[:used], config, sums[:used]) if price is not None and used >= _PRICE_ROWS else \
                [cost.sd_time(c, config) for c in rows[:used]]
            if recent is None:
                for dt, e in zip(dts, emitted, strict=True):
                    e = float(e)
                    emitted_total += e
                    a = e / b
                    ema = a if ema is None else a + keep * (ema - a)
                    t += dt
            else:
                for dt, e in zip(dts, emitted, strict=True):
                    e = float(e)
                    emitted_total += e
                    recent.update(e / b)
                    t += dt
            n += used
            if finish or n >= hold:
                return n, t, ema, emitted_total, drawn_total

    def _stochastic_tail(self, decision: Decision) -> None:
        """Stochastic-mode SD spans of one held decision, span after span in one call (fast path,
        nothing waiting): each span as :meth:`_speculate_blocks` runs it, then what
        :meth:`advance` would do between spans -- retire the finished requests, check the policy's
        plain-phase promise, ask the policy with the view it would build; a different answer (or the
        promise) ends the tail and is run next. The spans' rows go to the log as one column block."""
        config = decision.config
        live = self.live
        policy, idx, step_no, drafter, hint = self.policy, self.idx, self.step_no, self.drafter, self.hint
        verify = config.verify_tokens
        t, iteration, ema = self.t, self.iteration, self.recent.value
        if self.lag_dirty:  # the first span brings every drafter up to date
            live.lag[:] = 0
            self.lag_dirty = False
        rows_out: list[tuple] = []
        pending = None
        while True:
            b = len(live)
            t0 = t
            n, t, ema, emitted_total, drawn_total = self._stochastic_span(config, HOLD_UNTIL_EVENT, t0, ema, None)
            accepted = (drawn_total - n).astype(np.float64)
            acc = float(_sum(accepted))
            drafted = verify * b * n
            policy.observe(Outcome(config, b, round(emitted_total), t - t0, drafted, round(acc), t, idx, n,
                                   tuple(accepted.tolist())))
            rows_out.append((t0, t, n, b, round(emitted_total), drafted, round(acc)))
            iteration += n
            # retire (the span ended at a finish), as _retire does
            done = live.rem <= 0
            targets = live.target[done]
            self.done_tokens.append(targets)
            self._done_t.append(t)
            self._done_n.append(len(targets))
            live.drop(~done)
            if self.on_finish is not None:
                self.on_finish(len(targets))
            b = len(live)
            if b == 0:
                break
            if self._plain_bound is not None:
                bound = self._plain_bound()
                if bound is not None and b > bound:
                    break
            view = BatchView(b, tuple(live.ctx.tolist()), t, iteration, ema, idx, step_no, drafter,
                             tuple(live.rem.tolist()) if hint else ())
            d = policy.decide(view)
            if not (d.config == config and d.hold == HOLD_UNTIL_EVENT and not d.switch_on):
                pending = d
                break
        cols = list(zip(*rows_out, strict=True))
        k = len(rows_out)
        self.log.block(idx, np.zeros(k, dtype=np.int8), ("decode",), np.array(cols[0]), np.array(cols[1]),
                       np.array(cols[2]), np.array(cols[3]), np.array(cols[4]), np.zeros(k), config=config,
                       drafted=np.array(cols[5]), accepted=np.array(cols[6]))
        self.t, self.iteration, self.recent.value = t, iteration, ema
        self.need_admit = True
        self._pending = pending

    def _stream(self) -> _Uniforms:
        """The worker's acceptance draws as a rewindable stream (fast path; created on first use)."""
        u = self._uniforms
        if u is None:
            u = self._uniforms = _Uniforms(self.rng)
        return u

    def _speculate_expected_blocks(self, config: SDConfig, hold: int) -> None:
        """:meth:`_speculate` in expected mode over blocks of iterations.

        Every request emits the expected accept length ``a`` per iteration until the iteration in
        which one finishes (a request with less than ``a`` left finishes as it is clipped), so a
        block's remaining and emitted tokens are running sums (``numpy.cumsum`` adds in order: the
        same floating-point operations as the per-iteration path) and only the finishing iteration
        is clipped. The emitted total of an unclipped iteration is the sum of ``b`` copies of ``a``,
        computed once; the accepted-token accumulator is the same float for every request."""
        live = self.live
        b, t0 = len(live), self.t
        cost, recent, price = self.cost, self.recent, self._price
        a = self._draw(config, b)
        full = float(_sum(np.full(b, a)))  # one unclipped iteration's emitted tokens, summed as numpy does
        per_request = full / b
        less = a - 1
        acc_each = 0.0
        emitted_total = 0.0
        fold = type(recent) is RecentAccept  # the EMA folded inline (RecentAccept.update, same operations)
        keep = 1.0 - recent.weight
        ema = recent.value
        t = t0
        n = 0
        cap = max(2, _BLOCK_DRAWS // b)
        prompt = live.prompt
        while True:
            rem, gen = live.rem, live.gen
            k = min(hold - n, int(float(_min(rem)) / a) + 1, cap)
            r = np.empty((k + 1, b))
            r[0], r[1:] = rem, -a
            np.cumsum(r, axis=0, out=r)  # r[j]: remaining after j unclipped iterations
            g = np.empty((k + 1, b))
            g[0], g[1:] = gen, a
            np.cumsum(g, axis=0, out=g)
            hit = np.minimum.reduce(r[1:], axis=1) <= _EPS
            used = int(hit.argmax()) + 1
            finish = bool(hit[used - 1])
            if not finish:
                used = k
            ctx_rows = np.empty((used, b), dtype=np.int64)
            ctx_rows[0] = live.ctx
            if used > 1:
                np.add(np.floor(g[1:used] + _EPS).astype(np.int64), prompt, out=ctx_rows[1:])
            dts = price(ctx_rows, config) if price is not None and used >= _PRICE_ROWS else \
                [cost.sd_time(c, config) for c in ctx_rows]
            last = used - 1 if finish else -1
            for j, dt in enumerate(dts):
                if j == last:
                    step = np.minimum(r[j], a)
                    emitted = float(_sum(step))
                    x = emitted / b
                else:
                    emitted, x = full, per_request
                acc_each += less
                emitted_total += emitted
                if fold:
                    ema = x if ema is None else x + keep * (ema - x)
                else:
                    recent.update(x)
                t += dt
            n += used
            if finish:
                rem[:] = r[used - 1] - step
                gen[:] = g[used - 1] + step
            else:
                rem[:] = r[used]
                gen[:] = g[used]
            np.add(prompt, np.floor(gen + _EPS).astype(np.int64), out=live.ctx)
            if finish or n >= hold:
                break
        if fold:
            recent.value = ema
        self.t = t
        live.lag[:] = 0
        self.lag_dirty = False
        self.iteration += n
        accepted = np.full(b, acc_each)
        self._close_sd_span(config, b, n, t0, emitted_total, accepted)

    def _expected_tail(self, decision: Decision) -> None:
        """Expected-mode SD spans of one held decision, many at once (fast path, nothing waiting).

        Every live request emits the expected accept length ``a`` per iteration, so its remaining
        and emitted tokens are running sums of ``-a`` and ``a`` whatever the spans around it (a span
        ends at the first finish, and the survivors' sums go on exactly as the next span's block
        would continue them): one ``numpy.cumsum`` over a chunk of iterations gives every request's
        finishing iteration, the spans between finishes, every iteration's contexts (priced in one
        call) and the state at any span boundary. Per span, what the per-span path does is done in
        the same order with the same values: the policy is asked at every span after the first (the
        view it would get; a different answer, or a plain-phase promise, ends the tail there and the
        answer is run next), the clipped last iteration's tokens summed as numpy sums them, the
        clock, recent-accept estimate and accumulators added one iteration at a time (a run of
        equal recent-accept updates stops changing the estimate once it equals the value folded in),
        the Outcome, the retirements and the event row (one column block per chunk)."""
        config = decision.config
        live, eps = self.live, _EPS
        a = self._draw(config, len(live))
        less, keep = a - 1, 1.0 - self.recent.weight
        verify = config.verify_tokens
        policy, log, idx, step_no = self.policy, self.log, self.idx, self.step_no
        drafter, hint = self.drafter, self.hint
        rows_price, cost, bs = self._price_rows, self.cost, block_size(self.cost)
        # batch -> one unclipped iteration's tokens, summed as numpy sums them (shared by the run's workers)
        full_of: dict[int, float] = self._sums_cache.setdefault(a, {})
        acc_run = [0.0]  # acc_run[n]: n accepted-token increments added one by one
        ema, t, iteration = self.recent.value, self.t, self.iteration
        first = True
        chunk = 0
        while True:
            prompt, rem, gen = live.prompt, live.rem, live.gen
            b0 = len(live)
            need = int(float(_min(rem)) / a) + 2  # rows that surely hold a finish
            # about the iterations of the next 8, 16, 32, ... finishes (a tail may stop at any span: a
            # decision that changes with the batch), within a bounded chunk
            m = min(b0, 8 << chunk)
            reach = int(float(np.partition(rem, m - 1)[m - 1]) / a) + 2
            rows = max(need, min(reach, _TAIL_CELLS // b0))
            chunk += 1
            r = np.empty((rows + 1, b0))
            r[0], r[1:] = rem, -a
            np.cumsum(r, axis=0, out=r)  # r[j]: remaining after j iterations (the per-iteration sums)
            g = np.empty((rows + 1, b0))
            g[0], g[1:] = gen, a
            np.cumsum(g, axis=0, out=g)
            hit = r[1:] <= eps
            fin = hit.argmax(axis=0) + 1  # each request's finishing iteration (1-based) ...
            fin[~hit[fin - 1, np.arange(b0)]] = rows + 1  # ... or beyond this chunk
            ends = np.unique(fin[fin <= rows])
            if len(ends) == 0:  # cannot happen (rows >= need); the per-span path then
                self._speculate_expected_blocks(config, HOLD_UNTIL_EVENT)
                return
            last_end = int(ends[-1])
            # every iteration's contexts and batch, priced at once
            ctx = prompt + np.floor(g[:last_end] + eps).astype(np.int64)  # (iterations, requests)
            alive = fin[None, :] > np.arange(last_end)[:, None]  # in the batch of iteration j + 1
            batch = np.add.reduce(alive, axis=1)
            masked = np.where(alive, ctx, 0)
            ctx_sum = np.add.reduce(masked, axis=1)
            if rows_price is not None:
                up = masked + (bs - 1)
                paged = np.add.reduce(up // bs, axis=1) * bs
                dts = rows_price(paged, ctx_sum, batch, config)
            else:
                dts = np.array([cost.sd_time(ctx[j][alive[j]], config) for j in range(last_end)], dtype=np.float64)
            clock = np.empty(last_end + 1)
            clock[0] = t
            clock[1:] = dts
            np.add.accumulate(clock, out=clock)  # the clock after each iteration, added in order
            starts = np.concatenate(([0], ends[:-1])).tolist()
            ends_l = ends.tolist()
            batch_l = batch[starts].tolist()
            rows_out: list[tuple] = []  # (t0, t1, n, b, tokens, drafted, accepted) per span
            stop = None  # the boundary (iteration) the chunk's spans end at
            pending = None
            span = 0
            counts = np.bincount(np.searchsorted(ends, fin[fin <= last_end]), minlength=len(ends))  # finishes per span
            for s0, s1, b in zip(starts, ends_l, batch_l, strict=True):
                in_span = fin > s0  # the span's requests, in live order
                if not first:
                    if self._plain_bound is not None:
                        bound = self._plain_bound()
                        if bound is not None and b > bound:
                            stop = s0
                            break
                    view = BatchView(b, tuple(ctx[s0][in_span].tolist()), float(clock[s0]), iteration, ema, idx,
                                     step_no, drafter, tuple(r[s0][in_span].tolist()) if hint else ())
                    d = policy.decide(view)
                    if not (d.config == config and d.hold == HOLD_UNTIL_EVENT and not d.switch_on):
                        pending, stop = d, s0
                        break
                first = False
                n = s1 - s0
                full = full_of.get(b)
                if full is None:
                    full = full_of[b] = float(_sum(np.full(b, a)))
                last = float(_sum(np.minimum(r[s1 - 1][in_span], a)))  # the finishing iteration, clipped
                # n - 1 unclipped iterations, then the clipped one: tokens, recent accept, accepted
                x = full / b
                if n <= 16:
                    total = 0.0
                    for _ in range(n - 1):
                        total += full
                else:  # the same additions in order
                    total = float(np.add.accumulate(np.full(n - 1, full))[-1])
                if ema is None:
                    ema = x if n > 1 else None
                    start = 1
                else:
                    start = 0
                for _ in range(start, n - 1):
                    nxt = x + keep * (ema - x)
                    if nxt == ema:  # a fixed point: the remaining updates leave it as it is
                        break
                    ema = nxt
                total += last
                xl = last / b
                ema = xl if ema is None else xl + keep * (ema - xl)
                while len(acc_run) <= n:
                    acc_run.append(acc_run[-1] + less)
                acc_each = acc_run[n]
                acc = float(_sum(np.full(b, acc_each)))
                t0, t1 = float(clock[s0]), float(clock[s1])
                drafted = verify * b * n
                policy.observe(Outcome(config, b, round(total), t1 - t0, drafted, round(acc), t1, idx, n,
                                       (acc_each,) * b))
                rows_out.append((t0, t1, n, b, round(total), drafted, round(acc)))
                iteration += n
                # retirements at the span's end (in live order: below, for the whole chunk)
                self._done_t.append(t1)
                if self.on_finish is not None:
                    self.on_finish(int(counts[span]))
                span += 1
                stop = s1
            if span:  # the responses retired, span by span, each span's in live order
                self._done_n.extend(counts[:span].tolist())
                done = np.flatnonzero(fin <= stop)
                self.done_tokens.append(live.target[done[np.argsort(fin[done], kind="stable")]])
            if rows_out:
                cols = list(zip(*rows_out, strict=True))
                log.block(idx, np.zeros(len(rows_out), dtype=np.int8), ("decode",), np.array(cols[0]),
                          np.array(cols[1]),
                          np.array(cols[2]), np.array(cols[3]), np.array(cols[4]), np.zeros(len(rows_out)),
                          config=config, drafted=np.array(cols[5]), accepted=np.array(cols[6]))
            # the state at the boundary
            keep_idx = np.flatnonzero(fin > stop)
            live.after_sd(keep_idx, r[stop], g[stop], eps)
            t = float(clock[stop])
            self.t, self.iteration, self.recent.value = t, iteration, ema
            self.lag_dirty = False
            self.need_admit = True
            if pending is not None or stop < last_end or len(live) == 0:
                self._pending = pending
                return

    def _speculate_one(self, config: SDConfig) -> None:
        """:meth:`_speculate` for a one-iteration decision (BEG-MAB decides every iteration), without the
        span loop's accumulators; the same numbers, operation for operation."""
        live = self.live
        b, t0 = len(live), self.t
        dt = self.cost.sd_time(live.ctx, config)
        drawn = self._draw(config, b)
        step = np.minimum(live.rem, drawn)
        emitted = float(_sum(step))
        # np.zeros(b) + (drawn - 1), as the span loop accumulates it: float64 per request
        accepted = np.full(b, drawn - 1, dtype=np.float64) if self.expected else drawn - 1.0
        self.recent.update(emitted / b)
        self.t = t0 + dt
        live.advance(step, _EPS)
        if self.lag_dirty:  # else every lag is already 0
            live.lag[:] = 0
            self.lag_dirty = False
        self.iteration += 1
        acc = float(_sum(accepted))
        drafted = config.verify_tokens * b
        self.policy.observe(Outcome(config, b, round(emitted), self.t - t0, drafted, round(acc), self.t, self.idx, 1,
                                    tuple(accepted.tolist())))
        if self.log.decode(self.idx, t0, self.t, 1, b, config, emitted, drafted, acc):
            self.row_closed = True

    def _draw(self, config: SDConfig, b: int) -> np.ndarray | float:
        """Per-request accept lengths (stochastic) or the expected one (expected mode)."""
        if self.accept is None or self.sampler is None:
            raise InputError(f"policy {self.policy.name} chose SD config {config.name} but no acceptance model "
                             "was given", field="acceptance")
        if self.expected:
            a = self._accept_len.get(config)
            if a is None:
                a = self._accept_len[config] = float(self.accept.expected_accept_length(config, self.drafter))
            return a
        return self.sampler.draw(config, b, self._stream() if self.fast else self.rng, self.drafter)

    @property
    def done_at(self) -> list[np.ndarray]:
        """The finish time of every finished response, in finishing order (one array)."""
        return [np.repeat(np.array(self._done_t, dtype=np.float64), self._done_n)] if self._done_t else []

    def _retire(self) -> None:
        live = self.live
        done = live.rem <= _EPS
        if not self.fast:  # the fast path is called only when some request is done and recomputes kv_used
            if not done.any():  # at admission
                return
            self.kv_used -= int(_sum(live.prompt[done] + live.target[done]))
        target = live.target[done]
        self.done_tokens.append(target)
        self._done_t.append(self.t)
        self._done_n.append(len(target))
        live.drop(~done)
        self.need_admit = True
        if self.on_finish is not None:
            self.on_finish(len(target))

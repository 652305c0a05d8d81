"""Stochastic SD tails of many workers advanced together, one block of iterations per worker per round.

Workers never interact within a step, and a worker's stochastic SD span is a sequence of blocks
(:func:`tltsim.rollout.fast.spans.stochastic_span`: the accept lengths of ``k``
iterations drawn at once from the worker's own uniform stream, summed, cut at the first finish).
Each block costs a few dozen small numpy calls whatever its size, so with 16 workers in their tails
most of the time goes to call overhead. :class:`StochasticTails` stacks the blocks of every worker
in a tail into one padded ``(workers, iterations, requests)`` array and does those calls once per
round: the same draws from each worker's stream (mapped by the same sampler, one call per shape),
the same cumulative sums, first finishes, clipped last iterations and, priced per iteration with
its own batch (:meth:`~tltcore.cost.protocol.PagedKVTimes.sd_times_from_sums`), the same times. Padding never
enters a result: padded requests have no draws, context 0 and an end no context reaches, and
padded iterations lie beyond each worker's block. Per worker, what happens between blocks and spans
is what its own tail does, in the same order: the clock, recent-accept estimate and totals added
one iteration at a time, the rewind of unused draws, the span's Outcome and row, retirements, the
plain-phase hint and the policy's next answer (a different one sends the worker back to its own
loop with that answer to run).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tltcore.acceptance import AcceptSampler
from tltcore.drafter.state import DrafterState
from tltcore.policy.base import HOLD_UNTIL_EVENT, BatchView, Decision, Outcome, SDConfig
from tltsim.rollout.fast.spans import stochastic_span
from tltsim.rollout.fast.state import FastWorker

_sum = np.add.reduce
_FAR = np.int64(1) << 62  # the end of a padded request: no context reaches it
_BLOCK_DRAWS = 4096  # as the worker's own blocks: at most this many draws per block


def run_tail(fast: FastWorker, decision: Decision) -> None:
    """Stochastic-mode SD spans of one held decision, span after span in one call (fast path,
    nothing waiting): each span as :func:`~tltsim.rollout.fast.spans.speculate_blocks` runs it, then
    what the worker's loop would do between spans -- retire the finished requests, check the policy's
    plain-phase hint, ask the policy with the view it would build; a different answer (or the
    hint) ends the tail and is run next. The spans' rows go to the log as one column block."""
    config = decision.config
    w = fast.worker
    live = w.live
    policy, idx, step_no, drafter, hint = w.policy, w.idx, w.step_no, w.drafter, w.hint
    verify = config.verify_tokens
    t, iteration, ema = w.t, w.iteration, w.recent.value
    if w.lag_dirty:  # the first span brings every drafter up to date
        live.lag[:] = 0
        w.lag_dirty = False
    rows_out: list[tuple] = []
    pending = None
    while True:
        b = len(live)
        t0 = t
        n, t, ema, emitted_total, drawn_total = stochastic_span(fast, config, HOLD_UNTIL_EVENT, t0, ema)
        accepted = (drawn_total - n).astype(np.float64)
        acc = float(_sum(accepted))
        drafted = verify * b * n
        policy.observe(Outcome(config, b, round(emitted_total), t - t0, drafted, round(acc), t, idx, n,
                               tuple(accepted.tolist())))
        rows_out.append((t0, t, n, b, round(emitted_total), drafted, round(acc)))
        iteration += n
        # retire (the span ended at a finish), as RolloutWorker.retire does
        done = live.rem <= 0
        targets = live.target[done]
        w.done_tokens.append(targets)
        w.done_t.append(t)
        w.done_n.append(len(targets))
        live.drop(~done)
        if w.on_finish is not None:
            w.on_finish(len(targets))
        b = len(live)
        if b == 0:
            break
        if fast.plain_bound is not None:
            bound = fast.plain_bound()
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
    fast.log.block(idx, np.zeros(k, dtype=np.int8), ("decode",), np.array(cols[0]), np.array(cols[1]),
                   np.array(cols[2]), np.array(cols[3]), np.array(cols[4]), np.zeros(k), config=config,
                   drafted=np.array(cols[5]), accepted=np.array(cols[6]))
    w.t, w.iteration, w.recent.value = t, iteration, ema
    w.need_admit = True
    fast.pending = pending


def first_finishes(rows: np.ndarray, end: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per worker of a padded round of blocks -- ``rows[w, j]``: worker ``w``'s contexts after ``j``
    iterations, unclipped (row 0: now); ``end``: each request's end (padding: never reached); ``k``:
    each worker's block length -- ``(used, finish, sums)``: the iterations kept (up to and including
    the first in which a request reaches its end, else ``k``), whether that last one finishes a
    request, and the contexts' sum before each iteration (:func:`~tltsim.rollout.fast.spans.draw_block`
    for many workers at once; the held tails and the block hint's rounds both cut their blocks so)."""
    depth = rows.shape[1] - 1
    hit = np.logical_or.reduce(rows[:, 1:, :] >= end[:, None, :], axis=2)
    hit &= np.arange(depth)[None, :] < k[:, None]
    used = hit.argmax(axis=1) + 1
    finish = hit[np.arange(len(k)), used - 1]
    return np.where(finish, used, k), finish, np.add.reduce(rows, axis=2)


class _Given:
    """An RNG stand-in whose ``random(n)`` returns numbers already taken from a worker's stream."""

    __slots__ = ("u",)

    def __init__(self, u: np.ndarray) -> None:
        self.u = u

    def random(self, n: int) -> np.ndarray:
        return self.u


class _Member:
    """One worker in its tail: the held decision and the running span's accumulators."""

    __slots__ = ("config", "drawn", "ema", "emitted", "end", "fast", "iteration", "mean", "n", "rows", "t", "t0",
                 "worker")

    def __init__(self, fast: FastWorker, config: SDConfig) -> None:
        worker = fast.worker
        live = worker.live
        self.fast, self.worker, self.config = fast, worker, config
        self.end = live.rem + live.ctx  # prompt + response per request, in live order
        self.t, self.ema, self.iteration = worker.t, worker.recent.value, worker.iteration
        self.mean = worker.mean_accept(config)
        self.rows: list[tuple] = []  # (t0, t1, n, b, tokens, drafted, accepted) per closed span
        self.start_span()

    def start_span(self) -> None:
        self.t0, self.n, self.emitted, self.drawn = self.t, 0, 0.0, None


class StochasticTails:
    """The workers of one step whose stochastic SD tails run together (module docstring)."""

    def __init__(self, rows_price: Callable[..., np.ndarray], block: int, sampler: AcceptSampler,
                 drafter: DrafterState) -> None:
        self.rows_price, self.block, self.sampler, self.drafter = rows_price, block, sampler, drafter
        self.shift = block.bit_length() - 1 if block & (block - 1) == 0 else None
        self.members: list[_Member] = []

    def enter(self, fast: FastWorker, decision: Decision) -> None:
        """``fast.worker`` starts a tail of ``decision`` (held, SD, nothing waiting) at its current state."""
        worker = fast.worker
        if worker.lag_dirty:  # the first span brings every drafter up to date
            worker.live.lag[:] = 0
            worker.lag_dirty = False
        fast.in_tail = True
        self.members.append(_Member(fast, decision.config))

    def round(self) -> list[FastWorker]:
        """One block for every member; returns the workers whose tails ended (back to their own loop)."""
        members = self.members
        w_n = len(members)
        lives = [m.worker.live for m in members]
        b = np.array([len(lv) for lv in lives], dtype=np.int64)
        width = int(b.max())
        total_b = int(b.sum())
        off_b = np.cumsum(b) - b
        w_of = np.repeat(np.arange(w_n), b)
        r_of = np.arange(total_b) - np.repeat(off_b, b)
        ctx_p = np.zeros((w_n, width), dtype=np.int64)
        ctx_p[w_of, r_of] = np.concatenate([lv.ctx for lv in lives])
        end_p = np.full((w_n, width), _FAR, dtype=np.int64)
        end_p[w_of, r_of] = np.concatenate([m.end for m in members])
        shortest = np.minimum.reduce(end_p - ctx_p, axis=1)
        # block sizes as the worker's own blocks choose them (any size gives the same result)
        mean = np.array([m.mean for m in members])
        k = np.minimum(np.minimum(shortest, np.maximum(2, _BLOCK_DRAWS // b)),
                       (shortest / mean * 1.25).astype(np.int64) + 2)
        k_l = k.tolist()
        cut = max(8, 2 * sorted(k_l)[w_n // 2])  # a long block waits for the next rounds
        k_l = [min(x, cut) for x in k_l]
        k = np.array(k_l, dtype=np.int64)
        depth = max(k_l)
        b_l = b.tolist()
        # each worker's next k * b uniforms, mapped to accept lengths by the sampler (per shape)
        u_all = np.concatenate([m.fast.stream.random(kw * bw) for m, kw, bw in zip(members, k_l, b_l,
                                                                                       strict=True)])
        sizes = k * b
        shapes = list(dict.fromkeys(m.config for m in members))
        draw, drafter = self.sampler.draw, self.drafter
        if len(shapes) == 1:
            drawn = draw(shapes[0], len(u_all), _Given(u_all), drafter)
        else:
            shape_of = np.array([shapes.index(m.config) for m in members])
            cell_shape = np.repeat(shape_of, sizes)
            drawn = np.empty(len(u_all), dtype=np.int64)
            for i, c in enumerate(shapes):
                mine = cell_shape == i
                drawn[mine] = draw(c, int(np.count_nonzero(mine)), _Given(u_all[mine]), drafter)
        # rows[w, j]: worker w's contexts after j iterations of its block, unclipped (row 0: now)
        rows = np.zeros((w_n, depth + 1, width), dtype=np.int64)
        rows[:, 0, :] = ctx_p
        cell_w = np.repeat(np.arange(w_n), sizes)
        q = np.arange(len(u_all)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        bb = np.repeat(b, sizes)
        it = q // bb
        rows[cell_w, 1 + it, q - it * bb] = drawn
        np.cumsum(rows, axis=1, out=rows)
        used, finish, sums = first_finishes(rows, end_p, k)
        last = rows[np.arange(w_n), used]  # after the block's last iteration, unclipped
        new_ctx = np.where(finish[:, None], np.minimum(last, end_p), last)
        emitted = sums[:, 1:] - sums[:, :-1]
        emitted[np.arange(w_n), used - 1] = np.add.reduce(new_ctx, axis=1) - sums[np.arange(w_n), used - 1]
        span_drawn = last - ctx_p
        # every iteration's time, priced with its worker's batch and shape
        valid = np.arange(depth)[None, :] < used[:, None]
        up = rows[:, :depth, :] + (self.block - 1)
        pages = np.right_shift(up, self.shift, out=up) if self.shift is not None else up // self.block
        paged = (np.add.reduce(pages, axis=2) * self.block)[valid]
        ctx_sum = sums[:, :depth][valid]
        batch = np.broadcast_to(b[:, None], (w_n, depth))[valid]
        if len(shapes) == 1:
            dts = self.rows_price(paged, ctx_sum, batch, shapes[0])
        else:
            row_shape = np.broadcast_to(shape_of[:, None], (w_n, depth))[valid]
            dts = np.empty(len(paged))
            for i, c in enumerate(shapes):
                mine = row_shape == i
                dts[mine] = self.rows_price(paged[mine], ctx_sum[mine], batch[mine], c)
        dts_l = dts.tolist()
        used_l, finish_l = used.tolist(), finish.tolist()
        emitted_l = emitted.tolist()
        left: list[FastWorker] = []
        keep: list[_Member] = []
        pos = 0
        for i, m in enumerate(members):
            w = m.worker
            bw, kw, uw = b_l[i], k_l[i], used_l[i]
            if finish_l[i] and uw < kw:  # rewind: only the draws of the iterations that ran
                m.fast.stream.pos -= (kw - uw) * bw
            keep_w = 1.0 - w.recent.weight
            t, ema, total = m.t, m.ema, m.emitted
            for dt, e in zip(dts_l[pos:pos + uw], emitted_l[i][:uw], strict=True):
                e = float(e)
                total += e
                a = e / bw
                ema = a if ema is None else a + keep_w * (ema - a)
                t += dt
            pos += uw
            m.t, m.ema, m.emitted = t, ema, total
            m.n += uw
            drawn_w = span_drawn[i, :bw]
            m.drawn = drawn_w if m.drawn is None else m.drawn + drawn_w
            live = lives[i]
            live.ctx[:] = new_ctx[i, :bw]
            np.subtract(m.end, live.ctx, out=live.rem)
            if not finish_l[i]:
                keep.append(m)
                continue
            if self._close_span(m):
                keep.append(m)
            else:
                left.append(m.fast)
        self.members = keep
        return left

    def _close_span(self, m: _Member) -> bool:
        """The span ended at a finish: its Outcome and row, the retirements, then the policy's next
        answer. True while the tail goes on."""
        w, config = m.worker, m.config
        live = w.live
        b, n = len(live), m.n
        accepted = (m.drawn - n).astype(np.float64)  # whole numbers: the per-iteration float sums exactly
        acc = float(_sum(accepted))
        drafted = config.verify_tokens * b * n
        t, total = m.t, m.emitted
        w.policy.observe(Outcome(config, b, round(total), t - m.t0, drafted, round(acc), t, w.idx, n,
                                 tuple(accepted.tolist())))
        m.rows.append((m.t0, t, n, b, round(total), drafted, round(acc)))
        m.iteration += n
        done = live.rem <= 0
        targets = live.target[done]
        w.done_tokens.append(targets)
        w.done_t.append(t)
        w.done_n.append(len(targets))
        keep_cols = ~done
        live.drop(keep_cols)
        m.end = m.end[keep_cols]
        if w.on_finish is not None:
            w.on_finish(len(targets))
        b = len(live)
        pending = None
        go_on = b > 0
        if go_on and m.fast.plain_bound is not None:
            bound = m.fast.plain_bound()
            go_on = bound is None or b <= bound
        if go_on:
            view = BatchView(b, tuple(live.ctx.tolist()), t, m.iteration, m.ema, w.idx, w.step_no, w.drafter,
                             tuple(live.rem.tolist()) if w.hint else ())
            d = w.policy.decide(view)
            if not (d.config == config and d.hold == HOLD_UNTIL_EVENT and not d.switch_on):
                pending, go_on = d, False
        if go_on:
            m.start_span()
            return True
        self._leave(m, pending)
        return False

    @staticmethod
    def _leave(m: _Member, pending: Decision | None) -> None:
        w = m.worker
        cols = list(zip(*m.rows, strict=True))
        k = len(m.rows)
        m.fast.log.block(w.idx, np.zeros(k, dtype=np.int8), ("decode",), np.array(cols[0]), np.array(cols[1]),
                    np.array(cols[2]), np.array(cols[3]), np.array(cols[4]), np.zeros(k), config=m.config,
                    drafted=np.array(cols[5]), accepted=np.array(cols[6]))
        w.t, w.iteration, w.recent.value = m.t, m.iteration, m.ema
        w.need_admit = True
        m.fast.pending = pending
        m.fast.in_tail = False

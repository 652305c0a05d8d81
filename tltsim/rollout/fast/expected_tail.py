"""Expected-mode SD spans of one held decision, many at once (nothing waiting, so no admission ends a span).

Every live request emits the expected accept length per iteration whatever the spans around it, so
one ``numpy.cumsum`` over a chunk of iterations gives every span of the tail; :func:`run_tail` then
does per span what the per-span path does, in the same order with the same values.
"""

from __future__ import annotations

import numpy as np

from tltcore.policy.base import HOLD_UNTIL_EVENT, BatchView, Decision, Outcome
from tltsim.rollout.fast.expected_chunk import CELLS, EqualSums, expected_chunk, fold_recent
from tltsim.rollout.fast.spans import speculate_expected_blocks
from tltsim.rollout.fast.state import FastWorker
from tltsim.rollout.worker import _EPS, _min, _sum


def run_tail(fast: FastWorker, decision: Decision) -> None:
    """Expected-mode SD spans of one held decision, many at once (fast path, nothing waiting).

    Every live request emits the expected accept length ``a`` per iteration, so its remaining
    and emitted tokens are running sums of ``-a`` and ``a`` whatever the spans around it (a span
    ends at the first finish, and the survivors' sums go on exactly as the next span's block
    would continue them): one ``numpy.cumsum`` over a chunk of iterations gives every request's
    finishing iteration, the spans between finishes, every iteration's contexts (priced in one
    call) and the state at any span boundary. Per span, what the per-span path does is done in
    the same order with the same values: the policy is asked at every span after the first (the
    view it would get; a different answer, or the plain-phase hint, ends the tail there and the
    answer is run next), the clipped last iteration's tokens summed as numpy sums them, the
    clock, recent-accept estimate and accumulators added one iteration at a time (a run of
    equal recent-accept updates stops changing the estimate once it equals the value folded in),
    the Outcome, the retirements and the event row (one column block per chunk). What every span
    of a chunk reads (its requests, their contexts at its start, its clipped last iteration, the
    running sum of its unclipped iterations' tokens: ``add.accumulate`` along padded rows, the same
    additions one by one) is gathered once per chunk, so the loop over spans is the policy's calls
    and a few scalars."""
    config = decision.config
    w = fast.worker
    live, eps = w.live, _EPS
    a = w.draw(config, len(live))
    keep = 1.0 - w.recent.weight
    verify = config.verify_tokens
    policy, log, idx, step_no = w.policy, fast.log, w.idx, w.step_no
    by_batch = fast.by_batch  # the batch-size-only hint: no views, no Outcomes
    drafter, hint = w.drafter, w.hint
    equal = EqualSums(fast.sums, fast.accepted, a)
    ema, t, iteration = w.recent.value, w.t, w.iteration
    first = True
    chunk = 0
    while True:
        rem = live.rem
        b0 = len(live)
        need = int(float(_min(rem)) / a) + 2  # rows that surely hold a finish
        # about the iterations of the next 16, 32, 64, ... finishes (a tail may stop at any span: a
        # decision that changes with the batch), within a bounded chunk
        m = min(b0, 16 << chunk)
        reach = int(float(np.partition(rem, m - 1)[m - 1]) / a) + 2
        rows = max(need, min(reach, CELLS // b0))
        chunk += 1
        made = expected_chunk(w, a, rows, t, config)
        if made is None:  # cannot happen (rows >= need); the per-span path then
            speculate_expected_blocks(fast, config, HOLD_UNTIL_EVENT)
            return
        r, g, fin, ends, batch, clock = made.r, made.g, made.fin, made.ends, made.batch, made.clock
        last_end = made.last_end
        starts_a = np.concatenate(([0], ends[:-1]))
        starts, ends_l = starts_a.tolist(), ends.tolist()
        batch_l = batch[starts_a].tolist()
        spans_n = len(ends_l)
        # what every span of the chunk needs, gathered once (a span that is not run wastes its rows):
        # its requests (in live order), their contexts at its start, its clipped last iteration
        members = fin[None, :] > starts_a[:, None]  # (spans, requests)
        ctx_at = made.contexts(starts_a) if by_batch is None else None
        last_rows = np.minimum(r[ends - 1], a)
        # the n - 1 unclipped iterations' tokens of every span, added one by one (a running sum down
        # each row; the zeros past a row's iterations come after the entry read)
        fulls = [equal.full(b) for b in batch_l]
        widths = (ends - starts_a - 1).tolist()
        run_sums = np.zeros((spans_n, max(1, max(widths))))
        for k, (full, width) in enumerate(zip(fulls, widths, strict=True)):
            run_sums[k, :width] = full
        np.add.accumulate(run_sums, axis=1, out=run_sums)
        totals = run_sums[np.arange(spans_n), np.maximum(np.array(widths) - 1, 0)].tolist()
        counts_l = np.bincount(np.searchsorted(ends, fin[fin <= last_end]), minlength=spans_n).tolist()
        rows_out: list[tuple] = []  # (t0, t1, n, b, tokens, drafted, accepted) per span
        stop = None  # the boundary (iteration) the chunk's spans end at
        pending = None
        span = 0
        for s0, s1, b in zip(starts, ends_l, batch_l, strict=True):
            in_span = members[span]  # the span's requests, in live order
            if not first:
                if fast.plain_bound is not None:
                    bound = fast.plain_bound()
                    if bound is not None and b > bound:
                        stop = s0
                        break
                if by_batch is not None:  # it reads the batch size alone
                    d = by_batch.decision_at(b)
                else:
                    view = BatchView(b, tuple(ctx_at[span][in_span].tolist()), float(clock[s0]), iteration, ema,
                                     idx, step_no, drafter, tuple(r[s0][in_span].tolist()) if hint else ())
                    d = policy.decide(view)
                if not (d.config == config and d.hold == HOLD_UNTIL_EVENT and not d.switch_on):
                    pending, stop = d, s0
                    break
            first = False
            n = s1 - s0
            full = fulls[span]
            last = float(_sum(last_rows[span][in_span]))  # the finishing iteration, clipped
            # n - 1 unclipped iterations, then the clipped one: tokens, recent accept, accepted
            x = full / b
            total = totals[span] if n > 1 else 0.0
            ema = fold_recent(ema, x, keep, n - 1)
            total += last
            xl = last / b
            ema = xl if ema is None else xl + keep * (ema - xl)
            acc_each, acc = equal.accepted(b, n)
            t0, t1 = float(clock[s0]), float(clock[s1])
            drafted = verify * b * n
            if by_batch is None:  # (a policy deciding by batch size alone observes nothing)
                policy.observe(Outcome(config, b, round(total), t1 - t0, drafted, round(acc), t1, idx, n,
                                       (acc_each,) * b))
            rows_out.append((t0, t1, n, b, round(total), drafted, round(acc)))
            iteration += n
            # retirements at the span's end (in live order: below, for the whole chunk)
            w.done_t.append(t1)
            if w.on_finish is not None:
                w.on_finish(counts_l[span])
            span += 1
            stop = s1
        if span:  # the responses retired, span by span, each span's in live order
            w.done_n.extend(counts_l[:span])
            done = np.flatnonzero(fin <= stop)
            w.done_tokens.append(live.target[done[np.argsort(fin[done], kind="stable")]])
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
        w.t, w.iteration, w.recent.value = t, iteration, ema
        w.lag_dirty = False
        w.need_admit = True
        if pending is not None or stop < last_end or len(live) == 0:
            fast.pending = pending
            return


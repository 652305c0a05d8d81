"""``tail-batching[:prompt_ratio=P,response_ratio=R]``: RollPacker's tail batching, kept synchronous.

RollPacker (Gao et al., "RollPacker: Mitigating Long-Tail Rollouts for Fast, Synchronous RL
Post-Training", NSDI'26, arXiv 2509.21009; code: github.com/Farrrrland/RollPacker) reorders prompts
instead of relaxing synchronization: most rollout steps are **short rounds** that run speculatively and
keep the first prompts to complete, and the prompts they abort are batched together later in a few
**long rounds**. Its rules, as the paper states them and its scheduler
(``roll/distributed/scheduler/multi_async_generate_scheduler.py``, ``get_batch``) runs them:

* a short round of a batch of N prompts x n responses launches ``ceil(N P)`` prompts with ``ceil(n R)``
  responses each (the paper's eta P0 prompts x eta R0 responses; the released configuration sets
  ``max_prompts_ratio: 1.25`` and ``max_num_return_sequences: 5`` for ``num_return_sequences_in_group:
  4``, P = R = 1.25: the defaults here). A prompt is complete when n of its responses have finished;
  the round ends when N prompts are complete, each trained on its first n responses, and every other
  request is aborted;
* the prompts launched and not trained go to the long-prompt queue, their partial responses discarded;
* once the queue holds at least N prompts, the round is a long round instead: the first N queued
  prompts are launched with n responses each and no over-provisioning, and run to completion;
* every round is on-policy: a deferred prompt is regenerated from scratch under the weights of the
  round that runs it (the scheduler resubmits the prompt; the aborted responses are gone), so every
  trained sample and token has lag 0.

Here, colocated like ``sync`` (every GPU generates, then trains), one round per trace step (so a run
trains as many batches as ``sync``):

* the prompts are the trace's groups in order, as a data loader reads them (every group of every trace
  step, then none: the run's edge). Round i (version i, the trace step's N groups) is long when the
  queue holds N or more groups; otherwise it is short and takes the next ``ceil(N P)`` fresh groups
  (fewer when fewer are left). At the edge, when fewer than N fresh groups are left and the queue
  cannot fill a long round, the round is long over the queue and the last fresh groups (up to N);
* a short round's group launches its n trace responses and ``ceil(n R) - n`` copies of them, drawn by a
  seeded permutation (``(seed, step)``; beyond n extra, the permutation repeats): the extra samples
  follow the prompt's own lengths. The rollout runs every request with the SD policy and is stopped
  (:meth:`tltsim.rollout.RolloutRun.step` with ``stop=``, :func:`stop_after_first`) when N groups are
  complete: tau, the N-th group's n-th finished response. The N groups complete first (ties: launch
  order) are trained, each on its n responses that finished first (ties: launch order);
* the other groups are deferred (``deferred_groups``), queued with their n trace responses; whatever
  they generated is discarded (``discarded_tokens`` counts every token generated and not trained, the
  surplus responses of the trained groups too; ``dropped_samples`` the aborted responses);
* a long round runs its groups to the end: step time = makespan + training + weight sync, as ``sync``;
* GPU idle = each worker's wait from its last response to the round's end (a worker cut off at tau is
  not idle), as ``overprovision``.

With P = R = 1 every round is short, nothing is deferred, and it is ``sync``'s clock exactly.
Not modelled: RollPacker's other optimisations (elastic parallelism for the rollout, its reward
scheduler, the stream trainer), which tail batching enables but which are not the schedule itself; the
response-level selection trains each prompt's n shortest of ``ceil(n R)`` responses, a bias the paper
reports costs no accuracy and the simulator does not price; a deferred prompt's lengths in its long
round are the trace's (the simulator has no model of how lengths change with the weights).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from tltsim.rollout.entities import StepRequests
from tltsim.rollout.simulation import StepResult, Stop
from tltsim.strategy.overprovision import launched_groups
from tltsim.strategy.partial import Batch, Group, Pool, Requests, batch_of
from tltsim.strategy.timeline import BatchRollout, Roll, StepRow, Trainer, colocated_end, train_seconds


@dataclass(frozen=True)
class Prompt:
    """A prompt group as the data loader holds it: its prompt and the trace's response lengths (n)."""

    prompts: np.ndarray
    responses: np.ndarray


def trace_prompts(works: Sequence[StepRequests]) -> list[Prompt]:
    """Every group of the run's trace steps, in the order a data loader reads them."""
    out = []
    for w in works:
        gids = np.asarray(w.group_ids)
        prompts = np.asarray(w.prompt_tokens, dtype=np.int64)
        responses = np.asarray(w.response_tokens, dtype=np.int64)
        for g in dict.fromkeys(gids.tolist()):
            rows = gids == g
            out.append(Prompt(prompts[rows], responses[rows]))
    return out


def with_extra(p: Prompt, extra: int, rng: np.random.Generator) -> Prompt:
    """The group's n responses, then ``extra`` copies of them drawn by ``rng``'s permutation (module docstring)."""
    if extra == 0:
        return p
    picks = np.resize(rng.permutation(len(p.responses)), extra)
    return Prompt(np.concatenate([p.prompts, p.prompts[picks]]), np.concatenate([p.responses, p.responses[picks]]))


def stop_after_first(group_ids: np.ndarray, keep: dict[int, int], n: int) -> Stop:
    """Stop when ``n`` groups are complete, a group being complete when ``keep[group]`` of its responses
    have finished: at the n-th group's completion (None: never before the end)."""
    gids = np.asarray(group_ids)

    def when(whole: StepResult) -> float | None:
        finish = np.full(len(gids), np.inf)
        finish[whole.response_index] = whole.response_finish
        done = sorted(_kth(finish[gids == g], k) for g, k in keep.items())
        if n > len(done) or not np.isfinite(done[n - 1]):
            return None
        return float(done[n - 1])

    return when


def _kth(finish: np.ndarray, k: int) -> float:
    """When the k-th of these responses finished (inf: fewer than k did)."""
    return float(np.sort(finish)[k - 1]) if len(finish) >= k else float("inf")


def first_complete(reqs: Requests, b: BatchRollout, keep: dict[int, int], n: int) -> tuple[list[Group], list[int]]:
    """The ``n`` groups complete first (ties: launch order), each with the ``keep[group]`` responses that
    finished first (ties: launch order), and the keys of the other groups (launch order)."""
    if b.finish is None:
        raise ValueError("tail batching needs each response's finish time (RolloutRun(track_requests=True))")
    finish = np.where(np.isfinite(b.finish), b.finish, np.inf)
    gids = np.asarray(reqs.group_ids)
    chosen: list[tuple[float, int, list[int]]] = []
    for key, k in keep.items():
        rows = np.flatnonzero(gids == key)
        order = rows[np.lexsort((rows, finish[rows]))][:k]  # by finish, ties by launch order
        if len(order) == k and np.isfinite(finish[order]).all():
            chosen.append((float(finish[order[-1]]), key, order.tolist()))
    chosen.sort(key=lambda c: (c[0], c[1]))
    kept = chosen[:n]
    taken = {key for _, key, _ in kept}
    groups = [Group(key, [reqs.responses[i] for i in rows]) for _, key, rows in kept]
    return groups, [key for key in keep if key not in taken]


def schedule(works: Sequence[StepRequests], prompt_ratio: float, response_ratio: float, seed: int, roll: Roll,
             trainer: Trainer, label: str) -> list[StepRow]:
    """One round per trace step, short or long (module docstring)."""
    fresh, queue = trace_prompts(works), []
    used, rows, t = 0, [], 0.0
    for i, work in enumerate(works):
        step = int(work.step)
        n = len(dict.fromkeys(np.asarray(work.group_ids).tolist()))
        left = len(fresh) - used
        if len(queue) >= n or left < n:
            if len(queue) < n:  # the run's edge: the queue and the last fresh groups
                take = min(n - len(queue), left)
                queue, used = queue + fresh[used:used + take], used + take
            group_list, queue = queue[:n], queue[n:]
            if not group_list:
                break
            row = _long_round(group_list, i, step, t, roll, trainer, label)
        else:
            take = min(launched_groups(n, prompt_ratio - 1.0), left)
            row, deferred = _short_round(fresh[used:used + take], n, response_ratio, seed, i, step, t, roll,
                                         trainer, label)
            used += take
            queue += deferred
        t = row.t_end
        rows.append(replace(row, queued_groups=len(queue)))
    return rows


def _short_round(launch: list[Prompt], n: int, response_ratio: float, seed: int, version: int, step: int,
                 start: float, roll: Roll, trainer: Trainer, label: str) -> tuple[StepRow, list[Prompt]]:
    """A short round from ``start`` (module docstring): its row and the deferred groups."""
    rng = np.random.default_rng([seed, step])
    pool, keep = Pool(), {}
    for p in launch:
        wide = with_extra(p, launched_groups(len(p.responses), response_ratio - 1.0) - len(p.responses), rng)
        keep[pool.next_key] = len(p.responses)
        pool.launch(np.zeros(len(wide.responses), dtype=np.int64), wide.prompts, wide.responses)
    reqs = pool.requests(step)
    b = roll(reqs, stop_after_first(reqs.group_ids, keep, n))
    pool.record(reqs, b, version=version)
    groups, rest = first_complete(reqs, b, keep, n)
    by_key = {g.key: g for g in pool.groups}
    deferred = [Prompt(np.asarray([r.prompt for r in by_key[k].responses[:keep[k]]], dtype=np.int64),
                       np.asarray([r.target for r in by_key[k].responses[:keep[k]]], dtype=np.int64)) for k in rest]
    batch = batch_of(groups, version)
    generated = b.generated if b.generated is not None else np.asarray(reqs.response_tokens)
    discarded = int(np.sum(generated)) - int(batch.response_tokens.sum())
    row = _row(label, step, start, b, batch, trainer, dropped=len(reqs.responses) - len(batch.lag), kind="short",
               deferred=len(deferred), discarded=discarded)
    return row, deferred


def _long_round(groups: list[Prompt], version: int, step: int, start: float, roll: Roll, trainer: Trainer,
                label: str) -> StepRow:
    """A long round: the queued groups with their n responses each, run to the end (module docstring)."""
    pool = Pool()
    for p in groups:
        pool.launch(np.zeros(len(p.responses), dtype=np.int64), p.prompts, p.responses)
    reqs = pool.requests(step)
    b = roll(reqs, None)
    pool.record(reqs, b, version=version)
    batch = batch_of(pool.take([g.key for g in pool.groups]), version)
    return _row(label, step, start, b, batch, trainer, dropped=0, kind="long", deferred=0, discarded=0)


def _row(label: str, step: int, start: float, b: BatchRollout, batch: Batch, trainer: Trainer, *, dropped: int,
         kind: str, deferred: int, discarded: int) -> StepRow:
    """The round's row from ``start``: rollout, training, weight sync, added in ``sync``'s order."""
    p = trainer(batch.prompt_tokens, batch.response_tokens)
    return StepRow(label, step, start, colocated_end(start, b.makespan, p), b.makespan, train_seconds(p),
                   p.weight_sync, len(batch.lag), int(batch.response_tokens.sum()), dropped, b.gpus,
                   b.tail_idle(b.makespan), batch.lag,
                   batch.response_tokens, round=kind, deferred_groups=deferred, discarded_tokens=discarded)


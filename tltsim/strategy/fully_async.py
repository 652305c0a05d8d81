"""``async:staleness=K``: fully asynchronous RL with partial rollout (AReaL; verl's fully-async trainer).

A rollout pool generates continuously and hands each prompt group to the trainer as it completes; the
trainer (a separate pool of ``trainer_gpus`` GPUs) trains as soon as it is free and N groups are ready,
and after each update the new weights are synced to the rollout pool mid-rollout: the rollout pauses
for the sync, and its unfinished responses continue under the new version, their generated tokens
re-prefilled (:mod:`tltsim.strategy.partial`). AReaL calls this interruptible rollout (Fu et al.,
arXiv 2505.24298); verl's fully-async trainer does the same with ``partial_rollout`` (verl
documentation, "Recipe: Fully Async Policy Trainer").

The staleness bound is AReaL's ``max_head_offpolicyness`` rule, as its ``StalenessManager`` computes
it (inclusionAI/AReaL, ``areal/infra/staleness_manager.py``, ``get_capacity``): with the rollout pool at
version v, a new group may be launched only while the groups launched so far (completed or running)
number fewer than ``(K + v + 1) N``. Nothing is aborted or regenerated: the bound holds launches
back instead ("this ensures that by the time samples are consumed, they won't exceed the maximum
allowed staleness", ibid.). Here the lag of every trained sample and token is measured, not assumed
(``lag.csv``; a sample's lag is its oldest token's). verl's ``staleness_threshold`` (a share of stale
samples per sync) is a different rule and is not modelled.

The schedule, per batch i (trained by version i, producing version i + 1), with S_0 = 0:

* the rollout pool runs segment i from S_i under version i: the carried responses, then the new groups
  the bound allows, taken in order from the run's trace steps (none once they are used up: the run's
  edge, where the tail comes back);
* the trainer takes the first N groups to complete (carried complete ones first, then by completion;
  ties by launch order): ready at r_i; it starts at max(S_i, r_i) and ends the update at U_i = start +
  reward + old log-probs + reference + actor update (priced on the trainer pool);
* the segment is stopped at U_i (:meth:`tltsim.rollout.RolloutRun.step` with ``stop=``); its unfinished
  responses are carried; if it ran out of work earlier, the rollout pool idles until U_i;
* the weight sync takes [U_i, U_i + W] on both pools; S_{i+1} = U_i + W. Step i's window is
  [S_i, S_{i+1}].

GPU idle of step i: each rollout worker from its last response to U_i (x TP) and the trainer waiting
for its batch ((start - S_i) x trainer GPUs). With K = 0 the pool launches N groups per version and
the trainer waits for all of them: the synchronous step on two pools.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tltsim.rollout.entities import StepRequests
from tltsim.rollout.simulation import StepResult
from tltsim.strategy.partial import Pool, batch_of, completion_order
from tltsim.strategy.timeline import Roll, StepRow, Trainer, train_seconds


def schedule(works: Sequence[StepRequests], staleness: int, roll: Roll, trainer: Trainer, trainer_gpus: int,
             label: str) -> list[StepRow]:
    """One batch per trace step, fully asynchronous (module docstring)."""
    fresh_groups: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for w in works:  # every group of the run's trace steps, in the order they are launched
        gids = np.asarray(w.group_ids)
        prompts = np.asarray(w.prompt_tokens, dtype=np.int64)
        responses = np.asarray(w.response_tokens, dtype=np.int64)
        for g in dict.fromkeys(gids.tolist()):
            rows = gids == g
            fresh_groups.append((gids[rows], prompts[rows], responses[rows]))
    pool, rows, s_i, launched = Pool(), [], 0.0, 0
    for i, work in enumerate(works):
        n = len(dict.fromkeys(np.asarray(work.group_ids).tolist()))
        allowed = min((staleness + i + 1) * n - launched, len(fresh_groups) - launched)
        for gids, prompts, responses in fresh_groups[launched:launched + max(allowed, 0)]:
            pool.launch(gids, prompts, responses)
        launched += max(allowed, 0)
        reqs = pool.requests(int(work.step))
        plan: dict[str, object] = {}

        def stop(whole: StepResult, n=n, reqs=reqs, plan=plan) -> float | None:
            """Where the update ends: the trainer's batch is the first N groups to complete."""
            order = _order(pool, reqs, whole)[:n]
            if len(order) < n:
                raise RuntimeError(f"only {len(order)} of the {n} groups of a batch can complete")
            ready = order[-1][0]
            keys = {key for _, key in order}
            rs = [r for g in pool.groups if g.key in keys for r in g.responses]
            p = trainer(np.asarray([r.prompt for r in rs], dtype=np.int64),
                        np.asarray([r.target for r in rs], dtype=np.int64))
            start = max(0.0, ready)
            plan.update(ready=ready, start=start, phases=p, end=start + train_seconds(p))
            return whole.t_start + float(plan["end"])  # type: ignore[arg-type]

        b = roll(reqs, stop)
        end, start, p = float(plan["end"]), float(plan["start"]), plan["phases"]
        order = completion_order(pool, pool.record(reqs, b, version=i))[:n]
        batch = batch_of(pool.take(sorted(key for _, key in order)), i)
        idle = b.tail_idle(end) + start * trainer_gpus
        t_end = s_i + end + p.weight_sync  # type: ignore[attr-defined]
        rows.append(StepRow(label, int(work.step), s_i, t_end, end, train_seconds(p), p.weight_sync,  # type: ignore[arg-type]
                            len(batch.lag), int(batch.response_tokens.sum()), 0, b.gpus + trainer_gpus, idle,
                            batch.lag, batch.response_tokens, pool.carried(), batch.piece_lag, batch.piece_tokens))
        s_i = t_end
    return rows


def _order(pool: Pool, reqs, whole: StepResult) -> list[tuple[float, int]]:
    """The complete groups in the order the trainer takes them, had the segment run to its end
    (``whole``, times since its start), without touching the pool."""
    finish = np.full(len(reqs.responses), np.inf)
    finish[whole.response_index] = whole.response_finish - whole.t_start
    done_at: dict[int, float] = {}
    for key, f in zip(reqs.group_ids.tolist(), finish.tolist(), strict=True):
        done_at[key] = max(done_at.get(key, 0.0), f)
    out = [(done_at.get(g.key, 0.0), g.key) for g in pool.groups if g.complete or g.key in done_at]
    return sorted(t for t in out if np.isfinite(t[0]))

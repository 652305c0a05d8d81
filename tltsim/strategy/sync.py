"""``sync``: today's synchronous RL step, colocated (veRL's hybrid engine, TLT).

Every GPU generates batch k with the weights of version k (the actor after k updates); once the last
response is done, every GPU trains: reward, old log-probs, reference, actor update, then the new
weights (version k+1) are synced into the rollout engine and batch k+1 starts. Rules:

* step time = rollout makespan + reward + old log-probs + reference + actor update + weight sync,
  added in that order as :mod:`tltsim.rl.run` adds them;
* lag 0 for every sample and token (trained by the version that generated it);
* GPU idle = the rollout's tail (each worker from its last response to the makespan, x TP), the
  ``gpu_idle_s`` of ``summary.csv``; the training phases use every GPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tltsim.strategy.timeline import BatchRollout, StepRow, Trainer, colocated_end, train_seconds


def schedule(batches: Sequence[BatchRollout], trainer: Trainer, label: str = "sync") -> list[StepRow]:
    """The run's steps back to back (module docstring)."""
    rows, t = [], 0.0
    for b in batches:
        p = trainer(b.prompt_tokens, b.response_tokens)
        start = t
        t = colocated_end(start, b.makespan, p)
        n = len(b.response_tokens)
        rows.append(StepRow(label, b.step, start, t, b.makespan, train_seconds(p), p.weight_sync, n,
                            int(np.sum(b.response_tokens)), 0, b.gpus, b.tail_idle(b.makespan),
                            np.zeros(n, dtype=np.int64), np.asarray(b.response_tokens, dtype=np.int64)))
    return rows

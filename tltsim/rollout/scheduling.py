"""Admission and prefill packing: which waiting requests a worker starts, and in which passes.

* **Admission** is first-come-first-served while the running batch is below ``max_batch`` and the KV
  cache has room. *Reservation rule*: a request reserves ``prompt + response`` tokens of KV at
  admission (its peak footprint, which the simulator knows from the trace) and frees them when it
  finishes. This never preempts, like a vLLM instance that happens never to run out of blocks; it
  is slightly more conservative than vLLM's on-demand paging.
* **Prefill packing**: requests are packed in order into passes of at most ``budget`` new tokens; a
  request longer than the budget is chunked over passes, later chunks attending to earlier ones
  (vLLM's chunked prefill with prefill priority).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def admissible(reserve: np.ndarray, free_slots: int, free_kv: int) -> int:
    """How many of the waiting requests (in order, each reserving ``reserve[i]`` KV tokens) start
    now: at most ``free_slots``, and only while their reservations fit in ``free_kv``."""
    if free_slots <= 0 or len(reserve) == 0:
        return 0
    need = np.cumsum(reserve[:free_slots])
    return int(np.searchsorted(need, free_kv, side="right"))


def prefill_passes(new_tokens: np.ndarray, cached_tokens: np.ndarray, budget: int
                   ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Passes of at most ``budget`` new tokens, as (new, cached) per-request chunk arrays.

    Scalar Python on purpose: a pass holds a few chunks, where numpy's per-call overhead would
    dominate."""
    todo = new_tokens.tolist()
    done = cached_tokens.tolist()
    i, n = 0, len(todo)
    while i < n:
        room = budget
        new: list[int] = []
        old: list[int] = []
        while i < n and room > 0:
            take = min(room, todo[i])
            if take > 0:
                new.append(take)
                old.append(done[i])
                todo[i] -= take
                done[i] += take
                room -= take
            if todo[i] == 0:
                i += 1
        if new:
            yield np.asarray(new, dtype=np.int64), np.asarray(old, dtype=np.int64)

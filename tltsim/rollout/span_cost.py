"""Adapters from the simulator's fast paths to the cost model's batched forms; this module will go.

The formulas live once, in the cost models, each scalar form with its batched form beside it
(:class:`~tltcore.cost.protocol.PagedKVTimes`: :class:`~tltcore.cost.roofline.RooflineCostModel` and
:class:`~tltcore.drafter.kinds.ModelFreeDraftCost`). These functions keep the names and signatures the
worker's accelerated paths call while they move (issue 40): each returns the cost model's bound method,
or None where the model declares no batched forms (``paged_kv_times()`` is None, or it is no
:class:`~tltcore.cost.protocol.CostModelBase`) and the worker prices call by call. Callers should ask
``cost.paged_kv_times()`` once and call its methods directly.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tltcore.cost.protocol import CostModelBase, PagedKVTimes

SpanPricer = Callable[..., list[float]]
PrefillPricer = Callable[[np.ndarray, np.ndarray, int, bool, bool], tuple[float, int]]
PlainPricer = Callable[[np.ndarray, int], float]
PlainPhasePricer = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def _paged(cost: object) -> PagedKVTimes | None:
    return cost.paged_kv_times() if isinstance(cost, CostModelBase) else None


def block_size(cost: object) -> int:
    """The paged-KV block size the batched forms of ``cost`` use (1 when it has none)."""
    paged = _paged(cost)
    return 1 if paged is None else int(paged.kv_block_size)


def span_pricer(cost: object) -> SpanPricer | None:
    """``PagedKVTimes.sd_rows_times``, or None."""
    paged = _paged(cost)
    return None if paged is None else paged.sd_rows_times


def sd_rows_pricer(cost: object) -> Callable[[np.ndarray, np.ndarray, np.ndarray, object], np.ndarray] | None:
    """``PagedKVTimes.sd_times_from_sums``, or None."""
    paged = _paged(cost)
    return None if paged is None else paged.sd_times_from_sums


def prefill_pricer(cost: object) -> PrefillPricer | None:
    """``PagedKVTimes.prefill_passes_time``, or None."""
    paged = _paged(cost)
    return None if paged is None else paged.prefill_passes_time


def plain_pricer(cost: object) -> PlainPricer | None:
    """``PagedKVTimes.decode_span_time_of``, or None (also where plain decoding is not memory-bound)."""
    paged = _paged(cost)
    return paged.decode_span_time_of if paged is not None and paged.memory_bound_decode else None


def plain_phase_pricer(cost: object) -> PlainPhasePricer | None:
    """``PagedKVTimes.decode_spans_time``, or None where :func:`plain_pricer` is."""
    paged = _paged(cost)
    return paged.decode_spans_time if paged is not None and paged.memory_bound_decode else None

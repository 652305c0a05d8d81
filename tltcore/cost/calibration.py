"""Fitting cost-model constants to measured or published SD speedups."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from tltcore.cost.roofline import RooflineCostModel
from tltcore.policy.base import SDConfig


@dataclass(frozen=True)
class SDMeasurement:
    """One published / measured SD data point: shape, batch, accept length and speedup over plain
    decode at the same batch (speedup = accept x decode_time / sd_time)."""

    batch_size: int
    depth: int
    topk: int
    verify_tokens: int
    accept_length: float
    speedup: float


def fit_sd_overheads(model: RooflineCostModel, points: Sequence[SDMeasurement],
                     context: int = 1024) -> tuple[float, float]:
    """(draft_step_overhead_s, sd_overhead_s) that best explain measured SD speedups on top of
    ``model``'s kernels: linear least squares, relative to each point's implied SD time, both
    clipped at 0. ``model``'s own SD overheads are ignored."""
    bare = replace(model, draft_step_overhead_s=0.0, sd_overhead_s=0.0)
    design, gap, weight = [], [], []
    for p in points:
        ctx = np.full(p.batch_size, context)
        implied = p.accept_length * bare.decode_time(ctx) / p.speedup
        design.append((p.depth, 1.0))
        gap.append(implied - bare.sd_time(ctx, SDConfig(p.depth, p.topk, p.verify_tokens)))
        weight.append(1.0 / implied)
    w = np.array(weight)
    coef, *_ = np.linalg.lstsq(np.array(design) * w[:, None], np.array(gap) * w, rcond=None)
    return max(float(coef[0]), 0.0), max(float(coef[1]), 0.0)

"""``tlt sim run``'s answer in the user's units: per policy (or preset), hours, GPU-hours, dollars and
energy for N RL steps (``--for-steps``; default the simulated steps), priced as ``tlt advise`` prices
them (:mod:`tltcore.prices`), median (min-max) over the seeds run."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from rich.table import Table

from tltcore.prices import StepsCost, busy_share, energy_assumption, missing_price, resolve_price


def units_table(s: Any, frame: pd.DataFrame, *, name: str, seconds: str, idle: str | None, for_steps: int | None,
                prices: dict[str, float], usd_per_kwh: float | None, whole_steps: bool) -> tuple[Table, list[str]]:
    """A table of ``frame``'s rows (one per ``name`` and seed; ``seconds`` the simulated run's seconds over
    its ``steps`` steps, ``idle`` its idle GPU-seconds) in hours, GPU-hours, dollars and kWh for N steps,
    and the lines saying the price and the energy assumption."""
    from tltsim.scenario import scenario_gpu

    gpu = scenario_gpu(s)
    price = resolve_price(gpu.name, prices, s.cluster.usd_per_gpu_hour)
    kwh_price = usd_per_kwh if usd_per_kwh is not None else s.cluster.usd_per_kwh
    ok = frame[frame["status"] == "ok"] if "status" in frame else frame
    sim_steps = int(ok["steps"].max()) if len(ok) else 1
    n = for_steps if for_steps is not None else sim_steps
    rows: dict[str, list[StepsCost]] = {}
    for r in ok.to_dict("records"):
        total = float(r[seconds])
        busy = busy_share(float(r[idle]), s.cluster.gpus, total) if idle else 1.0
        rows.setdefault(str(r[name]), []).append(StepsCost(
            s.cluster.gpus, n, total / max(1, int(r["steps"])), price.usd_per_gpu_hour if price else None,
            gpu.board_power_w, busy, kwh_price))
    what = "whole RL steps" if whole_steps else "rollout only (--preset simulates whole RL steps)"
    why = "--for-steps" if for_steps is not None else "the simulated steps"
    table = Table(title=f"{n:,} RL step{'s' if n != 1 else ''} ({why}) on {s.cluster.gpus} x {gpu.name}, {what}: "
                        "median (min–max) over the seeds")
    cols = ["hours", "GPU-h"] + (["$"] if price else []) + (["kWh"] if gpu.board_power_w else []) + (
        ["energy $"] if gpu.board_power_w and kwh_price is not None else [])
    table.add_column(name, no_wrap=True)
    for c in cols:
        table.add_column(c, justify="right", no_wrap=True)
    for label, costs in rows.items():
        cells = [_cell([c.hours for c in costs], ".2f"), _cell([c.gpu_hours for c in costs], ",.1f")]
        if price:
            cells.append(_cell([c.usd or 0.0 for c in costs], ",.2f"))
        if gpu.board_power_w:
            cells.append(_cell([c.kwh or 0.0 for c in costs], ",.1f"))
            if kwh_price is not None:
                cells.append(_cell([c.energy_usd or 0.0 for c in costs], ",.2f"))
        table.add_row(label, *cells)
    lines = ["prices: " + (price.describe() if price else missing_price(gpu.name)),
             energy_assumption(gpu.board_power_w, gpu.name)
             + (f"; electricity ${kwh_price:g}/kWh" if kwh_price is not None and gpu.board_power_w else "")]
    return table, lines


def _cell(values: list[float], spec: str) -> str:
    v = np.array([x for x in values if math.isfinite(x)], dtype=float)
    if not len(v):
        return "–"
    med = format(float(np.median(v)), spec)
    return med if len(v) == 1 else f"{med} ({format(float(v.min()), spec)}–{format(float(v.max()), spec)})"


__all__ = ["units_table"]


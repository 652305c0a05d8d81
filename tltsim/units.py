"""Answers in the user's units: what N RL steps take in hours, GPU-hours, dollars and energy, with and
without speculative decoding, from the simulated runs a speedup is read from.

A simulated run gives a rollout makespan over the steps it simulated; advise adds the phases after
rollout (:func:`tltsim.advise.later_phase_seconds`) for the whole RL step. Per run (one seed, at the
scenario's inputs or one unmeasured variant of :mod:`tltsim.robustness`) the step time is

    step seconds = (rollout seconds + later-phase seconds) / simulated steps

and N steps cost what :class:`tltcore.prices.StepsCost` says. The median is over the seeds at the
scenario's own inputs, as every advise median is; the band is the min-max over *every* run the
speedup's band comes from (seeds x unmeasured variants), each saving paired at the same seed and variant.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tltcore.prices import GpuPrice, StepsCost, busy_share, energy_assumption
from tltsim.scenario import BASELINE_POLICY, Scenario

#: The variant name of the runs at the scenario's own inputs.
NOMINAL = ""
METRICS = ("hours", "gpu_hours", "usd", "kwh", "energy_usd")


def default_steps(s: Scenario) -> tuple[int, str]:
    """N when the user gives none, and why: the trace's steps when it has several (a real run's
    length), else ``trace.num_steps`` when above 1, else one step (said)."""
    from tltsim.scenario import trace_rows

    df = trace_rows(s.trace)
    n = int(df["step"].nunique())
    if n > 1:
        return n, f"the trace's {n} steps"
    if s.trace.num_steps > 1:
        return s.trace.num_steps, f"trace.num_steps = {s.trace.num_steps}"
    return 1, "one step: the trace has one (--steps N for your run's length)"


def paired_runs(runs: pd.DataFrame, sd_label: str, later_s: float | None, sim_steps: int,
                gpus: int) -> pd.DataFrame:
    """One row per (variant, seed) with no SD's and ``sd_label``'s step seconds and busy share:
    ``runs`` holds ``variant``, ``seed``, ``label``, ``rollout_s`` and (optionally) ``gpu_idle_s``
    rows of whole simulated runs of ``sim_steps`` steps; ``later_s`` (None: rollout only) is the
    later phases' seconds over those steps, every GPU busy in them."""
    later = later_s if later_s is not None and math.isfinite(later_s) else 0.0
    if "gpu_idle_s" not in runs:
        runs = runs.assign(gpu_idle_s=0.0)

    def side(label: str) -> pd.DataFrame:
        part = runs[runs["label"] == label].drop_duplicates(["variant", "seed"]).set_index(["variant", "seed"])
        total = part["rollout_s"].astype(float) + later
        busy = busy_share(part["gpu_idle_s"].to_numpy(float), gpus, total.to_numpy())
        return pd.DataFrame({"step_s": total / sim_steps, "busy": busy,
                             "rollout_s": part["rollout_s"].astype(float)})

    base, sd = side(BASELINE_POLICY).add_suffix("_base"), side(sd_label).add_suffix("_sd")
    both = base.join(sd, how="inner").reset_index()
    both["rollout_speedup"] = both["rollout_s_base"] / both["rollout_s_sd"]
    return both


@dataclass(frozen=True)
class StepsAnswer:
    """N RL steps without SD and with ``sd_label``, per run (``runs``: :func:`paired_runs`) and priced."""

    steps: int
    steps_why: str
    gpus: int
    gpu: str
    sd_label: str
    recommended: bool  # sd_label is the recommendation (else the best SD setting, not recommended)
    price: GpuPrice | None
    missing_price: str  # what to pass when price is None
    board_power_w: float | None
    usd_per_kwh: float | None
    with_later: bool  # whether the step time includes the phases after rollout
    runs: pd.DataFrame = field(default_factory=pd.DataFrame)

    def _cost(self, step_s: float, busy: float) -> StepsCost:
        return StepsCost(self.gpus, self.steps, step_s, self.price.usd_per_gpu_hour if self.price else None,
                         self.board_power_w, busy, self.usd_per_kwh)

    def per_run(self) -> pd.DataFrame:
        """Per run: each metric for no SD (``_base``), SD (``_sd``) and the saving (``_saving``)."""
        return self._per_run.copy()

    @functools.cached_property
    def _per_run(self) -> pd.DataFrame:
        """:meth:`per_run`, computed once: :meth:`triple` reads it for every metric of every setting (a
        table and the screen's lines asked for it ~40 times, each a StepsCost per run and metric)."""
        out = self.runs[["variant", "seed", "rollout_speedup"]].copy()
        for side in ("base", "sd"):
            costs = [self._cost(s, b) for s, b in zip(self.runs[f"step_s_{side}"], self.runs[f"busy_{side}"],
                                                       strict=True)]
            out[f"step_s_{side}"] = self.runs[f"step_s_{side}"].to_numpy()
            for m in METRICS:
                out[f"{m}_{side}"] = [self._metric(c, m) for c in costs]
        for m in ("step_s", *METRICS):
            out[f"{m}_saving"] = out[f"{m}_base"] - out[f"{m}_sd"]
        return out

    def _metric(self, c: StepsCost, m: str) -> float:
        v = getattr(c, m)
        return float("nan") if v is None else float(v)

    def triple(self, column: str) -> tuple[float, float, float]:
        """Median over the seeds at the scenario's inputs, min and max over every run."""
        t = self._per_run
        allv = t[column].to_numpy(dtype=float)
        nominal = t.loc[t["variant"] == NOMINAL, column].to_numpy(dtype=float)
        if not len(allv) or not np.isfinite(allv).any():
            return (float("nan"),) * 3
        med = float(np.median(nominal)) if len(nominal) else float(np.median(allv))
        return med, float(np.nanmin(allv)), float(np.nanmax(allv))

    def table(self) -> pd.DataFrame:
        """One row per setting (no SD, SD, saving): median, min, max of each metric (``units.csv``)."""
        rows = []
        for side, name in (("base", BASELINE_POLICY), ("sd", self.sd_label), ("saving", "saving")):
            row: dict[str, object] = {"setting": name, "steps": self.steps, "gpus": self.gpus}
            for m in ("step_s", *METRICS):
                med, lo, hi = self.triple(f"{m}_{side}")
                row.update({f"{m}_median": med, f"{m}_min": lo, f"{m}_max": hi})
            rows.append(row)
        return pd.DataFrame(rows)

    def lines(self) -> list[str]:
        """The screen's four lines: the sentence with its band, each setting's medians, the price
        and the energy assumption."""
        n = len(self.runs)
        what = "whole RL steps (rollout + the phases after it)" if self.with_later else "rollout only"
        h, usd = self.triple("hours_saving"), self.triple("usd_saving")
        sign = 1 if not h[0] < 0 else -1
        money = f" and {_usd(sign * usd[0])}" if self.price else ""
        band = f"band {_num(h[1])}-{_num(h[2])} h" + (f", {_usd(usd[1])}-{_usd(usd[2])}" if self.price else "")
        who = "SD" if self.recommended else f"the best SD setting ({self.sd_label}; not recommended)"
        runs = f"{n} run{'s' if n != 1 else ''} (seeds x unmeasured inputs)"
        steps = f"{self.steps:,} step{'s' if self.steps != 1 else ''}"
        spread = f"{band}; {runs}" if n > 1 else "one run, no band: more seeds and no --quick give one"
        out = [f"{who} {'saves' if sign > 0 else 'costs'} {_num(sign * h[0])} h{money} over {steps} ({spread})"]
        sides = []
        for side, name in (("base", "no SD"), ("sd", self.sd_label)):
            parts = [f"{_num(self.triple(f'hours_{side}')[0])} h", f"{_num(self.triple(f'gpu_hours_{side}')[0])} GPU-h"]
            if self.price:
                parts.append(_usd(self.triple(f"usd_{side}")[0]))
            if self.board_power_w is not None:
                parts.append(f"{_num(self.triple(f'kwh_{side}')[0])} kWh")
                if self.usd_per_kwh is not None:
                    parts.append(_usd(self.triple(f"energy_usd_{side}")[0]) + " of energy")
            sides.append(f"{name} " + ", ".join(parts))
        out.append(f"  {steps} ({self.steps_why}) on {self.gpus} x {self.gpu}, {what}, median: " + "; ".join(sides))
        out.append("  prices: " + (self.price.describe() if self.price else self.missing_price))
        out.append("  " + energy_assumption(self.board_power_w, self.gpu)
                   + (f"; electricity ${self.usd_per_kwh:g}/kWh" if self.usd_per_kwh is not None
                      and self.board_power_w is not None else ""))
        return out


def _num(x: float) -> str:
    """Whole numbers from 100 up, one decimal from 1, three significant digits below."""
    if not math.isfinite(x):
        return "–"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.1f}" if abs(x) >= 1 else f"{x:.3g}"


def _usd(x: float) -> str:
    """Whole dollars from $100 up, cents below."""
    if not math.isfinite(x):
        return "–"
    sign, x = ("-" if x < 0 else ""), abs(x)
    return f"{sign}${x:,.0f}" if x >= 100 else f"{sign}${x:,.2f}"


__all__ = ["METRICS", "NOMINAL", "StepsAnswer", "default_steps", "paired_runs"]

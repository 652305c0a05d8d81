"""One scenario over several simulation seeds, and every speedup and makespan as a median with its range.

``tlt sim run --seeds N`` runs the scenario with ``seed, seed + 1, …, seed + N - 1`` as the scenario's
top-level ``seed``: which worker serves which prompt group (``trace.deal = "shuffle"``), the
stochastic accept lengths and the policies' exploration (BEG-MAB's bandits) follow it. ``trace.seed``
stays: every seed simulates the same responses, so the spread is the simulation's own (dealing and
sampling), not a different workload's.

The answer for each policy (or preset) and metric is the **median** over the seeds with the min and
the max (:func:`aggregate`): a median, not a mean, because one unlucky deal that strands a 16K-token
response on one worker moves a mean by itself. :func:`ranking_flip` says when the median order of
the policies is not the order of some seed.

The seed runs reuse one prepared workload (:func:`tltsim.scenario.prepare` reads only ``trace.seed``
and never the simulation seed) and call the public runners (:func:`tltsim.scenario.compare_policies`,
:func:`tltsim.rl.run.compare_presets`) once per seed, so seed ``k`` here is exactly ``tlt sim run
--seed k``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from tltcore.errors import InputError
from tltcore.summary import run_totals
from tltsim.scenario import MAX_SEED, Scenario, SimInputs, compare_policies, prepare, with_values

#: Most seeds one command runs: each is a whole simulation of every policy; past a thousand a
#: median does not move and the command would run for hours.
MAX_SEEDS = 1000

#: The metrics summarised over seeds, per kind of run: (table, columns). The one-seed tables' accept
#: length and tokens/s come after the first ones, so the CSV columns written before them keep their places.
POLICY_METRICS = ("makespan_s", "speedup", "mean_accept_length", "tokens_per_s")
TOTAL_METRICS = ("rollout_s", "speedup", "mean_accept_length")
PRESET_METRICS = ("total_s", "rollout_s", "speedup", "rollout_speedup", "mean_accept_length")


def check_seeds(n: int, seed: int = 0, *, option: str = "--seeds") -> int:
    """``n`` when it is a number of seeds one command can run from ``seed``, else one InputError
    naming ``option``."""
    if isinstance(n, bool) or not isinstance(n, int | np.integer):
        raise InputError(f"must be a whole number of seeds, got {n!r}", path=option)
    if n < 1:
        raise InputError(f"must be >= 1 (the number of simulation seeds to run), got {n}", path=option)
    if n > MAX_SEEDS:
        raise InputError(f"must be <= {MAX_SEEDS:,} (each seed simulates every policy again), got {n:,}",
                         path=option)
    if seed + n - 1 > MAX_SEED:
        raise InputError(f"seed {seed} + {n} seeds passes the largest seed {MAX_SEED}", path=option)
    return int(n)


def seed_values(seed: int, n: int) -> list[int]:
    """The simulation seeds ``--seeds n`` runs: ``seed, seed + 1, …, seed + n - 1``."""
    return [seed + k for k in range(check_seeds(n, seed))]


def with_seed(s: Scenario, inputs: SimInputs, seed: int) -> tuple[Scenario, SimInputs]:
    """The scenario and its prepared inputs with the simulation seed ``seed`` (the workload is the
    same: it depends on ``trace.seed`` only)."""
    if seed == s.seed:
        return s, inputs
    sk = with_values(s, {"seed": seed})
    return sk, replace(inputs, scenario=sk)


@dataclass(frozen=True)
class SeedRuns:
    """Every seed's results, stacked with a leading ``seed`` column.

    Policies mode: ``events`` and ``summary`` (per policy and step, as ``tlt sim run`` writes them)
    and ``totals`` (per policy, whole run; :func:`tltcore.summary.run_totals`). Presets mode:
    ``events``, ``steps`` (per preset and step) and ``summary`` (per preset); ``totals`` is None."""

    seeds: tuple[int, ...]
    events: pd.DataFrame
    summary: pd.DataFrame
    totals: pd.DataFrame | None = None
    steps: pd.DataFrame | None = None

    @property
    def presets(self) -> bool:
        return self.totals is None


def _stack(frames: Sequence[pd.DataFrame], seeds: Sequence[int]) -> pd.DataFrame:
    parts = [f.assign(seed=k)[["seed", *f.columns]] for f, k in zip(frames, seeds, strict=True) if not f.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


#: ``on_seed(seed, events, summary)``: one seed's tables as its runner returned them, before the next seed runs.
SeedHook = Callable[[int, pd.DataFrame, pd.DataFrame], None]


def run_policy_seeds(s: Scenario, n: int, inputs: SimInputs | None = None, *,
                     progress: Callable[[int], None] | None = None,
                     on_policy: Callable[[int, str], None] | None = None,
                     on_seed: SeedHook | None = None, keep_events: bool = True) -> SeedRuns:
    """:func:`~tltsim.scenario.compare_policies` at each of the ``n`` seeds from ``s.seed``;
    ``on_policy(seed, spec)`` is called before each policy of each seed, ``on_seed`` after each seed.
    ``keep_events=False``: ``events`` is left empty (a caller that writes and checks each seed's events
    in ``on_seed`` need not hold every seed's table at once: most of a long run's memory)."""
    seeds = seed_values(s.seed, n)
    inputs = inputs or prepare(s)
    events, summaries, totals = [], [], []
    for k in seeds:
        sk, ik = with_seed(s, inputs, k)
        hook = (lambda spec, k=k: on_policy(k, spec)) if on_policy is not None else None
        ev, summ = compare_policies(sk, ik, progress=progress, on_policy=hook)
        if on_seed is not None:
            on_seed(k, ev, summ)
        if keep_events:
            events.append(ev)
        del ev
        summaries.append(summ)
        totals.append(run_totals(summ, gpus=s.cluster.gpus))
    return SeedRuns(tuple(seeds), _stack(events, seeds) if keep_events else pd.DataFrame(), _stack(summaries, seeds),
                    _stack(totals, seeds))


def run_preset_seeds(s: Scenario, n: int, inputs: SimInputs | None = None, *,
                     progress: Callable[[int], None] | None = None,
                     on_preset: Callable[[int, str], None] | None = None,
                     on_seed: SeedHook | None = None, keep_events: bool = True,
                     on_events: Callable[[int, pd.DataFrame], None] | None = None) -> SeedRuns:
    """:func:`tltsim.rl.run.compare_presets` at each of the ``n`` seeds from ``s.seed``
    (``on_seed``, ``keep_events``: as :func:`run_policy_seeds`). ``on_events(seed, events)``: each
    preset's events as its run ends; with it and ``keep_events=False`` no preset's events outlive
    that call, and ``on_seed`` gets an empty event table (a long run held two presets' tables and
    their concatenation at once)."""
    from tltsim.rl.run import compare_presets

    seeds = seed_values(s.seed, n)
    inputs = inputs or prepare(s)
    events, steps, summaries = [], [], []
    for k in seeds:
        sk, ik = with_seed(s, inputs, k)
        hook = (lambda name, k=k: on_preset(k, name)) if on_preset is not None else None
        each = (lambda events, k=k: on_events(k, events)) if on_events is not None else None
        ev, st, summ = compare_presets(sk, ik, progress=progress, on_preset=hook, on_events=each,
                                       keep_events=keep_events or on_events is None)
        if on_seed is not None:
            on_seed(k, ev, summ)
        if keep_events:
            events.append(ev)
        del ev
        steps.append(st)
        summaries.append(summ)
    return SeedRuns(tuple(seeds), _stack(events, seeds) if keep_events else pd.DataFrame(), _stack(summaries, seeds),
                    None, _stack(steps, seeds))


def aggregate(per_seed: pd.DataFrame, keys: Sequence[str], metrics: Sequence[str]) -> pd.DataFrame:
    """One row per ``keys`` (first-seen order) with ``seeds`` (how many seeds have a value) and, per
    metric, ``<metric>_median``, ``<metric>_min`` and ``<metric>_max`` over the seeds (NaN values,
    e.g. a preset out of memory, are left out; all NaN gives NaN)."""
    rows = []
    for key, part in per_seed.groupby(list(keys), sort=False):
        key = key if isinstance(key, tuple) else (key,)
        row: dict[str, object] = dict(zip(keys, key, strict=True))
        present = [m for m in metrics if m in part]
        values = {m: pd.to_numeric(part[m], errors="coerce").to_numpy(dtype=float) for m in present}
        row["seeds"] = int(max((np.isfinite(v).sum() for v in values.values()), default=0))
        for m in metrics:
            v = values.get(m, np.array([]))
            v = v[np.isfinite(v)]
            row[f"{m}_median"] = float(np.median(v)) if v.size else float("nan")
            row[f"{m}_min"] = float(v.min()) if v.size else float("nan")
            row[f"{m}_max"] = float(v.max()) if v.size else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)


def seeds_summary(runs: SeedRuns) -> pd.DataFrame:
    """``seeds_summary.csv``: one row per (policy, step) (policies mode) or per preset (presets mode)
    with the median, min and max over the seeds of each speedup, makespan, accept length and (policies)
    tokens/s."""
    if runs.presets:
        return aggregate(runs.summary, ["preset"], PRESET_METRICS)
    return aggregate(runs.summary, ["policy", "step"], POLICY_METRICS)


def seeds_totals(runs: SeedRuns) -> pd.DataFrame:
    """Whole-run totals per policy over the seeds (policies mode): rollout seconds summed over the
    steps, its speedup and the accept length over every SD iteration, as median, min and max."""
    if runs.totals is None:
        raise ValueError("presets mode has no rollout totals; see seeds_summary")
    return aggregate(runs.totals, ["policy"], TOTAL_METRICS)


def headline(runs: SeedRuns) -> tuple[pd.DataFrame, str, str]:
    """(the per-seed frame, its name column, its speedup column) that ranks the policies or presets:
    the end-to-end speedup of presets, the whole-run rollout speedup of policies."""
    if runs.presets:
        return runs.summary, "preset", "speedup"
    return runs.totals, "policy", "speedup"


def ranking_flip(per_seed: pd.DataFrame, name: str = "policy", metric: str = "speedup") -> str | None:
    """One line when the policies' order by median ``metric`` is not some seed's order: a pair
    (a, b) with a's median above b's while one seed has b strictly ahead of a; None when every
    seed agrees with the median order (ties never count as a flip). Names the pair whose median
    gap is smallest among those flipped, and the seeds that flip it."""
    table = per_seed.pivot_table(index="seed", columns=name, values=metric, aggfunc="first", sort=False)
    medians = table.median(axis=0, skipna=True)
    order = [p for p in medians.sort_values(ascending=False, kind="stable").index if np.isfinite(medians[p])]
    best: tuple[float, str, str, list[int]] | None = None
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            if not medians[a] > medians[b]:
                continue
            flipped = [int(k) for k in table.index if table.at[k, b] > table.at[k, a]]
            gap = float(medians[a] - medians[b])
            if flipped and (best is None or gap < best[0]):
                best = (gap, a, b, flipped)
    if best is None:
        return None
    _, a, b, flipped = best
    k = flipped[0]
    which = f"seed {k}" if len(flipped) == 1 else f"{len(flipped)} of {len(table)} seeds (e.g. seed {k})"
    return (f"ranking flips across seeds: by the median {a} ({medians[a]:.3f}x) is ahead of {b} "
            f"({medians[b]:.3f}x), but {which} put {b} ahead ({table.at[k, b]:.3f}x vs {table.at[k, a]:.3f}x)")


def fmt_range(median: float, lo: float, hi: float, spec: str = ".2f", unit: str = "") -> str:
    """``1.42x (1.31–1.55)``: a median with its min–max over the seeds; ``–`` when missing."""
    if not np.isfinite(median):
        return "–"
    return f"{median:{spec}}{unit} ({lo:{spec}}–{hi:{spec}})"


__all__ = ["MAX_SEEDS", "POLICY_METRICS", "PRESET_METRICS", "TOTAL_METRICS", "SeedRuns", "aggregate", "check_seeds",
           "fmt_range", "headline", "ranking_flip", "run_policy_seeds", "run_preset_seeds", "seed_values",
           "seeds_summary", "seeds_totals", "with_seed"]

"""Figures of sweep results (:mod:`tltsim.sweep`): response surfaces and response curves.

Input is the tidy result table of a sweep (one row per point and policy/preset, one column per axis
field). A policy-spec axis can be turned into numbers first with :func:`with_elastic_columns`, which
splits ``elastic:32+beg-mab`` into ``elastic_threshold`` = 32 and ``inner_policy`` = ``beg-mab``, so
the threshold becomes a numeric x axis.

A ``seed`` axis is not a setting but replicates of each setting (the simulation seed deals prompt
groups to workers and draws accept lengths): :func:`replicate_stats` reduces each setting to the
median over its seeds with the min and the max, and :func:`response_curves` can draw that min–max
as a band, so a sweep shows how far one unlucky seed moves each answer.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import TwoSlopeNorm
from matplotlib.ticker import ScalarFormatter

from analysis.style import annotate_cells, colors_for, legend_outside, natural_key, paper_rc
from tltcore.policy.registry import elastic_split


def with_elastic_columns(results: pd.DataFrame, column: str = "policy") -> pd.DataFrame:
    """``results`` plus ``elastic_threshold`` (NaN where the policy is not elastic) and
    ``inner_policy`` (the wrapped policy, or the policy itself)."""
    parts = {spec: elastic_split(spec) for spec in results[column].dropna().unique()}
    out = results.copy()
    out["elastic_threshold"] = out[column].map(lambda p: parts[p][0] if p in parts else None).astype(float)
    out["inner_policy"] = out[column].map(lambda p: parts[p][1] if p in parts else p)
    return out


#: The scenario field a sweep report treats as replicates of a setting rather than as a setting.
REPLICATE = "seed"


def replicate_stats(rows: pd.DataFrame, keys: Sequence[str], value: str = "speedup",
                    replicate: str | None = REPLICATE) -> pd.DataFrame:
    """One row per setting (the ``keys`` values, sorted) with ``seeds`` (how many replicates have a
    value), ``value`` the median over the replicates, and ``<value>_min``/``<value>_max`` their range.

    Each replicate's value is first the median over its own rows (the RL steps of one point), so a
    seed with more rows does not weigh more; without a ``replicate`` column (or with ``replicate``
    None) each setting is one replicate and min = median = max. A median, not a mean: one unlucky
    deal that strands a long response on one worker moves a mean by itself."""
    keys = list(keys)
    rep = [replicate] if replicate is not None and replicate in rows.columns and replicate not in keys else []
    by = keys or ["_all"]  # no keys: the whole frame is one setting
    values = rows.assign(_all=0, **{value: pd.to_numeric(rows[value], errors="coerce")})
    per = values.groupby(by + rep, dropna=False)[value].median().reset_index()
    out = per.groupby(by, dropna=False)[value].agg(["count", "median", "min", "max"]).reset_index()
    out = out.rename(columns={"count": "seeds", "median": value, "min": f"{value}_min", "max": f"{value}_max"})
    return out.astype({"seeds": int}).drop(columns=["_all"], errors="ignore")


def _ordered(values: pd.Series) -> list:
    """Axis values in a fixed order whatever order the points finished in: numbers by value,
    anything else in natural order (``H20`` after ``H100``, ``step 2`` before ``step 10``)."""
    uniq = list(dict.fromkeys(values.dropna()))
    try:
        return sorted(uniq, key=float)
    except (TypeError, ValueError):
        return sorted(uniq, key=lambda v: natural_key(str(v)))


def response_surface(results: pd.DataFrame, x: str, y: str, *, value: str = "speedup", facet: str | None = None,
                     value_label: str = "rollout speedup over no-SD (×)",
                     title: str | None = None) -> plt.Figure:
    """Heat map of the median ``value`` over ``x`` × ``y`` (one panel per ``facet`` value), each cell
    annotated; the colour scale is centred on 1× (blue: SD pays; red: it does not)."""
    panels = _ordered(results[facet]) if facet else [None]
    xs, ys = _ordered(results[x]), _ordered(results[y])
    finite = results[value].replace([np.inf, -np.inf], np.nan).dropna()
    lo, hi = (float(finite.min()), float(finite.max())) if len(finite) else (0.5, 1.5)
    norm = TwoSlopeNorm(vcenter=1.0, vmin=min(lo, 0.99), vmax=max(hi, 1.01))
    with plt.rc_context(paper_rc()):
        fig, axes = plt.subplots(1, len(panels), squeeze=False, sharey=True, layout="constrained",
                                 figsize=(1.8 + (0.55 * len(xs) + 0.6) * len(panels), 1.9 + 0.35 * len(ys)))
        im = None
        for ax, panel in zip(axes[0], panels, strict=True):
            part = results if panel is None else results[results[facet] == panel]
            grid = part.pivot_table(index=y, columns=x, values=value, aggfunc="median").reindex(index=ys, columns=xs)
            values = grid.to_numpy(dtype=float)
            im = ax.imshow(values, cmap="RdBu", norm=norm, aspect="auto", origin="lower")
            annotate_cells(ax, values, im)
            ax.set_xticks(range(len(xs)), [_tick(v) for v in xs], rotation=45 if len(xs) > 6 else 0)
            ax.set_yticks(range(len(ys)), [_tick(v) for v in ys])
            ax.set_xlabel(x)
            ax.grid(False)
            if panel is not None:
                ax.set_title(f"{facet} = {panel}")
        axes[0, 0].set_ylabel(y)
        fig.colorbar(im, ax=list(axes[0]), label=value_label)
        fig.suptitle(title or f"{value} over {x} × {y}")
    return fig


def _tick(v: object) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def response_curves(results: pd.DataFrame, x: str, series: str, *, value: str = "speedup", facet: str | None = None,
                    value_label: str = "rollout speedup over no-SD (×)", log_x: bool = False,
                    title: str | None = None, band: tuple[str, str] | None = None) -> plt.Figure:
    """Median ``value`` against a numeric ``x``, one line per ``series`` value (one panel per
    ``facet`` value), with the 1× line dashed. ``band`` names two columns (the min and the max over
    the seeds, as :func:`replicate_stats` gives them): a shaded band of the line's colour spans the
    smallest min to the largest max of each point, so the reader sees which crossings of 1× a seed
    can undo; None (the default) draws the lines alone."""
    panels = _ordered(results[facet]) if facet else [None]
    names = [str(n) for n in _ordered(results[series])]
    colours = colors_for(names)
    with plt.rc_context(paper_rc()):
        fig, axes = plt.subplots(1, len(panels), squeeze=False, sharey=True,
                                 figsize=(0.6 + 3.2 * len(panels), 3.2))
        for ax, panel in zip(axes[0], panels, strict=True):
            part = results if panel is None else results[results[facet] == panel]
            med = part.groupby([series, x])[value].median().reset_index()
            if band is not None:
                lo = part.groupby([series, x])[band[0]].min().reset_index()
                hi = part.groupby([series, x])[band[1]].max().reset_index()
                med = med.merge(lo, on=[series, x]).merge(hi, on=[series, x])
            for name in names:
                line = med[med[series].astype(str) == name].sort_values(x)
                if len(line):
                    ax.plot(line[x], line[value], marker="o", ms=3, color=colours[name], label=name)
                    if band is not None:
                        ax.fill_between(line[x], line[band[0]], line[band[1]], color=colours[name], alpha=0.2, lw=0)
            ax.axhline(1.0, color="0.4", lw=0.8, ls="--")
            if log_x:
                ax.set_xscale("log", base=2)
                ax.xaxis.set_major_formatter(ScalarFormatter())
            ax.set_xlabel(x)
            if panel is not None:
                ax.set_title(f"{facet} = {panel}")
        axes[0, 0].set_ylabel(value_label)
        legend_outside(axes[0, -1], title=series)
        fig.suptitle(title or f"{value} vs {x}")
        fig.tight_layout()
    return fig

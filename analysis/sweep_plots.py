"""Figures of sweep results (:mod:`tltsim.sweep`): response surfaces and response curves.

Input is the tidy result table of a sweep (one row per point and policy/preset, one column per axis
field). A policy-spec axis can be turned into numbers first with :func:`with_elastic_columns`, which
splits ``elastic:32+beg-mab`` into ``elastic_threshold`` = 32 and ``inner_policy`` = ``beg-mab``, so
the threshold becomes a numeric x axis.
"""

from __future__ import annotations

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
                    title: str | None = None) -> plt.Figure:
    """Median ``value`` against a numeric ``x``, one line per ``series`` value (one panel per
    ``facet`` value), with the 1× line dashed."""
    panels = _ordered(results[facet]) if facet else [None]
    names = [str(n) for n in _ordered(results[series])]
    colours = colors_for(names)
    with plt.rc_context(paper_rc()):
        fig, axes = plt.subplots(1, len(panels), squeeze=False, sharey=True,
                                 figsize=(0.6 + 3.2 * len(panels), 3.2))
        for ax, panel in zip(axes[0], panels, strict=True):
            part = results if panel is None else results[results[facet] == panel]
            med = part.groupby([series, x])[value].median().reset_index()
            for name in names:
                line = med[med[series].astype(str) == name].sort_values(x)
                if len(line):
                    ax.plot(line[x], line[value], marker="o", ms=3, color=colours[name], label=name)
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

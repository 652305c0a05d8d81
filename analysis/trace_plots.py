"""Figures of a trace's long tail: length CDF per source, and per-step straggler factor.

Each curve's colour comes from :func:`analysis.style.colors_for` over all curves of the figure
(fixed per known source, never shared), and the legend sits outside the axes, where it cannot hide
the tail this figure exists to show.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import LogFormatter, MaxNLocator

from analysis.style import colors_for, legend_outside, paper_rc


def length_cdf(df: pd.DataFrame, by: str = "source") -> plt.Figure:
    """Empirical CDF of response length (log x) per ``by`` value."""
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots()
        groups = list(df.groupby(by, sort=True))
        colours = colors_for(name for name, _ in groups)
        for name, g in groups:
            x = np.sort(g["response_tokens"].to_numpy())
            y = np.arange(1, len(x) + 1) / len(x)
            ax.step(x, y, where="post", label=f"{name} (n={len(x):,})", color=colours[str(name)])
        ax.set_xscale("log")
        ax.set_xlabel("response length (tokens, log scale)")
        ax.set_ylabel("fraction of responses ≤ length")
        ax.set_ylim(0, 1.0)
        ax.set_title("Response-length CDF")
        legend_outside(ax, title=by)
        fig.tight_layout()
    return fig


def straggler_factor(df: pd.DataFrame, by: str = "source") -> plt.Figure:
    """Per-step max/mean response length: how much the slowest response stretches each step. Steps
    are whole numbers on the axis (a two-step trace had ticks 1.0, 1.5, 2.0) and the factors plain
    numbers (a log axis within one decade labelled them ``4.6×10^0``)."""
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots()
        groups = list(df.groupby(by, sort=True))
        colours = colors_for(name for name, _ in groups)
        for name, g in groups:
            s = g.groupby("step")["response_tokens"].agg(["max", "mean"])
            ax.plot(s.index, s["max"] / s["mean"], marker="o", ms=3, label=str(name), color=colours[str(name)])
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_formatter(LogFormatter())
        ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False))
        ax.set_xlabel("RL step")
        ax.set_ylabel("straggler factor (max / mean length, ×)")
        ax.set_title("Per-step straggler factor")
        legend_outside(ax, title=by)
        fig.tight_layout()
    return fig

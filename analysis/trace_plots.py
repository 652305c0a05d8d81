"""Figures of a trace's long tail: length CDF per source, and per-step straggler factor."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.style import color_for, paper_rc


def length_cdf(df: pd.DataFrame, by: str = "source") -> plt.Figure:
    """Empirical CDF of response length (log x) per ``by`` value."""
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots()
        for name, g in df.groupby(by, sort=True):
            x = np.sort(g["response_tokens"].to_numpy())
            y = np.arange(1, len(x) + 1) / len(x)
            ax.step(x, y, where="post", label=f"{name} (n={len(x):,})", color=color_for(str(name)))
        ax.set_xscale("log")
        ax.set_xlabel("response length (tokens, log scale)")
        ax.set_ylabel("fraction of responses ≤ length")
        ax.set_ylim(0, 1.0)
        ax.set_title("Response-length CDF")
        ax.legend(loc="lower right")
        fig.tight_layout()
    return fig


def straggler_factor(df: pd.DataFrame, by: str = "source") -> plt.Figure:
    """Per-step max/mean response length: how much the slowest response stretches each step."""
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots()
        for name, g in df.groupby(by, sort=True):
            s = g.groupby("step")["response_tokens"].agg(["max", "mean"])
            ax.plot(s.index, s["max"] / s["mean"], marker="o", ms=3, label=str(name),
                    color=color_for(str(name)))
        ax.set_yscale("log")
        ax.set_xlabel("RL step")
        ax.set_ylabel("straggler factor (max / mean length, ×)")
        ax.set_title("Per-step straggler factor")
        ax.legend(loc="best")
        fig.tight_layout()
    return fig

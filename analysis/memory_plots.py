"""CUDA-graph memory of the SD strategies: naive capture (every strategy at every batch size) vs
TLT's bucketed capture (each strategy only for its batch-size bucket, verify graphs shared).

Input is a tidy table with one row per (case, source): ``case`` (e.g. "naive, 4 strategies"),
``source`` ("paper", "model", a measured GPU, ...) and ``gb`` (GB per GPU).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.style import category_ticks, colors_for, legend_outside, paper_rc


def cuda_graph_memory(table: pd.DataFrame, title: str = "CUDA-graph memory of the SD strategies") -> plt.Figure:
    """Grouped bars of CUDA-graph memory per GPU, one group per case, one bar per source."""
    cases = list(dict.fromkeys(table["case"]))
    sources = list(dict.fromkeys(table["source"]))
    colours = colors_for(sources)
    width = 0.8 / max(1, len(sources))
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots()
        x = np.arange(len(cases))
        for j, src in enumerate(sources):
            part = table[table["source"] == src].set_index("case").reindex(cases)
            offs = x - 0.4 + width * (j + 0.5)
            ax.bar(offs, part["gb"].fillna(0.0), width, label=str(src), color=colours[str(src)])
            for xi, v in zip(offs, part["gb"], strict=True):
                if np.isfinite(v):
                    ax.text(xi, v, f"{v:.1f}", ha="center", va="bottom", fontsize=6.5)
        category_ticks(ax, x, cases)
        ax.set_xlabel("CUDA-graph capture")
        ax.set_ylabel("CUDA-graph memory per GPU (GB)")
        ax.set_title(title)
        legend_outside(ax, title="source")
        fig.tight_layout()
    return fig

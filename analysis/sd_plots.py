"""Figures of single-iteration SD speedup (:func:`tltcore.sd_speedup.sd_speedup_table`): a depth x
verify heat map at one batch size, and speedup against batch size per draft shape.

Both mark 1x plainly: the heat map's colour scale is centred on 1 (blue pays, red does not), and the
curves have a dashed 1x line, so where SD does *not* pay is as visible as where it does.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import TwoSlopeNorm
from matplotlib.ticker import NullLocator

from analysis.style import annotate_cells, colors_for, legend_outside, paper_rc


def sd_speedup_heatmap(table: pd.DataFrame, *, batch: int | None = None,
                       title: str | None = None) -> plt.Figure:
    """Speedup per (depth, verify_tokens) at one batch size (default: the smallest in ``table``),
    each cell annotated; cells with no valid tree are blank."""
    batch = int(table["batch"].min()) if batch is None else batch
    t = table[table["batch"] == batch]
    grid = t.pivot_table(index="depth", columns="verify_tokens", values="speedup", aggfunc="max")
    values = grid.to_numpy(dtype=float)
    finite = values[np.isfinite(values)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.5, 1.5)
    norm = TwoSlopeNorm(vcenter=1.0, vmin=min(lo, 0.99), vmax=max(hi, 1.01))
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots(figsize=(1.2 + 0.55 * grid.shape[1], 1.0 + 0.4 * grid.shape[0]))
        im = ax.imshow(values, cmap="RdBu", norm=norm, aspect="auto", origin="lower")
        annotate_cells(ax, values, im)
        ax.set_xticks(range(grid.shape[1]), [str(c) for c in grid.columns])
        ax.set_yticks(range(grid.shape[0]), [str(r) for r in grid.index])
        ax.set_xlabel("verify tokens per request")
        ax.set_ylabel("draft depth (steps)")
        ax.grid(False)
        ax.set_title(title or f"SD speedup per iteration at batch {batch}")
        fig.colorbar(im, ax=ax, label="speedup over plain decoding (×)")
        fig.tight_layout()
    return fig


def sd_speedup_vs_batch(table: pd.DataFrame, *, configs: list[str] | None = None,
                        title: str = "SD speedup per iteration vs batch size") -> plt.Figure:
    """Speedup against batch size (log x), one line per draft shape (``config``); the batch sizes of
    ``table`` are the ticks, as the whole numbers they are (a log axis labelled them ``1.0, 2.0``)."""
    configs = configs or list(dict.fromkeys(table["config"]))
    colours = colors_for(configs)
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots()
        for c in configs:
            part = table[table["config"] == c].sort_values("batch")
            ax.plot(part["batch"], part["speedup"], marker="o", ms=3, label=c, color=colours[c])
        ax.axhline(1.0, color="0.4", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        batches = sorted({int(b) for b in table["batch"]})
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("running batch (requests, log scale)")
        ax.set_ylabel("speedup over plain decoding (×)")
        ax.set_title(title)
        legend_outside(ax, title="depth_topk_verify")
        fig.tight_layout()
    return fig

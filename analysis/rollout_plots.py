"""Figures of simulated (or real) rollouts from the event log: timeline and makespan per policy.

Policy colours come from :func:`analysis.style.colors_for` over the figure's policies (fixed per
shipped policy or preset, never shared); the timeline's legend sits outside the panels.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.style import colors_for, legend_outside, paper_rc


def rollout_timeline(events: pd.DataFrame, policies: list[str] | None = None) -> plt.Figure:
    """Running batch size per rollout worker over time, one panel per policy; SD spans in the
    policy colour, the switch's re-prefill (or drafter catch-up) in black.

    Shows where the long tail leaves workers with tiny batches (and idle), and where a policy
    turned speculative decoding on. Times are on the run clock (a multi-step run shows its steps
    one after the other).
    """
    dec = events[events["kind"].isin(["decode", "switch_reprefill", "catch_up", "prefill"])
                 & (events["phase"] == "rollout") & (events["worker"] >= 0)]
    policies = policies or list(dict.fromkeys(dec["policy"]))
    t_max = float(events["t_end"].max())
    colours = colors_for(policies)
    with plt.rc_context(paper_rc()):
        fig, axes = plt.subplots(len(policies), 1, sharex=True, sharey=True, squeeze=False,
                                 figsize=(6.0, 1.5 + 1.3 * len(policies)))
        for ax, pol in zip(axes[:, 0], policies, strict=True):
            d = dec[dec["policy"] == pol]
            colour = colours[str(pol)]
            for _, g in d.groupby("worker"):
                ax.hlines(g["batch_size"], g["t_start"], g["t_end"], color="#bbbbbb", lw=0.8)
                sd = g[g["depth"] > 0]
                ax.hlines(sd["batch_size"], sd["t_start"], sd["t_end"], color=colour, lw=1.6)
                rp = g[g["kind"].isin(["switch_reprefill", "catch_up"])]
                ax.hlines(rp["batch_size"], rp["t_start"], rp["t_end"], color="#000000", lw=2.5)
            start = float(d["t_start"].min()) if len(d) else 0.0
            end = float(d["t_end"].max()) if len(d) else 0.0
            ax.axvline(end, color=colour, ls="--", lw=0.8)
            ax.set_yscale("log")
            ax.set_ylabel("running batch")
            ax.set_title(f"{pol}: rollout {end - start:.1f} s", loc="left")
        handles = [plt.Line2D([], [], color="#bbbbbb", lw=1, label="decode, SD off"),
                   plt.Line2D([], [], color="#000000", lw=2.5, label="drafter re-prefill / catch-up"),
                   *[plt.Line2D([], [], color=colours[str(p)], lw=1.6, label=f"SD on ({p})")
                     for p in policies if (dec[(dec["policy"] == p)]["depth"] > 0).any()]]
        legend_outside(axes[0, 0], handles=handles)
        axes[-1, 0].set_xlabel("time since run start (s)")
        axes[-1, 0].set_xlim(0, t_max * 1.02)
        fig.tight_layout()
    return fig


def makespan_bars(summary: pd.DataFrame) -> plt.Figure:
    """Rollout makespan per policy, annotated with the speedup over the first (baseline) row."""
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots(figsize=(6.0, 0.6 + 0.45 * len(summary)))
        y = np.arange(len(summary))
        colours = colors_for(summary["policy"])
        ax.barh(y, summary["makespan_s"], color=[colours[str(p)] for p in summary["policy"]])
        for yi, (m, s) in enumerate(zip(summary["makespan_s"], summary["speedup"], strict=True)):
            ax.text(m, yi, f" {s:.2f}×", va="center")
        ax.set_yticks(y, summary["policy"])
        ax.invert_yaxis()
        ax.set_xlabel("rollout makespan of one RL step (s)")
        ax.set_xlim(0, float(summary["makespan_s"].max()) * 1.15)
        ax.set_title("Simulated rollout time per policy (speedup vs no-sd)")
        fig.tight_layout()
    return fig

"""Figures of simulated (or real) rollouts from the event log: timeline, GPU utilisation over time and
makespan per policy.

Policy colours come from :func:`analysis.style.colors_for` over the figure's policies (fixed per
shipped policy or preset, never shared); the timeline's legend sits outside the panels.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.style import colors_for, legend_outside, paper_rc
from tltcore.events import BUSY_KINDS

#: Height (in running-batch units, log axis) of the strip under each timeline panel where a worker's
#: time after its last response is drawn: idle, or training the drafter (Spot Trainer).
RELEASED_Y = 0.6
TRAIN_COLOUR = "#009E73"
IDLE_COLOUR = "#dddddd"


def rollout_timeline(events: pd.DataFrame, policies: list[str] | None = None) -> plt.Figure:
    """Running batch size per rollout worker over time, one panel per policy (or preset); SD spans
    in the policy colour, the switch's re-prefill (or drafter catch-up) in black. Under the curves,
    a strip shows what each released worker does until the rollout ends: idle (grey) or training
    the drafter (green, TLT's Spot Trainer).

    Shows where the long tail leaves workers with tiny batches (and idle), where a policy turned
    speculative decoding on, and how much of the bubble drafter training fills. Times are on the run
    clock (a multi-step run shows its steps one after the other).
    """
    workers = events[events["worker"] >= 0]
    dec = workers[workers["kind"].isin(["decode", "switch_reprefill", "catch_up", "prefill"])
                  & (workers["phase"] == "rollout")]
    released = workers[workers["kind"].isin(["idle", "train"])]
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
            r = released[released["policy"] == pol]
            for kind, c, lw in (("idle", IDLE_COLOUR, 4.0), ("train", TRAIN_COLOUR, 4.0)):
                part = r[r["kind"] == kind]
                ax.hlines(np.full(len(part), RELEASED_Y), part["t_start"], part["t_end"], color=c, lw=lw)
            spans = d.groupby("step").agg(start=("t_start", "min"), end=("t_end", "max"))
            rollout_s = float((spans["end"] - spans["start"]).sum())
            for end in spans["end"]:
                ax.axvline(end, color=colour, ls="--", lw=0.8)
            ax.set_yscale("log")
            ax.set_ylim(RELEASED_Y * 0.7, None)
            ax.set_ylabel("running batch\n(requests)")
            steps = f" over {len(spans)} steps" if len(spans) > 1 else ""
            ax.set_title(f"{pol}: rollout {rollout_s:.1f} s{steps} (dashed: each step's rollout end)", loc="left")
        handles = [plt.Line2D([], [], color="#bbbbbb", lw=1, label="decode, SD off"),
                   plt.Line2D([], [], color="#000000", lw=2.5, label="drafter re-prefill / catch-up"),
                   *[plt.Line2D([], [], color=colours[str(p)], lw=1.6, label=f"SD on ({p})")
                     for p in policies if (dec[(dec["policy"] == p)]["depth"] > 0).any()],
                   plt.Line2D([], [], color=IDLE_COLOUR, lw=4, label="released worker idle"),
                   plt.Line2D([], [], color=TRAIN_COLOUR, lw=4, label="released worker trains drafter")]
        legend_outside(axes[0, 0], handles=handles)
        axes[-1, 0].set_xlabel("time since run start (s)")
        axes[-1, 0].set_xlim(0, t_max * 1.02)
        fig.tight_layout()
    return fig


def utilisation_over_time(events: pd.DataFrame, policy: str, *, points: int = 400) -> pd.DataFrame:
    """Share of rollout workers generating, and training the drafter, at ``points`` times over the
    run (tidy: ``t``, ``generating``, ``training``). A worker counts once however many spans it has
    at a time; cluster-wide rows (later phases) are not a worker's."""
    ev = events[(events["policy"] == policy) & (events["worker"] >= 0)]
    n = max(1, ev.loc[ev["phase"] == "rollout", "worker"].nunique())
    t = np.linspace(0.0, float(events["t_end"].max()), points)

    def share(rows: pd.DataFrame) -> np.ndarray:
        busy = np.zeros(points)
        for _, g in rows.groupby("worker"):
            on = np.zeros(points, dtype=bool)
            for a, b in zip(g["t_start"].to_numpy(), g["t_end"].to_numpy(), strict=True):
                on |= (t >= a) & (t < b)
            busy += on
        return busy / n

    gen = ev[ev["kind"].isin(BUSY_KINDS) & (ev["phase"] == "rollout")]
    return pd.DataFrame({"t": t, "generating": share(gen), "training": share(ev[ev["kind"] == "train"])})


def gpu_utilisation(events: pd.DataFrame, policies: list[str] | None = None) -> plt.Figure:
    """Share of rollout GPUs busy over time, per policy: generating (solid) and training the drafter
    (dashed). The gap under 100% while the rollout runs is the long tail's bubble."""
    policies = policies or list(dict.fromkeys(events.loc[events["worker"] >= 0, "policy"]))
    colours = colors_for(policies)
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots()
        for i, pol in enumerate(policies):
            u = utilisation_over_time(events, pol)
            lw = max(0.8, 2.2 - 0.5 * i)  # earlier curves wider, so identical curves stay visible
            ax.plot(u["t"], 100 * u["generating"], color=colours[str(pol)], lw=lw, label=f"{pol}: generating")
            if (u["training"] > 0).any():
                ax.plot(u["t"], 100 * u["training"], color=colours[str(pol)], lw=lw, ls="--",
                        label=f"{pol}: training drafter")
        ax.set_xlabel("time since run start (s)")
        ax.set_ylabel("rollout GPUs busy (%)")
        ax.set_ylim(0, 105)
        ax.set_title("GPU utilisation during rollout")
        legend_outside(ax)
        fig.tight_layout()
    return fig


def makespan_bars(summary: pd.DataFrame) -> plt.Figure:
    """Rollout makespan per policy, annotated with the speedup over the first (baseline) row. The
    title is the figure's, centred on it: over the axes, which long policy names push right, it ran
    past the figure's edge and was cut."""
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots(figsize=(6.0, max(1.8, 0.9 + 0.45 * len(summary))))
        y = np.arange(len(summary))
        colours = colors_for(summary["policy"])
        ax.barh(y, summary["makespan_s"], color=[colours[str(p)] for p in summary["policy"]])
        for yi, (m, s) in enumerate(zip(summary["makespan_s"], summary["speedup"], strict=True)):
            ax.text(m, yi, f" {s:.2f}×", va="center")
        ax.set_yticks(y, summary["policy"])
        ax.invert_yaxis()
        ax.set_xlabel("rollout makespan of one RL step (s)")
        ax.set_ylabel("SD policy")
        ax.set_xlim(0, float(summary["makespan_s"].max()) * 1.15)
        fig.suptitle("Simulated rollout time per policy (speedup vs no-sd)", fontsize=plt.rcParams["axes.titlesize"])
        fig.tight_layout()
    return fig

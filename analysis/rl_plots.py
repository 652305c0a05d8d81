"""Figures of whole RL runs (:func:`tltsim.rl.run.compare_presets`): where a step's time goes, speedup
bars by setting and preset, and the drafter's accept length over RL steps.

Inputs are the tidy tables the simulator writes (``summary.csv`` and ``steps.csv`` of ``tlt sim run
--preset``), so the same functions draw a single run, the paper reproduction and a sweep.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from analysis.style import category_ticks, colors_for, legend_outside, paper_rc
from tltsim.rl.run import LATER_PHASES

#: summary column -> legend label, in the order the stack is drawn (rollout at the bottom).
PHASE_LABELS = {"rollout_s": "rollout", "drafter_train_s": "drafter training (serial)", "reward_s": "reward",
                "old_log_prob_s": "old log-probs", "reference_s": "reference", "actor_update_s": "actor update",
                "weight_sync_s": "weight sync"}
assert set(PHASE_LABELS) == {"rollout_s", "drafter_train_s", *(f"{p}_s" for p in LATER_PHASES)}


def step_breakdown(summary: pd.DataFrame, title: str = "Where an RL step's time goes") -> plt.Figure:
    """Seconds per RL step by phase, one stacked bar per preset (presets that ran out of memory are
    named under the axis instead of drawn)."""
    ok = summary[summary["status"] == "ok"].reset_index(drop=True)
    oom = summary.loc[summary["status"] != "ok", "preset"].tolist()
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots()
        colours = colors_for(PHASE_LABELS.values())
        bottom = np.zeros(len(ok))
        for col, label in PHASE_LABELS.items():
            per_step = (ok[col] / ok["steps"]).to_numpy()
            ax.bar(ok["preset"], per_step, bottom=bottom, label=label, color=colours[label])
            bottom += per_step
        ax.set_ylabel("time per RL step (s)")
        ax.set_xlabel("preset" + (f"  (out of memory: {', '.join(oom)})" if oom else ""))
        ax.set_title(title)
        ax.tick_params(axis="x", rotation=30)
        legend_outside(ax)
        fig.tight_layout()
    return fig


def speedup_bars(table: pd.DataFrame, *, group: str = "setting", series: str = "preset", value: str = "speedup",
                 ylabel: str = "end-to-end speedup over veRL (×)",
                 title: str = "RL step speedup by setting", spread: tuple[str, str] | None = None) -> plt.Figure:
    """Grouped bars: one group per ``group`` value (model × scale, say), one bar per ``series``
    value (preset, or ``paper`` beside ours). Rows with ``status == "oom"`` are marked OOM; the
    dashed line at 1× is where SD stops paying. ``spread`` names two columns (the min and the max
    over simulation seeds, say) drawn as a whisker on each bar, so a bar of medians shows how far
    one seed can move it; None (the default) draws none."""
    groups = list(dict.fromkeys(table[group]))
    names = list(dict.fromkeys(table[series]))
    colours = colors_for(names)
    width = 0.8 / max(1, len(names))
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots(figsize=(max(6.0, 0.35 * len(groups) * len(names) + 1.5), 3.6))
        x = np.arange(len(groups))
        for j, name in enumerate(names):
            part = table[table[series] == name].set_index(group).reindex(groups)
            offs = x - 0.4 + width * (j + 0.5)
            heights = part[value].astype(float).fillna(0.0).to_numpy()
            ax.bar(offs, heights, width, label=str(name), color=colours[str(name)])
            if spread is not None:
                lo, hi = (part[c].astype(float).to_numpy() for c in spread)
                keep = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(part[value].astype(float).to_numpy())
                mid = heights[keep]
                ax.errorbar(offs[keep], mid, yerr=np.vstack([mid - lo[keep], hi[keep] - mid]), fmt="none",
                            ecolor="0.15", elinewidth=0.9, capsize=2.5, zorder=3)
            status = part["status"] if "status" in part else pd.Series("ok", index=part.index)
            for xi, st in zip(offs, status, strict=True):
                if st == "oom":
                    ax.text(xi, 0.05, "OOM", ha="center", va="bottom", fontsize=6.5, rotation=90)
        ax.axhline(1.0, color="0.4", lw=0.8, ls="--")
        category_ticks(ax, x, [str(g) for g in groups])
        ax.set_xlabel(group)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        legend_outside(ax, title=series)
        fig.tight_layout()
    return fig


def accept_over_steps(steps: pd.DataFrame, *, presets: list[str] | None = None,
                      references: Mapping[str, float] | None = None,
                      title: str = "Drafter acceptance over RL steps") -> plt.Figure:
    """Mean accept length per RL step, one line per preset (static vs adaptive drafter, say);
    ``references`` draws labelled horizontal lines (published values). When ``steps`` holds several
    seeds (a ``seed`` column, as ``tlt sim run --seeds`` stacks them) the line is the median over the
    seeds and a band of the preset's colour spans their min–max."""
    presets = presets or [p for p in dict.fromkeys(steps["preset"])
                          if steps.loc[steps["preset"] == p, "mean_accept_length"].notna().any()]
    colours = colors_for(presets)
    seeded = "seed" in steps and steps["seed"].nunique() > 1
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots()
        for p in presets:
            part = steps[steps["preset"] == p]
            if seeded:
                stats = part.groupby("step")["mean_accept_length"].agg(["median", "min", "max"])
                ax.fill_between(stats.index, stats["min"], stats["max"], color=colours[p], alpha=0.2, lw=0)
                ax.plot(stats.index, stats["median"], marker="o", ms=3, label=p, color=colours[p])
                continue
            ax.plot(part["step"], part["mean_accept_length"], marker="o", ms=3, label=p, color=colours[p])
        greys = iter(["0.3", "0.6", "0.45", "0.75"])
        for label, v in (references or {}).items():
            ax.axhline(v, color=next(greys, "0.5"), ls=":", lw=1, label=label)
        ax.set_xlabel("RL step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("mean accept length (tokens / SD iteration)")
        ax.set_title(title)
        legend_outside(ax)
        fig.tight_layout()
    return fig


def learning_curves(steps: pd.DataFrame, stem: str | Path | None = None) -> plt.Figure:
    """A GRPO learning run (:mod:`tltreal.rl.grpo_run`): held-out temperature-1 reward (left) and
    greedy accuracy (right) at each evaluated step, GRPO beside the shuffled-reward control and the
    no-update arm (dashed: its weights never change, so it is the flat line learning is measured from); the line
    is the mean over seeds and the band the seeds' min-max (one seed: no band). Saved as
    ``stem.png``/``stem.pdf`` when ``stem`` is given."""
    from analysis.style import save_figure

    ev = steps.dropna(subset=["eval_reward_t1"])
    arms = list(dict.fromkeys(ev["arm"]))
    colours = colors_for(arms)
    labels = {"grpo": "GRPO (rewards as scored)", "control": "control (rewards shuffled within each group)",
              "no-update": "no update (same rollouts, no optimizer step)"}
    with plt.rc_context(paper_rc()):
        fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.2), sharex=True)
        for ax, column, title in ((axes[0], "eval_reward_t1", "held-out reward, temperature 1"),
                                  (axes[1], "greedy_accuracy", "held-out greedy accuracy")):
            for arm in arms:
                stats = ev[ev["arm"] == arm].groupby("step")[column].agg(["mean", "min", "max"])
                if ev["seed"].nunique() > 1:
                    ax.fill_between(stats.index, stats["min"], stats["max"], color=colours[arm], alpha=0.2, lw=0)
                ax.plot(stats.index, stats["mean"], marker="o", ms=3, color=colours[arm], label=labels.get(arm, arm),
                        ls="--" if arm == "no-update" else "-")
            ax.set_xlabel("RL step")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylabel("fraction answered right")
            ax.set_title(title)
        seeds = ev["seed"].nunique()
        fig.suptitle("GRPO against a shuffled-reward control and no update (" +
                     (f"{seeds} seeds: mean, band min-max)" if seeds > 1 else "one seed, no spread)"))
        legend_outside(axes[1])
        fig.tight_layout()
    if stem is not None:
        save_figure(fig, stem)
    return fig

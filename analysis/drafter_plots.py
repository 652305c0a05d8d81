"""Figures of a real adaptive-drafter RL run (``tlt real rl``, :mod:`tltreal.rl.adaptive_run`).

Input is the run's ``steps.csv`` (one row per RL step). Colours follow the presets they stand for:
the static drafter is ``static-drafter``'s, the adaptive one ``tlt``'s, as in the simulator's figures.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import MaxNLocator

from analysis.rl_plots import accept_over_steps
from analysis.style import color_for, legend_outside, paper_rc

#: steps.csv column suffix -> the preset whose colour and name the line takes
DRAFTERS = {"static": "static-drafter", "adaptive": "tlt"}
#: the upper bound (a drafter retrained on each step's policy), drawn where a run measured it
UPPER = {"upper": "upper bound"}


def _integer_steps(fig: plt.Figure) -> plt.Figure:
    for ax in fig.axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return fig


def accept_curves(steps: pd.DataFrame) -> plt.Figure:
    """Accept length per RL step of the static and the adaptive drafter (same policy, same prompts)."""
    drawn = {**DRAFTERS, **({} if "accept_upper" not in steps or steps["accept_upper"].isna().all() else UPPER)}
    long = pd.concat([pd.DataFrame({"step": steps["step"], "preset": preset,
                                    "mean_accept_length": steps[f"accept_{name}"]}).dropna()
                      for name, preset in drawn.items()], ignore_index=True)
    return _integer_steps(accept_over_steps(long, presets=list(drawn.values()),
                                            title="Static (static-drafter) vs adaptive (tlt) drafter on the "
                                                  "changing policy"))


def bubble_training(steps: pd.DataFrame) -> plt.Figure:
    """Per RL step: the rollout, the drafter training done inside its bubble (on released workers,
    so it costs the step nothing) and the policy update."""
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots()
        x = steps["step"].to_numpy()
        ax.bar(x, steps["rollout_s"], width=0.8, color="#BBBBBB", label="rollout (wall)")
        ax.bar(x, steps["update_s"], width=0.8, bottom=steps["rollout_s"], color="#555555", label="GRPO update")
        ax.bar(x, steps["bubble_train_s"], width=0.4, color="#009E73",
               label="drafter training in the bubble (released workers)")
        ax.set_xlabel("RL step")
        ax.set_ylabel("time (s)")
        ax.set_title("Drafter training fits inside the rollout's long tail")
        legend_outside(ax)
        fig.tight_layout()
    return _integer_steps(fig)


def speedup_curves(steps: pd.DataFrame, batch: int) -> plt.Figure:
    """SD speedup of each drafter on the padded target at the long tail's batch size, at the steps
    where it was measured; the dashed line is 1x (below it SD does not pay)."""
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots()
        for name, preset in DRAFTERS.items():
            col = f"speedup_{name}"
            if col not in steps:
                continue
            part = steps[steps[col].notna()]
            ax.plot(part["step"], part[col], marker="o", ms=4, color=color_for(preset), label=f"{preset} ({name})")
        ax.axhline(1.0, color="0.4", ls="--", lw=1, label="no SD (1x)")
        ax.set_xlabel("RL step")
        ax.set_ylabel(f"SD speedup at batch {batch} (x, tokens/s)")
        ax.set_title("Rollout speedup from SD on the padded target (CPU)")
        legend_outside(ax)
        fig.tight_layout()
    return _integer_steps(fig)


def reward_curves(steps: pd.DataFrame) -> plt.Figure:
    """Mean reward of the step's rollouts and of the fixed evaluation prompts, and the mean response
    length (right axis)."""
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots()
        ax.plot(steps["step"], steps["reward"], marker="o", ms=3, color="#0072B2", label="rollout reward")
        ax.plot(steps["step"], steps["eval_reward"], marker="s", ms=3, color="#56B4E9",
                label="evaluation accuracy (fixed prompts, greedy)")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("RL step")
        ax.set_ylabel("mean reward (fraction correct)")
        right = ax.twinx()
        right.plot(steps["step"], steps["mean_response_tokens"], ls=":", color="#D55E00",
                   label="mean response length")
        right.set_ylabel("mean response length (tokens)")
        right.grid(False)
        handles = ax.get_legend_handles_labels()
        more = right.get_legend_handles_labels()
        legend_outside(ax, handles[0] + more[0], handles[1] + more[1])
        ax.set_title("GRPO on the arithmetic task")
        fig.tight_layout()
    return _integer_steps(fig)


def dynamics_fit(steps: Sequence[int], static_q: Sequence[float], adaptive_q: Sequence[float],
                 fitted_static: Sequence[float], fitted_adaptive: Sequence[float]) -> plt.Figure:
    """Measured drafter quality (per-position acceptance relative to step 0) and the simulator's
    fitted drafter dynamics."""
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots()
        for name, preset in DRAFTERS.items():
            measured, fitted = (static_q, fitted_static) if name == "static" else (adaptive_q, fitted_adaptive)
            c = color_for(preset)
            ax.plot(steps, measured, marker="o", ms=3, ls="none", color=c, label=f"{preset}: measured")
            ax.plot(steps, fitted, color=c, label=f"{preset}: simulator, fitted")
        ax.axhline(1.0, color="0.6", ls=":", lw=1)
        ax.set_xlabel("RL step")
        ax.set_ylabel("drafter quality (acceptance / step 0's)")
        ax.set_title("Drafter dynamics exported to the simulator")
        legend_outside(ax)
        fig.tight_layout()
    return _integer_steps(fig)


__all__ = ["DRAFTERS", "accept_curves", "bubble_training", "dynamics_fit", "reward_curves", "speedup_curves"]

"""Figures of a real adaptive-drafter run: what they draw equals the run's table."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest

from analysis.drafter_plots import accept_curves, bubble_training, dynamics_fit, reward_curves, speedup_curves
from analysis.style import color_for


@pytest.fixture
def steps() -> pd.DataFrame:
    n = 5
    return pd.DataFrame({
        "step": range(n), "accept_static": [3.6, 3.3, 3.2, 3.1, 3.0], "accept_adaptive": [3.6, 3.4, 3.5, 3.6, 3.5],
        "rollout_s": [2.0, 5.0, 8.0, 3.0, 4.0], "update_s": [1.0, 2.0, 1.5, 1.0, 2.0],
        "bubble_train_s": [0.1, 2.0, 6.0, 1.0, 3.0], "reward": [0.4, 0.5, 0.3, 0.6, 0.5],
        "eval_reward": [0.6, 0.6, 0.5, 0.5, 0.4], "mean_response_tokens": [30.0, 40, 50, 45, 35],
        "speedup_static": [1.6, np.nan, 1.4, np.nan, 1.3], "speedup_adaptive": [1.6, np.nan, 1.8, np.nan, 1.7]})


def test_accept_curves_draw_both_drafters_in_their_preset_colours(steps):
    fig = accept_curves(steps)
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    assert list(lines["static-drafter"].get_ydata()) == steps["accept_static"].tolist()
    assert list(lines["tlt"].get_ydata()) == steps["accept_adaptive"].tolist()
    assert lines["tlt"].get_color() == color_for("tlt")
    assert "accept length" in fig.axes[0].get_ylabel()


def test_bubble_bars_stack_the_update_on_the_rollout_and_show_training(steps):
    ax = bubble_training(steps).axes[0]
    bars = {c.get_label(): c for c in ax.containers}
    update = bars["GRPO update"]
    assert [p.get_y() for p in update.patches] == steps["rollout_s"].tolist()
    assert [p.get_height() for p in update.patches] == steps["update_s"].tolist()
    train = next(c for k, c in bars.items() if k.startswith("drafter training"))
    assert [p.get_height() for p in train.patches] == steps["bubble_train_s"].tolist()
    assert ax.get_ylabel() == "time (s)"


def test_speedup_curves_skip_unmeasured_steps_and_mark_one_x(steps):
    ax = speedup_curves(steps, batch=4).axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert list(lines["tlt (adaptive)"].get_xdata()) == [0, 2, 4]
    assert list(lines["no SD (1x)"].get_ydata()) == [1.0, 1.0]
    assert "batch 4" in ax.get_ylabel()


def test_reward_and_dynamics_figures_are_labelled(steps):
    fig = reward_curves(steps)
    assert fig.axes[0].get_ylabel().startswith("mean reward") and "tokens" in fig.axes[1].get_ylabel()
    fig = dynamics_fit([0, 1, 2], [1.0, 0.9, 0.8], [1.0, 0.98, 0.99], [1.0, 0.9, 0.85], [1.0, 0.97, 0.98])
    labels = [ln.get_label() for ln in fig.axes[0].get_lines()]
    assert "tlt: measured" in labels and "static-drafter: simulator, fitted" in labels

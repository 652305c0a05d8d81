"""One look for every figure: consistent colours per policy and per trace source, paper sizes.

Colours are assigned from a fixed table for the policies the project ships, and deterministically
(by a stable hash into the palette) for any other name, so a policy has the same colour in every
figure of every report.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from tltsim.atomic import write_with

# Okabe-Ito colour-blind-safe palette, extended.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000",
           "#999999", "#882255", "#44AA99", "#117733"]

POLICY_COLORS = {
    "no-sd": "#999999",
    "static": "#56B4E9",
    "elastic+static": "#0072B2",
    "beg-mab": "#E69F00",
    "elastic+beg-mab": "#D55E00",
    "eps-greedy": "#CC79A7",
    "ucb1": "#882255",
    "vllm-table": "#009E73",
    "sglang-ema": "#44AA99",
    "oracle": "#000000",
    "elastic+oracle": "#117733",
}


def policy_family(spec: str) -> str:
    """A policy spec without its parameters (``elastic:16:3+beg-mab:eps=0.05`` -> ``elastic+beg-mab``)."""
    return "+".join(part.split(":", 1)[0].strip() for part in spec.split("+"))


def color_for(name: str) -> str:
    """Stable colour for a policy or source name (a policy's parameters do not change its colour)."""
    if name in POLICY_COLORS:
        return POLICY_COLORS[name]
    family = policy_family(name)
    if family in POLICY_COLORS:
        return POLICY_COLORS[family]
    digest = int(hashlib.sha1(name.encode()).hexdigest(), 16)
    return PALETTE[digest % len(PALETTE)]


def paper_rc() -> dict:
    """Matplotlib settings for single-column paper figures."""
    return {"figure.figsize": (6.0, 3.6), "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9,
            "legend.fontsize": 7.5, "axes.grid": True, "grid.alpha": 0.3, "savefig.dpi": 200,
            "savefig.bbox": "tight"}


def save_figure(fig: plt.Figure, stem: str | Path) -> list[Path]:
    """Save ``fig`` as ``stem.png`` and ``stem.pdf`` atomically; close it; return the paths."""
    stem = Path(stem)
    paths = [write_with(stem.with_suffix(ext), fig.savefig) for ext in (".png", ".pdf")]
    plt.close(fig)
    return paths

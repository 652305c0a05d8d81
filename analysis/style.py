"""One look for every figure: consistent colours per policy, preset and trace source; paper sizes;
legends that never cover data.

Colours. The policies and presets the project ships, and the sources of the catalogued traces, have
fixed colours (:data:`POLICY_COLORS`, :data:`SOURCE_COLORS`), so ``tlt`` is the same vermillion in
every figure of every report. A figure asks :func:`colors_for` for all its names at once: known names
take their fixed colour; a policy spec with parameters (``elastic:16:3+beg-mab``) takes its family's;
every other name takes the next colour of the ordered :data:`PALETTE` that no name of the figure has,
in sorted order (numbers by value), and past the palette the candidate colour farthest from those
already in the figure. Two names of one figure therefore never share a colour (a hash into the palette
did: two sources could collide), and the assignment depends only on the set of names, not on the
order they are plotted in.

Legends go outside the axes (:func:`legend_outside`): the figure grows by the legend's width, so the
plot keeps its size and no curve is hidden behind a legend box.
"""

from __future__ import annotations

import colorsys
import itertools
import re
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.colors import to_hex, to_rgb
from matplotlib.legend import Legend

from tltcore.atomic import write_with

#: Colours for names without a fixed one, in the order they are handed out: Okabe-Ito (colour-blind
#: safe), then Paul Tol's muted set; yellow last (weak on white).
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#882255", "#000000",
           "#999999", "#44AA99", "#117733", "#332288", "#AA4499", "#999933", "#CC6677", "#6699CC",
           "#DDCC77", "#F0E442"]

#: Fixed colours of the shipped policies and presets; all distinct, so any mix of them in one figure
#: keeps them apart without reassignment. Baselines without SD are greys, TLT and its ablations warm.
POLICY_COLORS = {
    "no-sd": "#999999",
    "verl": "#555555",
    "tlt": "#D55E00",
    "tlt-base": "#E69F00",
    "tlt-no-spot": "#CC79A7",
    "tlt-periodic": "#EE7733",
    "tlt-no-elastic": "#DDCC77",
    "tlt-no-mab": "#CC6677",
    "static-drafter": "#88CCEE",
    "speco-bubble": "#332288",
    "elastic+beg-mab": "#882255",
    "beg-mab": "#AA4499",
    "static": "#0072B2",
    "elastic+static": "#6699CC",
    "vllm-table": "#009E73",
    "sglang-ema": "#44AA99",
    "greedy-oracle": "#000000",
    "cost-aware": "#56B4E9",
    "upper bound": "#2B2B2B",
    "elastic+greedy-oracle": "#117733",
    "eps-greedy": "#999933",
    "ucb1": "#661100",
}

#: Fixed colours of the catalogued traces' sources (``tlt trace list``).
SOURCE_COLORS = {
    "polytrace/verl_dapo_qwen2.5-32b": "#0072B2",
    "polytrace/rllm_deepcoder_14b_16k": "#E69F00",
    "polytrace/verl_video_qwen2.5-vl-7b": "#009E73",
    "polytrace/search_r1_qwen2.5-7b": "#CC79A7",
    "task-hardness-analysis/aime": "#D55E00",
    "servegen_r1": "#56B4E9",
    "profile/intern_s1_math": "#882255",
}

#: Fixed colours of reference data drawn beside ours (published numbers, real measurements).
REFERENCE_COLORS = {"paper": "#1F3A5F", "real": "#2B2B2B"}

KNOWN_COLORS = {**SOURCE_COLORS, **POLICY_COLORS, **REFERENCE_COLORS}


def policy_family(spec: str) -> str:
    """A policy spec without its parameters (``elastic:16:3+beg-mab:eps=0.05`` -> ``elastic+beg-mab``)."""
    return "+".join(part.split(":", 1)[0].strip() for part in spec.split("+"))


@cache
def _candidates() -> tuple[tuple[str, ...], np.ndarray]:
    """Colours beyond the palette (matplotlib's tab20 and a grid of hues x saturation/value), with
    their RGB values."""
    cmap = plt.get_cmap("tab20")
    grid = [to_hex(colorsys.hsv_to_rgb(h / 36, sat, val)) for sat, val in ((0.85, 0.75), (0.5, 0.9), (0.9, 0.45))
            for h in range(36)]
    names = tuple(dict.fromkeys([to_hex(cmap(i)) for i in range(cmap.N)] + grid))
    return names, np.array([to_rgb(c) for c in names])


def _farthest(used: set[str]) -> str:
    """The candidate colour farthest (RGB distance) from every colour already in the figure, so a
    figure with more names than the palette still gets colours one can tell apart; past the
    candidates, hues spaced by the golden ratio (never one already used)."""
    names, rgb = _candidates()
    free = np.array([c not in used for c in names])
    if free.any():
        taken = np.array([to_rgb(c) for c in used] or [(1.0, 1.0, 1.0)])
        dist = ((rgb[:, None, :] - taken[None, :, :]) ** 2).sum(axis=2).min(axis=1)
        return names[int(np.argmax(np.where(free, dist, -1.0)))]
    for k in itertools.count(len(used)):
        colour = to_hex(colorsys.hsv_to_rgb((k * 0.6180339887) % 1.0, 0.65, 0.75))
        if colour not in used:
            return colour
    raise AssertionError("unreachable")


def natural_key(name: str) -> list[tuple[int, int | str]]:
    """Sort key with numbers by value: step 2 before step 10."""
    return [(0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"(\d+)", name) if t]


def colors_for(names: Iterable[object]) -> dict[str, str]:
    """A distinct colour for every name of one figure (see the module docstring for the rules)."""
    unique = sorted({str(n) for n in names}, key=natural_key)
    out: dict[str, str] = {}
    used: set[str] = set()

    def take(name: str, colour: str | None) -> None:
        if colour is not None and name not in out and colour.lower() not in used:
            out[name] = colour
            used.add(colour.lower())

    for name in unique:  # exact names first: a family match must not take a known name's colour
        take(name, KNOWN_COLORS.get(name))
    for name in unique:
        take(name, KNOWN_COLORS.get(policy_family(name)))
    palette = iter(PALETTE)
    for name in unique:
        while name not in out:
            take(name, next(palette, None) or _farthest(used))
    return out


def color_for(name: str) -> str:
    """The colour of one name drawn alone: its fixed colour, its policy family's, or the palette's
    first. A figure with several names must use :func:`colors_for`, which keeps them apart."""
    return colors_for([name])[name]


#: Legend entries per column before :func:`legend_outside` starts another column.
LEGEND_ROWS = 14


def legend_outside(ax: plt.Axes, *args: Any, **kwargs: Any) -> Legend:
    """``ax.legend(...)`` to the right of ``ax``, outside it, with the figure widened by the
    legend's width so the axes keep their size (call ``fig.tight_layout()`` afterwards). Long
    legends (``--by step`` over 30 steps) wrap into columns of :data:`LEGEND_ROWS`."""
    fig = ax.figure
    entries = len(kwargs["handles"]) if "handles" in kwargs else len(ax.get_legend_handles_labels()[0])
    kwargs = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0.0,
              "ncol": max(1, -(-entries // LEGEND_ROWS)), **kwargs}
    legend = ax.legend(*args, **kwargs)
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    width = legend.get_window_extent(renderer).width / fig.dpi
    w, h = fig.get_size_inches()
    fig.set_size_inches(w + width + 0.15, h)
    return legend


def category_ticks(ax: plt.Axes, positions: Any, labels: list[str], width_chars: float = 60.0) -> None:
    """Category tick labels that never overlap: slanted when they would not fit side by side."""
    long = sum(len(str(label)) + 2 for label in labels) > width_chars
    ax.set_xticks(positions, labels, rotation=30 if long else 0, ha="right" if long else "center",
                  rotation_mode="anchor" if long else "default")


def annotate_cells(ax: plt.Axes, values: np.ndarray, image: Any, fmt: str = "{:.2f}") -> None:
    """Write each finite cell's value on a heat map, white on dark cells and black on light ones."""
    for (i, j), v in np.ndenumerate(values):
        if np.isfinite(v):
            r, g, b, _ = image.cmap(image.norm(v))
            dark = 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.45
            ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=6.5, color="white" if dark else "black")


def paper_rc() -> dict:
    """Matplotlib settings for single-column paper figures."""
    return {"figure.figsize": (6.0, 3.6), "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9,
            "legend.fontsize": 7.5, "axes.grid": True, "grid.alpha": 0.3, "savefig.dpi": 200,
            "savefig.bbox": "tight"}


#: File metadata per format: a PDF records its creation date unless told not to, so two identical
#: runs wrote different bytes; without it every figure file depends only on the figure.
SAVE_METADATA: dict[str, dict[str, Any]] = {".png": {}, ".pdf": {"CreationDate": None}}


def save_figure(fig: plt.Figure, stem: str | Path) -> list[Path]:
    """Save ``fig`` as ``stem.png`` and ``stem.pdf`` atomically, byte for byte the same for the same
    figure (:data:`SAVE_METADATA`); close it; return the paths. The figures are drawn inside
    ``plt.rc_context(paper_rc())`` but saved after it has closed, where savefig fell back to 100 dpi
    and no tight box (a title or bar label past the edge was cut): the paper's dpi and box are passed
    here, for every figure."""
    stem = Path(stem)
    rc = paper_rc()

    def save(tmp: Path, ext: str) -> None:
        fig.savefig(tmp, format=ext[1:], metadata=SAVE_METADATA[ext], dpi=rc["savefig.dpi"],
                    bbox_inches=rc["savefig.bbox"])

    paths = [write_with(stem.with_suffix(ext), lambda tmp, ext=ext: save(tmp, ext)) for ext in (".png", ".pdf")]
    plt.close(fig)
    return paths

"""Figures of the spread of an answer: over simulation seeds (``tlt sim run --seeds N``) and over the
unmeasured inputs (``tlt sim sensitivity``'s tornado chart)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.style import category_ticks, colors_for, legend_outside, paper_rc, save_figure


def seed_spread_figure(per_seed: pd.DataFrame, name: str, panels: Sequence[tuple[str, str]], stem: str | Path,
                       title: str = "") -> list[Path]:
    """One panel per ``(column, axis label)`` of ``panels``: per policy (or preset, ``name``) its
    median over the seeds (a marker), the min–max (a whisker) and each seed (small dots), one colour
    per policy. Saved as ``stem.png`` and ``stem.pdf``."""
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(per_seed[name].astype(str)))
    colours = colors_for(names)
    seeds = per_seed["seed"].nunique()
    with plt.rc_context(paper_rc()):
        fig, axes = plt.subplots(1, len(panels), figsize=(3.9 * len(panels), 3.4), squeeze=False)
        for ax, (col, label) in zip(axes[0], panels, strict=True):
            for i, n in enumerate(names):
                v = pd.to_numeric(per_seed.loc[per_seed[name].astype(str) == n, col], errors="coerce").to_numpy(float)
                v = v[np.isfinite(v)]
                if not v.size:
                    continue
                med = float(np.median(v))
                jitter = np.linspace(-0.12, 0.12, v.size) if v.size > 1 else np.zeros(1)
                ax.scatter(i + jitter, v, s=9, color=colours[n], alpha=0.45, linewidths=0, zorder=2)
                ax.errorbar([i], [med], yerr=[[med - v.min()], [v.max() - med]], fmt="o", color=colours[n],
                            capsize=4, markersize=6, elinewidth=1.4, zorder=3, label=n)
            category_ticks(ax, range(len(names)), names, width_chars=40)
            ax.set_xlabel("policy" if name == "policy" else "preset")
            ax.set_ylabel(label)
            if col.startswith("speedup") or col.endswith("speedup"):
                ax.axhline(1.0, color="#555555", lw=0.8, ls="--", zorder=1)
        axes[0][0].set_title(title or f"median (marker), min–max (whisker) over {seeds} seeds", loc="left")
        handles, labels = axes[0][0].get_legend_handles_labels()
        legend_outside(axes[0][-1], handles=handles, labels=labels, title=name)
        fig.tight_layout()
        return save_figure(fig, stem)


def tornado_figure(table: pd.DataFrame, facts: dict[str, object], stem: str | Path) -> list[Path]:
    """The tornado chart of ``tlt sim sensitivity``: one bar per factor, from the base answer to the
    answer at the factor's low value (one colour) and at its high value (another), the factor with
    the largest swing on top; whiskers are the min–max over the seeds at each end; a dashed line is
    the base answer. Saved as ``stem.png`` and ``stem.pdf``."""
    import matplotlib.pyplot as plt

    base = float(facts["answer"])
    rows = table.sort_values("swing", ascending=True, kind="stable", na_position="first")  # largest on top
    colours = {"low value": "#0072B2", "high value": "#E69F00"}
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots(figsize=(6.0, 0.45 * len(rows) + 1.4))
        labels: list[str] = []
        seen: set[str] = set()
        for i, r in enumerate(rows.itertuples(index=False)):
            notes = {side: str(getattr(r, f"note_{side}", "")) for side in ("low", "high")}
            shown = {side: f"{getattr(r, f'{side}_value')}" + (" not run" if notes[side].startswith("not run") else "")
                     for side in ("low", "high")}
            labels.append(f"{r.factor}\n({shown['low']} / {shown['high']}; as given {r.base_value})")
            for side, key in (("low", "low value"), ("high", "high value")):
                med = getattr(r, f"answer_{side}")
                if not np.isfinite(med) or notes[side] == "as given":
                    continue
                ax.barh(i, med - base, left=base, height=0.6, color=colours[key], alpha=0.85,
                        label=None if key in seen else key)
                seen.add(key)
                lo, hi = getattr(r, f"answer_{side}_min"), getattr(r, f"answer_{side}_max")
                if np.isfinite(lo) and hi > lo:
                    ax.errorbar([med], [i], xerr=[[med - lo], [hi - med]], fmt="none", color="#222222",
                                capsize=3, elinewidth=0.9)
        ax.axvline(base, color="#222222", lw=1.0, ls="--", label=f"as given: {base:.3f}x")
        ax.set_yticks(range(len(rows)), labels, fontsize=7)
        ax.set_xlabel(f"{facts['best']}: {facts['metric']} (x)")
        ax.set_ylabel("input varied (low / high)")
        seeds = int(facts.get("seeds", 1))
        ax.set_title(f"Sensitivity of {facts['best']}'s speedup, median of {seeds} seed{'s' if seeds != 1 else ''}",
                     loc="left")
        legend_outside(ax)
        fig.tight_layout()
        return save_figure(fig, stem)


__all__ = ["seed_spread_figure", "tornado_figure"]

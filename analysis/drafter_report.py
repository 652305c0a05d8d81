"""The adaptive-drafter report (``tlt real rl-report``): several ``tlt real rl`` runs -- the designed
drift over two or more seeds and a no-drift run -- side by side, with the issue's measures.

What it computes, from each run's ``steps.csv`` and ``config.json`` alone (so it can be rebuilt from
the copies it keeps under ``runs/``):

* **Drifted steps.** The steps from the first one at which at least half of the measured text (the
  held-out prompts' greedy answers, on which every drafter is measured) is in the terse format; a
  no-drift run (and a drift run that never gets there) uses its second half, said so in the report.
  The rule is fixed before looking at accept lengths: it reads the format share only.
* **adaptive_over_static_accept**: per run, the mean over the drifted steps of
  ``accept_adaptive / accept_static``; the summary's value is the mean over the drift runs. The
  upper bound's ratio is over the drifted steps where it was measured.
* **natural_drift_adaptive_over_static_accept** (issue 44, item 4): the same ratio over the no-drift
  runs, paid for right answers from a verbose-only policy as ``tlt real grpo`` is: the drift the GRPO
  run itself produces, nothing designed. It is the headline: the designed drift shows what an adaptive
  drafter buys when the text changes a lot, the natural one what it bought on this task's own RL. Per
  run also ``adaptive_over_static_after_step0`` (every step after the first, no window chosen).
* **The simulator's drafter dynamics, checked out of sample**: the dynamics are fitted to one drift
  run (its static and adaptive accept curves and its training windows,
  :func:`tltreal.validation.dynamics_fit.fit_dynamics`) and the simulator's drafter model
  (:mod:`tltcore.drafter.dynamics`, what ``tltsim`` runs) then predicts the *other* drift runs' accept
  lengths step by step from their own training windows and their own step-0 acceptance; the error is
  measured there, on data the fit never saw.
* **Speed**: the SD speedups on the padded target with each repeat's value (median and min-max), and
  the step-time breakdown of the runs (rollout, drafter training and how much of it ran past the
  rollout, update).

The GRPO learning claim (held-out reward gain against a shuffled-reward control) is the 3-seed run of
``tlt real grpo`` (``reports/grpo-learning/summary.json``), cited with its own command: the drift runs
carry no control arm.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from analysis.markdown import markdown_table
from analysis.provenance import provenance_line
from analysis.style import colors_for, legend_outside, paper_rc, save_figure
from tltcore.errors import InputError

#: steps.csv's drafter suffix -> the name its line takes (and the colour: analysis/style.py's presets)
DRAFTER_NAMES = {"static": "static-drafter", "adaptive": "tlt", "upper": "upper bound"}
DRAFTER_LABELS = {"static": "static (trained once before RL)", "adaptive": "adaptive (Spot Trainer)",
                  "upper": "upper bound (retrained on the step's policy)"}
#: the measured text counts as drifted from the first step with at least this terse share
DRIFTED_SHARE = 0.5
DRIFT_TEXT = """\
The policy's change is designed, not found. The policy is pre-trained on worked solutions in two formats,
80% verbose (`03 37+8=45`) and 20% terse (`03 +8=45`, the operand the line above already shows dropped):
it writes mostly verbose (2% of its greedy answers, 25% of its temperature-1 samples are terse). The drift
runs then pay GRPO half for a right answer and half for the terse format (`--reward format`,
`tltreal/rl/task.py: format_bonus_reward`), so the policy moves from one format to the other within tens of
steps and the text the drafters must predict changes with it. Why designed: a drafter only goes stale when
the policy's text changes, and on this task a GRPO run that only learns to answer better changes its text
far less (the no-drift run); a real RL run's drift (longer reasoning, new phrasings) is of this kind but not
controllable on a CPU in an hour. Why this reward: paying only terse *right* answers gave ~1% of rollouts
a reward and moved nothing in 6 steps. Its cost, shown on the right: right answers fall as the terse format
takes over (the policy writes the format it was pre-trained less on, and the format half of the reward
pays terse wrong answers). The static drafter is trained to convergence on the pre-RL policy's greedy text
(1,024 responses, 1,500 steps: as good as training makes it on that policy, `--static-temperature 0`); the
side run trains it on temperature-1 samples instead, which already contain the terse format.\
"""
#: what the report keeps of each run: its trace.csv (~370 KB) and README (figures not kept) stay in the run folder
RUN_FILES = ("steps.csv", "config.json", "drafter_dynamics.json")


@dataclass(frozen=True)
class Run:
    """One ``tlt real rl`` run folder as the report reads it; ``name`` is how the report calls it."""

    name: str
    steps: pd.DataFrame
    config: dict
    folder: Path

    @property
    def drift(self) -> bool:
        """Whether the run was paid for the terse format (the designed drift)."""
        return self.config["config"].get("reward_kind", "answer") != "answer"

    @property
    def side(self) -> bool:
        """A drift run whose static drafter was trained on the pre-RL policy's *samples*
        (``--static-temperature`` > 0), not its greedy text: reported beside the drift seeds, not
        among them (a different static baseline, not another seed of the same measurement)."""
        return self.drift and float(self.config["config"].get("initial_temperature", 0.0)) > 0

    @property
    def seed(self) -> int:
        return int(self.config["config"]["seed"])


def read_run(name: str, folder: str | Path) -> Run:
    """A run folder written by ``tlt real rl``; one error line naming it otherwise."""
    folder = Path(folder)
    try:
        steps = pd.read_csv(folder / "steps.csv")
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"not a `tlt real rl` run folder ({exc})", path=folder, field="--run") from None
    needed = {"step", "accept_static", "accept_adaptive", "eval_terse_share", "terse_share", "train_windows"}
    if not needed <= set(steps.columns):
        raise InputError(f"steps.csv lacks {sorted(needed - set(steps.columns))} (made by an older tlt real rl?)",
                         path=folder, field="--run")
    return Run(name, steps, config, folder)


def drifted_from(steps: pd.DataFrame, share: float = DRIFTED_SHARE) -> int | None:
    """The first step whose measured (greedy, held-out) text is at least ``share`` terse; None if none."""
    hit = steps.loc[steps["eval_terse_share"] >= share, "step"]
    return int(hit.iloc[0]) if len(hit) else None


def comparison_steps(run: Run) -> tuple[pd.DataFrame, str]:
    """The steps the drafters are compared over and why (module docstring: drifted steps)."""
    s = run.steps
    start = drifted_from(s) if run.drift else None
    if start is not None:
        last = int(s["step"].max())
        return s[s["step"] >= start], f"steps {start}-{last} (measured text >= 50% terse from step {start})"
    half = int(s["step"].max()) // 2 + 1 if len(s) > 1 else 0
    why = "no drift by design" if not run.drift else "the measured text never reached 50% terse"
    return s[s["step"] >= half], f"steps {half}-{int(s['step'].max())} (second half: {why})"


def ratios(run: Run) -> dict[str, object]:
    """Accept lengths and ratios over the compared steps of one run."""
    part, why = comparison_steps(run)
    after = run.steps[run.steps["step"] >= 1] if len(run.steps) > 1 else run.steps
    out: dict[str, object] = {"run": run.name, "seed": run.seed, "drift": run.drift, "side": run.side,
                              "static_temperature": float(run.config["config"].get("initial_temperature", 0.0)),
                              "compared": why,
                              "compared_steps": len(part),
                              "accept_static": float(part["accept_static"].mean()),
                              "accept_adaptive": float(part["accept_adaptive"].mean()),
                              "adaptive_over_static": float((part["accept_adaptive"] / part["accept_static"]).mean()),
                              "adaptive_over_static_after_step0": float(
                                  (after["accept_adaptive"] / after["accept_static"]).mean()),
                              "accept_static_step0": float(run.steps["accept_static"].iloc[0]),
                              "eval_terse_share_first": float(run.steps["eval_terse_share"].iloc[0]),
                              "eval_terse_share_last": float(run.steps["eval_terse_share"].iloc[-1]),
                              "terse_share_first": float(run.steps["terse_share"].iloc[0]),
                              "terse_share_last": float(run.steps["terse_share"].iloc[-1])}
    up = part.dropna(subset=["accept_upper"]) if "accept_upper" in part else part.iloc[0:0]
    if len(up):
        out.update(accept_upper=float(up["accept_upper"].mean()), upper_steps=len(up),
                   upper_over_static=float((up["accept_upper"] / up["accept_static"]).mean()),
                   upper_over_adaptive=float((up["accept_upper"] / up["accept_adaptive"]).mean()),
                   upper_above_both=bool((up["accept_upper"].mean() > up["accept_adaptive"].mean())
                                         and (up["accept_upper"].mean() > up["accept_static"].mean())))
    return out


# ---- the simulator, fitted on one run and checked on the others ---------------------------------------------
def simulator_check(fit_run: Run, check_runs: Sequence[Run]) -> tuple[dict[str, object], pd.DataFrame]:
    """Fit the drafter dynamics to ``fit_run`` and predict each of ``check_runs`` (module docstring)."""
    from tltcore.drafter.dynamics import DrafterConfig
    from tltreal.validation.dynamics_fit import (
        adaptive_curve,
        expected_accept_length,
        fit_dynamics,
        per_position_rate,
        scenario_section,
        static_curve,
    )

    depth = int(fit_run.config["config"]["depth"])
    s = fit_run.steps
    fit = fit_dynamics(s["accept_static"].tolist(), s["accept_adaptive"].tolist(), s["train_windows"].tolist(),
                       depth=depth)
    dyn = DrafterConfig(stale_quality=fit.stale_quality, drift=fit.drift, recovery_samples=fit.recovery_samples)
    rows = []
    for run in [fit_run, *check_runs]:
        c = run.steps
        base = per_position_rate(float(c["accept_static"].iloc[0]), depth)
        curves = {"static": static_curve(fit.stale_quality, fit.drift, len(c)),
                  "adaptive": adaptive_curve(dyn, c["train_windows"].tolist())}
        for name, q in curves.items():
            for step, quality, measured in zip(c["step"], q, c[f"accept_{name}"], strict=True):
                rows.append({"run": run.name, "fitted_on_it": run is fit_run, "drafter": name, "step": int(step),
                             "measured": float(measured),
                             "predicted": expected_accept_length(min(1.0, base * float(quality)), depth)})
    table = pd.DataFrame(rows)
    table["error"] = table["predicted"] - table["measured"]
    held = table[~table["fitted_on_it"]]
    summary = {"fitted_on": fit_run.name, "checked_on": [r.name for r in check_runs],
               "drafter_section": scenario_section(fit), "fit_rms_quality": {"static": fit.static_rms,
                                                                             "adaptive": fit.adaptive_rms},
               "checked_mae_tokens": {d: float(g["error"].abs().mean()) for d, g in held.groupby("drafter")},
               "checked_mean_error_tokens": {d: float(g["error"].mean()) for d, g in held.groupby("drafter")},
               "checked_mape": {d: float((g["error"].abs() / g["measured"]).mean())
                                for d, g in held.groupby("drafter")}}
    return summary, table


# ---- figures --------------------------------------------------------------------------------------------------
def _steps_axis(ax: plt.Axes) -> None:
    ax.set_xlabel("RL step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def accept_figure(runs: Sequence[Run], depth: int) -> plt.Figure:
    """Accept length per step of the three drafters, one panel per run; the shaded span is the
    compared (drifted) steps."""
    colours = colors_for(DRAFTER_NAMES.values())
    with plt.rc_context(paper_rc()):
        fig, axes = plt.subplots(1, len(runs), figsize=(3.3 * len(runs), 3.2), sharey=True, squeeze=False)
        for ax, run in zip(axes[0], runs, strict=True):
            s = run.steps
            part, _ = comparison_steps(run)
            if len(part):
                ax.axvspan(part["step"].min() - 0.5, part["step"].max() + 0.5, color="0.9", lw=0,
                           label="compared steps")
            for key, preset in DRAFTER_NAMES.items():
                col = f"accept_{key}"
                if col not in s or s[col].isna().all():
                    continue
                d = s.dropna(subset=[col])
                ax.plot(d["step"], d[col], marker="o", ms=2.5, lw=1.2, color=colours[preset], label=DRAFTER_LABELS[key])
            ax.set_title(run.name)
            _steps_axis(ax)
        axes[0][0].set_ylabel(f"accept length (tokens / SD iteration, {depth}-chain)")
        legend_outside(axes[0][-1])
        fig.tight_layout()
    return fig


def drift_figure(runs: Sequence[Run]) -> plt.Figure:
    """The drift itself: terse share of the rollouts (temperature 1) and of the measured greedy text,
    and the rollouts' answer reward, per step and run."""
    colours = colors_for([r.name for r in runs])
    with plt.rc_context(paper_rc()):
        fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.2), sharex=True)
        for run in runs:
            s, c = run.steps, colours[run.name]
            axes[0].plot(s["step"], s["terse_share"], color=c, lw=1.2, label=f"{run.name}: rollouts (T=1)")
            axes[0].plot(s["step"], s["eval_terse_share"], color=c, lw=1.2, ls="--",
                         label=f"{run.name}: measured text (greedy)")
            axes[1].plot(s["step"], s["answer_reward"], color=c, lw=1.2, label=f"{run.name}: right answers")
            if run.drift:
                axes[1].plot(s["step"], s["reward"], color=c, lw=1.0, ls=":", label=f"{run.name}: reward paid")
        axes[0].axhline(DRIFTED_SHARE, color="0.5", lw=0.8, ls=":")
        axes[0].set_ylabel("terse share (fraction of responses)")
        axes[0].set_title("the format the policy writes")
        axes[1].set_ylabel("mean over the step's 128 rollouts")
        axes[1].set_title("rollout reward")
        for ax in axes:
            _steps_axis(ax)
            ax.set_ylim(-0.02, 1.02)
        handles, labels = [], []
        for ax in axes:
            h, lab = ax.get_legend_handles_labels()
            handles += h
            labels += lab
        legend_outside(axes[1], handles, labels)
        fig.tight_layout()
    return fig


def speedup_figure(run: Run) -> plt.Figure:
    """SD speedup on the padded target per measured step and drafter: the median of the repeats and
    their min-max as an error bar."""
    colours = colors_for(DRAFTER_NAMES.values())
    s = run.steps
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots()
        offsets = {"static": -0.25, "adaptive": 0.0, "upper": 0.25}
        for key, preset in DRAFTER_NAMES.items():
            col = f"speedup_{key}"
            if col not in s:
                continue
            d = s.dropna(subset=[col])
            ax.errorbar(d["step"] + offsets[key], d[col], yerr=[d[col] - d[f"{col}_min"], d[f"{col}_max"] - d[col]],
                        fmt="o", ms=4, capsize=3, color=colours[preset], label=DRAFTER_LABELS[key])
        ax.axhline(1.0, color="0.4", ls="--", lw=1, label="no SD (1x)")
        cfg = run.config["config"]
        ax.set_ylabel(f"SD speedup at batch {cfg['speedup_batch']} (x, tokens/s)")
        ax.set_title(f"{run.name}: padded target, {cfg['depth']}-token chain, median and min-max of "
                     f"{cfg['speedup_repeats']} repeats", fontsize=8)
        _steps_axis(ax)
        legend_outside(ax)
        fig.tight_layout()
    return fig


def step_time_figure(runs: Sequence[Run]) -> plt.Figure:
    """Mean seconds per RL step by phase, one bar per run: the rollout (worker processes, SD on),
    drafter training inside the rollout's bubble (overlapped: it costs the step nothing), drafter
    training past the rollout's end (the step waits for it), the GRPO update."""
    parts = {"rollout_s": ("rollout (2 worker processes, SD)", "#0072B2"),
             "train_overrun_s": ("drafter training past the rollout's end", "#D55E00"),
             "update_s": ("GRPO update", "#555555")}
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots()
        x = np.arange(len(runs))
        bottom = np.zeros(len(runs))
        for col, (label, colour) in parts.items():
            vals = np.array([float(r.steps[col].mean()) if col in r.steps else 0.0 for r in runs])
            ax.bar(x, vals, bottom=bottom, width=0.6, color=colour, label=label)
            bottom += vals
        inside = np.array([float(r.steps["bubble_train_s"].mean()) for r in runs])
        ax.bar(x + 0.22, inside, width=0.12, color="#009E73", label="drafter training inside the bubble (overlapped)")
        ax.set_xticks(x, [r.name for r in runs])
        ax.set_ylabel("mean time per RL step (s, wall)")
        ax.set_title("Where an RL step's time goes (measurements and the upper bound excluded)")
        legend_outside(ax)
        fig.tight_layout()
    return fig


def simulator_figure(table: pd.DataFrame, fitted_on: str) -> plt.Figure:
    """Measured accept length and the simulator's prediction per step, one panel per run."""
    colours = colors_for(DRAFTER_NAMES.values())
    names = list(dict.fromkeys(table["run"]))
    with plt.rc_context(paper_rc()):
        fig, axes = plt.subplots(1, len(names), figsize=(3.3 * len(names), 3.2), sharey=True, squeeze=False)
        for ax, name in zip(axes[0], names, strict=True):
            part = table[table["run"] == name]
            for key in ("static", "adaptive"):
                d = part[part["drafter"] == key]
                c = colours[DRAFTER_NAMES[key]]
                ax.plot(d["step"], d["measured"], marker="o", ms=2.5, ls="none", color=c, label=f"{key}: measured")
                ax.plot(d["step"], d["predicted"], color=c, lw=1.2, label=f"{key}: simulator's prediction")
            ax.set_title(f"{name} ({'fitted on it' if name == fitted_on else 'checked: not fitted on it'})",
                         fontsize=8)
            _steps_axis(ax)
        axes[0][0].set_ylabel("accept length (tokens / SD iteration)")
        legend_outside(axes[0][-1])
        fig.tight_layout()
    return fig


def end_to_end_rows(runs: Sequence[Run]) -> list[dict[str, object]]:
    """The end-to-end step-time measurements (``e2e_*`` columns, the last step of a run with speedups)."""
    out = []
    for r in runs:
        if "e2e_step_speedup" not in r.steps:
            continue
        for _, row in r.steps.dropna(subset=["e2e_step_speedup"]).iterrows():
            out.append({"run": r.name, "step": int(row["step"]),
                        **{k: (float(row[k]) if k not in ("e2e_rollout_nosd_repeats", "e2e_rollout_sd_repeats")
                               else [float(x) for x in str(row[k]).split()])
                           for k in row.index if k.startswith("e2e_")}})
    return out


# ---- the report ---------------------------------------------------------------------------------------------
def _fmt(x: object, f: str = ".2f") -> str:
    return "–" if x is None or (isinstance(x, float) and not np.isfinite(x)) else format(x, f)


def build_summary(runs: Sequence[Run], grpo: Mapping[str, object] | None, commands: Sequence[str],
                  sim: Mapping[str, object] | None) -> dict[str, object]:
    """``summary.json``: the issue's keys and everything the README states."""
    per_run = [ratios(r) for r in runs]
    drift = [p for p in per_run if p["drift"] and not p["side"]]
    nodrift = [p for p in per_run if not p["drift"]]
    side = [p for p in per_run if p["side"]]
    speed = []
    for r in runs:
        for _, row in r.steps.dropna(subset=["speedup_adaptive"]).iterrows() if "speedup_adaptive" in r.steps else []:
            for key in DRAFTER_NAMES:
                if pd.notna(row.get(f"speedup_{key}")):
                    speed.append({"run": r.name, "step": int(row["step"]), "drafter": key,
                                  "speedup_median": float(row[f"speedup_{key}"]),
                                  "speedup_min": float(row[f"speedup_{key}_min"]),
                                  "speedup_max": float(row[f"speedup_{key}_max"]),
                                  "repeats": [float(v) for v in str(row[f"speedup_{key}_repeats"]).split()],
                                  "padded_accept": float(row[f"padded_accept_{key}"])})
    times = {r.name: {c: float(r.steps[c].mean()) for c in ("rollout_s", "bubble_train_s", "train_overrun_s",
                                                              "update_s", "eval_s", "step_s") if c in r.steps}
             for r in runs}
    out: dict[str, object] = {
        "seeds": sorted({p["seed"] for p in drift}),
        "adaptive_over_static_accept": float(np.mean([p["adaptive_over_static"] for p in drift])) if drift else None,
        "adaptive_over_static_accept_per_seed": {str(p["seed"]): p["adaptive_over_static"] for p in drift},
        "adaptive_15pct_above_static_every_seed": bool(drift) and all(p["adaptive_over_static"] >= 1.15 for p in drift),
        "upper_above_both_every_seed": bool(drift) and all(p.get("upper_above_both", False) for p in drift),
        "nodrift_adaptive_over_static_accept": float(np.mean([p["adaptive_over_static"] for p in nodrift]))
        if nodrift else None,
        "natural_drift_runs": [p["run"] for p in nodrift],
        "natural_drift_adaptive_over_static_accept": float(np.mean([p["adaptive_over_static"] for p in nodrift]))
        if nodrift else None,
        "natural_drift_adaptive_over_static_accept_per_run": {p["run"]: p["adaptive_over_static"] for p in nodrift},
        "natural_drift_adaptive_over_static_accept_sd": float(np.std([p["adaptive_over_static"] for p in nodrift],
                                                                     ddof=1)) if len(nodrift) > 1 else None,
        "natural_drift_adaptive_over_static_after_step0": float(np.mean(
            [p["adaptive_over_static_after_step0"] for p in nodrift])) if nodrift else None,
        "natural_drift_15pct_above_static_every_run": bool(nodrift) and all(
            p["adaptive_over_static"] >= 1.15 for p in nodrift),
        "side_runs_adaptive_over_static_accept": {p["run"]: p["adaptive_over_static"] for p in side},
        "end_to_end": end_to_end_rows(runs),
        "runs": per_run, "speedups": speed, "step_time_s": times, "simulator": dict(sim) if sim else None,
        "commands": list(commands)}
    if grpo is not None:
        out.update(reward_gain_mean=grpo.get("reward_gain_mean"),
                   control_reward_gain_mean=grpo.get("control_reward_gain_mean"),
                   margin_over_no_update_mean=grpo.get("margin_over_no_update_mean"),
                   margin_over_no_update_sd=grpo.get("margin_over_no_update_sd"),
                   reward_gain_source={"report": "reports/grpo-learning/summary.json", "command": grpo.get("command"),
                                       "seeds": grpo.get("seeds"), "meets_bar": grpo.get("meets_bar")})
    return out


def write_report(runs: Sequence[Run], out: str | Path, *, grpo_summary: Path | None, commands: Sequence[str],
                 command: str, force: bool = False, setup: Sequence[str] = ()) -> dict[str, object]:
    """Copy the runs' records under ``out/runs/NAME/`` and write ``summary.json``, ``README.md`` and the
    figures, atomically (:func:`tltcore.atomic.atomic_dir`, kind ``real-rl``: the report of ``tlt real rl``
    runs replaces an earlier one, never a folder tlt did not write, unless ``force``)."""
    from tltcore.atomic import atomic_dir, write_text

    grpo = json.loads(grpo_summary.read_text(encoding="utf-8")) if grpo_summary else None
    drift = [r for r in runs if r.drift and not r.side]
    sim, sim_table = None, None
    if len(drift) >= 2:
        sim, sim_table = simulator_check(drift[0], drift[1:])
    summary = build_summary(runs, grpo, [*setup, *commands], sim)
    summary["report_command"] = command
    summary["cost"] = [{"run": r.name, **{k: r.config.get(k) for k in ("cpu_s", "wall_s", "load_start", "load_end")}}
                       for r in runs]
    with atomic_dir(out, kind="real-rl", force=force,
                    inputs=[r.folder for r in runs] + ([grpo_summary] if grpo_summary else [])) as tmp:
        for r in runs:
            (tmp / "runs" / r.name).mkdir(parents=True)
            for f in RUN_FILES:
                if (r.folder / f).is_file():
                    shutil.copyfile(r.folder / f, tmp / "runs" / r.name / f)
        write_text(tmp / "summary.json", json.dumps(summary, indent=1) + "\n")
        depth = int(runs[0].config["config"]["depth"])
        save_figure(accept_figure(runs, depth), tmp / "accept")
        save_figure(drift_figure(runs), tmp / "drift")
        save_figure(step_time_figure(runs), tmp / "steptime")
        speed_runs = [r for r in runs if "speedup_adaptive" in r.steps and r.steps["speedup_adaptive"].notna().any()]
        for r in speed_runs:
            save_figure(speedup_figure(r), tmp / f"speedup-{r.name}")
        if sim_table is not None:
            write_text(tmp / "simulator_check.csv", sim_table.to_csv(index=False))
            save_figure(simulator_figure(sim_table, sim["fitted_on"]), tmp / "simulator")  # type: ignore[index]
        write_text(tmp / "README.md", render_readme(runs, summary, speed_runs, sim_table is not None))
    return summary


def upper_recipes(runs: Sequence[Run]) -> str:
    """How each run trained its upper bound, one sentence per distinct recipe (runs may differ: the report
    must not state one run's recipe for all)."""
    recipes: dict[tuple, list[str]] = {}
    for r in runs:
        c = r.config["config"]
        recipes.setdefault((c["upper_every"], c["upper_steps"], c["initial_lr"], c["upper_samples"]), []).append(r.name)
    parts = []
    for (every, steps, lr, samples), names in recipes.items():
        which = "" if len(recipes) == 1 else f" ({', '.join(names)})"
        parts.append(f"Upper bound{which}: every {every} steps, the static drafter fine-tuned {steps} steps at lr {lr} "
                     f"on the step's rollouts plus {samples} fresh temperature-1 responses of the step's policy.")
    return " ".join(parts)


def render_readme(runs: Sequence[Run], s: Mapping[str, object], speed_runs: Sequence[Run], has_sim: bool) -> str:
    """README.md from the runs and the summary."""
    cfg = runs[0].config
    c = cfg["config"]
    v = cfg.get("versions", {})
    per = s["runs"]
    drift = [p for p in per if p["drift"] and not p["side"]]  # type: ignore[union-attr]
    nodrift = [p for p in per if not p["drift"]]  # type: ignore[union-attr]
    side = [p for p in per if p["side"]]  # type: ignore[union-attr]
    out = ["# Adaptive drafter under the GRPO run's own drift and under a designed drift: static vs adaptive vs "
           "upper bound (real, CPU)", ""]
    out += ["Regenerate, with `OMP_NUM_THREADS=1` (the pre-training the runs start from, one `tlt real rl` run per "
            "line, then the report, which writes this folder from their run folders and copies their records under "
            "`runs/`):", "", "```bash",
            *s["commands"], s["report_command"], "```", ""]  # type: ignore[misc]
    out += [f"Device: this CPU ({provenance_line()}); torch {v.get('torch', '?')}, 1 torch thread per process; "
            "loads and times of each run are in `runs/NAME/config.json` (`load_start`, `load_end`, `cpu_s`, "
            "`wall_s`). The machine was shared with other jobs.", ""]
    ratio = s["adaptive_over_static_accept"]
    out += ["## Result", ""]
    natural = s.get("natural_drift_adaptive_over_static_accept")
    if natural is not None:
        sd = s.get("natural_drift_adaptive_over_static_accept_sd")
        out.append(f"- **Under the drift the GRPO run itself produces** (no designed drift: paid for right answers, "
                   f"pre-trained on verbose text only, as `tlt real grpo` is): **adaptive over static accept length "
                   f"{natural:.3f}x**" + (f" ± {sd:.3f} (sd over {len(nodrift)} seeds: " if sd is not None else
                                          " (one run: ") +
                   ", ".join(f"{p['run']} {p['adaptive_over_static']:.3f}x over {p['compared']}" for p in nodrift)
                   + f"; over every step after the first {s['natural_drift_adaptive_over_static_after_step0']:.3f}x). "
                   f"The >= 1.15x bar is **{'met' if s['natural_drift_15pct_above_static_every_run'] else 'not met'}** "
                   "under it. Static drafter's accept length at step 0 -> over the compared steps: " +
                   ", ".join(f"{p['run']} {p['accept_static_step0']:.2f} -> {p['accept_static']:.2f}" for p in nodrift)
                   + "; adaptive over the compared steps " + ", ".join(f"{p['accept_adaptive']:.2f}" for p in nodrift)
                   + ". The runs differ in how far their policy moves (per-run lines below): a policy that only "
                   "sharpens answers it mostly gets right changes its text little, one that is still learning the "
                   "task changes it more, and the static drafter falls further behind.")
    if ratio is not None:
        met = s["adaptive_15pct_above_static_every_seed"]
        out.append(f"- Under the designed drift (below): adaptive over static accept length, mean over the drifted "
                   f"steps: **{ratio:.3f}x** (mean of {len(drift)} drift seeds: " +
                   ", ".join(f"seed {p['seed']} {p['adaptive_over_static']:.3f}x" for p in drift) + "). The bar "
                   f"(>= 1.15x in every seed) is **{'met' if met else 'not met'}**.")
        ub = s["upper_above_both_every_seed"]
        out.append("- Upper bound above both in every drift seed (mean over the compared steps where it was "
                   f"measured): **{'yes' if ub else 'no'}** (" + ", ".join(
                       f"seed {p['seed']}: upper {_fmt(p.get('accept_upper'))}, adaptive "
                       f"{p['accept_adaptive']:.2f}, static {p['accept_static']:.2f}" for p in drift) + ").")
        if not ub:
            out.append("  Where it is not, the likely cause is the bound's construction, not the adaptive drafter "
                       "beating a converged one: the upper bound is the static drafter fine-tuned on *one* step's "
                       "policy alone (its rollouts and the fresh samples), while the adaptive drafter has trained on "
                       "every step's rollouts since step 0; once the policy's text stops changing (the measured text "
                       "is all terse for the last half of the run), many steps of nearly the same policy can be more "
                       "data than one step's. Each run's bound recipe is in the settings below.")
    by_name = {r.name: r for r in runs}
    for p in nodrift:
        r = by_name[str(p["run"])]
        out.append(f"- No designed drift ({p['run']}, same format throughout; band {r.config.get('band')}, rollout "
                   f"reward {r.steps['reward'].iloc[0]:.2f} -> {r.steps['reward'].iloc[-1]:.2f}, the policy's "
                   f"hidden-state drift from step 0 {r.steps['hidden_drift'].iloc[-1]:.3f} at the last step): "
                   f"adaptive/static {p['adaptive_over_static']:.3f}x over {p['compared']} (static "
                   f"{p['accept_static']:.2f}, adaptive {p['accept_adaptive']:.2f}, upper "
                   f"{_fmt(p.get('accept_upper'))}).")
    for p in side:
        out.append(f"- Beside them, {p['run']}: the same drift with a static drafter trained on the pre-RL policy's "
                   f"temperature-{p['static_temperature']:g} samples (which already hold the terse format): "
                   f"adaptive/static {p['adaptive_over_static']:.3f}x over {p['compared']} (static "
                   f"{p['accept_static']:.2f}, adaptive {p['accept_adaptive']:.2f}, upper "
                   f"{_fmt(p.get('accept_upper'))}).")
    if s.get("reward_gain_mean") is not None:
        src = s["reward_gain_source"]  # type: ignore[index]
        over = ("" if s.get("margin_over_no_update_mean") is None else
                f", a margin of **{s['margin_over_no_update_mean']:+.3f}** ± {s['margin_over_no_update_sd']:.3f} over "
                "the no-update arm")
        out.append("- GRPO learns (issue 26 item 1, **not** from these runs: they carry no control arm): held-out "
                   f"temperature-1 reward **{s['reward_gain_mean']:+.3f}**{over}, against the shuffled-reward control "
                   f"**{s['control_reward_gain_mean']:+.3f}**, mean over seeds {src['seeds']} of "
                   f"`reports/grpo-learning/` (`{src['command']}`).")
    out += ["", "Per run (compared steps: module `analysis/drafter_report.py`; accept lengths are means over them):",
            "", markdown_table(pd.DataFrame(per)[["run", "seed", "compared", "accept_static", "accept_adaptive",
                                                   "adaptive_over_static", "eval_terse_share_first",
                                                   "eval_terse_share_last", "terse_share_first", "terse_share_last"]],
                               {"seed": "d", "accept_static": ".2f", "accept_adaptive": ".2f",
                                "adaptive_over_static": ".3f", "eval_terse_share_first": ".2f",
                                "eval_terse_share_last": ".2f", "terse_share_first": ".2f",
                                "terse_share_last": ".2f"}), ""]
    out += ["![Accept length per RL step of the three drafters on identical greedy text](accept.png)", "",
            f"*Accept length per RL step ({c['depth']}-token chain, so at most {c['depth'] + 1} tokens per SD "
            f"iteration) of the static, adaptive and upper-bound drafters, measured on the same {c['eval_prompts']} "
            "held-out prompts, greedy: every drafter sees identical text. Shaded: the compared steps.*", ""]
    g = c.get("grpo", {})
    if g:
        out += ["Settings (from the runs' `config.json`): GRPO on band problems (step counts whose temperature-1 pass "
                f"rate is in [{c['band_low']}, {c['band_high']}]), {c['prompts_per_step']} prompts x "
                f"{g['group_size']} samples, lr {g['lr']}, {g['minibatches']} minibatches, clip {g['clip_eps']}, dual "
                f"clip {g['dual_clip']}, KL {g['kl_coef']}; rollouts on {c['workers']} Spot Trainer worker processes "
                f"with SD policy `{c['sd_policy']}`. Drafters measured with a {c['depth']}-token chain on "
                f"{c['eval_prompts']} held-out band prompts, greedy. Static: trained once, {c['initial_steps']} steps "
                f"at lr {c['initial_lr']} on {c['initial_prompts']} responses of the pre-RL policy at temperature "
                f"{c['initial_temperature']:g}. Adaptive: the Spot Trainer, bubble mode `{c['bubble']}` "
                f"({c['budget_steps']} optimizer steps per RL step on the first released worker, lr {c['online_lr']}, "
                f"data of the last 2 steps), loss `{c['drafter_loss']}`, response-only {c['response_only']}. "
                + upper_recipes(runs), ""]
    out += ["## The drift is by design", "", DRIFT_TEXT, ""]
    out += ["![Terse share and rollout reward per RL step](drift.png)", "",
            "*Left: the share of responses in the terse format, of the step's rollouts (temperature 1) and of the "
            "measured greedy text. Right: the rollouts' right-answer rate, and for drift runs the reward paid.*", ""]
    if has_sim:
        sim = s["simulator"]
        assert isinstance(sim, dict)
        out += ["## The simulator, fed and checked", "",
                f"Drafter dynamics fitted to {sim['fitted_on']} (`tltreal/validation/dynamics_fit.py`), as the "
                "`[drafter]` section a scenario takes:", "", "```toml", "[drafter]",
                *(f"{k} = {val:.4g}" for k, val in sim["drafter_section"].items()), "```", "",
                "Checked on " + ", ".join(sim["checked_on"]) + " (not fitted on): mean absolute error of the "
                "predicted accept length " + ", ".join(f"{d} {e:.2f} tokens ({sim['checked_mape'][d]:.1%})"
                                                       for d, e in sim["checked_mae_tokens"].items()) +
                "; mean signed error " + ", ".join(f"{d} {e:+.2f}" for d, e in sim["checked_mean_error_tokens"].items())
                + ".", "",
                "![The simulator's predicted accept length beside the measured one](simulator.png)", "",
                "*Measured accept length (points) and the simulator's drafter model's prediction (lines); the "
                "checked runs' predictions use only their own step-0 acceptance and training windows.*", ""]
    out += ["## Speed", ""]
    for r in speed_runs:
        out += [f"![SD speedup on the padded target, {r.name}](speedup-{r.name}.png)", ""]
    sp = pd.DataFrame(s["speedups"])  # type: ignore[arg-type]
    if len(sp):
        out += [markdown_table(sp[["run", "step", "drafter", "speedup_median", "speedup_min", "speedup_max",
                                   "padded_accept"]],
                               {"step": "d", "speedup_median": ".2f", "speedup_min": ".2f", "speedup_max": ".2f",
                                "padded_accept": ".2f"}), ""]
    for e in s["end_to_end"]:  # type: ignore[union-attr]
        out += [f"**End to end** ({e['run']}, step {e['step']}, on the padded target, the step's "
                f"{cfg['config']['prompts_per_step'] * 8} requests in one engine, temperature 1): rollout without SD "
                f"{e['e2e_rollout_nosd_s']:.1f} s (repeats "
                + ", ".join(f"{x:.1f}" for x in e["e2e_rollout_nosd_repeats"])
                + f"), with TLT's elastic SD and the adaptive drafter {e['e2e_rollout_sd_s']:.1f} s (repeats "
                + ", ".join(f"{x:.1f}" for x in e["e2e_rollout_sd_repeats"]) + f"; accept length "
                f"{e['e2e_sd_accept']:.2f}); GRPO update of the padded model {e['e2e_update_s']:.1f} s (once: the same "
                f"in both arms); rollout speedup {e['e2e_rollout_speedup']:.3f}x, **step-time gain "
                f"{e['e2e_step_speedup']:.3f}x** (medians). The drafter's training is not added: it runs on "
                "released workers. " + (
                    f"The update is {e['e2e_update_s'] / (e['e2e_update_s'] + e['e2e_rollout_sd_s']):.0%} of the step "
                    f"here: these band problems have no long tail (a response is at most {max(cfg.get('band', [0]))} "
                    "solution lines), so the rollout is a few dozen batched iterations and the elastic policy "
                    f"(`{cfg['config']['sd_policy']}`) turns SD on only for its last requests; the batch-"
                    f"{cfg['config']['speedup_batch']} speedups above are what SD gives where a long tail leaves few "
                    "requests running." if e["e2e_step_speedup"] < 1.05 else ""), ""]
    out += ["![Mean time per RL step by phase](steptime.png)", ""]
    cost = pd.DataFrame(s.get("cost", []))  # type: ignore[arg-type]
    if len(cost) and cost["cpu_s"].notna().all():
        out += ["Cost of each run command on this machine: CPU seconds of the command's own process (its two "
                "rollout worker processes' CPU not included), wall seconds, and the 1-minute load average at its "
                "start and end:", "",
                markdown_table(cost, {"cpu_s": ".0f", "wall_s": ".0f", "load_start": ".1f", "load_end": ".1f"}), ""]
    times = pd.DataFrame([{"run": k, **val} for k, val in s["step_time_s"].items()])  # type: ignore[union-attr]
    out += ["Mean seconds per RL step (wall), by phase: the rollout on the worker processes; drafter training inside "
            "the rollout (overlapped, free); drafter training past the rollout's end (`budget` mode: the step waits "
            "for its optimizer steps); the GRPO update; `eval_s` the measurements (three drafters, upper bound, "
            "speedups: not part of an RL step); `step_s` all of it:", "",
            markdown_table(times, {c: ".2f" for c in times.columns if c != "run"}), ""]
    return "\n".join(out) + "\n"


__all__ = ["DRAFTER_NAMES", "DRIFTED_SHARE", "Run", "accept_figure", "build_summary", "comparison_steps",
           "drift_figure", "drifted_from", "ratios", "read_run", "render_readme", "simulator_check",
           "speedup_figure", "step_time_figure", "write_report"]

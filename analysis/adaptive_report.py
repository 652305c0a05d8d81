"""The README and figures of a real adaptive-drafter run folder (``tlt real rl``).

It states the command that reproduced the numbers, the host and versions, per-step tables, and
says plainly at which steps the adaptive drafter was *not* above the static one and where SD did
not pay.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.drafter_plots import accept_curves, bubble_training, dynamics_fit, reward_curves, speedup_curves
from analysis.markdown import markdown_table
from analysis.provenance import package_version, provenance_line
from analysis.report import Report
from tltcore.errors import InputError

STEP_COLUMNS = {"step": "d", "reward": ".3f", "answer_reward": ".3f", "terse_share": ".2f", "eval_reward": ".3f",
                "eval_terse_share": ".2f", "hidden_drift": ".3f", "mean_response_tokens": ".1f",
                "max_response_tokens": "d", "accept_static": ".2f", "accept_adaptive": ".2f", "accept_upper": ".2f",
                "rollout_accept": ".2f", "drafter_version": "d", "rollout_s": ".1f",
                "bubble_train_s": ".1f", "train_steps": "d", "update_s": ".1f"}


def _read(folder: Path) -> tuple[pd.DataFrame, dict, dict]:
    try:
        steps = pd.read_csv(folder / "steps.csv")
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        dynamics = json.loads((folder / "drafter_dynamics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"not an adaptive-drafter run folder ({exc})", path=folder) from None
    return steps, config, dynamics


def _summary(steps: pd.DataFrame, drift_from: int, depth: int) -> list[str]:
    late = steps[steps["step"] >= drift_from]
    gap = late["accept_adaptive"] - late["accept_static"]
    below = late.loc[gap <= 0, "step"].tolist()
    lines = [f"- Accept length ({depth}-token chain, tokens per SD iteration) from step {drift_from} on: static "
             f"**{late['accept_static'].mean():.2f}**, adaptive **{late['accept_adaptive'].mean():.2f}** "
             f"(mean of {len(late)} steps; step 0: {steps['accept_static'].iloc[0]:.2f} for both)."]
    if below:
        steps_text = ", ".join(map(str, below))
        lines.append(f"- The adaptive drafter was **not** above the static one at step(s) {steps_text}.")
    else:
        lines.append(f"- The adaptive drafter was above the static one at every step from {drift_from} on.")
    train, step_s = steps["bubble_train_s"].sum(), (steps["rollout_s"] + steps["update_s"]).sum()
    over = float(steps["train_overrun_s"].sum()) if "train_overrun_s" in steps else 0.0
    lines.append(f"- Drafter training inside the bubbles: {train:.1f} s over {int(steps['train_steps'].sum())} "
                 f"optimizer steps, against {step_s:.1f} s of RL steps (rollout + update); it used released "
                 "workers only" + (f", but {over:.1f} s of it ran past the rollouts' ends (budget mode: the step "
                                   "waits for its training steps)." if over > 0 else
                                   ", so it added nothing to a step's time."))
    first, last = steps.iloc[0], steps.iloc[-1]
    lines.append(f"- Rollout reward {first['reward']:.3f} -> {last['reward']:.3f}; evaluation accuracy (greedy, "
                 f"fixed prompts) {first['eval_reward']:.3f} -> {last['eval_reward']:.3f}; the policy's hidden "
                 f"states moved {last['hidden_drift']:.1%} (relative) from step 0's.")
    return lines


def _speedup_section(steps: pd.DataFrame, batch: int, depth: int) -> list[str]:
    cols = [c for c in ("speedup_static", "speedup_adaptive", "padded_accept_static", "padded_accept_adaptive",
                        "padded_base_tok_s") if c in steps]
    if "speedup_adaptive" not in cols:
        return ["No SD speedup was measured in this run (`--speedup-every 0`)."]
    measured = steps.loc[steps["speedup_adaptive"].notna(), ["step", *cols]]
    lines = [f"SD speedup on the padded target (this step's policy plus appended compute that changes no output; "
             f"see `tltreal/rl/padded_target.py`) at batch {batch}, greedy, a {depth}-token chain; tokens/s with SD "
             "over tokens/s without:", "",
             markdown_table(measured, {"step": "d", "padded_base_tok_s": ".1f"} | {
                 c: ".2f" for c in cols if c != "padded_base_tok_s"})]
    slow = measured[(measured["speedup_adaptive"] < 1) | (measured.get("speedup_static", 1) < 1)]
    if len(slow):
        lines += ["", f"**SD did not pay** (speedup below 1x) at step(s) {', '.join(map(str, slow['step']))}."]
    return lines


def write_report(folder: str | Path) -> list[str]:
    """Write ``README.md`` and figures (PNG + PDF) into the run ``folder``; returns the files."""
    from tltcore.drafter.dynamics import DrafterConfig
    from tltreal.validation.dynamics_fit import adaptive_curve, static_curve

    folder = Path(folder)
    steps, config, dynamics = _read(folder)
    cfg = config["config"]
    drift_from = min(5, len(steps) - 1)
    report = Report("Real adaptive drafter: GRPO with the Spot Trainer on CPU")
    command = config.get("command") or f"tlt real rl --out RUN --seed {cfg['seed']} --steps {cfg['steps']}"
    report.sections += [
        "Reproduce: `" + command + "`" + (
            "  (`--pretrained` names a folder written by `python -m tltreal.rl.pretrain --out DIR`; without it the "
            "command pre-trains the policy itself)" if cfg.get("pretrained") else ""),
        f"Device: this CPU ({provenance_line()}); torch {package_version('torch')}. Rollout workers: "
        f"{cfg['workers']} processes, rollout SD policy `{cfg['sd_policy']}`, GRPO lr {cfg['grpo']['lr']}, "
        f"{cfg['prompts_per_step']} prompts x {cfg['grpo']['group_size']} responses per step, response cap "
        f"{cfg['max_new_tokens']} tokens, bubble mode `{cfg['bubble']}`.",
        "## Summary", "\n".join(_summary(steps, drift_from, cfg["depth"])),
    ]
    report.figure("accept", "Accept length per RL step: the static drafter (trained once before RL) and the "
                  "adaptive drafter (trained by the Spot Trainer in every step's bubble), on the same policy and "
                  "prompts, greedy (both drafters see identical text)", lambda: accept_curves(steps))
    report.figure("bubble", "Rollout time, GRPO update time and drafter training inside the rollout's bubble, "
                  "per RL step", lambda: bubble_training(steps))
    report.figure("reward", "Reward and response length over RL steps", lambda: reward_curves(steps))
    report.sections += ["## SD speedup", "\n".join(_speedup_section(steps, cfg["speedup_batch"], cfg["depth"]))]
    if "speedup_adaptive" in steps:
        report.figure("speedup", "SD speedup per measured step on the padded target",
                      lambda: speedup_curves(steps, cfg["speedup_batch"]))
    report.sections.append("## Drafter dynamics for the simulator")
    if dynamics.get("fitted"):
        d = dynamics["drafter"]
        dyn = DrafterConfig(stale_quality=d["stale_quality"], drift=d["drift"],
                            recovery_samples=d["recovery_samples"])
        n = len(steps)
        fitted_static = static_curve(d["stale_quality"], d["drift"], n)
        fitted_adaptive = adaptive_curve(dyn, steps["train_windows"].tolist())
        report.sections += [
            "Fitted to the two accept curves (`tltreal/validation/dynamics_fit.py`; samples = training windows): a "
            "scenario takes this `[drafter]` section as it is:",
            "```toml\n[drafter]\n" + "\n".join(f"{k} = {v:.4g}" for k, v in d.items()) + "\n```",
            f"Fit error (rms, quality units): static {dynamics['static_rms']:.3f}, adaptive "
            f"{dynamics['adaptive_rms']:.3f}."]
        report.figure("dynamics", "Measured drafter quality and the simulator's fitted dynamics",
                      lambda: dynamics_fit(steps["step"].tolist(), dynamics["static_quality"],
                                           dynamics["adaptive_quality"], fitted_static, fitted_adaptive))
    else:
        report.sections.append(f"Not fitted: {dynamics.get('why', 'unknown')}.")
    trace = pd.read_csv(folder / "trace.csv")
    q = np.percentile(trace["response_tokens"], [50, 90, 99])
    report.sections += [
        "## Our RL trace",
        f"`trace.csv` holds the {len(trace)} responses' lengths in the canonical trace schema (`tlt trace stats` "
        f"validates it): median {q[0]:.0f}, p90 {q[1]:.0f}, p99 {q[2]:.0f}, max {trace['response_tokens'].max()} "
        f"tokens; {int(trace['hit_cap'].sum())} hit the {cfg['max_new_tokens']}-token cap.",
        "## Per step", markdown_table(steps[[c for c in STEP_COLUMNS if c in steps]],
                                      {c: f for c, f in STEP_COLUMNS.items() if c in steps}),
    ]
    return report.write(folder)


__all__ = ["write_report"]

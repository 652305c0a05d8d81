"""The ``tlt advise`` report folder: README with the answer and its tables, figures, the exports.

Files (all written into the results folder ``tlt advise`` builds atomically):

* ``README.md`` — the recommendation with its rollout and end-to-end speedup (median, min–max over the
  seeds), the upper bound, the ranking of every setting, the drafter-upkeep comparison, where SD does
  not pay and why, the warnings, the exports and the commands that reproduce each number;
* ``ranking.csv`` (one row per setting, ``<metric>_median/_min/_max``), ``runs.csv`` (one row per
  setting and seed), ``freshness.csv``, ``findings.csv``, ``warnings.csv``, ``exports_by_step.csv`` (the
  recommendation and the exports re-simulated on every step of the workload), ``robustness.csv`` (the
  recommendation under each unmeasured input's range, :mod:`tltsim.robustness`);
* ``ranking.png``/``.pdf`` — rollout speedup per setting with its min–max whiskers and each seed;
* with ``--strategies``: ``strategies.csv`` (strategy x SD setting, ranked, with staleness),
  ``strategies_runs.csv`` (per seed) and ``strategies.png``/``.pdf`` (step time vs staleness);
* ``scenario.resolved.toml`` (the scenario advised on), ``recommended.toml`` (that scenario running only
  the recommendation: ``tlt sim run --scenario recommended.toml`` reruns it),
  ``vllm_speculative_config.json``, ``sglang_flags.txt`` and, for SGLang's adaptive mode,
  ``sglang_adaptive.json``.
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.markdown import markdown_table
from analysis.provenance import provenance_line
from analysis.style import color_for, paper_rc, save_figure
from tltsim.seeds import fmt_range


def _x(med: float, lo: float, hi: float) -> str:
    return fmt_range(med, lo, hi, ".3f", "x")


#: freshness.csv's columns (written as a header alone when the upkeep comparison did not run).
FRESHNESS_COLUMNS = ["preset", "speedup_median", "speedup_min", "speedup_max", "rollout_speedup_median",
                     "rollout_speedup_min", "rollout_speedup_max", "mean_accept_length_median",
                     "mean_accept_length_min", "mean_accept_length_max", "upkeep"]


def _absolute(name: str | None) -> str | None:
    """A relative path to a file that exists from here, made absolute (a catalog name, a preset or an
    absolute path as it is): ``recommended.toml`` must rerun from any folder."""
    if name is None or Path(name).is_absolute() or not Path(name).exists():
        return name
    return str(Path(name).resolve())


def recommended_toml(s: Any, policy: str, switch: str | None, command: str) -> str:
    """The advised scenario with only the recommended policy (and its switch mode): a scenario file
    ``tlt sim run --scenario`` reruns (``no-sd`` is added as the baseline, as always) from any
    folder (relative file paths made absolute)."""
    from tltsim.scenario import scenario_toml, with_values

    values: dict[str, Any] = {"policies": (policy,), "presets": (), "trace.name": _absolute(s.trace.name),
                              "model.name": _absolute(s.model.name)}
    if s.cost.table is not None:
        values["cost.table"] = _absolute(s.cost.table)
    if s.acceptance.profile is not None:
        values["acceptance.profile"] = _absolute(s.acceptance.profile)
    if switch is not None:
        values["engine.switch"] = switch
    head = (f"# Written by `{command}`: the recommended setting on the scenario it advised on.\n"
            "# Rerun it: tlt sim run --scenario recommended.toml\n")
    return head + scenario_toml(with_values(s, values))


def _robustness_lines(robust: Any) -> list[str]:
    from tltsim.robustness import UNMEASURED

    t = robust.table()
    shown = pd.DataFrame({
        "input": t["input"], "set to": t["value"],
        "recommendation's rollout speedup": [_x(a, b, c) for a, b, c in
                                             t[["speedup_median", "speedup_min", "speedup_max"]].to_numpy()],
        "recommended there": [f"{b} ({x:.3f}x)" + (" — flips" if f else "") for b, x, f in
                              t[["recommended_there", "its_speedup_median", "flips"]].to_numpy()]})
    rules = "; ".join(f"{u.name}: {u.rule} ({u.why})" for u in UNMEASURED)
    out = ["## How sure: the inputs nobody measured", "",
           f"**{robust.line()}.** The seed spread above covers the dealing and the sampled accept lengths only. "
           f"Each input below was set to one end of its range, one at a time, and the top settings "
           f"({', '.join(f'`{x}`' for x in robust.settings)}) re-simulated at the same seeds (`robustness.csv`; "
           f"`tltsim/robustness.py`). Ranges: {rules}.", "", markdown_table(shown), ""]
    if robust.e2e:
        out += ["End to end with the phases after rollout at " + ", ".join(
            f"x{k:g}: {x:.3f}x" for k, x in robust.e2e) + ".", ""]
    if robust.skipped:
        out += ["Not varied: " + "; ".join(robust.skipped) + ".", ""]
    return out


def ranking_figure(rows: pd.DataFrame, ranking: pd.DataFrame, stem: Path, bound_speedup: float,
                   stochastic: bool = False) -> list[Path]:
    """Rollout speedup over no-sd per setting (fastest on top): the median as a bar, min–max as a
    whisker, every seed as a dot, 1x and the upper bound's cap as lines. Under stochastic acceptance
    the bound is on *expected* accept lengths, so a lucky seed can pass it: the legend says so."""
    order = list(ranking["label"])[::-1]
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots(figsize=(7.5, 0.32 * len(order) + 1.4))
        y = np.arange(len(order))
        for i, label in enumerate(order):
            r = ranking[ranking["label"] == label].iloc[0]
            color = color_for(str(r["policy"]))
            ax.barh(i, r["speedup_median"], color=color, alpha=0.55, height=0.6)
            ax.errorbar(r["speedup_median"], i, xerr=[[r["speedup_median"] - r["speedup_min"]],
                                                      [r["speedup_max"] - r["speedup_median"]]],
                        color="black", capsize=3, lw=1)
            pts = rows.loc[rows["label"] == label, "speedup"].to_numpy(dtype=float)
            ax.scatter(pts, np.full(len(pts), i), s=9, color="black", zorder=3)
        ax.axvline(1.0, color="grey", ls="--", lw=1, label="no SD (1x)")
        if math.isfinite(bound_speedup):
            label = ("upper bound on expected accept lengths (a lucky stochastic seed may pass it)" if stochastic
                     else "upper bound (no setting beats it)")
            ax.axvline(bound_speedup, color="#D55E00", ls=":", lw=1.2, label=label)
        ax.set_yticks(y, order, fontsize=7)
        ax.set_xlabel("rollout speedup over no SD (x), median with min–max over seeds")
        ax.set_title("Settings ranked by median rollout makespan")
        ax.legend(loc="lower right", fontsize=7)
        fig.tight_layout()
        paths = save_figure(fig, stem)
        plt.close(fig)
    return paths


def strategies_figure(table: pd.DataFrame, runs: pd.DataFrame, stem: Path) -> list[Path]:
    """Whole-run time per RL step against staleness (the mean policy-version lag of the trained samples),
    one colour per strategy and one marker per SD setting: the median with min–max whiskers over the
    seeds, and the Pareto front (no other combination is both faster and fresher) as a line."""
    from analysis.style import colors_for

    strategies = list(dict.fromkeys(runs["strategy"]))  # as asked: sync first
    policies = list(dict.fromkeys(runs["policy"]))
    colors = colors_for(strategies)
    markers = dict(zip(policies, "osD^vP*X", strict=False))
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots(figsize=(6.5, 3.8))
        for r in table.to_dict("records"):
            part = runs[(runs["strategy"] == r["strategy"]) & (runs["policy"] == r["policy"])]
            per_step = (part["total_s"] / part["steps"]).to_numpy(dtype=float)
            med = r["step_s_median"]
            ax.errorbar(r["mean_lag"], med, yerr=[[med - per_step.min()], [per_step.max() - med]],
                        color=colors[r["strategy"]], marker=markers.get(r["policy"], "o"), ms=6, capsize=3, lw=1,
                        ls="none")
        front = table.sort_values(["mean_lag", "step_s_median"], kind="stable")
        best, xs, ys = math.inf, [], []
        for r in front.to_dict("records"):
            if r["step_s_median"] < best:
                best = r["step_s_median"]
                xs.append(r["mean_lag"])
                ys.append(best)
        ax.step(xs, ys, where="post", color="grey", lw=1, ls="--", label="Pareto front (faster and fresher)")
        for name in strategies:
            ax.plot([], [], color=colors[name], lw=6, label=name)
        for name in policies:
            ax.plot([], [], color="black", marker=markers.get(name, "o"), ls="none", label=name)
        ax.set_xlabel("staleness: mean lag of the trained samples (policy versions)")
        ax.set_ylabel("whole-run time per RL step (s)")
        ax.set_title("Long-tail strategies x SD: step time vs staleness (median, min–max over seeds)")
        ax.legend(fontsize=6.5, loc="upper right")
        fig.tight_layout()
        paths = save_figure(fig, stem)
        plt.close(fig)
    return paths


def _ranking_table(ranking: pd.DataFrame) -> str:
    t = pd.DataFrame({
        "rank": ranking["rank"], "setting": ranking["label"],
        "rollout s": [fmt_range(a, b, c) for a, b, c in ranking[["rollout_s_median", "rollout_s_min",
                                                                 "rollout_s_max"]].to_numpy()],
        "rollout speedup": [_x(a, b, c) for a, b, c in ranking[["speedup_median", "speedup_min",
                                                                "speedup_max"]].to_numpy()],
        "end-to-end speedup": [_x(a, b, c) for a, b, c in ranking[["e2e_speedup_median", "e2e_speedup_min",
                                                                   "e2e_speedup_max"]].to_numpy()],
        "SD share": [f"{100 * v:.0f}%" for v in ranking["sd_share_median"]],
        "switch s/worker": [f"{v:.2f}" for v in ranking["switch_s_median"]],
    })
    return markdown_table(t)


def _strategy_lines(folder: Path, answer: Any) -> list[str]:
    """``--strategies``: the ranking of strategies x SD settings with staleness, the verdicts and the
    figure (``strategies.csv``, ``strategies_runs.csv``, ``strategies.png``); nothing without the option."""
    if answer is None:
        return []
    lines = ["## Long-tail strategies composed with SD", ""]
    if answer.skipped:
        return [*lines, f"Strategies: {answer.skipped}.", ""]
    answer.table.to_csv(folder / "strategies.csv", index=False)
    answer.runs.to_csv(folder / "strategies_runs.csv", index=False)
    strategies_figure(answer.table, answer.runs, folder / "strategies")
    t = answer.table
    lines += [f"Each strategy (`tltsim/strategy/`, docs: Long-tail strategies) with no SD, the recommendation and "
              f"TLT's setting over {answer.steps}, ranked by median whole-run time (rollout and training as the "
              "strategy schedules them); speedup over the synchronous step without SD at the same seed (per GPU: "
              "divided by the GPUs held relative to it, as a one-step-off trainer pool adds GPUs); lag in policy "
              "versions behind, of the trained samples.", "",
              markdown_table(pd.DataFrame({
                  "rank": t["rank"], "strategy": t["strategy"], "SD setting": t["policy"],
                  "speedup": [_x(a, b, c) for a, b, c in zip(t["speedup_median"], t["speedup_min"],
                                                              t["speedup_max"], strict=True)],
                  "s per step": [f"{x:.1f}" for x in t["step_s_median"]],
                  "mean lag": [f"{x:.2f}" for x in t["mean_lag"]], "max lag": t["max_lag"], "GPUs": t["gpus"],
                  "speedup per GPU": [f"{x:.3f}x" for x in t["speedup_per_gpu"]],
                  "idle": [f"{100 * x:.0f}%" for x in t["idle_fraction"]]})), "",
              *(f"- {c.line()}" for c in answer.compositions), "", "![strategies](strategies.png)", ""]
    return lines


def write_report(folder: Path, s: Any, rec: Any, ranking: pd.DataFrame, rows: pd.DataFrame, fresh: Any,
                 findings: list, warnings: list, exports: dict[str, Any], facts: dict[str, Any]) -> None:
    """Everything listed in the module docstring, into ``folder`` (a fresh temp folder)."""
    from tltsim.advise_export import SGLANG_SOURCE, VLLM_VERSION, export_json
    from tltsim.scenario import describe_acceptance, scenario_toml

    folder = Path(folder)
    command = facts["command"]
    ranking.to_csv(folder / "ranking.csv", index=False)
    rows.to_csv(folder / "runs.csv", index=False)
    fresh_table = fresh.table if len(fresh.table.columns) else pd.DataFrame(columns=FRESHNESS_COLUMNS)
    fresh_table.to_csv(folder / "freshness.csv", index=False)  # a header even when not run: pandas reads it
    pd.DataFrame([{"subject": f.subject, "speedup_median": f.speedup[0] if f.speedup else None, "why": f.why}
                  for f in findings], columns=["subject", "speedup_median", "why"]).to_csv(
        folder / "findings.csv", index=False)
    pd.DataFrame(warnings, columns=["setting", "warning"]).to_csv(folder / "warnings.csv", index=False)
    if facts.get("robust") is not None:
        facts["robust"].table().to_csv(folder / "robustness.csv", index=False)
    if facts.get("check") is not None:
        facts["check"].table.to_csv(folder / "exports_by_step.csv", index=False)
    units = facts.get("units")
    if units is not None:
        units.table().to_csv(folder / "units.csv", index=False)
        units.per_run().to_csv(folder / "units_runs.csv", index=False)
    (folder / "scenario.resolved.toml").write_text(scenario_toml(s), encoding="utf-8")
    (folder / "recommended.toml").write_text(recommended_toml(s, rec.policy, rec.switch, command), encoding="utf-8")
    (folder / "vllm_speculative_config.json").write_text(export_json(exports["vllm"]["config"]), encoding="utf-8")
    sg = exports["sglang"]
    if sg.get("unsupported"):
        (folder / "sglang_flags.txt").write_text(f"# no SGLang export: {sg['unsupported']} (argument names: "
                                                 f"{SGLANG_SOURCE})\n", encoding="utf-8")
    else:
        (folder / "sglang_flags.txt").write_text(
            f"# SGLang server flags for {sg['label']} (argument names: {SGLANG_SOURCE})\n"
            + (" ".join(shlex.quote(f) for f in sg["flags"]) if sg["flags"]
               else "# no speculative flags: run without SD") + "\n", encoding="utf-8")
    if sg["adaptive"]:
        (folder / sg["adaptive_file"]).write_text(json.dumps(sg["adaptive"], indent=2) + "\n", encoding="utf-8")
    bound = facts["bound"]
    ranking_figure(rows, ranking, folder / "ranking", bound["speedup"], stochastic=bound.get("mode") != "expected")

    n = len(facts["seeds"])
    seeds = facts["seeds"]
    span = f"seeds {seeds[0]}-{seeds[-1]}" if n > 1 else f"seed {seeds[0]}"
    r = ranking[ranking["label"] == rec.label].iloc[0]
    lines = ["# tlt advise: which speculative-decoding setting for these RL rollouts", "",
             f"Written by `{command}` ({provenance_line()}); {facts['wall_s']:.1f} s wall, {facts['cpu_text']}.",
             ""]
    if facts["validation"]:
        lines += [f"`{Path(facts['scenario_name']).stem}` is a `tlt validate` scenario for the real CPU engine; this "
                  "advice is for its simulated reading (the model, GPU and layout below).", ""]
    lines += [f"Scenario: {s.trace.name}, {s.model.name} on {s.cluster.gpus} x {s.cluster.gpu} (TP {s.cluster.tp}, "
              f"{s.n_workers} rollout workers), drafter {s.drafter.kind} at quality {s.drafter.quality}, acceptance "
              f"{describe_acceptance(s)} ({s.acceptance.mode}), cost model: {facts.get('cost', s.cost.model)} "
              "(`scenario.resolved.toml`).", ""]
    if facts.get("gpu"):
        lines += [f"{str(facts['gpu']).replace('gpu: ', 'GPU: ', 1)}.", ""]
    if rec.is_sd:
        lines.append(f"**Recommended: `{rec.label}`** — rollout {_x(*rec.speedup)} over no SD, end to end "
                     f"{_x(*rec.e2e_speedup)} (median, min–max over simulation {span}).")
    else:
        lines.append("**Recommended: no SD.** No setting of the grid beats no SD by more than its spread or by "
                     f"{100 * (1.02 - 1):.0f}%; the best SD setting is `{rec.runners_up[0]}`." if rec.runners_up
                     else "**Recommended: no SD.**")
    if rec.ties:
        lines.append(f"Tie within spread: {', '.join(f'`{t}`' for t in rec.ties)} (their min–max overlaps).")
    lines += ["", f"Upper bound: no setting of the grid finishes the rollout in under "
              f"{fmt_range(bound['median'], bound['min'], bound['max'])} s at these seeds, a speedup of at most "
              f"{bound['speedup']:.3f}x (`tltsim/upper_bound.py`; the recommendation's rollout is "
              f"{fmt_range(r['rollout_s_median'], r['rollout_s_min'], r['rollout_s_max'])} s).", ""]
    robust = facts.get("robust")
    if robust is not None:
        lines += _robustness_lines(robust)
    elif facts.get("quick"):
        lines += ["How sure: the unmeasured inputs were not varied (`--quick`).", ""]
    if facts.get("assumes"):
        lines += ["Assumed, not measured for this run: " + "; ".join(facts["assumes"]) + " (set what you know: "
                  "`--quality`, `--set cluster.flops_efficiency=...`, `--set rl.reward_s_per_sample=...`).", ""]
    if units is not None:
        lines += ["## In hours, GPU-hours and dollars", "", "\n".join(units.lines()), "",
                  "Median over the seeds at the scenario's inputs; the band is the min-max over every run the "
                  "speedup's "
                  "band comes from, each saving paired at the same seed and input (`units.csv`; every run in "
                  "`units_runs.csv`). GPU-hours = GPUs x step seconds x steps / 3600; dollars = GPU-hours x the price "
                  "per GPU-hour (`--price GPU=USD_PER_GPU_HOUR` or `cluster.usd_per_gpu_hour` replaces the bundled "
                  "list price).", ""]
    if facts["later_s"] is not None:
        lines += [f"End to end = (rollout + {facts['later_s']:.1f} s of reward, old log-probs, reference, actor update "
                  "and weight sync under the scenario's `rl.*`) against no SD's, at the same seed: Amdahl's law with "
                  "the drafter at its quality and its training in the rollout's bubbles.", ""]
    else:
        lines += [facts["later_note"], ""]
    lines += ["## Every setting, ranked by median rollout makespan", "",
              f"Each setting ran at simulation {span} (`seed`; `trace.seed` {s.trace.seed} fixed: the same responses "
              f"at every seed), switch modes {', '.join(facts['switches'])} for settings that switch SD on "
              "mid-rollout. *SD share*: decode iterations that speculated; *switch s/worker*: seconds per worker "
              "spent bringing drafters up to date.", "", _ranking_table(ranking), "",
              "![ranking](ranking.png)", ""]
    if facts.get("derived"):
        lines += [f"`{facts['derived']}` is the per-batch-size chain table the best per-iteration policy's decisions "
                  "amount to (its run at the first seed): the closest setting vLLM or SGLang can run to it.", ""]
    lines += _strategy_lines(folder, facts.get("strategies"))
    lines += ["## How the drafter is kept fresh over RL steps", ""]
    if fresh.table.empty:
        lines += [f"Drafter upkeep: {fresh.skipped}.", ""]
    else:
        t = fresh.table
        lines += [f"Whole RL runs of {fresh.steps} steps (the presets of `tltsim/rl/presets.py`) under "
                  f"{fresh.rollout} (`presets_policy`; the model-free `tlt-base` keeps its own chain policy).", ""]
        if fresh.note:
            lines += [f"**Note:** {fresh.note}.", ""]
        lines += [markdown_table(pd.DataFrame({
            "preset": t["preset"], "drafter upkeep": t["upkeep"],
            "end-to-end speedup over veRL": [_x(a, b, c) for a, b, c in
                                             t[["speedup_median", "speedup_min", "speedup_max"]].to_numpy()],
            "rollout speedup": [_x(a, b, c) for a, b, c in t[["rollout_speedup_median", "rollout_speedup_min",
                                                              "rollout_speedup_max"]].to_numpy()]})), ""]
    lines += ["## Where SD does not pay, and why", ""]
    lines += [f"- **{f.subject}**" + (f" {_x(*f.speedup)}" if f.speedup else "") + f": {f.why}" for f in findings] \
        or ["Every SD setting of the grid beats no SD by at least 2% (median)."]
    lines += ["", "## Warnings (every run: the recommendation and runners-up first, then the other settings and "
              "the upkeep runs; `warnings.csv`)", ""]
    lines += [f"- `{label}`: {line}" for label, line in warnings] or ["None: no run raised a warning."]
    v, sg = exports["vllm"], exports["sglang"]
    lines += ["", "## Exports", "",
              f"- `recommended.toml`: `{rec.policy}`"
              + (f" with `engine.switch = \"{rec.switch}\"`" if rec.switch else "") + " on this scenario.",
              f"- `vllm_speculative_config.json` (keys of vLLM {VLLM_VERSION}'s `SpeculativeConfig`): "
              + (f"no export: {v['unsupported']}." if v.get("unsupported") else
                 (f"`{v['policy']}`" if v["exact"] else
                  f"vLLM cannot run `{rec.policy}` ({v['why']}); the fastest setting it can run is `{v['label']}`, "
                  f"simulated {_x(*v['speedup'])}") + (", no SD: run without `speculative_config`"
                                                       if v["config"] is None else "") + v.get("note", "") + "."),
              "- `sglang_flags.txt`" + (f" and `{sg['adaptive_file']}`" if sg["adaptive"] else "") + ": "
              + (f"no export: {sg['unsupported']}." if sg.get("unsupported") else
                 (f"`{sg['policy']}`" if sg["exact"] else
                  f"SGLang cannot run `{rec.policy}` ({sg['why']}); the fastest setting it can run is "
                  f"`{sg['label']}`, simulated {_x(*sg['speedup'])}") + f": `{sg['command']}`."),
              ]
    check = facts.get("check")
    if check is not None:
        parts = [f"the recommendation {_x(*exports['rec_steps'])}"] if exports.get("rec_steps") else []
        parts += [f"the {title} export `{exports[e]['label']}` {_x(*exports[e]['steps'])}"
                  for e, title in (("vllm", "vLLM"), ("sglang", "SGLang")) if exports[e].get("steps")]
        lines += [f"- Re-simulated against no SD on every step of the workload ({check.steps}, seed {check.seed}; "
                  f"median, min–max over the steps; `exports_by_step.csv`): " + "; ".join(parts) + ". A table tuned "
                  "on one step holds on the others only where its batch sizes were reached; batch sizes the run "
                  "never reached take the cost model's fastest chain (`tltsim.advise_export.best_chain_depth`)."]
    lines += ["", "## Reproduce", "",
              f"- this report: `{command}`",
              f"- the recommendation alone: `tlt sim run --scenario recommended.toml --seeds {n}`",
              f"- every setting: `tlt sim run --scenario scenario.resolved.toml --seeds {n} "
              + " ".join(f"--policy {shlex.quote(p)}" for p in dict.fromkeys(ranking['policy'])) + "` "
              "(per switch mode: add `--switch MODE`)", ""]
    (folder / "README.md").write_text("\n".join(lines), encoding="utf-8")

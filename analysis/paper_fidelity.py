"""How close is the simulator to the paper's published tables, measured the way each table was?

``python -m analysis.paper_fidelity --out reports/paper-fidelity`` writes a README with every
comparison, stating for each whether it is circular (a constant fitted to that very table) or out of
sample, plus a leave-one-table-out fit of the cost model's structural constants.

Tables (``../shared/paper``, else the vendored copy ``tests/data/paper``):

* ``sd_depth_verify_bs1`` — Qwen2.5-32B, TP 4, batch 1: accept length and SD speedup per depth x
  verify budget. The acceptance preset and the default SD overheads were fitted to it (circular).
* ``sd_speedup_vs_batch`` — the same setting at depth 10, batch 1–32. Out of sample. Measured as a
  benchmark: a fixed prompt set, at most ``b`` running, the batch shrinking as requests finish. We
  evaluate it both at a constant batch and the benchmark's way (one wave of ``b`` requests with
  lengths drawn from the DAPO Qwen2.5-32B trace, the same model family; the shrink depends on that
  assumed length distribution, which the paper does not give).
  A third reading follows TLT's benchmark script: 32 prompts, at most ``b`` running, each finished
  request replaced by the next prompt (``script``: a closed loop of the same simulator step).
* ``sd_by_gpu_qwen7b_bs1`` — Qwen2.5-7B, TP 1, batch 1, six GPUs: tokens/s without SD and SD
  speedup. Out of sample (the draft shape is not published: TLT's batch-1 arm ``8_4_48`` is assumed).

Every table is computed with two cost models: the analytic roofline (:class:`Constants`) and the model
calibrated on measured GPU profiles (:class:`Measured`, :mod:`tltcore.cost.measured`), which covers only
the GPUs with profiles (H100, A100 here). Neither is fitted to these tables here; ``errors.csv`` holds
each table's rms and max error per cost model and reading.
* ``e2e_speedup_vs_verl`` and the system rows of ``drafter_and_system`` need whole RL runs (training
  phases, drafter dynamics, memory): not comparable until the whole-run simulator exists.
* ``drafter_and_system`` ``single_layer_drafter_vs_0.5B_draft_lm`` (2.4x): compared with the
  roofline's draft-step time of the one-layer drafter vs a Qwen2.5-0.5B draft model forward.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.markdown import markdown_table
from tltcore.acceptance import nelder_mead, paper_qwen32b_tp4
from tltcore.cost import RooflineCostModel
from tltcore.cost.measured import measured_cost_model, profile_key
from tltcore.cost.roofline import DEFAULT_DRAFT_STEP_OVERHEAD_S, DEFAULT_SD_OVERHEAD_S
from tltcore.hardware import get_gpu
from tltcore.model_shape import get_model
from tltcore.policy.base import NoSD, SDConfig, Static
from tltsim.rollout import EngineConfig, simulate_step

#: The paper's tables vendored as test data, for a clone without ``../shared`` (tests/data/paper/README.md).
VENDORED_PAPER = Path(__file__).resolve().parents[1] / "tests" / "data" / "paper"


def paper_tables_dir() -> Path:
    """Where the paper's tables are read from: the team's ``../shared/paper`` (``$TLT_SHARED_DIR/paper``)
    when it exists, else the vendored copy; a test keeps the two identical, so the choice never
    changes a number, and no calibration test skips in a fresh clone."""
    from tltsim.traces.catalog import shared_dir

    shared = shared_dir() / "paper"
    return shared if shared.is_dir() else VENDORED_PAPER


PAPER = paper_tables_dir()
GPU_PRESETS = {"H100": "h100", "A100": "a100", "B200": "b200", "RTX5090": "rtx5090", "RTX4090": "rtx4090",
               "RTX3090": "rtx3090"}
GPU_TABLE_SHAPE = SDConfig(8, 4, 48)  # not published: TLT's batch-1 arm
CONTEXT = 1024  # tokens of context assumed for the batch-1 tables (short prompts, early in generation)
KERNELS_PER_LAYER = 8  # GEMMs, attention, norms, activation after the usual fusions


@dataclass(frozen=True)
class Constants:
    """The cost model's structural constants that are fitted (seconds)."""

    kernel_latency_s: float = 0.0
    draft_step_overhead_s: float = DEFAULT_DRAFT_STEP_OVERHEAD_S
    sd_overhead_s: float = DEFAULT_SD_OVERHEAD_S
    smoothness: float = math.inf

    def model(self, shape: str, gpu: str, tp: int) -> RooflineCostModel:
        return RooflineCostModel(get_model(shape), get_gpu(gpu), tp=tp, kernel_latency_s=self.kernel_latency_s,
                                 kernels_per_layer=KERNELS_PER_LAYER, draft_step_overhead_s=self.draft_step_overhead_s,
                                 sd_overhead_s=self.sd_overhead_s, smoothness=self.smoothness)

    name = "roofline"

    def covers(self, gpu: str) -> bool:
        """Whether this model prices ``gpu`` (a label of the GPU table): the roofline prices every GPU."""
        return True


@dataclass(frozen=True)
class Measured:
    """The cost model calibrated on measured GPU profiles with its defaults (the roofline's SD and
    iteration overheads, ``collectives``): nothing here is fitted to the paper's tables."""

    collectives: str = "measured"
    name = "measured"

    def model(self, shape: str, gpu: str, tp: int) -> RooflineCostModel:
        return measured_cost_model(get_model(shape), get_gpu(gpu), tp, collectives=self.collectives)

    def covers(self, gpu: str) -> bool:
        """Whether ``gpu`` (a label of the GPU table) has measured profiles, and they are on the search path."""
        spec = get_gpu(GPU_PRESETS[gpu])
        return profile_key(spec) is not None and self.model("Qwen2.5-7B", GPU_PRESETS[gpu], 1).measured

    def available(self) -> bool:
        """Whether the profiles are on the search path at all (a fresh clone may have none)."""
        return self.covers("H100")


@dataclass(frozen=True)
class _Work:
    step: int
    group_ids: np.ndarray
    prompt_tokens: np.ndarray
    response_tokens: np.ndarray


def _speedup(cm: RooflineCostModel, batch: int, shape: SDConfig) -> float:
    ctx = np.full(batch, CONTEXT)
    return paper_qwen32b_tp4().expected_accept_length(shape) * cm.decode_time(ctx) / cm.sd_time(ctx, shape)


PROMPT_TOKENS = 128  # prompt length of the benchmark runs (short prompts; prefill is a small share)
SCRIPT_PROMPTS = 32  # TLT's benchmark script: 32 prompts, at most b of them running
#: TLT's benchmark script as published (``scripts/bench_speculative_decoding.py`` of the authors' fastrl
#: repository): ``max_new_tokens = 2048``, so no response is longer; its prompts come from a prompt file of
#: math problems (Eurus RL data), about 300 tokens each as issue 44 read it (not measured here: the file is
#: not published with the paper, so the report varies it).
SCRIPT_CAP = 2048
SCRIPT_PROMPT_TOKENS = 300
#: Draw seeds of the benchmark readings' response lengths: seed 0 is the reading, all of them its spread.
SPREAD_SEEDS = (0, 1, 2, 3, 4)


def closed_loop_speedup(cm: RooflineCostModel, responses: np.ndarray, batch: int, shape: SDConfig,
                        prompt_tokens: int = PROMPT_TOKENS) -> float:
    """No-SD makespan over SD makespan of one benchmark run: the requests with these response lengths
    (``prompt_tokens`` prompts) queued at once, at most ``batch`` running, each finished request replaced
    by the next queued one (the simulator's engine with ``max_batch = batch``), expected acceptance."""
    n = len(responses)
    w = _Work(0, np.arange(n).astype(str), np.full(n, prompt_tokens), np.asarray(responses))
    kw = dict(cost=cm, accept=paper_qwen32b_tp4(), engine=EngineConfig(max_batch=batch), deal_mode="trace")
    return simulate_step(w, policies=[NoSD()], **kw).makespan / simulate_step(w, policies=[Static(shape)],
                                                                            **kw).makespan


def _benchmark_speedup(cm: RooflineCostModel, batch: int, shape: SDConfig, lengths: np.ndarray, waves: int = 16,
                       seed: int = 0) -> float:
    """One-wave reading. Median over ``waves`` benchmark runs: ``batch`` requests at once, the batch
    shrinking as they finish."""
    rng = np.random.default_rng([seed, batch, shape.verify_tokens])
    return float(np.median([closed_loop_speedup(cm, rng.choice(lengths, batch), batch, shape) for _ in range(waves)]))


def _script_speedup(cm: RooflineCostModel, batch: int, shape: SDConfig, lengths: np.ndarray, waves: int = 16,
                    seed: int = 0, prompts: int = SCRIPT_PROMPTS, cap: int | None = None,
                    prompt_tokens: int = PROMPT_TOKENS) -> float:
    """The benchmark script's reading. Median over ``waves`` runs: ``prompts`` requests with lengths drawn
    from ``lengths`` (cut at ``cap`` tokens when given, as ``max_new_tokens`` cuts them), ``prompt_tokens``
    prompts, at most ``batch`` running, refilled as they finish (one wave when ``batch >= prompts``)."""
    rng = np.random.default_rng([seed, prompts, batch, shape.verify_tokens])
    if cap is not None:
        lengths = np.minimum(lengths, cap)
    return float(np.median([closed_loop_speedup(cm, rng.choice(lengths, prompts), batch, shape, prompt_tokens)
                            for _ in range(waves)]))


def load_tables(paper: Path = PAPER) -> dict[str, pd.DataFrame]:
    return {name: pd.read_csv(paper / f"{name}.csv") for name in
            ("sd_depth_verify_bs1", "sd_speedup_vs_batch", "sd_by_gpu_qwen7b_bs1", "drafter_and_system")}


def script_settings_speedups(m32: RooflineCostModel, bt: pd.DataFrame, lengths: np.ndarray, seed: int = 0,
                             prompt_tokens: int = SCRIPT_PROMPT_TOKENS) -> list[float]:
    """The batch table's ``script_settings`` reading, row by row: the script's loop with responses cut
    at :data:`SCRIPT_CAP` and ``prompt_tokens`` prompts."""
    return [_script_speedup(m32, b, SDConfig(10, 8, v), lengths, seed=seed, cap=SCRIPT_CAP, prompt_tokens=prompt_tokens)
            for b, v in zip(bt["batch_size"], bt["verify_tokens"], strict=True)]


def predictions(c: Constants | Measured, tables: dict[str, pd.DataFrame], lengths: np.ndarray | None,
                script: bool = False, seed: int = 0,
                script_prompt_tokens: int = SCRIPT_PROMPT_TOKENS) -> dict[str, pd.DataFrame]:
    """Every comparable number of every table next to the model's prediction (the GPU table's rows
    limited to the GPUs ``c`` covers; the script readings only with ``script``). ``seed`` draws the
    benchmark readings' response lengths; ``script_prompt_tokens`` is the prompt length of the script
    reading at its published settings (``script_settings``: cap :data:`SCRIPT_CAP`)."""
    m32 = c.model("Qwen2.5-32B", "h100", 4)
    dv = tables["sd_depth_verify_bs1"].copy()
    dv["predicted"] = [_speedup(m32, 1, SDConfig(d, 8, v)) for d, v in zip(dv["depth"], dv["verify_tokens"],
                                                                              strict=True)]
    bt = tables["sd_speedup_vs_batch"].copy()
    bt["predicted_constant_batch"] = [_speedup(m32, b, SDConfig(10, 8, v)) for b, v in
                                      zip(bt["batch_size"], bt["verify_tokens"], strict=True)]
    if lengths is not None:
        bt["predicted_benchmark"] = [_benchmark_speedup(m32, b, SDConfig(10, 8, v), lengths, seed=seed) for b, v in
                                     zip(bt["batch_size"], bt["verify_tokens"], strict=True)]
        if script:
            bt["predicted_script"] = [_script_speedup(m32, b, SDConfig(10, 8, v), lengths, seed=seed) for b, v in
                                      zip(bt["batch_size"], bt["verify_tokens"], strict=True)]
            bt["predicted_script_settings"] = script_settings_speedups(m32, bt, lengths, seed, script_prompt_tokens)
    gt = tables["sd_by_gpu_qwen7b_bs1"].copy()
    gt = gt[[c.covers(g) for g in gt["gpu"]]].reset_index(drop=True)
    models = {g: c.model("Qwen2.5-7B", GPU_PRESETS[g], 1) for g in gt["gpu"]}
    gt["predicted_tokens_per_s_no_sd"] = [1.0 / models[g].decode_time(np.full(1, CONTEXT)) for g in gt["gpu"]]
    gt["predicted_speedup"] = [_speedup(models[g], 1, GPU_TABLE_SHAPE) for g in gt["gpu"]]
    return {"depth_verify": dv, "batch": bt, "gpu": gt}


def rms(rel: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(rel))))


def errors(p: dict[str, pd.DataFrame]) -> dict[str, float]:
    dv, bt, gt = p["depth_verify"], p["batch"], p["gpu"]
    out = {"depth_verify speedup": rms(dv["predicted"] / dv["speedup"] - 1),
           "batch, constant batch": rms(bt["predicted_constant_batch"] / bt["speedup"] - 1),
           "gpu tokens/s without SD": rms(gt["predicted_tokens_per_s_no_sd"] / gt["tokens_per_s_no_sd"] - 1),
           "gpu SD speedup": rms(gt["predicted_speedup"] / gt["speedup"] - 1)}
    if "predicted_benchmark" in bt:
        out["batch, benchmark conditions"] = rms(bt["predicted_benchmark"] / bt["speedup"] - 1)
    if "predicted_script" in bt:
        out["batch, script"] = rms(bt["predicted_script"] / bt["speedup"] - 1)
    return out


ERRORS_COLUMNS = ("table", "cost_model", "semantics", "rms", "max", "rms_min", "rms_max")
#: errors.csv's (table, semantics) -> (paper table of predictions, predicted column, measured column)
ERROR_ROWS: dict[tuple[str, str], tuple[str, str, str]] = {
    ("gpu_speedup", "-"): ("gpu", "predicted_speedup", "speedup"),
    ("gpu_tokens_per_s", "-"): ("gpu", "predicted_tokens_per_s_no_sd", "tokens_per_s_no_sd"),
    ("batch_speedup", "constant"): ("batch", "predicted_constant_batch", "speedup"),
    ("batch_speedup", "one_wave"): ("batch", "predicted_benchmark", "speedup"),
    ("batch_speedup", "script"): ("batch", "predicted_script", "speedup"),
    ("batch_speedup", "script_settings"): ("batch", "predicted_script_settings", "speedup"),
}


def errors_frame(by_model: dict[str, dict[str, pd.DataFrame]],
                 draws: dict[str, list[dict[str, pd.DataFrame]]] | None = None) -> pd.DataFrame:
    """``errors.csv``: per table, cost model and reading the rms and the max |predicted / measured - 1|
    (fractions) over the table's rows that the model covers; readings a model was not run under are left out.
    ``rms_min`` / ``rms_max``: the rms's range over ``draws`` (the same predictions at other length-draw
    seeds, the reading itself included), NaN for readings that draw nothing."""
    rows = []
    for cost_model, p in by_model.items():
        for (table, semantics), (frame, predicted, measured) in ERROR_ROWS.items():
            df = p[frame]
            if predicted not in df or df.empty:
                continue
            rel = (df[predicted] / df[measured] - 1).to_numpy(np.float64)
            spread = [rms((d[frame][predicted] / d[frame][measured] - 1).to_numpy(np.float64))
                      for d in (draws or {}).get(cost_model, []) if predicted in d[frame]]
            drawn = frame == "batch" and predicted != "predicted_constant_batch" and spread
            rows.append({"table": table, "cost_model": cost_model, "semantics": semantics, "rms": rms(rel),
                         "max": float(np.abs(rel).max()), "rms_min": min(spread) if drawn else math.nan,
                         "rms_max": max(spread) if drawn else math.nan})
    return pd.DataFrame(rows, columns=list(ERRORS_COLUMNS))


def _objective(table: str, tables: dict[str, pd.DataFrame]):
    """Loss of one table (batch-1 and constant-batch comparisons only: cheap enough to fit)."""
    def loss(x: np.ndarray) -> float:
        lat, ds, sd = (math.exp(v) for v in x)
        p = predictions(Constants(lat, ds, sd), tables, None)
        e = errors(p)
        if table == "depth_verify":
            return e["depth_verify speedup"]
        if table == "gpu":
            return e["gpu tokens/s without SD"] + e["gpu SD speedup"]
        return e["batch, constant batch"]
    return loss


def fit(table: str, tables: dict[str, pd.DataFrame]) -> Constants:
    """Kernel latency and the two SD overheads fitted to one table (Nelder-Mead in log space)."""
    x0 = np.log([3e-6, 1e-4, 1e-3])
    x, _ = nelder_mead(_objective(table, tables), x0, step=0.7, iters=300)
    lat, ds, sd = (math.exp(v) for v in x)
    return Constants(lat, ds, sd)


def drafter_ratio(c: Constants) -> float:
    """Draft-step time of a Qwen2.5-0.5B draft model over the one-layer drafter's (Qwen2.5-32B, TP 4)."""
    eagle = c.model("Qwen2.5-32B", "h100", 4)
    small = replace(eagle, drafter=get_model("Qwen2.5-0.5B"))
    ctx = np.full(1, CONTEXT)
    return small.draft_step_time(ctx, 1) / eagle.draft_step_time(ctx, 1)


READINGS = (("constant", "predicted_constant_batch", ":"), ("one_wave", "predicted_benchmark", "--"),
            ("script", "predicted_script", "-."), ("script_settings", "predicted_script_settings", (0, (6, 1.5))))


def batch_figure(by_model: dict[str, pd.DataFrame]):
    """Measured vs predicted SD speedup against batch size, per verify budget: one panel per cost model,
    one line style per reading."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from analysis.style import PALETTE, paper_rc

    with plt.rc_context(paper_rc()):
        fig, axes = plt.subplots(1, len(by_model), figsize=(5.2 * len(by_model), 3.6), sharey=True, squeeze=False)
        for ax, (name, bt) in zip(axes[0], by_model.items(), strict=True):
            for i, (v, g) in enumerate(bt.groupby("verify_tokens")):
                colour = PALETTE[i % len(PALETTE)]
                ax.plot(g["batch_size"], g["speedup"], "o-", color=colour, label=f"{v}")
                for _, col, ls in READINGS:
                    if col in g:
                        ax.plot(g["batch_size"], g[col], linestyle=ls, color=colour)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("batch size (requests)")
            ax.set_title(f"{name} cost model")
        axes[0][0].set_ylabel("SD speedup over no SD (x)")
        first = axes[0][0].legend(loc="lower left", ncol=2, title="verify tokens (colour)")
        axes[0][0].add_artist(first)
        styles = [Line2D([], [], color="grey", ls="-", marker="o"),
                  *(Line2D([], [], color="grey", ls=ls) for _, _, ls in READINGS)]
        axes[0][-1].legend(styles, ["paper", "constant batch", "one wave of b", "script: 32 prompts, <= b running",
                                    f"script as published: cap {SCRIPT_CAP:,}, {SCRIPT_PROMPT_TOKENS}-token prompts"],
                           loc="lower left")
        fig.suptitle("Qwen2.5-32B, TP 4, H100, depth 10, top-k 8")
        fig.tight_layout()
    return fig


def gpu_figure(gt: pd.DataFrame):
    """Measured vs predicted tokens/s without SD, per GPU (the calibrated model only where profiled)."""
    import matplotlib.pyplot as plt

    from analysis.style import paper_rc

    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots(figsize=(6.0, 3.0))
        x = np.arange(len(gt))
        ax.bar(x - 0.27, gt["tokens_per_s_no_sd"], width=0.27, color="#000000", label="paper")
        ax.bar(x, gt["roofline_tokens_per_s_no_sd"], width=0.27, color="#0072B2", label="roofline")
        if "measured_tokens_per_s_no_sd" in gt:
            ax.bar(x + 0.27, gt["measured_tokens_per_s_no_sd"], width=0.27, color="#E69F00",
                   label="calibrated (profiled GPUs)")
        ax.set_xticks(x, gt["gpu"])
        ax.set_ylabel("tokens/s, batch 1, no SD")
        ax.set_title("Qwen2.5-7B decode speed per GPU (out of sample)")
        ax.legend()
        fig.tight_layout()
    return fig


def _merged(by_model: dict[str, dict[str, pd.DataFrame]]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(batch, gpu, depth x verify) tables with each cost model's predictions and errors side by side."""
    base = next(iter(by_model.values()))
    bt = base["batch"][["verify_tokens", "batch_size", "speedup"]].copy()
    dv = base["depth_verify"][["depth", "verify_tokens", "accept_length", "speedup"]].copy()
    gt = base["gpu"][["gpu", "tokens_per_s_no_sd", "speedup"]].copy()
    for name, p in by_model.items():
        for reading, col, _ in READINGS:
            if col in p["batch"]:
                bt[f"{name}_{reading}"] = p["batch"][col].to_numpy()
                bt[f"err_{name}_{reading}"] = bt[f"{name}_{reading}"] / bt["speedup"] - 1
        dv[f"{name}"] = p["depth_verify"]["predicted"].to_numpy()
        dv[f"err_{name}"] = dv[name] / dv["speedup"] - 1
        g = p["gpu"].set_index("gpu")
        gt[f"{name}_tokens_per_s_no_sd"] = gt["gpu"].map(g["predicted_tokens_per_s_no_sd"])
        gt[f"err_{name}_no_sd"] = gt[f"{name}_tokens_per_s_no_sd"] / gt["tokens_per_s_no_sd"] - 1
        gt[f"{name}_speedup"] = gt["gpu"].map(g["predicted_speedup"])
        gt[f"err_{name}_speedup"] = gt[f"{name}_speedup"] / gt["speedup"] - 1
    return bt, gt, dv


def _rows_over(bt: pd.DataFrame, col: str, limit: float) -> str:
    """The batch-table rows whose |error| in ``col`` exceeds ``limit``, as ``v16/b8 +9%`` items."""
    bad = bt[bt[col].abs() > limit]
    return ", ".join(f"v{int(r.verify_tokens)}/b{int(r.batch_size)} {getattr(r, col):+.0%}"
                     for r in bad.itertuples(index=False)) or "none"


def _by_batch(bt: pd.DataFrame, col: str) -> str:
    return ", ".join(f"b{int(b)} {rms(g[col].to_numpy()):.1%}" for b, g in bt.groupby("batch_size"))


def write_report(out: Path, paper: Path = PAPER) -> None:
    """The paper-fidelity report (README, CSVs, errors.csv, figures), written atomically."""
    import platform

    import tltcore
    from analysis.style import save_figure
    from tltcore.atomic import atomic_dir, write_text
    from tltsim.traces import load_trace

    tables = load_tables(paper)
    trace = load_trace("polytrace_rl_rollouts")
    lengths = trace.loc[trace["source"] == "polytrace/verl_dapo_qwen2.5-32b", "response_tokens"].to_numpy()
    default = Constants()
    measured = Measured()
    by_model = {"roofline": predictions(default, tables, lengths, script=True)}
    have_profiles = measured.available()
    if have_profiles:
        by_model["measured"] = predictions(measured, tables, lengths, script=True)
        analytic = predictions(Measured("analytic"), tables, lengths, script=True)
        calibration = measured.model("Qwen2.5-32B", "h100", 4).source
    models = {"roofline": default, **({"measured": measured} if have_profiles else {})}
    draws = {name: [by_model[name], *(predictions(c, tables, lengths, script=True, seed=seed)
                                      for seed in SPREAD_SEEDS[1:])] for name, c in models.items()}
    main_model = "measured" if have_profiles else "roofline"
    batch_table = tables["sd_speedup_vs_batch"]
    m32 = models[main_model].model("Qwen2.5-32B", "h100", 4)
    prompt_sensitivity = {n: rms(np.asarray(script_settings_speedups(m32, batch_table, lengths, prompt_tokens=n))
                                 / batch_table["speedup"].to_numpy() - 1)
                          for n in (PROMPT_TOKENS, 600)}
    errs = errors_frame(by_model, draws)
    err = errors(by_model["roofline"])
    fits = {t: fit(t, tables) for t in ("depth_verify", "gpu", "batch")}
    loo = []
    for t, c in fits.items():
        e = errors(predictions(c, tables, lengths))
        loo.append({"fitted to": t, "kernel latency us": c.kernel_latency_s * 1e6,
                    "draft step overhead ms": c.draft_step_overhead_s * 1e3, "SD overhead ms": c.sd_overhead_s * 1e3,
                    **{k: v for k, v in e.items()}, "drafter vs 0.5B": drafter_ratio(c)})
    loo_df = pd.DataFrame(loo)
    bt, gt, dv = _merged(by_model)
    gt["implied_bw_efficiency"] = [_implied_efficiency(g, tps) for g, tps in
                                   zip(gt["gpu"], gt["tokens_per_s_no_sd"], strict=True)]
    ratio = drafter_ratio(default)
    caps = {eff: verification_cap(eff) for eff in (0.7, 1.0)}

    def e(table: str, model: str, semantics: str) -> float:
        hit = errs[(errs["table"] == table) & (errs["cost_model"] == model) & (errs["semantics"] == semantics)]
        return float(hit["rms"].iloc[0]) if len(hit) else math.nan

    roof_profiled = (gt[gt["gpu"].isin(["H100", "A100"])] if have_profiles else gt.iloc[:0])
    lines = [
        "# Paper fidelity: the simulator against every published table, with both cost models",
        "",
        "Reproduce: `python -m analysis.paper_fidelity --out reports/paper-fidelity` (any machine; "
        f"tlt {tltcore.__version__}, Python {platform.python_version()}). Tables: `../shared/paper/` "
        "(TLT, ASPLOS 2026, arXiv 2511.16665). Acceptance: the paper-fitted tree acceptance. Two cost models, "
        "neither fitted to these tables here:",
        "",
        "- **roofline**: the analytic roofline with its default constants (one efficiency pair for every GPU; the "
        "SD overheads 0.21 ms per draft step and 3.7 ms per SD iteration, fitted once to the depth x verify table).",
        "- **measured**: the cost model calibrated on Vidur's measured per-op GPU latencies "
        "(`tltcore.cost.measured`, `cost.model = \"measured\"`; see `reports/gpu-calibration/`), with the "
        "scenario default `cost.collectives = \"measured\"` and the same default SD and iteration overheads "
        "(not refitted: a refit to these tables would be circular). It covers only GPUs with profiles: of the "
        "GPU table's six, **H100 and A100** (A40 is profiled but not in the paper); the other four rows are the "
        "roofline's only."
        + (f" Served here by: {calibration}." if have_profiles else
           " **The profiles were not found on the search path: the measured rows are missing from this run.**"),
        "",
        "Readings of the batch table (`semantics` in errors.csv): **`script_settings`, the main reading**: TLT's "
        "benchmark script as published (`scripts/bench_speculative_decoding.py` of the authors' fastrl "
        f"repository): 32 prompts, at most b running, each finished one replaced by the next, responses cut at its "
        f"`max_new_tokens = {SCRIPT_CAP:,}`, prompts of about {SCRIPT_PROMPT_TOKENS} tokens (its prompt file is not "
        "published: that length is an estimate, varied below). Beside it: `script` (the same loop without the cap, "
        f"{PROMPT_TOKENS}-token prompts, the reading before the script's settings were read), `one_wave` (b requests "
        "at once, the batch shrinking as they finish) and `constant` (a constant batch of b at 1,024 tokens of "
        "context). The benchmark readings draw response lengths from the DAPO Qwen2.5-32B trace (the paper does not "
        "publish its benchmark's lengths) and report the median of 16 draws; `rms_min`-`rms_max` is the rms over "
        f"length-draw seeds {SPREAD_SEEDS[0]}-{SPREAD_SEEDS[-1]} (the reading is seed {SPREAD_SEEDS[0]}).",
        "",
        "## errors.csv (rms and max of |predicted / measured - 1|)",
        "",
        markdown_table(errs, ".3f", nan="nan"),
        "",
    ]
    if have_profiles:
        gpu_meas, script_meas = e("gpu_speedup", "measured", "-"), e("batch_speedup", "measured", "script_settings")

        def spread(model: str, semantics: str) -> str:
            hit = errs[(errs["table"] == "batch_speedup") & (errs["cost_model"] == model)
                       & (errs["semantics"] == semantics)].iloc[0]
            return f"{hit['rms']:.1%} ({hit['rms_min']:.1%}-{hit['rms_max']:.1%})"

        roof_rel = (roof_profiled["roofline_speedup"] / roof_profiled["speedup"] - 1).to_numpy()
        roof_tps = (roof_profiled["roofline_tokens_per_s_no_sd"] / roof_profiled["tokens_per_s_no_sd"] - 1).to_numpy()
        an_bt = analytic["batch"]
        an_script = rms((an_bt["predicted_script_settings"] / an_bt["speedup"] - 1).to_numpy())
        an_dv = rms((analytic["depth_verify"]["predicted"] / analytic["depth_verify"]["speedup"] - 1).to_numpy())
        meas_dv = rms(dv["err_measured"].to_numpy())
        ctx1 = np.full(1, CONTEXT)
        dec = {name: 1e3 * c.model("Qwen2.5-32B", "h100", 4).decode_time(ctx1)
               for name, c in (("roofline", default), ("measured", measured), ("analytic", Measured("analytic")))}
        lines += [
            "## Targets with the calibrated model",
            "",
            f"- **Per-GPU SD speedup, profiled GPUs (H100, A100) <= 8% rms: {gpu_meas:.1%} "
            f"({'met' if gpu_meas <= 0.08 else 'missed'}).** The roofline on the same two rows: "
            f"{rms(roof_rel):.1%}; on all six: {e('gpu_speedup', 'roofline', '-'):.1%}. Tokens/s without SD on "
            f"the same two rows: calibrated {e('gpu_tokens_per_s', 'measured', '-'):.1%}, roofline "
            f"{rms(roof_tps):.1%}. "
            "Two rows, one engine: a check, not a validation.",
            f"- **Batch table under the script's published settings <= 6% rms: {script_meas:.1%} "
            f"({'met' if script_meas <= 0.06 else 'missed'}; over length draws "
            f"{spread('measured', 'script_settings').split(' ', 1)[1].strip('()')}).** rms per batch size: "
            f"{_by_batch(bt, 'err_measured_script_settings')}. Rows off by more than 10%: "
            f"{_rows_over(bt, 'err_measured_script_settings', 0.10)}. "
            f"The other readings beside it (rms, range over draws): script without the cap and with "
            f"{PROMPT_TOKENS}-token prompts {spread('measured', 'script')}, one wave "
            f"{spread('measured', 'one_wave')}, constant batch {e('batch_speedup', 'measured', 'constant'):.1%}. "
            f"The main reading depends on the assumed prompt length: {PROMPT_TOKENS} tokens "
            f"{prompt_sensitivity[PROMPT_TOKENS]:.1%}, {SCRIPT_PROMPT_TOKENS} {script_meas:.1%}, 600 "
            f"{prompt_sensitivity[600]:.1%}.",
        ]
        if script_meas > 0.06:
            lines += [
                "  Causes (largest rows first):",
                "  1. **Wide trees (48-64 verify tokens) at batch 8-32 (over-prediction).** With 32 prompts the "
                "script runs 4, 2 or 1 waves of b; how long the running batch stays full, and so how much of the "
                "run is at a small batch where SD pays most, is set by the assumed response-length distribution "
                "(DAPO Qwen2.5-32B RL rollouts), which the paper does not publish. These rows test that "
                "assumption as much as the cost model.",
                f"  2. **Batch 1-2 (over-prediction growing with the verify budget).** These rows are the depth x "
                f"verify table's regime. The two SD overheads are absolute seconds fitted to that table on the "
                f"*roofline's* kernels (its depth x verify error is {err['depth_verify speedup']:.1%}); on the "
                f"calibrated kernels the same overheads give {meas_dv:.1%} there. The calibrated no-SD decode of "
                f"Qwen2.5-32B at TP 4 and batch 1 is slower than the roofline's ({dec['measured']:.1f} ms vs "
                f"{dec['roofline']:.1f} ms per iteration; {dec['analytic']:.1f} ms with analytic collectives: "
                "per-kernel latencies, then the measured 20-40 us all-reduces), so "
                "fixed overheads weigh less and SD looks better. Refitting the overheads on the "
                "calibrated kernels would fit this very table (circular), and their decomposition is not "
                "identifiable from the data here (see below); neither is done.",
                f"  3. **Collectives (sensitivity, not a fit).** With `cost.collectives = \"analytic\"` (8 us "
                f"small-message all-reduces, as a custom all-reduce in CUDA graphs reaches) the script reading is "
                f"{an_script:.1%} rms and depth x verify {an_dv:.1%}. The default stays `measured`, chosen before "
                "these tables were computed (the scenario schema says why); picking the reading that scores best "
                "here would be fitting to the table.",
                "  No physical constant was moved to reach a target: every efficiency is the calibrated fit to "
                "Vidur's profiles (within the data sheets' peaks), every overhead the roofline's default.",
            ]
        lines += [""]
    lines += [
        "## The roofline (as before): other comparisons",
        "",
        "| comparison | rms error | circular or out of sample |",
        "|---|---|---|",
        f"| depth x verify, SD speedup at batch 1 | {err['depth_verify speedup']:.1%} | circular: the SD overheads "
        "and the acceptance preset were fitted to this table |",
        f"| one-layer drafter vs 0.5B draft LM, drafting time | {ratio:.2f}x vs 2.4x | out of sample |",
        "| end-to-end RL step speedups, CUDA-graph memory, drafter accept over RL | – | not comparable yet: "
        "needs whole RL runs (training phases, drafter dynamics, memory) |",
        "",
        "- **Constant batch is not the measurement.** At a constant batch of 32 with 64 verify tokens, "
        "verification alone bounds the speedup: accepted tokens per verify forward x decode time / verify time "
        f"is {caps[0.7]:.2f}x at the roofline's 70% of H100's dense bf16 peak and {caps[1.0]:.2f}x even at 100%, "
        "before any drafting cost, against the paper's 1.70x. So the paper's batch-32 numbers cannot come from a "
        "constant batch of 32; the `constant` rows are reported, never fitted to.",
        "- **GPU table.** The no-SD tokens/s imply very different achieved HBM bandwidths under the roofline "
        f"({', '.join(f'{g} {x:.0%}' for g, x in zip(gt['gpu'], gt['implied_bw_efficiency'], strict=True))}; "
        "the roofline uses 85% everywhere). B200's "
        f"{gt.set_index('gpu').loc['B200', 'implied_bw_efficiency']:.0%} (early software, presumably) cannot be "
        "predicted from the data sheet; no profiles exist for B200 or the RTX cards.",
        "- **Leave-one-table-out (roofline).** Fitting the kernel-latency floor and the two SD overheads to one "
        "table and predicting the others shows that no single set of analytic constants explains all three "
        "(below).",
        "",
        "## SD overheads: why they are not decomposed here",
        "",
        "Issue 23 asks for the SD overheads split into draft step, tree build, verify, accept, KV compaction and "
        "a per-iteration fixed cost. The data here cannot identify that split: Vidur's profiles time the dense "
        "layers and collectives only (no attention, no sampling, no tree construction, no KV compaction), and "
        "the paper publishes only end-to-end speedups. Any split would be fitted to the same SD tables it is "
        "then checked against (three or more free constants against the 36-row depth x verify table, whose "
        "rows mostly differ by the two known terms, depth and verify budget). It needs measured per-phase "
        "timings of an SD engine on a GPU (`tlt real profile` on a GPU, issue 23 item 8).",
        "",
        "## Leave-one-table-out fits, roofline (rms errors of each table under constants fitted to one)",
        "",
        markdown_table(loo_df, ".3f", nan="nan"),
        "",
        "## Speedup vs batch size (Qwen2.5-32B, TP 4, depth 10, top-k 8)",
        "",
        markdown_table(bt, ".2f", nan="nan"),
        "",
        "![speedup vs batch](batch.png)",
        "",
        "## Per-GPU decode (Qwen2.5-7B, batch 1; calibrated model on profiled GPUs only)",
        "",
        markdown_table(gt, ".2f", nan="–"),
        "",
        "![tokens per second per GPU](gpu.png)",
        "",
        "## Depth x verify at batch 1 (circular for the roofline: its overheads were fitted here)",
        "",
        markdown_table(dv, ".2f", nan="nan"),
        "",
    ]
    with atomic_dir(out, kind="paper-fidelity") as tmp:
        write_text(tmp / "README.md", "\n".join(lines))
        write_text(tmp / "errors.csv", errs.to_csv(index=False))
        write_text(tmp / "batch.csv", bt.to_csv(index=False))
        write_text(tmp / "gpu.csv", gt.to_csv(index=False))
        write_text(tmp / "depth_verify.csv", dv.to_csv(index=False))
        write_text(tmp / "leave_one_out.csv", loo_df.to_csv(index=False))
        save_figure(batch_figure({k: p["batch"] for k, p in by_model.items()}), tmp / "batch")
        save_figure(gpu_figure(gt), tmp / "gpu")


BATCH_TABLE_SHAPE = SDConfig(10, 8, 64)  # the batch table's widest verify budget


def verification_cap(flops_efficiency: float, batch: int = 32, shape: SDConfig = BATCH_TABLE_SHAPE) -> float:
    """Upper bound on the SD speedup of Qwen2.5-32B / TP 4 / H100 at a constant ``batch``: expected
    accepted tokens per verify forward x no-SD decode time / verify time (drafting costs nothing)."""
    gpu = replace(get_gpu("h100"), flops_efficiency=flops_efficiency)
    cm = RooflineCostModel(get_model("Qwen2.5-32B"), gpu, tp=4)
    ctx = np.full(batch, CONTEXT)
    accepted = paper_qwen32b_tp4().expected_accept_length(shape)
    return accepted * cm.decode_time(ctx) / cm.verify_time(ctx, shape.verify_tokens)


def _implied_efficiency(gpu: str, tokens_per_s: float) -> float:
    """The HBM bandwidth fraction at which the roofline's batch-1 decode matches ``tokens_per_s``."""
    spec = get_gpu(GPU_PRESETS[gpu])
    cm = RooflineCostModel(get_model("Qwen2.5-7B"), spec, tp=1)
    predicted = 1.0 / cm.decode_time(np.full(1, CONTEXT))
    return spec.bandwidth_efficiency * tokens_per_s / predicted


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Compare the simulator with the paper's tables.")
    parser.add_argument("--out", type=Path, default=Path("reports/paper-fidelity"))
    args = parser.parse_args(argv)
    write_report(args.out)


if __name__ == "__main__":
    main()

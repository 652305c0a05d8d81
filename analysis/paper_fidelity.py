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
* ``sd_by_gpu_qwen7b_bs1`` — Qwen2.5-7B, TP 1, batch 1, six GPUs: tokens/s without SD and SD
  speedup. Out of sample (the draft shape is not published: TLT's batch-1 arm ``8_4_48`` is assumed).
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


@dataclass(frozen=True)
class _Work:
    step: int
    group_ids: np.ndarray
    prompt_tokens: np.ndarray
    response_tokens: np.ndarray


def _speedup(cm: RooflineCostModel, batch: int, shape: SDConfig) -> float:
    ctx = np.full(batch, CONTEXT)
    return paper_qwen32b_tp4().expected_accept_length(shape) * cm.decode_time(ctx) / cm.sd_time(ctx, shape)


def _benchmark_speedup(cm: RooflineCostModel, batch: int, shape: SDConfig, lengths: np.ndarray, waves: int = 16,
                       seed: int = 0) -> float:
    """Median over ``waves`` benchmark runs: ``batch`` requests at once, the batch shrinking as they finish."""
    rng = np.random.default_rng([seed, batch, shape.verify_tokens])
    out = []
    for _ in range(waves):
        w = _Work(0, np.arange(batch).astype(str), np.full(batch, 128), rng.choice(lengths, batch))
        kw = dict(cost=cm, accept=paper_qwen32b_tp4(), engine=EngineConfig(max_batch=batch), deal_mode="trace")
        out.append(simulate_step(w, policies=[NoSD()], **kw).makespan / simulate_step(w, policies=[Static(shape)],
                                                                                     **kw).makespan)
    return float(np.median(out))


def load_tables(paper: Path = PAPER) -> dict[str, pd.DataFrame]:
    return {name: pd.read_csv(paper / f"{name}.csv") for name in
            ("sd_depth_verify_bs1", "sd_speedup_vs_batch", "sd_by_gpu_qwen7b_bs1", "drafter_and_system")}


def predictions(c: Constants, tables: dict[str, pd.DataFrame], lengths: np.ndarray | None) -> dict[str, pd.DataFrame]:
    """Every comparable number of every table next to the model's prediction."""
    m32 = c.model("Qwen2.5-32B", "h100", 4)
    dv = tables["sd_depth_verify_bs1"].copy()
    dv["predicted"] = [_speedup(m32, 1, SDConfig(d, 8, v)) for d, v in zip(dv["depth"], dv["verify_tokens"],
                                                                              strict=True)]
    bt = tables["sd_speedup_vs_batch"].copy()
    bt["predicted_constant_batch"] = [_speedup(m32, b, SDConfig(10, 8, v)) for b, v in
                                      zip(bt["batch_size"], bt["verify_tokens"], strict=True)]
    if lengths is not None:
        bt["predicted_benchmark"] = [_benchmark_speedup(m32, b, SDConfig(10, 8, v), lengths) for b, v in
                                     zip(bt["batch_size"], bt["verify_tokens"], strict=True)]
    gt = tables["sd_by_gpu_qwen7b_bs1"].copy()
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
    return out


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


def batch_figure(bt: pd.DataFrame):
    """Measured vs predicted SD speedup against batch size, per verify budget."""
    import matplotlib.pyplot as plt

    from analysis.style import PALETTE, paper_rc

    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots(figsize=(6.0, 3.4))
        for i, (v, g) in enumerate(bt.groupby("verify_tokens")):
            colour = PALETTE[i % len(PALETTE)]
            ax.plot(g["batch_size"], g["speedup"], "o-", color=colour, label=f"{v}")
            ax.plot(g["batch_size"], g["predicted_constant_batch"], ":", color=colour)
            ax.plot(g["batch_size"], g["predicted_benchmark"], "--", color=colour)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size (requests)")
        ax.set_ylabel("SD speedup over no SD (x)")
        ax.set_title("Qwen2.5-32B, TP 4, H100, depth 10, top-k 8")
        from matplotlib.lines import Line2D

        styles = [Line2D([], [], color="grey", ls=ls, marker=m) for ls, m in (("-", "o"), (":", ""), ("--", ""))]
        first = ax.legend(loc="lower left", ncol=2, title="verify tokens (colour)")
        ax.add_artist(first)
        ax.legend(styles, ["paper", "sim, constant batch", "sim, shrinking batch"], loc="upper right")
        fig.tight_layout()
    return fig


def gpu_figure(gt: pd.DataFrame):
    """Measured vs predicted tokens/s without SD, per GPU."""
    import matplotlib.pyplot as plt

    from analysis.style import paper_rc

    with plt.rc_context(paper_rc()):
        fig, ax = plt.subplots(figsize=(6.0, 3.0))
        x = np.arange(len(gt))
        ax.bar(x - 0.2, gt["tokens_per_s_no_sd"], width=0.4, color="#000000", label="paper")
        ax.bar(x + 0.2, gt["predicted_tokens_per_s_no_sd"], width=0.4, color="#0072B2", label="simulator (roofline)")
        ax.set_xticks(x, gt["gpu"])
        ax.set_ylabel("tokens/s, batch 1, no SD")
        ax.set_title("Qwen2.5-7B decode speed per GPU (out of sample)")
        ax.legend()
        fig.tight_layout()
    return fig


def write_report(out: Path, paper: Path = PAPER) -> None:
    """The paper-fidelity report (README, CSVs, figures), written atomically."""
    import platform

    import tltcore
    from analysis.style import save_figure
    from tltcore.atomic import atomic_dir, write_text
    from tltsim.traces import load_trace

    tables = load_tables(paper)
    trace = load_trace("polytrace_rl_rollouts")
    lengths = trace.loc[trace["source"] == "polytrace/verl_dapo_qwen2.5-32b", "response_tokens"].to_numpy()
    default = Constants()
    pred = predictions(default, tables, lengths)
    err = errors(pred)
    fits = {t: fit(t, tables) for t in ("depth_verify", "gpu", "batch")}
    loo = []
    for t, c in fits.items():
        e = errors(predictions(c, tables, lengths))
        loo.append({"fitted to": t, "kernel latency us": c.kernel_latency_s * 1e6,
                    "draft step overhead ms": c.draft_step_overhead_s * 1e3, "SD overhead ms": c.sd_overhead_s * 1e3,
                    **{k: v for k, v in e.items()}, "drafter vs 0.5B": drafter_ratio(c)})
    loo_df = pd.DataFrame(loo)
    dv, bt, gt = pred["depth_verify"], pred["batch"], pred["gpu"]
    bt_show = bt.assign(err_constant=bt["predicted_constant_batch"] / bt["speedup"] - 1,
                        err_benchmark=bt["predicted_benchmark"] / bt["speedup"] - 1)
    gt_show = gt.assign(err_no_sd=gt["predicted_tokens_per_s_no_sd"] / gt["tokens_per_s_no_sd"] - 1,
                        err_speedup=gt["predicted_speedup"] / gt["speedup"] - 1,
                        implied_bw_efficiency=[_implied_efficiency(g, tps) for g, tps in
                                               zip(gt["gpu"], gt["tokens_per_s_no_sd"], strict=True)])
    ratio = drafter_ratio(default)
    caps = {eff: verification_cap(eff) for eff in (0.7, 1.0)}
    text = "\n".join([
        "# Paper fidelity: the simulator against every published table",
        "",
        "Reproduce: `python -m analysis.paper_fidelity --out reports/paper-fidelity` (any machine; "
        f"tlt {tltcore.__version__}, Python {platform.python_version()}). Tables: `../shared/paper/` "
        "(TLT, ASPLOS 2026, arXiv 2511.16665). Model: the analytic roofline with its default constants and the "
        "paper-fitted tree acceptance.",
        "",
        "## Summary (rms of predicted / measured - 1)",
        "",
        "| comparison | rms error | circular or out of sample |",
        "|---|---|---|",
        f"| depth x verify, SD speedup at batch 1 | {err['depth_verify speedup']:.1%} | circular: the SD overheads "
        "and the acceptance preset were fitted to this table |",
        f"| speedup vs batch, constant batch | {err['batch, constant batch']:.1%} | out of sample; not the "
        "measurement's conditions |",
        f"| speedup vs batch, benchmark conditions | {err['batch, benchmark conditions']:.1%} | out of sample; "
        "batch shrinking as requests finish, lengths assumed (DAPO Qwen2.5-32B trace) |",
        f"| per-GPU tokens/s without SD (7B, batch 1) | {err['gpu tokens/s without SD']:.1%} | out of sample |",
        f"| per-GPU SD speedup (7B, batch 1) | {err['gpu SD speedup']:.1%} | out of sample except H100 (its "
        "overheads come from the 32B H100 table); draft shape assumed 8_4_48 |",
        f"| one-layer drafter vs 0.5B draft LM, drafting time | {ratio:.2f}x vs 2.4x | out of sample |",
        "| end-to-end RL step speedups, CUDA-graph memory, drafter accept over RL | – | not comparable yet: "
        "needs whole RL runs (training phases, drafter dynamics, memory) |",
        "",
        "Neither out-of-sample target (<= 8% rms on the batch table and on the GPU table) is met. Why:",
        "",
        "- **Batch table.** At a constant batch of 32 with 64 verify tokens, verification alone bounds the "
        "speedup: accepted tokens per verify forward x decode time / verify time is "
        f"{caps[0.7]:.2f}x at the model's 70% of H100's dense bf16 peak and {caps[1.0]:.2f}x even at 100%, "
        "before any drafting cost, against the paper's 1.70x. So the paper's batch-32 numbers cannot come from a "
        "constant batch of 32: the benchmark's running batch must have shrunk as requests finished, and the error "
        "then depends on the response-length distribution of that benchmark, which is not published. With the "
        "DAPO Qwen2.5-32B lengths (one wave of b requests) the "
        f"error is {err['batch, benchmark conditions']:.1%}: the model over-predicts at batch 8-16 with wide "
        "trees (the sharp roofline keeps verification flat up to the ridge point, measured GEMMs slow down "
        "earlier) and the shrink of a heavy-tailed length distribution lowers the effective batch.",
        "- **GPU table.** The no-SD tokens/s imply very different achieved HBM bandwidths "
        f"({', '.join(f'{g} {e:.0%}' for g, e in zip(gt_show['gpu'], gt_show['implied_bw_efficiency'], strict=True))}"
        "; the model uses 85% everywhere). B200's "
        f"{gt_show.set_index('gpu').loc['B200', 'implied_bw_efficiency']:.0%} (early software, presumably) cannot be "
        "predicted from the data sheet; per-GPU efficiencies can be set per scenario "
        "(`cluster.bandwidth_efficiency`) or measured with `tlt real profile` on the GPU at hand.",
        "- **Leave-one-table-out.** Fitting the kernel-latency floor and the two SD overheads to one table and "
        "predicting the others shows that no single set of constants explains all three (below): the batch-1 "
        "32B table wants no per-kernel floor, the 7B GPU table wants ~6 us per kernel, and the constant-batch "
        "fit needs implausible draft-step overheads. Calibrated tables measured per (model, GPU) are the fix, "
        "not more analytic constants.",
        "",
        "## Leave-one-table-out fits (rms errors of each table under constants fitted to one)",
        "",
        markdown_table(loo_df, ".3f", nan="nan"),
        "",
        "## Speedup vs batch size (Qwen2.5-32B, TP 4, depth 10, top-k 8)",
        "",
        markdown_table(bt_show[["verify_tokens", "batch_size", "speedup", "predicted_constant_batch", "err_constant",
                     "predicted_benchmark", "err_benchmark"]], ".2f", nan="nan"),
        "",
        "![speedup vs batch](batch.png)",
        "",
        "## Per-GPU decode (Qwen2.5-7B, batch 1)",
        "",
        markdown_table(gt_show[["gpu", "tokens_per_s_no_sd", "predicted_tokens_per_s_no_sd", "err_no_sd", "speedup",
                     "predicted_speedup", "err_speedup", "implied_bw_efficiency"]], ".2f", nan="nan"),
        "",
        "![tokens per second per GPU](gpu.png)",
        "",
        "## Depth x verify at batch 1 (circular)",
        "",
        markdown_table(dv.assign(err=dv["predicted"] / dv["speedup"] - 1), ".2f", nan="nan"),
        "",
    ])
    with atomic_dir(out, kind="paper-fidelity") as tmp:
        write_text(tmp / "README.md", text)
        write_text(tmp / "batch.csv", bt_show.to_csv(index=False))
        write_text(tmp / "gpu.csv", gt_show.to_csv(index=False))
        write_text(tmp / "depth_verify.csv", dv.to_csv(index=False))
        write_text(tmp / "leave_one_out.csv", loo_df.to_csv(index=False))
        save_figure(batch_figure(bt), tmp / "batch")
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

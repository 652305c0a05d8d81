"""Reproduce the paper's end-to-end results with whole simulated RL runs, and show where TLT does not pay.

``python -m analysis.paper_repro --out reports/paper-repro`` runs the scenario files in
``reports/paper-repro/scenarios`` (Qwen2.5-7B and 32B on 1/2/4/8 nodes of 8 H100), an ablation run with
every preset, and scenarios where SD does not pay, then writes a README with figures and a table of
ours vs the paper's numbers (``../shared/paper/e2e_speedup_vs_verl.csv``, ``drafter_and_system.csv``).
Nothing here is fitted to the end-to-end table: every constant is a default of the simulator.
"""

from __future__ import annotations

import argparse
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.markdown import markdown_table
from analysis.memory_plots import cuda_graph_memory
from analysis.paper_fidelity import paper_tables_dir
from analysis.provenance import git_commit
from analysis.rl_plots import accept_over_steps, speedup_bars, step_breakdown
from analysis.style import save_figure
from tltcore import __version__
from tltcore.atomic import write_text
from tltcore.model_shape import get_model
from tltsim.rl.gpu_memory import PAPER_ARMS, cuda_graph_bytes
from tltsim.rl.run import compare_presets
from tltsim.scenario import Scenario, apply_override, load_scenario

SCENARIOS = Path(__file__).resolve().parents[1] / "reports" / "paper-repro" / "scenarios"
ABLATION = "qwen7b_2node"
NOT_PAYING_COLUMNS = ["scenario", "tlt speedup", "tlt rollout speedup", "tlt-base speedup", "veRL rollout share"]
ALL_PRESETS = "tlt,static-drafter,tlt-base,tlt-no-spot,tlt-no-elastic,tlt-no-mab,speco-bubble"


@dataclass(frozen=True)
class Case:
    """One simulated setting: a scenario file plus overrides."""

    name: str
    scenario: str
    overrides: tuple[tuple[str, str], ...] = ()
    why: str = ""

    def build(self) -> Scenario:
        s = load_scenario(SCENARIOS / f"{self.scenario}.toml")
        for k, v in self.overrides:
            s = apply_override(s, k, v)
        return s

    def command(self, steps: int | None = None) -> str:
        sets = "".join(f" --set {k}={v}" for k, v in self.overrides)
        return (f"tlt sim run --scenario reports/paper-repro/scenarios/{self.scenario}.toml{sets}"
                + (f" --steps {steps}" if steps else ""))


#: Scenarios where the simulator predicts SD does not pay (or barely), each with the reason.
NOT_PAYING = (
    Case("H20, 7B, 1 node", "qwen7b_1node", (("cluster.gpu", "H20"),),
         "H20: 148 dense TFLOPS beside 4 TB/s. Verifying a tree of 8-48 tokens per request is compute-bound "
         "from small batches on, so each SD iteration costs several decode iterations."),
    Case("weak drafter (accept ~2.7), 7B, 1 node", "qwen7b_1node",
         (("drafter.quality", "0.7"), ("drafter.stale_quality", "0.6")),
         "A drafter that matches the policy poorly (trained on another model family or data): trees accept "
         "~2.7 tokens, and SD runs only in the tail, so it gains 3% of the step."),
    Case("large batch per worker (512 prompts x 8), 7B, 1 node", "qwen7b_1node",
         (("trace.prompts_per_step", "512"),),
         "512 responses per rollout worker: the batch stays above the elastic threshold (32) for most of the "
         "rollout, so SD runs only in the last stretch of the tail."),
    Case("reward-dominated (2 s/sample judge), 7B, 8 nodes", "qwen7b_8node",
         (("rl.reward_s_per_sample", "2.0"), ("rl.reward_parallelism", "16")),
         "An LLM judge or code sandbox at 2 s per response on 16 parallel workers: the reward phase "
         "takes 128 s per step whatever the rollout does, so the rollout speedup is diluted."),
)


def _run(s: Scenario) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    return compare_presets(s)


def paper_e2e() -> pd.DataFrame:
    df = pd.read_csv(paper_tables_dir() / "e2e_speedup_vs_verl.csv", dtype={"speedup": str})
    df["paper"] = pd.to_numeric(df["speedup"], errors="coerce")
    return df.drop(columns="speedup")


def paper_value(quantity: str) -> float:
    df = pd.read_csv(paper_tables_dir() / "drafter_and_system.csv")
    return float(df.loc[df["quantity"] == quantity, "value"].iloc[0])


# ---- figures -----------------------------------------------------------------------------------
def speedup_figure(table: pd.DataFrame) -> plt.Figure:
    """Ours vs the paper's end-to-end speedup per model and node count (:func:`speedup_bars`)."""
    rows = []
    for r in table.itertuples(index=False):
        setting = f"{r.model.removeprefix('Qwen2.5-')}, {r.nodes} node{'s' if r.nodes > 1 else ''}"
        rows.append({"setting": setting, "source": "paper", "speedup": r.paper,
                     "status": "oom" if np.isnan(r.paper) else "ok"})
        rows.append({"setting": setting, "source": "tlt (simulated)", "speedup": r.ours, "status": r.status})
    return speedup_bars(pd.DataFrame(rows), group="setting", series="source",
                        title="RL step speedup of TLT over veRL, 8 H100 per node")


def accept_figure(steps: pd.DataFrame) -> plt.Figure:
    refs = {"paper: adapted 6.53": paper_value("accept_length_adapted_drafter_during_rl"),
            "paper: stale 4.59": paper_value("accept_length_stale_drafter_during_rl")}
    return accept_over_steps(steps, presets=["tlt", "static-drafter", "tlt-no-spot", "speco-bubble"],
                             references=refs, title="Drafter acceptance over RL steps (Qwen2.5-7B, 2 nodes)")


def breakdown_figure(summary: pd.DataFrame) -> plt.Figure:
    return step_breakdown(summary, title="Where an RL step's time goes (Qwen2.5-7B, 2 nodes)")


def graph_memory_figure() -> plt.Figure:
    model = get_model("Qwen2.5-32B")
    ours = {"one strategy": cuda_graph_bytes(model, 4, [(8, 4, 32)], "naive") / 1e9,
            "naive, 4 strategies": cuda_graph_bytes(model, 4, PAPER_ARMS, "naive") / 1e9,
            "bucketed, 4 strategies": cuda_graph_bytes(model, 4, PAPER_ARMS, "bucketed") / 1e9}
    paper = {"one strategy": paper_value("cuda_graph_memory_single_strategy"),
             "naive, 4 strategies": paper_value("cuda_graph_memory_naive_multi_strategy"),
             "bucketed, 4 strategies": paper_value("cuda_graph_memory_bucketed")}
    table = pd.DataFrame([{"case": c, "source": src, "gb": v} for src, d in
                          (("paper", paper), ("model (tltsim.rl.gpu_memory)", ours)) for c, v in d.items()])
    return cuda_graph_memory(table, title="CUDA graphs of the SD strategies, Qwen2.5-32B TP 4")


# ---- report -----------------------------------------------------------------------------------
def write_report(out: Path, steps: int | None = None, ablation_steps: int = 6) -> None:
    """Run everything and write ``out/README.md`` with its figures."""
    t0 = time.time()
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for r in paper_e2e().itertuples(index=False):
        name = f"qwen{r.model.removeprefix('Qwen2.5-').lower()}_{r.nodes}node"
        s = load_scenario(SCENARIOS / f"{name}.toml")
        if steps is not None:
            s = apply_override(s, "trace.num_steps", str(steps))
        print(f"[paper-repro] {name}", flush=True)
        _, _, summ = _run(s)
        tlt = summ.set_index("preset").loc["tlt"]
        verl = summ.set_index("preset").loc["verl"]
        rows.append({"model": r.model, "nodes": r.nodes, "gpus": r.gpus, "paper": r.paper,
                     "ours": float(tlt["speedup"]) if tlt["status"] == "ok" else float("nan"),
                     "status": tlt["status"],
                     "rollout_share_verl": float(verl.get("rollout_share", np.nan)),
                     "rollout_speedup": float(tlt.get("rollout_speedup", np.nan)),
                     "static_drafter": float(summ.set_index("preset").loc["static-drafter"].get("speedup", np.nan)),
                     "tlt_base": float(summ.set_index("preset").loc["tlt-base"].get("speedup", np.nan))})
    table = pd.DataFrame(rows)
    table["error"] = table["ours"] / table["paper"] - 1
    table.to_csv(out / "e2e.csv", index=False)
    save_figure(speedup_figure(table), out / "e2e_speedup")

    print("[paper-repro] ablations", flush=True)
    ab = load_scenario(SCENARIOS / f"{ABLATION}.toml")
    ab = apply_override(apply_override(ab, "presets", ALL_PRESETS), "trace.num_steps", str(ablation_steps))
    _, ab_steps, ab_summary = _run(ab)
    ab_steps.to_csv(out / "ablation_steps.csv", index=False)
    ab_summary.to_csv(out / "ablation_summary.csv", index=False)
    save_figure(accept_figure(ab_steps), out / "accept_over_steps")
    save_figure(breakdown_figure(ab_summary), out / "step_breakdown")
    save_figure(graph_memory_figure(), out / "cuda_graph_memory")

    nots = []
    for case in NOT_PAYING:
        print(f"[paper-repro] {case.name}", flush=True)
        s = case.build()
        if steps is not None:
            s = apply_override(s, "trace.num_steps", str(min(steps, s.trace.num_steps)))
        _, _, summ = _run(s)
        by = summ.set_index("preset")
        nots.append({"scenario": case.name, "tlt speedup": float(by.loc["tlt", "speedup"]),
                     "tlt rollout speedup": float(by.loc["tlt", "rollout_speedup"]),
                     "tlt-base speedup": float(by.loc["tlt-base", "speedup"]),
                     "veRL rollout share": float(by.loc["verl", "rollout_share"]), "why": case.why,
                     "command": f"`{case.command(steps)}`"})
    nots_df = pd.DataFrame(nots)
    nots_df.to_csv(out / "not_paying.csv", index=False)
    wall = time.time() - t0
    write_text(out / "README.md", _readme(table, ab_summary, ab_steps, nots_df, wall, steps, ablation_steps))


def _readme(table: pd.DataFrame, ab: pd.DataFrame, ab_steps: pd.DataFrame, nots: pd.DataFrame, wall: float,
            steps: int | None, ablation_steps: int) -> str:
    e2e = table[["model", "nodes", "paper", "ours", "error", "status", "rollout_share_verl", "rollout_speedup",
                 "static_drafter", "tlt_base"]].copy()
    within = e2e.dropna(subset=["paper", "ours"])
    n_within = int((within["error"].abs() <= 0.15).sum())
    ab_view = ab[ab["status"] == "ok"][["preset", "total_s", "rollout_share", "mean_accept_length", "rollout_speedup",
                                        "speedup", "trained_samples", "lost_samples"]]
    tlt_acc = ab_steps[ab_steps["preset"] == "tlt"]["mean_accept_length"]
    st_acc = ab_steps[ab_steps["preset"] == "static-drafter"]["mean_accept_length"]
    cmd = ("python -m analysis.paper_repro --out reports/paper-repro" + (f" --steps {steps}" if steps else "")
           + f" --ablation-steps {ablation_steps}")
    return f"""# Paper reproduction: whole simulated RL runs vs TLT's end-to-end results

Regenerate: `{cmd}` ({wall / 60:.0f} min on this 2-core CPU box; tlt {__version__}, commit {git_commit()},
Python {platform.python_version()}). Simulated device: H100-SXM presets (`tltcore.hardware`); no GPU was used.

Every number below comes from the simulator's defaults: nothing was fitted to the end-to-end table. The
inputs that are ours, not the paper's, are listed at the end; each can be changed in the scenario files
(`reports/paper-repro/scenarios/*.toml`) or with `--set`.

## End-to-end speedup over veRL

![speedup](e2e_speedup.png)

{markdown_table(e2e, ".2f")}

`ours` is `tlt`'s total time over the run divided into `verl`'s; `rollout_share_verl` is the share of
veRL's step spent generating (computed, never assumed); `rollout_speedup` is TLT's rollout alone;
`static_drafter` and `tlt_base` are the same runs' speedups of those presets. {n_within} of the six
published speedups are within ±15%. The 32B rows at 1 and 2 nodes are out of memory in the actor update,
as in the paper (`tltsim.rl.gpu_memory`: FSDP states, saved activations and fp32 logits exceed the 76 GB usable
per GPU; the breakdown is printed by `tlt sim run` for such a run).

### Why ours differs from the paper

* **The trend over nodes is steeper than the paper's (7B: too low at 1 node, too high at 8).** The
  global batch is fixed (128 prompts x 8), so more nodes mean fewer responses per rollout worker:
  at 8 nodes a 7B worker (TP 1) holds 16 responses, so elastic SD is on from the first token and the
  whole rollout speculates; at 1 node it holds 128 and SD is on only in the tail. The paper's batch per
  step is not in our sources: a larger global batch at 8 nodes (weak scaling) flattens our curve.
* **32B is under-predicted.** With the same batch and lengths, 32B's actor update costs ~4.3x 7B's
  FLOPs on the same GPUs, so our veRL rollout share for 32B is lower (see `rollout_share_verl`), and
  TP 4 workers hold 4x more responses each than 7B's TP 1 workers at the same node count, so SD runs
  for less of the rollout. The paper's 32B speedup (2.12x) needs a rollout share near 85% with a ~2.6x
  rollout speedup; the paper's training setup (CPU offload, sequence parallelism, their MFU) is not
  published in our sources. Our training phases use `rl.train_mfu = 0.35` and `rl.forward_mfu = 0.45`.
* **Response lengths.** No trace of the paper's runs exists; we use the published Intern-S1 math-RLVR
  length mixture (means 5-18K tokens) capped at 32K. The paper's own lengths are unknown.

## Drafter over RL steps: adaptive vs static

![accept](accept_over_steps.png)

Mean accept length per step (Qwen2.5-7B, 2 nodes, {ablation_steps} steps): adaptive `tlt`
{tlt_acc.iloc[0]:.2f} → {tlt_acc.iloc[-1]:.2f}, static drafter {st_acc.iloc[0]:.2f} → {st_acc.iloc[-1]:.2f};
the paper reports 6.53 (adapted) and 4.59 (stale)
averaged over its runs. The model (`tltcore.drafter.dynamics`): each policy update moves the drafter's quality
toward `drafter.stale_quality` by `drafter.drift` (0.3); training recovers it toward `drafter.quality` with
`drafter.recovery_samples` (400) per e-folding. The ceiling and floor were chosen so BEG-MAB's arms land around
the paper's two numbers; drift and recovery are not published and are the first things the real
adaptive-drafter runs should measure.

## Ablations and peers (Qwen2.5-7B, 2 nodes)

![breakdown](step_breakdown.png)

{markdown_table(ab_view, ".2f")}

* `tlt-no-spot` trains the same samples as a serial stage after rollout: slower than `tlt` by that stage,
  with the same drafter quality (the bubble holds the training here).
{_elastic_note(ab)}
* `tlt-no-elastic` runs SD at every batch size; `tlt-no-mab` uses one fixed tree (8_4_32).
* `speco-bubble` is our reading of verl-SpeCo: fixed chain SD (4_1_4), a fixed training budget in the
  bubbles, full synchronous checkpoints. Its drafter is the same EAGLE drafter; its chain drafts accept less.
* `tlt-base` uses the model-free n-gram drafter with an assumed chain acceptance of 0.5
  (`drafter.ngram_alpha`); the paper's TLT-Base numbers are not in our sources.

## Where it does not pay

{markdown_table(nots[NOT_PAYING_COLUMNS], ".2f")}

{chr(10).join(f"* **{r.scenario}** — {r.why} Reproduce: {r.command}" for r in nots.itertuples())}

## CUDA-graph memory

![graphs](cuda_graph_memory.png)

`tltsim.rl.gpu_memory.cuda_graph_bytes` (per-runner buffers + a per-graph overhead, two constants fitted to
these three numbers: this figure is circular). The paper scenarios use `engine.cuda_graphs = "bucketed"`,
which takes the graphs' memory out of the KV cache.

## Inputs that are ours, not the paper's

* Workload: `intern_s1_math` profile (published Intern-S1 statistics), 128 prompts x 8, cap 32,768 tokens,
  {steps or "the scenario files'"} RL step(s) per setting ({ablation_steps} for the ablations); prompts ~110-270 tokens.
  With one step per setting the drafter is fresh in both `tlt` and `static-drafter`, so they tie there;
  the ablation run shows them part over steps.
* Rollout: TP 1 for 7B, TP 4 for 32B; veRL's engine limits (`max_num_seqs` 1024, 90% memory,
  8,192-token prefill budget); the roofline cost model; the paper-fitted tree acceptance.
* RL phases (`tltsim.rl.phases`): rule-based reward 10 ms/sample, old log-probs + reference forward at
  45% MFU, actor update with activation recompute at 35% MFU, weight sync 3 s + bytes/NVLink.
* Spot Trainer: 29.6 samples/s per released worker (the paper's packed throughput), ≤ 800 samples per step,
  checkpoints every 64 samples at 97 ms (selective, asynchronous), one-step-offset DataBuffer.
"""


def _elastic_note(ab: pd.DataFrame) -> str:
    """Say plainly when the simulator disagrees with the paper's premise that SD must wait for a small batch."""
    by = ab.set_index("preset")["speedup"]
    if by.get("tlt-no-elastic", 0) <= by.get("tlt", 0):
        return "* The elastic switch pays here: SD at every batch size (`tlt-no-elastic`) is slower than `tlt`."
    return (f"* **Our model disagrees with the paper here:** SD at every batch size (`tlt-no-elastic`, "
            f"{by['tlt-no-elastic']:.2f}x) beats TLT's elastic switch ({by['tlt']:.2f}x). On H100 under our roofline a "
            "7B verify of 8-16 tokens per request stays memory-bound up to large batches, so BEG-MAB's small arms "
            "still gain where the switch (threshold 32) keeps SD off. The paper's SD-vs-batch table was measured on "
            "32B at TP 4, where our model does predict the gain shrinking with batch; the H20 case below is where "
            "SD at large batch hurts. A GPU measurement of 7B SD at batch 64-256 would settle it.")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("reports/paper-repro"))
    parser.add_argument("--steps", type=int, default=None, help="RL steps per setting (default: the scenario's)")
    parser.add_argument("--ablation-steps", type=int, default=6, help="RL steps of the ablation run")
    args = parser.parse_args(argv)
    write_report(args.out, args.steps, args.ablation_steps)


if __name__ == "__main__":
    main()

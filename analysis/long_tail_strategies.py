"""Long-tail strategies composed with SD over the bundled traces, two models and two GPUs (issue 45's
report, ``reports/long-tail-strategies/``).

Why. The long tail has more than one cure: SD shortens it, asynchrony (one-step-off, fully async with a
staleness bound) hides it behind training, over-provisioning cuts it off, tail batching (RollPacker)
gathers it into a few long rounds (:mod:`tltsim.strategy`).
Which pays most, at what staleness, and whether they compose depends on the workload: this runs each
strategy with no SD, TLT's ``elastic+beg-mab`` and our ``cost-aware`` on every cell of the grid and
reports, per cell, the ranking (median, min-max over seeds), the lag of the trained samples and whether
SD and each strategy add or compete (:mod:`tltsim.advise_strategies`, the same code ``tlt advise
--strategies`` runs).

Grid. Traces: PolyTrace's verl DAPO-32B run (its real consecutive steps), the AIME R1-distill snapshot
and the Intern-S1 math length profile, each as :data:`STEPS` RL steps of :data:`GROUPS` prompt groups
(a snapshot is cut into steps; DAPO's steps are its own). Models: Qwen2.5-7B at TP 4 and Qwen2.5-32B at
TP 8 (TLT's released scripts) on :data:`CLUSTER` GPUs of H100 or H20. Strategies: ``--strategies all``'s
(:data:`tltsim.advise_strategies.ALL_STRATEGIES`). Everything else: the scenario defaults (measured cost
model where a GPU has profiles, the roofline otherwise; the paper's acceptance; veRL's engine limits).

Reproduce: ``python -m analysis.long_tail_strategies --out reports/long-tail-strategies --seeds 3 --workers 2``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from analysis.markdown import markdown_table
from analysis.provenance import provenance_line
from analysis.style import colors_for, paper_rc, save_figure
from tltcore.atomic import atomic_dir

POLICIES: tuple[str, ...] = ("no-sd", "elastic+beg-mab", "cost-aware")
STEPS, GROUPS, CLUSTER = 5, 32, 32
#: trace label -> scenario settings
TRACES: dict[str, tuple[tuple[str, str], ...]] = {
    "dapo-32b": (("trace.name", "polytrace_rl_rollouts"), ("trace.source", "polytrace/verl_dapo_qwen2.5-32b"),
                 ("trace.step", "0"), ("trace.num_steps", str(STEPS))),
    "aime-r1distill": (("trace.name", "r1distill_qwen1.5b_aime_8samples"), ("trace.prompts_per_step", str(GROUPS)),
                       ("trace.num_steps", str(STEPS))),
    "intern-s1-math": (("trace.name", "intern_s1_math"), ("trace.prompts_per_step", str(GROUPS)),
                       ("trace.samples", "8"), ("trace.cap", "32768"), ("trace.num_steps", str(STEPS))),
}
MODELS: dict[str, int] = {"Qwen2.5-7B": 4, "Qwen2.5-32B": 8}
GPUS: tuple[str, ...] = ("H100", "H20")


@dataclass(frozen=True)
class Cell:
    trace: str
    model: str
    gpu: str

    @property
    def label(self) -> str:
        return f"{self.trace} {self.model.removeprefix('Qwen2.5-')} {self.gpu}"

    def scenario(self, seed: int):
        from tltsim.scenario import resolve

        given = [*TRACES[self.trace], ("model.name", self.model), ("cluster.gpu", self.gpu),
                 ("cluster.gpus", str(CLUSTER)), ("cluster.tp", str(MODELS[self.model])), ("seed", str(seed)),
                 ("policies", ",".join(p for p in POLICIES if p != "no-sd"))]
        return resolve(None, [(k, v, "long_tail_strategies") for k, v in given]).scenario


def run_cell(args: tuple[Cell, int]) -> pd.DataFrame:
    """One cell at one seed: every strategy x policy (:func:`tltsim.advise_strategies.evaluate_strategies`)."""
    from tltsim.advise_strategies import ALL_STRATEGIES, evaluate_strategies, parse_strategies

    cell, seed = args
    t0 = time.process_time()
    rows = evaluate_strategies(cell.scenario(seed), parse_strategies(list(ALL_STRATEGIES)))
    return rows.assign(trace=cell.trace, model=cell.model, gpu=cell.gpu, cpu_s=time.process_time() - t0)


def run_grid(cells: Sequence[Cell], seeds: int, workers: int, log=print) -> pd.DataFrame:
    tasks = [(c, k) for c in cells for k in range(seeds)]
    if workers <= 1:
        frames = []
        for i, t in enumerate(tasks):
            frames.append(run_cell(t))
            log(f"[strategies] {i + 1}/{len(tasks)} {t[0].label} seed {t[1]}")
    else:
        with ProcessPoolExecutor(workers) as pool:
            frames = list(pool.map(run_cell, tasks))
    return pd.concat(frames, ignore_index=True)


KEYS = ["trace", "model", "gpu"]


def tables(per_seed: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the ranking per cell, the SD x strategy verdicts per cell)."""
    from tltsim.advise_strategies import composition, rank_strategies

    ranks, verdicts = [], []
    for key, part in per_seed.groupby(KEYS, sort=False):
        table = rank_strategies(part.drop(columns=[*KEYS, "cpu_s"]))
        ranks.append(table.assign(**dict(zip(KEYS, key, strict=True))))
        for c in composition(table):
            verdicts.append({**dict(zip(KEYS, key, strict=True)), "strategy": c.strategy, "policy": c.policy,
                             "sd_alone": c.sd_alone, "strategy_alone": c.strategy_alone, "together": c.together,
                             "product": c.product, "verdict": c.verdict})
    return pd.concat(ranks, ignore_index=True), pd.DataFrame(verdicts)


def figure(ranking: pd.DataFrame) -> plt.Figure:
    """Per strategy and SD setting, the speedup over sync without SD in every cell (dots) and its median
    over the cells (bar): one colour per strategy."""
    strategies = list(dict.fromkeys(ranking["strategy"]))
    colors = colors_for(strategies)
    with plt.rc_context(paper_rc()):
        fig, axes = plt.subplots(1, len(POLICIES), figsize=(10, 3.6), sharey=True)
        for ax, policy in zip(axes, POLICIES, strict=True):
            for i, strat in enumerate(strategies):
                v = ranking[(ranking["strategy"] == strat) & (ranking["policy"] == policy)]["speedup_median"]
                ax.bar(i, v.median(), color=colors[strat], alpha=0.6)
                ax.scatter([i] * len(v), v, s=8, color="black", zorder=3)
            ax.axhline(1.0, color="grey", ls="--", lw=1)
            ax.set_xticks(range(len(strategies)), strategies, rotation=35, ha="right", fontsize=7)
            ax.set_title(f"with {policy}")
        axes[0].set_ylabel("whole-run speedup over sync without SD (x)")
        fig.suptitle("Long-tail strategies x SD over the grid (bar: median over cells; dots: each cell's median "
                     "over seeds)", fontsize=9)
        fig.tight_layout()
    return fig


def _x(m: float, lo: float, hi: float) -> str:
    return f"{m:.2f}x ({lo:.2f}–{hi:.2f})"


def headline(ranking: pd.DataFrame, verdicts: pd.DataFrame) -> list[str]:
    """Plain sentences: where SD pays less than, as much as, or more than each strategy, and where they compose."""
    sd = ranking[(ranking["strategy"] == "sync") & (ranking["policy"] != "no-sd")]
    best_sd = sd.groupby(KEYS)["speedup_median"].max()
    lines = [f"- **SD alone** (the better of TLT's and cost-aware under the synchronous step, no GPUs added): "
             f"{best_sd.median():.2f}x median over the {len(best_sd)} cells "
             f"({best_sd.min():.2f}-{best_sd.max():.2f}x), lag 0."]
    for strat in dict.fromkeys(ranking["strategy"]):
        if strat == "sync":
            continue
        alone = ranking[(ranking["strategy"] == strat) & (ranking["policy"] == "no-sd")].set_index(KEYS)
        ratio = (alone["speedup_median"] / best_sd.reindex(alone.index)).dropna()
        more = int((ratio < 0.98).sum())
        same = int(((ratio >= 0.98) & (ratio <= 1.02)).sum())
        less = int((ratio > 1.02).sum())
        per_gpu = alone["speedup_per_gpu"].median()
        more_per_gpu = int((alone["speedup_per_gpu"] / best_sd.reindex(alone.index) < 0.98).sum())
        v = verdicts[verdicts["strategy"] == strat]["verdict"].value_counts()
        lines.append(f"- **{strat}** alone: {alone['speedup_median'].median():.2f}x median over the cells "
                     f"({per_gpu:.2f}x per GPU held), mean lag {alone['mean_lag'].median():.2f}. The best SD "
                     f"setting under sync pays **more** than it in {more} cells, about as much in {same}, **less** in "
                     f"{less} of {len(ratio)} (per GPU held, more in {more_per_gpu}). With SD: "
                     + ", ".join(f"{n} {k}" for k, n in v.items()) + ".")
    return lines


def tail_lines(per_seed: pd.DataFrame) -> list[str]:
    """Tail batching per cell: the long rounds it ran, the prompt groups it deferred and the tokens it
    generated and threw away (a share of those it trained), median over seeds, with no SD."""
    if "long_rounds" not in per_seed:
        return []
    part = per_seed[per_seed["long_rounds"].notna() & (per_seed["policy"] == "no-sd")]
    part = part.assign(discarded_share=part["discarded_tokens"] / (part["tokens_per_s"] * part["total_s"]))
    med = part.groupby(KEYS, sort=False)[["long_rounds", "deferred_groups", "discarded_share"]].median()
    if med.empty:
        return []
    return ["Tail batching's rounds (no SD, median over seeds): "
            f"{med['long_rounds'].median():.0f} long round(s) of {STEPS} in every cell"
            + ("" if med["long_rounds"].nunique() == 1 else
               f" ({med['long_rounds'].min():.0f}-{med['long_rounds'].max():.0f})")
            + f", {med['deferred_groups'].median():.0f} prompt groups deferred, and the short rounds throw away "
            f"{med['discarded_share'].median():.0%} as many tokens as the run trains "
            f"({med['discarded_share'].min():.0%}-{med['discarded_share'].max():.0%} over the cells): aborted "
            "responses, regenerated in the long round or surplus. Every trained sample is on-policy (lag 0). SD "
            "runs in every round; the long round, all tail, is where it pays most (`docs/guide/strategies.md`)."]


def write_report(out: Path, seeds: int, workers: int, command: str, log=print) -> Path:
    cells = [Cell(t, m, g) for t in TRACES for m in MODELS for g in GPUS]
    t0 = time.time()
    with atomic_dir(out, kind="long-tail-strategies") as tmp:
        per_seed = run_grid(cells, seeds, workers, log)
        ranking, verdicts = tables(per_seed)
        per_seed.to_csv(tmp / "per_seed.csv", index=False)
        ranking.to_csv(tmp / "ranking.csv", index=False)
        verdicts.to_csv(tmp / "verdicts.csv", index=False)
        save_figure(figure(ranking), tmp / "speedups")
        text = ["# Long-tail strategies composed with SD", "",
                f"Reproduce: `{command}` (seeds {seeds}; {time.time() - t0:.0f} s wall, "
                f"{per_seed.groupby([*KEYS, 'seed'])['cpu_s'].first().sum():.0f} s simulation CPU).", "",
                provenance_line(), "",
                f"Simulated, not measured: each cell is {STEPS} RL steps of {GROUPS} prompt groups x 8 on {CLUSTER} "
                "GPUs (TP 4 for 7B, 8 for 32B; a one-step-off or async trainer pool adds as many GPUs again, so "
                "`per GPU` divides by the GPUs held), the scenario defaults otherwise (the measured cost model where "
                "the GPU has profiles — H100 — and the roofline for H20; the paper's acceptance). Speedups are over "
                "the synchronous step without SD at the same seed, median (min–max) over seeds; lag is in policy "
                "versions behind, of the trained samples. Strategies and their rules: `docs/guide/strategies.md`; "
                "the verdicts: `docs/guide/advise.md` (add: the combination is the product of each alone within 2%; "
                "reinforce: more; partly compete: less, but more than each alone; compete: no more than the better "
                "alone).", "",
                "## Headline", "", *headline(ranking, verdicts), "",
                "What the speedups leave out: over-provisioning trains the first groups to finish, so its batches "
                "under-represent long responses (the dropped or carried groups are the slowest to finish), a bias "
                "the trained model pays for and the simulator does not price; tail batching trains every prompt "
                "eventually but each on its shortest responses of the 1.25x it launched, and regenerates its "
                "deferred prompts from scratch; "
                "one-step-off and async train on samples up to one version stale (the lag column) and hold a "
                "trainer pool of their own (the per-GPU column). The verdicts compare speedups only.", "",
                "Few steps make asynchrony's first and last steps edge effects (the first rollout has nothing to "
                "overlap, the last training nothing to hide); a longer run gives it more.", "",
                *(line for t in tail_lines(per_seed) for line in (t, "")),
                "![speedups](speedups.png)", "",
                "## Every cell", ""]
        for key, part in ranking.groupby(KEYS, sort=False):
            text += [f"### {' '.join(map(str, key))}", "",
                     markdown_table(pd.DataFrame({
                         "rank": part["rank"], "strategy": part["strategy"], "SD": part["policy"],
                         "speedup": [_x(a, b, c) for a, b, c in zip(part["speedup_median"], part["speedup_min"],
                                                                     part["speedup_max"], strict=True)],
                         "per GPU": [f"{x:.2f}x" for x in part["speedup_per_gpu"]],
                         "s per step": [f"{x:.1f}" for x in part["step_s_median"]],
                         "mean lag": [f"{x:.2f}" for x in part["mean_lag"]], "GPUs": part["gpus"]})), ""]
            v = verdicts[(verdicts[KEYS] == pd.Series(dict(zip(KEYS, key, strict=True)))).all(axis=1)]
            text += [f"- {r.strategy} + {r.policy}: {r.verdict} ({r.together:.2f}x vs product {r.product:.2f}x)"
                     for r in v.itertuples()] + [""]
        (tmp / "README.md").write_text("\n".join(text))
    log(f"[strategies] {len(cells)} cells x {seeds} seeds in {time.time() - t0:.0f} s wall")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("reports/long-tail-strategies"))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    cmd = f"python -m analysis.long_tail_strategies --out {args.out} --seeds {args.seeds} --workers {args.workers}"
    write_report(args.out, args.seeds, args.workers, cmd)


if __name__ == "__main__":
    main()

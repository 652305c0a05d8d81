"""Is cost-aware slower than no SD, or than TLT's elastic+BEG-MAB, on the native engine? An A/B on this CPU.

The validation scenario's steps are replayed as ``tlt validate`` replays them (traced lengths scaled and
forced, a pinned drafter, outputs checked equal to the plain run's) under no SD, elastic+BEG-MAB and
cost-aware, **interleaved**: every repeat runs each policy once per step, timed on the engine thread's CPU
clock, in the order of a Williams design (:func:`~tltreal.validation.replay.balanced_order`): over every ten
repeats each policy runs in each position twice and right after each other policy twice. A rotated order
(before) kept every policy behind the same one, so what ran just before was part of the comparison: two
plain runs back to back read the second 0.5% faster in a 200-repeat run, and cost-aware always ran right
after elastic+BEG-MAB's speculative run. ``tlt validate`` runs cost-aware in a phase of its own
after each round's profile (it needs that table), so its comparison with no SD also compares two moments of
a shared machine; here the policies share the machine's conditions, and each repeat gives one paired ratio.

cost-aware is priced by a cost table profiled on this machine (``--table``: by default the median table
``tlt validate`` last wrote, for the same default model). Two checks ride along: ``no-sd (SD harness)`` is
no SD on the speculative harness (the drafter loaded, never used), so a difference between the harnesses
would show; and cost-aware's own ``decide``/``observe`` time is measured inside the engine (its decisions
are the only work it adds where it never speculates).

**A harness where SD pays** (issue 44, item 4). On the validation model (4 layers, hidden 256) an SD
iteration costs about what the tokens it emits cost in plain decoding at every batch size (batch 1: a
4-token chain 6.8 ms for ~4.0 tokens against 1.7 ms per plain token), so cost-aware rightly never
speculated and the A/B measured its decision overhead only. ``--model`` takes a deeper target
(``reports/cost-aware-cpu-harness/config.json``: 12 layers, same width): a plain decode costs three times as much
while the drafter stays one layer, so a chain pays at small batch sizes and cost-aware's decisions are
exercised (``SD iterations`` counts the speculative iterations each policy ran). ``--cost-aware`` gives
its spec, e.g. ``cost-aware:arms=2_1_2,4_1_4,6_1_6`` to price only the shapes a small table profiled.

    OMP_NUM_THREADS=1 python benchmarks/cost_aware_cpu.py --out reports/cost-aware-cpu
    python benchmarks/cost_aware_cpu.py --repeats 2 --out /tmp/ab  # quick look
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from options import run

os.environ.setdefault("OMP_NUM_THREADS", "1")

NO_SD, NO_SD_AGAIN, NO_SD_HARNESS = "no-sd", "no-sd again (A/A)", "no-sd (SD harness)"
ELASTIC, COST_AWARE = "elastic:16:3+beg-mab", "cost-aware"

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@dataclass
class TimedPolicy:
    """Wraps a policy and adds up the engine thread's CPU time spent in its ``decide`` and ``observe``."""

    inner: object
    seconds: float = 0.0

    @property
    def name(self) -> str:
        return self.inner.name

    def decide(self, view):
        t = time.thread_time()
        try:
            return self.inner.decide(view)
        finally:
            self.seconds += time.thread_time() - t

    def observe(self, outcome) -> None:
        t = time.thread_time()
        self.inner.observe(outcome)
        self.seconds += time.thread_time() - t

    def reset(self, step: int) -> None:
        self.inner.reset(step)


def _load(avg: tuple[float, float, float]) -> str:
    return "/".join(f"{x:.2f}" for x in avg)


def median_ci(ratios, *, level: float = 0.95, resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap interval of the median paired ratio (seeded: the same runs give the same
    interval). The verdict "slower" needs the whole interval above zero: a median above zero inside an
    interval that reaches below it is what noise alone gives a policy that costs nothing."""
    import numpy as np

    x = np.asarray(ratios, dtype=float)
    if x.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    medians = np.median(x[rng.integers(0, x.size, size=(resamples, x.size))], axis=1)
    tail = 100 * (1 - level) / 2
    return float(np.percentile(medians, tail)), float(np.percentile(medians, 100 - tail))


@app.command(help=__doc__)
def main(
    out: Annotated[Path, typer.Option(help="Results folder (written atomically; one tlt did not write is refused).")],
    scenario: Annotated[str, typer.Option(help="Validation scenario (bundled name or TOML).")] = "validation_dapo_cpu",
    table: Annotated[Path, typer.Option(help="Cost table that prices cost-aware (a tlt validate profile).")]
    = Path("reports/validation/cpu/cost_table.parquet"),
    repeats: Annotated[int, typer.Option(help="Runs of each (step, policy), interleaved.")] = 5,
    max_batch: Annotated[int, typer.Option(help="Running requests of the native engine.")] = 32,
    length_scale: Annotated[float, typer.Option(help="Traced lengths are multiplied by this.")] = 0.03125,
    model: Annotated[Path | None, typer.Option(help="config.json of the target (default: the validation model); "
                                               "the table must be profiled for the same shape.")] = None,
    cost_aware: Annotated[str, typer.Option("--cost-aware", help="cost-aware's policy spec (its arms must be "
                                            "priced by the table).")] = COST_AWARE,
) -> None:
    import numpy as np
    import pandas as pd
    import torch

    from analysis.markdown import markdown_table
    from analysis.provenance import provenance_line
    from tltcli.validate import RealBackend, target_config, validation_scenario
    from tltcore.atomic import atomic_dir, check_output_dir
    from tltcore.cost import TableCostModel, shape_fingerprint
    from tltcore.errors import InputError
    from tltcore.policy.base import NoSD
    from tltcore.policy.registry import make_policy
    from tltreal.model.weights import random_model
    from tltreal.validation.replay import (
        balanced_order,
        reference_run,
        replay_drafter,
        replay_requests,
        speculative_run,
        with_extra_tokens,
    )
    from tltreal.validation.validate import PINNED_DEPTH, PINNED_TOPK, NativeSettings, scaled, shape_of
    from tltsim.scenario import acceptance_model, load_steps

    if repeats < 1:
        raise InputError(f"must be >= 1, got {repeats}", field="--repeats")
    if not cost_aware.startswith(COST_AWARE):
        raise InputError(f"must be a cost-aware spec, got {cost_aware!r}", field="--cost-aware")
    policies = (NO_SD, NO_SD_AGAIN, NO_SD_HARNESS, ELASTIC, cost_aware)
    check_output_dir(out, kind="benchmark", inputs=[table, *([model] if model else [])])
    s = validation_scenario(scenario, RealBackend.native)
    settings = NativeSettings(model=target_config(model), length_scale=length_scale, max_batch=max_batch, seed=s.seed,
                              grid_repeats=1, real_repeats=repeats, device="cpu", clock="thread")
    cost = TableCostModel.from_file(table)
    want = shape_fingerprint(shape_of(settings.model))
    if cost.metadata.get("model") not in (None, want):
        raise InputError(f"the table was profiled for model {cost.metadata.get('model')!r}, not this benchmark's "
                         f"{want!r}", path=table, field="model")
    accept = acceptance_model(s.acceptance)
    probs = accept.position_probs(PINNED_DEPTH, PINNED_TOPK)
    torch.manual_seed(s.seed)
    target = random_model(settings.model, seed=s.seed, dtype=torch.float32)
    drafter = replay_drafter(target, s.seed)  # built once, as tlt validate does (see replay_drafter)
    rows, loads = [], [os.getloadavg()]
    for workload in (scaled(w, length_scale) for w in load_steps(s.trace)):
        req = replay_requests(workload, vocab_size=settings.model.vocab_size, seed=s.seed, deal_mode=s.trace.deal)
        reference_run(target, req, max_batch=max_batch)  # warm-up: the first run is slower, untimed
        truth = reference_run(target, with_extra_tokens(req, PINNED_DEPTH), max_batch=max_batch)
        for r in range(repeats):
            for name in balanced_order(policies, r):
                t0 = time.perf_counter()
                if name in (NO_SD, NO_SD_AGAIN):
                    res, decided = reference_run(target, req, max_batch=max_batch, clock="thread"), float("nan")
                else:
                    inner = NoSD() if name == NO_SD_HARNESS else make_policy(
                        name, seed=s.seed, accept_model=accept, cost_model=cost, switch="catch_up")
                    policy = TimedPolicy(inner)
                    res = speculative_run(target, req, truth, policy, position_probs=probs, max_batch=max_batch,
                                          seed=s.seed, clock="thread", drafter=drafter)
                    decided = policy.seconds
                decode = res.events[res.events["kind"] == "decode"]
                rows.append({"step": req.step, "policy": name, "repeat": r, "seconds": res.wall_s,
                             "wall_s": time.perf_counter() - t0, "policy_s": decided,
                             "sd_iterations": int((decode["sd_config"] != "off").sum())})
    loads.append(os.getloadavg())
    runs = pd.DataFrame(rows)
    base = runs[runs["policy"] == NO_SD].set_index(["step", "repeat"])["seconds"]
    keys = list(zip(runs["step"], runs["repeat"], strict=True))
    runs["vs_no_sd"] = runs["seconds"].to_numpy() / base.loc[keys].to_numpy() - 1.0
    harness = runs[runs["policy"] == NO_SD_HARNESS].set_index(["step", "repeat"])["seconds"]
    runs["vs_harness"] = runs["seconds"].to_numpy() / harness.loc[keys].to_numpy() - 1.0
    summary = []
    for (step, name), g in runs.groupby(["step", "policy"], sort=False):
        summary.append({"step": step, "policy": name,
                        "seconds": f"{g['seconds'].median():.3f} ({g['seconds'].min():.3f}-{g['seconds'].max():.3f})",
                        "vs no-SD, paired": "" if name == NO_SD else
                        f"{100 * g['vs_no_sd'].median():+.1f}% ({100 * g['vs_no_sd'].min():+.1f} to "
                        f"{100 * g['vs_no_sd'].max():+.1f})",
                        "95% CI of that median": "" if name == NO_SD else
                        "{:+.1f} to {:+.1f}%".format(*(100 * v for v in median_ci(g["vs_no_sd"]))),
                        "slower in": "" if name == NO_SD else f"{int((g['vs_no_sd'] > 0).sum())} of {len(g)}",
                        "vs the SD harness, paired (95% CI)": "" if name in (NO_SD, NO_SD_HARNESS) else
                        "{:+.1f}% ({:+.1f} to {:+.1f}%)".format(100 * g["vs_harness"].median(),
                                                               *(100 * v for v in median_ci(g["vs_harness"]))),
                        "decide+observe (s)": "" if np.isnan(g["policy_s"]).all() else f"{g['policy_s'].median():.4f}",
                        "SD iterations": int(g["sd_iterations"].median()),
                        "runs with SD": f"{int((g['sd_iterations'] > 0).sum())} of {len(g)}"})
    table_md = markdown_table(pd.DataFrame(summary))
    shape = settings.model
    ran_sd = runs[runs["policy"] == cost_aware]["sd_iterations"]
    command = "python benchmarks/cost_aware_cpu.py " + " ".join(sys.argv[1:])
    text = (f"# cost-aware vs no SD vs elastic+BEG-MAB on the native engine, interleaved\n\n"
            f"Reproduce: `OMP_NUM_THREADS=1 {command}`\n\n{provenance_line()}; torch {torch.__version__}, "
            f"1 torch thread. Load average (1/5/15 min) at start {_load(loads[0])}, at end {_load(loads[1])}.\n\n"
            f"Target: {'`' + str(model) + '`' if model else 'the validation model'} ({shape.num_hidden_layers} "
            f"layers, hidden {shape.hidden_size}, intermediate {shape.intermediate_size}, vocabulary "
            f"{shape.vocab_size}, random fp32 weights); cost-aware as `{cost_aware}`: it ran "
            f"{int(ran_sd.sum())} SD iterations in all over its {len(ran_sd)} runs (median per step in the table's "
            f"`SD iterations`).\n\n"
            f"Scenario `{scenario}` (lengths x{length_scale}, max batch {max_batch}), {repeats} repeats per (step, "
            f"policy), policies interleaved in a carry-over-balanced order (a Williams design: over every ten "
            f"repeats each policy runs in each position twice and right after each other policy twice); seconds are "
            f"the engine thread's CPU time of the whole step (median, min-max); `vs no-SD, paired` is each repeat's "
            f"ratio to the no-SD run of "
            f"the same repeat (median, min to max), with a percentile-bootstrap 95% interval of that median (10,000 "
            f"resamples, seed 0) and the repeats in which the policy was slower than no SD. cost-aware priced by "
            f"`{table}`.\n\n{table_md}\n\n"
            "How to read it (see the docstring of `benchmarks/cost_aware_cpu.py`): `no-sd again (A/A)` is the plain "
            "engine run twice per repeat, so its row is what this A/B shows when nothing differs (its noise floor); "
            "`no-sd (SD harness)` is no SD with the drafter loaded and never used (the two harnesses should time "
            "alike); `decide+observe` is the CPU "
            "time the policy itself took inside the engine per step; `SD iterations` the speculative iterations it "
            "ran (median per run) and `runs with SD` in how many runs it ran any; `vs the SD harness` pairs each "
            "run with the same repeat's no-SD run on the speculative harness: "
            "what the policy adds to an engine that can speculate, the harness's own cost taken out.\n")
    print(table_md)
    with atomic_dir(out, kind="benchmark", inputs=[table, *([model] if model else [])]) as tmp:
        runs.to_csv(tmp / "runs.csv", index=False)
        (tmp / "README.md").write_text(text)
    print(f"wrote {out}/README.md")


if __name__ == "__main__":
    run(app)

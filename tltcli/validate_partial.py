"""``tlt validate --strategy overprovision:eta=E,mode=resume``: the strategy's check (the command's other half).

The native engine's partial rollout against the simulator's, in rounds (:mod:`tltreal.validation.partial`),
and its report: ``partial_rollout.csv`` (every round's rows), ``partial_rollout_spread.csv`` (per step
over the rounds), ``load.csv``, ``stopping.csv``, the median cost table and a README.
"""

from __future__ import annotations

import platform
from pathlib import Path

import pandas as pd

from tltcore.errors import InputError, warn

#: The strategies ``tlt validate --strategy`` can run for real.
VALIDATED = "overprovision:eta=E,mode=resume"


def strategy_eta(text: str) -> float:
    """``--strategy`` parsed; only ``overprovision`` with ``mode=resume`` runs for real (one line otherwise)."""
    from tltsim.strategy.spec import Overprovision, parse_strategy

    spec = parse_strategy(text)
    if not (isinstance(spec, Overprovision) and spec.mode == "resume"):
        raise InputError(f"'{spec.label}' has no real run; tlt validate runs {VALIDATED} (partial rollout) only",
                         field="--strategy")
    if spec.eta == 0:
        raise InputError("eta=0 carries nothing (it is sync): give eta > 0, e.g. overprovision:eta=0.25,mode=resume",
                         field="--strategy")
    return spec.eta


def run_partial(scenario, text: str, settings, *, out: Path, force: bool, command: str, progress) -> str:
    """Run the check, write the report, return the exit message."""
    from tltreal.validation.partial import validate_partial
    from tltsim.scenario import load_steps, policies_with_baseline
    from tltsim.strategy.replay import fresh_groups, simulate_resume

    eta = strategy_eta(text)
    others = [p.name for p in policies_with_baseline(scenario.policies) if p.name != "no-sd"]
    if others:
        warn(f"--strategy: partial rollout is validated without SD; the scenario's policies {', '.join(others)} "
             "are not run")
    workloads = load_steps(scenario.trace)
    if len(workloads) < 2:
        raise InputError(f"partial rollout needs 2 or more trace steps to carry anything, the scenario has "
                         f"{len(workloads)}", field="trace.num_steps")
    result = validate_partial(workloads, eta, settings, launch=fresh_groups, simulate=simulate_resume,
                              deal_mode=scenario.trace.deal, command=command, progress=progress)
    progress.phase("writing the report")
    write_partial_report(out, result, scenario, settings, command=command, force=force)
    return summary_message(result)


def _pct(v: float) -> str:
    return f"{v:.1%}"


def summary_message(result) -> str:
    """The exit message: the headline beside the machine's noise (no claim below it), the counts."""
    from tltreal.validation.rounds import claim

    err, lo, hi = result.headline()
    noise = result.noise
    shown = claim(err, noise) if len(result.rows["repeat"].unique()) > 1 else None
    lines = [f"machine noise (identical trajectories, median |run / median - 1| over rounds): {_pct(noise)}",
             "partial rollout, median makespan error (calibrated): "
             + (shown if shown is not None else f"NOT CLAIMED: {_pct(err)} is below this machine's noise")
             + f" (each round alone {_pct(lo)} to {_pct(hi)})",
             f"counts (requests, prefill, trained, carried, lags) match in "
             f"{int(result.rows['counts_match'].sum())} of {len(result.rows)} (round, step) rows"]
    return "\n".join(lines)


def write_partial_report(out: Path, result, scenario, settings, *, command: str, force: bool) -> None:
    """``out``/README.md and the CSV tables (and the median cost table), written atomically."""
    import torch

    from analysis.markdown import markdown_table
    from analysis.provenance import host_cpu
    from tltcore.atomic import atomic_dir, write_text
    from tltcore.cost import write_table
    from tltreal.validation.rounds import claim

    rows, spread = result.rows, result.spread()
    err, lo, hi = result.headline()
    a_err, a_lo, a_hi = result.headline("analytic")
    stop = result.stopping.iloc[-1] if len(result.stopping) else None
    noise = result.noise
    rounds = int(rows["repeat"].nunique())
    shown = claim(err, noise) if rounds > 1 else None
    first = rows[rows["repeat"] == 0]
    t = scenario.trace
    n = t.prompts_per_step
    per_step = spread.assign(
        real_s=[f"{r.real_s:.3f} ({r.real_min_s:.3f} to {r.real_max_s:.3f})" for r in spread.itertuples()],
        noise=[_pct(v) for v in spread["noise"]],
        calibrated_s=[f"{v:.3f}" for v in spread["calibrated_s"]],
        calibrated_err=[f"{_pct(r.calibrated_err)} ({_pct(r.calibrated_err_min)} to {_pct(r.calibrated_err_max)})"
                        for r in spread.itertuples()],
        analytic_err=[_pct(v) for v in spread["analytic_err"]])[
        ["step", "rounds", "real_s", "noise", "calibrated_s", "calibrated_err", "analytic_err", "counts_match"]]

    def pair(column: str) -> list[str]:
        return [f"{a} / {b}" for a, b in zip(first[f"real_{column}"], first[f"sim_{column}"], strict=True)]

    counts = pd.DataFrame({"step": first["step"], "version": first["version"], "requests real / sim": pair("requests"),
                           "prefill tokens real / sim": pair("prefill_tokens"),
                           "trained samples real / sim": pair("trained_samples"),
                           "trained tokens real / sim": pair("trained_tokens"),
                           "carried samples real / sim": pair("carried_samples"),
                           "trained tokens by lag real / sim": pair("lag_tokens")})
    parts = pd.DataFrame({"step": spread["step"],
                          "prefill real / sim (s)": [f"{a:.3f} / {b:.3f} ({_pct(b / a - 1) if a > 0 else '–'})"
                                                     for a, b in zip(spread["real_prefill_s"],
                                                                     spread["calibrated_prefill_s"], strict=True)],
                          "decode real / sim (s)": [f"{a:.3f} / {b:.3f} ({_pct(b / a - 1) if a > 0 else '–'})"
                                                    for a, b in zip(spread["real_decode_s"],
                                                                    spread["calibrated_decode_s"], strict=True)]})
    load = result.load
    load_text = markdown_table(load.assign(round=[("–" if pd.isna(r) else int(r) + 1) for r in load["round"]],
                                   **{c: [f"{v:.2f}" for v in load[c]] for c in ("load1", "load5", "load15")}))
    prefill_rule = result.meta.get("prefill_rule") or result.meta.get("context_rule", "sum")
    clock = ("the engine thread's CPU time (`--clock thread`; each trajectory's wall time is in `real_wall_s`)"
             if settings.clock == "thread" else "the wall clock")
    headline = (f"**{shown}**" if shown is not None else
                f"NOT CLAIMED: {_pct(err)} is below this machine's noise of {_pct(noise)}")
    mismatch = ""
    if not bool(rows["counts_match"].all()):
        mismatch = ("\nWhere the counts differ (`counts_match` false), the cause is the one known difference in what "
                    "the two halves run: a response of one token (the scaled trace has a few) ends at its prefill; "
                    "the simulator admits the next waiting requests at once, the native engine decodes its running "
                    "batch first and admits at its next iteration. The stop then falls a token later for some "
                    "requests, which a later step re-prefills and carries (`tests/real/test_partial_validation.py`: "
                    "without one-token responses every count matches).\n")
    text = f"""# Simulator validation: partial rollout on the native engine (this CPU)

Reproduce: `{command}`

Machine: {host_cpu()}, {torch.get_num_threads()} torch thread(s), device `{settings.device}`; torch
{torch.__version__}, Python {platform.python_version()}.

What runs: `overprovision:eta={result.eta:g},mode=resume` (APRIL-style partial rollout) over
{len(first)} consecutive DAPO steps of `{t.name}` ({t.source}), {n} prompt groups per step (N), lengths
x{settings.length_scale:g}, no SD. Each step launches the carried groups and fresh ones up to
ceil(N (1 + eta)), stops when N groups are complete, trains those and carries the rest, whose
requests the next step re-prefills (prompt + generated tokens as prompt) under new weights: between
steps every weight of the target is multiplied by 1 + 0.001 x a seeded normal draw, so each step is
a policy version and lags are real. The native engine (random-weight Llama, {settings.model.num_hidden_layers}
layers, hidden {settings.model.hidden_size}, max batch {settings.max_batch}) runs it for real, each
response forced to its traced length; the simulator runs the same strategy (`schedule_resume`, as
`tlt sim run --strategy` does) on the same requests, one worker scheduled as the native engine, with
the cost table measured in the same round (calibrated) or this machine's measured roofline
(analytic). Rounds: the K-step trajectory once and every cost-table point once per round, in one
balanced order shifting from round to round; {rounds} rounds
({stop['stop'] if stop is not None else ''}). Times are {clock}.

## Headline

- Median |rollout makespan error| over steps (each step's median over the rounds), calibrated cost:
  {headline} (each round alone {_pct(lo)} to {_pct(hi)}); analytic cost: {_pct(a_err)} (each round alone
  {_pct(a_lo)} to {_pct(a_hi)}).
- Machine noise beside it: identical trajectories vary by {_pct(noise)} (median over steps of the median
  |run / median run - 1| over the rounds); no error below it is claimed.
- Counts (requests run, tokens prefilled, samples and tokens trained, samples carried, trained tokens
  by lag) match real and simulated in {int(rows['counts_match'].sum())} of {len(rows)} (round, step) rows.

## Rollout makespan per step (seconds; error = simulated / real - 1; median over rounds, min to max)

{markdown_table(per_step)}

## Where the time goes (seconds of prefill passes and decode iterations; medians over rounds; calibrated)

{markdown_table(parts)}

How to read it: the cost table is measured at uniform lengths. Partial rollout admits a long
re-prefill (prompt + generated tokens) in the same pass as short fresh prompts; the table prices such
a pass by its prefill rule, here `{prefill_rule}` (under `padded_attention` the engine pads attention
to the longest request but runs the projections and MLP on the real tokens only, so a pass costs the
longest request's row less the per-token work of the padding it skips). Decode is priced at each iteration's
batch size and longest context, which the simulator replays as the engine ran them; but the profile
times decode on requests in consecutive KV slots, whose keys each layer reads in place, while once a
rollout's first requests finish, its running requests sit in scattered slots whose keys each layer
gathers (a copy growing with batch and context): where the simulated decode falls short of the real
one above, that is the likely cause.

## What each step ran and trained, real / simulated (round 1)

{markdown_table(counts)}
{mismatch}
## Load

Load average (1, 5, 15 min) around each round:

{load_text}

## What this does not model

No SD (the pinned drafter of the policy validation needs each response's continuation under each
step's weights); no training phases (only the rollouts are compared); response lengths are the
trace's, whatever the weights (here by construction; in a real run new weights change them); one
rollout worker.

Files: `partial_rollout.csv` (every round's rows), `partial_rollout_spread.csv`, `load.csv`,
`stopping.csv`, `cost_table.parquet` (the point-by-point median of the rounds' tables).
"""
    with atomic_dir(out, kind="validation", force=force) as tmp:
        rows.to_csv(tmp / "partial_rollout.csv", index=False)
        spread.to_csv(tmp / "partial_rollout_spread.csv", index=False)
        result.load.to_csv(tmp / "load.csv", index=False)
        result.stopping.to_csv(tmp / "stopping.csv", index=False)
        if result.median_table is not None:
            write_table(result.median_table, result.meta, tmp / "cost_table.parquet")
        write_text(tmp / "README.md", text)


__all__ = ["run_partial", "strategy_eta", "summary_message", "write_partial_report"]

"""``tlt sim run --strategy``: every policy of the scenario under one long-tail strategy
(:mod:`tltsim.strategy`), at one simulation seed or several.

One seed writes, on top of a plain run's files, ``strategy.csv`` (per policy and step) and ``lag.csv``
(per policy, step and lag), and ``summary.csv`` gains a ``strategy`` column. Several seeds (``--seeds
N``, the default 3) write the same tables with a leading ``seed`` column (every seed's rows: ``lag.csv``
holds each seed's lag distribution), ``events.parquet`` with a ``seed`` column, ``seeds_summary.csv``
(the rollouts per policy and step as median, min and max over the seeds, as a plain ``--seeds`` run
writes it) and ``seeds_strategy.csv`` (the whole run under the strategy per policy: seconds, tokens/s,
GPU idle, lag and dropped samples as median, min and max over the seeds).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from tltcli.progress import policy_progress
from tltcli.sim_results import ONE_SEED, Perfetto, _why_no_trace, comparison_table, write_results
from tltsim.run_warnings import WARNINGS_CSV, merge_warnings, print_warnings, warnings_frame
from tltsim.scenario import Scenario, SimInputs, policies_with_baseline, scenario_hash
from tltsim.seeds import fmt_range
from tltsim.strategy import Overprovision, StrategySpec, TailBatching

STRATEGY_CSV, LAG_CSV = "strategy.csv", "lag.csv"
SEEDS_STRATEGY_CSV = "seeds_strategy.csv"

#: The columns of the whole-run strategy table: (metric, label, format, unit).
_COLUMNS = (("total_s", "total s", ".1f", ""), ("tokens_per_s", "tok/s", ",.0f", ""),
            ("idle_fraction", "GPU idle", ".1%", ""), ("mean_lag", "mean lag", ".2f", ""),
            ("max_lag", "max lag", ".0f", ""), ("dropped_samples", "dropped", ".0f", ""))
#: Tail batching's extra columns, shown when the run has them (:data:`tltsim.strategy.run.TAIL_METRICS`).
_TAIL_COLUMNS = (("deferred_groups", "deferred", ".0f", ""), ("long_rounds", "long rounds", ".0f", ""),
                 ("discarded_tokens", "discarded", ",.0f", ""))


def _fmt(value: float, spec: str) -> str:
    return "–" if pd.isna(value) else f"{value:{spec}}"


def strategy_table(totals: pd.DataFrame, title: str) -> Table:
    """Rich table: one row per policy with the strategy's whole-run seconds, trained tokens per second,
    GPU idle share (of every GPU the strategy holds), mean and max lag and dropped samples (tail batching:
    the prompt groups deferred, long rounds and tokens discarded too); with ``<metric>_median`` columns
    (``seeds_strategy.csv``), each as median (min–max) over the seeds."""
    table = Table(title=title)
    columns = _COLUMNS + tuple(c for c in _TAIL_COLUMNS if c[0] in totals or f"{c[0]}_median" in totals)
    for col in ("policy", "strategy", *(label for _, label, _, _ in columns)):
        table.add_column(col, justify="left" if col in ("policy", "strategy") else "right",
                         no_wrap=col in ("policy", "strategy"))
    for r in totals.to_dict("records"):
        if "total_s_median" in r:
            cells = [_range(r, m, spec) for m, _, spec, _ in columns]
        else:
            cells = [_fmt(r[m], spec) for m, _, spec, _ in columns]
        table.add_row(str(r["policy"]), str(r["strategy"]), *cells)
    return table


def _range(r: dict, metric: str, spec: str) -> str:
    if spec.endswith("%"):  # fmt_range has no percent: scale and append it
        return fmt_range(100 * r[f"{metric}_median"], 100 * r[f"{metric}_min"], 100 * r[f"{metric}_max"],
                         ".1f", "%")
    return fmt_range(r[f"{metric}_median"], r[f"{metric}_min"], r[f"{metric}_max"], spec)


def run_strategy_cli(s: Scenario, inputs: SimInputs, seeds: int, console: Console, out: Path | None,
                     perfetto: Perfetto, force: bool, strategy: StrategySpec, results: Path) -> Path:
    """Every policy under ``strategy`` at ``seeds`` simulation seeds: the tables printed and the results
    folder written (module docstring); returns the folder (default under ``results``)."""
    if seeds == 1:
        return _one_seed(s, inputs, console, out, perfetto, force, strategy, results)
    return _seeds(s, inputs, seeds, console, out, perfetto, force, strategy, results)


def _one_seed(s: Scenario, inputs: SimInputs, console: Console, out: Path | None, perfetto: Perfetto,
              force: bool, strategy: StrategySpec, results: Path) -> Path:
    from tltsim.run_warnings import scenario_warnings
    from tltsim.strategy.run import compare_strategy, launched, totals_frame

    specs = policies_with_baseline(s.policies)
    responses = sum(len(w.response_tokens) for w in launched(s, strategy, inputs))
    with policy_progress(console, specs, responses) as (on_policy, on_finish):
        events, summary, steps, lags = compare_strategy(s, strategy, inputs, progress=on_finish, on_policy=on_policy)
    dest = out if out is not None else results / f"{scenario_hash(s)}-{_slug(strategy)}"
    warnings = scenario_warnings(inputs, events, summary.drop(columns="strategy"))
    wrote_trace = write_results(dest, events, summary, s, perfetto, force=force,
                                extra_csv={WARNINGS_CSV: warnings_frame(warnings), STRATEGY_CSV: steps, LAG_CSV: lags})
    n_steps = len(inputs.workloads)
    console.print(comparison_table(summary, f"Rollouts under {strategy.label}, {s.trace.name}, per step"))
    _rollout_note(console, strategy)
    console.print(strategy_table(totals_frame(steps), f"Whole run under {strategy.label} ({n_steps} RL steps, "
                                 "rollout + training + weight sync)"))
    print_warnings(console, warnings)
    console.print(ONE_SEED, highlight=False)
    if not wrote_trace:
        console.print(f"trace.json not written ({_why_no_trace(events, perfetto)}; use --perfetto on to force)")
    console.print(f"results: {dest}")
    return dest


def _seeds(s: Scenario, inputs: SimInputs, n: int, console: Console, out: Path | None, perfetto: Perfetto,
           force: bool, strategy: StrategySpec, results: Path) -> Path:
    from tltcli.sim_results import EventsParquet, SeedSink, fill_results
    from tltcli.sim_uncertainty import seed_policy_table
    from tltcore.atomic import atomic_dir
    from tltsim.seeds import POLICY_METRICS, aggregate, seed_values
    from tltsim.strategy.run import compare_strategy_seeds, launched, seeds_strategy_frame

    seeds = seed_values(s.seed, n)
    specs = policies_with_baseline(s.policies)
    labels = [f"{spec} (seed {k})" for k in seeds for spec in specs]
    responses = sum(len(w.response_tokens) for w in launched(s, strategy, inputs))
    dest = out if out is not None else results / f"{scenario_hash(s)}-{_slug(strategy)}-seeds{n}"
    with atomic_dir(dest, kind="sim-run", force=force) as tmp, EventsParquet(tmp / "events.parquet") as sink:
        seed_sink = SeedSink(inputs, seeds[0], perfetto, sink)

        def on_seed(k: int, events: pd.DataFrame, summary: pd.DataFrame) -> None:
            seed_sink(k, events, summary.drop(columns="strategy"))  # the rollouts' summary, as sim run's

        with policy_progress(console, labels, responses) as (on_each, on_finish):
            runs = compare_strategy_seeds(s, strategy, n, inputs, progress=on_finish,
                                          on_policy=lambda k, spec: on_each(f"{spec} (seed {k})"), on_seed=on_seed)
        sink.close()
        agg = aggregate(runs.summary, ["policy", "step"], POLICY_METRICS)
        whole = seeds_strategy_frame(runs.totals)
        warnings = merge_warnings(seed_sink.per_seed, [f"seed {k}" for k in seeds], "seeds")
        wrote_trace = fill_results(tmp, None, runs.summary, s, perfetto, trace_events=seed_sink.first,
                                   extra_csv={WARNINGS_CSV: warnings_frame(warnings), STRATEGY_CSV: runs.steps,
                                              LAG_CSV: runs.lags, "seeds_summary.csv": agg,
                                              SEEDS_STRATEGY_CSV: whole})
    span = f"seeds {seeds[0]}-{seeds[-1]}"
    n_steps = len(inputs.workloads)
    console.print(seed_policy_table(agg, f"Rollouts under {strategy.label}, {s.trace.name}, per step, {span}: "
                                    "median (min–max) over the seeds"))
    _rollout_note(console, strategy)
    console.print(strategy_table(whole, f"Whole run under {strategy.label} ({n_steps} RL steps, rollout + training + "
                                 f"weight sync), {span}: median (min–max) over the seeds"))
    print_warnings(console, warnings)
    console.print(f"simulation {span} (dealing, stochastic acceptance, policy seeds); trace.seed {s.trace.seed} "
                  "fixed (the same responses at every seed)", highlight=False)
    if not wrote_trace:
        console.print("trace.json not written (use --perfetto on to force; it holds the first seed)")
    console.print(f"results: {dest}")
    return dest


def _slug(strategy: StrategySpec) -> str:
    return strategy.label.replace(":", "-").replace(",", "-")


def _rollout_note(console: Console, strategy: StrategySpec) -> None:
    if isinstance(strategy, Overprovision) and strategy.mode == "drop":
        console.print("rollout rows: every launched group run to completion; the strategy stops the rollout at the "
                      "N-th finished group (strategy.csv rollout_s)", highlight=False)
    if isinstance(strategy, TailBatching):
        console.print("rollout rows: each round as run (a short round stopped at its N-th complete group, a long "
                      "round whole); strategy.csv: round, deferred_groups, queued_groups, discarded_tokens per step",
                      highlight=False)

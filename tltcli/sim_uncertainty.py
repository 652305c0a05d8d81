"""The spread of ``tlt sim`` answers: ``tlt sim run --seeds N`` (N > 1) and ``tlt sim sensitivity``.

``--seeds N`` writes, into the usual atomic results folder:

* ``summary.csv`` — every seed's rows, as a one-seed run writes them, with a leading ``seed`` column
  (per policy and step; per preset with ``--preset``); ``steps.csv`` likewise with presets;
* ``seeds_summary.csv`` — one row per (policy, step), or per preset, with ``seeds`` and, for each
  speedup, makespan, accept length and (policies) tokens/s, ``<metric>_median``, ``<metric>_min`` and
  ``<metric>_max`` over the seeds (the columns of the tables printed);
* ``seeds_totals.csv`` — with several RL steps (policies): the whole run's rollout seconds, speedup and
  accept length;
* ``bound.csv`` — policies: the upper bound (:mod:`tltsim.upper_bound`) per seed and step, the rows a
  one-seed run writes with a leading ``seed`` column (the printed line is their whole-run median);
* ``events.parquet`` — every seed's events with a ``seed`` column; ``trace.json`` the first seed's;
* ``seeds.png`` / ``seeds.pdf`` — per policy the median, min–max and each seed, speedup and makespan;
* ``warnings.csv`` — :mod:`tltsim.run_warnings` per seed, merged: each says at how many seeds it holds;
* ``robustness.csv`` — policies: the best policy re-run under each unmeasured input's range
  (:mod:`tltsim.robustness`), as ``tlt advise`` does; the printed ``how sure`` line sums it up.

``tlt sim sensitivity`` writes ``sensitivity.csv``, ``tornado.png``/``.pdf``, ``README.md`` (the
ranges and why) and ``scenario.resolved.toml``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from tltcore.atomic import atomic_dir
from tltsim.robustness import Robustness
from tltsim.run_warnings import WARNINGS_CSV, RunWarning, merge_warnings, print_warnings, warnings_frame
from tltsim.scenario import Scenario, SimInputs, scenario_toml
from tltsim.seeds import (
    SeedRuns,
    fmt_range,
    headline,
    ranking_flip,
    run_policy_seeds,
    run_preset_seeds,
    seeds_summary,
    seeds_totals,
)


def _labels(names: tuple[str, ...], seeds: list[int]) -> list[str]:
    return [f"{n} (seed {k})" for k in seeds for n in names]


#: The columns a seeds table shows after makespan and speedup when its frame has them, as the one-seed
#: tables show them: (metric, label, format).
_MORE_COLUMNS = (("mean_accept_length", "accept", ".2f"), ("tokens_per_s", "tok/s", ",.0f"))


def seed_policy_table(agg: pd.DataFrame, title: str, name: str = "policy", makespan: str = "makespan_s",
                      makespan_label: str = "makespan s") -> Table:
    """Rich table: per policy (and step) the makespan, speedup, accept length and tokens/s (those the
    frame has: the whole-run totals have no tokens/s) as median (min–max) over the seeds."""
    multi = "step" in agg and agg["step"].nunique() > 1
    more = [(m, label, spec) for m, label, spec in _MORE_COLUMNS if f"{m}_median" in agg]
    table = Table(title=title)
    table.add_column(name, no_wrap=True)
    if multi:
        table.add_column("step", justify="right", no_wrap=True)
    table.add_column(makespan_label, justify="right", no_wrap=True)
    table.add_column("speedup", justify="right", no_wrap=True)
    for _, label, _ in more:  # these wrap (the range under the median) where 120 columns are too few
        table.add_column(label, justify="right")
    for r in agg.to_dict("records"):
        cells = [str(r[name]), *([str(r["step"])] if multi else [])]
        table.add_row(*cells, fmt_range(r[f"{makespan}_median"], r[f"{makespan}_min"], r[f"{makespan}_max"]),
                      fmt_range(r["speedup_median"], r["speedup_min"], r["speedup_max"], ".3f", "x"),
                      *(fmt_range(r[f"{m}_median"], r[f"{m}_min"], r[f"{m}_max"], spec) for m, _, spec in more))
    return table


def seed_preset_table(agg: pd.DataFrame, title: str) -> Table:
    """Rich table: per preset the total and rollout seconds, accept length and both speedups, median
    (min–max)."""
    table = Table(title=title)
    for col in ("preset", "seeds", "total s", "rollout s", "accept", "rollout speedup", "speedup"):
        table.add_column(col, justify="left" if col == "preset" else "right", no_wrap=True)
    for r in agg.to_dict("records"):
        table.add_row(str(r["preset"]), str(r["seeds"]),
                      fmt_range(r["total_s_median"], r["total_s_min"], r["total_s_max"], ".1f"),
                      fmt_range(r["rollout_s_median"], r["rollout_s_min"], r["rollout_s_max"], ".1f"),
                      fmt_range(r["mean_accept_length_median"], r["mean_accept_length_min"],
                                r["mean_accept_length_max"]),
                      fmt_range(r["rollout_speedup_median"], r["rollout_speedup_min"], r["rollout_speedup_max"],
                                ".3f", "x"),
                      fmt_range(r["speedup_median"], r["speedup_min"], r["speedup_max"], ".3f", "x"))
    return table


def run_seeds(s: Scenario, inputs: SimInputs, n: int, console: Console, dest: Path, perfetto, force: bool,
              units: Callable[[SeedRuns], None] | None = None) -> None:
    """``tlt sim run --seeds N`` with N > 1: run, write the folder, print the tables and the flip line
    (``units(runs)`` prints the runs in hours and dollars, :mod:`tltcli.sim_units`)."""
    from tltcli.progress import policy_progress
    from tltcli.sim_results import EventsParquet, SeedSink
    from tltsim.rl.presets import presets_with_baseline
    from tltsim.scenario import policies_with_baseline
    from tltsim.seeds import seed_values

    seeds = seed_values(s.seed, n)
    names = presets_with_baseline(s.presets) if s.presets else policies_with_baseline(s.policies)
    labels = _labels(names, seeds)
    responses = sum(w.n_requests for w in inputs.workloads)
    # each seed's events are checked for warnings and written as the seed ends, then dropped: every
    # seed's table at once was most of a long run's memory
    with atomic_dir(dest, kind="sim-run", force=force) as tmp, EventsParquet(tmp / "events.parquet") as sink:
        on_seed = SeedSink(inputs, seeds[0], perfetto, sink)
        with policy_progress(console, labels, responses) as (on_each, on_finish):
            hook = lambda k, name: on_each(f"{name} (seed {k})")  # noqa: E731
            if s.presets:  # one preset's events at a time (SeedSink.add_run)
                runs = run_preset_seeds(s, n, inputs, progress=on_finish, on_preset=hook, keep_events=False,
                                        on_events=on_seed.add_run,
                                        on_seed=lambda k, _events, summary: on_seed.end_seed(k, summary))
            else:
                runs = run_policy_seeds(s, n, inputs, progress=on_finish, on_policy=hook, on_seed=on_seed,
                                        keep_events=False)
        sink.close()
        agg = seeds_summary(runs)
        totals = None if runs.presets or len(inputs.workloads) == 1 else seeds_totals(runs)
        bound = None if runs.presets else seed_bounds(s, inputs, names, runs)
        warnings = merge_warnings(on_seed.per_seed, [f"seed {k}" for k in seeds], "seeds")
        robust = None if runs.presets else how_sure(s, inputs, runs, console)
        wrote_trace = write_seed_results(tmp, runs, agg, totals, s, perfetto, warnings=warnings, bound=bound,
                                         robust=robust, first=on_seed.first)
    span = f"seeds {seeds[0]}-{seeds[-1]}"
    if runs.presets:
        console.print(seed_preset_table(agg, f"Whole run over {n} {span}: median (min–max) over the seeds"))
        for r in runs.summary.drop_duplicates("preset").itertuples(index=False):
            if r.status != "ok":
                console.print(f"[bold red]{r.preset}[/]: {r.note}")
    else:
        n_steps = len(inputs.workloads)
        what = (f"One RL step, {s.trace.name} step {inputs.workload.step}" if n_steps == 1
                else f"{n_steps} RL steps of {s.trace.name}, per step")
        console.print(seed_policy_table(agg, f"{what}, {span}: median (min–max) over the seeds"))
        if totals is not None:
            console.print(seed_policy_table(totals, f"Whole run ({n_steps} rollouts back to back), {span}",
                                            makespan="rollout_s", makespan_label="rollout s"))
        console.print(seed_bound_line(bound, s.acceptance.mode), highlight=False)
    frame, name, metric = headline(runs)
    flip = ranking_flip(frame, name, metric)
    kinds = "presets" if runs.presets else "policies"
    console.print(flip if flip is not None else f"ranking: every seed orders the {kinds} as the medians do",
                  highlight=False, soft_wrap=True)
    if robust is not None:
        console.print(f"how sure (best: {robust.label}): {robust.line()}", highlight=False, soft_wrap=True,
                      markup=False)
    elif runs.presets:
        console.print("how sure: tlt sim sensitivity varies the unmeasured inputs of whole RL runs", highlight=False)
    print_warnings(console, warnings)
    if units is not None:
        units(runs)
    console.print(f"simulation {span} (dealing, stochastic acceptance, policy seeds); trace.seed "
                  f"{s.trace.seed} fixed (the same responses at every seed)", highlight=False)
    if not wrote_trace:
        console.print("trace.json not written (use --perfetto on to force; it holds the first seed)")
    console.print(f"results: {dest}")


def how_sure(s: Scenario, inputs: SimInputs, runs: SeedRuns, console: Console) -> Robustness:
    """Beside the seed spread, how the best policy (by ``tlt advise``'s rule: no SD unless the best
    gains 2% outside no SD's spread) and its speedup move over the unmeasured inputs
    (:mod:`tltsim.robustness`): the best policies re-run under each input's range at the same seeds."""
    from tltsim import advise as adv
    from tltsim.robustness import assess, seed_rows

    rows = seed_rows(runs.summary, s.cluster.gpus)
    ranking = adv.rank(rows)
    rec = adv.recommend(ranking)
    candidates = [adv.Candidate(p, p, None) for p in dict.fromkeys(rows["policy"])]
    err = Console(stderr=True, highlight=False)
    count = [0]

    def run(tasks: list) -> pd.DataFrame:
        def each(task: object) -> None:
            count[0] += 1
            if console.is_terminal:
                err.print(f"  unmeasured inputs: simulated run {count[0]}", markup=False)
        return adv.run_tasks(tasks, on_done=each)

    return assess(s, ranking, candidates, runs.seeds, [s.engine.switch], rec, rows, None, inputs.cost, run)


def seed_bounds(s: Scenario, inputs: SimInputs, specs: tuple[str, ...], runs: SeedRuns) -> pd.DataFrame:
    """``bound.csv`` of a ``--seeds`` run: the one-seed run's upper-bound rows
    (:func:`tltcli.sim_results.upper_bound_table`) at each seed, with a leading ``seed`` column (the dealing
    moves the bound, so each seed has its own)."""
    from tltcli.sim_results import upper_bound_table
    from tltsim.seeds import with_seed

    frames = []
    for k in runs.seeds:
        summary = runs.summary[runs.summary["seed"] == k].drop(columns="seed")
        frame = upper_bound_table(with_seed(s, inputs, k)[1], specs, summary)
        frames.append(frame.assign(seed=k)[["seed", *frame.columns]])
    return pd.concat(frames, ignore_index=True)


def seed_bound_line(bound: pd.DataFrame, mode: str) -> str:
    """The upper bound (:mod:`tltsim.upper_bound`) over the whole run at each seed (the dealing moves
    it), as the median (min–max): no policy above finishes faster at that seed."""
    from tltcli.sim_results import bound_caveat
    from tltsim.seeds import fmt_range

    totals = bound.groupby("seed", sort=False)["bound_makespan_s"].sum().to_numpy(dtype=float)
    return (f"upper bound: at each seed no policy above finishes in under "
            f"{fmt_range(float(np.median(totals)), float(totals.min()), float(totals.max()))} s"
            + bound_caveat(mode))


def write_seed_results(tmp: Path, runs: SeedRuns, agg: pd.DataFrame, totals: pd.DataFrame | None, s: Scenario,
                       perfetto, *, warnings: Sequence[RunWarning] | None = None,
                       bound: pd.DataFrame | None = None, robust: Robustness | None = None,
                       first: pd.DataFrame | None = None) -> bool:
    """The ``--seeds`` results folder (module docstring) but ``events.parquet``, which the seeds wrote
    as they ended (:class:`~tltcli.sim_results.EventsParquet`), into the folder ``tmp`` being built;
    ``warnings`` (merged over the seeds) go to ``warnings.csv``, ``bound`` (:func:`seed_bounds`) to
    ``bound.csv``, ``first`` (the first seed's events, None when trace.json is not written) to trace.json."""
    from analysis.uncertainty_plots import seed_spread_figure
    from tltcli.sim_results import BOUND_CSV, fill_results

    frame, name, _ = headline(runs)
    if runs.presets:
        panels = [("speedup", "end-to-end speedup over verl (x)"), ("total_s", "whole-run time (s)")]
    else:
        panels = [("speedup", "rollout speedup over no-sd (x)"), ("rollout_s", "rollout makespan, whole run (s)")]
    extra = {"seeds_summary.csv": agg, **({"seeds_totals.csv": totals} if totals is not None else {}),
             **({WARNINGS_CSV: warnings_frame(warnings)} if warnings is not None else {}),
             **({BOUND_CSV: bound} if bound is not None else {}),
             **({"robustness.csv": robust.table()} if robust is not None else {})}
    steps = runs.steps if runs.steps is not None and not runs.steps.empty else None
    return fill_results(tmp, None, runs.summary, s, perfetto, steps=steps, trace_events=first, extra_csv=extra,
                        also=lambda folder: seed_spread_figure(frame, name, panels, folder / "seeds"))


def _answer_cell(r: dict, side: str, notes: bool = False) -> str:
    """``1.420x (1.310–1.550)`` at one side of a sensitivity row (with its note, or why it did not run)."""
    note = str(r[f"note_{side}"])
    if not np.isfinite(r[f"answer_{side}"]):
        return note if notes and note else "not run"
    text = fmt_range(r[f"answer_{side}"], r[f"answer_{side}_min"], r[f"answer_{side}_max"], ".3f", "x")
    return f"{text} ({note})" if notes and note else text


def sensitivity_readme(s: Scenario, table: pd.DataFrame, facts: dict[str, object], command: str,
                       machine: tuple[str, ...] = ()) -> str:
    """The results folder's README: what the answer is, the ranking, each range and why; ``machine``:
    the cost-model and GPU lines (:func:`~tltsim.scenario.build.describe_gpu`) of the scenario as given."""
    from tltcore import __version__

    lines = [
        "# Sensitivity of the answer to the inputs nobody measured", "",
        f"Written by `{command}` (tlt {__version__}).", "",
        *([f"{'; '.join(machine)}.", ""] if machine else []),
        f"**The answer**: {facts['best']}'s {facts['metric']}, the best at the scenario as given: "
        f"{fmt_range(facts['answer'], facts['answer_min'], facts['answer_max'], '.3f', 'x')} "
        f"(median, min–max over {facts['seeds']} simulation seed(s) from {facts['first_seed']}; trace.seed "
        f"{s.trace.seed} fixed).", "",
        "Each input is set to its low and then its high value, one at a time, the rest as given; inputs are "
        "ranked by their swing (largest minus smallest median answer over low, as given, high). A side equal "
        "to the scenario's value is marked *as given*; a side the scenario cannot take says why.", "",
        "| rank | input | field | low / as given / high | answer at low | answer at high | swing | rule | why |",
        "|---:|---|---|---|---:|---:|---:|---|---|",
    ]
    for r in table.to_dict("records"):
        swing = f"{r['swing']:.3f}" if np.isfinite(r["swing"]) else "–"
        lines.append(f"| {r['rank']} | {r['factor']} | `{r['field']}` | {r['low_value']} / {r['base_value']} / "
                     f"{r['high_value']} | {_answer_cell(r, 'low', True)} | {_answer_cell(r, 'high', True)} | "
                     f"{swing} | {r['rule']} | {r['why']} |")
    lines += ["", "Files: `sensitivity.csv` (the table, with the min–max over seeds at each end), "
              "`tornado.png`/`tornado.pdf`, `scenario.resolved.toml` (the scenario as given).", ""]
    return "\n".join(lines)


def run_sensitivity(s: Scenario, n_seeds: int, console: Console, dest: Path, force: bool, command: str) -> None:
    """``tlt sim sensitivity``: run every point, write the folder, print the ranking."""
    from analysis.uncertainty_plots import tornado_figure
    from tltsim.scenario import cost_model
    from tltsim.scenario.build import describe_cost, describe_gpu
    from tltsim.sensitivity import factors_for, sensitivity

    cost = cost_model(s)
    machine = (describe_cost(cost), describe_gpu(s, cost))
    for line in machine:
        console.print(line, markup=False, highlight=False)
    points = 1 + 2 * len(factors_for(s))
    console.print(f"up to {points} points x {n_seeds} seed(s); the answer: the best "
                  f"{'preset' if s.presets else 'policy'}'s speedup over the baseline", highlight=False)
    table, facts = sensitivity(s, n_seeds, on_point=lambda p: console.print(f"simulating {p}", highlight=False))
    with atomic_dir(dest, kind="sim-sensitivity", force=force) as tmp:
        table.to_csv(tmp / "sensitivity.csv", index=False)
        tornado_figure(table, facts, tmp / "tornado")
        (tmp / "README.md").write_text(sensitivity_readme(s, table, facts, command, machine), encoding="utf-8")
        (tmp / "scenario.resolved.toml").write_text(scenario_toml(s), encoding="utf-8")
    out = Table(title=f"{facts['best']}: {facts['metric']}, as given "
                f"{fmt_range(facts['answer'], facts['answer_min'], facts['answer_max'], '.3f', 'x')}")
    for col in ("rank", "input", "low / given / high", "at low", "at high", "swing"):
        out.add_column(col, justify="left" if col in ("input", "low / given / high") else "right")
    for r in table.to_dict("records"):
        out.add_row(str(r["rank"]), r["factor"], f"{r['low_value']} / {r['base_value']} / {r['high_value']}",
                    _answer_cell(r, "low"), _answer_cell(r, "high"),
                    f"{r['swing']:.3f}" if np.isfinite(r["swing"]) else "–")
    console.print(out)
    for r in table.to_dict("records"):
        for side in ("low", "high"):
            if str(r[f"note_{side}"]).startswith("not run"):
                console.print(f"{r['factor']} {side}: {r[f'note_{side}']}", highlight=False)
    console.print(f"results: {dest}")

"""`tlt sim …`: simulate one RL step's rollout under several SD policies, and benchmark the simulator.

``tlt sim run`` works without a scenario file: the defaults (see ``tltsim.scenario``) are the AIME
trace as one step, Qwen2.5-7B on 64 H100 with TP 4, ``no-sd`` vs ``elastic+beg-mab``. Flags
override single fields; ``--set dotted.field=value`` reaches any other field. Results go to
``results/sim/<hash of the resolved scenario>/`` unless ``--out`` says otherwise, written as one
atomic folder: ``events.parquet``, ``summary.csv``, ``trace.json`` (single-step runs, or ``--perfetto on``),
``scenario.resolved.toml``, ``warnings.csv`` (:mod:`tltsim.run_warnings`: what went wrong and where, also
printed as ``warning: ...`` lines after the tables), ``bound.csv`` (the upper bound printed under the
tables, per step: :func:`tltcli.sim_results.upper_bound_table`).
With ``--preset`` (or ``presets`` in the scenario) it simulates whole RL steps of named systems
(:mod:`tltsim.rl.presets`, :mod:`tltsim.rl.run`) and adds ``steps.csv``, one row per (preset, step).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import pandas as pd
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tltcli.progress import policy_progress
from tltcli.sim_results import (
    BOUND_CSV,
    ONE_SEED,
    Perfetto,
    _fmt,
    _why_no_trace,
    comparison_table,
    upper_bound_line,
    upper_bound_table,
    write_results,
)
from tltcore.atomic import check_output_dir
from tltcore.errors import InputError, warn
from tltcore.summary import run_totals
from tltsim.run_warnings import WARNINGS_CSV, print_warnings, scenario_warnings, warnings_frame
from tltsim.scenario import (
    Scenario,
    SimInputs,
    compare_policies,
    policies_with_baseline,
    prepare,
    resolve,
    scenario_hash,
)
from tltsim.scenario.build import describe_acceptance, describe_cost, describe_gpu

if TYPE_CHECKING:
    from tltsim.strategy import StrategySpec

app = typer.Typer(help="Simulate RL rollout steps under speculative-decoding policies.", no_args_is_help=True)

DEFAULT_RESULTS = Path("results/sim")


class Mode(StrEnum):
    expected = "expected"
    stochastic = "stochastic"


#: ``--acceptance``'s help, shared by `tlt sim run` and `tlt advise`.
ACCEPTANCE_HELP = ("Acceptance mode (expected, stochastic; acceptance.mode), or a measured per-position acceptance "
                   "profile FILE (acceptance.profile): TOML/JSON 'alphas' (P(accept position i | earlier accepted)) "
                   "or 'rates' (per-position acceptance rates), a CSV with an alpha or rate column, a W&B "
                   "export (CSV/JSONL) of per-position acceptance metrics (..._pos_0, _pos_1...), or vLLM's "
                   "/metrics text (its per-position accepted-token counters); it replaces the drafter kind's "
                   "default acceptance, and --quality scales it (1 = as measured).")


MapOption = Annotated[list[str] | None, typer.Option(
    "--map", help="Read a foreign trace's column as a canonical one (trace.map, replacing the scenario's): "
    "CANONICAL=COLUMN, or hit_cap=COLUMN:VALUE[|VALUE...], repeatable; e.g. --map response_tokens=response_length "
    "--map hit_cap=finish_reason:length.")]
TokenizerOption = Annotated[Path | None, typer.Option(
    "--tokenizer", help="tokenizer.json (or its folder) counting the tokens of a rollout dump holding text only, "
    "verl's (trace.tokenizer).")]
PriceOption = Annotated[list[str] | None, typer.Option(
    help="GPU=USD_PER_GPU_HOUR, repeatable: replaces the bundled on-demand list price (cluster.usd_per_gpu_hour "
         "in a scenario).")]
UsdPerKwhOption = Annotated[float | None, typer.Option(
    help="Electricity price: adds the energy's cost (cluster.usd_per_kwh).")]


def trace_settings(mapping: list[str] | None, tokenizer: Path | None) -> list[tuple[str, object, str]]:
    """``--map`` and ``--tokenizer`` as scenario settings: ``trace.map`` (parsed here, so a bad item names
    ``--map``) and ``trace.tokenizer``; the resolved scenario and its hash then record them."""
    from tltsim.traces.mapping import parse_mapping

    return [("trace.map", parse_mapping(mapping) or None, "--map"),
            ("trace.tokenizer", _path(tokenizer), "--tokenizer")]


def acceptance_settings(value: str | None) -> list[tuple[str, object, str]]:
    """``--acceptance``: a mode name sets ``acceptance.mode``, anything else names a measured profile
    file (``acceptance.profile``; ``./expected`` for a file called so)."""
    if value is None:
        return []
    text = value.strip()
    if text in {m.value for m in Mode}:
        return [("acceptance.mode", text, "--acceptance")]
    return [("acceptance.profile", text, "--acceptance")]


class Switch(StrEnum):
    """``--switch``: every mode of :data:`~tltcore.engine_limits.SWITCH_MODES` (``in_step`` too: the
    simulator prices vLLM's drafter at every iteration, and ``tlt advise --switch`` takes all three)."""

    reprefill = "reprefill"
    catch_up = "catch_up"
    in_step = "in_step"


#: The scenario options `tlt sim run` and `tlt sim sensitivity` share (each sets its dotted field).
ScenarioOption = Annotated[Path | None, typer.Option(
    help="Scenario TOML, or a bundled scenario's name (see `tlt sim scenarios`; defaults without one).")]
TraceOption = Annotated[str | None, typer.Option(help="Trace name or path (trace.name).")]
ModelOption = Annotated[str | None, typer.Option(
    help="Model preset, catalog hub id (tlt model list) or config.json (model.name).")]
GpuOption = Annotated[str | None, typer.Option(
    help="GPU preset (cluster.gpu): H100, H200, B200, B300, GB200, MI300X, MI355X, L40, L40S, A100, Ascend910B ... "
         "(tlt's list is in docs/guide/models-gpus.md).")]
GpuSpecOption = Annotated[Path | None, typer.Option(
    "--gpu-spec", help="A GPU described by its data sheet: a TOML spec file (cluster.gpu_spec; fields in "
    "docs/guide/models-gpus.md) for a GPU without a preset; replaces --gpu.")]
GpusOption = Annotated[int | None, typer.Option(help="Total GPUs (cluster.gpus).")]
TpOption = Annotated[int | None, typer.Option(help="Tensor-parallel size per rollout worker (cluster.tp).")]


def _path(p: Path | None) -> str | None:
    """A path option as the text a scenario field holds (None: not given)."""
    return None if p is None else str(p)


def _parse_sets(items: list[str]) -> list[tuple[str, object, str]]:
    out: list[tuple[str, object, str]] = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"expected dotted.field=value, got '{item}'", path="--set")
        out.append((key.strip(), value, "--set"))
    return out


def describe_workload(s: Scenario, inputs: SimInputs) -> str:
    """One line: what is simulated, with the censored (capped) responses counted."""
    steps = inputs.workloads
    first, last = steps[0].step, steps[-1].step
    which = f"step {first}" if len(steps) == 1 else f"steps {first}-{last}"
    responses = sum(w.n_requests for w in steps)
    capped = sum(w.capped for w in steps)
    cap_note = f" ({capped:,} hit the length cap; simulated at the cap)" if capped else ""
    return (f"[bold]{s.trace.name}[/] {which}: {responses:,} responses{cap_note}, {s.n_workers} rollout workers "
            f"({s.cluster.gpus} x {s.cluster.gpu}, TP {s.cluster.tp}), {s.model.name}, acceptance "
            f"{escape(describe_acceptance(s))} ({s.acceptance.mode}), switch {s.engine.switch}, deal {s.trace.deal}")


def _prepared(scenario: Path | None, settings: list, *,
              seeds: int | None = None) -> tuple[Scenario, SimInputs, Console]:
    """The resolved scenario (errors and warnings as one line each, naming the flag or field), its
    prepared inputs and the console, with the workload described: what `run` and `sensitivity`
    start with. ``seeds`` is checked before anything is prepared."""
    resolved = resolve(scenario, settings)
    s = resolved.scenario
    if seeds is not None:
        from tltsim.seeds import check_seeds

        check_seeds(seeds, s.seed)
    try:
        inputs = prepare(s)
    except InputError as exc:
        raise resolved.locate(exc) from None
    for message in resolved.warnings:
        warn(message)
    console = Console(width=None if sys.stdout.isatty() else 120)
    console.print(describe_workload(s, inputs))
    return s, inputs, console




def run_table(totals: pd.DataFrame, title: str) -> Table:
    """Rich table of whole-run totals per policy."""
    table = Table(title=title)
    table.add_column("policy", no_wrap=True)
    for col in ("steps", "rollout s", "speedup", "GPU idle", "accept"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in totals.itertuples(index=False):
        table.add_row(str(r.policy), str(r.steps), _fmt(r.rollout_s, ".2f"), _fmt(r.speedup, ".3f") + "x",
                      _fmt(100 * r.idle_fraction, ".1f") + "%", _fmt(r.mean_accept_length, ".2f"))
    return table


@app.command()
def run(
    scenario: ScenarioOption = None,
    trace: TraceOption = None,
    step: Annotated[int | None, typer.Option(help="Trace step to simulate (trace.step).")] = None,
    model: ModelOption = None,
    gpu: GpuOption = None,
    gpu_spec: GpuSpecOption = None,
    gpus: GpusOption = None,
    tp: TpOption = None,
    policy: Annotated[list[str] | None, typer.Option(
        help="SD policy spec, repeatable (replaces the scenario's list; no-sd is always added), e.g. "
             "elastic:16+beg-mab; a field of one is --set policies.1.threshold=8. Not with --preset or a "
             "scenario's presets: each preset runs its own SD policy.")] = None,
    preset: Annotated[list[str] | None, typer.Option(
        help="Whole RL runs of a named system, repeatable: verl, tlt-base, static-drafter, tlt, tlt-no-spot, "
             "tlt-periodic, tlt-no-elastic, tlt-no-mab, speco-bubble (replaces the scenario's presets; verl is always "
             "added). Each names its own SD policy, so not with --policy.")
    ] = None,
    steps: Annotated[int | None, typer.Option(help="Consecutive RL steps to simulate (trace.num_steps).")] = None,
    strategy: Annotated[str | None, typer.Option(
        metavar="NAME[:KEY=VALUE,...]",
        help="Long-tail rollout strategy every policy runs under (default: sync, today's step): sync; "
             "one-step-off[:trainer_gpus=N] (verl's one-step-off-policy trainer: batch k+1 generates while "
             "batch k trains on a separate pool of N GPUs, default cluster.gpus); overprovision:eta=E[,mode=resume] "
             "(launch ceil(N(1+E)) prompt groups, train the first N to finish, drop the rest, or with mode=resume "
             "stop the rollout there and continue the unfinished responses next step, re-prefilled); "
             "async:staleness=K[,trainer_gpus=N] (fully asynchronous with partial rollout: a rollout pool streams "
             "groups to a trainer pool, weights sync mid-rollout, at most (K+v+1)N groups launched by version v, "
             "AReaL's rule); tail-batching[:prompt_ratio=P,response_ratio=R] (RollPacker: short rounds launch "
             "ceil(NP) groups of ceil(nR) responses and train the first N groups' first n, the aborted groups are "
             "regenerated together in a long round once N are queued; default 1.25 each). Adds strategy.csv (per "
             "policy and step: step time, tokens/s, GPU idle, lag) and "
             "lag.csv (samples and tokens per lag, in policy versions) and a strategy column to summary.csv; with "
             "--seeds N > 1 every seed's rows and seeds_strategy.csv (the whole run as median, min and max over "
             "the seeds). Not with --preset, --for-steps, --price or ""--usd-per-kwh.")] = None,
    seed: Annotated[int | None, typer.Option(
        help="Simulation seed (seed): which worker serves which prompt group, stochastic accept lengths, the "
             "policies' exploration. Which responses are simulated is trace.seed (--set trace.seed=N): it "
             "samples trace.prompts_per_step groups, trace.expand_samples siblings and parametric profiles.")
    ] = None,
    seeds: Annotated[int, typer.Option(
        help="Run the simulation seeds seed, seed+1, ..., seed+N-1 (dealing, stochastic acceptance, policy "
             "seeds; trace.seed stays, so every seed simulates the same responses) and report each speedup and "
             "makespan as median (min-max). With N > 1, summary.csv (and steps.csv) hold every seed's rows with "
             "a seed column, seeds_summary.csv one row per policy and step (per preset) with <metric>_median, "
             "_min, _max and seeds, seeds_totals.csv the whole run (several steps), bound.csv the upper bound "
             "per seed, seeds.png/.pdf the spread; "
             "a line says when the ranking flips across seeds; default folder results/sim/<hash>-seeds<N>. 1 to 1000. "
             "The default, 3, gives every answer its spread (the dealing seed alone can move a speedup by 10% and "
             "flip a ranking); --seeds 1 is one plain run without one (results/sim/<hash>).")
    ] = 3,
    acceptance: Annotated[str | None, typer.Option(help=ACCEPTANCE_HELP)] = None,
    mapping: MapOption = None,
    tokenizer: TokenizerOption = None,
    switch: Annotated[Switch | None, typer.Option(
        help="What switching SD on costs (engine.switch): reprefill (TLT: target and drafter re-prefill the live "
             "requests), catch_up (the native engine: the drafter catches up on the tokens it missed), in_step "
             "(vLLM: the drafter runs at every iteration, drafting or not, so a switch costs nothing extra).")
    ] = None,
    perfetto: Annotated[Perfetto, typer.Option(
        help="Write trace.json for ui.perfetto.dev: on, off, or auto (single-step runs only, up to ~64 MB).")
    ] = Perfetto.auto,
    for_steps: Annotated[int | None, typer.Option(
        help="RL steps to price in hours, GPU-hours, dollars and kWh per policy (default: the simulated steps).")
    ] = None,
    price: PriceOption = None,
    usd_per_kwh: UsdPerKwhOption = None,
    wandb: Annotated[str | None, typer.Option(metavar="PROJECT", help=WANDB_HELP)] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="dotted.field=value, repeatable.")] = None,
    out: Annotated[Path | None, typer.Option(help="Results folder (default results/sim/<hash>).")] = None,
    force: Annotated[bool, typer.Option(help="Write into an existing --out folder tlt did not create "
                                        "(same-named files replaced, nothing deleted).")] = False,
) -> None:
    """Simulate RL rollout steps under each policy on the same workload and compare them; with
    --preset, whole RL steps (rollout, drafter training, reward, log-probs, actor update, weight sync)
    of named systems, with the end-to-end speedup over veRL.

    Example: tlt sim run --scenario dapo_qwen32b_polytrace --policy elastic:16:5+beg-mab --steps 3

    Example: tlt sim run --preset tlt --preset static-drafter --steps 5 --set trace.prompts_per_step=64
    """
    overrides: list[tuple[str, object, str]] = [
        ("trace.name", trace, "--trace"), ("trace.step", step, "--step"), ("model.name", model, "--model"),
        ("cluster.gpu", gpu, "--gpu"), ("cluster.gpu_spec", _path(gpu_spec), "--gpu-spec"),
        ("cluster.gpus", gpus, "--gpus"), ("cluster.tp", tp, "--tp"),
        ("policies", tuple(policy) if policy else None, "--policy"), ("seed", seed, "--seed"),
        ("trace.num_steps", steps, "--steps"), ("presets", tuple(preset) if preset else None, "--preset"),
        ("engine.switch", switch.value if switch else None, "--switch"),
        *acceptance_settings(acceptance), *trace_settings(mapping, tokenizer),
    ]
    from tltsim.seeds import check_seeds

    check_seeds(seeds)
    chosen = _strategy(strategy, preset, costed=for_steps is not None or bool(price) or usd_per_kwh is not None)
    units = _units_printer(for_steps, price, usd_per_kwh)
    if wandb is not None:
        from analysis.wandb_export import require_wandb

        require_wandb()  # before the simulation: a missing package costs nothing
    if out is not None:
        # before the simulation: a bad --out (or one that would replace the scenario or trace read) fails at once
        check_output_dir(out, force, kind="sim-run", inputs=[str(p) for p in (scenario, trace) if p])
    s, inputs, console = _prepared(scenario, overrides + _parse_sets(set_ or []), seeds=seeds)
    console.print(describe_cost(inputs.cost), markup=False, highlight=False)
    console.print(describe_gpu(s, inputs.cost), markup=False, highlight=False)
    if chosen is not None:
        from tltcli.sim_strategy import run_strategy_cli

        if s.presets:
            raise InputError("strategies compose with SD policies, not with the scenario's presets; remove them "
                             "(--set presets=[])", path="--strategy")
        dest = run_strategy_cli(s, inputs, seeds, console, out, perfetto, force, chosen, DEFAULT_RESULTS)
        log_to_wandb(wandb, dest, "sim run", console)
        return
    if seeds > 1:
        from tltcli.sim_uncertainty import run_seeds

        dest = out if out is not None else DEFAULT_RESULTS / f"{scenario_hash(s)}-seeds{seeds}"
        run_seeds(s, inputs, seeds, console, dest, perfetto, force,
                  units=lambda runs: units(s, console, runs.totals if runs.totals is not None else runs.summary,
                                           runs.presets))
        log_to_wandb(wandb, dest, "sim run", console)
        return
    if s.presets:
        log_to_wandb(wandb, _run_presets(s, inputs, console, out, perfetto, force, units), "sim run", console)
        return
    specs = policies_with_baseline(s.policies)
    responses = sum(w.n_requests for w in inputs.workloads)
    with policy_progress(console, specs, responses) as (on_policy, on_finish):
        events, summary = compare_policies(s, inputs, progress=on_finish, on_policy=on_policy)
    dest = out if out is not None else DEFAULT_RESULTS / scenario_hash(s)
    bound = upper_bound_table(inputs, specs, summary)
    warnings = scenario_warnings(inputs, events, summary)
    wrote_trace = write_results(dest, events, summary, s, perfetto, force=force,
                                extra_csv={WARNINGS_CSV: warnings_frame(warnings), BOUND_CSV: bound})
    n_steps = len(inputs.workloads)
    title = (f"One RL step, {s.trace.name} step {inputs.workload.step}" if n_steps == 1
             else f"{n_steps} RL steps of {s.trace.name}, per step")
    console.print(comparison_table(summary, title))
    if n_steps > 1:
        totals = run_totals(summary, gpus=s.cluster.gpus)
        console.print(run_table(totals, f"Whole run ({n_steps} rollouts back to back)"))
    console.print(upper_bound_line(bound, s.acceptance.mode))
    print_warnings(console, warnings)
    units(s, console, run_totals(summary, gpus=s.cluster.gpus), False)
    console.print(ONE_SEED, highlight=False)
    if not wrote_trace:
        console.print(f"trace.json not written ({_why_no_trace(events, perfetto)}; use --perfetto on to force)")
    console.print(f"results: {dest}")
    log_to_wandb(wandb, dest, "sim run", console)


def _strategy(text: str | None, preset: list[str] | None, *, costed: bool) -> StrategySpec | None:
    """``--strategy`` parsed and checked before anything runs (None: not given, today's run); ``costed``:
    an option pricing the run in hours and dollars was given (not for strategies yet: one-step-off holds
    more GPUs than the cluster the price table assumes)."""
    if text is None:
        return None
    from tltsim.strategy import parse_strategy

    chosen = parse_strategy(text)
    if preset:
        raise InputError("strategies compose with SD policies (--policy), not with --preset, this round",
                         path="--strategy")
    if costed:
        raise InputError("--for-steps, --price and --usd-per-kwh do not price strategy runs yet; strategy.csv has "
                         "each step's seconds and GPUs", path="--strategy")
    return chosen


WANDB_HELP = ("Log the results folder (summary, resolved scenario, figures, README) to this W&B project; needs the "
              "optional wandb package (pip install 'tlt[wandb]'); W&B's own settings apply (WANDB_MODE=offline, "
              "WANDB_ENTITY, WANDB_DIR).")


def log_to_wandb(project: str | None, folder: Path, command: str, console: Console) -> None:
    """Log ``folder`` to W&B when ``--wandb PROJECT`` was given (:mod:`analysis.wandb_export`)."""
    if project is None:
        return
    from analysis.wandb_export import log_folder

    console.print(f"W&B: {log_folder(folder, command, project=project)}", highlight=False)


def _units_printer(for_steps: int | None, price: list[str] | None,
                   usd_per_kwh: float | None) -> Callable[[Scenario, Console, pd.DataFrame, bool], None]:
    """``print(s, console, frame, presets)``: the run in hours, GPU-hours, dollars and kWh
    (:mod:`tltcli.sim_units`); the options are checked here, before anything runs."""
    from tltcore.prices import check_steps, check_usd_per_kwh, parse_prices

    check_steps(for_steps, "--for-steps")
    prices = parse_prices(price or [])
    check_usd_per_kwh(usd_per_kwh)

    def show(s: Scenario, console: Console, frame: pd.DataFrame, presets: bool) -> None:
        from tltcli.sim_units import units_table

        table, lines = units_table(s, frame, name="preset" if presets else "policy",
                                   seconds="total_s" if presets else "rollout_s",
                                   idle=None if presets else "gpu_idle_s",
                                   for_steps=for_steps, prices=prices, usd_per_kwh=usd_per_kwh, whole_steps=presets)
        console.print(table)
        for line in lines:
            console.print(line, markup=False, highlight=False)

    return show




def _run_presets(s: Scenario, inputs: SimInputs, console: Console, out: Path | None, perfetto: Perfetto,
                 force: bool, units: Callable[[Scenario, Console, pd.DataFrame, bool], None] | None = None) -> Path:
    """Whole RL runs of the scenario's presets: per-step table, run summary, results folder (returned)."""
    from tltsim.rl.presets import presets_with_baseline
    from tltsim.rl.run import compare_presets

    names = presets_with_baseline(s.presets)
    responses = sum(w.n_requests for w in inputs.workloads)
    with policy_progress(console, names, responses) as (on_preset, on_finish):
        events, steps, summary = compare_presets(s, inputs, progress=on_finish, on_preset=on_preset)
    dest = out if out is not None else DEFAULT_RESULTS / scenario_hash(s)
    warnings = scenario_warnings(inputs, events, summary)
    wrote_trace = write_results(dest, events, summary, s, perfetto, force=force, steps=steps,
                                extra_csv={WARNINGS_CSV: warnings_frame(warnings)})
    if not steps.empty:
        console.print(preset_step_table(steps, f"{len(inputs.workloads)} RL steps of {s.trace.name}, per step"))
    console.print(preset_summary_table(summary, "Whole run: end-to-end speedup over veRL"))
    for r in summary.itertuples(index=False):
        if r.status != "ok":
            console.print(f"[bold red]{r.preset}[/]: {r.note}")
    print_warnings(console, warnings)
    if units is not None:
        units(s, console, summary, True)
    console.print(ONE_SEED, highlight=False)
    if not wrote_trace:
        console.print(f"trace.json not written ({_why_no_trace(events, perfetto)}; use --perfetto on to force)")
    console.print(f"results: {dest}")
    return dest


def preset_step_table(steps: pd.DataFrame, title: str) -> Table:
    """Rich table: one row per (preset, step) with where the step's time went (``other``: reward,
    log-probs, reference, weight sync; ``q``: the drafter's quality; ``trained``/``lost``: drafter
    samples committed / lost to preemption)."""
    table = Table(title=title)
    for col in ("preset", "step", "step s", "rollout s", "train s", "actor s", "other s", "roll %", "accept", "q",
                "trained", "lost"):
        table.add_column(col, justify="left" if col == "preset" else "right", no_wrap=True)
    for r in steps.itertuples(index=False):
        other = r.reward_s + r.old_log_prob_s + r.reference_s + r.weight_sync_s
        table.add_row(str(r.preset), str(r.step), _fmt(r.step_s, ".1f"), _fmt(r.rollout_s, ".1f"),
                      _fmt(r.drafter_train_s, ".1f"), _fmt(r.actor_update_s, ".1f"), _fmt(other, ".1f"),
                      _fmt(100 * r.rollout_share, ".0f"), _fmt(r.mean_accept_length, ".2f"),
                      _fmt(r.drafter_quality, ".3f"), str(r.trained_samples), _fmt(r.lost_samples, ".0f"))
    return table


def preset_summary_table(summary: pd.DataFrame, title: str) -> Table:
    """Rich table: one row per preset with its total time and speedups over veRL."""
    table = Table(title=title)
    for col in ("preset", "steps", "total s", "rollout %", "accept", "rollout speedup", "speedup"):
        table.add_column(col, justify="left" if col == "preset" else "right", no_wrap=True)
    for r in summary.to_dict("records"):
        if r["status"] != "ok":
            table.add_row(str(r["preset"]), "–", "out of memory" if r["status"] == "oom" else r["status"], "–", "–",
                          "–", "–")
            continue
        table.add_row(str(r["preset"]), str(r["steps"]), _fmt(r["total_s"], ".1f"),
                      _fmt(100 * r["rollout_share"], ".0f"), _fmt(r["mean_accept_length"], ".2f"),
                      _fmt(r["rollout_speedup"], ".3f") + "x", _fmt(r["speedup"], ".3f") + "x")
    return table


@app.command()
def sensitivity(
    scenario: ScenarioOption = None,
    trace: TraceOption = None,
    model: ModelOption = None,
    gpu: GpuOption = None,
    gpu_spec: GpuSpecOption = None,
    gpus: GpusOption = None,
    tp: TpOption = None,
    policy: Annotated[list[str] | None, typer.Option(help="SD policy spec, repeatable (as tlt sim run).")] = None,
    preset: Annotated[list[str] | None, typer.Option(
        help="Whole RL runs of named systems, repeatable (as tlt sim run): adds training MFU and reward time "
             "to the inputs varied.")] = None,
    steps: Annotated[int | None, typer.Option(help="Consecutive RL steps to simulate (trace.num_steps).")] = None,
    seed: Annotated[int | None, typer.Option(help="First simulation seed (seed).")] = None,
    seeds: Annotated[int, typer.Option(
        help="Simulation seeds per point (seed, seed+1, ...; trace.seed stays): the answer at each point is "
             "the median, with min-max whiskers. 1 to 1000; the default, 3, gives every point its spread.")] = 3,
    mapping: MapOption = None,
    tokenizer: TokenizerOption = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="dotted.field=value, repeatable.")] = None,
    out: Annotated[Path | None, typer.Option(
        help="Results folder (default results/sim/<hash>-sensitivity).")] = None,
    force: Annotated[bool, typer.Option(help="Write into an existing --out folder tlt did not create "
                                        "(same-named files replaced, nothing deleted).")] = False,
) -> None:
    """Vary the inputs nobody measured one at a time over a low and a high value each (prompts per
    step, rollout TP, drafter quality, length cap; with --preset also training MFU and reward time per
    sample) and rank them by their effect on the answer: the speedup of the best policy (or preset)
    over the baseline. Writes sensitivity.csv, tornado.png/.pdf and a README with the ranges and why
    (tltsim.sensitivity) into one atomic results folder.

    Example: tlt sim sensitivity --scenario aime_qwen7b_64xh100 --set trace.prompts_per_step=64 --seeds 3
    """
    from tltcli.sim_uncertainty import run_sensitivity
    from tltsim.seeds import check_seeds

    check_seeds(seeds)
    overrides: list[tuple[str, object, str]] = [
        ("trace.name", trace, "--trace"), ("model.name", model, "--model"), ("cluster.gpu", gpu, "--gpu"),
        ("cluster.gpu_spec", _path(gpu_spec), "--gpu-spec"), ("cluster.gpus", gpus, "--gpus"),
        ("cluster.tp", tp, "--tp"), ("policies", tuple(policy) if policy else None, "--policy"),
        ("seed", seed, "--seed"), ("trace.num_steps", steps, "--steps"),
        ("presets", tuple(preset) if preset else None, "--preset"), *trace_settings(mapping, tokenizer),
    ]
    if out is not None:
        check_output_dir(out, force, kind="sim-sensitivity", inputs=[str(p) for p in (scenario, trace) if p])
    s, _, console = _prepared(scenario, overrides + _parse_sets(set_ or []), seeds=seeds)
    dest = out if out is not None else DEFAULT_RESULTS / f"{scenario_hash(s)}-sensitivity"
    run_sensitivity(s, seeds, console, dest, force, "tlt " + " ".join(sys.argv[1:]))


#: Bundled scenarios named ``validation_*`` are for ``tlt validate``: it replays their trace steps and
#: policies on this machine with its own small model, so their model, cluster and engine are not used.
VALIDATION_PREFIX = "validation_"


def scenario_row(name: str, s: Scenario) -> tuple[str, ...]:
    """``(name, command, trace, model, cluster, policies)`` as ``tlt sim scenarios`` shows a bundled
    scenario: what actually runs, so a ``tlt validate`` scenario is not described by the simulator
    defaults it never uses."""
    t = s.trace
    steps = f"step {t.step or 0}" if t.num_steps == 1 else f"steps {t.step or 0}-{(t.step or 0) + t.num_steps - 1}"
    groups = f", {t.prompts_per_step} prompts per step" if t.prompts_per_step else ""
    trace = f"{t.source or t.name} ({steps}{groups})"
    policies = ", ".join(spec.name for spec in policies_with_baseline(s.policies))
    if name.startswith(VALIDATION_PREFIX):
        return (name, "tlt validate", trace, "small random model (--model; default 4 layers, hidden 256), lengths "
                "x --length-scale", "this machine's CPU, 1 engine", policies)
    return (name, "tlt sim run", trace, s.model.name, f"{s.cluster.gpus} x {s.cluster.gpu}, TP {s.cluster.tp} "
            f"({s.n_workers} rollout workers)", policies)


@app.command()
def scenarios() -> None:
    """List the example scenarios shipped with tlt (use them by name: --scenario NAME). Those named
    validation_* are for tlt validate, which runs them on this machine's CPU with a small model."""
    from tltsim.scenario import bundled_scenarios, load_scenario

    table = Table(title="Bundled scenarios (--scenario NAME)")
    for col in ("name", "for", "trace", "model", "cluster", "policies"):
        table.add_column(col, overflow="fold")
    for name, path in bundled_scenarios().items():
        table.add_row(*scenario_row(name, load_scenario(path)))
    Console(width=160).print(table)


#: The first key of a schema file ``tlt sim schema --out`` writes: what it may overwrite.
SCHEMA_COMMENT = "written by tlt sim schema: the JSON schema of a tlt scenario file (TOML)"


def scenario_schema_text() -> str:
    """The scenario's JSON schema (``Scenario.model_json_schema()``), marked as written by tlt."""
    import json

    from tltsim.scenario import Scenario

    return json.dumps({"$comment": SCHEMA_COMMENT, **Scenario.model_json_schema()}, indent=2) + "\n"


def _written_by_schema(path: Path) -> bool:
    import json

    try:
        with path.open("rb") as fh:
            data = json.loads(fh.read(1 << 20).decode("utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("$comment") == SCHEMA_COMMENT


@app.command()
def schema(
    out: Annotated[Path | None, typer.Option(help="Write the schema to this file instead of printing it; a file "
                                             "that tlt sim schema did not write is never overwritten.")] = None,
) -> None:
    """Print the JSON schema of a scenario file (every section and field, with defaults, ranges and
    choices), for editors that check TOML against a schema (e.g. Taplo, Even Better TOML)."""
    from tltcore.atomic import check_output_file, write_text

    text = scenario_schema_text()
    if out is None:
        sys.stdout.write(text)
        return
    check_output_file(out, writer="tlt sim schema", written_by=_written_by_schema)
    write_text(out, text)
    typer.echo(f"schema: {out}")


@app.command()
def bench(
    repeats: Annotated[int, typer.Option(help="Timed runs; the median is reported.")] = 3,
    case: Annotated[str, typer.Option(help="p1: one AIME step, 64 H100 TP 4, elastic+beg-mab (the reference); "
                                      "nosd: the same step without SD; rl100-sim: the simulation of 100 RL steps "
                                      "of --preset tlt (+ verl), one seed; scale: 500k responses on 4,096 H100; "
                                      "scenario:NAME: a bundled scenario as tlt sim run runs it; preset:NAME: one "
                                      "AIME step of a preset; policy:NAME: the p1 step under a policy, p1 timed "
                                      "alongside. Whole commands, as launched: cmd:\"<a tlt command>\" "
                                      "({out}: a fresh folder per run), advise-aime, advise-dapo, advise-quick, "
                                      "rl100 (the "
                                      "100-step, 3-seed --preset tlt run with warnings), sweep16.")
    ] = "p1",
    profile: Annotated[bool, typer.Option(help="Also print a cProfile of one run.")] = False,
) -> None:
    """Time the simulator on a reference case, or a whole tlt command; the last line is the median CPU and
    wall seconds."""
    from tltcli.bench_cmd import COMMAND_CASES, is_command_case, profile_command, run_command_bench
    from tltsim.bench import CASES, is_case, profile_bench, run_bench

    if repeats < 1:
        raise InputError(f"must be >= 1, got {repeats}", path="--repeats")
    if is_command_case(case):
        if profile:
            print(profile_command(case))
        c = run_command_bench(case, repeats)
        rss = "" if c.rss_reset else " (the process's peak since it started: no per-run reset on this system)"
        print(f"case={c.case} command={c.command!r} peak_rss_mb={c.peak_rss_mb:.0f}{rss}")
        print("cpus_s=" + ",".join(f"{x:.3f}" for x in c.cpus) + " walls_s=" + ",".join(f"{w:.3f}" for w in c.walls))
        print(f"cpu_s={c.cpu_s:.3f} wall_s={c.wall_s:.3f}")
        return
    if not is_case(case):
        raise InputError(f"unknown case {case!r}; one of {', '.join(CASES)}, {', '.join(COMMAND_CASES)}, "
                         "scenario:NAME, preset:NAME, policy:NAME, cmd:\"<a tlt command>\"", path="--case")
    if profile:
        print(profile_bench(case=case))
    r = run_bench(repeats, case)
    print(f"case={r.case} requests={r.requests} events={r.events} iterations={r.iterations} "
          f"makespan_s={r.makespan_s:.3f} prepare_s={r.prepare_s:.3f} peak_rss_mb={r.peak_rss_mb:.0f}")
    print("cpus_s=" + ",".join(f"{c:.3f}" for c in r.cpus) + " walls_s=" + ",".join(f"{w:.3f}" for w in r.walls))
    print(f"events_per_cpu_s={r.events_per_s:,.0f} iterations_per_cpu_s={r.iterations_per_s:,.0f}")
    if r.reference_cpu_s is not None:
        ratio = r.cpu_s / r.reference_cpu_s if r.reference_cpu_s > 0 else float("inf")
        print("reference=p1 reference_cpus_s=" + ",".join(f"{c:.3f}" for c in r.reference_cpus)
              + f" reference_cpu_s={r.reference_cpu_s:.3f} ratio={ratio:.3f}")
    print(f"cpu_s={r.cpu_s:.3f} wall_s={r.wall_s:.3f}")

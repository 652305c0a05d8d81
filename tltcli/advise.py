"""`tlt advise`: will speculative decoding pay for these RL rollouts, and with which setting?

One command: a scenario (or the usual flags) in; a small simulated sweep of SD settings (policy x
elastic threshold x draft shape x switch mode x seeds, :mod:`tltsim.advise`) on local processes or
Ray; out, in under a screen, the recommended setting with its rollout and end-to-end speedup and
spread, the runners-up, where SD does not pay and why, how the drafter is best kept fresh over RL
steps, and the warnings. The results folder (``results/advise/<hash>-seeds<N>/`` or ``--out``, the
project's one-writer rule) holds the report (:mod:`analysis.advise_report`: README, figures, tables,
the commands) and the exports (:mod:`tltsim.advise_export`): ``recommended.toml`` (a scenario that
reruns the recommendation), ``vllm_speculative_config.json`` and ``sglang_flags.txt``.
"""

from __future__ import annotations

import hashlib
import json
import math
import resource
import shlex
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pandas as pd
import typer
from rich.console import Console

from tltcli.sim import (
    ACCEPTANCE_HELP,
    WANDB_HELP,
    GpuOption,
    GpuSpecOption,
    MapOption,
    PriceOption,
    TokenizerOption,
    UsdPerKwhOption,
    log_to_wandb,
)
from tltcore.atomic import atomic_dir, check_output_dir
from tltcore.errors import InputError, warn
from tltsim.scenario import BASELINE_POLICY, resolve, scenario_hash, with_values
from tltsim.seeds import check_seeds, fmt_range, seed_values

DEFAULT_RESULTS = Path("results/advise")
#: Lines of "where SD does not pay" printed (the report has all of them).
MAX_FINDINGS = 4
#: Warning lines printed (the report has all of them).
MAX_WARNINGS = 4
#: How many times a repeatable grid option (--threshold, --shape, --policy, --switch) may be given: each
#: value multiplies the simulations, and 200 thresholds would run for most of an hour.
MAX_REPEATS = 16


def _x(t: tuple[float, float, float], spec: str = ".3f") -> str:
    return fmt_range(t[0], t[1], t[2], spec, "x")


def _t(r: dict, metric: str) -> tuple[float, float, float]:
    return (float(r[f"{metric}_median"]), float(r[f"{metric}_min"]), float(r[f"{metric}_max"]))


#: Characters of one finding or warning printed (about two terminal lines; the report has them whole).
MAX_LINE = 220


def _short(text: str) -> str:
    return text if len(text) <= MAX_LINE else text[:MAX_LINE - 1].rstrip() + "…"


def _cpu_text(cpu: float, workers: int, executor: str) -> str:
    """The CPU seconds measured, and what they leave out: worker processes of the forkserver pool and
    Ray's are not this process's children, so their CPU time is not in it."""
    if executor == "local" and workers == 1:
        return f"{cpu:.1f} s CPU"
    return f"{cpu:.1f} s CPU in this process; its {workers} {executor} workers' CPU not counted"


def _cpu_s() -> float:
    """CPU seconds of this process and its waited-for children (not the forkserver's or Ray's workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def command_line(ctx: typer.Context) -> str:
    """``tlt advise`` with every option given a non-default value, as typed on a shell: the command
    that reproduces the report (also when called from Python, where ``sys.argv`` is someone else's)."""
    parts = ["tlt", "advise"]
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if value is None or value == param.default or value == [] or value == ():
            continue
        flag = param.opts[0]
        if isinstance(value, bool):
            parts.append(flag if value else (param.secondary_opts or [f"--no-{flag[2:]}"])[0])
        else:
            for v in (value if isinstance(value, list | tuple) else [value]):
                parts += [flag, _one_line(shlex.quote(str(v)))]
    return " ".join(parts)


def _one_line(text: str) -> str:
    """``text`` with control characters (a newline in an argument) written as escapes: the command is
    pasted into a TOML comment and a README line, where a raw newline would break both."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def advise(
    ctx: typer.Context,
    scenario: Annotated[Path | None, typer.Option(
        help="Scenario TOML, or a bundled scenario's name (tlt sim scenarios); defaults without one.")] = None,
    trace: Annotated[str | None, typer.Option(help="Trace name or path, or a length profile (trace.name).")] = None,
    model: Annotated[str | None, typer.Option(
        help="Model preset, catalog hub id (tlt model list) or config.json (model.name).")] = None,
    gpu: GpuOption = None,
    gpu_spec: GpuSpecOption = None,
    gpus: Annotated[int | None, typer.Option(help="Total GPUs (cluster.gpus).")] = None,
    tp: Annotated[int | None, typer.Option(help="Tensor-parallel size per rollout worker (cluster.tp).")] = None,
    drafter: Annotated[str | None, typer.Option(
        help="Drafter kind (drafter.kind): eagle (EAGLE-1/2), eagle3, mtp (the target's MTP head), block "
             "(DFlash/DSpark), ngram, suffix (model-free) or draft-model; each priced by its own draft cost and "
             "acceptance (docs: Drafters and acceptance).")] = None,
    quality: Annotated[float | None, typer.Option(
        help="Drafter quality (drafter.quality): a scale of the kind's per-position acceptance profile. 1 = the "
             "profile as it stands: for eagle the paper's adapted Qwen2.5-32B EAGLE tree (paper-qwen32b), for "
             "eagle3/mtp/block their published profiles, for --acceptance FILE the drafter measured; < 1 staler "
             "or weaker. Model-free kinds (ngram, suffix) take none.")] = None,
    acceptance: Annotated[str | None, typer.Option(help=ACCEPTANCE_HELP)] = None,
    mapping: MapOption = None,
    tokenizer: TokenizerOption = None,
    policy: Annotated[list[str] | None, typer.Option(
        help="Policy spec to try, repeatable: replaces the default grid (no-sd is always added).")] = None,
    threshold: Annotated[list[int] | None, typer.Option(
        help="Elastic thresholds of the default grid's elastic+beg-mab, repeatable (default 16 32 64 128).")] = None,
    shape: Annotated[list[str] | None, typer.Option(
        help="Static draft shapes of the default grid, depth_topk_verify, repeatable (default: the drafter kind's, "
             "4_1_4 8_4_32 for eagle; chains for mtp and suffix, block sizes for block).")
    ] = None,
    switch: Annotated[list[str] | None, typer.Option(
        help="Switch modes for policies that switch SD on mid-rollout, repeatable: reprefill (TLT), catch_up "
             "(native engine), in_step (vLLM) (default reprefill and catch_up).")] = None,
    seed: Annotated[int | None, typer.Option(help="First simulation seed (seed).")] = None,
    seeds: Annotated[int, typer.Option(help="Simulation seeds per setting; each answer is the median (min-max).")
                     ] = 3,
    rl_steps: Annotated[int, typer.Option(
        help="RL steps of the drafter-upkeep comparison (Spot Trainer, serial training every step or every "
             "spot.retrain_every steps, frozen, model-free); "
             "0 skips it.")] = 3,
    quick: Annotated[bool, typer.Option(
        help="A small grid for a first look: one seed, the scenario's switch mode, thresholds 32, one shape (8_4_32 "
             "for eagle; the drafter kind's own), no drafter-upkeep runs.")] = False,
    workers: Annotated[int | None, typer.Option(
        help="Parallel simulations: local worker processes, or CPUs of a local Ray (default: min(cores, 4); 1: "
             "all in this process, which also reuses the grid's runs for the derived table and the exports).")]
    = None,
    executor: Annotated[str, typer.Option(help="local (processes on this machine) or ray.")] = "local",
    address: Annotated[str | None, typer.Option(help="Ray cluster address (with --executor ray).")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="dotted.field=value, repeatable.")] = None,
    steps: Annotated[int | None, typer.Option(
        help="RL steps to answer in hours, GPU-hours, dollars and kWh, with and without SD (default: the "
             "trace's steps when it has several, else trace.num_steps, else 1).")] = None,
    price: PriceOption = None,
    usd_per_kwh: UsdPerKwhOption = None,
    strategies: Annotated[list[str] | None, typer.Option(
        help="Also rank long-tail strategies composed with SD: 'all', or strategy specs (one-step-off, "
             "overprovision:eta=0.25; repeatable), each with no SD, the recommendation and TLT's setting: whole-run "
             "time, speedup, staleness (lag) and whether SD and the strategy add or compete (docs: Long-tail "
             "strategies).")] = None,
    wandb: Annotated[str | None, typer.Option(metavar="PROJECT", help=WANDB_HELP.replace("results", "report"))
    ] = None,
    out: Annotated[Path | None, typer.Option(
        help="Report folder (default results/advise/<scenario hash>-<grid hash>-seeds<N>).")] = None,
    force: Annotated[bool, typer.Option(help="Write into an existing --out folder tlt did not create "
                                        "(same-named files replaced, nothing deleted).")] = False,
) -> None:
    """Recommend a speculative-decoding setting for these RL rollouts: simulate a small grid of
    settings at several seeds, rank them by median rollout time with the spread, and export the
    winner for vLLM and SGLang.

    Example: tlt advise --scenario dapo_qwen32b_polytrace

    Example: tlt advise --trace polytrace_rl_rollouts --model Qwen2.5-7B --gpu H20 --gpus 16 --tp 2 --workers 2
    """
    from tltcli.sim import VALIDATION_PREFIX, _parse_sets, acceptance_settings, trace_settings
    from tltsim import advise as adv

    wall0, cpu0 = time.perf_counter(), _cpu_s()
    check_seeds(seeds)
    if rl_steps < 0:
        raise InputError(f"must be >= 0, got {rl_steps}", path="--rl-steps")
    if executor not in ("local", "ray"):
        raise InputError(f"must be local or ray, got '{executor}'", path="--executor")
    if workers is None:
        from tltsim.sweep.runner import default_workers

        workers = default_workers()
    if workers < 1:
        raise InputError(f"must be >= 1, got {workers}", path="--workers")
    if address and executor != "ray":
        raise InputError("applies to --executor ray only", path="--address")
    from tltcore.prices import check_steps, check_usd_per_kwh, parse_prices

    check_steps(steps, "--steps")

    from tltsim.advise_strategies import check_strategies_option

    strategy_specs = check_strategies_option(strategies)
    prices = parse_prices(price or [])
    check_usd_per_kwh(usd_per_kwh)
    if wandb is not None:
        from analysis.wandb_export import require_wandb

        require_wandb()  # before the simulations: a missing package costs nothing
    if quick:
        for param, given, value in (("seeds", seeds, 1), ("rl_steps", rl_steps, 0)):
            source = ctx.get_parameter_source(param)  # typer's click: compare the source by name
            if source is not None and source.name == "COMMANDLINE" and given != value:
                flag = "--" + param.replace("_", "-")
                raise InputError(f"is {given}, but --quick runs {value} (one seed and no drafter-upkeep runs); drop "
                                 f"--quick or {flag}", path=flag)
        seeds, rl_steps = 1, 0
    for flag, values in (("--threshold", threshold), ("--shape", shape), ("--policy", policy), ("--switch", switch)):
        if values and len(values) > MAX_REPEATS:
            raise InputError(f"is given {len(values)} times; at most {MAX_REPEATS} (each one is simulated at every "
                             "seed and switch mode)", path=flag)
    if out is not None:
        check_output_dir(out, force, kind="advise", inputs=[str(p) for p in (scenario, trace) if p])
    overrides: list[tuple[str, object, str]] = [
        ("trace.name", trace, "--trace"), ("model.name", model, "--model"), ("cluster.gpu", gpu, "--gpu"),
        ("cluster.gpu_spec", None if gpu_spec is None else str(gpu_spec), "--gpu-spec"),
        ("cluster.gpus", gpus, "--gpus"), ("cluster.tp", tp, "--tp"), ("drafter.kind", drafter, "--drafter"),
        ("drafter.quality", quality, "--quality"), ("seed", seed, "--seed"), *acceptance_settings(acceptance),
        *trace_settings(mapping, tokenizer)]
    resolved = resolve(scenario, overrides + _parse_sets(set_ or []))
    s = resolved.scenario
    check_seeds(seeds, s.seed)
    for message in resolved.warnings:
        warn(message)
    name = str(scenario) if scenario is not None else ""
    validation = Path(name).stem.startswith(VALIDATION_PREFIX) and not Path(name).exists()
    try:
        inputs = adv.inputs_for(s)
    except InputError as exc:
        raise resolved.locate(exc) from None
    switches = tuple(switch) if switch else ((s.engine.switch,) if quick else adv.DEFAULT_SWITCHES)
    for m in switches:
        if m not in ("reprefill", "catch_up", "in_step"):
            raise InputError(f"must be reprefill, catch_up or in_step, got '{m}'", path="--switch")
    thresholds = tuple(threshold) if threshold else ((32,) if quick else adv.DEFAULT_THRESHOLDS)
    shapes = tuple(shape) if shape else adv.kind_shapes(s.drafter.kind, quick)
    for t in thresholds:
        if not 1 <= t <= s.engine.max_batch:
            raise InputError(f"must be in [1, engine.max_batch = {s.engine.max_batch}], got {t}", path="--threshold")
    from tltcore.policy.base import SDConfig

    for text in shapes:
        try:
            cfg = SDConfig.parse(text)
        except InputError as exc:
            raise InputError(exc.message, path="--shape") from None
        if not cfg.enabled:
            raise InputError(f"'{text}' is no SD, which the grid always holds; give a draft shape such as 4_1_4",
                             path="--shape")
    try:
        policies = tuple(policy) if policy else adv.default_policies(thresholds, shapes)
        candidates = adv.candidate_grid(policies, switches)
    except InputError as exc:
        raise InputError(exc.message, path="--policy" if policy else "--shape") from None
    seed_list = seed_values(s.seed, seeds)
    assert seed_list[0] == s.seed  # the runs kept for reuse are the first seed's
    ctx.with_resource(adv.sharing_runs(s))  # until the command ends
    ctx.with_resource(adv.keeping_workers())  # one pool of workers for all the command's simulations
    grid_key = hashlib.sha256(json.dumps([[c.policy, c.switch] for c in candidates] + [rl_steps]).encode())
    dest = out if out is not None else DEFAULT_RESULTS / f"{scenario_hash(s)}-{grid_key.hexdigest()[:6]}-seeds{seeds}"
    console = Console(width=None if sys.stdout.isatty() else 120, highlight=False)
    from tltcli.sim import describe_workload
    from tltsim.scenario.build import describe_cost, describe_gpu

    console.print(describe_workload(s, inputs))
    console.print(describe_cost(inputs.cost), markup=False)
    console.print(describe_gpu(s, inputs.cost), markup=False)
    if validation:
        console.print(f"note: {Path(name).stem} is a `tlt validate` scenario for the real CPU engine; this advice "
                      f"is for its simulated reading ({s.model.name} on {s.cluster.gpus} x {s.cluster.gpu})",
                      markup=False)
    tasks = adv.plan_tasks(s, candidates, seed_list, switches)
    workers = min(workers, len(tasks))  # one task (--quick) runs in this process
    console.print(f"grid: {len(candidates)} settings x {seeds} seed(s), {len(tasks)} simulations of "
                  f"{len(set(switches))} switch mode(s) on {workers} worker(s) ({executor})", markup=False)
    say = _progress(wall0)
    done = [0]

    def tick(task: Any) -> None:
        done[0] += 1
        say(f"simulated {task.key} ({done[0]}/{len(tasks)})")

    def run(more: list[Any], what: str, evaluate: Any = None) -> pd.DataFrame:
        count = [0]

        def each(task: Any) -> None:
            count[0] += 1
            say(f"{what}: simulated {task.key} ({count[0]}/{len(more)})")

        return adv.run_tasks(more, evaluate, workers=workers, backend=executor, address=address, on_done=each)

    raw = adv.run_tasks(tasks, workers=workers, backend=executor, address=address, on_done=tick)
    later, later_note = adv.later_phase_seconds(inputs)
    rows = adv.with_end_to_end(adv.label_rows(raw, candidates), later)
    ranking = adv.rank(rows)
    rec = adv.recommend(ranking)
    derived = None
    max_batch = int(s.engine.max_batch)
    from tltsim.advise_export import decision_table, vllm_expressible

    if rec.is_sd and vllm_expressible(rec.policy, max_batch)[0] is None:
        # the recommendation decides per iteration: also simulate the batch-size table its decisions amount to
        say(f"deriving the per-batch-size table {rec.label}'s decisions amount to")
        derived = _derive_table(s, rec.policy, rec.switch or s.engine.switch, max_batch, decision_table)
        if derived is not None and derived not in set(ranking["policy"]):
            cand = adv.Candidate(derived, derived, None)
            extra = run(adv.plan_tasks(s, [cand], seed_list, (switches[0],)), "the derived table")
            extra = adv.label_rows(extra, [*candidates, cand])  # keeps the derived table's rows and no-sd's
            rows = adv.with_end_to_end(pd.concat([rows, extra[extra["policy"] == derived]], ignore_index=True), later)
            candidates = (*candidates, cand)
            ranking = adv.rank(rows)
            rec = adv.recommend(ranking)
    say("bounding the makespan")
    bound = _bound(s, inputs, [c.policy for c in candidates], seed_list, ranking)
    robust = None
    if not quick:
        from tltsim.robustness import assess

        robust = assess(s, ranking, candidates, seed_list, switches, rec, rows, later, inputs.cost,
                        lambda more: run(more, "unmeasured inputs"))
    units = _units(s, inputs, rec, rows, robust, later, steps, prices, usd_per_kwh)
    fresh = adv.Freshness(rl_steps)
    fresh_warnings: list[tuple[str, str]] = []
    if rl_steps:
        ftasks, why = adv.freshness_tasks(s, seed_list, rl_steps, rec)
        if ftasks:
            frows = run(ftasks, "drafter upkeep", adv.evaluate_presets)
            n_steps = len(adv.inputs_for(ftasks[0].scenario).workloads)
            labels = adv.upkeep_labels(s.spot.retrain_every, n_steps)
            table = adv.freshness_table(frows, labels)
            fresh_warnings = _warnings(frows.assign(label=[f"upkeep run {p}" for p in frows["preset"]],
                                                    policy=frows["preset"]),
                                       [f"upkeep run {p}" for p in dict.fromkeys(frows["preset"])], len(seed_list))
            fresh = adv.Freshness(n_steps, table, rollout=adv.upkeep_rollout(rec),
                                  note=adv.empty_upkeep(table, ftasks[0].scenario, n_steps))
        else:
            fresh = adv.Freshness(rl_steps, skipped=why)
    else:
        fresh = adv.Freshness(0, skipped="not run (--rl-steps 0)" if not quick else "not run (--quick)")
    grid_shapes = tuple(dict.fromkeys(shapes))
    findings = adv.not_paying(ranking, rows, gpu_fact=adv.gpu_slower_line(inputs, grid_shapes))
    labels = [rec.label, *rec.runners_up, *(str(x) for x in ranking["label"])]
    warnings = _warnings(rows, list(dict.fromkeys(labels)), len(seed_list)) + fresh_warnings
    exports = _exports(s, rec, ranking, max_batch)
    say("re-simulating the exports on every step of the workload")
    check = _check_exports(s, rec, exports, ranking, seed_list[0])
    strategy_answer = None
    if strategy_specs:
        say("long-tail strategies composed with SD")
        strategy_answer = _strategies(s, rec, seed_list, strategy_specs, workers, executor, address)
    command = command_line(ctx)
    wall, cpu = time.perf_counter() - wall0, _cpu_s() - cpu0
    facts = {"command": command, "wall_s": wall, "cpu_s": cpu, "cpu_text": _cpu_text(cpu, workers, executor),
             "seeds": seed_list, "switches": switches,
             "later_s": later, "later_note": later_note, "bound": bound, "validation": validation,
             "scenario_name": name, "quick": quick, "derived": derived, "tasks": len(tasks), "check": check,
             "robust": robust, "units": units, "strategies": strategy_answer,
             "cost": describe_cost(inputs.cost).removeprefix("cost model: "), "assumes": _assumptions(s, inputs.cost),
             "gpu": describe_gpu(s, inputs.cost)}
    _print(console, s, rec, ranking, fresh, findings, warnings, exports, facts)
    from analysis.advise_report import write_report

    with atomic_dir(dest, kind="advise", force=force) as tmp:
        write_report(tmp, s, rec, ranking, rows, fresh, findings, warnings, exports, facts)
    console.print(f"report: {dest / 'README.md'}  (exports: recommended.toml, vllm_speculative_config.json, "
                  f"sglang_flags.txt; {wall:.1f} s wall, {_cpu_text(cpu, workers, executor)})", markup=False)
    log_to_wandb(wandb, dest, "advise", console)



def _strategies(s: Any, rec: Any, seeds: list[int], specs: tuple[Any, ...], workers: int, executor: str,
                address: str | None) -> Any:
    """``--strategies``: each strategy with no SD, the recommendation and TLT's setting at the grid's seeds
    (:mod:`tltsim.advise_strategies`), or why not (one step)."""
    from tltsim import advise_strategies as st

    policies = st.strategy_policies(rec.policy if rec.is_sd else None)
    tasks, words = st.strategy_tasks(s, seeds, policies, rec.switch)
    if not tasks:
        return st.StrategyAnswer(skipped=words)
    rows = st.run_strategies(tasks, specs, workers=workers, backend=executor, address=address)
    table = st.rank_strategies(rows)
    return st.StrategyAnswer(table, rows, tuple(st.composition(table)), steps=words)


def _units(s: Any, inputs: Any, rec: Any, rows: pd.DataFrame, robust: Any, later: float | None,
           steps: int | None, prices: dict[str, float], usd_per_kwh: float | None) -> Any:
    """N RL steps in hours, GPU-hours, dollars and kWh without SD and with the recommendation (or,
    when no SD is recommended, the best SD setting), from the runs the speedup band comes from
    (:mod:`tltsim.units`); None when the grid holds no SD setting."""
    from tltcore.prices import missing_price, resolve_price
    from tltsim.scenario import scenario_gpu
    from tltsim.units import StepsAnswer, default_steps, paired_runs

    sd_label = rec.label if rec.is_sd else (rec.runners_up[0] if rec.runners_up else None)
    if sd_label is None:
        return None
    n, why = (steps, "--steps") if steps is not None else default_steps(s)
    if robust is not None and len(robust.runs):
        runs = robust.runs
    else:
        runs = rows[[c for c in ("label", "seed", "rollout_s", "gpu_idle_s") if c in rows]].assign(variant="")
    gpu = scenario_gpu(s)
    paired = paired_runs(runs, sd_label, later, len(inputs.workloads), s.cluster.gpus)
    return StepsAnswer(n, why, s.cluster.gpus, gpu.name, sd_label, rec.is_sd,
                       resolve_price(gpu.name, prices, s.cluster.usd_per_gpu_hour), missing_price(gpu.name),
                       gpu.board_power_w, usd_per_kwh if usd_per_kwh is not None else s.cluster.usd_per_kwh,
                       later is not None and math.isfinite(later), paired)


def _progress(wall0: float) -> Any:
    """``say(line)``: one progress line on stderr with the elapsed seconds, so a command that runs for
    minutes never looks stuck (stdout keeps the one-screen answer)."""
    err = Console(stderr=True, highlight=False, width=200)

    def say(line: str) -> None:
        err.print(f"advise [{time.perf_counter() - wall0:5.1f} s] {line}", markup=False, soft_wrap=True)

    return say


def _assumptions(s: Any, cost: Any) -> list[str]:
    """The unmeasured defaults the answer rests on, in words (what a user should replace with their
    own numbers): the drafter's acceptance, the GPU's efficiencies where the data-sheet roofline
    prices, the RL phases. The cost model is printed on its own line."""
    from tltcore.drafter.dynamics import DrafterConfig
    from tltcore.drafter.kinds import drafter_kind
    from tltsim.scenario import AcceptanceSection
    from tltsim.scenario.build import is_calibrated

    out = []
    d, default = s.drafter, DrafterConfig()
    spec = drafter_kind(d.kind)
    if s.acceptance.measured:
        pass  # the user's own drafter: nothing assumed about its acceptance
    elif spec.published(s.acceptance.names_preset, False):
        assert spec.profile is not None
        scale = ("" if spec.model_free else f" at drafter quality {d.quality:g} (--quality scales it;")
        out.append(f"{d.kind}'s {spec.profile.label}{scale}"
                   + (" --acceptance FILE replaces it)" if scale else " (--acceptance FILE replaces it)"))
    elif d.kind == "ngram":
        if d.ngram_alpha == default.ngram_alpha:
            out.append(f"n-gram acceptance {d.ngram_alpha:g} per position (drafter.ngram_alpha: our assumption)")
    elif s.acceptance.preset == AcceptanceSection().preset and d.quality == default.quality:
        out.append(f"the paper's Qwen2.5-32B EAGLE-tree acceptance ({s.acceptance.preset}) at drafter quality 1 "
                   "(--quality or a measured acceptance profile replaces it)")
    if not is_calibrated(cost) and s.cost.model != "table" and s.cluster.flops_efficiency is None:
        out.append(f"{s.cluster.gpu}'s data-sheet peaks at typical efficiencies (cluster.flops_efficiency, "
                   "cluster.bandwidth_efficiency)")
    rl = _rl_defaults(s)
    if rl:
        out.append(rl)
    return out


def _rl_defaults(s: Any) -> str:
    """The end-to-end answer's assumption in words: the ``rl.*`` phase settings still at tlt's
    defaults (all, some, or none)."""
    from tltsim.rl.phases import RLPhaseConfig
    from tltsim.robustness import rl_defaults

    left = rl_defaults(s)
    if not left:
        return ""
    if len(left) == len(RLPhaseConfig.model_fields):
        return "every rl.* phase setting at tlt's defaults (reward 0.01 s per sample, train MFU 0.35, ...)"
    return "tlt's defaults for " + ", ".join(left)


def _derive_table(s: Any, spec: str, switch: str, max_batch: int, decision_table: Any) -> str | None:
    """The per-batch-size chain table that the recommended policy's decisions amount to (its run at
    the first seed): the closest setting an engine with a batch-size schedule can run."""
    from tltcore.policy.registry import check_spec
    from tltsim.advise import run_policy
    from tltsim.advise_export import best_chain_depth
    from tltsim.run_warnings import typical_context

    sk = with_values(s, {"engine.switch": switch})
    inputs = adv_inputs(sk)
    events = run_policy(sk, spec, inputs)  # the grid's run at the first seed, when it ran in this process
    decode = events[events["kind"] == "decode"]
    if decode.empty:
        return None
    fill = best_chain_depth(inputs.cost, inputs.accept, typical_context(inputs.workloads), drafter=inputs.drafter)
    table = decision_table(decode, max_batch, fill)
    check_spec(table)
    return table


def adv_inputs(s: Any) -> Any:
    from tltsim.advise import inputs_for

    return inputs_for(s)


def _bound(s: Any, inputs: Any, specs: list[str], seeds: list[int], ranking: pd.DataFrame) -> dict[str, float]:
    """The upper bound (:mod:`tltsim.upper_bound`: no policy of the grid finishes faster under the
    model) per seed, as median/min/max makespan and the speedup it caps over no-sd's median."""
    from tltsim.seeds import with_seed
    from tltsim.upper_bound import scenario_bounds

    specs = [p for p in dict.fromkeys(specs)]
    totals = np.array([sum(b.makespan for b in scenario_bounds(with_seed(s, inputs, k)[1], specs)) for k in seeds])
    base = float(ranking.loc[ranking["policy"] == BASELINE_POLICY, "rollout_s_median"].iloc[0])
    med = float(np.median(totals))
    return {"median": med, "min": float(totals.min()), "max": float(totals.max()),
            "speedup": base / med if med > 0 else float("nan"), "mode": s.acceptance.mode}


def _warnings(rows: pd.DataFrame, labels: list[str], n_seeds: int) -> list[tuple[str, str]]:
    """(label, line) per run warning of the settings ``labels`` (in that order: the recommendation and
    the runners-up first, then every other setting run), once per (label, kind), with at how many
    seeds it held."""
    out: list[tuple[str, str]] = []
    for label in labels:
        part = rows[rows["label"] == label]
        seen: dict[str, tuple[str, int]] = {}
        for text in part["warnings"]:
            for kind, line in json.loads(text):
                first, n = seen.get(kind, (line, 0))
                seen[kind] = (first, n + 1)
        policy = str(part["policy"].iloc[0]) if len(part) else label
        for _kind, (line, n) in seen.items():
            line = line.removeprefix(f"{policy}: ")  # the label already names it
            out.append((label, line + (f" (at {n} of {n_seeds} seeds)" if n_seeds > 1 else "")))
    return out


def _exports(s: Any, rec: Any, ranking: pd.DataFrame, max_batch: int) -> dict[str, Any]:
    """What each engine gets: the recommendation when it can run it, else the fastest setting of the
    grid it can run (and what that costs in simulated speedup)."""
    from tltsim.advise_export import (
        SGLANG_ADAPTIVE_FILE,
        engine_support,
        sglang_command,
        sglang_expressible,
        vllm_expressible,
        vllm_speculative_config,
    )

    kind = s.drafter.kind
    rows = ranking.to_dict("records")
    chosen = next(r for r in rows if r["label"] == rec.label)
    out: dict[str, Any] = {"drafter": kind, "toml_policy": rec.policy, "toml_switch": rec.switch}
    for engine in ("vllm", "sglang"):
        name, unsupported = engine_support(kind, engine)
        if name is None:  # the engine cannot run this drafter kind at all: no export, and why
            out[engine] = {"policy": BASELINE_POLICY, "label": BASELINE_POLICY, "exact": False, "why": unsupported,
                           "unsupported": unsupported, "speedup": (float("nan"),) * 3, "config": None, "flags": [],
                           "adaptive": None, "command": "(none)", "adaptive_file": SGLANG_ADAPTIVE_FILE}
            continue

        def can(spec: str, engine: str = engine) -> tuple[Any, str]:
            if engine == "vllm":
                return vllm_expressible(spec, max_batch)
            return sglang_expressible(spec, max_batch, kind)
        thing, why = can(rec.policy)
        pick = chosen
        if thing is None:
            for r in rows:
                thing2, _ = can(str(r["policy"]))
                if thing2 is not None:
                    thing, pick = thing2, r
                    break
        entry: dict[str, Any] = {"policy": str(pick["policy"]), "label": str(pick["label"]), "exact": pick is chosen,
                                 "why": why, "speedup": (float(pick["speedup_median"]), float(pick["speedup_min"]),
                                                         float(pick["speedup_max"]))}
        if engine == "vllm":
            try:
                entry["config"] = vllm_speculative_config(thing, drafter=kind) if thing is not None else None
            except InputError as exc:
                entry["config"], entry["why"] = None, exc.message
        else:
            entry["flags"] = list(thing.flags) if thing is not None else []
            entry["adaptive"] = thing.adaptive if thing is not None else None
            entry["command"] = sglang_command(thing) if thing is not None else "(none)"
            entry["adaptive_file"] = SGLANG_ADAPTIVE_FILE
        out[engine] = entry
    return out


def _check_exports(s: Any, rec: Any, exports: dict[str, Any], ranking: pd.DataFrame, seed: int) -> Any:
    """The recommendation and each engine's export re-simulated on every step of the workload
    (:func:`tltsim.advise.check_on_every_step`), or None when nothing speculates. Each export entry
    gets ``steps`` (median, min, max over the steps) and the recommendation's own under ``rec``."""
    from tltsim import advise as adv

    mode_of = {str(r["label"]): (r["switch"] if isinstance(r["switch"], str) else None)
               for r in ranking.to_dict("records")}
    runs = [(rec.label, rec.policy, rec.switch)] if rec.is_sd else []
    for engine in ("vllm", "sglang"):
        e = exports[engine]
        if e["policy"] != BASELINE_POLICY and not e.get("unsupported"):
            runs.append((e["label"], e["policy"], mode_of.get(e["label"])))
    runs = list({(spec, mode): (label, spec, mode) for label, spec, mode in runs}.values())
    if not runs:
        return None
    check = adv.check_on_every_step(s, runs, seed)
    by_label = {label: part["speedup"].to_numpy(dtype=float) for label, part in check.table.groupby("label")}

    def spread(label: str) -> tuple[float, float, float] | None:
        v = by_label.get(label)
        return None if v is None or not len(v) else (float(np.median(v)), float(v.min()), float(v.max()))

    exports["rec_steps"] = spread(rec.label) if rec.is_sd else None
    for engine in ("vllm", "sglang"):
        exports[engine]["steps"] = None if exports[engine].get("unsupported") else spread(exports[engine]["label"])
    return check


#: Strategy x SD combinations printed (the report has them all).
MAX_STRATEGY_LINES = 6


def _print(console: Console, s: Any, rec: Any, ranking: pd.DataFrame, fresh: Any, findings: list, warnings: list,
           exports: dict[str, Any], facts: dict[str, Any]) -> None:
    """The answer in under a screen."""
    p = lambda text="": console.print(text, markup=False, soft_wrap=True)  # noqa: E731
    rows = {r["label"]: r for r in ranking.to_dict("records")}
    base = rows[BASELINE_POLICY]
    n = len(facts["seeds"])
    spread = f"median (min–max) over {n} seeds" if n > 1 else "one seed, no spread"
    p()
    if rec.is_sd:
        p(f"Recommended: {rec.label}")
    else:
        p("Recommended: no SD (no-sd) -- speculative decoding does not pay here")
    e2e = "" if not math.isfinite(rec.e2e_speedup[0]) else f"; end to end {_x(rec.e2e_speedup)}"
    p(f"  rollout {_x(rec.speedup)} vs no SD ({fmt_range(*rec.rollout_s)} s vs {base['rollout_s_median']:.2f} s)"
      f"{e2e}; {spread}")
    b = facts["bound"]
    caveat = "" if b["mode"] == "expected" else ", a bound on expected accept lengths"
    p(f"  upper bound: no setting of the grid finishes under {fmt_range(b['median'], b['min'], b['max'])} s "
      f"(speedup <= {b['speedup']:.3f}x{caveat})")
    if rec.ties:
        shown = ", ".join(rec.ties[:3]) + (f" and {len(rec.ties) - 3} more" if len(rec.ties) > 3 else "")
        p(f"  tie within spread: {shown} (their min–max overlaps the recommendation's)")
    if not rec.sd_pays and rec.runners_up:
        best = rows[rec.runners_up[0]]
        p(f"  best SD setting: {best['label']} {_x(_t(best, 'speedup'))} -- below {100 * (adv_pays() - 1):.0f}% "
          "or inside no-sd's spread")
    if rec.is_sd and math.isfinite(rec.e2e_speedup[0]) and rec.e2e_speedup[0] < adv_pays():
        p(f"  end to end it barely shows ({_x(rec.e2e_speedup)}): the later phases take {facts['later_s']:.0f} s "
          f"against a {rec.rollout_s[0]:.0f} s rollout")
    elif facts["later_s"] is not None:
        p(f"  end to end adds {facts['later_s']:.1f} s of reward, log-probs, reference, actor update and weight sync "
          "per run (rl.*; drafter at its quality, trained in the bubbles)")
    elif facts["later_note"]:
        p(f"  {facts['later_note']}")
    robust = facts.get("robust")
    if robust is not None:
        p(f"  how sure: {robust.line()}")
    elif facts.get("quick"):
        p("  how sure: the unmeasured inputs were not varied (--quick)")
    if robust is not None and robust.e2e and math.isfinite(rec.e2e_speedup[0]):
        p("  end to end with the phases after rollout x1/2 .. x2: "
          + "; ".join(f"{x:.3f}x at x{k:g}" for k, x in robust.e2e))
    if facts.get("assumes"):
        p("  assumes (not measured for your run): " + "; ".join(facts["assumes"]))
    for line in facts["units"].lines() if facts.get("units") is not None else ():
        p(line)
    p("Runners-up:")
    for label in rec.runners_up:
        q = rows[label]
        e = q["e2e_speedup_median"]
        p(f"  {int(q['rank'])}. {label}: rollout {_x(_t(q, 'speedup'))}"
          + (f", end to end {_x(_t(q, 'e2e_speedup'))}" if math.isfinite(e) else ""))
    if not fresh.table.empty:
        parts = []
        for q in fresh.table.to_dict("records"):
            if isinstance(q.get("speedup_median"), float) and math.isfinite(q["speedup_median"]):
                parts.append(f"{q['preset']} {_x(_t(q, 'speedup'))}")
            else:
                parts.append(f"{q['preset']} ({q['upkeep']})")
        p(f"Drafter upkeep over {fresh.steps} RL steps, end to end vs veRL (presets under {fresh.rollout}):")
        p("  " + "; ".join(parts))
        if fresh.note:
            p(f"  {fresh.note}")
    else:
        p(f"Drafter upkeep: {fresh.skipped}")
    answer = facts.get("strategies")
    if answer is not None and answer.skipped:
        p(f"Strategies: {answer.skipped}")
    elif answer is not None:
        p(f"Long-tail strategies x SD over {answer.steps} (whole-run time vs sync without SD; lag in policy versions):")
        for q in answer.table.to_dict("records")[:MAX_STRATEGY_LINES]:
            p(f"  {q['rank']}. {q['strategy']} + {q['policy']}: {_x(_t(q, 'speedup'))}, {q['step_s_median']:.1f} s "
              f"per step, mean lag {q['mean_lag']:.2f} (max {q['max_lag']}), {q['gpus']} GPUs "
              f"({q['speedup_per_gpu']:.3f}x per GPU)")
        for c in answer.compositions:
            p(f"  - {c.short()}")
    if findings:
        p("Where SD does not pay:")
        for f in findings[:MAX_FINDINGS]:
            head = f"{f.subject} {_x(f.speedup)}" if f.speedup else f.subject
            p(f"  - {head}: {_short(f.why)}")
        if len(findings) > MAX_FINDINGS:
            p(f"  (+{len(findings) - MAX_FINDINGS} more in the report)")
    for label, line in warnings[:MAX_WARNINGS]:
        p(f"warning: {label}: {_short(line)}")
    if len(warnings) > MAX_WARNINGS:
        p(f"(+{len(warnings) - MAX_WARNINGS} more warnings in the report's warnings.csv)")
    if not warnings:
        p("Warnings: none (no run of the grid or of the upkeep comparison raised one)")
    for engine, title in (("vllm", "vLLM"), ("sglang", "SGLang")):
        e = exports[engine]
        if e.get("unsupported"):
            p(f"{title}: no export: {e['unsupported']}")
            continue
        mode = rows[e["label"]]["switch"]
        if engine == "vllm" and isinstance(mode, str) and mode != "in_step":
            e["note"] = (f" (simulated with the {mode} switch; vLLM's drafter runs at every step: --switch in_step "
                         "prices that)")
        if e["exact"] and e["policy"] == BASELINE_POLICY:
            p(f"{title}: run without speculative decoding (no speculative flags exported)")
        elif e["exact"]:
            p(f"{title}: exports {e['policy']} as recommended" + e.get("note", ""))
        else:
            p(f"{title}: cannot run {rec.policy} ({e['why']}); exports {e['label']}, "
              f"simulated {_x(e['speedup'])} vs {_x(rec.speedup)}" + e.get("note", ""))
    check = facts.get("check")
    if check is not None:
        parts = [f"recommended {_x(exports['rec_steps'])}"] if exports.get("rec_steps") else []
        for engine, title in (("vllm", "vLLM"), ("sglang", "SGLang")):
            if exports[engine].get("steps"):
                parts.append(f"{title} export {_x(exports[engine]['steps'])}")
        p(f"On every step of the workload ({check.steps}; seed {check.seed}; median, min–max over the steps): "
          + "; ".join(parts))


def adv_pays() -> float:
    from tltsim.advise import PAYS

    return PAYS

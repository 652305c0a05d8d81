"""``tlt report``: a README with figures and tables from a simulated run folder or a sweep folder.

A *run* folder is what ``tlt sim run`` writes (``summary.csv``, ``events.parquet``,
``scenario.resolved.toml``, and ``steps.csv`` for whole RL runs with presets). A *sweep* folder is
what ``tlt sweep run`` writes (:mod:`tltsim.sweep.store`). The report states the command that
regenerates it and the one that reproduces the numbers, the simulated device (from the scenario)
and the versions and host that computed them, and shows where SD does *not* pay as plainly as where
it does (a table of every setting below 1x).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.markdown import markdown_table
from analysis.provenance import provenance_line
from analysis.rl_plots import PHASE_LABELS, accept_over_steps, step_breakdown
from analysis.rollout_plots import gpu_utilisation, makespan_bars, rollout_timeline
from analysis.sd_plots import sd_speedup_heatmap, sd_speedup_vs_batch
from analysis.style import save_figure
from analysis.sweep_plots import REPLICATE, replicate_stats, response_curves, response_surface, with_elastic_columns
from tltcore.errors import InputError, reason
from tltcore.input_files import check_input

#: Runs whose baseline is this row are rollout-only policy comparisons; ``verl`` marks RL runs.
BASELINES = ("no-sd", "verl")
HEATMAP_DEPTHS = (2, 4, 6, 8, 10, 12)
HEATMAP_VERIFY = (4, 8, 16, 32, 48, 64)
#: Draft shapes the SD-vs-batch figure always shows: ``tlt advise``'s chain and TLT's trees; the shapes
#: the run's own policies may choose are added (:func:`curve_configs`).
CURVE_CONFIGS = ("4_1_4", "8_4_8", "8_4_16", "8_4_32", "8_4_48")
CURVE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
RUN_FILES = ("summary.csv", "events.parquet", "scenario.resolved.toml")
#: The summary columns each kind of run report reads (checked up front, named when missing).
ROLLOUT_SUMMARY = ("policy", "step", "makespan_s", "idle_fraction", "mean_accept_length")
RL_SUMMARY = ("preset", "status", "steps", "speedup", *PHASE_LABELS)
TEXT_COLUMNS = ("policy", "preset", "status")
#: The event-log columns the timeline and utilisation figures read.
EVENT_NEEDED = ("policy", "step", "phase", "worker", "kind", "t_start", "t_end", "batch_size", "depth")


@dataclass
class Report:
    """What a report is made of before it is written: Markdown sections and named figures."""

    title: str
    sections: list[str] = field(default_factory=list)
    figures: dict[str, Callable[[], plt.Figure]] = field(default_factory=dict)

    def figure(self, stem: str, caption: str, make: Callable[[], plt.Figure]) -> None:
        self.figures[stem] = make
        self.sections.append(f"![{caption}]({stem}.png)\n\n*{caption}.*")

    def write(self, folder: Path, on_figure: Callable[[int, int, str], None] | None = None) -> list[str]:
        """Write the figures and README.md into ``folder``; ``on_figure(i, n, stem)`` is told as each
        figure starts (figures of a large run take minutes: a report must not look stuck)."""
        for i, (stem, make) in enumerate(self.figures.items(), 1):
            if on_figure is not None:
                on_figure(i, len(self.figures), stem)
            save_figure(make(), folder / stem)
        (folder / "README.md").write_text("\n\n".join([f"# {self.title}", *self.sections]) + "\n", encoding="utf-8")
        return ["README.md", *(f"{s}.png" for s in self.figures)]


def kind_of(path: Path) -> str:
    """``run`` or ``sweep``; one clear line if ``path`` is neither, naming what it is when tlt wrote
    it (an advise folder is a report already: its README.md is what to read)."""
    from tltcore.atomic import KINDS, results_kind
    from tltsim.sweep.store import SweepStore

    if not path.is_dir():
        raise InputError("no such folder (give a `tlt sim run` or `tlt sweep run` results folder)", path=path)
    if SweepStore(path).is_sweep():
        return "sweep"
    missing = [f for f in RUN_FILES if not (path / f).exists()]
    kind = results_kind(path) if missing else None
    if kind == "advise":
        raise InputError(f"is a `tlt advise` report, already rendered: read {path / 'README.md'}; to report its "
                         f"recommended setting, run `tlt sim run --scenario {path / 'recommended.toml'} --out DIR` "
                         "and `tlt report DIR`", path=path)
    if kind in KINDS and kind != "sim-run":
        raise InputError(f"holds {KINDS[kind]} results, not a `tlt sim run` or `tlt sweep run` folder"
                         + (f"; read {path / 'README.md'}" if (path / "README.md").is_file() else ""), path=path)
    if missing:
        raise InputError(f"neither a sweep folder (no sweep.json) nor a run folder (missing {', '.join(missing)})",
                         path=path)
    for name in (*RUN_FILES, "steps.csv"):
        check_input(path / name, what="a file of a `tlt sim run` results folder", missing_ok=True)
    return "run"


def build_report(path: Path, command: str) -> Report:
    """The report of a run or sweep folder (:func:`kind_of`)."""
    return sweep_report(path, command) if kind_of(path) == "sweep" else run_report(path, command)


# ---- run folders ---------------------------------------------------------------------------------
def _read_csv(path: Path, needed: tuple[str, ...] = (), numeric: tuple[str, ...] = ()) -> pd.DataFrame:
    """A run's CSV table, refused in one line naming the file (and the columns) when it cannot be
    read, has no rows, lacks a column the report uses or holds text where numbers belong: the report
    is drawn after the checks, and a KeyError from deep inside a figure helps nobody."""
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        first = reason(exc, 120)
        raise InputError(f"not a readable CSV table ({first})", path=path) from None
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise InputError(f"lacks column{'s' if len(missing) > 1 else ''} {', '.join(missing)} (has: "
                         f"{', '.join(map(str, df.columns[:8])) or 'none'}{', ...' if len(df.columns) > 8 else ''}); "
                         "is it a `tlt sim run` summary?", path=path, field=missing[0])
    if df.empty:
        raise InputError("has a header but no rows", path=path)
    for col in numeric:
        values = pd.to_numeric(df[col], errors="coerce")
        bad = values.isna() & df[col].notna()
        if bad.any():
            row = int(bad.to_numpy().argmax())
            raise InputError(f"not a number: {df[col].iloc[row]!r}", path=path, row=row + 2, field=col)
        df[col] = values
    return df


def _read_events(path: Path) -> pd.DataFrame:
    try:
        events = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ValueError, ... for a damaged file
        first = reason(exc, 120, collapse=True)
        raise InputError(f"not a readable event log ({first})", path=path) from None
    missing = [c for c in EVENT_NEEDED if c not in events.columns]
    if missing:
        raise InputError(f"lacks column{'s' if len(missing) > 1 else ''} {', '.join(missing)}; is it a `tlt sim "
                         "run` event log?", path=path, field=missing[0])
    return events


def _scenario_line(s) -> str:
    from tltsim.scenario import cost_model
    from tltsim.scenario.build import describe_cost

    try:  # which model served (calibrated or the roofline fallback), as the run printed it
        cost = describe_cost(cost_model(s)).removeprefix("cost model: ")
    except InputError as exc:
        cost = f"{s.cost.model} (not rebuildable here: {exc.message})"
    return (f"Simulated: `{s.model.name}` on {s.cluster.gpus} x {s.cluster.gpu} (TP {s.cluster.tp}, "
            f"{s.n_workers} rollout workers), trace `{s.trace.name}`, {s.trace.num_steps} step(s), "
            f"cost model: {cost}; acceptance `{s.acceptance.preset}` ({s.acceptance.mode}). "
            "No GPU was used: these are the simulator's predictions.")


def run_report(path: Path, command: str) -> Report:
    """Figures and tables of one ``tlt sim run`` folder."""
    from tltsim.scenario import load_scenario

    rl = (path / "steps.csv").exists()
    needed = RL_SUMMARY if rl else ROLLOUT_SUMMARY
    summary = _read_csv(path / "summary.csv", needed, numeric=tuple(c for c in needed if c not in TEXT_COLUMNS))
    steps = _read_csv(path / "steps.csv", ("preset", "step")) if rl else None
    events = _read_events(path / "events.parquet")
    timeline_note = ""
    if "seed" in events.columns and events["seed"].nunique() > 1:  # a --seeds folder: draw its first seed
        first = int(events["seed"].min())
        events = events[events["seed"] == first].drop(columns="seed").reset_index(drop=True)
        timeline_note = f" (seed {first})"
    s = load_scenario(path / "scenario.resolved.toml")
    rep = Report(f"tlt report: {'whole RL run' if rl else 'rollout'} `{path.name}`")
    rep.sections += [
        f"Regenerate this report: `{command}`. Reproduce the numbers: "
        f"`tlt sim run --scenario {path / 'scenario.resolved.toml'}"
        + (f" --seeds {len(_seeds(summary))}" if len(_seeds(summary)) > 1 else "") + "`.",
        _scenario_line(s), f"Computed with {provenance_line()}."]
    if steps is not None:
        _rl_sections(rep, summary, steps)
    else:
        _rollout_sections(rep, summary)
    rep.sections += _warning_sections(path)
    rep.sections.append(f"## Timeline{timeline_note}")
    rep.figure("rollout_timeline", "Running batch per rollout worker; SD spans coloured; released workers idle "
               "(grey strip) or training the drafter (green strip)", lambda: rollout_timeline(events))
    rep.figure("gpu_utilisation", "Share of rollout GPUs generating (solid) and training the drafter (dashed) "
               "over time", lambda: gpu_utilisation(events))
    _sd_sections(rep, s)
    return rep


def _warning_sections(path: Path) -> list[str]:
    """The run's warnings (``warnings.csv``, :mod:`tltsim.run_warnings`) as a list: what went wrong
    and where, beside the tables that only show that a policy did not pay."""
    from tltsim.run_warnings import WARNINGS_CSV

    file = path / WARNINGS_CSV
    if not file.exists():
        return ["## Warnings", f"No `{WARNINGS_CSV}` in this folder (written by `tlt sim run` since it checks runs "
                "for these): run the reproduce command above for the switch, SD-cost and RL-share warnings."]
    check_input(file, what="a file of a `tlt sim run` results folder")
    try:
        table = pd.read_csv(file)
    except pd.errors.EmptyDataError:
        table = pd.DataFrame()
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise InputError(f"not a readable CSV table ({reason(exc, 120)})", path=file) from None
    if "message" not in table.columns or table.empty:
        return ["## Warnings", "None: every elastic switch fired where SD paid and cost less than SD gained, no "
                "policy ran SD where it is slower than no-SD, and (whole RL runs) rollout dominates the step."]
    return ["## Warnings", "\n".join(f"- {m}" for m in table["message"].astype(str))]


def _not_paying(table: pd.DataFrame, name: str, value: str = "speedup") -> str:
    bad = table[(table[value] < 1.0) & ~table[name].isin(BASELINES)]
    if bad.empty:
        return "Every setting here is at least 1x: SD does not slow this run down anywhere."
    return ("**Where SD does not pay** (speedup below 1x):\n\n"
            + markdown_table(bad[[name, value]].drop_duplicates(), {value: ".3f"}))


def _seeds(summary: pd.DataFrame) -> list[int]:
    """The simulation seeds a summary holds (``tlt sim run --seeds N`` stacks them in a ``seed`` column)."""
    return sorted(int(k) for k in summary["seed"].unique()) if "seed" in summary.columns else []


def _spread_columns(per_seed: pd.DataFrame, name: str, metrics: dict[str, str]) -> pd.DataFrame:
    """Per ``name`` (first-seen order), each metric as ``median (min–max)`` over the seeds, formatted
    with its spec; the ``<metric>`` column keeps the median (for figures and the not-paying table)."""
    from tltsim.seeds import aggregate, fmt_range

    agg = aggregate(per_seed, [name], list(metrics))
    view = agg[[name, "seeds"]].copy()
    for m, spec in metrics.items():
        view[m] = agg[f"{m}_median"]
        view[f"{m} (min–max)"] = [fmt_range(a, b, c, spec) for a, b, c in
                                  zip(agg[f"{m}_median"], agg[f"{m}_min"], agg[f"{m}_max"], strict=True)]
    return view


#: What a one-seed report says instead of a spread it cannot show.
ONE_SEED = ("One simulation seed, so no spread is shown; the dealing seed alone can move a speedup by ±10% "
            "and flip a ranking on long-tailed traces. `tlt sim run --seeds 3` (then `tlt report` on its "
            "folder) gives each number as the median (min–max) over the seeds.")


def _rollout_sections(rep: Report, summary: pd.DataFrame) -> None:
    seeds = _seeds(summary)
    keys = ["seed", "policy"] if seeds else ["policy"]
    per_policy = summary.groupby(keys, sort=False).agg(
        steps=("step", "size"), makespan_s=("makespan_s", "sum"), idle_fraction=("idle_fraction", "mean"),
        mean_accept_length=("mean_accept_length", "mean")).reset_index()
    base = per_policy[per_policy["policy"] == "no-sd"].set_index(keys[:-1] or "policy")["makespan_s"]
    if seeds:
        per_policy["speedup"] = per_policy["seed"].map(base) / per_policy["makespan_s"]
        view = _spread_columns(per_policy, "policy", {"makespan_s": ".1f", "speedup": ".3f", "idle_fraction": ".3f",
                                                      "mean_accept_length": ".2f"})
        shown = view[["policy", "seeds", "makespan_s (min–max)", "speedup (min–max)", "idle_fraction (min–max)",
                      "mean_accept_length (min–max)"]]
        rep.sections += [f"## Rollout time per policy (median (min–max) over seeds {seeds[0]}-{seeds[-1]})",
                         markdown_table(shown), _not_paying(view, "policy")]
        rep.figure("makespan", "Rollout makespan per policy (median over the seeds), speedup over no-sd",
                   lambda: makespan_bars(view[["policy", "makespan_s", "speedup"]]))
        return
    per_policy["speedup"] = float(base.iloc[0]) / per_policy["makespan_s"] if len(base) else np.nan
    rep.sections += ["## Rollout time per policy",
                     markdown_table(per_policy, {"makespan_s": ".1f", "idle_fraction": ".3f",
                                                 "mean_accept_length": ".2f", "speedup": ".3f"}),
                     ONE_SEED, _not_paying(per_policy, "policy")]
    rep.figure("makespan", "Rollout makespan per policy, speedup over no-sd",
               lambda: makespan_bars(per_policy[["policy", "makespan_s", "speedup"]]))


def _rl_sections(rep: Report, summary: pd.DataFrame, steps: pd.DataFrame) -> None:
    seeds = _seeds(summary)
    if seeds:
        view = _spread_columns(summary, "preset", {"total_s": ".1f", "rollout_share": ".2f",
                                                   "mean_accept_length": ".2f", "rollout_speedup": ".3f",
                                                   "speedup": ".3f"})
        status = summary.groupby("preset", sort=False)["status"].agg(lambda v: "ok" if (v == "ok").all() else
                                                                      next(x for x in v if x != "ok"))
        view.insert(1, "status", view["preset"].map(status))
        shown = view[["preset", "status", "seeds", *(c for c in view.columns if c.endswith("(min–max)"))]]
        first = summary[summary["seed"] == seeds[0]]
        rep.sections += [f"## End-to-end RL step time per preset (median (min–max) over seeds {seeds[0]}-{seeds[-1]})",
                         markdown_table(shown), _not_paying(view[view["status"] == "ok"], "preset")]
        rep.figure("step_breakdown", f"Seconds per RL step by phase and preset (seed {seeds[0]})",
                   lambda: step_breakdown(first))
    else:
        cols = [c for c in ("preset", "status", "steps", "total_s", "rollout_share", "mean_accept_length",
                            "rollout_speedup", "speedup", "note") if c in summary.columns]
        rep.sections += ["## End-to-end RL step time per preset",
                         markdown_table(summary[cols], {"total_s": ".1f", "rollout_share": ".2f",
                                                        "mean_accept_length": ".2f", "rollout_speedup": ".3f",
                                                        "speedup": ".3f"}),
                         ONE_SEED, _not_paying(summary[summary["status"] == "ok"], "preset")]
        rep.figure("step_breakdown", "Seconds per RL step by phase and preset", lambda: step_breakdown(summary))
    if "mean_accept_length" in steps and steps["mean_accept_length"].notna().any():
        rep.figure("accept_over_steps", "Mean accept length per RL step and preset",
                   lambda: accept_over_steps(steps))


def curve_configs(policies: list[Any]) -> list[str]:
    """The draft shapes of the SD-vs-batch figure: :data:`CURVE_CONFIGS` and every shape the run's
    ``policies`` (typed specs, or their text) may choose (a chain policy's shapes were left out: only
    trees were drawn), chains first, each by depth."""
    from tltcore.policy.base import SDConfig
    from tltcore.policy.registry import spec_shapes

    shapes = {SDConfig.parse(c) for c in CURVE_CONFIGS}
    for spec in policies:
        try:
            shapes |= set(spec_shapes(spec) or ())
        except InputError:  # a preset's name, not a policy spec: it adds no shape
            continue
    return [c.name for c in sorted(shapes, key=lambda c: (c.topk, c.depth, c.verify_tokens))]


def _sd_sections(rep: Report, s) -> None:
    from tltcore.policy.base import SDConfig
    from tltcore.sd_speedup import grid_configs, sd_speedup_table
    from tltsim.scenario import cost_model, drafter_acceptance

    cost, accept = cost_model(s), drafter_acceptance(s)  # the scenario's drafter kind, priced as the run was
    grid = sd_speedup_table(cost, accept, grid_configs(HEATMAP_DEPTHS, HEATMAP_VERIFY), [1])
    run_policies = [*([] if s.presets else s.policies), *([s.presets_policy] if s.presets_policy else [])]
    curves = sd_speedup_table(cost, accept, [SDConfig.parse(c) for c in curve_configs(run_policies)], CURVE_BATCHES)
    rep.sections += ["## One SD iteration on this model and GPU",
                     "Tokens per second with SD over without, per draft shape, at 2,048 context tokens per "
                     "request (`tltcore.sd_speedup`): what the elastic switch and the bandit weigh."]
    rep.figure("sd_heatmap", f"SD speedup per iteration at batch 1 ({s.model.name}, {s.cluster.gpu}, TP "
               f"{s.cluster.tp}); blue pays, red does not", lambda: sd_speedup_heatmap(grid))
    rep.figure("sd_vs_batch", "SD speedup per iteration vs running batch; below the dashed line SD does not pay",
               lambda: sd_speedup_vs_batch(curves))


# ---- sweep folders --------------------------------------------------------------------------------
@dataclass(frozen=True)
class SweepView:
    """A sweep's results shaped for plotting: one row per point and non-baseline policy/preset, the
    dimensions that vary (numbers first), the name of the policy/preset column, and the seeds of a
    ``seed`` axis (empty when the sweep has none): replicates of each setting, never a dimension."""

    rows: pd.DataFrame
    dims: list[str]
    series: str
    seeds: list[int] = field(default_factory=list)

    def settings(self, value: str = "speedup") -> pd.DataFrame:
        """One row per setting (``dims``): ``value`` the median over the seeds (each seed's value the
        median over its steps), ``<value>_min``/``_max`` over the seeds, ``seeds`` how many."""
        return replicate_stats(self.rows, self.dims, value, REPLICATE if self.seeds else None)


def sweep_view(results: pd.DataFrame, axes: list[str]) -> SweepView:
    """Replace a ``policies``/``presets`` axis by the per-row policy/preset (and an elastic
    threshold, when every policy is elastic) and keep the dimensions with more than one value.
    A ``seed`` axis is not a dimension: its values are the replicates each setting is summarised
    over (median with min–max), because a seed changes the luck of the deal, not the setting."""
    series = "preset" if "preset" in results.columns else "policy"
    ok = results[(results["status"] == "ok") & ~results[series].isin(BASELINES)]
    if "run_status" in ok.columns:  # whole RL runs: a preset that ran out of memory has no speedup
        ok = ok[ok["run_status"] == "ok"]
    ok = ok.copy()
    dims = [a for a in axes if a not in ("policies", "presets", REPLICATE)]
    seeds = sorted(int(k) for k in ok[REPLICATE].dropna().unique()) if REPLICATE in axes and len(ok) else []
    if series == "policy" and len(ok):
        ok = with_elastic_columns(ok)
        if ok["elastic_threshold"].notna().all():
            dims += ["elastic_threshold", "inner_policy"]
        else:
            dims.append("policy")
    else:
        dims.append(series)
    dims = [d for d in dims if ok[d].nunique() > 1] if len(ok) else []
    numeric = [d for d in dims if pd.api.types.is_numeric_dtype(ok[d])]
    return SweepView(ok, numeric + [d for d in dims if d not in numeric], series, seeds)


def sweep_report(path: Path, command: str) -> Report:
    """Figures and tables of one sweep folder."""
    from tltsim.sweep.store import SweepStore

    store = SweepStore(path)
    meta = store.meta()
    results = store.read()  # a damaged part file is one warning and is left out
    if results.empty and store.damaged:
        raise InputError(f"no readable results: {len(store.damaged)} damaged part file(s), named above; `tlt sweep "
                         "run` with the sweep's spec and --out evaluates their points again", path=path)
    if results.empty:
        raise InputError("the sweep has no results yet (run `tlt sweep run` first)", path=path)
    axes = meta.get("axes", [])
    axes = [a for a in axes if isinstance(a, str)] if isinstance(axes, list) else []
    meta = {**meta, "axes": axes}
    need = [c for c in ("error",) if c not in results.columns]
    if not {"policy", "preset"} & set(results.columns):
        need.append("policy")
    if (results["status"] == "ok").any() and "speedup" not in results.columns:
        need.append("speedup")
    if need:
        raise InputError(f"the results lack column(s) {', '.join(need)}: not what `tlt sweep run` writes", path=path)
    view = sweep_view(results, [a for a in axes if a in results.columns])
    errors = results[results["status"] == "error"].drop_duplicates("key")
    points = results["key"].nunique()
    rep = Report(f"tlt report: sweep `{meta.get('name', path.name)}`")
    rep.sections += [
        f"Regenerate this report: `{command}`. Reproduce the results: `tlt sweep run {_spec_arg(path, meta)} "
        f"--out {path}` (re-runs only the points that have no result there).",
        f"{points} points, {points - len(errors)} ok, {len(errors)} failed; axes: "
        + ", ".join(f"`{a}`" for a in meta.get("axes", [])) + f". Spec: `{path / 'spec.toml'}`; base scenario "
        f"`{path / 'base.resolved.toml'}`. Simulated: no GPU was used.",
        f"Computed with {provenance_line()} (the report; each point's host is in the results).",
        _seeds_line(view),
    ]
    _sweep_tables(rep, view)
    _sweep_figures(rep, view)
    if len(errors):
        rep.sections += ["## Failed points", markdown_table(errors[["key", "error"]])]
    return rep


def _spec_arg(path: Path, meta: dict) -> str:
    """The spec to name in the reproduce command: the bundled spec's name when the sweep ran it
    unchanged (the results folder is usually not committed), else the copy in the sweep folder."""
    from tltsim.sweep.spec import bundled_specs, load_spec

    bundled = bundled_specs().get(str(meta.get("name", "")))
    if bundled is not None and load_spec(bundled).text_sha256 == meta.get("spec_sha256"):
        return str(meta["name"])
    return str(path / "spec.toml")


def _seeds_line(view: SweepView) -> str:
    """What the sweep's numbers are over: its seeds as replicates, or one seed and no spread."""
    if len(view.seeds) > 1:
        return (f"`{REPLICATE}` is treated as replicates, not as a setting: each setting's speedup is the median "
                f"(min–max) over its {len(view.seeds)} simulation seeds ({_seed_span(view.seeds)}; which worker "
                "serves which prompt group, accept lengths, the bandit's exploration), each seed's against the same "
                "seed's baseline; figures show the median.")
    return ("One simulation seed per setting, so no spread is shown: the dealing seed alone can move a speedup by "
            f"several percent. Add `{REPLICATE} = [0, 1, 2]` to a grid axis of the spec for the median (min–max).")


def _seed_span(seeds: list[int]) -> str:
    return ", ".join(map(str, seeds)) if seeds != list(range(seeds[0], seeds[-1] + 1)) else f"{seeds[0]}–{seeds[-1]}"


def sweep_settings_table(view: SweepView, metric: str = "speedup") -> pd.DataFrame:
    """The settings table the report prints: per setting the median ``metric`` and, when the sweep
    has several seeds, ``seeds`` and ``<metric> (min–max)`` as ``median (min–max)`` text."""
    from tltsim.seeds import fmt_range

    table = view.settings(metric)
    if len(view.seeds) > 1:
        table[f"{metric} (min–max)"] = [fmt_range(a, b, c, ".3f") for a, b, c in
                                        zip(table[metric], table[f"{metric}_min"], table[f"{metric}_max"],
                                            strict=True)]
    return table


def _sweep_tables(rep: Report, view: SweepView) -> None:
    ok, dims = view.rows, view.dims
    if ok.empty:
        rep.sections.append("No successful points to show.")
        return
    metric = "speedup"
    table = sweep_settings_table(view, metric)
    spread = len(view.seeds) > 1
    shown = [*dims, "seeds", f"{metric} (min–max)"] if spread else [*dims, metric]
    formats = {metric: ".3f", **{d: "g" for d in dims if pd.api.types.is_numeric_dtype(table[d])}}
    best = table.sort_values(metric, ascending=False, kind="stable").head(10)
    rl = view.series == "preset"
    label = "end-to-end speedup over verl, whole run" if rl else "rollout speedup over no-sd, median over steps"
    over = f"; median (min–max) over {len(view.seeds)} seeds" if spread else ""
    rep.sections += [f"## Best settings (`speedup`: {label}{over})", markdown_table(best[shown], formats)]
    bad = table[table[metric] < 1.0]
    what = "RL step" if rl else "rollout"
    rep.sections += ["## Where SD does not pay",
                     "Every setting is at least 1x." if bad.empty else
                     f"{len(bad)} of {len(table)} settings are below 1x{' by the median' if spread else ''} (SD slows "
                     f"the {what} down):\n\n" + markdown_table(bad.sort_values(metric, kind="stable")[shown], formats)]
    if spread:
        doubt = table[(table[metric] >= 1.0) & (table[f"{metric}_min"] < 1.0)]
        rep.sections.append(
            "Every setting at or above 1x by the median is at or above 1x at every seed." if doubt.empty else
            f"{len(doubt)} more setting(s) pay by the median but not at every seed (the min is below 1x):\n\n"
            + markdown_table(doubt.sort_values(f"{metric}_min", kind="stable")[shown], formats))


def _sweep_figures(rep: Report, view: SweepView) -> None:
    ok, dims = view.rows, view.dims
    if ok.empty or not dims:
        return
    spread = len(view.seeds) > 1
    data = view.settings() if spread else ok  # with seeds: one row per setting, the median over the seeds
    x = dims[0]
    y = dims[1] if len(dims) > 1 else None
    facet = dims[2] if len(dims) > 2 else None
    rest = dims[3:]
    note = f" (median over {', '.join(rest)})" if rest else ""
    seeds = f"; each setting the median over {len(view.seeds)} seeds" if spread else ""
    label = "end-to-end speedup over veRL (×)" if view.series == "preset" else "rollout speedup over no-SD (×)"
    if y is not None:
        rep.figure("response_surface", f"Median speedup over {x} x {y}"
                   + (f", one panel per {facet}" if facet else "") + note + seeds,
                   lambda: response_surface(data, x, y, facet=facet, value_label=label))
    if pd.api.types.is_numeric_dtype(ok[x]) and y is not None:
        log_x = bool((ok[x] > 0).all() and ok[x].max() >= 16 * ok[x].min())  # a power-of-two grid, say
        band = ("speedup_min", "speedup_max") if spread else None
        rep.figure("response_curves", f"Median speedup vs {x}, one line per {y}" + note
                   + (f"; band: min–max over the {len(view.seeds)} seeds" + (f" and {', '.join(rest)}" if rest else "")
                      if spread else ""),
                   lambda: response_curves(data, x, y, facet=facet, value_label=label, log_x=log_x, band=band))


def write_report(path: str | Path, out: str | Path, *, command: str, force: bool = False,
                 on_figure: Callable[[int, int, str], None] | None = None) -> list[str]:
    """Build the report of ``path`` and write it to ``out`` atomically; return the files written.
    ``on_figure(i, n, stem)`` is told as each figure starts (:meth:`Report.write`)."""
    from tltcore.atomic import atomic_dir, check_output_dir

    check_output_dir(out, force, kind="report")
    rep = build_report(Path(path), command)
    with atomic_dir(out, kind="report", force=force) as tmp:
        return rep.write(tmp, on_figure)

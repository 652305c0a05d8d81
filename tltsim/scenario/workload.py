"""The scenario's workload: the trace steps it names, and the size check made before any is built."""

from __future__ import annotations

from typing import Any

from tltcore.config import suggest
from tltcore.errors import InputError, warn
from tltsim.scenario.schema import MAX_RESPONSES, TraceSection, relocated


def trace_rows(t: TraceSection) -> Any:
    """The scenario's trace as every command must read it: by ``trace.name`` with the scenario's column
    mapping (``trace.map``), tokenizer and ``trace.seed``, keeping ``trace.source``'s rows (a pandas
    DataFrame in the canonical schema; errors name the ``trace.*`` field to fix). The one door to a
    scenario's trace: a caller that read the file itself would miss the mapping."""
    from tltsim.traces import load_trace

    try:
        df = load_trace(t.name, t.map, seed=t.seed, tokenizer=t.tokenizer)
    except InputError as exc:
        if exc.field in ("--map", "trace.map", "trace.tokenizer"):  # the mapping or tokenizer is what to fix
            dotted = "trace.map" if exc.field == "--map" else exc.field
            raise InputError(exc.message, path=exc.path, row=exc.row, field=dotted) from None
        raise InputError(str(exc), field="trace.name") from None
    if t.source is not None:
        sources = sorted(map(str, df["source"].unique()))
        if t.source not in sources:
            raise InputError(f"no source '{t.source}' in trace {t.name} (has {', '.join(sources)})"
                             f"{suggest(t.source, sources)}", field="trace.source")
        df = df[df["source"] == t.source]
    return df


def load_steps(t: TraceSection) -> tuple[Any, ...]:
    """The trace steps the scenario names, as StepWorkloads (errors name the ``trace.*`` field)."""
    from tltsim.traces import build_workload

    df = trace_rows(t)
    kwargs = dict(prompts_per_step=t.prompts_per_step, samples_per_prompt=t.samples, expand_to=t.expand_samples,
                  dispersion_sigma=t.dispersion_sigma, cap=t.cap, snap_capped=t.snap_capped,
                  default_prompt_tokens=t.default_prompt_tokens, seed=t.seed)
    trace_steps = sorted(int(x) for x in df["step"].unique())
    if t.prompts_per_step is not None:
        pool = int(df.groupby("step")["group_id"].nunique().max())
        if t.prompts_per_step > pool:
            warn(f"trace.prompts_per_step = {t.prompts_per_step:,} asks for more prompt groups than trace {t.name} "
                 f"holds in a step ({pool:,}): each simulated step has {pool:,} groups, not {t.prompts_per_step:,} "
                 "(a trace of your own run, or fewer prompts per step, matches the batch you train with)")
    first = t.step if t.step is not None else (trace_steps[0] if len(trace_steps) > 1 else 0)
    per_step = len(trace_steps) > 1 or (t.prompts_per_step is None and t.num_steps == 1)
    _check_workload_size(df, t, per_step, first)
    try:
        if per_step:
            if first not in trace_steps:
                raise InputError(f"trace {t.name} has no step {first} (steps: {trace_steps[:20]})", field="trace.step")
            wanted = [s for s in trace_steps if s >= first][:t.num_steps]
            if len(wanted) < t.num_steps:
                raise InputError(f"trace {t.name} has only {len(wanted)} steps from step {first} "
                                 f"(steps: {trace_steps[:20]})", field="trace.num_steps")
            steps = build_workload(df, steps=wanted, **kwargs)
        else:  # one snapshot: sample steps of prompts_per_step groups
            steps = build_workload(df, num_steps=first + t.num_steps, **kwargs)[first:]
    except InputError as exc:
        fields = {"cap": "trace.cap", "prompts_per_step": "trace.prompts_per_step",
                  "expand_samples": "trace.expand_samples", "dispersion_sigma": "trace.dispersion_sigma",
                  "samples_per_prompt": "trace.samples", "steps": "trace.step"}
        raise relocated(exc, path=None, dotted=fields.get(exc.field or "", exc.field or "trace")) from None
    if len(steps) < t.num_steps:  # a one-snapshot trace without prompts_per_step holds one step only
        warn(f"trace {t.name} is one snapshot of {len(trace_steps)} step(s): {t.num_steps} RL steps were asked "
             f"and {len(steps)} will run; set trace.prompts_per_step (e.g. --set trace.prompts_per_step=64) to "
             "sample each step's prompt groups from it")
    return tuple(steps)


def _check_workload_size(df: Any, t: TraceSection, per_step: bool, first: int) -> None:
    """Refuse, before a single step is built, a workload of more than :data:`MAX_RESPONSES` responses
    (steps x prompt groups x samples): cutting a one-step trace into 10,000 steps of 596 groups would
    otherwise spend minutes building steps and hours simulating them, with no word."""
    group_sizes = df.groupby(["step", "group_id"], sort=False).size()
    if group_sizes.empty:
        return
    per_group = float(group_sizes.mean())
    if t.samples is not None:
        per_group = min(per_group, t.samples)
    if t.expand_samples is not None:
        per_group *= t.expand_samples
    groups = group_sizes.groupby(level=0).size()
    if per_step:
        chosen = [int(g) for step, g in groups.items() if int(step) >= first][:t.num_steps]
    else:
        chosen = [int(groups.max())] * t.num_steps
    limit = t.prompts_per_step if t.prompts_per_step is not None else max(chosen, default=0)
    total = sum(min(g, limit) for g in chosen) * per_group
    if total > MAX_RESPONSES:
        raise InputError(f"{len(chosen):,} steps of up to {min(max(chosen), limit):,} prompt groups x "
                         f"{per_group:g} samples is {total:,.0f} responses to simulate; the simulator takes at most "
                         f"{MAX_RESPONSES:,} (lower trace.num_steps, trace.prompts_per_step or "
                         "trace.expand_samples)", field="trace.num_steps")

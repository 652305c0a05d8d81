"""The warnings pass over one grouped event table gives exactly the warnings of the per-filter one.

:mod:`tltsim.run_warnings` used to filter the whole event table again per policy and step, and each
step's rows again per worker (most of the CPU time of a 100-step run). It now groups each table
once and reads its columns as arrays. The warnings must not change: not one character of a message,
not their order, not when they fire. The per-filter code is kept below, verbatim apart from its
name and docstring, as the readable reference, and every case compares the two: the warnings
(:class:`RunWarning` equality: kind, subject, step, workers, message, held), ``warnings.csv`` and
the printed ``warning:`` lines, on hand-made cases that fire each kind, bundled scenarios, whole RL
runs of several steps, stochastic and expected acceptance, one seed and several.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import tltsim.run_warnings as rw
from tltcli import app
from tltcli.sim_results import SeedSink
from tltsim.rl.run import compare_presets
from tltsim.run_warnings import (
    BASELINE_POLICY,
    BASELINE_PRESET,
    LATE_LOSS_SHARE,
    MIN_SLOW_SD_SHARE,
    MIN_SWITCH_SHARE,
    PAYS_SPEEDUP,
    SLOWER_BELOW,
    RunWarning,
    _by_step,
    _dur,
    _fmt_workers,
    _is_sd,
    _nosd_iteration_s,
    elastic_switch,
    merge_warnings,
    policy_shapes,
    rl_warnings,
    scenario_warnings,
    slow_span,
    speedup_lookup,
    warnings_frame,
)
from tltsim.scenario import compare_policies, prepare, resolve


# ---- the reference: the per-filter computation ----------------------------------------------------
def _reference_worker_span(rows: pd.DataFrame) -> float:
    busy = rows[rows["kind"].isin(("prefill", "decode", "switch_reprefill", "catch_up"))]
    return float(busy["t_end"].max() - busy["t_start"].min()) if len(busy) else 0.0


def reference_policy_step_warnings(spec: str, step: int, rows: pd.DataFrame, base: pd.DataFrame, cost: Any, accept: Any,
                         context_tokens: int, gpu: str = "", subject: str | None = None) -> list[RunWarning]:
    """The warnings of one policy and step, as computed before one grouped pass: every check filters
    the step's rows again per worker."""
    rows = rows[rows["phase"] == "rollout"]
    dec = rows[rows["kind"] == "decode"]
    if dec.empty:
        return []
    shapes = policy_shapes(spec)
    if not shapes:
        return []
    base_dec = base[base["kind"] == "decode"] if len(base) else base
    used = sorted({int(b) for b in dec["batch_size"].unique()} | {int(b) for b in base_dec.get("batch_size", ())})
    speed = speedup_lookup(cost, accept, shapes, used, context_tokens)

    def best(b: int) -> tuple[float, str]:
        return max((speed[(c.name, int(b))], c.name) for c in shapes)

    out: list[RunWarning] = []
    who = spec if subject is None else subject
    label = spec if subject is None else f"{subject} ({spec})"
    workers = sorted(int(w) for w in dec["worker"].unique())
    switch = elastic_switch(spec)
    plain_s = _nosd_iteration_s(base, cost, context_tokens)
    on = f" on {gpu}" if gpu else ""
    ctx = f"{context_tokens:,} context tokens"

    # -- elastic: never fired / fired late
    if switch is not None:
        threshold, consecutive = switch
        never: list[tuple[float, int, int, int, float, str]] = []
        late: list[tuple[float, int, float, float]] = []
        for w in workers:
            wr = dec[dec["worker"] == w]
            sd = _is_sd(wr)
            if not sd.any():
                bmin = int(wr["batch_size"].min())
                gain, shape = best(bmin)
                if gain >= PAYS_SPEEDUP:
                    never.append((gain, w, int(wr["iterations"].sum()), bmin, gain, shape))
                continue
            t_on = float(wr.loc[sd, "t_start"].min())
            before = wr[(~sd) & (wr["t_end"] <= t_on)]
            lost = 0.0
            for b, d in zip(before["batch_size"], _dur(before), strict=True):
                g = best(int(b))[0]
                if g >= PAYS_SPEEDUP:
                    lost += d * (1 - 1 / g)
            mine = rows[rows["worker"] == w]
            span = _reference_worker_span(mine)
            if span > 0 and lost >= LATE_LOSS_SHARE * span:
                late.append((lost / span, w, lost, t_on - float(mine["t_start"].min())))
        if never:
            never.sort(reverse=True)
            _, w, iters, bmin, gain, shape = never[0]
            out.append(RunWarning(
                "switch_never_fired", who, step, w, tuple(sorted(x[1] for x in never)),
                f"{label}: the elastic switch never fired on {_fmt_workers(never, len(workers))} (worker {w}: "
                f"{iters:,} decode iterations, none speculative; its smallest running batch was {bmin}, the switch "
                f"needs {consecutive} iterations in a row at batch <= {threshold}), though SD would have paid: "
                f"{shape} gives {gain:.2f}x per iteration at batch {bmin}{on} ({ctx})"))
        if late:
            late.sort(reverse=True)
            share, w, lost, t_on = late[0]
            out.append(RunWarning(
                "switch_late", who, step, w, tuple(sorted(x[1] for x in late)),
                f"{label}: the elastic switch (threshold {threshold}) fired late on "
                f"{_fmt_workers(late, len(workers))} (worker {w}: SD came on {t_on:.1f} s into its rollout; "
                f"before that, SD at the batch sizes where it pays >= {PAYS_SPEEDUP:.2f}x would have saved about "
                f"{lost:.1f} s, {100 * share:.0f}% of the worker's rollout, before switch costs)"))

    # -- the switch cost more than SD gained
    paid_rows = rows[rows["kind"].isin(("switch_reprefill", "catch_up"))]
    costly: list[tuple[float, int, float, float, int]] = []
    for w in workers:
        pw = paid_rows[paid_rows["worker"] == w]
        paid = float(_dur(pw).sum())
        span = _reference_worker_span(rows[rows["worker"] == w])
        if paid <= 0 or span <= 0 or paid < MIN_SWITCH_SHARE * span:
            continue
        wr = dec[dec["worker"] == w]
        sdr = wr[_is_sd(wr)]
        gain = float(sum(t / max(int(b), 1) * plain_s(int(b)) - d for t, b, d in
                         zip(sdr["tokens"], sdr["batch_size"], _dur(sdr), strict=True)))
        if paid > gain:
            costly.append((paid - gain, w, paid, gain, int(pw["prefill_tokens"].sum())))
    if costly:
        costly.sort(reverse=True)
        _, w, paid, gain, toks = costly[0]
        what = "lost" if gain < 0 else "saved"
        out.append(RunWarning(
            "switch_cost", who, step, w, tuple(sorted(x[1] for x in costly)),
            f"{label}: the switch cost more than SD gained on {_fmt_workers(costly, len(workers))} (worker {w}: "
            f"paid {paid:.1f} s re-prefilling/catching up {toks:,} tokens, SD's iterations {what} "
            f"{abs(gain):.1f} s)"))

    # -- SD ran where it is slower than no-SD on this GPU
    sd_rows = dec[_is_sd(dec)]
    if len(sd_rows):
        durs = _dur(sd_rows)
        slow = np.array([speed.get((str(c), int(b)), np.inf) < SLOWER_BELOW
                         for c, b in zip(sd_rows["sd_config"], sd_rows["batch_size"], strict=True)])
        total = float(durs.sum())
        if total > 0 and slow.any() and float(durs[slow].sum()) >= MIN_SLOW_SD_SHARE * total:
            per_shape: dict[str, float] = {}
            for c, d in zip(sd_rows["sd_config"][slow], durs[slow], strict=True):
                per_shape[str(c)] = per_shape.get(str(c), 0.0) + float(d)
            top = max(per_shape, key=per_shape.__getitem__)
            slow_b = [b for b in used if speed.get((top, b), np.inf) < SLOWER_BELOW]
            lo, hi = slow_b[0], slow_b[-1]
            none_pay = [b for b in used if best(b)[0] < SLOWER_BELOW]
            every = (f"; none of its shapes pays at {slow_span(none_pay, used)}" if none_pay and len(shapes) > 1
                     else "")
            more = f" (and {len(per_shape) - 1} more of its shapes)" if len(per_shape) > 1 else ""
            slow_rows = sd_rows[slow]
            # what those iterations achieved at the contexts they ran at: the seconds no SD's plain
            # iterations at the same batch sizes would need for the same tokens, over the seconds taken
            plain_need = sum(int(k) * plain_s(int(b)) / max(int(b), 1)
                             for k, b in zip(slow_rows["tokens"], slow_rows["batch_size"], strict=True))
            realized = plain_need / float(durs[slow].sum())
            out.append(RunWarning(
                "sd_slower", who, step, None, (),
                f"{label}: SD is slower than no-SD{on} at {slow_span(slow_b, used)} for {top}{more}: "
                f"{speed[(top, lo)]:.2f}x per iteration at batch {lo}, {speed[(top, hi)]:.2f}x at {hi} at the "
                f"workload's typical {ctx}{every}; the policy ran SD there for {float(durs[slow].sum()):.1f} s, "
                f"{100 * float(durs[slow].sum()) / total:.0f}% of its SD decode time, emitting tokens at "
                f"{realized:.2f}x the rate of plain iterations at the same batch sizes (at the contexts it ran at)"))
    return out


def reference_run_warnings(events: pd.DataFrame, summary: pd.DataFrame, cost: Any, accept: Any, *,
                 context_tokens: int = 2048, gpu: str = "", costs: Mapping[str, tuple[Any, Any]] | None = None,
                 specs: Mapping[str, str] | None = None) -> list[RunWarning]:
    """The warnings of one run, as computed before one grouped pass: the whole event table filtered
    again per (policy, step), each step handed to :func:`reference_policy_step_warnings`."""
    presets = "preset" in summary.columns
    head = rl_warnings(summary) if presets else []
    baseline = BASELINE_PRESET if presets else BASELINE_POLICY
    found: list[list[RunWarning]] = []
    steps = sorted(int(s) for s in events["step"].unique()) if len(events) else []
    for subject in dict.fromkeys(str(p) for p in events["policy"].unique()):
        spec = (specs or {}).get(subject, subject)
        if subject == baseline or spec == BASELINE_POLICY:
            continue
        c, a = (costs or {}).get(subject, (cost, accept))
        for step in steps:
            rows = events[(events["policy"] == subject) & (events["step"] == step)]
            base = events[(events["policy"] == baseline) & (events["step"] == step)]
            found.append(reference_policy_step_warnings(spec, step, rows, base, c, a, context_tokens, gpu,
                                                        subject=subject if subject != spec else None))
    if len(steps) <= 1:
        return head + [w for ws in found for w in ws]
    return head + merge_warnings(_by_step(found, steps), [f"step {s}" for s in steps], "steps")


# ---- the comparisons ------------------------------------------------------------------------------
SMALL = (("trace.name", "intern_s1_math"), ("cluster.gpus", 8), ("cluster.tp", 2))

#: In-process cases: (bundled scenario or None, --set pairs). Between them they fire every kind.
CASES = {
    "never_fired": (None, (*SMALL, ("trace.prompts_per_step", 8), ("trace.cap", 256),
                           ("policies", "elastic:8+beg-mab,elastic:32+beg-mab"))),
    "late_stochastic": (None, (*SMALL, ("trace.prompts_per_step", 32), ("acceptance.mode", "stochastic"),
                               ("policies", "elastic+beg-mab,elastic:512+beg-mab"))),
    "h20_cost_and_slower": (None, (*SMALL, ("trace.prompts_per_step", 32), ("cluster.gpu", "H20"),
                                   ("policies", "elastic+beg-mab,static:8_4_32,cost-aware"))),
    "presets_h20_steps": (None, (*SMALL, ("trace.prompts_per_step", 32), ("cluster.gpu", "H20"),
                                 ("trace.num_steps", 3), ("presets", "tlt,tlt-no-elastic,static-drafter"))),
    "presets_reward_stochastic": (None, (*SMALL, ("trace.prompts_per_step", 8), ("presets", "tlt"),
                                         ("rl.reward_s_per_sample", 100), ("acceptance.mode", "stochastic"),
                                         ("trace.num_steps", 2))),
    "aime_qwen7b_h20": ("aime_qwen7b_h20", (("trace.prompts_per_step", 16),)),
    "aime_qwen7b_64xh100_steps": ("aime_qwen7b_64xh100", (("trace.prompts_per_step", 16), ("trace.num_steps", 3),
                                                          ("acceptance.mode", "expected"))),
}


def _run(scenario: str | None, sets: tuple[tuple[str, object], ...]) -> tuple[Any, pd.DataFrame, pd.DataFrame]:
    s = resolve(scenario, [(k, v, "--set") for k, v in sets]).scenario
    inputs = prepare(s)
    if s.presets:
        events, _, summary = compare_presets(s, inputs)
    else:
        events, summary = compare_policies(s, inputs)
    return inputs, events, summary


def _both(monkeypatch: pytest.MonkeyPatch, inputs: Any, events: pd.DataFrame, summary: pd.DataFrame
          ) -> tuple[list[RunWarning], list[RunWarning]]:
    new = scenario_warnings(inputs, events, summary)
    with monkeypatch.context() as m:
        m.setattr(rw, "run_warnings", reference_run_warnings)
        ref = scenario_warnings(inputs, events, summary)
    return new, ref


def _assert_identical(new: list[RunWarning], ref: list[RunWarning]) -> None:
    assert [w.line() for w in new] == [w.line() for w in ref]
    assert new == ref
    assert warnings_frame(new).to_csv(index=False) == warnings_frame(ref).to_csv(index=False)


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[Any, pd.DataFrame, pd.DataFrame]]:
    return {name: _run(*case) for name, case in CASES.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_grouped_warnings_equal_the_per_filter_reference(monkeypatch: pytest.MonkeyPatch, runs: dict,
                                                         name: str) -> None:
    new, ref = _both(monkeypatch, *runs[name])
    _assert_identical(new, ref)


def test_the_cases_fire_every_kind(monkeypatch: pytest.MonkeyPatch, runs: dict) -> None:
    # the comparison above means something only where there are warnings to compare
    kinds = {w.kind for name in CASES for w in _both(monkeypatch, *runs[name])[0]}
    assert kinds >= {"switch_never_fired", "switch_late", "switch_cost", "sd_slower", "rl_dominated"}, kinds


def test_seed_columns_and_shuffled_tables_give_identical_warnings(monkeypatch: pytest.MonkeyPatch,
                                                                  runs: dict) -> None:
    # several seeds in one table (a seed column), and the event rows in another order (the grouping
    # must keep each group's rows in table order, as the filters did)
    inputs, events, summary = runs["presets_h20_steps"]
    seeds = (pd.concat([events.assign(seed=0), events.assign(seed=1).iloc[::-1]], ignore_index=True),
             pd.concat([summary.assign(seed=0), summary.assign(seed=1)], ignore_index=True))
    new, ref = _both(monkeypatch, inputs, *seeds)
    assert any("seed" in w.held for w in new)
    _assert_identical(new, ref)
    shuffled = events.sample(frac=1.0, random_state=3)
    _assert_identical(*_both(monkeypatch, inputs, shuffled, summary))


def _cli(monkeypatch: pytest.MonkeyPatch, args: list[str], out: Any, reference: bool) -> tuple[str, list[str]]:
    with monkeypatch.context() as m:
        if reference:  # and each seed's whole table, as the reference reads it (no streamed columns)
            m.setattr(rw, "run_warnings", reference_run_warnings)
            m.setattr(SeedSink, "streams", False)
        res = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.output.splitlines() if ln.startswith("warning:")]
    return (out / "warnings.csv").read_text(), lines


@pytest.mark.parametrize("args", [
    ["--scenario", "aime_qwen7b_h20", "--set", "trace.prompts_per_step=16", "--seeds", "2"],
    ["--trace", "intern_s1_math", "--gpus", "8", "--tp", "2", "--gpu", "H20", "--preset", "tlt", "--steps", "2",
     "--set", "trace.prompts_per_step=32", "--seeds", "2", "--acceptance", "stochastic"],
])
def test_cli_warnings_csv_and_printed_lines_are_identical(monkeypatch: pytest.MonkeyPatch, tmp_path,
                                                          args: list[str]) -> None:
    full = ["sim", "run", *args, "--perfetto", "off"]
    csv_new, lines_new = _cli(monkeypatch, full, tmp_path / "new", reference=False)
    csv_ref, lines_ref = _cli(monkeypatch, full, tmp_path / "ref", reference=True)
    assert lines_new, "no warning printed: nothing compared"
    assert csv_new == csv_ref
    assert lines_new == lines_ref
    # the events written seed by seed (presets: run by run) are the same file either way
    assert (tmp_path / "new" / "events.parquet").read_bytes() == (tmp_path / "ref" / "events.parquet").read_bytes()


@pytest.mark.parametrize("name", ["presets_h20_steps", "h20_cost_and_slower"])
def test_columns_joined_run_by_run_give_the_whole_tables_warnings(monkeypatch: pytest.MonkeyPatch, runs: dict,
                                                                  name: str) -> None:
    # a --seeds run of whole RL runs keeps each run's columns (EventColumns.detached) and joins them
    inputs, events, summary = runs[name]
    parts = [rw.EventColumns.of(part).detached() for _, part in events.groupby("policy", sort=False)]
    assert len(parts) > 1
    assert all(getattr(p, f).base is None for p in parts for f in rw.EventColumns._ARRAYS)  # no view keeps a table
    joined = rw.EventColumns.joined(parts)
    whole = rw.EventColumns.of(events)
    for f in rw.EventColumns._ARRAYS:
        assert np.array_equal(getattr(joined, f), getattr(whole, f)), f
    assert (joined.policies, joined.configs) == (whole.policies, whole.configs)
    kw = rw.scenario_models(inputs, summary)
    cost, accept = kw.pop("cost"), kw.pop("accept")
    assert rw.run_warnings(joined, summary, cost, accept, **kw) == rw.run_warnings(events, summary, cost, accept, **kw)


def test_rows_per_worker_stay_in_table_order() -> None:
    # the per-row sums (time lost before the switch, seconds paid, SD's gain) run in table order as the
    # filters ran them, so each worker's positions must be exactly a filter's: one stable grouping
    worker = np.random.default_rng(0).integers(0, 16, size=5000)
    parts = rw._per_worker(worker)
    assert list(parts) == sorted(set(worker.tolist()))
    for w, idx in parts.items():
        assert np.array_equal(idx, np.flatnonzero(worker == w)), w


def test_each_subject_is_judged_with_its_own_models(runs: dict) -> None:
    # the speedup table is shared across a subject's steps, never across subjects: the same events
    # judged with H20's and with H100's models must give each its own numbers
    h20, events, summary = runs["h20_cost_and_slower"]
    h100 = runs["late_stochastic"][0]
    one = events[events["policy"].isin(["elastic+beg-mab", "no-sd"])]
    twice = pd.concat([one, one[one["policy"] == "elastic+beg-mab"].assign(policy="on-h100")], ignore_index=True)
    kw: dict[str, Any] = dict(context_tokens=2048, gpu="H20", specs={"on-h100": "elastic+beg-mab"},
                              costs={"on-h100": (h100.cost, h100.accept)})
    new = rw.run_warnings(twice, summary, h20.cost, h20.accept, **kw)
    ref = reference_run_warnings(twice, summary, h20.cost, h20.accept, **kw)
    texts = {s: [w.message.partition(": ")[2] for w in new if w.subject == s] for s in ("elastic+beg-mab", "on-h100")}
    assert texts["elastic+beg-mab"] and texts["on-h100"] and texts["elastic+beg-mab"] != texts["on-h100"], texts
    _assert_identical(new, ref)

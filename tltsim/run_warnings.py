"""Warnings about a simulated run: where a policy's SD setting failed in ways the speedup table hides.

A speedup of 0.996x says *that* a policy did not pay, not *why*. These checks read a run's event log
and summary (what ``tlt sim run`` writes) with the scenario's cost and acceptance models and name the
cause, per policy:

* ``switch_never_fired`` — an elastic policy never turned SD on on some worker although SD would have
  paid at that worker's smallest running batch (the threshold is below every batch the worker ran);
* ``switch_late`` — the switch did fire, but only after the worker had spent a noticeable share of
  its rollout at batch sizes where SD already paid;
* ``switch_cost`` — on some worker the switch (re-prefill or drafter catch-up) cost more seconds than
  SD's iterations saved;
* ``sd_slower`` — the policy ran SD at batch sizes where, on this GPU, an SD iteration is slower than a
  plain one (:func:`tltcore.sd_speedup.sd_speedup_table` below 1x);
* ``rl_dominated`` — whole RL runs: reward or training takes so much of veRL's step that a rollout
  speedup cannot show end to end (Amdahl's bound is given). Whole RL runs also get the checks above
  for each preset's SD policy, against ``verl``'s rollout.

Everything here is a pure function of tables and models (no simulation, no I/O), so ``tlt sim run``,
``tlt report`` and a later ``tlt advise`` print the same lines. It lives in :mod:`tltsim` rather than
:mod:`tltcore` because it reads the simulator's event-log conventions (the ``no-sd`` baseline run of
the same workload, preset summaries) and builds policies from specs with the scenario's models.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from tltcore.policy.base import SDConfig
from tltcore.sd_speedup import sd_speedup_table

#: The kinds of warning, in the order they are printed.
WARNING_KINDS = ("switch_never_fired", "switch_late", "switch_cost", "sd_slower", "rl_dominated")

#: The results-folder file the warnings are written to (``tlt report`` reads it back).
WARNINGS_CSV = "warnings.csv"

#: Columns of ``warnings.csv`` (one row per :class:`RunWarning`).
WARNING_COLUMNS = ("kind", "subject", "step", "worker", "workers", "held", "message")

#: SD "would have paid" at a batch when the best of the policy's shapes gives at least this per-iteration
#: speedup there. Above 1 on purpose: a 2% per-iteration gain is inside the cost model's error and is
#: wiped out by the switch's re-prefill, so a switch that skips it is not a failure worth a warning.
PAYS_SPEEDUP = 1.10

#: A switch fired "late" when the SD-on-time it missed before firing (no-SD seconds at batches where
#: SD pays, times the share SD would have saved) is at least this share of the worker's rollout:
#: 5% is about the spread the dealing seed alone moves a makespan by, so smaller losses are noise.
LATE_LOSS_SHARE = 0.05

#: A worker's switch cost is worth a warning only when it is at least this share of its rollout time:
#: a static policy's drafter catch-up at the first iteration costs milliseconds and is no finding.
MIN_SWITCH_SHARE = 0.01

#: Below this per-iteration speedup SD is slower than plain decoding (the definition, not a margin).
SLOWER_BELOW = 1.0

#: ``sd_slower`` fires when at least this share of a policy's SD decode seconds ran at (shape, batch)
#: pairs below :data:`SLOWER_BELOW`; a few tail iterations at a slow shape are a bandit exploring.
MIN_SLOW_SD_SHARE = 0.05

#: :func:`slow_span` calls a slow range "most batch sizes >= b" when at least this share of the used
#: batch sizes from ``b`` up are slow: 90% keeps a range with a few hairline exceptions one range.
MOSTLY = 0.9

#: Whole RL runs: below this rollout share of veRL's step, most of the step is not rollout, so even an
#: infinitely fast rollout gives less than 2x end to end (Amdahl: 1 / (1 - 0.5)).
MIN_ROLLOUT_SHARE = 0.5

#: Whole RL runs: reward above this share of veRL's step (a sandbox, an LLM judge) caps the gain to
#: 1 / 0.25 = 4x even with a free rollout, and users report "no end-to-end gain" from here on.
MAX_REWARD_SHARE = 0.25

#: The rollout-only baseline policy and the RL-run baseline preset (their rows are never warned about).
BASELINE_POLICY = "no-sd"
BASELINE_PRESET = "verl"


@dataclass(frozen=True)
class RunWarning:
    """One finding: ``kind`` (:data:`WARNING_KINDS`), the policy or preset it is about (``subject``),
    the RL step (None: the whole run), the worker named in the message as the example (None: not per
    worker), every worker it holds on, at how many seeds or steps it holds (``held``, empty for one
    run of one step) and the sentence printed after ``warning:``."""

    kind: str
    subject: str
    step: int | None
    worker: int | None
    workers: tuple[int, ...]
    message: str
    held: str = ""

    def line(self) -> str:
        """The printed line (without the ``warning:`` prefix)."""
        return f"{self.message} ({self.held})" if self.held else self.message


# ---- models ---------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=256)
def policy_shapes(spec: str) -> tuple[SDConfig, ...]:
    """The draft shapes the policy ``spec`` can choose (its inner policy's, under ``elastic``), by the
    policies' own declarations (:func:`tltcore.policy.shapes.policy_shapes`). Empty for ``no-sd``;
    TLT's four trees for a policy type that declares none. Memoised: a pure function of the text, and
    the warnings of a long run ask it per step."""
    from tltcore.policy.beg_mab import DEFAULT_ARMS
    from tltcore.policy.registry import spec_shapes

    shapes = spec_shapes(spec)
    return tuple(DEFAULT_ARMS) if shapes is None else shapes


@functools.lru_cache(maxsize=256)
def elastic_switch(spec: str) -> tuple[int, int] | None:
    """The elastic switch of ``spec``: (batch threshold, consecutive iterations at or below it before
    it fires); None when the policy is not elastic (memoised, as :func:`policy_shapes`)."""
    from tltcore.policy.spec import ElasticSpec, as_spec

    parsed = as_spec(spec)
    if not isinstance(parsed, ElasticSpec):
        return None
    return parsed.effective_threshold, parsed.effective_consecutive


def typical_context(workloads: Iterable[Any]) -> int:
    """The context length an average decode token sees: prompt plus half the response, weighted by
    response tokens (long responses decode more tokens, at longer contexts). 2,048 with no tokens."""
    num = den = 0.0
    for w in workloads:
        p = np.asarray(w.prompt_tokens, dtype=float)
        r = np.asarray(w.response_tokens, dtype=float)
        num += float((r * (p + r / 2)).sum())
        den += float(r.sum())
    return round(num / den) if den > 0 else 2048


def speedup_lookup(cost: Any, accept: Any, shapes: Sequence[SDConfig], batches: Iterable[int],
                   context_tokens: int) -> dict[tuple[str, int], float]:
    """``{(shape name, batch): per-iteration SD speedup}`` at ``context_tokens``."""
    bs = sorted({int(b) for b in batches if int(b) >= 1})
    if not shapes or not bs:
        return {}
    table = sd_speedup_table(cost, accept, shapes, bs, context_tokens=context_tokens)
    return {(c, int(b)): float(v) for c, b, v in zip(table["config"], table["batch"], table["speedup"], strict=True)}


def batch_ranges(batches: Sequence[int], used: Sequence[int]) -> str:
    """``batches`` (a subset of the sorted ``used`` batch sizes) as runs over ``used``:
    ``"batch >= 8"`` when the run reaches the largest used batch, else ``"batch 8-64"``; runs joined
    by ``, ``; ``"every batch size (1-64)"`` when it is all of them."""
    used = sorted(set(int(u) for u in used))
    pick = set(int(b) for b in batches)
    runs: list[tuple[int, int]] = []
    start = prev = None
    for u in used:
        if u in pick:
            start = u if start is None else start
            prev = u
        elif start is not None:
            runs.append((start, prev))  # type: ignore[arg-type]
            start = None
    if start is not None:
        runs.append((start, prev))  # type: ignore[arg-type]
    if runs == [(used[0], used[-1])] and len(used) > 1:
        return f"every batch size ({used[0]}-{used[-1]})"
    parts = []
    for a, b in runs:
        if b == used[-1] and a != b:
            parts.append(f"batch >= {a}")
        else:
            parts.append(f"batch {a}" if a == b else f"batch {a}-{b}")
    return ", ".join(parts)


def slow_span(batches: Sequence[int], used: Sequence[int]) -> str:
    """:func:`batch_ranges`, or ``"most batch sizes >= 57"`` when the slow batches are at least
    :data:`MOSTLY` of the used ones from the first slow one up: a cost model's tile steps make a few
    batch sizes in a slow range pay by a hair, and listing each gap would hide the finding."""
    pick = set(int(b) for b in batches)
    above = [u for u in sorted(set(int(u) for u in used)) if pick and u >= min(pick)]
    if pick and len(pick) < len(above) and len(pick) >= MOSTLY * len(above):
        return f"most batch sizes >= {min(pick)}"
    return batch_ranges(batches, used)


def sd_slower_batches(cost: Any, accept: Any, shapes: Sequence[SDConfig], batches: Iterable[int],
                      context_tokens: int) -> dict[str, list[int]]:
    """Per shape, the batch sizes of ``batches`` where one SD iteration is slower than a plain one:
    the GPU-level fact behind ``sd_slower`` (``tlt advise`` can call it without a run)."""
    speed = speedup_lookup(cost, accept, shapes, batches, context_tokens)
    out: dict[str, list[int]] = {}
    for (name, b), v in sorted(speed.items(), key=lambda kv: kv[0][1]):
        if v < SLOWER_BELOW:
            out.setdefault(name, []).append(b)
    return out


# ---- per-policy checks ----------------------------------------------------------------------------
def _dur(rows: pd.DataFrame) -> np.ndarray:
    return (rows["t_end"] - rows["t_start"]).to_numpy(dtype=float)


def _is_sd(rows: pd.DataFrame) -> np.ndarray:
    return (rows["sd_config"].astype(str) != "off").to_numpy()


class _PlainIteration:
    """Seconds of one plain decode iteration at batch ``b``: the baseline's plain decode rows' mean at
    that batch (interpolated over batch), or the cost model at ``context_tokens`` without rows."""

    def __init__(self, batch: np.ndarray, dur: np.ndarray, iterations: np.ndarray, cost: Any,
                 context_tokens: int) -> None:
        self.cost, self.context_tokens = cost, int(context_tokens)
        self.xs = self.ys = None
        if len(batch):
            per = pd.DataFrame({"b": batch, "d": dur, "i": iterations})
            agg = per.groupby("b").sum()
            self.xs, self.ys = agg.index.to_numpy(dtype=float), (agg["d"] / agg["i"]).to_numpy(dtype=float)

    def __call__(self, b: int) -> float:
        if self.xs is not None:
            return float(np.interp(b, self.xs, self.ys))
        return float(self.cost.decode_time(np.full(int(b), self.context_tokens)))

    def table(self, batches: Sequence[int]) -> np.ndarray:
        """``[self(b) for b in batches]`` as an array (``numpy.interp`` prices each element as its scalar call)."""
        if self.xs is not None:
            return np.interp(np.asarray(batches, dtype=float), self.xs, self.ys)
        return np.array([self(b) for b in batches], dtype=np.float64)


def _plain_iteration_s(batch: np.ndarray, dur: np.ndarray, iterations: np.ndarray, cost: Any,
                       context_tokens: int) -> _PlainIteration:
    """:class:`_PlainIteration` from the baseline's plain decode rows (batch sizes, seconds, iterations)."""
    return _PlainIteration(batch, dur, iterations, cost, context_tokens)


def _nosd_iteration_s(base: pd.DataFrame, cost: Any, context_tokens: int) -> Any:
    """:func:`_plain_iteration_s` of the baseline run's rows ``base`` (a table)."""
    dec = base[(base["kind"] == "decode") & ~_is_sd(base)] if len(base) else base
    if len(dec):
        return _plain_iteration_s(dec["batch_size"].to_numpy(), _dur(dec), dec["iterations"].to_numpy(), cost,
                                  context_tokens)
    return _plain_iteration_s(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=np.int64), cost,
                              context_tokens)


def _fmt_workers(workers: Sequence[int], total: int) -> str:
    return f"{len(workers)} of {total} worker{'s' if total != 1 else ''}"


#: Event kinds during which a worker is busy (its rollout span runs from the first to the last).
BUSY_KINDS = ("prefill", "decode", "switch_reprefill", "catch_up")

#: Event kinds that are the price of turning SD on (``switch_cost``).
SWITCH_KINDS = ("switch_reprefill", "catch_up")


def _per_worker(worker: np.ndarray) -> dict[int, np.ndarray]:
    """Row positions per worker, each in table order: one grouping pass instead of a filter of the
    whole table per worker (which made the warnings of a 100-step run most of its CPU time)."""
    order = np.argsort(worker, kind="stable")
    keys, starts = np.unique(worker[order], return_index=True)
    return {int(k): part for k, part in zip(keys, np.split(order, starts[1:]), strict=True)}


def _in_order_sum(terms: np.ndarray) -> float:
    """``0.0 + terms[0] + terms[1] + ...`` added one by one in order, as a Python loop (or ``sum``) adds
    them: ``add.accumulate`` is that sequential sum (``ndarray.sum`` is pairwise, another float)."""
    seq = np.empty(len(terms) + 1)
    seq[0] = 0.0
    seq[1:] = terms
    return float(np.add.accumulate(seq)[-1])


def _lookup(used: Sequence[int], table: Any) -> Any:
    """``values -> [f(v) for v in values]`` as a float array, for values among ``used`` (sorted batch
    sizes), ``table(used)`` giving ``f`` of every used batch size (a pure function of it) when first needed."""
    keys = np.asarray(used, dtype=np.int64)
    known: list[np.ndarray] = []

    def of(values: np.ndarray) -> np.ndarray:
        if not known:
            known.append(np.asarray(table(used), dtype=np.float64))
        return known[0][np.searchsorted(keys, values)]

    return of


@dataclass(frozen=True)
class EventColumns:
    """The columns of an event table the checks read, each read once into an array (strings as codes
    into their distinct values), and every (policy, step)'s row positions in table order: what one
    grouped pass over the table gives, instead of a filter of the whole table per policy, step and
    worker (which made the warnings most of a 100-step run's CPU time)."""

    policies: tuple[str, ...]  # in first-seen order
    policy: np.ndarray  # codes into policies
    step: np.ndarray
    rollout: np.ndarray  # phase == "rollout"
    decode: np.ndarray  # kind == "decode"
    busy: np.ndarray  # kind in BUSY_KINDS
    paid: np.ndarray  # kind in SWITCH_KINDS
    configs: tuple[str, ...]  # sd_config values as text
    config: np.ndarray  # codes into configs
    sd: np.ndarray  # sd_config (as text) != "off"
    t_start: np.ndarray
    t_end: np.ndarray
    dur: np.ndarray
    batch: np.ndarray
    iterations: np.ndarray
    tokens: np.ndarray
    prefill: np.ndarray
    worker: np.ndarray

    #: The per-row fields (the rest are the code tables).
    _ARRAYS = ("policy", "step", "rollout", "decode", "busy", "paid", "config", "sd", "t_start", "t_end", "dur",
               "batch", "iterations", "tokens", "prefill", "worker")

    @classmethod
    def of(cls, events: pd.DataFrame) -> EventColumns:
        def codes(name: str) -> tuple[np.ndarray, list[str]]:
            c, uniques = pd.factorize(events[name], use_na_sentinel=False)
            return c, pd.Series(uniques, dtype=events[name].dtype).astype(str).tolist()

        policy, policies = codes("policy")
        phase, phases = codes("phase")
        kind, kinds = codes("kind")
        config, configs = codes("sd_config")

        def kind_in(names: Sequence[str]) -> np.ndarray:
            return np.isin(kind, [i for i, k in enumerate(kinds) if k in names])

        t_start, t_end = events["t_start"].to_numpy(dtype=float), events["t_end"].to_numpy(dtype=float)
        rollout = phase == phases.index("rollout") if "rollout" in phases else np.zeros(len(phase), dtype=bool)
        return cls(tuple(policies), policy, events["step"].to_numpy(), rollout,
                   kind_in(("decode",)), kind_in(BUSY_KINDS), kind_in(SWITCH_KINDS), tuple(configs), config,
                   np.array([c != "off" for c in configs], dtype=bool)[config] if configs else np.zeros(0, dtype=bool),
                   t_start, t_end, (events["t_end"] - events["t_start"]).to_numpy(dtype=float),
                   events["batch_size"].to_numpy(), events["iterations"].to_numpy(), events["tokens"].to_numpy(),
                   events["prefill_tokens"].to_numpy(), events["worker"].to_numpy())

    def __len__(self) -> int:
        return len(self.step)

    def detached(self) -> EventColumns:
        """These columns as arrays of their own: :meth:`of` reads some as views into the table's
        blocks, which would keep the whole table alive after it is dropped."""
        return replace(self, **{f: np.array(getattr(self, f)) for f in self._ARRAYS})

    @classmethod
    def joined(cls, parts: Sequence[EventColumns]) -> EventColumns:
        """The columns of the tables of ``parts`` stacked in order: equal to :meth:`of` of their
        concatenation (the policies and configs in first-seen order, codes into them), so that a run can
        keep each preset's columns and drop its table (a long run's tables were most of its memory)."""
        if len(parts) == 1:
            return parts[0]
        policies = tuple(dict.fromkeys(p for part in parts for p in part.policies))
        configs = tuple(dict.fromkeys(c for part in parts for c in part.configs))

        def recoded(part_values: Sequence[str], codes: np.ndarray, values: tuple[str, ...]) -> np.ndarray:
            where = {v: i for i, v in enumerate(values)}
            return np.array([where[v] for v in part_values], dtype=np.intp)[codes] if len(codes) \
                else np.zeros(0, dtype=np.intp)

        fields = {"policy": np.concatenate([recoded(p.policies, p.policy, policies) for p in parts]),
                  "config": np.concatenate([recoded(p.configs, p.config, configs) for p in parts])}
        for name in cls._ARRAYS:
            if name not in fields:
                fields[name] = np.concatenate([getattr(p, name) for p in parts])
        return cls(policies=policies, configs=configs, **fields)

    def groups(self) -> dict[tuple[str, int], np.ndarray]:
        """Each (policy, step)'s row positions, in table order (one stable sort)."""
        if len(self.step) == 0:
            return {}
        low = int(self.step.min())
        span = int(self.step.max()) - low + 1
        key = self.policy.astype(np.int64) * span + (self.step - low)
        order = np.argsort(key, kind="stable")
        ordered = key[order]
        starts = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
        keys = ordered[np.concatenate(([0], starts))]
        return {(self.policies[int(k) // span], int(k) % span + low): part
                for k, part in zip(keys.tolist(), np.split(order, starts), strict=True)}


def policy_step_warnings(spec: str, step: int, cols: EventColumns, rows_at: np.ndarray, base_at: np.ndarray,
                         cost: Any, accept: Any, context_tokens: int, gpu: str = "", subject: str | None = None, *,
                         speed_cache: dict[tuple[str, int], float] | None = None,
                         best_cache: dict[int, tuple[float, str]] | None = None) -> list[RunWarning]:
    """The per-policy warnings of one RL step: ``rows_at`` the positions in ``cols`` of the events of
    policy ``spec`` in that step, ``base_at`` the baseline run's (empty when there is none), each in
    table order. ``subject``: what the warnings are about and their messages start with (a preset
    running ``spec``; default ``spec``). ``speed_cache``: :func:`speedup_lookup` entries already
    computed for the same policy, models and context (filled with the missing batch sizes; each entry
    depends on its shape and batch alone, so the steps of a run share one table instead of
    rebuilding it per step); ``best_cache``: the best shape per batch size from that table, likewise.

    The rows are split by worker in one pass; per-row sums run in table order exactly as a loop over
    the rows would add them (:func:`_in_order_sum`: same floats, bit for bit), and the speedup and
    plain-iteration lookups are memoised per batch size (pure functions of it)."""
    rows_at = rows_at[cols.rollout[rows_at]]
    dec_at = rows_at[cols.decode[rows_at]]
    if len(dec_at) == 0:
        return []
    shapes = policy_shapes(spec)
    if not shapes:
        return []
    base_dec = base_at[cols.decode[base_at]]
    d_batch = cols.batch[dec_at]
    used = sorted({int(b) for b in np.unique(d_batch)} | {int(b) for b in np.unique(cols.batch[base_dec])})
    names = [c.name for c in shapes]
    if speed_cache is None:
        speed = speedup_lookup(cost, accept, shapes, used, context_tokens)
    else:
        speed_cache.update(speedup_lookup(cost, accept, shapes, [b for b in used if (names[0], b) not in speed_cache],
                                          context_tokens))
        speed = speed_cache
    best_at: dict[int, tuple[float, str]] = {} if best_cache is None else best_cache

    def best(b: int) -> tuple[float, str]:
        if b not in best_at:
            best_at[b] = max((speed[(n, b)], n) for n in names)
        return best_at[b]

    out: list[RunWarning] = []
    who = spec if subject is None else subject
    label = spec if subject is None else f"{subject} ({spec})"
    # every column a check reads: the rollout rows (r_*) and their decode rows (d_*)
    r_start, r_end = cols.t_start[rows_at], cols.t_end[rows_at]
    r_dur, r_busy, r_paid, r_prefill = cols.dur[rows_at], cols.busy[rows_at], cols.paid[rows_at], cols.prefill[rows_at]
    d_sd = cols.sd[dec_at]
    d_start, d_end, d_dur = cols.t_start[dec_at], cols.t_end[dec_at], cols.dur[dec_at]
    d_iters, d_tokens = cols.iterations[dec_at], cols.tokens[dec_at]
    r_of = _per_worker(cols.worker[rows_at])
    d_of = _per_worker(cols.worker[dec_at])
    workers = sorted(d_of)
    plain_dec = base_dec[~cols.sd[base_dec]]
    best_of = _lookup(used, lambda bs: [best(b)[0] for b in bs])
    # the baseline's plain iteration (a pandas groupby, ~2 ms) built only when a check asks for it
    plain_of = _lookup(used, lambda bs: _plain_iteration_s(cols.batch[plain_dec], cols.dur[plain_dec],
                                                           cols.iterations[plain_dec], cost, context_tokens).table(bs))

    def span_of(w: int) -> float:
        busy = r_of[w][r_busy[r_of[w]]]
        return float(r_end[busy].max() - r_start[busy].min()) if len(busy) else 0.0

    on = f" on {gpu}" if gpu else ""
    ctx = f"{context_tokens:,} context tokens"
    switch = elastic_switch(spec)

    # -- elastic: never fired / fired late
    if switch is not None:
        threshold, consecutive = switch
        never: list[tuple[float, int, int, int, float, str]] = []
        late: list[tuple[float, int, float, float]] = []
        for w in workers:
            ix = d_of[w]
            sd = d_sd[ix]
            if not sd.any():
                bmin = int(d_batch[ix].min())
                gain, shape = best(bmin)
                if gain >= PAYS_SPEEDUP:
                    never.append((gain, w, int(d_iters[ix].sum()), bmin, gain, shape))
                continue
            t_on = float(d_start[ix][sd].min())
            before = ix[(~sd) & (d_end[ix] <= t_on)]
            g = best_of(d_batch[before])
            pays = g >= PAYS_SPEEDUP
            lost = _in_order_sum(d_dur[before][pays] * (1 - 1 / g[pays]))  # the seconds SD would have saved
            span = span_of(w)
            if span > 0 and lost >= LATE_LOSS_SHARE * span:
                late.append((lost / span, w, lost, t_on - float(r_start[r_of[w]].min())))
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
    costly: list[tuple[float, int, float, float, int]] = []
    for w in workers:
        pw = r_of[w][r_paid[r_of[w]]]
        paid = float(r_dur[pw].sum())
        span = span_of(w)
        if paid <= 0 or span <= 0 or paid < MIN_SWITCH_SHARE * span:
            continue
        sdr = d_of[w][d_sd[d_of[w]]]
        b = d_batch[sdr]
        # the plain seconds SD's tokens would have taken, less the SD seconds: t / max(b, 1) * plain - d
        gain = _in_order_sum(d_tokens[sdr] / np.maximum(b, 1) * plain_of(b) - d_dur[sdr])
        if paid > gain:
            costly.append((paid - gain, w, paid, gain, int(r_prefill[pw].sum())))
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
    if d_sd.any():
        durs = d_dur[d_sd]
        codes = cols.config[dec_at][d_sd]
        batches = d_batch[d_sd]
        pairs, inv = np.unique(np.stack([codes.astype(np.int64), batches.astype(np.int64)]), axis=1,
                               return_inverse=True)
        slow = np.array([speed.get((cols.configs[c], b), np.inf) < SLOWER_BELOW
                         for c, b in zip(pairs[0].tolist(), pairs[1].tolist(), strict=True)], dtype=bool)[inv.ravel()]
        total = float(durs.sum())
        if total > 0 and slow.any() and float(durs[slow].sum()) >= MIN_SLOW_SD_SHARE * total:
            # seconds per shape, each added in table order; shapes in the order they first ran slow
            slow_codes = codes[slow]
            first_seen = np.unique(slow_codes, return_index=True)
            per_shape = {cols.configs[int(c)]: _in_order_sum(durs[slow][slow_codes == c])
                         for c in first_seen[0][np.argsort(first_seen[1])].tolist()}
            top = max(per_shape, key=per_shape.__getitem__)
            slow_b = [b for b in used if speed.get((top, b), np.inf) < SLOWER_BELOW]
            lo, hi = slow_b[0], slow_b[-1]
            none_pay = [b for b in used if best(b)[0] < SLOWER_BELOW]
            every = (f"; none of its shapes pays at {slow_span(none_pay, used)}" if none_pay and len(shapes) > 1
                     else "")
            more = f" (and {len(per_shape) - 1} more of its shapes)" if len(per_shape) > 1 else ""
            # what those iterations achieved at the contexts they ran at: the seconds no SD's plain
            # iterations at the same batch sizes would need for the same tokens, over the seconds taken
            k, b = d_tokens[d_sd][slow], batches[slow]
            plain_need = _in_order_sum(k * plain_of(b) / np.maximum(b, 1))
            realized = plain_need / float(durs[slow].sum())
            out.append(RunWarning(
                "sd_slower", who, step, None, (),
                f"{label}: SD is slower than no-SD{on} at {slow_span(slow_b, used)} for {top}{more}: "
                f"{speed[(top, lo)]:.2f}x per iteration at batch {lo}, {speed[(top, hi)]:.2f}x at {hi} at the "
                f"workload's typical {ctx}{every}; the policy ran SD there for {float(durs[slow].sum()):.1f} s, "
                f"{100 * float(durs[slow].sum()) / total:.0f}% of its SD decode time, emitting tokens at "
                f"{realized:.2f}x the rate of plain iterations at the same batch sizes (at the contexts it ran at)"))
    return out


def rl_warnings(summary: pd.DataFrame) -> list[RunWarning]:
    """Whole RL runs (a preset summary): the step is reward- or training-dominated when veRL's
    rollout share is below :data:`MIN_ROLLOUT_SHARE` or its reward share above
    :data:`MAX_REWARD_SHARE`; the message gives Amdahl's bound for the best preset's rollout gain."""
    if "preset" not in summary.columns or "rollout_share" not in summary.columns:
        return []
    ok = summary[summary.get("status", pd.Series("ok", index=summary.index)) == "ok"]
    base = ok[ok["preset"] == BASELINE_PRESET]
    if base.empty:
        return []
    b = base.iloc[0]
    share = float(b["rollout_share"])
    total = float(b["total_s"]) if "total_s" in b else float("nan")
    reward = float(b["reward_s"]) / total if "reward_s" in b and total > 0 else 0.0
    training = float(b["actor_update_s"]) / total if "actor_update_s" in b and total > 0 else 0.0
    if not (share < MIN_ROLLOUT_SHARE or reward > MAX_REWARD_SHARE):
        return []
    others = ok[ok["preset"] != BASELINE_PRESET]
    what = "reward-dominated" if reward >= training else "training-dominated"
    msg = (f"the RL step is {what}: rollout is {100 * share:.0f}% of veRL's step, reward {100 * reward:.0f}%, "
           f"actor update {100 * training:.0f}%")
    ceiling = 1 / (1 - share) if share < 1 else float("inf")
    top = (others.loc[others["rollout_speedup"].astype(float).idxmax()]
           if len(others) and "rollout_speedup" in others else None)
    if top is not None and float(top["rollout_speedup"]) > 1:
        rs = float(top["rollout_speedup"])
        bound = 1 / (1 - share + share / rs)
        msg += (f", so {top['preset']}'s {rs:.2f}x rollout speedup gives at most {bound:.2f}x end to end "
                f"(1 / (1 - {share:.2f} + {share:.2f} / {rs:.2f}))")
    msg += f"; even a free rollout gives at most {ceiling:.2f}x"
    return [RunWarning("rl_dominated", BASELINE_PRESET, None, None, (), msg)]


def run_warnings(events: pd.DataFrame | EventColumns, summary: pd.DataFrame, cost: Any, accept: Any, *,
                 context_tokens: int = 2048, gpu: str = "", costs: Mapping[str, tuple[Any, Any]] | None = None,
                 specs: Mapping[str, str] | None = None) -> list[RunWarning]:
    """Every warning of one run (one seed), per policy (or preset) and step, each against the
    baseline's run of the same step (``no-sd``; ``verl`` for whole RL runs, which also get
    :func:`rl_warnings`); ``events`` the event table or the columns of it the checks read
    (:class:`EventColumns`). ``specs`` maps a preset to the SD policy it runs (default: the name is the
    spec); ``costs`` a policy or preset to its (cost, accept) pair (a preset's drafter kind changes
    them; default ``cost``/``accept``). Several steps are merged per (kind, subject) by
    :func:`merge_warnings`. Acceptance is the models' with the initial drafter: a preset whose drafter
    goes stale or improves is judged at its starting quality."""
    presets = "preset" in summary.columns
    head = rl_warnings(summary) if presets else []
    if not len(events):
        return head
    baseline = BASELINE_PRESET if presets else BASELINE_POLICY
    found: list[list[RunWarning]] = []
    cols = events if isinstance(events, EventColumns) else EventColumns.of(events)
    steps = sorted(int(s) for s in np.unique(cols.step))
    at = cols.groups()  # one grouping pass: each (policy, step)'s rows by position, in table order
    none = np.zeros(0, dtype=np.int64)
    for subject in cols.policies:
        spec = (specs or {}).get(subject, subject)
        if subject == baseline or spec == BASELINE_POLICY:
            continue
        c, a = (costs or {}).get(subject, (cost, accept))
        speed: dict[tuple[str, int], float] = {}  # one speedup table per subject, grown over its steps
        best: dict[int, tuple[float, str]] = {}
        for step in steps:
            found.append(policy_step_warnings(spec, step, cols, at.get((subject, step), none),
                                              at.get((baseline, step), none), c, a, context_tokens, gpu,
                                              subject=subject if subject != spec else None, speed_cache=speed,
                                              best_cache=best))
    if len(steps) <= 1:
        return head + [w for ws in found for w in ws]
    return head + merge_warnings(_by_step(found, steps), [f"step {s}" for s in steps], "steps")


def _by_step(found: list[list[RunWarning]], steps: list[int]) -> list[list[RunWarning]]:
    per: dict[int, list[RunWarning]] = {s: [] for s in steps}
    for ws in found:
        for w in ws:
            per[int(w.step) if w.step is not None else steps[0]].append(w)
    return [per[s] for s in steps]


def merge_warnings(runs: Sequence[Sequence[RunWarning]], labels: Sequence[str], what: str) -> list[RunWarning]:
    """One warning per (kind, subject) over several runs (seeds, or steps): the message of the first
    run it holds at, with ``held`` saying at how many of the runs it holds, which, and whose numbers
    are shown (``at 2 of 3 seeds: seed 1, seed 2; numbers from seed 1``), after what it already held at (a seed's
    merged steps). One run: the warnings unchanged."""
    if len(runs) <= 1:
        return [w for ws in runs for w in ws]
    first: dict[tuple[str, str], RunWarning] = {}
    where: dict[tuple[str, str], list[str]] = {}
    for ws, label in zip(runs, labels, strict=True):
        for w in ws:
            key = (w.kind, w.subject)
            first.setdefault(key, w)
            if label not in where.setdefault(key, []):
                where[key].append(label)
    out = []
    for key, w in first.items():
        held = where[key]
        note = (f"at {len(held)} of {len(runs)} {what}" + (f": {', '.join(held)}" if len(held) < len(runs) else "")
                + f"; numbers from {held[0]}")
        step = w.step if what != "steps" else None
        out.append(replace(w, held="; ".join(h for h in (w.held, note) if h), step=step))
    return out


def warnings_frame(warnings: Sequence[RunWarning]) -> pd.DataFrame:
    """``warnings.csv``: one row per warning (:data:`WARNING_COLUMNS`; ``workers`` joined by ``;``)."""
    rows = [{"kind": w.kind, "subject": w.subject, "step": w.step, "worker": w.worker,
             "workers": ";".join(map(str, w.workers)), "held": w.held, "message": w.line()} for w in warnings]
    return pd.DataFrame(rows, columns=list(WARNING_COLUMNS)).astype({"step": "Int64", "worker": "Int64"})


def seeds_warnings(events: pd.DataFrame, summary: pd.DataFrame, cost: Any, accept: Any,
                   **kw: Any) -> list[RunWarning]:
    """:func:`run_warnings` (``kw``: its keywords) of a ``--seeds`` run (``seed`` columns in both
    tables): each seed on its own, merged per (kind, subject) with the seeds it holds at; a table
    without a ``seed`` column is one run."""
    if "seed" not in events.columns or "seed" not in summary.columns:
        return run_warnings(events, summary, cost, accept, **kw)
    seeds = sorted(int(k) for k in summary["seed"].unique())
    runs = [run_warnings(events[events["seed"] == k].drop(columns="seed"),
                         summary[summary["seed"] == k].drop(columns="seed"), cost, accept, **kw) for k in seeds]
    return merge_warnings(runs, [f"seed {k}" for k in seeds], "seeds")


def scenario_models(inputs: Any, summary: pd.DataFrame) -> dict[str, Any]:
    """:func:`run_warnings`' models for a run of ``inputs`` (:class:`~tltsim.scenario.SimInputs`) as
    its keywords and positional models: ``cost``, ``accept``, the workloads' typical context, the GPU
    and, for whole RL runs (``preset`` rows in ``summary``), each preset's SD policy and models."""
    specs: dict[str, str] = {}
    costs: dict[str, tuple[Any, Any]] = {}
    if "preset" in summary.columns:
        from tltsim.rl.presets import get_preset, rollout_policy
        from tltsim.rl.run import preset_inputs

        for name in dict.fromkeys(str(p) for p in summary["preset"]):
            preset = get_preset(name)
            specs[name] = rollout_policy(preset, inputs.scenario.presets_policy)
            mine = preset_inputs(inputs.scenario, preset, inputs)
            costs[name] = (mine.cost, mine.accept)
    return {"cost": inputs.cost, "accept": inputs.accept, "context_tokens": typical_context(inputs.workloads),
            "gpu": inputs.scenario.cluster.gpu, "costs": costs, "specs": specs}


def scenario_warnings(inputs: Any, events: pd.DataFrame, summary: pd.DataFrame) -> list[RunWarning]:
    """The warnings of a run of ``inputs`` (:class:`~tltsim.scenario.SimInputs`): its cost and
    acceptance models (each preset's, for whole RL runs), GPU and the workloads' typical context
    (what ``tlt sim run`` prints; :func:`scenario_models`)."""
    kw = scenario_models(inputs, summary)
    return seeds_warnings(events, summary, kw.pop("cost"), kw.pop("accept"), **kw)


def print_warnings(console: Any, warnings: Sequence[RunWarning]) -> None:
    """``warning: ...`` lines (a rich console), one per warning, after a run's tables."""
    for w in warnings:
        console.print(f"warning: {w.line()}", markup=False, highlight=False, soft_wrap=True)

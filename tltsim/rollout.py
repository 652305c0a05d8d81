"""One RL step's rollout as a SimPy simulation: instances, continuous batching, elastic SD.

Layout. ``n_instances`` rollout instances (tensor-parallel groups of ``tp`` GPUs) share the step's
responses the way veRL does: the generation batch is ordered prompt by prompt (all samples of a
prompt adjacent) and chunked evenly, in order, over the data-parallel ranks. We chunk at *group*
granularity (``np.array_split`` over the groups), so a prompt's samples never straddle two
instances and chunk sizes differ by at most one group.

Each instance is one SimPy process running continuous batching:

* **Admission.** Waiting requests are admitted first-come-first-served while the running batch is
  below ``max_batch`` and the KV cache has room. *Reservation rule*: a request reserves
  ``prompt + response`` tokens of KV at admission (its peak footprint, which the simulator knows
  from the trace) and frees them when it finishes. This never preempts, like a vLLM instance that
  happens never to run out of blocks; it is slightly more conservative than vLLM's on-demand paging.
* **Prefill.** Newly admitted requests are prefilled before the next decode iteration (prefill
  priority, as in vLLM's default scheduler), in passes of at most ``prefill_budget`` tokens; a
  prompt longer than the budget is chunked over passes, later chunks attending to earlier ones.
  Prefill emits no response token: decode produces all ``response_tokens`` of a request.
* **Decode.** Every iteration the instance's own policy object sees a :class:`BatchView` and picks
  an :class:`SDConfig`. A plain iteration emits one token per request. An SD iteration emits each
  request's accept length (bonus included), never beyond what it has left: the expected value
  (fractional progress) in ``expected`` mode, a draw from the instance's seeded RNG in
  ``stochastic`` mode. The policy is told the :class:`Outcome`.
* **Elastic switch.** When an elastic wrapper reports ``just_switched``, every live request is
  re-prefilled (prompt + generated so far) through target and drafter before the iteration runs,
  in passes of ``prefill_budget * reprefill_budget_fraction`` (1/4, TLT's choice) tokens. Each
  pass also runs the drafter: ``drafter_prefill_time`` where the cost model has it (the roofline
  does), else ``drafter_prefill_fraction`` of the target's pass (fakes and tables).
* **Idle.** An instance that has finished all its requests idles until the step's makespan.

Performance. Between events (a request finishing, admissions) a policy that does not decide per
iteration (``per_iteration`` False), or an elastic wrapper that is off while the batch is above its
threshold, cannot change its answer, so plain decode advances in closed form with
``CostModel.decode_span_time``. Only per-iteration deciders are stepped one iteration at a time,
and consecutive iterations with the same batch size and SD config are coalesced into one event row.
Instances never interact within a step, so each process keeps a local clock and yields to SimPy
once per event row.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pandas as pd
import simpy

from tltsim.acceptance import AcceptanceModel
from tltsim.cost_model import CostModel
from tltsim.errors import InputError
from tltsim.events import EVENT_COLUMNS
from tltsim.policy.base import NO_SD, BatchView, Outcome, SDConfig, SDPolicy

ACCEPTANCE_MODES = ("expected", "stochastic")
#: Smoothing of BatchView.recent_accept (EMA weight of the newest SD iteration).
RECENT_ACCEPT_WEIGHT = 0.2
_EPS = 1e-9
_sum, _min = np.add.reduce, np.minimum.reduce  # skip ndarray.sum's Python wrapper on the hot path


class StepRequests(Protocol):
    """What the rollout needs of a step's workload (``tltsim.traces.workload.StepWorkload`` fits)."""

    step: int
    group_ids: np.ndarray
    prompt_tokens: np.ndarray
    response_tokens: np.ndarray


@dataclass(frozen=True)
class EngineConfig:
    """Per-instance engine limits and simulation switches.

    ``kv_capacity_tokens`` is the KV cache of one instance in tokens (all its GPUs together).
    ``closed_form`` and ``coalesce`` exist so tests can prove the fast path equals plain stepping.
    """

    max_batch: int = 256
    kv_capacity_tokens: int = 10**12
    prefill_budget: int = 8192
    reprefill_budget_fraction: float = 0.25
    drafter_prefill_fraction: float = 0.0
    acceptance_mode: str = "expected"
    closed_form: bool = True
    coalesce: bool = True

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.prefill_budget < 1 or self.kv_capacity_tokens < 1:
            raise ValueError(f"invalid engine config {self!r}")
        if not 0 < self.reprefill_budget_fraction <= 1:
            raise ValueError("reprefill_budget_fraction must be in (0, 1]")
        if self.acceptance_mode not in ACCEPTANCE_MODES:
            raise ValueError(f"acceptance_mode must be one of {ACCEPTANCE_MODES}")


@dataclass(frozen=True)
class RolloutResult:
    """One policy's simulated step: the event log and each instance's finish time."""

    policy: str
    step: int
    events: pd.DataFrame
    finish_times: np.ndarray  # seconds, per instance
    makespan: float


def split_over_instances(group_ids: np.ndarray, n_instances: int) -> list[np.ndarray]:
    """Request indices per instance: whole groups, in order, chunked evenly (veRL's DP split).

    Groups are taken in order of first appearance; requests keep their trace order.
    """
    group_ids = np.asarray(group_ids)
    if len(group_ids) == 0:
        return [np.zeros(0, dtype=np.int64) for _ in range(n_instances)]
    _, first, inverse = np.unique(group_ids, return_index=True, return_inverse=True)
    order_of_group = np.argsort(np.argsort(first))  # group -> rank by first appearance
    rank = order_of_group[inverse.ravel()]
    chunks = np.array_split(np.arange(len(first)), n_instances)
    out = []
    for chunk in chunks:
        if len(chunk) == 0:
            out.append(np.zeros(0, dtype=np.int64))
        else:
            out.append(np.flatnonzero((rank >= chunk[0]) & (rank <= chunk[-1])))
    return out


class _EventLog:
    """Column-wise event rows (much cheaper than one dict per row).

    Consecutive decode iterations of one instance with the same batch size and SD config are
    coalesced into one span row; each instance has its own open row.
    """

    def __init__(self, policy: str, step: int, coalesce: bool) -> None:
        self.policy, self.step, self.coalesce = policy, step, coalesce
        self.cols: dict[str, list[Any]] = {c: [] for c in EVENT_COLUMNS}
        self._open: dict[int, list[Any]] = {}

    def add(self, instance: int, kind: str, t0: float, t1: float, iterations: int, batch: int,
            cfg: SDConfig, tokens: float, drafted: int = 0, accepted: float = 0) -> bool:
        """Record a span; True when a row was closed (the instance then yields to SimPy)."""
        o = self._open.get(instance)
        if o is not None and kind == "decode" and o[5] == batch and o[6] == cfg:
            o[3] = t1
            o[4] += iterations
            o[7] += tokens
            o[8] += drafted
            o[9] += accepted
            return False
        closed = self.flush(instance)
        row = [instance, kind, t0, t1, iterations, batch, cfg, tokens, drafted, accepted]
        if kind == "decode" and self.coalesce:
            self._open[instance] = row
            return closed
        self._append(row)
        return True

    def flush(self, instance: int) -> bool:
        row = self._open.pop(instance, None)
        if row is None:
            return False
        self._append(row)
        return True

    def _append(self, row: list[Any]) -> None:
        instance, kind, t0, t1, iterations, batch, cfg, tokens, drafted, accepted = row
        c = self.cols
        c["source"].append("sim")
        c["policy"].append(self.policy)
        c["step"].append(self.step)
        c["instance"].append(instance)
        c["kind"].append(kind)
        c["t_start"].append(t0)
        c["t_end"].append(t1)
        c["iterations"].append(iterations)
        c["batch_size"].append(batch)
        c["sd_config"].append(cfg.name)
        c["depth"].append(cfg.depth)
        c["topk"].append(cfg.topk)
        c["verify_tokens"].append(cfg.verify_tokens)
        c["tokens"].append(round(tokens))
        c["drafted"].append(int(drafted))
        c["accepted"].append(round(accepted))

    def frame(self) -> pd.DataFrame:
        for instance in list(self._open):
            self.flush(instance)
        df = pd.DataFrame(self.cols, columns=list(EVENT_COLUMNS)).astype(EVENT_COLUMNS)
        return df.sort_values(["instance", "t_start", "t_end"], kind="stable").reset_index(drop=True)


def _elastic_state(policy: SDPolicy) -> tuple[bool, int | None]:
    """(is elastic wrapper, threshold) by duck typing: the wrapper exposes ``switched_on``."""
    if not hasattr(policy, "switched_on"):
        return False, None
    thr = getattr(policy, "threshold", None)
    return True, (int(thr) if thr is not None else None)


class _Instance:
    """One rollout instance's continuous-batching engine with a local clock."""

    def __init__(self, idx: int, prompts: np.ndarray, responses: np.ndarray, *, policy: SDPolicy,
                 cost: CostModel, accept: AcceptanceModel | None, engine: EngineConfig,
                 rng: np.random.Generator, log: _EventLog) -> None:
        self.idx = idx
        self.q_prompt = prompts.astype(np.int64)
        self.q_resp = np.maximum(responses.astype(np.int64), 1)
        self.next_waiting = 0
        self.policy, self.cost, self.accept, self.eng, self.rng, self.log = (
            policy, cost, accept, engine, rng, log)
        # Running requests, aligned arrays. Progress is fractional only in expected mode.
        self.expected = engine.acceptance_mode == "expected"
        self._gen_dtype = np.float64 if self.expected else np.int64
        self.prompt = np.zeros(0, dtype=np.int64)
        self.target = np.zeros(0, dtype=np.int64)  # final response length
        self.gen = np.zeros(0, dtype=self._gen_dtype)  # tokens generated so far (expected mode only)
        self.rem = np.zeros(0, dtype=self._gen_dtype)  # target - gen
        self.ctx = np.zeros(0, dtype=np.int64)  # prompt + whole tokens generated
        self.kv_used = 0
        self.t = 0.0
        self.iteration = 0
        self.recent_accept: float | None = None
        self.is_elastic, self.threshold = _elastic_state(policy)
        self._accept_cache: dict[SDConfig, float] = {}
        self._cdf_cache: dict[SDConfig, np.ndarray] = {}
        self.need_admit = True
        self.finish_time = 0.0
        self.row_closed = False

    # ---- admission and prefill -------------------------------------------------------------
    def _admit(self) -> None:
        """Admit waiting requests FCFS under max_batch and the KV reservation; prefill them."""
        self.need_admit = False
        n_wait = len(self.q_prompt) - self.next_waiting
        if n_wait == 0:
            return
        free_slots = self.eng.max_batch - len(self.prompt)
        if free_slots <= 0:
            return
        lo = self.next_waiting
        hi = lo + min(free_slots, n_wait)
        need = np.cumsum(self.q_prompt[lo:hi] + self.q_resp[lo:hi])
        fits = int(np.searchsorted(need, self.eng.kv_capacity_tokens - self.kv_used, side="right"))
        if fits == 0:
            if len(self.prompt) == 0:
                raise InputError(
                    f"a request needs {int(self.q_prompt[lo] + self.q_resp[lo])} KV tokens but instance "
                    f"{self.idx} has only {self.eng.kv_capacity_tokens}", field="engine.kv_mem_fraction")
            return
        hi = lo + fits
        self.next_waiting = hi
        self.kv_used += int(need[fits - 1])
        new_prompt = self.q_prompt[lo:hi]
        t = self._prefill_time(new_prompt, np.zeros(fits, dtype=np.int64), self.eng.prefill_budget)
        self._emit("prefill", self.t, self.t + t, self._passes, fits, NO_SD, int(new_prompt.sum()))
        self.t += t
        new_target = self.q_resp[lo:hi]
        self.prompt = np.concatenate([self.prompt, new_prompt])
        self.target = np.concatenate([self.target, new_target])
        self.gen = np.concatenate([self.gen, np.zeros(fits, dtype=self._gen_dtype)])
        self.rem = np.concatenate([self.rem, new_target.astype(self._gen_dtype)])
        self.ctx = np.concatenate([self.ctx, new_prompt])

    def _prefill_time(self, tokens: np.ndarray, cached: np.ndarray, budget: int,
                      drafter: bool = False) -> float:
        """Sum of prefill passes of at most ``budget`` new tokens, requests packed in order.

        With ``drafter`` each pass also runs through the drafter: ``cost.drafter_prefill_time``
        when the cost model has it, else ``drafter_prefill_fraction`` of the target's pass.
        """
        total = 0.0
        passes = 0
        todo = tokens.tolist()  # Python ints: the packing loop is scalar work, numpy scalars are slow
        done = cached.tolist()
        draft_fn = getattr(self.cost, "drafter_prefill_time", None) if drafter else None
        i = 0
        n = len(todo)
        while i < n:
            room = budget
            new: list[int] = []
            old: list[int] = []
            while i < n and room > 0:
                take = min(room, todo[i])
                if take > 0:
                    new.append(take)
                    old.append(done[i])
                    todo[i] -= take
                    done[i] += take
                    room -= take
                if todo[i] == 0:
                    i += 1
            if new:
                new_a, old_a = np.asarray(new, dtype=np.int64), np.asarray(old, dtype=np.int64)
                target = self.cost.prefill_time(new_a, old_a)
                total += target
                if draft_fn is not None:
                    total += draft_fn(new_a, old_a)
                elif drafter:
                    total += target * self.eng.drafter_prefill_fraction
                passes += 1
        self._passes = passes
        return total

    def _reprefill(self) -> None:
        """Elastic switch: rebuild target and drafter state of every live request (1/4 budget)."""
        ctx = self._ctx()
        budget = max(1, int(self.eng.prefill_budget * self.eng.reprefill_budget_fraction))
        t = self._prefill_time(ctx, np.zeros(len(ctx), dtype=np.int64), budget, drafter=True)
        self._emit("reprefill", self.t, self.t + t, self._passes, len(ctx), NO_SD, int(ctx.sum()))
        self.t += t

    # ---- decode ----------------------------------------------------------------------------
    def _ctx(self) -> np.ndarray:
        return self.ctx

    def _accept_len(self, cfg: SDConfig) -> float:
        a = self._accept_cache.get(cfg)
        if a is None:
            if self.accept is None:
                raise ValueError(f"policy chose SD config {cfg.name} but no acceptance model was given")
            a = float(self.accept.expected_accept_length(cfg))
            self._accept_cache[cfg] = a
        return a

    def _sample(self, cfg: SDConfig, b: int) -> np.ndarray:
        """``b`` accept lengths. Where the model publishes its length distribution
        (``accept_length_probs``), sample it by inverse CDF from a per-config cache: the
        distribution is fixed within a step and recomputing it dominated the per-iteration cost."""
        hit = self._cdf_cache.get(cfg)
        if hit is None:
            probs_fn = getattr(self.accept, "accept_length_probs", None)
            if probs_fn is None:
                drawn = self.accept.sample_accept_lengths(cfg, b, self.rng)  # type: ignore[union-attr]
                return np.asarray(drawn, dtype=np.int64)
            cdf = np.cumsum(probs_fn(cfg))
            # Inner edges behind a -inf sentinel: a draw lands in [1, depth + 1] directly (the
            # sentinel adds the bonus token's +1 without another whole-array op).
            hit = (np.concatenate(([-np.inf], cdf[:-1])), float(cdf[-1]))
            self._cdf_cache[cfg] = hit
        edges, total = hit
        return np.searchsorted(edges, self.rng.random(b) * total, side="right")

    def _constant_until_event(self, cfg: SDConfig, batch: int) -> bool:
        """True when the policy cannot change ``cfg`` before the next finish or admission."""
        if not self.eng.closed_form:
            return False
        if not self.policy.per_iteration:
            return True
        if self.is_elastic and self.threshold is not None and not cfg.enabled:
            return (not self.policy.switched_on) and batch > self.threshold  # type: ignore[attr-defined]
        return False

    def step(self) -> bool:
        """Advance by one unit (admission, a closed-form span or one iteration). False when done."""
        if self.need_admit:
            self._admit()
        b = len(self.prompt)
        if b == 0:
            self.log.flush(self.idx)
            self.finish_time = self.t
            return False
        ctx = self._ctx()
        view = BatchView(batch_size=b, context_lens=tuple(ctx.tolist()), time=self.t,
                         iteration=self.iteration, recent_accept=self.recent_accept, instance=self.idx)
        cfg = self.policy.decide(view)
        if self.is_elastic and self.policy.just_switched:  # type: ignore[attr-defined]
            self._reprefill()
        remaining = self.rem
        t0 = self.t
        if not cfg.enabled:
            if self._constant_until_event(cfg, b):
                n = max(1, math.ceil(float(remaining.min()) - _EPS))
                dt = self.cost.decode_span_time(ctx, n)
                step = np.minimum(remaining, n)
                self._emit("decode", t0, t0 + dt, n, b, cfg, float(step.sum()))
            else:
                n = 1
                dt = self.cost.decode_time(ctx)
                step = np.minimum(remaining, 1)
                emitted = float(_sum(step))
                self._observe(cfg, b, emitted, dt, 0, 0)
                self._emit("decode", t0, t0 + dt, 1, b, cfg, emitted)
        else:
            n = 1
            dt = self.cost.sd_time(ctx, cfg)
            drawn = self._accept_len(cfg) if self.expected else self._sample(cfg, b)
            step = np.minimum(remaining, drawn)
            emitted = float(_sum(step))
            drafted = cfg.verify_tokens * b
            accepted = max(0.0, emitted - b)
            a = emitted / b
            ra = self.recent_accept
            self.recent_accept = a if ra is None else (1 - RECENT_ACCEPT_WEIGHT) * ra + RECENT_ACCEPT_WEIGHT * a
            self._observe(cfg, b, emitted, dt, drafted, accepted)
            self._emit("decode", t0, t0 + dt, 1, b, cfg, emitted, drafted, accepted)
        self.t = t0 + dt
        self.iteration += n
        self.rem -= step
        if self.expected:
            self.gen += step
            self.ctx = self.prompt + np.floor(self.gen + _EPS).astype(np.int64)
        else:  # integer progress: ctx carries it, gen is not needed (saves an op per iteration)
            self.ctx += step
        if _min(self.rem) <= _EPS:
            done = self.rem <= _EPS
            keep = ~done
            self.kv_used -= int((self.prompt[done] + self.target[done]).sum())
            self.prompt, self.target, self.gen = self.prompt[keep], self.target[keep], self.gen[keep]
            self.rem, self.ctx = self.rem[keep], self.ctx[keep]
            self.need_admit = True
        return True

    def _emit(self, *args: Any) -> None:
        if self.log.add(self.idx, *args):
            self.row_closed = True

    def _observe(self, cfg: SDConfig, b: int, emitted: float, dt: float, drafted: int,
                 accepted: float) -> None:
        self.policy.observe(Outcome(config=cfg, batch_size=b, emitted_tokens=round(emitted),
                                    elapsed_s=dt, drafted_tokens=int(drafted),
                                    accepted_tokens=round(accepted), time=self.t + dt,
                                    instance=self.idx))


def _instance_process(env: simpy.Environment, inst: _Instance):
    """SimPy process: step the instance, yielding to the clock once per closed event row."""
    while inst.step():
        if inst.row_closed:
            inst.row_closed = False
            yield env.timeout(max(0.0, inst.t - env.now))
    if inst.t > env.now:
        yield env.timeout(inst.t - env.now)


def simulate_step(workload: StepRequests, *, n_instances: int, cost: CostModel,
                  accept: AcceptanceModel | None, policy_factory: Callable[[int], SDPolicy],
                  engine: EngineConfig = EngineConfig(), seed: int = 0,
                  policy_name: str | None = None) -> RolloutResult:
    """Simulate one step's rollout with one fresh policy object per instance.

    ``policy_factory(instance)`` must return a new policy for that instance. The acceptance RNG of
    instance ``i`` is seeded from ``(seed, i)`` only, so every policy sees the same random stream.
    """
    if n_instances < 1:
        raise ValueError("n_instances must be >= 1")
    parts = split_over_instances(workload.group_ids, n_instances)
    policies = [policy_factory(i) for i in range(n_instances)]
    name = policy_name or getattr(policies[0], "name", "policy")
    log = _EventLog(name, int(workload.step), engine.coalesce)
    prompts = np.asarray(workload.prompt_tokens, dtype=np.int64)
    responses = np.asarray(workload.response_tokens, dtype=np.int64)
    env = simpy.Environment()
    insts = []
    for i, idx in enumerate(parts):
        rng = np.random.default_rng([seed, i])
        inst = _Instance(i, prompts[idx], responses[idx], policy=policies[i], cost=cost, accept=accept,
                         engine=engine, rng=rng, log=log)
        insts.append(inst)
        env.process(_instance_process(env, inst))
    env.run()
    finish = np.array([inst.finish_time for inst in insts], dtype=np.float64)
    makespan = float(finish.max()) if len(finish) else 0.0
    for inst in insts:
        if inst.finish_time < makespan:
            log.add(inst.idx, "idle", inst.finish_time, makespan, 0, 0, NO_SD, 0)
    return RolloutResult(policy=name, step=int(workload.step), events=log.frame(), finish_times=finish,
                         makespan=makespan)


def run_policies(workload: StepRequests, specs: Sequence[tuple[str, Callable[[int], SDPolicy]]],
                 **kwargs: Any) -> list[RolloutResult]:
    """Run several (name, factory) policies on the same workload and seed."""
    return [simulate_step(workload, policy_factory=f, policy_name=n, **kwargs) for n, f in specs]

"""Cost-aware SD: switch speculation on when it pays for the live requests' remaining work, at any
batch size, and pick the throughput-best draft shape for the batch and contexts at hand.

Why. TLT's elastic switch looks only at the batch size: when capped long responses keep more than
``threshold`` requests running on a worker it never switches on (1.00x where SD would pay), and when
it does switch late it re-prefills every live context to gain little. BEG-MAB's buckets ignore the
contexts, which decide whether an iteration is memory- or compute-bound. This policy prices both
with the engine's own cost model (the typed interface :class:`~tltcore.policy.oracle.OracleCost`,
plus the two prefill costs a switch needs) and an acceptance estimate it learns online.

Acceptance, learned. Per draft position ``i`` (1..D, D the deepest candidate) a scale ``s_i`` on the
prior's reach: the expected accepted draft tokens of shape ``c`` are ``sum_i R_c[i] * s_i`` where
``R_c[i]`` is the prior probability that at least ``i`` tokens are accepted (the acceptance model's
``reach`` when it has one, as the simulator's presets do; else its expected accept length spread
evenly over the positions; without an acceptance model a constant per-position rate ``prior``).
Every SD :class:`Outcome` is one linear observation ``accepted per request-iteration = R_c . s``
weighted by its request-iterations, so ``s`` is a ridge regression towards ``s = 1`` (the prior
counts as ``prior_weight`` request-iterations that saw each position's prior reach, the largest over
the candidates), solved from sufficient statistics: one estimate shared by all
batch sizes and shapes (what is learnt at batch 300 with chain 4 informs batch 2 with tree 8_4_32).
``reset(step)`` multiplies the statistics by ``memory`` so a retrained or staler drafter is relearnt.
A drafter whose positions are uniformly worse (a quality scale per position, as
:class:`~tltcore.drafter.state.DrafterState` models it) is exactly representable.

The switch. The policy is OFF (drafter not kept up to date) or ON (speculating). At a re-evaluation
it predicts how the live batch drains: each request's remaining tokens ``r_i`` are the engine's
``remaining_hint`` when the policy was built with ``lengths=known`` and the engine gives one (the
simulator, from the trace: clairvoyant), else predicted as *as many again as its context holds*
(``r_i = context_i``: the doubling / ski-rental predictor, which needs no knowledge of the trace and
at most doubles what a wrong switch costs), but at least the mean response length of the earlier
steps minus the tokens emitted so far (``mean_len - progress``; learnt across steps like the
acceptance, ``memory`` weighting the past; the step's requests are counted from the batch sizes the
policy sees, its tokens from the Outcomes), and at most what the engine's response cap leaves
(``response_cap - progress``) while no request has joined the batch since the step's first decision
(every live request has then emitted the step's progress; a request that joined later may have
emitted less, so after a join the cap bounds nothing). At step 0 only the doubling predictor and
the cap speak (see the first decision below). The drain is cut at quantiles of
``r`` into ``phases`` phases (the live set and contexts taken at each phase's middle, contexts grown
by the progress made); per phase the plain time and the best SD shape's time are priced, and a
two-state dynamic program (OFF -> ON costs the switch at the phase start, ON -> OFF is free) gives
the cheapest plan (while OFF it stops after the first phase when that phase already shows switching
on now dominated: waiting one phase and then doing what switching now would do costs no more).
OFF switches on now iff the best plan switches now; ON turns off now iff the best plan is off now
(only examined when plain beats every shape at this iteration, since otherwise staying on is cheaper
now and the plan is revisited anyway). Without known lengths a switch after
plain iterations must also be *earned* (ski rental): the time SD would have saved over the plain
iterations run since SD was last on (priced at each re-evaluation's contexts) must reach the
switch's cost. A predictor can be wrong, and a switch is paid in full at once (re-prefilling ~10K
contexts on a compute-poor GPU costs more than the tail it speeds up); renting until the rent equals
the price bounds what a wrong prediction costs, as deterministic ski rental does (at most twice the
offline choice). The mirror image holds at a step's first decision, where turning on is nearly free
(the prompts' drafter prefill) but a later switch is a full re-prefill: without known lengths the
policy starts on whenever SD pays for a lone request at these contexts (the tail every rollout step
ends in), even where it loses at this batch size, and stays on, renting the loss, until the time SD
lost against plain decoding reaches what switching back on would cost; only then may the plan turn
it off (and it rents only when a later switch would cost more than switching on now by more than
one losing iteration: the native engine's catch-up prefills the drafter over the same prompts either
way, so there the rent insures nothing and the first decision follows the plan). Where the engine's
response cap is known (``response_cap``: its max_new_tokens, which every engine has), it rents only
if the plan for the whole batch running to the cap (no request ending early, contexts growing to the
cap, ``phases`` equal spans) starts on: a later switch's re-prefill is dear only while the batch is
large, and if SD would pay only once the batch has drained, switching on then re-prefills the few
requests left (DeepCoder 7B on 16 H20s, 32 requests per worker and a 16k cap: SD never pays at the
whole batch, and the rent had lasted the step, +9% over no SD). With useless
drafts SD pays at no batch size and it starts off. The switch cost is what the
engine's ``switch`` mode charges (:data:`~tltcore.engine_limits.SWITCH_MODES`): ``reprefill`` --
target and drafter prefill of every live context (priced as one pass over all of them: a slight
under-estimate of the per-pass fixed costs); ``catch_up`` -- drafter prefill of the tokens it missed
(the whole context if the drafter never ran this step); ``in_step`` -- nothing. Switching on at a
step's first decision, before any plain iteration, costs only the drafter's prefill of the new
prompts, which the engine's drafter catch-up does without ``switch_on`` (as always-on policies get
it); later switches set ``switch_on``.

Shapes and holds. While ON the shape maximising predicted emitted tokens per second
(``accept(c) * batch / sd_time(contexts, c)``) at this view is chosen. Decisions are re-evaluated
when the batch size changes or every ``recheck`` iterations and held in between, with two exceptions.
While off with no switch earned (idle, as through most of a step where SD loses) a shrinking batch
does not trigger an evaluation: it could only change the priced forgone saving, which the next
recheck prices at the contexts then (a batch growing past the size last priced still does:
admissions make SD dearer, and an over-priced regret could switch on early); an evaluation prices a
dozen shapes, and on the CPU engine, whose iterations take ~3 ms, one per finished request was
1-1.5% of a step. An idle evaluation at which SD loses outright (no saving forgone, so the regret
cannot grow) backs the recheck off to 2, 4, then 8 x ``recheck`` iterations, until one prices a saving
or the policy leaves idle: SD turns from a loss into a gain only as the batch drains or the contexts
grow, and a regret then starts at most ``8 x recheck`` iterations late (of the issue's GPU matrix's 900
runs, two earned their switch a little later, +0.16% and +0.07%; on the CPU engine 11 evaluations per
step became 4). While it rents a losing SD the evaluation comes sooner, when the loss would reach
the rent's budget, so renting never overshoots it by a whole recheck window (with a nearly free
switch, e.g. the native engine's catch-up of short prompts, that is after one iteration).
``decide`` returns ``hold = interval - iterations since the last evaluation``, so an engine that runs
a span of ``n`` iterations and reports it once leaves exactly the state that ``n`` single rounds
would (the statistics are sums, the counters add up, and no evaluation falls inside a span). Deterministic
given the sequence of calls: no randomness at all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol, cast, runtime_checkable

import numpy as np

from tltcore.drafter.state import INITIAL_DRAFTER, DrafterState
from tltcore.engine_limits import SWITCH_MODES
from tltcore.errors import InputError
from tltcore.policy.base import MAX_ARMS, MAX_POLICY_ITERATIONS, NO_SD, BatchView, Decision, Outcome, SDConfig
from tltcore.policy.beg_mab import DEFAULT_ARMS
from tltcore.policy.oracle import OracleAcceptance

#: Chains of 1..8 tokens (cheap at large batches) and TLT's four trees (best at small ones).
DEFAULT_CANDIDATES: tuple[SDConfig, ...] = (*(SDConfig.chain(k) for k in range(1, 9)), *DEFAULT_ARMS)
DEFAULT_RECHECK = 32
DEFAULT_PHASES = 8
DEFAULT_PRIOR_RATE = 0.7  # per-position acceptance without an acceptance model (SGLang-EMA's prior)
DEFAULT_PRIOR_WEIGHT = 256.0  # request-iterations: a few iterations of a large batch outweigh the prior
DEFAULT_MEMORY = 0.5  # share of the acceptance statistics a new RL step keeps
# Upper bounds. Each phase prices the drain once more per evaluation (~2.3 us per phase on this box:
# 0.08 ms per decision at the default 8, 0.2 ms at 64, 2.4 ms at 1024, and phases=100000 took 150 s of
# a 32-response step): past 64 the drain's quantiles are finer than the predicted lengths they cut.
# A prior weighing more than 2**20 request-iterations never yields to what the policy sees.
MAX_PHASES = 64
MAX_RECHECK = MAX_POLICY_ITERATIONS
MAX_PRIOR_WEIGHT = float(MAX_POLICY_ITERATIONS)
LENGTH_SOURCES = ("predicted", "known")
IDLE_BACKOFF_DOUBLINGS = 3  # idle rechecks where SD loses back off to 2, 4, then 8 x recheck

#: The candidates' accept lengths at the prior (before any SD outcome), per (acceptance model, candidates,
#: prior, prior weight): the same for every policy built on them, so a process computes them once. A
#: fresh policy's first decision spent ~40% of its time re-deriving them (12 reaches, a ridge solve, 12
#: dot products), once per rollout step where the validation builds a policy per run. Only models whose
#: reach is a pure function of their (frozen) fields are keys; others are derived per policy.
_PRIOR_ACCEPTS: dict[tuple, tuple[float, ...]] = {}
_PRIOR_ACCEPTS_MAX = 256
#: ``Decision(NO_SD, hold)`` by hold, shared by every policy of the process (a Decision is immutable): a
#: held plain decision's hold shrinks call by call, and a fresh policy (one per rollout step in the
#: validation) built a new frozen dataclass for nearly every call of its step.
_OFF: dict[int, Decision] = {}
_OFF_MAX = 4096


def phase_edges(remaining: np.ndarray | Sequence[float], levels: Sequence[float]) -> list[float]:
    """``np.unique(np.concatenate(([0.0], q[q > 0])))`` for ``q = np.quantile(remaining, levels)`` (numpy's
    default ``linear`` method) as Python floats: every value the very float numpy gives (the same index,
    weight and interpolation operations, in the same order, on IEEE doubles), for finite ``remaining``.
    A plan cuts the predicted drain at these edges at every re-plan; ``np.quantile`` over a few dozen
    requests was half of a plan's time (~120 us), on the CPU engine's critical path."""
    values = sorted(remaining.tolist() if isinstance(remaining, np.ndarray) else remaining)
    n = len(values)
    last = n - 1
    edges = {0.0}
    for q in levels:
        at = last * q  # numpy's virtual index (n - 1) * q
        if at >= last:
            v = values[last]  # numpy interpolates the last value with itself: exactly it, for a finite value
        else:
            i = math.floor(at)
            lo, hi = values[i], values[i + 1]
            gamma = at - i
            diff = hi - lo
            v = hi - diff * (1 - gamma) if gamma >= 0.5 else lo + diff * gamma  # numpy's _lerp
        if v > 0:
            edges.add(v)
    return sorted(edges)


class CostAwareCost(Protocol):
    """What the policy prices: iterations (as the greedy oracle does) and the prefills of a switch."""

    def decode_time(self, context_lens: np.ndarray) -> float: ...

    def sd_time(self, context_lens: np.ndarray, config: SDConfig) -> float: ...

    def sd_times(self, context_lens: np.ndarray, configs: Sequence[SDConfig]) -> list[float]: ...

    def prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float: ...

    def drafter_prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float: ...


class LongestContextTimes(Protocol):
    """Times that read a batch's contexts only through its size and its longest context (a measured
    table under the ``max`` rule: the native slab engine pads attention to the longest). A prefill
    pass holds only the requests with tokens to prefill; ``longest`` is the most any of them has."""

    def decode_time_at(self, batch: int, longest: int) -> float: ...

    def sd_times_at(self, batch: int, longest: int, configs: Sequence[SDConfig]) -> list[float]: ...

    def prefill_time_at(self, batch: int, longest: int) -> float: ...

    def drafter_prefill_time_at(self, batch: int, longest: int) -> float: ...


@runtime_checkable
class LongestContextCost(Protocol):
    """A cost model that may offer :class:`LongestContextTimes` (None where its times read more)."""

    def longest_context_times(self) -> LongestContextTimes | None: ...


@runtime_checkable
class ReachAcceptance(OracleAcceptance, Protocol):
    """An acceptance model that also gives, per draft position ``i``, the probability that at least
    ``i`` draft tokens are accepted (the simulator's positional presets): the prior the learnt
    per-position scales multiply. Other models give only the expected accept length."""

    def reach(self, config: SDConfig, drafter: DrafterState) -> np.ndarray: ...


class CostAware:
    """Cost-aware SD switch and shape picker (see module docstring)."""

    #: Off after plain iterations with no switch earned, no plan can turn SD on, so none is priced (a
    #: re-plan is ~100 cost lookups, a CPU engine iteration's worth). False prices it anyway: the
    #: reference the tests pin the shortcut to.
    skip_idle_plans: bool = True
    #: Off, a plan whose first phase already shows switching on now dominated (waiting a phase costs no
    #: more, see ``_plan``) prices no further phase. False prices them all: the reference it is pinned to.
    skip_dominated_plans: bool = True

    def __init__(self, cost_model: CostAwareCost, accept_model: OracleAcceptance | None = None, *,
                 candidates: Sequence[SDConfig] = DEFAULT_CANDIDATES, switch: str = "reprefill",
                 lengths: str = "predicted", recheck: int = DEFAULT_RECHECK, phases: int = DEFAULT_PHASES,
                 prior: float = DEFAULT_PRIOR_RATE, prior_weight: float = DEFAULT_PRIOR_WEIGHT,
                 memory: float = DEFAULT_MEMORY, response_cap: int | None = None, name: str = "cost-aware") -> None:
        cands = tuple(dict.fromkeys(c for c in candidates if c.enabled))
        if not cands:
            raise InputError("cost-aware needs at least one speculating candidate shape (arms)")
        if len(cands) > MAX_ARMS:
            raise InputError(f"cost-aware takes at most {MAX_ARMS} candidate shapes (arms), got {len(cands)}")
        if switch not in SWITCH_MODES:
            raise InputError(f"cost-aware switch must be one of {', '.join(SWITCH_MODES)}, got '{switch}'")
        if lengths not in LENGTH_SOURCES:
            raise InputError(f"cost-aware lengths must be one of {', '.join(LENGTH_SOURCES)}, got '{lengths}'")
        if not 1 <= recheck <= MAX_RECHECK:
            raise InputError(f"cost-aware recheck must be in [1, {MAX_RECHECK:,}] iterations, got {recheck}")
        if not 1 <= phases <= MAX_PHASES:
            raise InputError(f"cost-aware phases must be in [1, {MAX_PHASES}] (each prices the drain once more per "
                             f"decision), got {phases}")
        if response_cap is not None and response_cap < 1:
            raise InputError(f"cost-aware response_cap must be >= 1 or None, got {response_cap}")
        if not 0.0 <= prior < 1.0:
            raise InputError(f"cost-aware prior must be in [0, 1), got {prior}")
        if not 0.0 < prior_weight <= MAX_PRIOR_WEIGHT:
            raise InputError(f"cost-aware prior_weight must be in (0, {MAX_PRIOR_WEIGHT:,.0f}] request-iterations, "
                             f"got {prior_weight}")
        if not 0.0 <= memory <= 1.0:
            raise InputError(f"cost-aware memory must be in [0, 1], got {memory}")
        # Neither model is touched here: scenario validation builds policies with placeholders.
        self.cost_model, self.accept_model = cost_model, accept_model
        # a protocol check is ~20 us (typing walks the protocol's attributes): made once, not per shape
        self._positional = isinstance(accept_model, ReachAcceptance)
        # Where the cost reads a batch only through its size and longest context, batches are priced from
        # those two numbers, the contexts kept as Python ints: on the CPU engine, whose forward passes
        # leave the caches cold, each numpy call on a few dozen contexts cost ~15-20 us, and an evaluation
        # that made ~30 of them took ~0.3 ms of a ~3 ms iteration. Else per-request numpy arrays.
        self._at = cost_model.longest_context_times() if isinstance(cost_model, LongestContextCost) else None
        self.candidates = cands
        self.switch, self.lengths = switch, lengths
        self.recheck, self.phases = int(recheck), int(phases)
        self.prior, self.prior_weight, self.memory = float(prior), float(prior_weight), float(memory)
        self.response_cap = None if response_cap is None else int(response_cap)
        self.depth = max(c.depth for c in cands)
        # the plan's quantile levels, as numpy's linspace makes them (the phase edges read these floats)
        self._levels = tuple(np.linspace(0.0, 1.0, self.phases + 1)[1:].tolist())
        self.name = name
        self._reach: dict[SDConfig, np.ndarray] = {}
        self._info: np.ndarray | None = None  # _prior_info, once computed
        self._gram = np.zeros((self.depth, self.depth))
        self._moment = np.zeros(self.depth)
        self._scales: np.ndarray | None = None
        self._accepts: Sequence[float] | None = None  # accept_length per candidate, for these scales
        self._observed = False  # an SD outcome entered the statistics (the scales are no longer the prior's)
        from tltcore.acceptance import ChainAcceptance, TreeAcceptance  # it imports this package: not at the top

        pure = accept_model is None or isinstance(accept_model, (ChainAcceptance, TreeAcceptance))
        self._prior_key = (accept_model, cands, self.prior, self.prior_weight) if pure else None
        self.mean_len: float | None = None  # mean response length of the earlier steps
        self._step_requests = 0
        self._step_tokens = 0.0
        self.reset(0)

    @property
    def wants_remaining_hint(self) -> bool:
        """True when built with ``lengths=known``: the simulator then fills ``BatchView.remaining_hint``."""
        return self.lengths == "known"

    # ---- acceptance --------------------------------------------------------------------------
    def prior_reach(self, config: SDConfig) -> np.ndarray:
        """P(at least i draft tokens accepted), i = 1..D (zero past the shape's depth), by the prior."""
        hit = self._reach.get(config)
        if hit is None:
            hit = np.zeros(self.depth)
            d = min(config.depth, self.depth)
            model = self.accept_model
            if self._positional:
                reach = cast(ReachAcceptance, model).reach(config, INITIAL_DRAFTER)
                hit[:d] = np.asarray(reach, dtype=float)[:d]
            elif model is not None:
                extra = float(model.expected_accept_length(config, INITIAL_DRAFTER)) - 1.0
                hit[:d] = min(max(extra, 0.0), float(d)) / d if d else 0.0
            else:
                hit[:d] = self.prior ** np.arange(1, d + 1)
            self._reach[config] = hit
        return hit

    def _prior_info(self) -> np.ndarray:
        """Per position, the squared largest prior reach over the candidates: what one request-iteration
        observing that position tells about its scale (floored so every position stays determined).
        Fixed by the candidates and the prior, so computed once (it was a twentieth of a simulation)."""
        if self._info is None:
            top = np.max([self.prior_reach(c) for c in self.candidates], axis=0)
            self._info = np.maximum(top, 1e-3) ** 2
        return self._info

    def scales(self) -> np.ndarray:
        """The learned per-position scales ``s`` (ridge towards 1, see module docstring)."""
        if self._scales is None:
            prior = self.prior_weight * self._prior_info()
            self._scales = np.linalg.solve(self._gram + np.diag(prior), self._moment + prior)
        return self._scales

    def accept_length(self, config: SDConfig) -> float:
        """Predicted tokens emitted per request per iteration with ``config`` (bonus included)."""
        if not config.enabled:
            return 1.0
        extra = float(self.prior_reach(config) @ self.scales())
        return 1.0 + min(max(extra, 0.0), float(config.depth))

    def _accept_lengths(self) -> Sequence[float]:
        """:meth:`accept_length` of every candidate, kept until the scales change: every evaluation
        needs all of them and most see no new SD outcome (while off, none at all). Python floats: a
        dozen of them are faster to combine in plain Python than through numpy's per-call overhead.
        Before any SD outcome they are the prior's, shared by the process (:data:`_PRIOR_ACCEPTS`)."""
        if self._accepts is None:
            key = None if self._observed else self._prior_key
            hit = None if key is None else _PRIOR_ACCEPTS.get(key)
            if hit is None:
                hit = tuple(self.accept_length(c) for c in self.candidates)
                if key is not None:
                    if len(_PRIOR_ACCEPTS) >= _PRIOR_ACCEPTS_MAX:
                        _PRIOR_ACCEPTS.clear()
                    _PRIOR_ACCEPTS[key] = hit
            self._accepts = hit
        return self._accepts

    # ---- the rounds ---------------------------------------------------------------------------
    def reset(self, step: int) -> None:
        """A new rollout step: SD off, counters cleared; the acceptance statistics decay by ``memory``
        and the finished step's mean response length joins ``mean_len``."""
        if self._step_requests > 0:
            mean = 1.0 + self._step_tokens / self._step_requests  # prefill emitted each request's first token
            self.mean_len = mean if self.mean_len is None else self.memory * self.mean_len + (1 - self.memory) * mean
        self._step_requests, self._step_tokens = 0, 0.0
        self._seen_b = 0
        self._joined = False  # a request joined the batch after the step's first decision
        self._on = False
        self._ran_plain = False  # a plain iteration ran this step: switching on needs switch_on
        self._pending_switch = False
        self._was_on = False
        self._progress = 0.0  # tokens per request emitted this step (sum of emitted / batch)
        self._off_at = 0.0  # progress when SD last went off
        self._since = self.recheck  # force an evaluation at the first decide
        self._interval = self.recheck  # iterations until the next evaluation (shorter while renting)
        self._regret = 0.0  # time SD would have saved over the plain iterations since it was last on
        self._saving = 0.0  # ... per plain iteration, at the last evaluation's contexts
        self._loss = 0.0  # time SD lost against plain decoding since it last paid
        self._deficit = 0.0  # ... per SD iteration, at the last evaluation's contexts
        self._last_b = -1
        self._idle = False  # off after plain iterations with no switch earned (at the last evaluation)
        self._quiet = 0  # consecutive idle evaluations at which SD lost (no saving forgone)
        self._choice = NO_SD
        self._gram *= self.memory
        self._moment *= self.memory
        self._scales = self._accepts = None

    def decide(self, view: BatchView) -> Decision:
        # Called before every engine iteration: kept to a few attribute reads when nothing is re-priced
        # (on the CPU engine, iterations of ~3 ms, decide and observe were a third of its decision time).
        b = view.batch_size
        if b != self._seen_b:
            if b > self._seen_b:
                self._step_requests += b - self._seen_b  # admissions (what grew the batch)
                if self._seen_b:
                    self._joined = True
            self._seen_b = b
        if self._since >= self._interval or (b > self._last_b if self._idle else b != self._last_b):
            self._evaluate(view)
            self._since = 0
            self._last_b = b
        hold = self._interval - self._since
        choice = self._choice
        if choice is NO_SD:  # most calls: one Decision per hold, not one per iteration
            off = _OFF.get(hold)
            if off is None:
                if len(_OFF) >= _OFF_MAX:
                    _OFF.clear()
                off = _OFF[hold] = Decision(NO_SD, hold)
            return off
        if self._pending_switch:
            self._pending_switch = False
            return Decision(choice, hold, switch_on=True)
        return Decision(choice, hold)

    def observe(self, outcome: Outcome) -> None:
        n = int(outcome.iterations)
        if n < 0:
            n = 0
        emitted = outcome.emitted_tokens
        self._since += n
        self._step_tokens += emitted
        b = outcome.batch_size
        if b > 0:
            self._progress += emitted / b
        if outcome.config.depth <= 0:  # a plain span (``not config.enabled``, without the property call)
            if n > 0:
                self._ran_plain = True
            self._regret += n * self._saving
            return
        self._loss += n * self._deficit
        reqs = outcome.batch_size * n
        if reqs <= 0:
            return
        accepted = float(sum(outcome.accepted_per_request)) if outcome.accepted_per_request else float(
            outcome.accepted_tokens)
        x = self.prior_reach(outcome.config)
        self._gram += reqs * np.outer(x, x)
        self._moment += accepted * x
        self._scales = self._accepts = None
        self._observed = True

    # ---- evaluation ---------------------------------------------------------------------------
    def _evaluate(self, view: BatchView) -> None:
        ctx = self._contexts(view)
        if ctx is None:
            return
        self._interval = self.recheck
        acc = self._accept_lengths()
        sd_t, plain_t = self._times(ctx)
        rates = [a / t if t > 0 else 0.0 for a, t in zip(acc, sd_t, strict=True)]
        top = max(rates)
        i = rates.index(top)  # the first best, as numpy's argmax
        best = self.candidates[i]
        plain_rate = 1.0 / plain_t if plain_t > 0 else 0.0
        self._saving = max(0.0, plain_t - 1.0 / top) if top > 0 else 0.0
        self._deficit = max(0.0, sd_t[i] - acc[i] * plain_t)
        if self._on and top > plain_rate:
            self._idle = False
            self._loss = 0.0
            self._choice = best  # speculating beats plain right now: stay on
            return
        known = self.lengths == "known" and len(view.remaining_hint) == len(ctx)
        self._idle = not self._on and self._ran_plain and not self._earned(known, ctx)
        self._quiet = self._quiet + 1 if self._idle and self._saving == 0.0 else 0
        if self._quiet:  # idle, and SD loses even here: back off (see module docstring)
            self._interval = self.recheck << min(self._quiet, IDLE_BACKOFF_DOUBLINGS)
        if self.skip_idle_plans and self._idle:
            self._choice = NO_SD  # off, and no switch is earned yet: whatever the plan says, it stays off
            return
        off_now, on_now = self._plan(ctx, self._remaining(view, ctx), acc)
        # Rent only when switching on later costs more than switching on now by more than one losing
        # iteration: with the native engine's catch-up a later switch prefills the drafter over the
        # same prompts it would prefill now, so renting cannot pay.
        rent = (not known and not self._ran_plain and not self._on and self._switch_premium(ctx) > self._deficit
                and self._pays_alone(ctx, acc)  # the premium first: two lookups, and none for a catch-up
                and self._full_batch_pays(ctx, acc))  # a plan: the dearest test last
        if not self._on and (rent or (on_now < off_now and self._earned(known, ctx))):
            self._on, self._was_on = True, True
            self._pending_switch = self._ran_plain
            self._regret = self._loss = 0.0
            self._choice = best
            if rent and off_now <= on_now:
                self._rent_until(self._switch_cost(ctx, self._progress, False))
        elif self._on and off_now < on_now and (known or self._loss >= self._switch_cost(ctx, self._progress, False)):
            self._on = False
            self._off_at = self._progress
            self._regret = 0.0
            self._choice = NO_SD
        else:
            self._choice = best if self._on else NO_SD
            if self._on and off_now < on_now:  # renting: the plan would be off, the loss is under budget
                self._rent_until(self._switch_cost(ctx, self._progress, False))

    def _contexts(self, view: BatchView) -> Sequence[int] | None:
        """The view's contexts as this policy prices them (a tuple of Python ints where the cost reads
        only the batch size and longest context, else an int64 array); None for an empty batch."""
        ctx = view.context_lens
        if len(ctx) == 0:
            if view.batch_size <= 0:
                return None
            ctx = (0,) * view.batch_size  # no contexts given: assume empty ones
        if self._at is None:
            return np.asarray(ctx, dtype=np.int64)
        if min(ctx) < 0:
            raise InputError("context_lens must be non-negative", field="context_lens")
        return ctx

    def _times(self, ctx: Sequence[int]) -> tuple[list[float], float]:
        """(every candidate's SD time, the plain time) of one iteration at the (non-empty) contexts."""
        at = self._at
        if at is None:
            cost = self.cost_model
            return cost.sd_times(cast(np.ndarray, ctx), self.candidates), float(cost.decode_time(cast(np.ndarray, ctx)))
        b, top = len(ctx), max(ctx)
        return at.sd_times_at(b, top, self.candidates), at.decode_time_at(b, top)

    def _above(self, ctx: Sequence[int], remaining: Sequence[float], x: float, grow: int) -> Sequence[int]:
        """The contexts, grown by ``grow`` tokens, of the requests with more than ``x`` tokens to go."""
        if self._at is None:
            return cast(np.ndarray, ctx)[cast(np.ndarray, remaining) > x] + grow
        return [c + grow for c, r in zip(ctx, remaining, strict=True) if r > x]

    def _rent_until(self, budget: float) -> None:
        """Re-evaluate when the loss would reach ``budget`` at the current deficit per iteration (never
        later than ``recheck``): the rent is checked where it runs out, not a window later."""
        if self._deficit > 0:
            left = max(budget - self._loss, 0.0)
            self._interval = int(min(self.recheck, max(1, np.ceil(left / self._deficit))))

    def _earned(self, known: bool, ctx: Sequence[int]) -> bool:
        """Ski rental: without known lengths, a switch after plain iterations waits until SD would
        have saved its cost over them. A step's first decision (a drafter prefill of the prompts) and
        known lengths need no such proof."""
        if known or not self._ran_plain:
            return True
        return self._regret >= self._switch_cost(ctx, self._progress, False)

    def _pays_alone(self, ctx: Sequence[int], acc: Sequence[float]) -> bool:
        """Whether some shape beats plain decoding for one request at the median context: the
        rollout's tail will want SD."""
        median = int(np.median(ctx))
        sd_t, plain = self._times(np.array([median], dtype=np.int64) if self._at is None else (median,))
        return any(t < a * plain for t, a in zip(sd_t, acc, strict=True))

    def _full_batch_pays(self, ctx: Sequence[int], acc: Sequence[float]) -> bool:
        """Whether starting on now is the best plan were every live request to run to the response cap
        (the batch kept whole, its contexts growing to the cap, cut in ``phases`` equal spans): what a
        rent insures against. A rent saves a later switch's re-prefill of the live contexts, which is
        dear only if SD would pay while the batch is still large; if even the whole batch running to the
        cap never repays starting on, SD can pay only once the batch has drained, when switching on
        re-prefills the few requests left, and renting insures little. Without a known cap: True (rent)."""
        if self.response_cap is None:
            return True
        top = float(self.response_cap) - self._progress
        if top <= 0:
            return False
        whole = np.full(len(ctx), top) if self._at is None else [top] * len(ctx)
        off_now, on_now = self._plan(ctx, whole, acc, np.linspace(0.0, top, self.phases + 1))
        return on_now < off_now

    def _remaining(self, view: BatchView, ctx: Sequence[int]) -> Sequence[float]:
        """Tokens each live request is expected still to emit: the engine's hint, or the doubling
        predictor floored by the earlier steps' mean length and capped by what the response cap leaves
        (module docstring). Under an elastic wrapper the progress counts from the inner policy's first
        decision, so the cap's bound is looser there, never tighter."""
        known = self.lengths == "known" and len(view.remaining_hint) == len(ctx)
        floor = None if self.mean_len is None else self.mean_len - self._progress
        # every live request started at the first decision, so it has emitted the step's progress and may
        # emit at most the rest of the cap
        cap = None if self.response_cap is None or self._joined else max(self.response_cap - self._progress, 0.0)
        if self._at is None:
            if known:
                return np.maximum(np.asarray(view.remaining_hint, dtype=float), 0.0)
            predicted = cast(np.ndarray, ctx).astype(float)
            if floor is not None:
                predicted = np.maximum(predicted, floor)
            if cap is not None:
                predicted = np.minimum(predicted, cap)
            return predicted
        # the same, elementwise on Python floats (np.maximum/np.minimum keep the first of equal values, as
        # max/min do)
        if known:
            return [max(float(h), 0.0) for h in view.remaining_hint]
        listed = [float(c) for c in ctx]
        if floor is not None:
            listed = [max(p, floor) for p in listed]
        if cap is not None:
            listed = [min(p, cap) for p in listed]
        return listed

    def _switch_premium(self, ctx: Sequence[int]) -> float:
        """What a switch after plain iterations would cost over switching on now, before any plain
        iteration, at these contexts: what renting a losing SD insures against. A re-prefill's premium
        is the target's prefill of the contexts; a catch-up's is none (the drafter prefills the same
        contexts either way, plus the few tokens emitted meanwhile); ``in_step``'s is negative."""
        if self.switch == "catch_up" and not self._was_on:
            return 0.0  # both prefill the drafter over the whole contexts (none cached): the same two prices
        return self._switch_cost(ctx, self._progress, False) - self._switch_cost(ctx, self._progress, True)

    def _switch_cost(self, ctx: Sequence[int], progress: float, fresh: bool) -> float:
        """What turning SD on costs at these contexts, by the engine's switch mode; ``fresh``: no
        plain iteration will have run this step by then."""
        if len(ctx) == 0:
            return 0.0
        if self._at is not None:
            return self._switch_cost_at(self._at, ctx, progress, fresh)
        ctx = cast(np.ndarray, ctx)
        cost = self.cost_model
        zero = np.zeros(len(ctx), dtype=np.int64)
        if fresh:  # the step's first decision: the engine's catch-up prefills the drafter
            return float(cost.drafter_prefill_time(ctx, zero))
        if self.switch == "reprefill":
            return float(cost.prefill_time(ctx, zero) + cost.drafter_prefill_time(ctx, zero))
        if self.switch == "catch_up":
            missed = ctx if not self._was_on else np.minimum(ctx, int(np.ceil(progress - self._off_at)))
            return float(cost.drafter_prefill_time(missed, ctx - missed))
        return 0.0  # in_step: the drafter never lags

    def _switch_cost_at(self, at: LongestContextTimes, ctx: Sequence[int], progress: float, fresh: bool) -> float:
        """:meth:`_switch_cost` from each pass's size and longest context: the same passes, a pass
        holding the requests with tokens to prefill (as a table reads per-request prefills)."""
        if fresh or self.switch == "reprefill" or (self.switch == "catch_up" and not self._was_on):
            todo = [c for c in ctx if c > 0]
        elif self.switch == "catch_up":
            lag = math.ceil(progress - self._off_at)  # tokens emitted since the drafter last ran
            todo = [m for m in (min(c, lag) for c in ctx) if m > 0]
        else:
            return 0.0  # in_step: the drafter never lags
        if not todo:
            return 0.0
        b, top = len(todo), max(todo)
        if not fresh and self.switch == "reprefill":
            return at.prefill_time_at(b, top) + at.drafter_prefill_time_at(b, top)
        return at.drafter_prefill_time_at(b, top)

    def _plan(self, ctx: Sequence[int], remaining: Sequence[float], acc: Sequence[float],
              edges: Sequence[float] | None = None) -> tuple[float, float]:
        """(best predicted time to drain the batch if the policy is off now, best if it is on now,
        the switch included when it is off): a two-state dynamic program over the predicted drain's
        phases (see module docstring), cut at ``edges`` (tokens from now; by default at the
        quantiles of ``remaining``)."""
        if len(remaining) == 0:
            return 0.0, 0.0
        top = float(cast(np.ndarray, remaining).max()) if self._at is None else max(remaining)
        if top <= 0:
            return 0.0, 0.0
        if edges is None:
            edges = phase_edges(remaining, self._levels)
        n = len(edges) - 1
        plain, sd, switch = [0.0] * n, [0.0] * n, [0.0] * n

        def price(k: int, switch_cost: bool = True, times: bool = True) -> None:  # phase k, where any is live
            lo, hi = float(edges[k]), float(edges[k + 1])
            mid = 0.5 * (lo + hi)
            if top <= mid:  # no request outlives the phase's middle
                return
            if switch_cost and k == 0:
                switch[k] = self._switch_cost(ctx, self._progress, not self._ran_plain)
            elif switch_cost:
                start = self._above(ctx, remaining, lo, int(lo))  # a superset of the live set
                switch[k] = self._switch_cost(start, self._progress + lo, False)
            if times:
                length = hi - lo
                sd_t, plain_t = self._times(self._above(ctx, remaining, mid, int(mid)))  # the live set at mid-phase
                plain[k] = length * plain_t
                sd[k] = length * min(t / a for t, a in zip(sd_t, acc, strict=True))

        price(0)
        if n > 1:
            price(1, times=False)  # its switch: the shortcut below reads it, the full plan too
        if self.skip_dominated_plans and not self._on:
            # Off, the plan switches on now only if that beats waiting. Waiting one phase and then doing
            # what switching now would have done costs plain[0] + switch[1] + (the rest), switching now
            # switch[0] + sd[0] + (the same rest): where the first is no dearer, no later phase can make
            # switching now the better plan, and the pair returned is the two totals less that common
            # rest (callers only compare them). A hair of margin keeps float sums from deciding a tie.
            wait, now = float(plain[0] + (switch[1] if n > 1 else 0.0)), float(switch[0] + sd[0])
            if wait <= now * (1 - 1e-9):
                return wait, now
        for k in range(1, n):
            price(k, switch_cost=k > 1)
        on_next = off_next = 0.0
        for k in range(n - 1, 0, -1):
            on_k = min(sd[k] + on_next, plain[k] + off_next)
            off_k = min(plain[k] + off_next, switch[k] + sd[k] + on_next)
            on_next, off_next = on_k, off_k
        off_now = plain[0] + off_next
        on_now = sd[0] + on_next
        return off_now, on_now if self._on else switch[0] + on_now

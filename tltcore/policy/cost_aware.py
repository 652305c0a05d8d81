"""Cost-aware SD: switch speculation on when it pays for the live requests' remaining work, at any
batch size, and pick the throughput-best draft shape for the batch and contexts at hand.

Why. TLT's elastic switch looks only at the batch size: when capped long responses keep more than
``threshold`` requests running on a worker it never switches on (1.00x where SD would pay), and when
it does switch late it re-prefills every live context to gain little. BEG-MAB's buckets ignore the
contexts, which decide whether an iteration is memory- or compute-bound. This policy prices both
with the engine's own cost model (:class:`~tltcore.cost.protocol.CostModel`: iterations,
plus the two prefill costs a switch needs) and an acceptance estimate it learns online.

One module per concern: this one decides (the switch, the shapes, the holds);
:mod:`~tltcore.policy.cost_aware_plan` plans the drain; :mod:`~tltcore.policy.cost_aware_pricing`
prices a batch; :mod:`~tltcore.policy.cost_aware_prior` learns the acceptance.

Acceptance, learned (:mod:`tltcore.policy.cost_aware_prior`): a per-position scale on the acceptance
model's prior reach, a ridge regression towards 1 from every SD :class:`Outcome`, shared by all batch
sizes and shapes (what is learnt at batch 300 with chain 4 informs batch 2 with tree 8_4_32);
``reset(step)`` decays it by ``memory``. A drafter whose positions are uniformly worse (a quality scale
per position, as :class:`~tltcore.drafter.state.DrafterState` models it) is exactly representable.

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

Speed. While on, an evaluation at every finish prices a dozen shapes and solves the ridge estimate
(~90 us, about half of a simulation's time). The policy offers the engines the held-spans hint
(:class:`~tltcore.policy.base.HoldsAhead`): :meth:`CostAware.held_ahead` takes the rounds of a chunk's
held spans in one call, with every estimate from one stacked solve and every price from the paged-KV
sums the engine holds, the same floats, for as long as each evaluation stays on with the held shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import cast

import numpy as np

from tltcore.cost.protocol import CostModel, CostModelBase
from tltcore.engine_limits import SWITCH_MODES
from tltcore.errors import InputError
from tltcore.policy.base import MAX_ARMS, MAX_POLICY_ITERATIONS, NO_SD, BatchView, Decision, Outcome, SDConfig
from tltcore.policy.beg_mab import DEFAULT_ARMS
from tltcore.policy.cost_aware_plan import Drain, phase_edges
from tltcore.policy.cost_aware_pricing import BatchPricing, Contexts, LongestContextPricing, PerRequestPricing
from tltcore.policy.cost_aware_prior import AcceptanceEstimate, ReachAcceptance
from tltcore.policy.oracle import OracleAcceptance

__all__ = ["DEFAULT_CANDIDATES", "CostAware", "ReachAcceptance", "phase_edges"]

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


@lru_cache(maxsize=4096)
def _off(hold: int) -> Decision:
    """``Decision(NO_SD, hold)``, shared by every policy of the process (a Decision is immutable): a held
    plain decision's hold shrinks call by call, and a fresh policy (one per rollout step in the
    validation) built a new frozen dataclass for nearly every call of its step."""
    return Decision(NO_SD, hold)


class CostAware:
    """Cost-aware SD switch and shape picker (see module docstring)."""

    def __init__(self, cost_model: CostModel, accept_model: OracleAcceptance | None = None, *,
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
        # Neither model is priced here: scenario validation builds policies with placeholders.
        self.cost_model, self.accept_model = cost_model, accept_model
        # Where the cost reads a batch only through its size and longest context, batches are priced from
        # those two numbers on Python ints (cost_aware_pricing), else from per-request numpy arrays.
        at = cost_model.longest_context_times() if isinstance(cost_model, CostModelBase) else None
        self._pricing: BatchPricing = (PerRequestPricing(cost_model, cands) if at is None
                                       else LongestContextPricing(at, cands))
        self._at = at
        self.candidates = cands
        self.switch, self.lengths = switch, lengths
        self.recheck, self.phases = int(recheck), int(phases)
        self.prior, self.prior_weight, self.memory = float(prior), float(prior_weight), float(memory)
        self.response_cap = None if response_cap is None else int(response_cap)
        self.depth = max(c.depth for c in cands)
        # the plan's quantile levels, as numpy's linspace makes them (the phase edges read these floats)
        self._levels = tuple(np.linspace(0.0, 1.0, self.phases + 1)[1:].tolist())
        self.name = name
        self._estimate = AcceptanceEstimate(accept_model, cands, self.prior, self.prior_weight)
        self.mean_len: float | None = None  # mean response length of the earlier steps
        self._step_requests = 0
        self._step_tokens = 0.0
        self.reset(0)

    @property
    def wants_remaining_hint(self) -> bool:
        """True when built with ``lengths=known``: the simulator then fills ``BatchView.remaining_hint``."""
        return self.lengths == "known"

    # ---- acceptance (cost_aware_prior) ---------------------------------------------------------
    def prior_reach(self, config: SDConfig) -> np.ndarray:
        """P(at least i draft tokens accepted), i = 1..D (zero past the shape's depth), by the prior."""
        return self._estimate.prior_reach(config)

    def scales(self) -> np.ndarray:
        """The learned per-position scales (:mod:`tltcore.policy.cost_aware_prior`)."""
        return self._estimate.scales()

    def accept_length(self, config: SDConfig) -> float:
        """Predicted tokens emitted per request per iteration with ``config`` (bonus included)."""
        return self._estimate.accept_length(config)

    def _accept_lengths(self) -> Sequence[float]:
        return self._estimate.accept_lengths()

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
        self._estimate.decay(self.memory)

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
            return _off(hold)
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
        self._estimate.observe(outcome.config, reqs, accepted)

    # ---- held spans in one call (tltcore.policy.base.HoldsAhead) --------------------------------
    def held_cost(self) -> CostModel | None:
        """The cost model, where this policy prices a batch from its per-request contexts and the model
        gives its times from paged-KV sums (the hint's condition, :class:`~tltcore.policy.base.HoldsAhead`)."""
        model = self.cost_model
        if not isinstance(self._pricing, PerRequestPricing) or not isinstance(model, CostModelBase):
            return None
        return model if model.paged_kv_times() is not None else None

    def held_hold(self) -> int | None:
        """While on, every evaluation that stays on answers a hold of ``recheck`` iterations."""
        return self.recheck if self._on and not self._pending_switch and self.recheck > 1 else None

    def held_ahead(self, config: SDConfig, outcomes: list[Outcome], batch: np.ndarray, paged: np.ndarray,
                   ctx_sum: np.ndarray) -> int:
        """The rounds of ``len(outcomes)`` held spans of ``config`` (:class:`~tltcore.policy.base.HoldsAhead`):
        :meth:`observe` of each, and between them the evaluation :meth:`decide` would make at the next
        span's start, for as long as it stays on with ``config`` (the module docstring's "speculating
        beats plain right now"). That evaluation reads the acceptance estimate and the prices of every
        candidate and of plain decoding at the span's contexts: the estimates after each observation
        come from one stacked solve (:meth:`AcceptanceEstimate.observations_ahead`) and the prices
        from the model's paged-KV sums forms, the same floats as :meth:`_evaluate`'s; its state
        changes are :meth:`_evaluate`'s and :meth:`decide`'s own. Stops before the first evaluation that
        would do anything else (the usual :meth:`decide` then runs it)."""
        self.observe(outcomes[0])
        k = len(outcomes)
        if k == 1:
            return 1
        model = cast(CostModelBase, self.cost_model).paged_kv_times()
        assert model is not None  # held_cost's condition
        # the estimate before each evaluation j = 1..k-1: after outcomes[0..j-1] (the first already observed), and
        # the statistics after each later outcome, which observe would add one by one
        reqs = np.array([o.batch_size * max(int(o.iterations), 0) for o in outcomes[1:]], dtype=np.int64)
        if not reqs.all():  # observe skips an empty span's statistics: none here (spans run >= 1 iteration)
            raise ValueError("held_ahead needs spans of at least one request-iteration")
        accepted = np.array([float(sum(o.accepted_per_request)) if o.accepted_per_request else float(
            o.accepted_tokens) for o in outcomes[1:]], dtype=np.float64)
        acc, grams, moments = self._estimate.observations_ahead(config, reqs, accepted)  # acc: (k, candidates)
        sd = model.sd_many_from_sums(paged, ctx_sum, batch, self.candidates)
        plain = np.array(model.decode_times_from_sums(paged, ctx_sum, batch))
        with np.errstate(divide="ignore", invalid="ignore"):
            rates = np.where(sd > 0, acc[:k - 1] / sd, 0.0)
            plain_rate = np.where(plain > 0, 1.0 / plain, 0.0)
        best = rates.argmax(axis=1)  # the first best, as rates.index(max(rates))
        top = rates[np.arange(k - 1), best]
        stays = (top > plain_rate) & (best == self.candidates.index(config))
        batch_l = batch.tolist()
        taken = k
        for j in range(1, k):
            row = j - 1
            b = batch_l[row]
            # decide(view): no admission inside a chunk; an evaluation is due (the batch changed or the hold ran
            # out), and it stays on with config
            if not (stays[row] and b <= self._seen_b and (self._since >= self._interval or b != self._last_b)):
                taken = j
                break
            self._seen_b = b
            # _evaluate's "stay on" branch
            self._interval = self.recheck
            i = int(best[row])
            t, p, a = float(top[row]), float(plain[row]), float(acc[row, i])
            self._saving = max(0.0, p - 1.0 / t) if t > 0 else 0.0
            self._deficit = max(0.0, float(sd[row, i]) - a * p)
            self._idle = False
            self._loss = 0.0
            self._choice = self.candidates[i]
            self._since = 0
            self._last_b = b
            # observe(outcomes[j]) of an SD span: its counters here, its statistics below
            o = outcomes[j]
            n = max(int(o.iterations), 0)
            emitted = o.emitted_tokens
            self._since += n
            self._step_tokens += emitted
            self._progress += emitted / o.batch_size
            self._loss += n * self._deficit
        if taken > 1:
            self._estimate.set_observed(grams[taken - 2], moments[taken - 2])
        return taken

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
        if self._idle:
            # Off, after plain iterations (so no rent) and no switch earned: the rule below switches on only
            # by a rent or an earned switch, so whatever a plan says it stays off; none is priced (a re-plan
            # is ~100 cost lookups, a CPU engine iteration's worth)
            self._choice = NO_SD
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

    def _contexts(self, view: BatchView) -> Contexts | None:
        """The view's contexts as this policy prices them (cost_aware_pricing); None for an empty batch."""
        return self._pricing.contexts(view)

    def _times(self, ctx: Contexts) -> tuple[list[float], float]:
        """(every candidate's SD time, the plain time) of one iteration at the (non-empty) contexts."""
        return self._pricing.times(ctx)

    def _rent_until(self, budget: float) -> None:
        """Re-evaluate when the loss would reach ``budget`` at the current deficit per iteration (never
        later than ``recheck``): the rent is checked where it runs out, not a window later."""
        if self._deficit > 0:
            left = max(budget - self._loss, 0.0)
            self._interval = int(min(self.recheck, max(1, np.ceil(left / self._deficit))))

    def _earned(self, known: bool, ctx: Contexts) -> bool:
        """Ski rental: without known lengths, a switch after plain iterations waits until SD would
        have saved its cost over them. A step's first decision (a drafter prefill of the prompts) and
        known lengths need no such proof."""
        if known or not self._ran_plain:
            return True
        return self._regret >= self._switch_cost(ctx, self._progress, False)

    def _pays_alone(self, ctx: Contexts, acc: Sequence[float]) -> bool:
        """Whether some shape beats plain decoding for one request at the median context: the
        rollout's tail will want SD."""
        sd_t, plain = self._times(self._pricing.one(int(np.median(ctx))))
        return any(t < a * plain for t, a in zip(sd_t, acc, strict=True))

    def _full_batch_pays(self, ctx: Contexts, acc: Sequence[float]) -> bool:
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
        whole = self._pricing.whole(len(ctx), top)
        off_now, on_now = self._plan(ctx, whole, acc, np.linspace(0.0, top, self.phases + 1))
        return on_now < off_now

    def _remaining(self, view: BatchView, ctx: Contexts) -> Sequence[float]:
        """Tokens each live request is expected still to emit: the engine's hint, or the doubling
        predictor floored by the earlier steps' mean length and capped by what the response cap leaves
        (module docstring). Under an elastic wrapper the progress counts from the inner policy's first
        decision, so the cap's bound is looser there, never tighter."""
        known = self.lengths == "known" and len(view.remaining_hint) == len(ctx)
        floor = None if self.mean_len is None else self.mean_len - self._progress
        # every live request started at the first decision, so it has emitted the step's progress and may
        # emit at most the rest of the cap
        cap = None if self.response_cap is None or self._joined else max(self.response_cap - self._progress, 0.0)
        return self._pricing.remaining(ctx, view.remaining_hint if known else None, floor, cap)

    def _switch_premium(self, ctx: Contexts) -> float:
        """What a switch after plain iterations would cost over switching on now, before any plain
        iteration, at these contexts: what renting a losing SD insures against. A re-prefill's premium
        is the target's prefill of the contexts; a catch-up's is none (the drafter prefills the same
        contexts either way, plus the few tokens emitted meanwhile); ``in_step``'s is negative."""
        if self.switch == "catch_up" and not self._was_on:
            return 0.0  # both prefill the drafter over the whole contexts (none cached): the same two prices
        return self._switch_cost(ctx, self._progress, False) - self._switch_cost(ctx, self._progress, True)

    def _switch_cost(self, ctx: Contexts, progress: float, fresh: bool) -> float:
        """What turning SD on costs at these contexts, by the engine's switch mode; ``fresh``: no
        plain iteration will have run this step by then. ``reprefill``: target and drafter prefill of
        every live context (priced as one pass over all of them: a slight under-estimate of the per-pass
        fixed costs); ``catch_up``: drafter prefill of the tokens it missed (the whole context if the
        drafter never ran this step); ``in_step``: nothing."""
        if len(ctx) == 0:
            return 0.0
        p = self._pricing
        if fresh:  # the step's first decision: the engine's catch-up prefills the drafter
            return p.drafter_prefill(ctx, None)
        if self.switch == "reprefill":
            return p.prefill(ctx, None) + p.drafter_prefill(ctx, None)
        if self.switch == "catch_up":
            if not self._was_on:
                return p.drafter_prefill(ctx, None)
            return p.drafter_prefill(*p.lagging(ctx, math.ceil(progress - self._off_at)))
        return 0.0  # in_step: the drafter never lags

    def _drain(self, ctx: Contexts, remaining: Sequence[float], acc: Sequence[float],
               edges: Sequence[float] | None = None) -> Drain | None:
        """The predicted drain (cost_aware_plan), cut at ``edges`` (tokens from now; by default at the
        quantiles of ``remaining``), each phase priced at the requests live then; None when none is live."""
        if len(remaining) == 0:
            return None
        p = self._pricing
        top = p.longest(remaining)
        if top <= 0:
            return None

        def switch_at(k: int, lo: float) -> float:
            if k == 0:
                return self._switch_cost(ctx, self._progress, not self._ran_plain)
            start = p.above(ctx, remaining, lo, int(lo))  # a superset of the live set
            return self._switch_cost(start, self._progress + lo, False)

        def times_at(mid: float) -> tuple[list[float], float]:
            return p.times(p.above(ctx, remaining, mid, int(mid)))  # the live set at mid-phase

        return Drain(phase_edges(remaining, self._levels) if edges is None else edges, top, acc, switch_at, times_at)

    def _plan(self, ctx: Contexts, remaining: Sequence[float], acc: Sequence[float],
              edges: Sequence[float] | None = None) -> tuple[float, float]:
        """(best predicted time to drain the batch if the policy is off now, best if it is on now,
        the switch included when it is off): :meth:`Drain.totals`, which off it skips where the first phase
        already shows switching now dominated (:meth:`Drain.waiting_dominates`)."""
        drain = self._drain(ctx, remaining, acc, edges)
        if drain is None:
            return 0.0, 0.0
        drain.price(0)
        if drain.n > 1:
            drain.price(1, times=False)  # its switch: the shortcut reads it, the full plan too
        if not self._on:
            shortcut = drain.waiting_dominates()
            if shortcut is not None:
                return shortcut
        for k in range(1, drain.n):
            drain.price(k, switch_cost=k > 1)
        return drain.totals(self._on)

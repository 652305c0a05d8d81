"""The contract between speculative-decoding policies and the engines that run them.

The simulator (``tltsim.rollout``) and the real engine (``tltreal.engine``) both drive the *same*
policy objects through this interface, so this module (and the whole ``tltcore.policy`` package)
imports no SimPy, torch or vLLM.

Life cycle. One policy object lives for a whole run on one rollout worker. At the start of every RL
step the engine calls ``reset(step)`` (per-rollout state such as the elastic switch re-arms; learned
state such as BEG-MAB's reward windows persists, as in TLT). Before a decode iteration the engine
builds a :class:`BatchView` and asks ``decide(view)`` for a :class:`Decision`; it runs the decision
for ``n`` iterations (``1 <= n <= decision.hold``; an engine may always ask sooner, and ``hold=1``,
the default, is asked again every iteration) and reports what happened in one :class:`Outcome` with
``iterations == n`` through ``observe``. That is the whole contract.

Acceleration hints (optional). Engines ask less of a policy that offers more, and a policy that
cannot honour a hint simply does not offer it. They exist for speed only and are stated in full with
the simulator's fast paths that rely on them (``tltsim.rollout.fast``; the native engine holds plain
decisions through churn, ``tltreal.engine.engine``):

* a ``hold`` above 1 promises the answer stands while the running batch keeps its size, through
  churn (a request finishing while a waiting one is admitted in its place), and that the state after
  one ``observe`` of ``n`` iterations is what ``n`` single-iteration rounds would have left (one
  documented exception, of state no decision reads: a BEG-MAB bucket with a single arm,
  :mod:`tltcore.policy.beg_mab`); a policy whose answer depends on which requests run holds for one
  iteration;
* ``plain_above()`` (:class:`PlainPhases`) promises plain spans above a batch size until the policy
  next observes a batch at or below it, so an engine may run a whole plain phase without asking and
  report only its last span;
* ``ahead(...)`` (:class:`DecidesAhead`) lets a policy that must decide every iteration (its answer
  moves with the contexts and with what it observes) take the rounds of a block of iterations in one
  call, with the same arithmetic the rounds would do, so an engine that knows the block's contexts
  ahead asks once per block instead of once per iteration; with ``ahead_resume(...)``
  (:class:`ResumesAhead`) such a block may also begin without a ``decide``, the fold doing its
  arithmetic at the block's first row;
* ``decision_at(b)`` (:class:`DecidesByBatch`) says a policy answers by batch size alone and observes
  nothing, so an engine may skip its views and Outcomes;
* ``held_ahead(...)`` (:class:`HoldsAhead`) lets a policy whose held decisions are re-evaluated at
  every finish (cost-aware) take the rounds of many held spans in one call while its answer stands,
  priced from the paged-KV sums the engine already holds.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from tltcore.drafter.state import INITIAL_DRAFTER, DrafterState
from tltcore.errors import InputError

if TYPE_CHECKING:
    import numpy as np

_NAME = re.compile(r"^(\d+)_(\d+)_(\d+)$")
# Bounds of a draft tree, far above any published configuration (TLT: depth <= 12, topk 8, verify
# <= 64; EAGLE-2: topk 10), so a typo such as 1000_1000_1000 fails at once instead of building a
# 10^9-node tree.
MAX_DEPTH = 64
MAX_TOPK = 64
MAX_VERIFY = 1024
# Bounds of the policies' numeric options (tltcore.policy.registry documents them per option), so a
# spec's typo fails at once instead of running for hours or doing nothing. A batch size an option names
# (a threshold, a table row, a range) is at most the largest engine batch a scenario allows
# (tltsim.scenario.schema.MAX_BATCH); an iteration count (a hold, a streak, a reward window) at most
# 2**20, more iterations than any response has; a policy chooses among at most 64 shapes.
MAX_POLICY_BATCH = 1_000_000
MAX_POLICY_ITERATIONS = 1 << 20
MAX_ARMS = 64


def max_tree_nodes(depth: int, topk: int) -> int:
    """Draft nodes an EAGLE-2 tree offers for verification: ``topk`` after the first step, then
    each of the ``topk`` frontier nodes expands into ``topk`` children per later step
    (``8_4_48`` verifies 48 of 116 nodes)."""
    return topk + (depth - 1) * topk * topk if depth > 0 else 0


@dataclass(frozen=True, order=True)
class SDConfig:
    """Draft-tree shape. ``depth`` drafting steps, ``topk`` children per step, ``verify_tokens``
    tree nodes checked by one target forward. ``depth == 0`` means no speculative decoding.

    A chain draft of k tokens is ``SDConfig(k, 1, k)``. Named ``depth_topk_verify`` as in TLT
    (e.g. ``8_4_32``); ``"off"`` is no SD.
    """

    depth: int = 0
    topk: int = 1
    verify_tokens: int = 0

    def __post_init__(self) -> None:
        if self.depth < 0 or self.topk < 1 or self.verify_tokens < 0:
            raise InputError(f"invalid SD config {self.depth}_{self.topk}_{self.verify_tokens}: depth and "
                             "verify_tokens must be >= 0, topk >= 1")
        if self.depth > MAX_DEPTH or self.topk > MAX_TOPK or self.verify_tokens > MAX_VERIFY:
            raise InputError(f"SD config {self.depth}_{self.topk}_{self.verify_tokens} is beyond the bounds depth <= "
                             f"{MAX_DEPTH}, topk <= {MAX_TOPK}, verify_tokens <= {MAX_VERIFY}")
        if self.depth > 0 and not (1 <= self.verify_tokens <= max_tree_nodes(self.depth, self.topk)):
            raise InputError(f"SDConfig {self.name}: verify_tokens must be in "
                             f"[1, {max_tree_nodes(self.depth, self.topk)}] for an EAGLE-2 tree")
        object.__setattr__(self, "_hash", hash((self.depth, self.topk, self.verify_tokens)))

    def __hash__(self) -> int:
        # The dataclass hash of the same fields, computed once: shapes key every cost, acceptance and
        # bandit table, and a policy pricing a dozen of them per decision hashed each one every time.
        return self._hash

    @property
    def enabled(self) -> bool:
        """True when this config drafts at all."""
        return self.depth > 0

    @property
    def name(self) -> str:
        return f"{self.depth}_{self.topk}_{self.verify_tokens}" if self.enabled else "off"

    @classmethod
    def parse(cls, text: str) -> SDConfig:
        """Parse ``"8_4_32"`` or ``"off"``."""
        text = text.strip()
        if text in ("off", "none", "0", ""):
            return NO_SD
        m = _NAME.match(text)
        if not m:
            raise InputError(f"SD config '{text}' is not of the form depth_topk_verify (e.g. 8_4_32) or 'off'")
        if int(m[1]) == 0:  # 0_1_1 would be a shape that never drafts under an SD name
            raise InputError(f"SD config '{text}' has depth 0: it never drafts; write 'off' for no SD")
        return cls(int(m[1]), int(m[2]), int(m[3]))

    @classmethod
    def chain(cls, k: int) -> SDConfig:
        """A chain draft of ``k`` tokens (topk 1)."""
        return cls(k, 1, k) if k > 0 else NO_SD

    def __str__(self) -> str:
        return self.name


NO_SD = SDConfig()



#: ``Decision.hold`` of a policy whose answer cannot change while the running batch keeps its size: the
#: engine may run it until a request finishes or is admitted with none taking its place.
HOLD_UNTIL_EVENT = sys.maxsize


@dataclass(frozen=True)
class Decision:
    """What a policy wants for the next decode iterations.

    ``config``: the draft-tree shape (``NO_SD`` for a plain iteration). ``hold``: for how many
    iterations the answer stands while the running batch keeps its size (``HOLD_UNTIL_EVENT`` when
    only a change of size can change it); engines may run up to that many iterations without asking
    again. Above 1 it is an acceleration hint with promises (module docstring), which lets the
    engines advance non-learning policies in spans.
    ``switch_on``: speculation is being switched on for the live requests (TLT's elastic switch):
    the engine must bring every live request's drafter state up to date first, by its configured
    switch mode (``switch_reprefill`` of target and drafter, or a drafter ``catch_up``).
    """

    config: SDConfig = NO_SD
    hold: int = 1
    switch_on: bool = False

    def __post_init__(self) -> None:
        if self.hold < 1:
            raise ValueError(f"Decision.hold must be >= 1, got {self.hold}")
        if self.switch_on and not self.config.enabled:
            raise ValueError("a Decision that switches SD on must speculate")


@dataclass(frozen=True)
class BatchView:
    """What a policy may look at before a decode iteration.

    ``context_lens``: every running request's context (prompt + tokens generated so far), per
    request, never a mean (long tails make the mean misleading). ``recent_accept``: the engine's
    :class:`~tltcore.policy.recent_accept.RecentAccept` (tokens emitted per request per SD iteration,
    bonus included; None before any SD iteration of the run). ``worker``: the rollout worker (a
    tensor-parallel group) this view comes from. ``drafter``: the drafter the worker holds now
    (version and quality), which the greedy oracle and the acceptance model read. ``step``: the RL step.
    ``remaining_hint``: tokens each running request still has to emit, in view order, or empty (the
    default) when the engine gives none. Only the simulator knows these (from the trace), and only
    for a policy that asks for them (``wants_remaining_hint``): a clairvoyant length predictor, so a
    policy must work without it; optional so that engines that never fill it keep working.
    """

    batch_size: int
    context_lens: tuple[int, ...] = ()
    time: float = 0.0
    iteration: int = 0
    recent_accept: float | None = None
    worker: int = 0
    step: int = 0
    drafter: DrafterState = INITIAL_DRAFTER
    remaining_hint: tuple[float, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """What happened in ``iterations`` consecutive decode iterations run with ``config`` at
    ``batch_size`` running requests.

    ``emitted_tokens``: tokens the whole batch appended to its outputs, bonus tokens included (a
    plain iteration emits ``batch_size``; never past a request's last token). ``drafted_tokens``:
    draft tokens sent to verification; ``accepted_tokens``: draft tokens the target accepted in
    verification, counted whole even where the request ends inside them -- acceptance is a property
    of drafter and target, not of where a response stops (totals over the span and the batch). Both
    halves count both words this way, so measured acceptance is never censored by response ends.
    ``accepted_per_request``: accepted draft tokens of each request over the span, in view order
    (expected values in the simulator's expected mode, counts otherwise; empty for plain
    iterations). ``elapsed_s``: wall (or simulated) time of the span, drafting and verification
    included; ``time``: when it ended.
    """

    config: SDConfig
    batch_size: int
    emitted_tokens: int
    elapsed_s: float
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    time: float = 0.0
    worker: int = 0
    iterations: int = 1
    accepted_per_request: tuple[float, ...] = ()

    @property
    def accept_length(self) -> float:
        """Mean tokens emitted per request per iteration (TLT's "accept length")."""
        n = self.batch_size * self.iterations
        return self.emitted_tokens / n if n else 0.0

    @property
    def throughput(self) -> float:
        """Tokens per second over the span (BEG-MAB's reward, = accept length x batch / time)."""
        return self.emitted_tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0


@runtime_checkable
class SDPolicy(Protocol):
    """A speculative-decoding policy. Deterministic given its seed and the sequence of calls."""

    name: str

    def decide(self, view: BatchView) -> Decision: ...

    def observe(self, outcome: Outcome) -> None: ...

    def reset(self, step: int) -> None: ...


@runtime_checkable
class PlainPhases(Protocol):
    """An optional acceleration hint, not part of the policy contract: ``plain_above() -> m | None``,
    plain spans promised above batch size ``m`` (module docstring; stated in full, with the engine
    paths that use it, in ``tltsim.rollout.fast``)."""

    def plain_above(self) -> int | None: ...


@runtime_checkable
class ReadsRemaining(Protocol):
    """A policy that may read ``BatchView.remaining_hint`` (clairvoyant lengths, which only the
    simulator has): the engine fills the hint when ``wants_remaining_hint`` is True."""

    @property
    def wants_remaining_hint(self) -> bool: ...


@runtime_checkable
class DecidesAhead(Protocol):
    """An optional acceleration hint, not part of the policy contract: the rounds of a block of
    one-iteration SD spans in one call (module docstring; the engine path that uses it is
    ``tltsim.rollout.fast.ahead``).

    ``ahead(config, batch_size, emitted, ctx_rows) -> (m, decision)``: the policy's last ``decide``
    answered ``config`` with ``hold`` 1 for the view whose contexts are ``ctx_rows[0]``; the engine ran
    ``k = len(emitted)`` iterations of it at ``batch_size`` requests (none finishing before the last),
    iteration ``j`` emitting ``emitted[j]`` tokens (whole numbers), its contexts before it
    ``ctx_rows[j]`` (int64, ``k`` rows). The policy does exactly what the rounds ``observe(iteration
    0), decide(view at ctx_rows[1]), observe(iteration 1), ...`` would have done to its state, and
    stops at the first decision whose shape is not ``config``'s: ``m`` is the iterations that ran with
    ``config`` (``1 <= m <= k``) and ``decision`` that different answer, which the engine runs next;
    ``(k, None)`` when every iteration kept ``config`` (all ``k`` observed, none decided after the
    last). A policy offers it only where its ``decide`` reads nothing of a view but its batch size and
    contexts, answers ``hold`` 1 without ``switch_on``, and its ``observe`` of an SD iteration reads
    nothing but the config, batch size, iterations and emitted tokens; each decision a fresh
    ``SDConfig`` (so the event log gives every iteration its own row, as the rounds would).

    ``ahead_shapes() -> (cost, shapes) | None``: the cost model the policy prices its candidates with
    and the SD shapes it prices at every row of a block, where that is all it prices (fixed for the
    policy's life), else None. An engine timed by that same cost model may price the shapes itself
    (one call for many workers' blocks, and its own iterations' times taken from them) and pass
    ``prices``: per shape, in that order, ``cost.sd_time`` at every row of ``ctx_rows``."""

    def ahead(self, config: SDConfig, batch_size: int, emitted: list[int], ctx_rows: np.ndarray,
              prices: list[list[float]] | None = None) -> tuple[int, Decision | None]: ...

    def ahead_shapes(self) -> tuple[object, tuple[SDConfig, ...]] | None: ...


@runtime_checkable
class ResumesAhead(Protocol):
    """An optional addition to :class:`DecidesAhead`, not part of the policy contract: blocks that
    begin without a ``decide``.

    ``ahead_resume(batch_size) -> config | None``: the shape the policy's next ``decide`` at
    ``batch_size`` running requests answers unless that decision changes it (its standing answer
    there), or None where it has none. An engine that would otherwise ask ``decide`` (say after a
    request finished: a new batch size) may instead run a block of that shape and call
    ``ahead(config, batch_size, emitted, ctx_rows, prices, asked=False)``: the policy then first
    does what ``decide(view at ctx_rows[0])`` would have done to its state, and returns
    ``(0, decision)`` where that answer's shape is not ``config``'s (the engine gives the block
    back and runs ``decision``); otherwise it goes on as :class:`DecidesAhead` states. Such a policy
    also takes ``ahead(..., prices, asked=, batches=)`` with the engine's ``prices``: ``batches[j]``
    the batch size of row ``j``, where requests finish inside the block (no request waiting, the
    engine runs a block on through finishes): iteration ``j`` is observed at ``batches[j]`` and each
    row's decision is the one ``decide`` would give at its own batch size (the view after each
    finish, which the engine does not build)."""

    def ahead_resume(self, batch_size: int) -> SDConfig | None: ...


@runtime_checkable
class DecidesByBatch(Protocol):
    """An optional acceleration hint, not part of the policy contract: a policy whose ``decide`` reads
    nothing of a view but its batch size and whose ``observe`` does nothing (a static shape, vLLM's
    table). ``decision_at(batch_size) -> Decision``: what ``decide`` answers at that batch size. An
    engine may then run its spans without building views or Outcomes for it (the expected-mode tails,
    ``tltsim.rollout.fast.expected_tail``)."""

    def decision_at(self, batch_size: int) -> Decision: ...


def _offers(policy: object, hint: type) -> bool:
    """Whether ``policy``'s class offers ``hint`` (a protocol of methods only, defined on the class):
    ``issubclass``, which the ABC machinery caches per class (~0.3 us), where ``isinstance`` walks the
    protocol's attributes on every call (~15 us; the simulator asks each worker's policy for its hints
    at every step)."""
    return issubclass(type(policy), hint)


def decides_by_batch(policy: object) -> DecidesByBatch | None:
    """``policy`` where it offers the batch-size-only hint (:class:`DecidesByBatch`), else None."""
    return policy if _offers(policy, DecidesByBatch) else None


@runtime_checkable
class HoldsAhead(Protocol):
    """An optional acceleration hint, not part of the policy contract: the rounds of many held SD
    spans in one call (the engine path that uses it is ``tltsim.rollout.fast.held_spans``).

    ``held_cost() -> cost | None``: the cost model the policy prices a decision with, where at the
    decisions this hint covers it asks that model only for ``sd_time`` and ``decode_time`` at the
    view's contexts and the model gives them from paged-KV sums
    (:meth:`~tltcore.cost.protocol.CostModel.paged_kv_times`); else None. ``held_hold() -> h | None``:
    the hold (``h > 1``) every answer the hint covers comes with, where the policy's state admits
    the hint now, else None.

    ``held_ahead(config, outcomes, batch, paged, ctx_sum) -> m``: the policy's last ``decide``
    answered ``config`` with a finite hold; the engine ran ``k = len(outcomes)`` spans of it, no
    request waiting (span 0 to its first finish or the end of that hold, every later span to its
    first finish or ``h`` iterations), ``outcomes[j]`` what ``observe`` would get of span ``j``;
    ``batch[j - 1]``, ``paged[j - 1]`` and ``ctx_sum[j - 1]`` (int64 arrays) are the running
    requests, the sum of their contexts rounded up to whole KV blocks of the cost model, and the sum
    of their contexts at span ``j``'s start. The policy does to its state what the rounds
    ``observe(outcomes[0]), decide(view at span 1), observe(outcomes[1]), ...`` would, for the
    ``decide`` calls it can answer from these (each answering ``config``, the same object, with hold
    ``h``, and reading nothing of the view but its batch size and contexts); it stops before the first
    it cannot, at the latest before the first that would answer anything else, and returns the spans
    observed, ``1 <= m <= k``. The engine then asks ``decide`` at span ``m``'s start as usual (when
    ``m < k``)."""

    def held_cost(self) -> object | None: ...

    def held_hold(self) -> int | None: ...

    def held_ahead(self, config: SDConfig, outcomes: list[Outcome], batch: np.ndarray, paged: np.ndarray,
                   ctx_sum: np.ndarray) -> int: ...


def holds_ahead(policy: object) -> HoldsAhead | None:
    """``policy`` where it offers the held-spans hint (:class:`HoldsAhead`), else None."""
    return policy if _offers(policy, HoldsAhead) else None


def resumes_ahead(policy: object) -> ResumesAhead | None:
    """``policy`` where it offers blocks that begin without a ``decide`` (:class:`ResumesAhead`)
    beside the block hint, else None."""
    return policy if _offers(policy, ResumesAhead) and _offers(policy, DecidesAhead) else None


def plain_phase_bound(policy: SDPolicy) -> Callable[[], int | None] | None:
    """``policy.plain_above`` where the policy offers the plain-phase hint, else None."""
    return policy.plain_above if _offers(policy, PlainPhases) else None


def decides_ahead(policy: SDPolicy) -> DecidesAhead | None:
    """``policy`` where it offers the block hint (:class:`DecidesAhead`), else None."""
    return policy if _offers(policy, DecidesAhead) else None


def wants_remaining_hint(policy: SDPolicy) -> bool:
    """Whether ``policy`` asks for ``BatchView.remaining_hint`` (:class:`ReadsRemaining`)."""
    return isinstance(policy, ReadsRemaining) and bool(policy.wants_remaining_hint)


_UNTIL_EVENT_OFF = Decision(NO_SD, HOLD_UNTIL_EVENT)


@dataclass
class NoSD:
    """Never speculate: the veRL baseline."""

    name: str = "no-sd"

    def decide(self, view: BatchView) -> Decision:
        return _UNTIL_EVENT_OFF

    def plain_above(self) -> int:
        """Plain at every batch size (the optional plain-phase hint: :class:`PlainPhases`)."""
        return 0

    def observe(self, outcome: Outcome) -> None:
        return None

    def reset(self, step: int) -> None:
        return None


@dataclass
class Static:
    """Always the same draft shape, whatever the batch size."""

    config: SDConfig = field(default_factory=lambda: SDConfig(8, 4, 32))
    name: str = "static"

    def decide(self, view: BatchView) -> Decision:
        return Decision(self.config, HOLD_UNTIL_EVENT)

    def decision_at(self, batch_size: int) -> Decision:
        """The same shape at every batch size (:class:`DecidesByBatch`)."""
        return Decision(self.config, HOLD_UNTIL_EVENT)

    def observe(self, outcome: Outcome) -> None:
        return None

    def reset(self, step: int) -> None:
        return None

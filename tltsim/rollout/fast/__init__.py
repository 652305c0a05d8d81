"""The simulator's speed, behind one door. Its single rule: **every path here equals the reference in
:mod:`tltsim.rollout.worker` bit for bit** -- the same event log cell for cell, the same finish times,
the same views shown to every policy in the same order, the same Outcomes told -- and only runs
faster.

The reference is :meth:`RolloutWorker.run <tltsim.rollout.worker.RolloutWorker.run>`: one decision,
one span, iteration by iteration, a SimPy clock between workers. ``engine.fast`` (on by default)
hands each unit of work after admission to the worker's door, :class:`~tltsim.rollout.fast.paths.FastPaths`
(:mod:`~tltsim.rollout.fast.paths`), which picks an accelerated path by what the decision allows;
``engine.fast = False`` runs the reference. The paths, one concept per module:

* :mod:`~tltsim.rollout.fast.spans`: an SD span of one iteration without the loop's accumulators,
  or in blocks of iterations (accept lengths drawn at once, cut at the first finish);
* :mod:`~tltsim.rollout.fast.expected_tail` and :mod:`~tltsim.rollout.fast.tails`: a held SD
  decision's spans back to back, asking the policy between them (expected mode: many spans per numpy
  pass; stochastic: span after span, or with the other workers' tails a block per round);
* :mod:`~tltsim.rollout.fast.held_spans`: the spans of decisions held a few iterations with one
  shape (a policy asked after every span) in chunks: expected mode many per numpy pass, stochastic
  finish to finish with the draws taken at once;
* :mod:`~tltsim.rollout.fast.ahead`: a block of one-iteration SD spans of a policy that decides every
  iteration and offers the block hint (below), cut where its answer changes (both acceptance modes);
* :mod:`~tltsim.rollout.fast.plain_phase`: a whole phase of plain spans, admissions and prefills
  included, in closed form;
* :mod:`~tltsim.rollout.fast.event_blocks`: rows added as numpy column blocks;
* :mod:`~tltsim.rollout.fast.uniforms`: the acceptance draws as a rewindable stream;
* the run's vectorised pricers (:class:`~tltsim.rollout.worker.Pricers`, from
  :func:`~tltsim.rollout.fast.paths.pricers_of`: the cost model's batched forms), which the
  worker's shared primitives also use for long prefills and plain spans.

The rule is pinned by tests that run both and compare exactly: ``tests/sim/test_fast_identical.py``
(bundled scenarios, presets, queueing and KV limits, holds, wide batches, many workers' tails, with
the views every policy was shown), ``tests/sim/test_held_spans.py`` (spans of varying holds, with
the views and Outcomes), ``tests/sim/test_plain_phase.py`` (closed-form plain phases, with and without
a pricer, and the column-block log), ``tests/sim/test_fast_paths.py`` (the uniform stream and the
pricers against what they replace), ``tests/sim/test_expected_chunk.py`` (an expected chunk's
per-iteration context and paged-KV sums, over whole rows and for requests in lockstep, against the
masked form), ``tests/sim/test_speed_span_cost.py``
(with pricers and call by call), and the fast/reference pairs in ``tests/sim/test_rollout.py`` and
``tests/sim/test_hold_beg_mab.py``. A change here that moves one bit fails them.

**Optional policy hints.** Six properties of a policy let these paths skip asking it; none is part
of the policy contract (:mod:`tltcore.policy.base`), and a policy without them only runs on slower
paths:

* *plain phases*: ``plain_above() -> m | None`` (:class:`~tltcore.policy.base.PlainPhases`) -- until
  its next ``observe`` of a batch at or below ``m`` (or ``reset``), ``decide`` answers
  ``Decision(NO_SD, HOLD_UNTIL_EVENT)`` at every batch size above ``m`` without changing its state,
  and observing plain spans above ``m`` leaves the state that observing only the last of them leaves
  (None: no such promise now). The whole phase then runs in closed form and the policy hears its
  last span;
* *holding through churn*: a decision's ``hold`` stands while the batch keeps its size, even as a
  finishing request is replaced by an admitted one (a policy whose answer depends on which requests
  run holds for one iteration);
* *one observe of n iterations equals n single rounds*: a policy's state after an Outcome of ``n``
  iterations is what ``n`` one-iteration rounds would have left, every part a later decision can read
  (one documented exception, of state no decision reads: a BEG-MAB bucket with a single arm,
  :mod:`tltcore.policy.beg_mab`), so spans of many iterations are told once;
* *deciding ahead*: ``ahead(config, b, emitted, ctx_rows) -> (m, decision)``
  (:class:`~tltcore.policy.base.DecidesAhead`, offered by ``sglang-ema``) -- a policy that answers
  ``hold`` 1 at every iteration folds the rounds of a whole block of iterations in one call and says
  where its answer changes; the block is cut there (:mod:`~tltsim.rollout.fast.ahead`). With
  ``ahead_shapes()`` it names the chains it prices at every row: where it prices them with the
  worker's own cost model, the engine prices them for all workers' blocks at once and passes them in.
  With ``ahead_resume(b)`` (:class:`~tltcore.policy.base.ResumesAhead`) it names its standing answer at
  batch size ``b``, so after a finish the engine runs the next block without asking ``decide``: the
  fold does ``decide``'s arithmetic at the block's first row and gives the block back where it switches;
  and, given each row's batch (``ahead(..., batches=)``), an expected-mode block runs on through finishes;
* *deciding by batch size*: ``decision_at(b)`` (:class:`~tltcore.policy.base.DecidesByBatch`, offered
  by ``static`` and ``vllm-table``) -- ``decide`` reads nothing of a view but its batch size and
  ``observe`` does nothing, so an expected-mode tail (:mod:`~tltsim.rollout.fast.expected_tail`) asks
  ``decision_at`` at each finish and builds no views or Outcomes
  (``tests/sim/test_decides_by_batch.py``);
* *holding ahead*: ``held_ahead(config, outcomes, batch, paged, ctx_sum) -> m``
  (:class:`~tltcore.policy.base.HoldsAhead`, offered by ``cost-aware``) -- a policy whose held answers
  are re-evaluated at every finish and whose evaluations, while its answer stands, come with one hold
  (``held_hold()``) and price only its own cost model at the view's contexts (``held_cost()``): the
  held-span paths (:mod:`~tltsim.rollout.fast.held_spans`, both modes) lay the rest of a chunk out in
  spans, and the policy takes their rounds in one call, priced from the paged-KV sums the chunk already
  holds, and says how many it kept; ``decide`` is asked as usual at the first span it did not take.
  ``tests/policy/test_cost_aware_held.py`` pins it to the rounds and to the reference path.
"""

from tltsim.rollout.fast.event_blocks import SimEventLog
from tltsim.rollout.fast.paths import FastPaths, FastRun, accelerate, run_step

__all__ = ["FastPaths", "FastRun", "SimEventLog", "accelerate", "run_step"]

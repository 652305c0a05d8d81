"""Long-tail rollout strategies: how an RL run turns rollouts into trained batches (issue 45).

The rollout simulator (:mod:`tltsim.rollout`) answers "how long does this batch take to generate under
this SD policy"; a strategy answers "when does each batch generate and train, which weights generated
it, and what is trained". Each strategy is a schedule over simulated rollouts and priced training
phases, so every strategy composes with every SD policy: the rollout of each batch runs as is, with
its policy, and the strategy places it on the run clock (:mod:`tltsim.strategy.timeline`).

Vocabulary, shared by every strategy:

* **policy version**: the actor's weights after k updates are version k; version 0 is the initial
  model. Batch k's training produces version k+1, which a weight sync brings to the rollout engine.
* **trained batch**: what one actor update trains on. ``sync`` and ``one-step-off`` train the whole
  batch the step generated (N prompt groups x their samples); ``overprovision`` the N groups that
  finished first out of the ``ceil(N(1+eta))`` it launched; ``tail-batching`` the N groups of a short
  round complete first (each on its first n responses), or a long round's N deferred groups.
* **lag** of a trained sample: the version that trains on it minus the version that generated it
  (0: on-policy). A response continued under newer weights (partial rollout: ``overprovision``'s
  ``mode=resume``, ``async``) has tokens of several versions: each token has its own lag and the
  sample the lag of its oldest token (AReaL's head off-policyness), which is why ``lag.csv`` counts
  tokens as well as samples.
* **overlap**: ``sync``, ``overprovision`` and ``tail-batching`` are colocated: every GPU generates, then every GPU
  trains. ``one-step-off`` generates batch k+1 on a rollout pool while a separate trainer pool trains
  batch k.
* **GPU idle**: GPU-seconds a strategy's GPUs wait, attributed to the batch they wait in: a
  rollout worker between its last response and the rollout's end, and the pools waiting for each
  other. The training phases count as busy on the GPUs that run them.

The strategies (one module each, rules and sources in its docstring):

* :mod:`~tltsim.strategy.sync` — today's synchronous step, lag 0 (veRL, TLT);
* :mod:`~tltsim.strategy.one_step_off` — verl's one-step-off-policy trainer, lag 1 after the first
  step;
* :mod:`~tltsim.strategy.overprovision` — APRIL-style over-provisioning (slime): train the first N
  groups to finish; drop the rest (lag 0) or, ``mode=resume``, stop the rollout there and continue them
  next step (APRIL's recycling);
* :mod:`~tltsim.strategy.fully_async` — fully asynchronous RL with partial rollout and AReaL's
  staleness bound (verl ``fully_async_policy``, AReaL);
* :mod:`~tltsim.strategy.tail_batching` — RollPacker's tail batching: short rounds over-provision
  prompts and responses and keep the first to complete, the prompts they abort are queued and
  regenerated together, on-policy, in long rounds (lag 0).

Partial rollout (:mod:`~tltsim.strategy.partial`) rests on the rollout's stop condition
(:meth:`tltsim.rollout.RolloutRun.step` with ``stop=``): those strategies drive the rollouts
themselves, since what one rollout holds depends on where the last one stopped. Tail batching stops
its short rounds the same way and keeps its books in the same :class:`~tltsim.strategy.partial.Pool`,
but restarts what it stops instead of continuing it.

Approximated everywhere: training phases are priced by :func:`tltsim.rl.phases.phase_times` (MFU
assumptions of the ``[rl]`` section), drafter training and the drafter's staleness are not modelled
(the SD policy keeps the scenario's drafter: whole-run presets do that, not strategies yet), and a
weight sync costs what the colocated one costs; stopping a rollout costs nothing. Sources: verl's documentation (recipes
"One Step Off Policy Async Trainer" and "Fully Async Policy Trainer",
https://verl.readthedocs.io/en/latest/advance/fully_async.html), AReaL's "Asynchronous RL" guide
(https://inclusionai.github.io/AReaL/algorithms/async.html), APRIL (arXiv 2509.18521) and RollPacker
(Gao et al., NSDI'26, arXiv 2509.21009, and its code, github.com/Farrrrland/RollPacker).
"""

from tltsim.strategy.spec import (
    STRATEGIES,
    Async,
    OneStepOff,
    Overprovision,
    StrategySpec,
    Sync,
    TailBatching,
    parse_strategy,
)

__all__ = ["STRATEGIES", "Async", "OneStepOff", "Overprovision", "StrategySpec", "Sync", "TailBatching",
           "parse_strategy"]

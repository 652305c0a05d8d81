"""Running a scenario: one policy, each of several policies or presets, the policies compared."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tltcore.policy.spec import PolicyBase, as_spec
from tltsim.scenario.build import SimInputs, make_policies, prepare
from tltsim.scenario.identity import policies_with_baseline, scenario_hash
from tltsim.scenario.schema import BASELINE_POLICY, Scenario


def run_policy(s: Scenario, spec: PolicyBase | str, inputs: SimInputs | None = None, *, run_id: str = "",
               progress=None) -> Any:
    """Simulate every step of the scenario under one policy spec (typed, or its shorthand text);
    returns the event log, labelled with the spec's name.
    ``progress(n)`` is called as ``n`` more responses finish. Top-level and scenario-driven, so it
    runs in another process as is."""
    from tltsim.rollout import RolloutRun

    inputs = inputs or prepare(s)
    typed = as_spec(spec)
    run = RolloutRun(make_policies(typed, inputs), cost=inputs.cost, accept=inputs.accept, engine=inputs.engine,
                     seed=s.seed, deal_mode=s.trace.deal, run_id=run_id, policy_name=typed.name,
                     drafter=inputs.drafter)
    for w in inputs.workloads:
        run.step(w, progress)
    return run.events()


_Run = TypeVar("_Run")


def run_each(s: Scenario, names: Sequence[Any], run_one: Callable[..., _Run], inputs: SimInputs | None = None, *,
             progress: Callable[[int], None] | None = None,
             on_each: Callable[[Any], None] | None = None) -> tuple[SimInputs, list[_Run]]:
    """``run_one(s, name, inputs, run_id=, progress=)`` for each name in order: the loop both
    :func:`compare_policies` and :func:`tltsim.rl.run.compare_presets` run, kept in one place so
    that every compared policy or preset sees the same prepared workloads and is labelled with the
    same run id (the scenario hash). ``on_each(name)`` is called before each (a policy spec, or a
    preset's name). Returns the inputs
    (prepared here when not given) with the results."""
    inputs = inputs or prepare(s)
    run_id = scenario_hash(s)
    results = []
    for name in names:
        if on_each is not None:
            on_each(name)
        results.append(run_one(s, name, inputs, run_id=run_id, progress=progress))
    return inputs, results


def compare_policies(s: Scenario, inputs: SimInputs | None = None, *, progress=None,
                     on_policy=None, run_one: Callable[..., Any] = run_policy) -> tuple[Any, Any]:
    """Run every policy of the scenario (``no-sd`` first) on the same workloads and return (one event
    log, the per-(policy, step) summary with speedups over ``no-sd`` and the capped-response count):
    what ``tlt sim run`` and ``tlt demo`` both report. ``on_policy(spec)`` is called before each;
    ``run_one`` runs one policy as :func:`run_policy` does (advise passes one that reuses its runs)."""
    import pandas as pd

    from tltcore.summary import summary_table

    inputs, logs = run_each(s, policies_with_baseline(s.policies), run_one, inputs, progress=progress,
                            on_each=on_policy)
    events = pd.concat(logs, ignore_index=True)
    summary = summary_table(events, gpus=s.cluster.gpus, tp=s.cluster.tp, baseline=BASELINE_POLICY)
    capped = {w.step: w.capped for w in inputs.workloads}
    summary["capped_responses"] = [capped.get(step, 0) for step in summary["step"]]
    return events, summary

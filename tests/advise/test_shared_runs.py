"""advise keeps its scenario's runs at the first seed and reuses them (the derived table, the exports
on every step): a kept run is the run a new simulation writes, and nothing else is kept."""

from __future__ import annotations

import pandas as pd

from tltsim import advise as adv
from tltsim.scenario import resolve, run_policy, with_values

SMALL = (("trace.name", "intern_s1_math"), ("trace.prompts_per_step", 4), ("trace.cap", 4000),
         ("cluster.gpus", 8), ("cluster.tp", 2))


def _small(*sets: tuple[str, object]):
    return resolve(None, [(k, v, "test") for k, v in (*SMALL, *sets)]).scenario


def test_a_kept_run_is_the_run_a_new_simulation_writes():
    s = _small()
    with adv.sharing_runs(s) as shared:
        for mode in ("reprefill", "catch_up"):
            sk = with_values(s, {"engine.switch": mode, "policies": ("cost-aware",)})
            first = adv.run_policy(sk, "cost-aware", adv.inputs_for(sk), run_id="a")
            again = adv.run_policy(sk, "cost-aware", adv.inputs_for(sk), run_id="b")
            fresh = run_policy(sk, "cost-aware", adv.inputs_for(sk), run_id="b")
            pd.testing.assert_frame_equal(again, fresh, check_exact=True)
            assert (first["run_id"] == "a").all()
        assert set(shared.logs) == {("reprefill", "cost-aware"), ("catch_up", "cost-aware")}


def test_other_seeds_and_variants_are_simulated_and_not_kept():
    s = _small()
    with adv.sharing_runs(s) as shared:
        other_seed = with_values(s, {"seed": s.seed + 1})
        variant = with_values(s, {"drafter.quality": 0.5})
        for sk in (other_seed, variant):
            got = adv.run_policy(sk, "static:4_1_4", adv.inputs_for(sk))
            pd.testing.assert_frame_equal(got, run_policy(sk, "static:4_1_4", adv.inputs_for(sk)), check_exact=True)
        assert shared.logs == {}
        adv.run_policy(s, "static:4_1_4", adv.inputs_for(s))
        assert list(shared.logs) == [("reprefill", "static:4_1_4")]
    assert adv._shared == []  # dropped when the advise ends


def test_a_one_step_workload_is_checked_on_the_grids_own_scenario():
    s = resolve("aime_qwen7b_64xh100").scenario
    checked, words = adv.workload_steps(s)
    assert checked == s and words == "the trace's one step"

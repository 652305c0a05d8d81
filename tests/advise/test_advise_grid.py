"""``tlt advise``'s pure half (:mod:`tltsim.advise`): the grid, the tasks, the ranking with spreads, the
recommendation and its ties, the end-to-end arithmetic and where SD does not pay. The simulated cases
use the bundled ``intern_s1_math`` length profile (no trace file) on 8 GPUs, TP 2 (4 workers)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tltcore.errors import InputError
from tltsim import advise as adv
from tltsim.scenario import compare_policies, policy_names, resolve, with_values

SMALL = (("trace.name", "intern_s1_math"), ("trace.prompts_per_step", 4), ("trace.cap", 4000),
         ("cluster.gpus", 8), ("cluster.tp", 2))


def _small(*sets: tuple[str, object]):
    return resolve(None, [(k, v, "test") for k, v in (*SMALL, *sets)]).scenario


# ---- the grid -------------------------------------------------------------------------------------
def test_switching_policies_run_under_every_mode_and_the_others_once():
    grid = adv.candidate_grid(["elastic:32+beg-mab", "static:8_4_32", "cost-aware", "vllm-table"],
                              ["reprefill", "catch_up"])
    runs = {(c.policy, c.switch): c.label for c in grid}
    assert grid[0].policy == "no-sd"
    assert runs[("elastic:32+beg-mab", "reprefill")] == "elastic:32+beg-mab (reprefill)"
    assert runs[("elastic:32+beg-mab", "catch_up")] == "elastic:32+beg-mab (catch_up)"
    # cost-aware prices the switch it is told about: under catch_up it must be told so
    assert ("cost-aware:switch=catch_up", "catch_up") in runs and ("cost-aware", "reprefill") in runs
    assert runs[("static:8_4_32", None)] == "static:8_4_32" and runs[("vllm-table", None)] == "vllm-table"
    assert len(grid) == 1 + 2 + 1 + 2 + 1
    one = adv.candidate_grid(["elastic:32+beg-mab"], ["catch_up"])
    assert [c.label for c in one] == ["no-sd", "elastic:32+beg-mab"]  # one mode: no mode in the label


def test_the_default_grid_covers_thresholds_shapes_and_the_peers():
    pols = adv.default_policies((16, 64), ("4_1_4", "8_4_16"))
    assert pols[0] == "no-sd"
    for spec in ("elastic:16+beg-mab", "elastic:64+beg-mab", "cost-aware", "static:4_1_4", "static:8_4_16",
                 "elastic:32:1+static:4_1_4", "elastic+static:8_4_16", "vllm-table", "sglang-ema"):
        assert spec in pols
    assert adv.switches_sd_on("elastic:8+static:4_1_4") and adv.switches_sd_on("cost-aware:lengths=known")
    assert not any(adv.switches_sd_on(p) for p in ("no-sd", "static:8_4_32", "beg-mab", "vllm-table", "sglang-ema"))


def test_a_bad_spec_or_no_switch_mode_is_one_clear_error():
    with pytest.raises(InputError, match="bogus"):
        adv.candidate_grid(["bogus"], ["reprefill"])
    with pytest.raises(InputError, match="switch mode"):
        adv.candidate_grid(["static:4_1_4"], [])


def test_tasks_are_one_per_mode_and_seed_with_the_switch_free_policies_once():
    s = _small()
    grid = adv.candidate_grid(["elastic:32+beg-mab", "static:4_1_4"], ["reprefill", "catch_up"])
    tasks = adv.plan_tasks(s, grid, [0, 1], ["reprefill", "catch_up"])
    assert [(t.switch, t.seed) for t in tasks] == [("reprefill", 0), ("reprefill", 1), ("catch_up", 0),
                                                  ("catch_up", 1)]
    assert policy_names(tasks[0].scenario.policies) == ("elastic:32+beg-mab", "static:4_1_4")
    assert policy_names(tasks[2].scenario.policies) == ("elastic:32+beg-mab",)
    assert tasks[3].scenario.engine.switch == "catch_up" and tasks[3].scenario.seed == 1


# ---- running and labelling ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_rows():
    s = _small(("acceptance.mode", "stochastic"))
    grid = adv.candidate_grid(["elastic:32+beg-mab", "static:8_4_32"], ["reprefill", "catch_up"])
    raw = adv.run_tasks(adv.plan_tasks(s, grid, [0, 1], ["reprefill", "catch_up"]))
    return s, grid, raw


def test_a_task_row_is_the_simulators_own_run_at_that_seed_and_mode(small_rows):
    s, _, raw = small_rows
    sk = with_values(s, {"seed": 1, "engine.switch": "catch_up", "policies": ("elastic:32+beg-mab",)})
    _, summary = compare_policies(sk)
    mine = raw[(raw["seed"] == 1) & (raw["switch"] == "catch_up") & (raw["policy"] == "elastic:32+beg-mab")]
    want = summary[summary["policy"] == "elastic:32+beg-mab"]["makespan_s"].sum()
    assert float(mine["rollout_s"].iloc[0]) == pytest.approx(float(want), rel=1e-12)
    base = summary[summary["policy"] == "no-sd"]["makespan_s"].sum()
    assert float(mine["speedup"].iloc[0]) == pytest.approx(base / want, rel=1e-12)
    assert all(isinstance(json.loads(w), list) for w in raw["warnings"])


def test_labelled_rows_drop_the_baselines_repeat_and_keep_every_candidate_per_seed(small_rows):
    _, grid, raw = small_rows
    rows = adv.label_rows(raw, grid)
    assert rows.groupby("label").size().to_dict() == {c.label: 2 for c in grid}
    assert rows.loc[rows["label"] == "no-sd", "switch"].isna().all()
    assert (rows.loc[rows["label"] == "elastic:32+beg-mab (catch_up)", "switch"] == "catch_up").all()
    assert len(rows[rows["label"] == "no-sd"]) == 2  # once per seed, not once per mode too


def test_the_process_pool_gives_the_rows_of_the_in_process_run(small_rows):
    s, grid, raw = small_rows
    pooled = adv.run_tasks(adv.plan_tasks(s, grid, [0, 1], ["reprefill", "catch_up"]), workers=2)
    pd.testing.assert_frame_equal(pooled, raw)


def test_calls_inside_keeping_workers_share_one_pool_and_give_the_same_rows(small_rows, monkeypatch):
    from tltsim.sweep import runner

    s, grid, raw = small_rows
    made = []
    real = runner.LocalExecutor.__init__

    def counted(self, workers):
        made.append(workers)
        real(self, workers)

    monkeypatch.setattr(runner.LocalExecutor, "__init__", counted)
    tasks = adv.plan_tasks(s, grid, [0, 1], ["reprefill", "catch_up"])
    with adv.keeping_workers():
        first = adv.run_tasks(tasks, workers=2)
        again = adv.run_tasks(tasks[:2], workers=2)
        assert len(adv._pools[-1]) == 1  # kept, still open
    assert made == [2] and not adv._pools  # one pool for both calls, closed after the block
    pd.testing.assert_frame_equal(first, raw)
    pd.testing.assert_frame_equal(again, adv.run_tasks(tasks[:2]))


def test_a_kept_pool_whose_call_failed_is_closed_and_the_next_call_starts_another(small_rows):
    s, grid, _ = small_rows
    tasks = adv.plan_tasks(s, grid, [0], ["reprefill", "catch_up"])
    with adv.keeping_workers():
        with pytest.raises(InputError, match=r"simulating (reprefill|catch_up)-seed0 failed"):  # whichever ends first
            adv.run_tasks(tasks, len, workers=2)  # an evaluation that fails on every task (a scenario has no len)
        assert adv._pools[-1] == {}  # closed and dropped
        assert len(adv.run_tasks(tasks, workers=2)) and len(adv._pools[-1]) == 1


def test_a_bad_executor_or_worker_count_is_refused():
    with pytest.raises(InputError, match="local, ray"):
        adv.run_tasks([], backend="slurm")
    with pytest.raises(InputError, match=">= 1"):
        adv.run_tasks([], workers=0)


# ---- ranking and the recommendation ---------------------------------------------------------------
def _rows(values: dict[str, list[float]]) -> pd.DataFrame:
    """Synthetic per-seed rows: rollout seconds per label (no-sd must be among them)."""
    out = []
    for label, secs in values.items():
        for k, v in enumerate(secs):
            out.append({"label": label, "policy": label, "switch": "reprefill", "seed": k, "rollout_s": v,
                        "sd_share": 0.5 if label != "no-sd" else 0.0, "switch_s": 0.0, "accept": 2.0,
                        "warnings": "[]"})
    df = pd.DataFrame(out)
    base = df[df["label"] == "no-sd"].set_index("seed")["rollout_s"]
    df["speedup"] = df["seed"].map(base) / df["rollout_s"]
    return adv.with_end_to_end(df, 10.0)


def test_ranking_is_by_median_rollout_with_the_spread_and_ties_named():
    rows = _rows({"no-sd": [100, 101, 99], "a": [50, 60, 52], "b": [53, 54, 55], "c": [70, 71, 72]})
    ranking = adv.rank(rows)
    assert list(ranking["label"]) == ["a", "b", "c", "no-sd"]  # a's median 52 beats b's 54 despite its 60
    a = ranking.iloc[0]
    assert (a["rollout_s_median"], a["rollout_s_min"], a["rollout_s_max"]) == (52, 50, 60)
    rec = adv.recommend(ranking)
    assert rec.label == "a" and rec.sd_pays
    assert rec.ties == ("b",)  # b's 53-55 overlaps a's 50-60; c's 70-72 does not
    assert rec.runners_up == ("b", "c", "no-sd")
    assert rec.speedup[0] == pytest.approx(float(np.median([100 / 50, 101 / 60, 99 / 52])))


def test_no_sd_is_recommended_when_the_best_gain_is_inside_its_spread_or_below_two_percent():
    inside = adv.recommend(adv.rank(_rows({"no-sd": [100, 90, 110], "a": [95, 96, 97]})))
    assert inside.label == "no-sd" and not inside.sd_pays and not inside.is_sd
    assert inside.runners_up[0] == "a"
    tiny = adv.recommend(adv.rank(_rows({"no-sd": [100, 100, 100], "a": [99, 99, 99]})))
    assert tiny.label == "no-sd"  # 1.01x: below PAYS
    clear = adv.recommend(adv.rank(_rows({"no-sd": [100, 100, 100], "a": [97, 97, 97]})))
    assert clear.label == "a"  # 1.03x, no overlap


def test_end_to_end_is_amdahl_at_the_same_seed():
    rows = _rows({"no-sd": [100, 80], "a": [50, 40]})
    a = rows[rows["label"] == "a"]
    assert list(a["e2e_speedup"]) == pytest.approx([(100 + 10) / (50 + 10), (80 + 10) / (40 + 10)])
    assert adv.with_end_to_end(rows, None)["e2e_speedup"].isna().all()


def test_where_sd_does_not_pay_names_each_loser_with_its_cause():
    rows = _rows({"no-sd": [100, 100], "slow": [120, 125], "idle": [101, 102], "fast": [50, 50],
                  "tie": [100, 100], "small": [99, 99]})
    rows.loc[rows["label"] == "slow", "warnings"] = json.dumps([["sd_slower", "SD is slower at batch >= 5"]])
    rows.loc[rows["label"] == "idle", "sd_share"] = 0.01
    rows.loc[rows["label"] == "tie", "sd_share"] = 0.0
    rows.loc[rows["label"] == "small", "sd_share"] = 0.5
    found = adv.not_paying(adv.rank(rows), rows, gpu_fact="the GPU line")
    # the GPU, then worst first: the losers, then the ties (exactly 1x, and a gain under 2%); "fast" absent
    assert [f.subject for f in found] == ["GPU", "slow", "idle", "tie", "small"]
    assert found[1].why == "SD is slower at batch >= 5"
    assert "1.0% of decode iterations" in found[2].why
    assert "SD never ran" in found[3].why and found[3].speedup[0] == 1.0
    assert found[0].speedup is None


def test_the_gpu_line_names_the_batches_where_sd_is_slower_on_h20_and_none_on_a_small_h100_batch():
    h20 = adv.inputs_for(_small(("cluster.gpu", "H20")))
    line = adv.gpu_slower_line(h20, ["8_4_32"])
    assert line is not None and "H20" in line and "8_4_32 at" in line
    assert adv.gpu_slower_line(adv.inputs_for(_small(("engine.max_batch", 2))), ["4_1_4"]) is None


def test_later_phases_are_priced_and_freshness_needs_two_steps():
    s = _small()
    later, note = adv.later_phase_seconds(adv.inputs_for(s))
    assert later is not None and later > 0 and note == ""
    tasks, why = adv.freshness_tasks(s, [0], 1)
    assert tasks == [] and "below 2" in why
    tasks, why = adv.freshness_tasks(s, [0, 1], 2)
    assert len(tasks) == 2 and why == ""
    assert tasks[0].scenario.presets == adv.FRESHNESS_PRESETS and tasks[0].scenario.trace.num_steps == 2


def test_the_upkeep_runs_the_recommendation_and_says_when_it_compares_nothing():
    s = _small()
    rec = adv.Recommendation("cost-aware (catch_up)", "cost-aware:switch=catch_up", "catch_up", (1, 1, 1), (2, 2, 2),
                             (1.5, 1.5, 1.5))
    tasks, _ = adv.freshness_tasks(s, [0], 2, rec)
    assert tasks[0].scenario.presets_policy.name == "cost-aware:switch=catch_up"
    assert tasks[0].scenario.engine.switch == "catch_up"
    assert "recommended cost-aware (catch_up)" in adv.upkeep_rollout(rec)
    plain = adv.Recommendation("no-sd", "no-sd", None, (1, 1, 1), (1, 1, 1), (1, 1, 1))
    tasks, _ = adv.freshness_tasks(s, [0], 2, plain)
    assert tasks[0].scenario.presets_policy is None and "TLT's elastic+beg-mab" in adv.upkeep_rollout(plain)
    table = pd.DataFrame({"preset": ["tlt", "static-drafter", "tlt-base"], "speedup_median": [1.2, 1.2, 1.1],
                          "mean_accept_length_median": [4.0, 4.0, 2.0]})
    assert "drift = 0" in adv.empty_upkeep(table, with_values(s, {"drafter.drift": 0.0}), 3)
    assert "does not change" in adv.empty_upkeep(table, s, 3)
    never = table.assign(mean_accept_length_median=[np.nan, np.nan, 2.0])
    assert "never switched SD on" in adv.empty_upkeep(never, s, 3)
    assert adv.empty_upkeep(table.assign(speedup_median=[1.3, 1.2, 1.1]), s, 3) == ""


def test_a_preset_run_follows_presets_policy_only_where_it_runs_tlts_rollout():
    from tltcore.policy.spec import parse_policy
    from tltsim.rl.presets import get_preset, rollout_policy

    cost_aware = parse_policy("cost-aware")
    assert rollout_policy(get_preset("tlt"), cost_aware) == "cost-aware"
    assert rollout_policy(get_preset("static-drafter"), cost_aware) == "cost-aware"
    assert rollout_policy(get_preset("tlt-no-mab"), cost_aware) == "elastic+static:8_4_32"
    assert rollout_policy(get_preset("tlt-base"), cost_aware) == "elastic+static:4_1_4"
    assert rollout_policy(get_preset("tlt"), None) == "elastic+beg-mab"
    with pytest.raises(InputError, match="presets_policy"):
        _small(("presets_policy", "static:x"))


def test_every_export_is_resimulated_on_every_step_of_the_workload():
    s = _small(("trace.num_steps", 1))
    sk, words = adv.workload_steps(s)
    assert sk.trace.num_steps == adv.MAX_CHECK_STEPS or "snapshot" in words or "steps" in words
    check = adv.check_on_every_step(s, [("a", "static:4_1_4", None), ("b", "elastic:32:1+static:4_1_4", "catch_up")], 0)
    steps = sk.trace.num_steps
    assert sorted(check.table["label"].value_counts().to_dict().items()) == [("a", steps), ("b", steps)]
    one = with_values(sk, {"policies": ("static:4_1_4",), "presets": (), "seed": 0})
    _, summary = compare_policies(one, adv.inputs_for(one))
    got = check.table[check.table["label"] == "a"]["speedup"].to_numpy()
    assert got == pytest.approx(summary[summary["policy"] == "static:4_1_4"]["speedup"].to_numpy(), rel=0, abs=0)


def test_the_ngram_drafter_never_ranks_above_eagle_on_the_same_scenario():
    # advise --drafter ngram used to price n-gram with the EAGLE tree's acceptance at no draft cost and
    # rank it above EAGLE (4.30x vs 3.36x on a long-CoT 32B trace)
    best = {}
    for kind in ("eagle", "ngram"):
        s = _small(("drafter.kind", kind))
        cands = adv.candidate_grid(["static:4_1_4", "static:8_4_32", "elastic+beg-mab", "cost-aware"], ["reprefill"])
        rows = adv.label_rows(adv.run_tasks(adv.plan_tasks(s, cands, [0], ["reprefill"])), cands)
        ranking = adv.rank(adv.with_end_to_end(rows, None))
        best[kind] = float(ranking["speedup_median"].max())
        accept = ranking.set_index("label")["accept_median"]
        if kind == "ngram":
            assert accept["static:4_1_4"] == pytest.approx(1.9375, abs=0.05)  # its own 0.5-alpha chain
    assert best["ngram"] < best["eagle"], best


def test_the_grid_of_shapes_suits_the_drafter_kind():
    from tltcore.policy.base import SDConfig
    from tltsim.advise import DEFAULT_SHAPES, kind_shapes

    for kind in ("eagle", "eagle3", "draft-model", "ngram"):
        assert kind_shapes(kind) == DEFAULT_SHAPES == ("4_1_4", "8_4_32")
    assert kind_shapes("eagle", quick=True) == ("8_4_32",)
    for kind in ("mtp", "suffix", "block"):  # chains: these kinds draft no trees
        assert all(SDConfig.parse(x).topk == 1 for x in (*kind_shapes(kind), *kind_shapes(kind, quick=True)))
    assert kind_shapes("mtp") == ("1_1_1", "3_1_3") and kind_shapes("block") == ("7_1_7", "15_1_15")

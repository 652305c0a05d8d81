"""How sure an answer is (:mod:`tltsim.robustness`): which unmeasured inputs apply to a scenario, and the
flip logic over them. The flip logic runs on a fake simulator whose makespans are a formula of the
variant's inputs, so each case is computed by hand; one case runs the real simulator."""

from __future__ import annotations

import pandas as pd
import pytest

from tltsim import advise as adv
from tltsim import robustness as rb
from tltsim.scenario import BASELINE_POLICY, resolve

SMALL = (("trace.name", "intern_s1_math"), ("trace.prompts_per_step", 4), ("trace.cap", 4000),
         ("cluster.gpus", 8), ("cluster.tp", 2))


def _small(*sets: tuple[str, object]):
    return resolve(None, [(k, v, "test") for k, v in (*SMALL, *sets)]).scenario


def _inputs(s):
    return adv.inputs_for(s)


def test_the_inputs_that_apply_depend_on_the_drafter_gpu_and_grid():
    h100 = _small()  # calibrated cost model (the default on H100): efficiencies are fitted, the roofline is the variant
    vs, skipped = rb.variants(h100, _inputs(h100).cost, ["cost-aware", "static:4_1_4"])
    names = {(v.input, v.value) for v in vs}
    assert ("cost model", "roofline") in names and ("length predictor", "the true lengths (cost-aware)") in names
    assert ("drafter quality", "0.89 (the stale floor)") in names and ("drafter quality", "1.029") in names
    assert not any(v.input == "GPU efficiency" for v in vs) and any("GPU efficiency" in x for x in skipped)
    h20 = _small(("cluster.gpu", "H20"), ("cost.model", "roofline"))  # the roofline's efficiencies vary
    vs, skipped = rb.variants(h20, _inputs(h20).cost, ["static:4_1_4"])
    eff = [v for v in vs if v.input == "GPU efficiency"]
    assert [v.sets for v in eff] == [{"cluster.flops_efficiency": 0.525, "cluster.bandwidth_efficiency": 0.7225},
                                     {"cluster.flops_efficiency": 0.84, "cluster.bandwidth_efficiency": 0.935}]
    assert [v.sets for v in vs if v.input == "cost model"] == [{"cost.model": "measured"}]
    assert any("no cost-aware setting" in x for x in skipped)
    ngram = _small(("drafter.kind", "ngram"))
    vs, _ = rb.variants(ngram, _inputs(ngram).cost, ["static:4_1_4"])
    assert [v.sets for v in vs if v.input == "n-gram alpha"] == [{"drafter.ngram_alpha": 0.3},
                                                                  {"drafter.ngram_alpha": 0.7}]
    assert not any(v.input == "drafter quality" for v in vs)
    assert rb._known_lengths("elastic:32+cost-aware:switch=catch_up") == \
        "elastic:32+cost-aware:switch=catch_up:lengths=known"
    assert rb._known_lengths("static:4_1_4") == "static:4_1_4"


def test_an_moe_target_varies_its_routing_skew_and_a_dense_one_says_why_not():
    moe = _small(("model.name", "Qwen/Qwen3-30B-A3B"))
    vs, _ = rb.variants(moe, _inputs(moe).cost, ["static:4_1_4"])
    assert [v.sets for v in vs if v.input == "routing skew"] == [{"model.routing_skew": rb.ROUTING_SKEW_HIGH}]
    skewed = _small(("model.name", "Qwen/Qwen3-30B-A3B"), ("model.routing_skew", 2.0))  # uniform: the other end
    vs, _ = rb.variants(skewed, _inputs(skewed).cost, ["static:4_1_4"])
    assert [v.sets for v in vs if v.input == "routing skew"] == [{"model.routing_skew": 0.0}]
    dense = _small()
    vs, skipped = rb.variants(dense, _inputs(dense).cost, ["static:4_1_4"])
    assert not any(v.input == "routing skew" for v in vs) and "routing skew: the target is dense" in skipped


def _fake_run(speed_of):
    """A task runner whose makespans are (100 + 4 x seed) / speed_of(policy, scenario): no SD's spread
    over seeds 0-1 is 100-104 s, so a setting within ~4% of it overlaps it."""
    def run(tasks):
        rows = []
        for t in tasks:
            for p in (BASELINE_POLICY, *[x.name for x in t.scenario.policies if x.name != BASELINE_POLICY]):
                sp = 1.0 if p == BASELINE_POLICY else speed_of(p, t.scenario)
                rows.append({"policy": p, "switch": t.switch, "seed": t.seed, "rollout_s": (100.0 + 4 * t.seed) / sp,
                             "speedup": sp, "accept": 2.0, "sd_share": 1.0, "switch_s": 0.0, "warnings": "[]"})
        return pd.DataFrame(rows)
    return run


def _assess(s, speed_of):
    cands = adv.candidate_grid(["static:4_1_4", "static:8_4_32", "cost-aware"], ["reprefill"])
    run = _fake_run(speed_of)
    rows = adv.with_end_to_end(adv.label_rows(run(adv.plan_tasks(s, cands, [0, 1], ["reprefill"])), cands), 50.0)
    ranking = adv.rank(rows)
    rec = adv.recommend(ranking)
    return rec, rb.assess(s, ranking, cands, [0, 1], ["reprefill"], rec, rows, 50.0, _inputs(s).cost, run)


def test_a_gpu_priced_from_a_borrowed_calibration_gets_a_wider_band_and_says_so():
    # H20 has no profiles: H100's fit prices it, so both its efficiency (wider than the roofline's range,
    # around the borrowed fit) and the cost model (roofline) vary; an H100 with its own fit varies neither
    h20 = _small(("cluster.gpu", "H20"))
    cost = _inputs(h20).cost
    fit = cost.calibration.matmul
    vs, skipped = rb.variants(h20, cost, ["static:4_1_4"])
    eff = [v.sets for v in vs if v.input == "GPU efficiency"]
    assert eff == [{"cluster.flops_efficiency": round(fit.flops_efficiency * 0.6, 4),
                    "cluster.bandwidth_efficiency": round(fit.bandwidth_efficiency * 0.8, 4)},
                   {"cluster.flops_efficiency": round(min(1.0, fit.flops_efficiency * 1.2), 4),
                    "cluster.bandwidth_efficiency": round(min(1.0, fit.bandwidth_efficiency * 1.1), 4)}]
    assert rb.BORROWED_FLOPS_LOW < rb.FLOPS_LOW and rb.BORROWED_BANDWIDTH_LOW < rb.BANDWIDTH_LOW
    assert [v.sets for v in vs if v.input == "cost model"] == [{"cost.model": "roofline"}]
    assert not any(x.startswith(("GPU efficiency", "cost model")) for x in skipped)
    # the variant is a scenario field, and it reaches the borrowed fit
    from tltsim.scenario import with_values
    from tltsim.scenario.build import cost_model

    low = cost_model(with_values(h20, eff[0]))
    assert low.calibration.matmul.flops_efficiency == eff[0]["cluster.flops_efficiency"]
    assert "set, not fitted" in low.source
    assert rb.unmeasured_gpu(h20, cost).startswith("H20 was not measured: its kernels are priced with H100-SXM's")
    assert rb.unmeasured_gpu(_small(), _inputs(_small()).cost) == ""


def test_the_answer_flips_to_no_sd_where_a_stale_drafter_stops_paying_and_holds_elsewhere():
    s = _small(("cluster.gpu", "H20"))

    def speed(p, sk):  # the chain pays 1.10x at quality 1 and loses below 0.95; the tree always loses
        if p == "static:4_1_4":
            return 1.10 if sk.drafter.quality > 0.95 else 0.97
        return 0.8
    rec, r = _assess(s, speed)
    assert rec.label == "static:4_1_4"
    flips = r.flips
    assert [(f.variant.input, f.variant.value, f.best) for f in flips] == [
        ("drafter quality", "0.89 (the stale floor)", BASELINE_POLICY)]
    # its makespans (103.1-107.2 s) overlap no SD's (100-104 s), yet SD stopping to pay is a flip, not a tie
    assert flips[0].speedup == pytest.approx((0.97, 0.97, 0.97))
    line = r.line()
    assert line.startswith("flips to no SD (1.000x; the recommendation 0.970x) if drafter quality is 0.89 "
                           "(the stale floor); otherwise holds across GPU efficiency, cost model, drafter quality")
    assert "(rollout speedup 0.970-1.100x over those runs; H20 was not measured: " in line
    # end to end under the phases x1/2 and x2, the median over seeds of (b + k 50) / (b / 1.1 + k 50)
    assert [k for k, _ in r.e2e] == [0.5, 2.0]
    want = [sum((b + k * 50) / (b / 1.1 + k * 50) for b in (100, 104)) / 2 for k in (0.5, 2.0)]
    assert [x for _, x in r.e2e] == pytest.approx(want)


def test_another_sd_setting_winning_within_the_spread_is_a_tie_not_a_flip():
    s = _small(("cluster.gpu", "H20"))

    def speed(p, sk):
        eff = sk.cluster.flops_efficiency or 0.7
        if p == "static:4_1_4":
            return 1.50
        if p == "static:8_4_32":  # wins by far at high efficiency, ties (same makespan) at low
            return 2.0 if eff > 0.8 else 1.50
        return 1.2
    rec, r = _assess(s, speed)
    assert rec.label == "static:4_1_4"  # grid order breaks the exact tie at the base point
    by_value = {f.variant.value: f for f in r.results if f.variant.input == "GPU efficiency"}
    high = next(v for k, v in by_value.items() if k.startswith("high"))
    low = next(v for k, v in by_value.items() if k.startswith("low"))
    assert high.flips and high.best == "static:8_4_32"
    assert not low.flips


def test_the_real_simulator_runs_every_variant_at_the_top_settings():
    s = _small(("cluster.gpu", "H20"))
    cands = adv.candidate_grid(["static:4_1_4", "elastic:32:1+static:4_1_4"], ["catch_up"])
    tasks = adv.plan_tasks(s, cands, [0], ["catch_up"])
    rows = adv.with_end_to_end(adv.label_rows(adv.run_tasks(tasks), cands), None)
    ranking = adv.rank(rows)
    rec = adv.recommend(ranking)
    r = rb.assess(s, ranking, cands, [0], ["catch_up"], rec, rows, None, _inputs(s).cost, adv.run_tasks)
    assert {v.variant.input for v in r.results} == {"drafter quality", "GPU efficiency", "cost model"}
    assert set(r.settings) == {"static:4_1_4", "elastic:32:1+static:4_1_4", BASELINE_POLICY}
    assert r.e2e == ()  # no later phases priced: no end-to-end range
    lo, hi = r.band
    assert lo <= rec.speedup[0] <= hi


def test_with_no_input_to_vary_the_line_says_so():
    r = rb.Robustness("x", (), (), ("cost model: a measured table of this engine prices it",), (1.5, 1.5), ("x",))
    assert r.line() == ("not assessed: no unmeasured input applies here (cost model: a measured table of this "
                        "engine prices it)")


def test_quality_varies_for_model_based_kinds_and_a_measured_profile_narrows_it_to_going_stale():
    def quality(s):
        vs, skipped = rb.variants(s, _inputs(s).cost, ["static:4_1_4"])
        return sorted(v.value for v in vs if v.input == "drafter quality"), skipped

    for kind in ("eagle3", "mtp", "block"):  # model-based: the stale floor and x 1.15 (at most the profile's limit)
        values, _ = quality(_small(("drafter.kind", kind)))
        assert len(values) == 2 and "0.89 (the stale floor)" in values, (kind, values)
    values, skipped = quality(_small(("drafter.kind", "eagle3"), ("acceptance.alphas", (0.8, 0.7))))
    assert values == ["0.89 (the stale floor)"]  # measured: nothing above the user's own drafter is assumed
    assert any(x.startswith("drafter quality above 1: not varied, the measured acceptance profile") for x in skipped)
    values, skipped = quality(_small(("drafter.kind", "suffix")))
    assert values == [] and any("suffix drafter is model-free" in x for x in skipped)
    m = _small(("drafter.kind", "ngram"), ("acceptance.alphas", (0.6,)))
    vs, skipped = rb.variants(m, _inputs(m).cost, ["static:4_1_4"])
    assert not any(v.input == "n-gram alpha" for v in vs)
    assert "n-gram alpha: the measured profile replaces it" in skipped

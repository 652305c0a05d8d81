"""`cost.model = "measured"` in a scenario: built from the profiles on the search path, the roofline as
fallback for GPUs without profiles, the run says which served, and existing scenarios keep their hashes."""

from __future__ import annotations

import numpy as np
import pytest
from cost.profile_fixtures import write_profiles

from tltcore.cost import RooflineCostModel
from tltcore.cost.measured import MeasuredCostModel, measured_cost_model
from tltcore.errors import InputError
from tltcore.model_shape import get_model
from tltsim.scenario import resolve, scenario_toml
from tltsim.scenario.build import cost_model, describe_cost

BUNDLED = "dapo_qwen32b_polytrace"


@pytest.fixture
def profiles(tmp_path, monkeypatch):
    root = write_profiles(tmp_path / "profiles")
    monkeypatch.setenv("TLT_GPU_PROFILES", str(root))
    return root


def _scenario(*sets: tuple[str, object]):
    return resolve(BUNDLED, [(k, v, "--set") for k, v in sets]).scenario


def test_measured_scenario_builds_the_calibrated_model(profiles):
    s = _scenario(("cost.model", "measured"), ("cluster.gpu", "H100"))
    cm = cost_model(s)
    assert isinstance(cm, MeasuredCostModel) and cm.measured
    ref = measured_cost_model(get_model(s.model.name), "H100", s.cluster.tp, profiles=profiles)
    ctx = np.full(4, 2048)
    assert cm.decode_time(ctx) == pytest.approx(ref.decode_time(ctx), rel=1e-12)
    line = describe_cost(cm)
    assert line.startswith("cost model: measured") and "collectives measured" in line


def test_collectives_analytic_changes_tp_costs_only(profiles):
    measured = cost_model(_scenario(("cost.model", "measured"), ("cluster.tp", 4)))
    analytic = cost_model(_scenario(("cost.model", "measured"), ("cluster.tp", 4), ("cost.collectives", "analytic")))
    assert "collectives analytic" in describe_cost(analytic)
    ctx = np.full(1, 1024)
    assert measured.decode_time(ctx) != analytic.decode_time(ctx)


def test_gpu_without_profiles_falls_back_to_the_roofline_and_says_so(profiles):
    cm = cost_model(_scenario(("cost.model", "measured"), ("cluster.gpu", "B200")))
    assert isinstance(cm, MeasuredCostModel) and not cm.measured
    assert "roofline" in describe_cost(cm) and "B200" in describe_cost(cm)


def test_roofline_scenario_is_described_as_roofline():
    cm = cost_model(_scenario())
    assert type(cm) is RooflineCostModel
    assert describe_cost(cm).startswith("cost model: roofline")


def test_collectives_needs_the_measured_model():
    with pytest.raises(InputError, match="collectives"):
        _scenario(("cost.collectives", "analytic"))


def test_unset_collectives_leaves_the_resolved_toml_and_hash_unchanged():
    text = scenario_toml(_scenario())
    assert "collectives" not in text
    assert 'collectives = "analytic"' in scenario_toml(_scenario(("cost.model", "measured"),
                                                                 ("cost.collectives", "analytic")))


def test_overheads_apply_to_the_measured_model(profiles):
    cm = cost_model(_scenario(("cost.model", "measured"), ("cost.sd_overhead_s", 0.002)))
    assert cm.sd_overhead_s == 0.002

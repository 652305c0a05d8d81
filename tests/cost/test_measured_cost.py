"""tltcore.cost.measured: the fit recovers known laws, uses TP and num_tokens, composes iterations,
and falls back to the roofline where there are no profiles (synthetic profiles; no ../shared)."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pandas as pd
import pytest

import tltcore.cost.measured as measured
from tltcore.cost import CostModel, RooflineCostModel
from tltcore.cost.gpu_profiles import load_compute, load_network
from tltcore.cost.measured import (
    CollectiveTable,
    MeasuredCostModel,
    calibrate,
    measured_cost_model,
    predict_ops,
)
from tltcore.errors import InputError
from tltcore.hardware import get_gpu
from tltcore.model_shape import get_model
from tltcore.policy.base import SDConfig

from .profile_fixtures import SHAPES, TRUE_ELEMENTWISE, TRUE_MATMUL, write_profiles


def _max_rel_err(cal, rows) -> float:
    return float(np.max(np.abs(predict_ops(cal, rows) / (rows["median_ms"].to_numpy() * 1e-3) - 1)))


def test_the_fit_recovers_known_efficiencies(synthetic_profiles):
    cal = calibrate(load_compute(synthetic_profiles), "h100")
    m = cal.matmul
    assert m.flops_efficiency == pytest.approx(TRUE_MATMUL.flops_efficiency, rel=0.01)
    assert m.bandwidth_efficiency == pytest.approx(TRUE_MATMUL.bandwidth_efficiency, rel=0.01)
    assert m.latency_s == pytest.approx(TRUE_MATMUL.latency_s, rel=0.02)
    assert m.smoothness == pytest.approx(TRUE_MATMUL.smoothness, rel=0.05)
    for op, fit in cal.elementwise.items():
        assert fit.bandwidth_efficiency == pytest.approx(TRUE_ELEMENTWISE.bandwidth_efficiency, rel=0.01), op
        assert fit.latency_s == pytest.approx(TRUE_ELEMENTWISE.latency_s, rel=0.02), op


def test_a_held_out_model_is_predicted_from_the_others(synthetic_profiles):
    compute = load_compute(synthetic_profiles)
    cal = calibrate(compute, "h100", exclude=["synth/big-70b"])
    assert "synth/big-70b" not in cal.models
    assert _max_rel_err(cal, compute[compute["model"] == "synth/big-70b"]) < 0.01


def test_noisy_profiles_still_recover_the_efficiencies(tmp_path):
    cal = calibrate(load_compute(write_profiles(tmp_path, noise=0.05)), "h100")
    assert cal.matmul.flops_efficiency == pytest.approx(TRUE_MATMUL.flops_efficiency, rel=0.05)
    assert cal.matmul.bandwidth_efficiency == pytest.approx(TRUE_MATMUL.bandwidth_efficiency, rel=0.05)


def test_break_it_a_fit_that_ignored_tp_or_num_tokens_would_fail(synthetic_profiles, monkeypatch):
    """The recovery checks above see TP (data at TP 8 is ~8x faster than at TP 1) and num_tokens (the
    compute-bound rows); a fit that dropped either would miss them by far, as these sabotaged fits show."""
    compute = load_compute(synthetic_profiles)
    assert _max_rel_err(calibrate(compute, "h100"), compute) < 0.01  # the real fit
    # (1) TP ignored: every row priced with the unsharded (TP 1) weight.
    real_dims = measured.matmul_dims
    monkeypatch.setattr(measured, "matmul_dims", lambda op, s, tp: real_dims(op, s, 1))
    blind_tp = calibrate(compute, "h100")
    assert _max_rel_err(blind_tp, compute) > 0.5
    assert blind_tp.matmul.bandwidth_efficiency != pytest.approx(TRUE_MATMUL.bandwidth_efficiency, rel=0.05)
    monkeypatch.undo()
    # (2) num_tokens ignored: every row fitted as if it ran 1 token.
    blind_tokens = calibrate(compute.assign(num_tokens=1), "h100")
    assert _max_rel_err(blind_tokens, compute) > 0.5
    # and the real fit's TP / num_tokens scaling is the data's
    cal = calibrate(compute, "h100")
    s = SHAPES["synth/big-70b"]
    one, eight = (float(cal.op_time("mlp_up_proj", s, tp, 1)) for tp in (1, 8))
    assert one / eight == pytest.approx(float(TRUE_MATMUL.time(1, *measured.matmul_dims("mlp_up_proj", s, 1), cal.spec))
                                        / float(TRUE_MATMUL.time(1, *measured.matmul_dims("mlp_up_proj", s, 8),
                                                                 cal.spec)), rel=0.01)
    assert float(cal.op_time("mlp_up_proj", s, 1, 4096)) > 10 * one  # compute-bound at 4096 tokens


def test_collective_table_interpolates_and_extrapolates(synthetic_profiles):
    table = CollectiveTable.from_frame(load_network(synthetic_profiles), "h100_dgx")
    assert set(table.sizes) == {2, 4, 8}
    for w in (2, 8):
        x, y = table.sizes[w]
        assert table.time(float(x[3]), w) == pytest.approx(y[3])
        mid = float(np.sqrt(x[3] * x[4]))
        assert y[3] < table.time(mid, w) < y[4]
        assert table.time(1.0, w) == pytest.approx(y[0])  # below the table: the latency floor
        assert table.time(4 * x[-1], w) > y[-1]  # beyond it: keeps growing with bytes
    assert table.time(1e6, 16) is None


def test_collective_table_is_non_decreasing_in_bytes():
    import pandas as pd

    noisy = pd.DataFrame({"topology": "n", "collective": "all_reduce", "bytes": [1000, 2000, 4000, 8000],
                          "workers": 4, "devices_per_node": 4, "median_ms": [0.040, 0.020, 0.030, 0.050]})
    table = CollectiveTable.from_frame(noisy, "n")
    assert table.sizes[4][1].tolist() == pytest.approx([20e-6, 20e-6, 30e-6, 50e-6])
    times = [table.time(b, 4) for b in np.geomspace(500, 20000, 30)]
    assert all(b >= a * (1 - 1e-12) for a, b in itertools.pairwise(times))


def test_collectives_measured_or_analytic(synthetic_profiles):
    qwen = get_model("Qwen2.5-32B")
    measured_tp = measured_cost_model(qwen, "H100", 4, profiles=synthetic_profiles)
    analytic_tp = measured_cost_model(qwen, "H100", 4, profiles=synthetic_profiles, collectives="analytic")
    assert "collectives measured h100_dgx" in measured_tp.describe()
    assert "collectives analytic" in analytic_tp.describe()
    cal = analytic_tp.calibration
    assert cal.all_reduce_time(20480, 4)[1] == "analytic"
    # the synthetic table's latency is 10 us, the preset's 8 us: measured costs more per collective
    ctx = np.full(1, 1024)
    assert measured_tp.decode_time(ctx) > analytic_tp.decode_time(ctx)
    with pytest.raises(InputError, match="collectives"):
        measured_cost_model(qwen, "H100", 4, profiles=synthetic_profiles, collectives="nccl")


def test_measured_model_composes_iterations(synthetic_profiles):
    qwen = get_model("Qwen2.5-7B")
    cm = measured_cost_model(qwen, "H100", 1, profiles=synthetic_profiles)
    assert isinstance(cm, CostModel) and cm.measured and "measured" in cm.describe()
    ctx = np.full(8, 1024)
    decode = cm.decode_time(ctx)
    assert 0 < decode < cm.decode_time(np.full(64, 1024)) < cm.decode_time(np.full(64, 8192))
    assert cm.decode_span_time(ctx, 5) == pytest.approx(sum(cm.decode_time(ctx + j) for j in range(5)), rel=1e-9)
    # verify forwards of 1 .. 2,080 rows grow with rows
    rows = [cm.verify_time(np.full(b, 1024), v) for b, v in ((1, 0), (8, 7), (32, 31), (32, 64))]
    assert all(a < b for a, b in itertools.pairwise(rows))
    sd = cm.sd_time(ctx, SDConfig(8, 4, 32))
    assert sd > cm.verify_time(ctx, 32) + 8 * cm.draft_step_time(ctx, 4)
    assert cm.sd_time(ctx, SDConfig()) == cm.decode_time(ctx)
    assert cm.prefill_time(np.array([512, 0]), np.array([0, 100])) > 0
    assert 0 < cm.drafter_prefill_time(np.array([512]), np.array([0])) < cm.prefill_time(np.array([512]), np.array([0]))
    # per-request contexts, not the mean: a long tail costs more than the same mean spread evenly
    assert cm.decode_time(np.array([100] * 7 + [30000])) > cm.decode_time(np.full(8, (700 + 30000) // 8)) * 0.999
    # TP splits the work: the same batch is faster on 4 GPUs
    cm4 = measured_cost_model(qwen, "H100", 4, profiles=synthetic_profiles)
    assert cm4.decode_time(np.full(64, 1024)) < cm.decode_time(np.full(64, 1024))


def test_the_drafter_step_prices_one_layer_plus_lm_head(synthetic_profiles):
    qwen = get_model("Qwen2.5-7B")
    cm = measured_cost_model(qwen, "H100", 1, profiles=synthetic_profiles)
    step = cm.draft_step_time(np.full(8, 1024), 4)
    cal = cm.calibration
    ops = measured.OpShape.of(qwen)
    lm_head = float(cal.op_time("lm_head", ops, 1, 32))
    assert lm_head < step < cm.decode_time(np.full(8, 1024)) / 4


def test_a_gpu_without_profiles_borrows_the_nearest_measured_calibration(synthetic_profiles):
    # B200 (Blackwell, HBM) borrows H100's fit: its fractions of peak and latencies, at B200's own peaks and link
    qwen = get_model("Qwen2.5-7B")
    cm = measured_cost_model(qwen, "B200", 4, profiles=synthetic_profiles)
    own = measured_cost_model(qwen, "H100", 4, profiles=synthetic_profiles)
    cal = cm.calibration
    assert cm.measured and cal.borrowed is not None and cal.gpu == "h100" and cal.spec == get_gpu("B200")
    assert cal.matmul == own.calibration.matmul and cal.collectives is None  # never H100's NCCL table
    assert cm.source.startswith("measured: calibrated on H100-SXM profiles, borrowed for B200")
    assert "not measured on B200" in cm.source and "collectives analytic (B200's own link)" in cm.source
    ctx = np.full(8, 2048)
    assert cm.decode_time(ctx) < own.decode_time(ctx)  # 8 vs 3.35 TB/s at the same fitted fraction


def test_a_borrowed_calibration_on_the_same_data_sheet_prices_as_the_own_one(synthetic_profiles):
    # an H100 under another name is priced with H100's fit at H100's peaks: at TP 1 (no collectives) the same times
    qwen = get_model("Qwen2.5-7B")
    clone = dataclasses.replace(get_gpu("H100"), name="H100-clone", source="a copy")
    cm = measured_cost_model(qwen, clone, 1, profiles=synthetic_profiles)
    own = measured_cost_model(qwen, "H100", 1, profiles=synthetic_profiles)
    assert cm.calibration.borrowed is not None and own.calibration.borrowed is None
    for b in (1, 16, 128):
        ctx = np.full(b, 2048)
        assert cm.decode_time(ctx) == own.decode_time(ctx)
        assert cm.sd_time(ctx, SDConfig(8, 4, 32)) == own.sd_time(ctx, SDConfig(8, 4, 32))


def test_the_borrowing_rule():
    rule = {name: (measured.nearest_profile(get_gpu(name)).key, measured.nearest_profile(get_gpu(name)).own)
            for name in ("H100", "A100", "A40", "H200", "H800", "H20", "B200", "B300", "GB200", "MI300X", "MI355X",
                         "Ascend910B", "A800", "A100-40GB", "L40", "L40S", "L20", "RTX4090", "RTX5090", "RTX3090")}
    assert rule == {"H100": ("h100", True), "A100": ("a100", True), "A40": ("a40", True),
                    **dict.fromkeys(("H200", "H800", "H20", "B200", "B300", "GB200", "MI300X", "MI355X",
                                     "Ascend910B"), ("h100", False)),
                    "A800": ("a100", False), "A100-40GB": ("a100", False),
                    **dict.fromkeys(("L40", "L40S", "L20", "RTX4090", "RTX5090", "RTX3090"), ("a40", False))}
    assert measured.nearest_profile(get_gpu("cpu")) is None  # no peaks to apply fractions to
    # a spec that only reuses a measured GPU's name is another GPU: it borrows, it does not pass for H100
    fake = dataclasses.replace(get_gpu("H100"), hbm_bytes_per_s=5e12)
    assert measured.profile_key(fake) is None and not measured.nearest_profile(fake).own
    assert measured.profile_key(dataclasses.replace(get_gpu("H100"), flops_efficiency=0.5)) == "h100"


def test_set_efficiencies_replace_a_borrowed_fit_only(synthetic_profiles):
    qwen = get_model("Qwen2.5-7B")
    plain = measured_cost_model(qwen, "MI300X", 1, profiles=synthetic_profiles)
    fit = plain.calibration.matmul
    set_ = measured_cost_model(qwen, "MI300X", 1, profiles=synthetic_profiles, flops_efficiency=0.4,
                               bandwidth_efficiency=fit.bandwidth_efficiency / 2)
    m = set_.calibration.matmul
    assert (m.flops_efficiency, m.latency_s, m.smoothness) == (0.4, fit.latency_s, fit.smoothness)
    for op, law in set_.calibration.elementwise.items():  # bandwidth scales every element-wise law alike
        assert law.bandwidth_efficiency == pytest.approx(plain.calibration.elementwise[op].bandwidth_efficiency / 2)
    assert set_.decode_time(np.full(8, 2048)) > plain.decode_time(np.full(8, 2048))
    assert "flops_efficiency, bandwidth_efficiency set, not fitted" in set_.source
    own = measured_cost_model(qwen, "H100", 1, profiles=synthetic_profiles, flops_efficiency=0.4)
    assert own.calibration.matmul.flops_efficiency != 0.4  # a GPU's own fit is a measurement


def test_a_gpu_whose_nearest_profiles_are_missing_falls_back_to_the_roofline(tmp_path, monkeypatch):
    # L40S borrows A40's fit; with no profiles on the search path the roofline serves and says why
    monkeypatch.setenv("TLT_SHARED_DIR", str(tmp_path / "empty"))
    monkeypatch.delenv("TLT_GPU_PROFILES", raising=False)
    qwen = get_model("Qwen2.5-7B")
    cm = measured_cost_model(qwen, "L40S", 1)
    assert not cm.measured and cm.source.startswith("roofline (analytic; no measured profiles for L40S, and ")
    roof = RooflineCostModel(qwen, get_gpu("L40S"), 1)
    for b in (1, 16, 128):
        ctx = np.full(b, 2048)
        assert cm.decode_time(ctx) == roof.decode_time(ctx)
        assert cm.sd_time(ctx, SDConfig(8, 4, 32)) == roof.sd_time(ctx, SDConfig(8, 4, 32))


def test_no_profiles_on_the_search_path_falls_back_with_a_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("TLT_SHARED_DIR", str(tmp_path / "empty"))
    monkeypatch.delenv("TLT_GPU_PROFILES", raising=False)
    cm = measured_cost_model(get_model("Qwen2.5-7B"), "H100", 1)
    assert not cm.measured and "no measured GPU profiles found" in cm.source
    with pytest.raises(InputError, match="no vidur/ folder"):  # an explicit folder must exist
        measured_cost_model(get_model("Qwen2.5-7B"), "H100", 1, profiles=tmp_path)


def test_a_calibration_of_another_gpu_is_refused(synthetic_profiles):
    cal = calibrate(load_compute(synthetic_profiles), "h100")
    with pytest.raises(InputError, match="fitted on H100-SXM"):
        MeasuredCostModel(get_model("Qwen2.5-7B"), get_gpu("A100"), 1, calibration=cal)
    with pytest.raises(InputError, match="no compute profiles for a100"):
        calibrate(load_compute(synthetic_profiles), "a100")
    with pytest.raises(InputError, match="no data-sheet peaks"):
        calibrate(load_compute(synthetic_profiles), "v100")


def test_measured_model_is_frozen_and_hashable(synthetic_profiles):
    cm = measured_cost_model(get_model("Qwen2.5-7B"), "H100", 1, profiles=synthetic_profiles)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cm.tp = 2  # type: ignore[misc]
    hash(cm)


def test_the_default_calibration_reads_only_its_own_gpus_profiles(tmp_path):
    """A simulation fits one GPU's laws: reading that GPU's files alone gives the calibration that
    reading every GPU's gives (the rows it fits on are the same, in the same order), and another GPU's
    unreadable file no longer stops it."""
    from tltcore.cost.measured import _default_calibration

    root = write_profiles(tmp_path / "p", gpus=("h100", "a100"))
    every = load_compute(root)
    mine = load_compute(root, "h100")
    pd.testing.assert_frame_equal(mine, every[every["gpu"] == "h100"].reset_index(drop=True))
    want = repr(calibrate(every, "h100", network=load_network(root)))  # every fitted float
    broken = write_profiles(tmp_path / "q", gpus=("h100", "a100"))
    next((broken / "vidur" / "compute" / "a100").glob("**/mlp.csv")).write_text("not,a\nprofile")
    assert repr(_default_calibration("h100", broken.resolve())) == want

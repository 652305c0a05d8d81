"""The measured profiles themselves (../shared/gpu-profiles): skipped cleanly where they are absent."""

from __future__ import annotations

import numpy as np
import pytest

from tltcore.cost import RooflineCostModel
from tltcore.cost.gpu_profiles import MATMUL_OPS, OPS, load_compute, load_network
from tltcore.cost.measured import calibrate, default_calibration, measured_cost_model, predict_ops
from tltcore.hardware import get_gpu
from tltcore.model_shape import get_model
from tltcore.policy.base import SDConfig
from tltcore.shared_paths import gpu_profiles_dir

pytestmark = pytest.mark.skipif(gpu_profiles_dir() is None,
                                reason="needs the measured GPU profiles (../shared/gpu-profiles or $TLT_GPU_PROFILES)")


@pytest.fixture(scope="module")
def compute():
    return load_compute()


def test_every_profile_loads_tidy(compute):
    assert set(compute["gpu"]) == {"h100", "a100", "a40"}
    assert compute.groupby("gpu")["model"].nunique().to_dict() == {"a100": 8, "a40": 6, "h100": 6}
    assert set(compute["op"]) == set(OPS)
    assert set(compute["tp"]) == {1, 2, 4, 8} and compute["num_tokens"].min() == 1
    longest = compute.groupby("model")["num_tokens"].max()
    assert longest.max() == 32768 and set(longest[longest > 4096].index) == {"meta-llama/Meta-Llama-3-8B",
                                                                               "meta-llama/Meta-Llama-3-70B"}
    assert not compute.duplicated(["gpu", "model", "op", "num_tokens", "tp"]).any()
    # the README's quick look: Llama-2-7B fused gate+up on H100, TP 1
    row = compute[(compute["gpu"] == "h100") & (compute["model"] == "meta-llama/Llama-2-7b-hf")
                  & (compute["op"] == "mlp_up_proj") & (compute["tp"] == 1)].set_index("num_tokens")["median_ms"]
    assert (row[1], row[304], row[3488]) == pytest.approx((0.064, 0.107, 0.887), abs=1e-3)
    network = load_network()
    assert {"h100_dgx", "a100_dgx"} <= set(network["topology"])


def test_leave_one_model_out_beats_the_roofline_on_h100(compute):
    """The report's headline in small: held-out models' matmuls and whole layers on H100."""
    from analysis.gpu_calibration import layer_rows, roofline_today

    errs, roof = [], []
    preds = []
    rows = compute[compute["gpu"] == "h100"]
    for model in sorted(rows["model"].unique()):
        cal = calibrate(compute, "h100", exclude=[model])
        held = rows[rows["model"] == model].reset_index(drop=True)
        held = held.assign(measured_s=held["median_ms"] * 1e-3, calibrated_s=predict_ops(cal, held),
                           roofline_s=roofline_today(held, "h100"))
        preds.append(held)
        mm = held[held["op"].isin(MATMUL_OPS)]
        errs.append(np.abs(mm["calibrated_s"] / mm["measured_s"] - 1))
        roof.append(np.abs(mm["roofline_s"] / mm["measured_s"] - 1))
    cal_err, roof_err = np.concatenate(errs), np.concatenate(roof)
    assert np.median(cal_err) < 0.10 and np.quantile(cal_err, 0.9) < 0.25
    assert np.median(cal_err) < np.median(roof_err) and np.quantile(cal_err, 0.9) < np.quantile(roof_err, 0.9)
    import pandas as pd

    layer = layer_rows(pd.concat(preds, ignore_index=True))
    err = np.abs(layer["calibrated_s"] / layer["measured_s"] - 1)
    assert np.median(err) < 0.06


def test_fitted_constants_stay_within_the_data_sheets():
    for gpu in ("h100", "a100", "a40"):
        cal = default_calibration(gpu)
        m = cal.matmul
        assert 0.5 < m.flops_efficiency <= 1.0 and 0.5 < m.bandwidth_efficiency <= 1.0, gpu
        assert 0 < m.latency_s < 20e-6 and m.smoothness >= 1.0, gpu
        assert all(0 < f.bandwidth_efficiency <= 1.0 for f in cal.elementwise.values()), gpu


def test_measured_collectives_reproduce_their_table():
    cal = default_calibration("h100")
    x, y = cal.collectives.sizes[8]
    for i in (0, len(x) // 2, len(x) - 1):
        assert cal.all_reduce_time(float(x[i]), 8) == (pytest.approx(float(y[i])), "measured h100_dgx")
    assert default_calibration("a40").collectives is None
    assert cal.all_reduce_time(1e6, 1) == (0.0, "none")


@pytest.mark.parametrize(("gpu", "model", "tp"), [("H100", "Qwen2.5-7B", 1), ("A100", "Qwen2.5-32B", 4),
                                                  ("A40", "Qwen2.5-7B", 2)])
def test_real_model_iterations_are_sane(gpu, model, tp):
    shape = get_model(model)
    cm = measured_cost_model(shape, gpu, tp)
    assert cm.measured and cm.calibration.gpu == gpu.lower()
    roof = RooflineCostModel(shape, get_gpu(gpu) if gpu != "A40" else cm.gpu, tp)
    ctx = np.full(1, 1024)
    # batch-1 decode streams the weights: within a factor 1.5 of the roofline's, and not below it by much
    assert 0.8 < cm.decode_time(ctx) / roof.decode_time(ctx) < 1.5
    times = [cm.decode_time(np.full(b, 2048)) for b in (1, 8, 64, 256)]
    assert times == sorted(times)
    # verify forwards of 1 .. 2,080 rows
    verify = [cm.verify_time(np.full(b, 2048), v - 1) for b, v in ((1, 1), (8, 8), (32, 65), (32, 65))]
    assert verify[0] < verify[1] < verify[2]
    assert cm.sd_time(np.full(8, 2048), SDConfig(8, 4, 32)) > cm.decode_time(np.full(8, 2048))


def test_the_borrowing_rule_picks_the_better_borrowing_among_measured_gpus(compute):
    # each measured GPU priced with the others' calibrations moved to its data sheet (one layer's median error):
    # an HBM part is priced better by the other HBM part than by A40 (the rule: HBM parts never borrow A40),
    # and a GDDR part worse by HBM parts than by its own kind (the rule: GDDR parts borrow A40)
    from analysis.gpu_calibration import borrowing_errors

    err = borrowing_errors(compute).set_index(["gpu", "priced_with"])["median_abs_rel_err"]
    assert err["h100", "a100"] < err["h100", "a40"] and err["a100", "h100"] < err["a100", "a40"]
    for gpu in ("h100", "a100"):
        others = [err[gpu, s] for s in ("h100", "a100") if s != gpu]
        assert max(others) < 0.06 < err[gpu, "roofline"]  # borrowed across HBM parts: 4-5%, the roofline 11-24%
    assert err["a40", "a40"] < 0.05 < min(err["a40", "h100"], err["a40", "a100"])

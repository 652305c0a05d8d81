"""analysis.gpu_calibration on synthetic profiles: the report is written, complete and atomic."""

from __future__ import annotations

import pandas as pd

from analysis.gpu_calibration import write_report

from .profile_fixtures import write_profiles


def test_the_report_on_synthetic_profiles(tmp_path):
    root = write_profiles(tmp_path / "profiles", gpus=("h100", "a100"),
                          models=("synth/small-7b", "synth/gqa-8b", "synth/big-70b"))
    out = tmp_path / "report"
    write_report(out, root)
    names = {p.name for p in out.iterdir()}
    assert {"README.md", "errors.csv", "errors_by_model.csv", "fits.csv", "regimes.csv", "constants.csv",
            "scatter.png", "scatter.pdf", "error_by_op.png", "error_by_op.pdf", "paper_decode.csv"} <= names
    errors = pd.read_csv(out / "errors.csv")
    cal = errors[errors["cost_model"].str.startswith("calibrated")]
    # the synthetic data follow the model's own laws: held-out models are predicted almost exactly
    assert (cal[cal["op"] != "all_reduce"]["p90_abs_rel_err"] < 0.01).all()
    assert set(errors["gpu"]) == {"h100", "a100"} and len(pd.read_csv(out / "fits.csv")) == 6
    text = (out / "README.md").read_text()
    assert "leave one model out" in text and "Vidur" in text and "python -m analysis.gpu_calibration" in text

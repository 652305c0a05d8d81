"""``tlt sim run`` prices each policy for N steps; ``tlt sim capacity`` reruns the workload per GPU count."""

from __future__ import annotations

import pandas as pd

from conftest import invoke_cli

SMALL = ["--trace", "intern_s1_math", "--gpus", "8", "--tp", "2", "--set", "trace.prompts_per_step=4",
         "--set", "trace.cap=4000"]


def test_sim_run_prints_hours_gpu_hours_and_dollars_per_policy(tmp_path):
    res = invoke_cli("sim", "run", *SMALL, "--seeds", "1", "--for-steps", "3600", "--price", "H100=1",
                     "--out", str(tmp_path / "r"))
    assert res.returncode == 0, res.stderr
    summary = pd.read_csv(tmp_path / "r" / "summary.csv")
    base = float(summary.loc[summary["policy"] == "no-sd", "makespan_s"].sum())
    # 3600 steps of base seconds: base hours; x 8 GPUs x $1 = 8 x base dollars
    assert f"{base:.2f}" in res.stdout and f"{8 * base:,.2f}" in res.stdout
    assert "H100-SXM $1.00/GPU-h, your price (--price)" in res.stdout
    assert "rollout only" in res.stdout


def test_sim_run_refuses_a_bad_price_before_running(tmp_path):
    res = invoke_cli("sim", "run", *SMALL, "--price", "H100=x", "--out", str(tmp_path / "r"))
    assert res.returncode == 2 and "--price: 'x' in 'H100=x' is not a number" in res.stderr
    assert not (tmp_path / "r").exists()


def test_capacity_table_csv_and_figure(tmp_path):
    out = tmp_path / "cap"
    res = invoke_cli("sim", "capacity", "--gpus-list", "4,8", "--set", "trace.name=intern_s1_math", "--set",
                     "cluster.tp=2", "--set", "trace.prompts_per_step=4", "--set", "trace.cap=4000",
                     "--for-steps", "100", "--out", str(out))
    assert res.returncode == 0, res.stderr
    table = pd.read_csv(out / "capacity.csv")
    assert sorted(set(table["gpus"])) == [4, 8] and "no-sd" in set(table["policy"])
    assert (table["gpu_hours"] - table["gpus"] * table["step_s"] * 100 / 3600).abs().max() < 1e-9
    assert (out / "capacity.png").stat().st_size > 1000
    bad = invoke_cli("sim", "capacity", "--gpus-list", "4,x")
    assert bad.returncode == 2 and "--gpus-list" in bad.stderr

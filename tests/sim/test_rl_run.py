"""Whole RL runs: the step controller, presets, phases and their event log (small scenarios)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import needs_shared_traces, require_real_traces
from tltcore.errors import InputError
from tltcore.events import BUSY_KINDS, CLUSTER, check_event_log
from tltcore.hardware import get_gpu
from tltcore.model_shape import get_model
from tltsim.rl.phases import RLPhaseConfig, forward_flops, phase_times
from tltsim.rl.presets import PRESET_NAMES, get_preset, presets_with_baseline
from tltsim.rl.run import LATER_PHASES, compare_presets, run_preset
from tltsim.scenario import Scenario, apply_override, prepare


def _scenario(**sets: str) -> Scenario:
    base = {"trace.prompts_per_step": "8", "trace.num_steps": "3", "trace.cap": "4096", "cluster.gpus": "8",
            "cluster.tp": "2"}
    s = Scenario()
    for k, v in {**base, **sets}.items():
        s = apply_override(s, k, v)
    return s


#: a Spot Trainer that fits the bubble: fast, small checkpoints, a small session
ROOMY = {"trace.cap": "8192", "spot.samples_per_s": "2000", "spot.checkpoint_every": "32", "spot.max_samples": "64"}


@pytest.fixture(scope="module")
def roomy_runs() -> dict[str, object]:
    require_real_traces()
    s = _scenario(**ROOMY)
    inputs = prepare(s)
    return {name: run_preset(s, name, inputs) for name in ("verl", "tlt", "tlt-no-spot", "static-drafter")}


# ---- phases ---------------------------------------------------------------------------------------
def test_forward_flops_count_attention_per_sequence_not_from_the_mean() -> None:
    m = get_model("Qwen2.5-7B")
    lens = np.array([100, 30_000])
    naive = sum(L * m.matmul_flops_per_token + L * (L + 1) / 2 * m.attention_flops_per_position for L in lens)
    assert forward_flops(m, lens) == pytest.approx(naive)
    mean = np.full(2, lens.mean())
    assert forward_flops(m, lens) > forward_flops(m, mean)


def test_phase_times_follow_their_formulas() -> None:
    m, gpu = get_model("Qwen2.5-7B"), get_gpu("H100")
    prompts, resp = np.full(64, 200), np.full(64, 3000)
    cfg = RLPhaseConfig(reward_s_per_sample=0.5, reward_parallelism=8, train_mfu=0.4, forward_mfu=0.5)
    p = phase_times(m, gpu, 16, prompts, resp, cfg)
    fwd = forward_flops(m, prompts + resp)
    assert p.reward == pytest.approx(64 * 0.5 / 8)
    assert p.reference == p.old_log_prob == pytest.approx(fwd / (16 * gpu.bf16_flops * 0.5))
    assert p.actor_update == pytest.approx(4 * fwd / (16 * gpu.bf16_flops * 0.4))
    assert p.weight_sync == pytest.approx(m.weight_bytes / gpu.interconnect_bytes_per_s + cfg.weight_sync_overhead_s)
    twice = phase_times(m, gpu, 32, prompts, resp, cfg)
    assert twice.actor_update == pytest.approx(p.actor_update / 2)
    no_ref = phase_times(m, gpu, 16, prompts, resp, RLPhaseConfig(reference=False, activation_recompute=False))
    assert no_ref.reference == 0 and no_ref.actor_update == pytest.approx(3 / 4 * 0.4 / 0.35 * p.actor_update)


# ---- presets ---------------------------------------------------------------------------------------
def test_presets_are_named_with_suggestions_and_verl_first() -> None:
    assert presets_with_baseline(("tlt", "verl", "tlt")) == ("verl", "tlt")
    assert {"verl", "tlt-base", "static-drafter", "tlt", "tlt-no-spot", "tlt-periodic", "tlt-no-elastic",
            "tlt-no-mab", "speco-bubble"} <= set(PRESET_NAMES)
    with pytest.raises(InputError, match="did you mean tlt-no-spot"):
        get_preset("tlt-nospot")
    with pytest.raises(InputError, match="presets"):
        apply_override(Scenario(), "presets", "tlt,fast")


# ---- the run ---------------------------------------------------------------------------------------
def test_event_log_holds_every_phase_in_order_on_one_clock(roomy_runs) -> None:
    res = roomy_runs["tlt"]
    ev = res.events
    check_event_log(ev)
    assert {"rollout", "drafter_train", "checkpoint", *LATER_PHASES} <= set(ev["phase"])
    for _, part in ev.groupby("step"):
        stages = part[(part["worker"] == CLUSTER) & (part["kind"] == "stage")].sort_values("t_start")
        assert list(stages["phase"]) == ["rollout", *LATER_PHASES]
        assert np.allclose(stages["t_end"].to_numpy()[:-1], stages["t_start"].to_numpy()[1:])
    steps = res.steps
    # the next step's rollout starts where the previous step's weight sync ended
    assert np.allclose(steps["t_start"].to_numpy()[1:], steps["t_end"].to_numpy()[:-1])
    total = steps[["rollout_s", "drafter_train_s", *[f"{p}_s" for p in LATER_PHASES]]].sum(axis=1)
    assert np.allclose(total, steps["step_s"])


def test_spot_training_never_overlaps_own_generation_and_ends_with_the_rollout(roomy_runs) -> None:
    ev = roomy_runs["tlt"].events
    train = ev[ev["kind"] == "train"]
    assert len(train) > 0
    for row in train.itertuples():
        step = ev[ev["step"] == row.step]
        own = step[(step["worker"] == row.worker) & step["kind"].isin(BUSY_KINDS)]
        rollout_end = float(step[(step["phase"] == "rollout") & (step["kind"] == "stage")]["t_end"].iloc[0])
        assert row.t_start >= own["t_end"].max() - 1e-9
        assert row.t_end <= rollout_end + 1e-9


def test_trained_weights_are_used_from_the_next_step(roomy_runs) -> None:
    steps = roomy_runs["tlt"].steps
    assert steps["drafter_version"].iloc[0] == 0
    assert (steps["checkpoints"].iloc[:-1].cumsum().to_numpy() == steps["drafter_version"].iloc[1:].to_numpy()).all()
    ev = roomy_runs["tlt"].events
    roll = ev[(ev["phase"] == "rollout") & (ev["worker"] >= 0)]
    assert (roll.groupby("step")["drafter_version"].nunique() == 1).all()


def test_the_adaptive_drafter_stays_above_the_static_one(roomy_runs) -> None:
    tlt, static = roomy_runs["tlt"].steps, roomy_runs["static-drafter"].steps
    # both start from the drafter trained for the initial policy; training cannot lift it above that, so
    # they part from step 2: the adaptive one recovers what each update took, the static one does not
    assert (tlt["drafter_quality"].iloc[:2].to_numpy() == static["drafter_quality"].iloc[:2].to_numpy()).all()
    assert (tlt["drafter_quality"].iloc[2:].to_numpy() > static["drafter_quality"].iloc[2:].to_numpy()).all()
    assert static["drafter_quality"].is_monotonic_decreasing


def test_no_spot_is_slower_than_tlt_when_the_bubble_holds_the_training(roomy_runs) -> None:
    tlt, inline = roomy_runs["tlt"].steps, roomy_runs["tlt-no-spot"].steps
    assert (tlt["trained_samples"] == 64).all() and (tlt["lost_samples"] == 0).all()  # it fits the bubble
    assert (inline["drafter_train_s"] > 0).all() and (tlt["drafter_train_s"] == 0).all()
    assert inline["step_s"].sum() > tlt["step_s"].sum()


def _same_run(a, b) -> None:
    cols = ["step_s", "rollout_s", "drafter_train_s", "drafter_quality", "trained_samples"]
    pd.testing.assert_frame_equal(a.steps[cols], b.steps[cols])


@needs_shared_traces()
def test_periodic_retraining_trains_after_every_kth_rollout_only(roomy_runs) -> None:
    """``tlt-periodic`` is the serial stage of ``tlt-no-spot`` after every ``spot.retrain_every``-th
    rollout (TLT's released trainer retrains every 10 steps): every 1 is ``tlt-no-spot`` step for
    step; every 2 trains after the second rollout only (of three), and its drafter goes stale like the
    frozen one's until that training; past the run's length it never trains and is the frozen drafter."""
    s = _scenario(**ROOMY)
    inputs = prepare(s)
    every = {k: run_preset(apply_override(s, "spot.retrain_every", str(k)), "tlt-periodic", inputs) for k in (1, 2, 5)}
    _same_run(every[1], roomy_runs["tlt-no-spot"])
    two, static = every[2].steps, roomy_runs["static-drafter"].steps
    assert (two["drafter_train_s"] > 0).tolist() == [False, True, False]
    assert two["drafter_quality"].iloc[:2].tolist() == static["drafter_quality"].iloc[:2].tolist()
    assert two["drafter_quality"].iloc[2] > static["drafter_quality"].iloc[2]
    _same_run(every[5], roomy_runs["static-drafter"])


@needs_shared_traces()
def test_drift_zero_never_degrades_the_drafter_in_a_run() -> None:
    s = _scenario(**{**ROOMY, "drafter.drift": "0", "drafter.quality": "0.97", "drafter.stale_quality": "0.9"})
    for name in ("tlt", "static-drafter"):
        q = run_preset(s, name).steps["drafter_quality"]
        assert q.is_monotonic_increasing and q.iloc[0] == pytest.approx(0.97)


@needs_shared_traces()
def test_compare_presets_reports_speedups_over_verl() -> None:
    s = _scenario(**ROOMY, presets="tlt,tlt-base,speco-bubble,tlt-no-elastic,tlt-no-mab")
    events, steps, summary = compare_presets(s)
    assert list(summary["preset"]) == ["verl", "tlt", "tlt-base", "speco-bubble", "tlt-no-elastic", "tlt-no-mab"]
    base = summary.set_index("preset").loc["verl", "total_s"]
    assert summary["speedup"].to_numpy() == pytest.approx(base / summary["total_s"].to_numpy())
    assert summary.set_index("preset").loc["verl", "speedup"] == 1.0
    assert (summary["rollout_share"] < 1).all() and (summary["rollout_share"] > 0).all()
    # the post-rollout phases do not depend on the preset
    later = steps.groupby("preset")[[f"{p}_s" for p in LATER_PHASES]].sum()
    assert np.allclose(later.to_numpy(), later.to_numpy()[0])
    # verl never drafts; tlt-base drafts with the n-gram chain (no drafter training, no drift)
    by = steps.set_index(["preset", "step"])
    assert by.loc["verl", "mean_accept_length"].isna().all()
    assert (by.loc["tlt-base", "trained_samples"] == 0).all() and (by.loc["tlt-base", "drafter_quality"] == 1).all()
    assert set(events["policy"]) == set(summary["preset"])


@needs_shared_traces()
def test_32b_on_one_node_is_reported_out_of_memory() -> None:
    s = _scenario(**{"model.name": "Qwen2.5-32B", "cluster.tp": "4", "presets": "tlt"})
    _, steps, summary = compare_presets(s)
    assert list(summary["status"]) == ["oom", "oom"]
    assert summary["note"].str.contains("out of memory").all()
    assert steps.empty


@needs_shared_traces()
def test_same_seed_same_run() -> None:
    s = _scenario(**{**ROOMY, "acceptance.mode": "stochastic"})
    a, b = run_preset(s, "tlt"), run_preset(s, "tlt")
    pd.testing.assert_frame_equal(a.steps, b.steps)
    pd.testing.assert_frame_equal(a.events, b.events)


@needs_shared_traces()
def test_cli_runs_presets_and_writes_the_step_table(tmp_path) -> None:
    from typer.testing import CliRunner

    from tltcli import app

    out = tmp_path / "run"
    args = ["sim", "run", "--preset", "tlt", "--preset", "static-drafter", "--steps", "2", "--gpus", "8", "--tp", "2",
            "--set", "trace.prompts_per_step=4", "--set", "trace.cap=4096", "--seeds", "1", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "speedup over veRL" in result.output and "static-drafter" in result.output
    steps = pd.read_csv(out / "steps.csv")
    assert list(steps["preset"].unique()) == ["verl", "tlt", "static-drafter"] and len(steps) == 6
    summary = pd.read_csv(out / "summary.csv")
    assert summary.loc[summary["preset"] == "verl", "speedup"].item() == 1.0
    assert 'presets = ["verl", "tlt", "static-drafter"]' in (out / "scenario.resolved.toml").read_text()
    bad = CliRunner().invoke(app, ["sim", "run", "--preset", "tlt-nospot", "--out", str(tmp_path / "x")])
    assert bad.exit_code != 0 and not (tmp_path / "x").exists()


@needs_shared_traces()
def test_each_presets_events_can_be_taken_as_its_run_ends() -> None:
    # a --seeds run takes each preset's events as its run ends and keeps none (SeedSink.add_run): the
    # runs' tables are the one log in order, and nothing else changes
    s = _scenario(presets="tlt")
    inputs = prepare(s)
    events, steps, summary = compare_presets(s, inputs)
    taken: list[pd.DataFrame] = []
    kept, steps2, summary2 = compare_presets(s, inputs, on_events=taken.append, keep_events=False)
    assert kept.empty and len(taken) == 2
    pd.testing.assert_frame_equal(pd.concat(taken, ignore_index=True), events, check_exact=True)
    pd.testing.assert_frame_equal(steps2, steps, check_exact=True)
    pd.testing.assert_frame_equal(summary2, summary, check_exact=True)

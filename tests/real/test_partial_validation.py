"""``tlt validate --strategy``'s two halves serve the same partial rollout: the native engine's
(:func:`tltreal.validation.partial.real_trajectory`) and the simulator's
(:func:`tltsim.strategy.replay.simulate_resume`) run the same requests, stop at the same group and
train and carry the same samples, step after step; and the simulated half is the strategy ``tlt sim
run`` runs."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rollout_fixtures import Work  # noqa: E402

from tltcore.cost import RooflineCostModel  # noqa: E402
from tltcore.hardware import get_gpu  # noqa: E402
from tltreal.model.weights import random_model  # noqa: E402
from tltreal.validation.partial import MATCHED, _compare, perturb, real_trajectory  # noqa: E402
from tltreal.validation.validate import native_engine, shape_of  # noqa: E402
from tltsim.strategy.overprovision import schedule_resume  # noqa: E402
from tltsim.strategy.replay import NO_TRAINING, fresh_groups, simulate_resume  # noqa: E402
from tltsim.strategy.run import batch_rollout  # noqa: E402

from .tiny_models import TINY  # noqa: E402


def works(n_steps: int = 3, groups: int = 4, size: int = 3, seed: int = 0) -> list[Work]:
    """Steps of ``groups`` groups of ``size`` responses, prompts 3-12 tokens, responses 2-40 tokens."""
    rng = np.random.default_rng(seed)
    out = []
    for s in range(n_steps):
        n = groups * size
        out.append(Work(s, np.repeat(np.arange(groups), size), rng.integers(3, 13, n), rng.integers(2, 41, n)))
    return out


@pytest.fixture(scope="module")
def target():
    return random_model(TINY, seed=1, dtype=torch.float32, std=0.1)


@pytest.mark.parametrize("eta", [0.25, 0.5, 1.0])
def test_real_and_simulated_partial_rollouts_match_in_counts(target, eta):
    steps = works()
    cost = RooflineCostModel(shape_of(TINY), get_gpu("H100"), tp=1)
    real = real_trajectory(target, steps, eta, fresh_groups, max_batch=4, max_len=64, seed=0, deal_mode="shuffle",
                           clock="wall")
    sim = simulate_resume(steps, eta, cost, engine=native_engine(4), seed=0, deal_mode="shuffle")
    rows = _compare(real, {"calibrated": sim, "analytic": sim})
    assert all(r["counts_match"] for r in rows), [(c, r[f"real_{c}"], r[f"sim_{c}"]) for r in rows for c in MATCHED]
    assert any(r["real_carried_samples"] for r in rows) and any(" 1:" in str(r["real_lag_tokens"]) for r in rows)


def test_the_simulated_half_is_the_strategy_sim_run_runs():
    """simulate_resume's makespans and counts are schedule_resume's on the same RolloutRun (that
    fresh_groups launches what schedule_resume launches, the test above shows: the same requests)."""
    from tltcore.policy.registry import make_policy
    from tltsim.rollout import RolloutRun
    from tltsim.rollout.entities import EngineConfig

    steps = works(n_steps=4, groups=5)
    cost = RooflineCostModel(shape_of(TINY), get_gpu("H100"), tp=1)
    engine = native_engine(4)
    ours = simulate_resume(steps, 0.4, cost, engine=engine, seed=3, deal_mode="shuffle")
    run = RolloutRun([make_policy("no-sd", seed=3)], cost=cost, accept=None,
                     engine=EngineConfig.of(engine.limits, acceptance_mode=engine.acceptance_mode), seed=3,
                     deal_mode="shuffle", track_requests=True)

    def roll(reqs, stop):
        return batch_rollout(reqs, run.step(reqs, stop=stop), 1)

    rows = schedule_resume(steps, 0.4, 3, roll, lambda p, r: NO_TRAINING, "x")
    assert [s.makespan_s for s in ours] == [r.rollout_s for r in rows]
    assert [s.trained_samples for s in ours] == [r.trained_samples for r in rows] == [15] * 4
    assert [s.carried_samples for s in ours] == [r.carried_samples for r in rows]


def test_perturb_changes_every_weight_and_is_seeded(target):
    a = random_model(TINY, seed=1, dtype=torch.float32, std=0.1)
    b = random_model(TINY, seed=1, dtype=torch.float32, std=0.1)
    perturb(a, 1, seed=0)
    perturb(b, 1, seed=0)
    base = random_model(TINY, seed=1, dtype=torch.float32, std=0.1)
    for (name, pa), pb, p0 in zip(a.named_parameters(), b.parameters(), base.parameters(), strict=True):
        assert torch.equal(pa, pb), name
        assert not torch.equal(pa, p0) or not p0.any(), name


# ---------------------------------------------------------------------------------------- the command
def _one_error(result, fragment: str) -> None:
    lines = [x for x in result.stderr.splitlines() if x.startswith("tlt: error:")]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and fragment in lines[0], result.stderr


@pytest.mark.parametrize(("extra", "field"), [
    (("--strategy", "async:staleness=1"), "--strategy"),
    (("--strategy", "overprovision:eta=0.25"), "--strategy"),
    (("--strategy", "overprovision:eta=0,mode=resume"), "--strategy"),
    (("--strategy", "overprovision:eta=0.25,mode=resume", "--backend", "vllm"), "--backend"),
    (("--strategy", "overprovision:eta=0.25,mode=resume", "--table", "t.parquet"), "--table"),
])
def test_validate_strategy_refuses_what_it_cannot_run_before_any_work(tmp_path, extra, field):
    from conftest import invoke_cli

    out = tmp_path / "report"
    _one_error(invoke_cli("validate", "--scenario", "validation_partial_cpu", *extra, "--out", str(out)), field)
    assert not out.exists()


def test_validate_strategy_writes_its_report(tmp_path):
    """End to end on the tiny example model, two rounds: the CSVs and README, every round's rows."""
    from conftest import REPO, invoke_cli

    pytest.importorskip("pyarrow")
    out = tmp_path / "report"
    res = invoke_cli("validate", "--scenario", "validation_partial_cpu", "--strategy",
                     "overprovision:eta=0.5,mode=resume", "--model", str(REPO / "examples/tiny-llama/config.json"),
                     "--length-scale", "0.01", "--max-batch", "8", "--repeats", "2", "--max-rounds", "2",
                     "--clock", "wall", "--out", str(out))
    if res.returncode == 2 and "traces" in res.stderr:
        pytest.skip("../shared/traces not beside the repo")
    assert res.returncode == 0, res.stderr
    assert "partial rollout, median makespan error" in res.stdout
    import pandas as pd

    rows = pd.read_csv(out / "partial_rollout.csv")
    assert sorted(rows["repeat"].unique()) == [0, 1] and sorted(rows["step"].unique()) == [0, 1, 2, 3]
    assert (rows["real_trained_samples"] == rows["sim_trained_samples"]).all()
    assert (rows["real_s"] > 0).all() and rows["calibrated_err"].notna().all()
    text = (out / "README.md").read_text()
    assert "## Headline" in text and "What this does not model" in text
    assert (out / "cost_table.parquet").is_file()

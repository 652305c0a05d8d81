"""Validation machinery: the pinned drafter (acceptance as an input, output lossless), the profiler's
table, and a small end-to-end validation whose error bound a wrong cost model fails.

The end-to-end case measures wall-clock time, so it is marked ``timing`` and ``make test`` runs it
alone after the parallel suite (another test on the other core would skew the timings).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")

from tltcore.acceptance import ChainAcceptance, paper_qwen32b_tp4  # noqa: E402
from tltcore.cost import TableCostModel  # noqa: E402
from tltcore.errors import InputError  # noqa: E402
from tltcore.policy.base import SDConfig, Static  # noqa: E402
from tltreal.model.weights import random_model  # noqa: E402
from tltreal.validation.profiler import ProfileGrid, profile_native  # noqa: E402
from tltreal.validation.replay import (  # noqa: E402
    RecordingPolicy,
    reference_run,
    replay_drafter,
    replay_requests,
    speculative_run,
    with_extra_tokens,
)
from tltsim.traces.workload import StepWorkload  # noqa: E402

from .tiny_models import TINY  # noqa: E402

CFG = TINY


@pytest.fixture(scope="module")
def target():
    return random_model(CFG, seed=3, dtype=torch.float32, std=0.1)


def workload(n: int, length: int, prompt: int = 12, groups: int = 2) -> StepWorkload:
    return StepWorkload(step=0, source="t", group_ids=np.repeat([f"g{i}" for i in range(groups)], n // groups),
                        prompt_tokens=np.full(n, prompt), response_tokens=np.full(n, length),
                        hit_cap=np.zeros(n, bool))


@pytest.mark.parametrize(("model", "config"), [(paper_qwen32b_tp4(), SDConfig(6, 4, 16)),
                                               (ChainAcceptance((0.6,)), SDConfig(4, 1, 4))])
def test_pinned_drafter_acceptance_follows_the_model_and_output_is_lossless(target, model, config):
    requests = replay_requests(workload(8, 300), vocab_size=CFG.vocab_size, seed=1)
    reference = reference_run(target, requests, max_batch=8)
    recorder = RecordingPolicy(Static(config))
    result = speculative_run(target, requests, reference, recorder, position_probs=model.position_probs(16, 8),
                             max_batch=8)  # raises if any output differs from the reference
    assert result.outputs == reference.outputs
    accepted = np.concatenate([o.accepted_per_request for o in recorder.outcomes])
    expected = model.expected_accept_length(config)
    # long responses: end-of-response truncation is a small share of iterations
    assert 1 + accepted.mean() == pytest.approx(expected, rel=0.05)


def test_measured_acceptance_of_short_responses_is_not_censored_by_their_ends(target):
    """Responses of 8 tokens under a 6-deep tree: with a reference that runs past each end, the
    pinned drafter's accepted counts follow the model even in the last iterations; with a reference
    that stops at the end they fall well short of it (what the validator measured before)."""
    model, config = paper_qwen32b_tp4(), SDConfig(6, 4, 16)
    requests = replay_requests(workload(16, 8), vocab_size=CFG.vocab_size, seed=4)
    expected = model.expected_accept_length(config)

    def mean_accept(reference) -> float:
        recorder = RecordingPolicy(Static(config))
        speculative_run(target, requests, reference, recorder, position_probs=model.position_probs(16, 8),
                        max_batch=16)  # lossless against the reference, truncated to each length
        return 1 + float(np.concatenate([o.accepted_per_request for o in recorder.outcomes]).mean())

    extended = reference_run(target, with_extra_tokens(requests, 16), max_batch=16)
    assert mean_accept(extended) == pytest.approx(expected, rel=0.06)  # measured 5.72 vs 5.65
    assert mean_accept(reference_run(target, requests, max_batch=16)) < 0.9 * expected  # measured 4.84


def test_one_drafter_built_once_runs_every_speculative_run_as_a_fresh_one_would(target):
    """``tlt validate`` and the CPU A/B pin one drafter for all their runs (a fresh one per run had
    slowed each run): the same accepted tokens, iteration by iteration, run after run."""
    model, config = paper_qwen32b_tp4(), SDConfig(6, 4, 16)
    requests = replay_requests(workload(8, 60), vocab_size=CFG.vocab_size, seed=5)
    reference = reference_run(target, with_extra_tokens(requests, 16), max_batch=8)

    def accepted(**kw) -> list[tuple[float, ...]]:
        recorder = RecordingPolicy(Static(config))
        speculative_run(target, requests, reference, recorder, position_probs=model.position_probs(16, 8),
                        max_batch=8, seed=7, **kw)
        return [o.accepted_per_request for o in recorder.outcomes]

    shared = replay_drafter(target, seed=7)
    fresh = accepted()
    assert accepted(drafter=shared) == fresh and accepted(drafter=shared) == fresh
    # and it runs the very weights a fresh one would: runs do not change them, the seed fixes them
    again = replay_drafter(target, seed=7).state_dict()
    assert all(torch.equal(v, again[k]) for k, v in shared.state_dict().items())
    assert not torch.equal(replay_drafter(target, seed=8).fc.weight, shared.fc.weight)


def test_speculative_run_refuses_a_run_whose_output_differs(target):
    requests = replay_requests(workload(2, 20), vocab_size=CFG.vocab_size, seed=2)
    reference = reference_run(target, requests, max_batch=2)
    reference.outputs[0] = [0] * len(reference.outputs[0])  # a "reference" the target does not produce
    with pytest.raises(InputError, match="losslessness"):
        speculative_run(target, requests, reference, Static(SDConfig(3, 1, 3)),
                        position_probs=paper_qwen32b_tp4().position_probs(16, 8), max_batch=2)


@pytest.mark.timing  # compares measured latencies: run alone, not beside the parallel suite
def test_profile_table_is_complete_and_grows_with_batch_and_shape(target):
    shapes = (SDConfig(3, 1, 3), SDConfig(6, 4, 16))
    grid = ProfileGrid(batch_sizes=(1, 8), contexts=(48, 96), prefill_lengths=(1, 32), sd_configs=shapes,
                       iterations=3, warmup=1, decode_warmup=3, repeats=1)
    probs = paper_qwen32b_tp4().position_probs(16, 8)
    df = profile_native(target, grid, position_probs=dict.fromkeys(shapes, probs))
    table = TableCostModel.from_frame(df, {"context_rule": "max"})
    assert set(df["kind"]) == {"decode", "sd", "prefill", "drafter_prefill"}
    assert (df["seconds"] > 0).all()
    ctx = np.full(8, 60)
    assert table.sd_time(ctx, shapes[1]) > table.decode_time(ctx)  # a tree iteration does more than a plain one
    assert table.prefill_time(np.full(8, 32), np.zeros(8, int)) > table.prefill_time(np.full(1, 32), np.zeros(1, int))


@pytest.mark.timing
def test_small_validation_holds_its_bound_and_a_wrong_cost_model_fails_it():
    """End to end on a real trace step scaled down: the calibrated simulator stays within a bound a
    noisy 2-core machine can hold, and the same comparison with the table scaled x1.5 breaks it.
    Timed on the engine thread's CPU time, which other processes' hold on the core does not stretch."""
    from tltreal.validation.validate import NativeSettings, validate_native
    from tltsim.rollout import simulate_policy_step
    from tltsim.scenario import Scenario, acceptance_model, apply_override, load_steps

    pytest.importorskip("pyarrow")
    s = Scenario()
    for field, value in (("trace.name", "polytrace_rl_rollouts"), ("trace.source", "polytrace/verl_dapo_qwen2.5-32b"),
                         ("trace.step", "0"), ("trace.prompts_per_step", "6"), ("acceptance.mode", "stochastic")):
        s = apply_override(s, field, value)
    try:
        workloads = load_steps(s.trace)
    except InputError:
        pytest.skip("../shared/traces not beside the repo")
    # Noisy on a shared 2-core box: the median error ranged 0.09-0.30 over 5 runs (`make test` reruns the
    # timing group once). Three engines per profile point narrowed it (0.05-0.14) but biased the profile
    # low, so the x1.5 table below stopped failing the bound in CI: not used.
    settings = NativeSettings(model=CFG, length_scale=1 / 32, max_batch=16, grid_batches=(1, 2, 4, 8, 16),
                              grid_iterations=4, grid_repeats=1, real_repeats=2, clock="thread")
    specs = ["no-sd", "static:4_1_4", "elastic:8:2+static:6_4_16"]
    accept = acceptance_model(s.acceptance)
    result, rows, meta = validate_native(workloads, specs, accept, settings, simulate=simulate_policy_step)
    good = np.median(np.abs(result.makespans["calibrated_measured_err"]))
    assert good <= 0.25, result.makespans
    wrong = TableCostModel.from_frame(rows.assign(seconds=rows["seconds"] * 1.5), meta)
    scaled, _, _ = validate_native(workloads, specs, accept, settings, simulate=simulate_policy_step,
                                    table=wrong)
    assert np.median(np.abs(scaled.makespans["calibrated_measured_err"])) > 0.25, scaled.makespans

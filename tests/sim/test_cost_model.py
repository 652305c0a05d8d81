"""Roofline cost model: regimes, per-request KV, TP, CUDA-graph padding, closed-form spans."""

import csv
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tltsim.acceptance import ChainAcceptance
from tltsim.cost_model import CostModel, RooflineCostModel, padded_batch
from tltsim.errors import InputError
from tltsim.hardware import get_gpu
from tltsim.model_shape import get_model
from tltsim.policy.base import NO_SD, SDConfig

PAPER = Path(__file__).resolve().parents[2].parent / "shared" / "paper"
QWEN7B = get_model("Qwen2.5-7B")
H100 = get_gpu("h100")


def roofline(**kw):
    return RooflineCostModel(kw.pop("model", QWEN7B), kw.pop("gpu", H100), **kw)


def test_implements_protocol():
    assert isinstance(roofline(), CostModel)


def test_memory_bound_at_batch_1_compute_bound_at_batch_1024():
    cm = roofline()
    t = cm._target
    # batch 1: the decoder matmuls cost what reading the weights costs
    assert t.fixed_time(1, 1) == pytest.approx(t.weight_s + t.lm_head_weight_s)
    # batch 1024 x 7B on H100: FLOPs dominate the weight read
    assert 1024 * t.matmul_s_per_token > 2 * t.weight_s
    ctx = np.full(1024, 16)
    per_token_1 = cm.decode_time(np.array([16]))
    per_token_1024 = cm.decode_time(ctx) / 1024
    assert per_token_1024 < per_token_1 / 50  # batching amortises the weight read
    compute_floor = QWEN7B.matmul_flops_per_token * 1024 / H100.effective_flops
    assert cm.decode_time(ctx) >= compute_floor


def test_time_grows_with_each_requests_context():
    cm = roofline()
    base = cm.decode_time(np.array([1000, 1000]))
    longer = cm.decode_time(np.array([1000, 30000]))
    assert longer > base
    # per-request, not the mean: paged rounding makes [1, 31] cost more than [16, 16]
    assert cm.decode_time(np.array([1, 31])) > cm.decode_time(np.array([16, 16]))


def test_tp_allreduce_only_when_tp_above_1():
    assert roofline()._target.allreduce_s_per_token == 0.0
    assert roofline()._target.collective_latency_s == 0.0
    tp2 = roofline(tp=2)
    assert tp2._target.allreduce_s_per_token > 0 and tp2._target.collective_latency_s > 0
    # the weight read halves but TP never halves the whole iteration (collectives + overhead)
    t1, t2 = roofline().decode_time(np.array([100])), tp2.decode_time(np.array([100]))
    assert t1 / 2 < t2 < t1


def test_tp_must_divide_heads_and_model_must_fit():
    with pytest.raises(InputError, match="tp=3"):
        roofline(tp=3)
    with pytest.raises(InputError, match="raise tp"):
        roofline(model=get_model("Llama-3.3-70B"))


def test_cpu_calibrated_refused():
    with pytest.raises(InputError, match="measured"):
        roofline(gpu=get_gpu("cpu-calibrated"))


def test_cuda_graph_padding():
    assert [padded_batch(b) for b in (1, 3, 5, 9, 17, 24, 25, 512, 513)] == [1, 4, 8, 16, 24, 24, 32, 512, 513]
    cm = roofline(gpu=replace(H100, bf16_flops=H100.bf16_flops / 200))  # compute-bound even at small batch
    t = cm._target
    ctx17, ctx24 = np.full(17, 64), np.full(24, 64)
    fixed17 = cm.decode_time(ctx17) - t.attention_time(int(cm._paged(ctx17).sum()) + 17, 17 * 65)
    fixed24 = cm.decode_time(ctx24) - t.attention_time(int(cm._paged(ctx24).sum()) + 24, 24 * 65)
    assert fixed17 == pytest.approx(fixed24, rel=1e-12)
    assert cm.decode_time(ctx17) < cm.decode_time(ctx24)  # KV is per real request only


@pytest.mark.parametrize("gpu", [H100, replace(H100, bf16_flops=H100.bf16_flops / 2000)])
@pytest.mark.parametrize("n", [1, 7, 40, 301])
def test_decode_span_equals_sum_of_decode_steps(gpu, n):
    cm = roofline(gpu=gpu)
    ctx = np.random.default_rng(n).integers(0, 5000, size=37)
    stepwise = sum(cm.decode_time(ctx + j) for j in range(n))
    assert cm.decode_span_time(ctx, n) == pytest.approx(stepwise, rel=1e-12)
    assert cm.decode_span_time(ctx, 0) == 0.0
    assert cm.decode_span_time(np.array([], dtype=int), 5) == 0.0


def test_sd_with_useless_drafter_costs_more_per_token():
    cm = roofline(model=get_model("Qwen2.5-32B"), tp=4)
    ctx = np.array([3000])
    config = SDConfig(4, 1, 4)
    useless = ChainAcceptance((0.0,))
    per_token_sd = cm.sd_time(ctx, config) / useless.expected_accept_length(config)
    assert useless.expected_accept_length(config) == 1.0
    assert per_token_sd > cm.decode_time(ctx)
    assert cm.sd_time(ctx, NO_SD) == cm.decode_time(ctx)


def test_sd_cost_grows_with_depth_and_verify_budget():
    cm = roofline(model=get_model("Qwen2.5-32B"), tp=4)
    ctx = np.full(32, 2000)
    assert cm.sd_time(ctx, SDConfig(8, 4, 32)) < cm.sd_time(ctx, SDConfig(12, 4, 32))
    assert cm.sd_time(ctx, SDConfig(8, 4, 16)) < cm.sd_time(ctx, SDConfig(8, 4, 32))
    # at batch 32 the verify forward over 33 tokens per request is compute-bound: SD costs >> decode
    assert cm.sd_time(ctx, SDConfig(8, 4, 32)) > 2 * cm.decode_time(ctx)


def test_prefill_scales_with_new_tokens_and_cache():
    cm = roofline()
    short = cm.prefill_time(np.array([512]), np.array([0]))
    long = cm.prefill_time(np.array([8192]), np.array([0]))
    assert long > 8 * short
    assert cm.prefill_time(np.array([512]), np.array([16000])) > short
    assert cm.prefill_time(np.array([0, 0]), np.array([5, 5])) == 0.0
    with pytest.raises(InputError):
        cm.prefill_time(np.array([1, 2]), np.array([1]))


def _paper_no_sd_tokens_per_s():
    path = PAPER / "sd_by_gpu_qwen7b_bs1.csv"
    if not path.exists():
        pytest.skip(f"paper tables not found at {PAPER}")
    with path.open() as fh:
        return {row["gpu"]: float(row["tokens_per_s_no_sd"]) for row in csv.DictReader(fh)}


def test_roofline_batch1_tokens_per_s_against_paper_within_2x():
    """Loose sanity check: analytic Qwen2.5-7B batch-1 decode vs the paper's measured no-SD rates."""
    for gpu_name, measured in _paper_no_sd_tokens_per_s().items():
        cm = roofline(gpu=get_gpu(gpu_name))
        predicted = 1.0 / cm.decode_time(np.array([1024]))
        assert measured / 2 < predicted < measured * 2, (gpu_name, predicted, measured)

"""Roofline cost model: regimes, per-request KV, TP, CUDA-graph padding, closed-form spans."""

import csv
import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from analysis.paper_fidelity import paper_tables_dir
from tltcore.acceptance import ChainAcceptance, paper_qwen32b_tp4
from tltcore.cost import (
    DEFAULT_DRAFT_STEP_OVERHEAD_S,
    DEFAULT_SD_OVERHEAD_S,
    CostModel,
    RooflineCostModel,
    SDMeasurement,
    TableCostModel,
    fit_sd_overheads,
    padded_batch,
)
from tltcore.errors import InputError
from tltcore.hardware import get_gpu
from tltcore.model_shape import get_model
from tltcore.policy.base import NO_SD, SDConfig

PAPER = paper_tables_dir()  # ../shared/paper, else the vendored tests/data/paper: never skipped
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
    with path.open() as fh:
        return {row["gpu"]: float(row["tokens_per_s_no_sd"]) for row in csv.DictReader(fh)}


def test_roofline_batch1_tokens_per_s_against_paper_within_2x():
    """Loose sanity check: analytic Qwen2.5-7B batch-1 decode vs the paper's measured no-SD rates."""
    for gpu_name, measured in _paper_no_sd_tokens_per_s().items():
        cm = roofline(gpu=get_gpu(gpu_name))
        predicted = 1.0 / cm.decode_time(np.array([1024]))
        assert measured / 2 < predicted < measured * 2, (gpu_name, predicted, measured)


def _paper_sd_points():
    path = PAPER / "sd_depth_verify_bs1.csv"
    with path.open() as fh:
        return [SDMeasurement(1, int(r["depth"]), 8, int(r["verify_tokens"]), float(r["accept_length"]),
                              float(r["speedup"])) for r in csv.DictReader(fh)]


def test_sd_overhead_defaults_refit_from_paper_table():
    cm = roofline(model=get_model("Qwen2.5-32B"), tp=4)
    step, fixed = fit_sd_overheads(cm, _paper_sd_points())
    assert step == pytest.approx(DEFAULT_DRAFT_STEP_OVERHEAD_S, rel=0.01)
    assert fixed == pytest.approx(DEFAULT_SD_OVERHEAD_S, rel=0.01)


def test_batch1_sd_speedup_close_to_paper():
    """With the fitted overheads and the paper acceptance preset, every batch-1 speedup of the
    paper's depth x verify table is reproduced within 10 % (max error measured: 7.3 %)."""
    cm = roofline(model=get_model("Qwen2.5-32B"), tp=4)
    acc = paper_qwen32b_tp4()
    ctx = np.array([1024])
    for p in _paper_sd_points():
        config = SDConfig(p.depth, p.topk, p.verify_tokens)  # e.g. depth 4 / verify 128: a valid EAGLE-2 tree
        speedup = acc.expected_accept_length(config) * cm.decode_time(ctx) / cm.sd_time(ctx, config)
        assert speedup == pytest.approx(p.speedup, rel=0.10), p


@pytest.mark.parametrize("config", [SDConfig(8, 4, 32), SDConfig(4, 8, 128), SDConfig(3, 1, 3)])
def test_sd_time_is_bit_identical_to_its_kernel_sum(config):
    """sd_time memoises per-(batch, shape) constants and inlines the per-step attention; it must
    equal, bit for bit, the plain sum of its kernels in the original order (the simulator's event
    log is compared exactly across optimisations)."""
    cm = roofline()
    d, t = cm._draft, cm._target
    for ctx in (np.array([100, 2000, 7]), np.arange(1, 40) * 97, np.array([5])):
        for _ in range(2):  # second round hits the memo
            b, paged, total = ctx.size, int(cm._paged(ctx).sum()), int(ctx.sum())
            rows = cm.padded(b) * config.topk
            drafting = config.depth * d.fixed_time(rows, rows)
            for step in range(config.depth):
                drafted = b * (step + 1)
                drafting += d.attention_time(paged + config.topk * drafted, config.topk * (total + drafted))
            tokens = config.verify_tokens + 1
            v_rows = cm.padded(b) * tokens
            verify = t.fixed_time(v_rows, v_rows) + t.attention_time(paged + b * tokens, tokens * (total + b * tokens))
            expected = (drafting + config.depth * cm.draft_step_overhead_s + verify + cm.sd_overhead_s
                        + cm.iteration_overhead_s)
            assert cm.sd_time(ctx, config) == expected
            assert cm.sd_time(ctx.tolist(), config) == expected  # lists take the validating path


def test_paged_span_sum_is_exact():
    cm = roofline()
    rng = np.random.default_rng(3)
    for _ in range(200):
        ctx = rng.integers(0, 3000, size=int(rng.integers(1, 60)))
        n = int(rng.integers(1, 80))
        brute = sum(int(cm._paged(ctx + j).sum()) for j in range(n))
        assert cm._paged_span_sum(ctx, n) == brute


def test_prefill_matches_array_formula():
    """The scalar prefill path equals the per-request array formula (integers, so exactly)."""
    cm = roofline()
    rng = np.random.default_rng(4)
    for _ in range(50):
        k = int(rng.integers(1, 6))
        new, cached = rng.integers(0, 3000, size=k), rng.integers(0, 9000, size=k)
        rows, live = int(new.sum()), int((new > 0).sum())
        if rows == 0:
            continue
        kv = int(cm._paged(cached[new > 0]).sum()) + rows
        pos = int((new * cached).sum() + (new * (new + 1) // 2).sum())
        t, d = cm._target, cm._draft
        assert cm.prefill_time(new, cached) == (t.fixed_time(rows, live) + t.attention_time(kv, pos)
                                                + cm.iteration_overhead_s)
        assert cm.drafter_prefill_time(new, cached) == (d.fixed_time(rows, 0) + d.attention_time(kv, pos)
                                                        + cm.iteration_overhead_s)
    with pytest.raises(InputError):
        cm.drafter_prefill_time(np.array([1, 2]), np.array([1]))
    with pytest.raises(InputError):
        cm.sd_time(np.array([-1, 5]), SDConfig(8, 4, 32))


# ---- calibrated tables ---------------------------------------------------------------------------
TABLE_HEADER = "kind,batch_size,context,depth,topk,verify_tokens,seconds"


def _write_table_from(cm, path, batches=(1, 4, 16), contexts=(0, 1024, 4096), verifies=(8, 32), topks=(1, 4),
                      whole=((4, 2, 8),)):
    rows = [TABLE_HEADER]
    for b in batches:
        for c in contexts:
            ctx = np.full(b, c)
            rows.append(f"decode,{b},{c},,,,{cm.decode_time(ctx)!r}")
            for v in verifies:
                rows.append(f"verify,{b},{c},,,{v},{cm.verify_time(ctx, v)!r}")
            for k in topks:
                rows.append(f"draft_step,{b},{c},,{k},,{cm.draft_step_time(ctx, k)!r}")
            for d, k, v in whole:
                rows.append(f"sd,{b},{c},{d},{k},{v},{cm.sd_time(ctx, SDConfig(d, k, v))!r}")
            rows.append(f"drafter_prefill,{b},{c},,,,{cm.drafter_prefill_time(ctx, np.zeros(b, int))!r}")
            rows.append(f"prefill,{b},{c},,,,{cm.prefill_time(ctx, np.zeros(b, int))!r}")
        rows.append(f"sd_overhead,{b},0,,,,{cm.sd_overhead_s + cm.iteration_overhead_s!r}")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_table_reproduces_measurements_and_interpolates(tmp_path):
    cm = roofline(model=get_model("Qwen2.5-32B"), tp=4, draft_step_overhead_s=0.0)
    table = TableCostModel.from_file(_write_table_from(cm, tmp_path / "costs.csv"))
    assert isinstance(table, CostModel)
    at_point = np.full(4, 1024)
    assert table.decode_time(at_point) == pytest.approx(cm.decode_time(at_point), rel=1e-12)
    between = np.full(4, 2048)
    assert table.decode_time(at_point) < table.decode_time(between) < table.decode_time(np.full(4, 4096))
    assert table.decode_time(np.full(4, 8192)) > table.decode_time(np.full(4, 4096))  # extrapolates
    # a shape without whole-iteration rows = depth x draft step + verify + overhead, as measured
    assert table.sd_time(at_point, SDConfig(2, 4, 8)) == pytest.approx(
        2 * cm.draft_step_time(at_point, 4) + cm.verify_time(at_point, 8) + cm.sd_overhead_s
        + cm.iteration_overhead_s, rel=1e-9)
    # a shape with whole-iteration rows is read as measured
    assert table.sd_time(at_point, SDConfig(4, 2, 8)) == pytest.approx(cm.sd_time(at_point, SDConfig(4, 2, 8)),
                                                                        rel=1e-12)
    assert table.prefill_time(np.array([1024] * 4), np.zeros(4, int)) == pytest.approx(
        cm.prefill_time(np.array([1024] * 4), np.zeros(4, int)), rel=1e-12)
    assert table.drafter_prefill_time(np.array([1024]), np.array([0])) > 0


def test_table_looks_up_each_request_never_the_mean(tmp_path):
    """One long request among short ones: the per-request rule charges its own KV (the mean of a
    convex table would not); the 'max' rule charges every request the longest context (slab engines)."""
    path = tmp_path / "t.csv"
    rows = [TABLE_HEADER] + [f"decode,{b},{c},,,,{0.001 + 1e-6 * b * c + 1e-9 * b * c * c!r}"
                             for b in (1, 4) for c in (0, 1000, 3000, 9000)]
    path.write_text("\n".join(rows) + "\n")
    table = TableCostModel.from_file(path)
    ctx = np.array([1000, 1000, 1000, 9000])
    per_request = table.decode_time(ctx)
    base = float(table.grids[("decode",)].at(4, 0.0))
    expected = base + sum(float(table.grids[("decode",)].at(4, c)) - base for c in ctx) / 4
    assert per_request == pytest.approx(expected, rel=1e-12)
    assert per_request != pytest.approx(table.decode_time(np.full(4, 3000)), rel=1e-3)  # not the mean
    slab = TableCostModel.from_frame(pd.read_csv(path), {"context_rule": "max"})
    assert slab.decode_time(ctx) == pytest.approx(slab.decode_time(np.full(4, 9000)), rel=1e-12)


def test_table_span_equals_sum_of_steps(tmp_path):
    for rule in ("sum", "max"):
        df = pd.read_csv(_write_table_from(roofline(), tmp_path / "costs.csv"))
        table = TableCostModel.from_frame(df, {"context_rule": rule})
        ctx = np.array([10, 900, 3000, 5000, 77])
        n = 3000  # crosses grid points and runs past the last one
        assert table.decode_span_time(ctx, n) == pytest.approx(sum(table.decode_time(ctx + j) for j in range(n)),
                                                               rel=1e-9)


def test_parquet_round_trip_with_metadata_and_mismatch_refused(tmp_path):
    from tltcore.cost import shape_fingerprint, write_table

    df = pd.read_csv(_write_table_from(roofline(), tmp_path / "costs.csv"))
    meta = {"device": "H100-SXM", "model": shape_fingerprint(QWEN7B), "tp": "1", "context_rule": "max"}
    path = write_table(df, meta, tmp_path / "costs.parquet")
    table = TableCostModel.from_file(path)
    assert table.metadata == meta and table.context_rule == "max"
    table.check_matches(model=shape_fingerprint(QWEN7B), device="H100-SXM", tp=1)
    with pytest.raises(InputError, match="measured for model"):
        table.check_matches(model=shape_fingerprint(get_model("Qwen2.5-32B")))
    with pytest.raises(InputError, match="measured for device"):
        table.check_matches(device="A100-80GB-SXM")


@pytest.mark.parametrize(("text", "match"), [
    ("kind,batch_size,context\ndecode,1,0\n", "'seconds'"),
    ("kind,batch_size,context,seconds\n", "no rows"),
    (f"{TABLE_HEADER}\ndecode,1,0,,,,abc\n", r"row 2.*'seconds'"),
    (f"{TABLE_HEADER}\ndecode,1,0,,,,-1\n", r"row 2.*'seconds'"),
    (f"{TABLE_HEADER}\nwarp,1,0,,,,1\n", "unknown kind 'warp'"),
    (f"{TABLE_HEADER}\ndecode,1,0,,,,1\ndecode,2,5,,,,1\n", "full batch x context grid"),
    (f"{TABLE_HEADER}\ndecode,1,0,,,,1\ndraft_step,1,0,,,,1\n", r"row 3.*'topk'"),
    (f"{TABLE_HEADER}\ndecode,0,0,,,,1\n", "batch_size"),
    (f"{TABLE_HEADER}\ndecode,1,0,,,,1\ndecode,1,0,,,,2\n", "duplicate"),
])
def test_malformed_tables(tmp_path, text, match):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=match):
        TableCostModel.from_file(path)


def test_table_without_sd_rows_refuses_sd(tmp_path):
    path = tmp_path / "decode.csv"
    path.write_text(f"{TABLE_HEADER}\ndecode,1,0,,,,0.01\ndecode,1,100,,,,0.02\n")
    table = TableCostModel.from_file(path)
    assert table.decode_time(np.array([50])) == pytest.approx(0.015)
    with pytest.raises(InputError, match="no draft_step topk=1 rows"):
        table.sd_time(np.array([50]), SDConfig(4, 1, 4))
    with pytest.raises(InputError, match="no drafter_prefill rows"):
        table.drafter_prefill_time(np.array([50]), np.array([0]))


def test_kernel_latency_floor_and_smooth_roofline():
    """Both calibration knobs default off; the latency floor adds exactly one launch per kernel to
    every forward, and the smooth roofline lies between the sharp max and the sum of the two roofs."""
    ctx = np.full(8, 1024)
    sharp = roofline()
    assert roofline(kernel_latency_s=0.0, kernels_per_layer=0).decode_time(ctx) == sharp.decode_time(ctx)
    lat = roofline(kernel_latency_s=5e-6, kernels_per_layer=10)
    kernels = QWEN7B.num_hidden_layers * 10 + 2
    assert lat.decode_time(ctx) - sharp.decode_time(ctx) == pytest.approx(kernels * 5e-6, rel=1e-9)
    smooth = roofline(smoothness=2.0)
    for batch in (1, 64, 256, 1024):
        c = np.full(batch, 1024)
        assert sharp.decode_time(c) < smooth.decode_time(c)
    ridge = roofline(smoothness=2.0)._target  # at the ridge point the 2-norm is sqrt(2) x either roof
    rows = round(ridge.weight_s / ridge.matmul_s_per_token)
    m, c = ridge.weight_s, rows * ridge.matmul_s_per_token
    assert ridge._roof(m, c) == pytest.approx((m * m + c * c) ** 0.5)
    assert max(m, c) < ridge._roof(m, c) < m + c


@pytest.mark.parametrize("pandas_meta", [
    b"{not json",
    b"[]",
    b"\xff\xfe",
    json.dumps({"index_columns": ["missing"], "columns": []}).encode(),
    json.dumps({"index_columns": [{"kind": "range", "start": 0, "stop": 99, "step": 1}],
                "columns": [{"name": "kind", "pandas_type": "weird"}]}).encode(),
    json.dumps({"index_columns": ["seconds"], "columns": [{"name": "seconds", "field_name": "seconds",
                                                          "pandas_type": "float64", "numpy_type": "float64",
                                                          "metadata": None}]}).encode(),
])
def test_parquet_table_ignores_hostile_pandas_metadata(tmp_path, pandas_meta):
    """Every column a table needs is a plain column: pandas' own metadata (index columns, dtypes) is
    never trusted, so a malformed one cannot crash the reader or hide a column."""
    import pyarrow.parquet as pq

    from tltcore.cost import write_table

    df = pd.read_csv(_write_table_from(roofline(), tmp_path / "costs.csv"))
    good = TableCostModel.from_file(write_table(df, {"context_rule": "max"}, tmp_path / "good.parquet"))
    table = pq.read_table(tmp_path / "good.parquet")
    table = table.replace_schema_metadata({**table.schema.metadata, b"pandas": pandas_meta})
    pq.write_table(table, tmp_path / "bad.parquet")
    read = TableCostModel.from_file(tmp_path / "bad.parquet")
    assert read.metadata == good.metadata and read.grids.keys() == good.grids.keys()
    ctx = np.array([100, 3000])
    assert read.decode_time(ctx) == good.decode_time(ctx)


@pytest.mark.parametrize(("mutate", "match"), [
    (lambda t: t.replace_schema_metadata({b"tlt.cost_table": b"{oops"}), "tlt.cost_table metadata is not JSON"),
    (lambda t: t.replace_schema_metadata({b"tlt.cost_table": b"\xff"}), "tlt.cost_table metadata is not JSON"),
    (lambda t: t.replace_schema_metadata({b"tlt.cost_table": b"[1]"}), "not a JSON object"),
    (lambda t: t.drop_columns(["seconds"]), "'seconds'"),
    (lambda t: t.slice(0, 0), "no rows"),
])
def test_parquet_table_with_bad_metadata_or_columns_is_one_line(tmp_path, mutate, match):
    import pyarrow.parquet as pq

    from tltcore.cost import write_table

    df = pd.read_csv(_write_table_from(roofline(), tmp_path / "costs.csv"))
    write_table(df, {}, tmp_path / "good.parquet")
    pq.write_table(mutate(pq.read_table(tmp_path / "good.parquet")), tmp_path / "bad.parquet")
    with pytest.raises(InputError, match=match) as info:
        TableCostModel.from_file(tmp_path / "bad.parquet")
    assert str(tmp_path / "bad.parquet") in str(info.value) and "\n" not in str(info.value)


def test_a_damaged_parquet_table_is_one_line(tmp_path):
    path = tmp_path / "t.parquet"
    path.write_bytes(b"PAR1" + b"\x00" * 64 + b"PAR1")
    with pytest.raises(InputError, match="not a readable Parquet cost table") as info:
        TableCostModel.from_file(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)

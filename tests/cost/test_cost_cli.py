"""`tlt cost build`: refusals, safe writes and a round trip into TableCostModel (synthetic profiles)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import invoke_cli
from tltcore.cost import TableCostModel, shape_fingerprint
from tltcore.cost.measured import measured_cost_model
from tltcore.model_shape import get_model
from tltcore.policy.base import SDConfig

GRID = ("--batch", "1", "--batch", "8", "--batch", "64", "--context", "512", "--context", "4096")


def _build(profiles, out, *extra: str):
    return invoke_cli("cost", "build", "--gpu", "H100", "--model", "Qwen2.5-7B", "--tp", "1", "--out", str(out),
                      "--profiles", str(profiles), *GRID, *extra)


def test_round_trip_build_then_table_lookups(synthetic_profiles, tmp_path):
    out = tmp_path / "table.parquet"
    res = _build(synthetic_profiles, out)
    assert res.returncode == 0, res.stderr
    assert "measured" in res.stdout and str(out) in res.stdout
    table = TableCostModel.from_file(out)
    qwen = get_model("Qwen2.5-7B")
    table.check_matches(model=shape_fingerprint(qwen), device="H100-SXM", tp=1)
    assert table.metadata["writer"] == "tlt cost build" and table.metadata["context_rule"] == "sum"
    cm = measured_cost_model(qwen, "H100", 1, profiles=synthetic_profiles)
    for b in (1, 8, 64):
        for c in (512, 4096):
            ctx = np.full(b, c)
            assert table.decode_time(ctx) == pytest.approx(cm.decode_time(ctx), rel=1e-9)
            for shape in (SDConfig(8, 4, 32), SDConfig(8, 4, 48)):  # whole-SD rows
                assert table.sd_time(ctx, shape) == pytest.approx(cm.sd_time(ctx, shape), rel=1e-9)
            # a shape without sd rows composes draft steps + verify + overheads
            assert table.sd_time(ctx, SDConfig(6, 2, 16)) == pytest.approx(cm.sd_time(ctx, SDConfig(6, 2, 16)),
                                                                           rel=0.02)
    ctx = np.array([300, 700, 2000, 4000, 512, 512, 1000, 3000])  # per-request contexts inside the grid
    assert table.decode_time(ctx) == pytest.approx(cm.decode_time(ctx), rel=0.01)
    assert table.prefill_time(np.full(8, 512), np.zeros(8, int)) == pytest.approx(
        cm.prefill_time(np.full(8, 512), np.zeros(8, int)), rel=1e-9)
    # its own file is replaced on a rebuild
    again = _build(synthetic_profiles, out, "--shape", "4_1_4")
    assert again.returncode == 0, again.stderr
    assert ("sd", 4, 1, 4) in TableCostModel.from_file(out).grids
    analytic = _build(synthetic_profiles, out, "--collectives", "analytic")
    assert analytic.returncode == 0 and "collectives analytic" in TableCostModel.from_file(out).metadata["source"]


def test_unknown_gpu_and_model_are_one_line_with_suggestions(synthetic_profiles, tmp_path):
    out = tmp_path / "t.parquet"
    res = invoke_cli("cost", "build", "--gpu", "H10", "--model", "Qwen2.5-7B", "--out", str(out))
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "unknown GPU 'H10'" in res.stderr and "did you mean H100" in res.stderr
    res = invoke_cli("cost", "build", "--gpu", "H100", "--model", "Qwen2.5-7", "--out", str(out))
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "unknown model 'Qwen2.5-7'" in res.stderr and "did you mean Qwen2.5-7B" in res.stderr
    res = invoke_cli("cost", "build", "--gpu", "B200", "--model", "Qwen2.5-7B", "--out", str(out),
                     "--profiles", str(synthetic_profiles))
    assert res.returncode == 2 and "no measured profiles for B200" in res.stderr
    assert not out.exists()


def test_an_existing_file_it_did_not_write_is_never_replaced(synthetic_profiles, tmp_path):
    mine = tmp_path / "mine.parquet"
    mine.write_bytes(b"the user's own bytes")
    res = _build(synthetic_profiles, mine)
    assert res.returncode == 2 and "was not written by tlt cost build" in res.stderr
    assert mine.read_bytes() == b"the user's own bytes"
    # a Parquet table another command wrote is not ours either
    import pandas as pd

    from tltcore.cost import write_table

    other = tmp_path / "profiled.parquet"
    write_table(pd.DataFrame({"kind": ["decode"], "batch_size": [1], "context": [0], "seconds": [0.01]}),
                {"engine": "native"}, other)
    before = other.read_bytes()
    assert _build(synthetic_profiles, other).returncode == 2
    assert other.read_bytes() == before


@pytest.mark.parametrize(("args", "needle"), [
    (("--out", "t.csv"), "give a .parquet path"),
    (("--tp", "0"), "--tp"),
    (("--batch", "0"), "--batch"),
    (("--shape", "off"), "is no draft shape"),
    (("--collectives", "nccl"), "--collectives"),
])
def test_bad_options_are_one_line(synthetic_profiles, tmp_path, args, needle):
    base = {"--out": str(tmp_path / "t.parquet")}
    argv = ["cost", "build", "--gpu", "H100", "--model", "Qwen2.5-7B", "--profiles", str(synthetic_profiles)]
    opts = dict(base)
    extra = list(args)
    if extra[0] == "--out":
        opts["--out"] = str(tmp_path / extra[1])
        extra = []
    for k, v in opts.items():
        argv += [k, v]
    res = invoke_cli(*argv, *extra)
    assert res.returncode == 2 and needle in res.stderr and res.stderr.count("\n") == 1
    assert not (tmp_path / "t.parquet").exists()


def test_missing_profiles_folder_is_refused(tmp_path):
    res = invoke_cli("cost", "build", "--gpu", "H100", "--model", "Qwen2.5-7B", "--out", str(tmp_path / "t.parquet"),
                     "--profiles", str(tmp_path / "nowhere"))
    assert res.returncode == 2 and "no vidur/ folder" in res.stderr
    assert not (tmp_path / "t.parquet").exists()

"""tltcore.cost.gpu_profiles: reading and tidying Vidur-layout profiles (synthetic files; no ../shared)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tltcore.cost.gpu_profiles import (
    COMPUTE_COLUMNS,
    NETWORK_COLUMNS,
    OPS,
    load_compute,
    load_network,
    profiles_root,
    read_compute_file,
    read_network_file,
)
from tltcore.errors import InputError

from .profile_fixtures import SHAPES, TOKENS, TPS, profile_frame, write_profiles


def _write(tmp_path: Path, df: pd.DataFrame, name: str = "mlp.csv") -> Path:
    path = tmp_path / name
    df.to_csv(path, index=False)
    return path


def test_compute_file_is_tidy(tmp_path):
    shape = SHAPES["synth/gqa-8b"]
    raw = profile_frame("h100", shape)
    tidy = read_compute_file(_write(tmp_path, raw), "h100", "synth/gqa-8b")
    assert tuple(tidy.columns) == COMPUTE_COLUMNS
    assert len(tidy) == len(OPS) * len(TOKENS) * len(TPS)
    assert set(tidy["op"]) == set(OPS) and set(tidy["tp"]) == set(TPS)
    row = tidy[(tidy["op"] == "mlp_up_proj") & (tidy["tp"] == 2) & (tidy["num_tokens"] == 64)].iloc[0]
    want = raw[(raw["num_tensor_parallel_workers"] == 2) & (raw["num_tokens"] == 64)]["time_stats.mlp_up_proj.median"]
    assert row["median_ms"] == pytest.approx(float(want.iloc[0]))
    assert (row["n_head"], row["n_kv_head"], row["n_embd"], row["use_gated_mlp"]) == (32, 8, 4096, True)


def test_repeated_rows_reduce_to_their_median(tmp_path):
    raw = profile_frame("h100", SHAPES["synth/small-7b"], tps=(1,), tokens=(8, 16))
    extra = raw.iloc[[0, 0]].copy()
    extra["time_stats.add.median"] = [10.0, 20.0]
    tidy = read_compute_file(_write(tmp_path, pd.concat([raw, extra])), "h100", "m")
    add = tidy[(tidy["op"] == "add") & (tidy["num_tokens"] == 8)]["median_ms"]
    assert len(add) == 1 and float(add.iloc[0]) == pytest.approx(10.0)  # median of (tiny, 10, 20)


def test_an_op_a_model_lacks_is_absent(tmp_path):
    raw = profile_frame("h100", SHAPES["synth/small-7b"], tps=(1,)).drop(
        columns=[c for c in profile_frame("h100", SHAPES["synth/small-7b"]).columns
                 if c.startswith("time_stats.post_attention_layernorm.")])
    tidy = read_compute_file(_write(tmp_path, raw), "h100", "m")
    assert "post_attention_layernorm" not in set(tidy["op"]) and "mlp_act" in set(tidy["op"])


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda df: df.drop(columns=["num_tokens"]), "num_tokens"),
    (lambda df: df.drop(columns=["n_embd"]), "n_embd"),
    (lambda df: df.assign(**{"time_stats.emb.median": "fast"}), "time_stats.emb.median"),
    (lambda df: df.assign(**{"time_stats.add.median": -1.0}), "time_stats.add.median"),
    (lambda df: df.assign(num_tensor_parallel_workers=0), "num_tensor_parallel_workers"),
    (lambda df: df.assign(use_gated_mlp="maybe"), "use_gated_mlp"),
    (lambda df: df.assign(n_embd=range(len(df))), "n_embd"),
    (lambda df: df[[c for c in df.columns if not c.startswith("time_stats.")]], "time_stats.emb.median"),
])
def test_a_malformed_file_is_one_line_naming_file_and_column(tmp_path, mutate, field):
    path = _write(tmp_path, mutate(profile_frame("h100", SHAPES["synth/small-7b"], tps=(1, 2))))
    with pytest.raises(InputError) as err:
        read_compute_file(path, "h100", "m")
    text = str(err.value)
    assert "\n" not in text and str(path) in text and f"field '{field}'" in text


def test_unreadable_and_empty_files(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("num_tokens,num_tensor_parallel_workers\n")
    with pytest.raises(InputError, match="no rows"):
        read_compute_file(empty, "h100", "m")
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match=r"bin\.csv"):
        read_compute_file(binary, "h100", "m")


def test_network_file_is_tidy(tmp_path):
    root = write_profiles(tmp_path, models=("synth/small-7b",))
    tidy = read_network_file(root / "vidur" / "network" / "h100_dgx" / "all_reduce.csv", "h100_dgx")
    assert tuple(tidy.columns) == NETWORK_COLUMNS
    assert set(tidy["workers"]) == {2, 4, 8} and (tidy["collective"] == "all_reduce").all()
    bad = tmp_path / "all_reduce.csv"
    pd.read_csv(root / "vidur" / "network" / "h100_dgx" / "all_reduce.csv").drop(columns=["size"]).to_csv(bad)
    with pytest.raises(InputError, match="field 'size'"):
        read_network_file(bad, "x")


def test_loading_a_folder_and_the_search_path(tmp_path, monkeypatch):
    root = write_profiles(tmp_path / "p", models=("synth/small-7b", "synth/gqa-8b"))
    compute = load_compute(root)
    assert set(compute["model"]) == {"synth/small-7b", "synth/gqa-8b"} and set(compute["gpu"]) == {"h100"}
    assert not load_network(root).empty
    monkeypatch.setenv("TLT_GPU_PROFILES", str(root))
    assert profiles_root() == root
    monkeypatch.setenv("TLT_GPU_PROFILES", str(tmp_path / "missing"))
    monkeypatch.setenv("TLT_SHARED_DIR", str(tmp_path / "no-shared"))
    with pytest.raises(InputError, match="no measured GPU profiles found"):
        profiles_root()
    with pytest.raises(InputError, match="has no vidur/ folder"):
        profiles_root(tmp_path)

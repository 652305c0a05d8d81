"""``events.parquet`` written seed by seed (:class:`tltcli.sim_results.EventsParquet`) is byte for byte
the file the stacked table's ``to_parquet`` writes: the ``--seeds`` run no longer holds every seed's
events at once, and its results folder must not change."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tltcli.sim_results import PARQUET_ROW_GROUP, EventsParquet


def _seed_frame(k: int, n: int) -> pd.DataFrame:
    rng = np.random.default_rng(k)
    return pd.DataFrame({
        "policy": pd.array(rng.choice(["verl", "tlt"], n), dtype="string"),
        "step": rng.integers(0, 5, n), "t_start": rng.random(n), "kind": pd.array(["decode"] * n, dtype="string"),
        "sd_config": pd.array(rng.choice(["off", "8_4_16"], n), dtype="string"), "tokens": rng.integers(1, 99, n)})


@pytest.mark.parametrize("sizes, group", [((700, 0, 650, 900), 512), ((10, 20), 512), ((1024, 1024), 512),
                                          ((0, 0), 512), ((300,), PARQUET_ROW_GROUP)])
def test_seed_by_seed_equals_the_stacked_table_written_whole(tmp_path, sizes, group) -> None:
    frames = [_seed_frame(k, n) for k, n in enumerate(sizes)]
    parts = [f.assign(seed=k)[["seed", *f.columns]] for k, f in enumerate(frames) if not f.empty]
    whole = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    whole.to_parquet(tmp_path / "whole.parquet", index=False, row_group_size=group)
    with EventsParquet(tmp_path / "seeds.parquet", row_group=group) as sink:
        for k, f in enumerate(frames):
            sink.add(f.assign(seed=k)[["seed", *f.columns]])
    assert (tmp_path / "seeds.parquet").read_bytes() == (tmp_path / "whole.parquet").read_bytes()


def test_a_table_with_other_columns_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="differ"), EventsParquet(tmp_path / "x.parquet", row_group=8) as sink:
        sink.add(_seed_frame(0, 5))
        sink.add(_seed_frame(1, 5).drop(columns="tokens"))

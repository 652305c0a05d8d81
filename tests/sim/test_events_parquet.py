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


class _InMemory:
    """The writer as it was before the spool: each table converted whole, rows waiting in memory for a
    full row group, the rows after a written group combined into one chunk (the reference)."""

    def __init__(self, path, row_group: int) -> None:
        import pyarrow.parquet as pq

        self.path, self.row_group, self.pq = path, row_group, pq
        self.writer, self.parts, self.rows = None, [], 0

    def add(self, frame: pd.DataFrame) -> None:
        import pyarrow as pa

        table = pa.Table.from_pandas(frame, preserve_index=False)
        if self.writer is None:
            self.writer = self.pq.ParquetWriter(self.path, table.schema)
        self.parts.append(table)
        self.rows += len(table)
        while self.rows >= self.row_group:
            whole = pa.concat_tables(self.parts)
            self.writer.write_table(whole.slice(0, self.row_group), row_group_size=self.row_group)
            rest = whole.slice(self.row_group).combine_chunks()
            self.parts, self.rows = [rest], len(rest)

    def close(self) -> None:
        import pyarrow as pa

        if self.rows:
            self.writer.write_table(pa.concat_tables(self.parts), row_group_size=self.row_group)
        self.writer.close()


def _run_frame(k: int, n: int) -> pd.DataFrame:
    # a run's events: distinct doubles (their dictionary outgrows its page limit, so where a column's
    # Arrow chunks start decides where its encoding falls back to plain), strings, whole numbers
    rng = np.random.default_rng(100 + k)
    policy = pd.array(["verl", "tlt"], dtype="string").take(np.full(n, k % 2))
    return pd.DataFrame({"policy": policy, "t_start": rng.random(n), "tokens": rng.integers(1, 99, n),
                         "kind": pd.array(rng.choice(["decode", "prefill"], n), dtype="string")})


def test_tables_in_parts_are_written_as_their_concatenation_was(tmp_path) -> None:
    # each seed's runs come as parts (SeedSink.add_run): the file must be the one the in-memory writer
    # wrote of each seed's concatenated table, at a size where the chunks' boundaries change the bytes
    group = 200_000
    seeds = [[_run_frame(0, 131_000), _run_frame(1, 49_000)], [_run_frame(2, 95_000), _run_frame(3, 0)],
             [_run_frame(4, 150_000), _run_frame(5, 160_000)]]
    ref = _InMemory(tmp_path / "ref.parquet", group)
    with EventsParquet(tmp_path / "parts.parquet", row_group=group) as sink:
        for k, runs in enumerate(seeds):
            for run in runs:
                sink.add_part(run.assign(seed=k)[["seed", *run.columns]])
            sink.end_table()
            if k == 1:  # seed 1 completed the first group: seed 0's spool is gone, seed 1's waits
                assert sorted(x.name for x in sink.spool_path.iterdir()) == ["1"]
            whole = pd.concat(runs, ignore_index=True)
            ref.add(whole.assign(seed=k)[["seed", *whole.columns]])
    ref.close()
    assert (tmp_path / "parts.parquet").read_bytes() == (tmp_path / "ref.parquet").read_bytes()
    assert not (tmp_path / "parts.parquet.spool").exists()
    # the chunk layout matters here (a part ends near where the doubles outgrow their dictionary):
    # one chunk per run part of the numbers is another file
    with EventsParquet(tmp_path / "each.parquet", row_group=group) as sink:
        for k, runs in enumerate(seeds):
            for run in runs:
                sink.add(run.assign(seed=k)[["seed", *run.columns]])
    assert (tmp_path / "each.parquet").read_bytes() != (tmp_path / "ref.parquet").read_bytes()


def test_whole_tables_are_written_as_the_in_memory_writer_wrote_them(tmp_path) -> None:
    group = 200_000
    frames = [_run_frame(k, n) for k, n in enumerate((170_000, 95_000, 310_000))]
    ref = _InMemory(tmp_path / "ref.parquet", group)
    with EventsParquet(tmp_path / "new.parquet", row_group=group) as sink:
        for k, f in enumerate(frames):
            sink.add(f.assign(seed=k)[["seed", *f.columns]])
            ref.add(f.assign(seed=k)[["seed", *f.columns]])
    ref.close()
    assert (tmp_path / "new.parquet").read_bytes() == (tmp_path / "ref.parquet").read_bytes()


def test_an_error_leaves_no_spool(tmp_path) -> None:
    with pytest.raises(RuntimeError), EventsParquet(tmp_path / "x.parquet", row_group=8) as sink:
        sink.add(_seed_frame(0, 5))
        raise RuntimeError("boom")
    assert not (tmp_path / "x.parquet.spool").exists() and not (tmp_path / "x.parquet").exists()

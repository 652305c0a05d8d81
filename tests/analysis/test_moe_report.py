"""reports/moe-sd: SD on an MoE target against dense models of its active and total size. The committed
table must be what the code computes now (a cost-model change that moves it must regenerate the report), and
the claims its README makes must hold in it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from analysis import moe_sd

REPORT = Path(__file__).resolve().parents[2] / "reports" / "moe-sd"


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return moe_sd.speedups()


def test_the_committed_table_is_what_the_cost_model_gives_now(table) -> None:
    committed = pd.read_csv(REPORT / "speedup_vs_batch.csv")
    pd.testing.assert_frame_equal(table.drop(columns="cost_model").reset_index(drop=True),
                                  committed.drop(columns="cost_model"), check_dtype=False)


def test_sd_pays_less_on_the_moe_target_at_small_batch_and_more_at_moderate_batch(table) -> None:
    for gpu in moe_sd.GPUS:
        wide = table[table["gpu"] == gpu].pivot(index="batch", columns="role", values="speedup")
        for b in (1, 2, 4):
            assert wide.loc[b, "MoE"] < wide.loc[b, "dense, same active"], (gpu, b)
        assert wide.loc[32, "MoE"] > wide.loc[32, "dense, same active"], gpu
        assert moe_sd._crossover(table, gpu) == 8


def test_a_verify_touches_more_experts_than_a_decode_step() -> None:
    ex = moe_sd.experts_touched()
    uniform = ex[ex["skew"] == 0.0].pivot(index="batch", columns="forward", values="experts")
    assert uniform.loc[1, "decode"] == pytest.approx(8.0)
    assert (uniform["verify, chain of 3"] >= uniform["decode"]).all()
    assert uniform.loc[1, "verify, chain of 3"] / uniform.loc[1, "decode"] > 3

"""The arithmetic of hours, GPU-hours, dollars and energy (:mod:`tltcore.prices`), pinned on hand-computed
cases; the bundled price table carries a source and a date per row; --price is parsed or refused in one line."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from tltcore.errors import InputError
from tltcore.gpu_spec import GPUSheet
from tltcore.hardware import GPU_NAMES, get_gpu
from tltcore.prices import (
    IDLE_POWER_FRACTION,
    StepsCost,
    missing_price,
    parse_prices,
    price_table,
    resolve_price,
    utilisation,
)


def test_steps_cost_is_gpus_times_step_seconds_times_steps_over_3600():
    # 64 GPUs, 90 s per RL step, 500 steps, $2.50 per GPU-hour, 700 W, 80% busy
    c = StepsCost(gpus=64, steps=500, step_s=90.0, usd_per_gpu_hour=2.5, board_power_w=700, busy_fraction=0.8)
    assert c.hours == pytest.approx(12.5)  # 90 x 500 / 3600
    assert c.gpu_hours == pytest.approx(800.0)  # 64 x 12.5
    assert c.usd == pytest.approx(2000.0)  # 800 x 2.5
    # 800 GPU-h x 0.7 kW x (0.8 + 0.2 x 0.1) = 459.2 kWh
    assert IDLE_POWER_FRACTION == 0.1
    assert c.kwh == pytest.approx(800 * 0.7 * 0.82)


def test_no_price_or_power_gives_none_not_a_guess():
    c = StepsCost(gpus=8, steps=10, step_s=36.0)
    assert c.hours == pytest.approx(0.1) and c.gpu_hours == pytest.approx(0.8)
    assert c.usd is None and c.kwh is None


def test_utilisation_is_clamped_busy_share_plus_idle_share_at_the_idle_fraction():
    assert utilisation(1.0) == 1.0
    assert utilisation(0.0) == IDLE_POWER_FRACTION
    assert utilisation(1.5) == 1.0 and utilisation(-1) == IDLE_POWER_FRACTION


def test_every_bundled_price_names_a_preset_a_page_and_a_date():
    table = price_table()
    assert {"h100-sxm", "h200", "b200", "a100-80gb-sxm", "mi300x"} <= set(table)
    for key, p in table.items():
        assert get_gpu(p.gpu).name == p.gpu and key == p.gpu.lower()
        assert p.page.startswith("https://") and p.provider
        assert pd.Timestamp(p.read) <= pd.Timestamp("2026-12-31")
        assert 0 < p.usd_per_gpu_hour < 100
        assert p.read in p.describe() and p.page in p.describe()


def test_price_resolution_order_flag_then_scenario_then_table():
    table = price_table()["h100-sxm"].usd_per_gpu_hour
    assert resolve_price("H100").usd_per_gpu_hour == table  # an alias finds the preset's row
    assert resolve_price("H100", scenario_price=1.5).usd_per_gpu_hour == 1.5
    given = parse_prices(["h100=2.49"])
    assert given == {"h100-sxm": 2.49}
    assert resolve_price("H100-SXM", given, scenario_price=1.5).usd_per_gpu_hour == 2.49
    assert resolve_price("H20") is None
    assert missing_price("h20") == "no price for GPU H20: pass --price H20=USD_PER_GPU_HOUR"
    # a GPU spec file's name has no preset: priced by its own name
    assert resolve_price("MyGPU", parse_prices(["MyGPU=4"])).usd_per_gpu_hour == 4.0


@pytest.mark.parametrize("item, fragment", [
    ("H100", "is not GPU=USD_PER_GPU_HOUR"),
    ("=2", "is not GPU=USD_PER_GPU_HOUR"),
    ("H100=abc", "'abc' in 'H100=abc' is not a number"),
    ("H100=0", "must be in (0, 1000]"),
    ("H100=nan", "must be in (0, 1000]"),
    ("H100=25000", "not a node's"),
])
def test_a_bad_price_is_one_error_naming_the_option(item, fragment):
    with pytest.raises(InputError) as exc:
        parse_prices([item])
    assert fragment in exc.value.message and exc.value.path == "--price"


def test_board_power_comes_from_the_preset_or_the_spec_file():
    assert get_gpu("H100").board_power_w == 700 and get_gpu("MI300X").board_power_w == 750
    assert get_gpu("H20").board_power_w is None  # no data sheet figure: left out, not guessed
    sheet = GPUSheet.of(get_gpu("A100"))
    assert sheet.board_power_w == 400 and sheet.to_spec().board_power_w == 400
    assert all(get_gpu(n).board_power_w is None or get_gpu(n).board_power_w > 100 for n in GPU_NAMES)
    assert not math.isnan(get_gpu("B200").board_power_w)


def test_busy_share_is_the_non_idle_share_and_one_where_undefined() -> None:
    import numpy as np

    from tltcore.prices import busy_share

    assert busy_share(30.0, 4, 100.0) == pytest.approx(1 - 30 / 400)
    assert busy_share(5.0, 4, 0.0) == 1.0 and busy_share(float("nan"), 4, 10.0) == 1.0
    got = busy_share(np.array([0.0, 40.0, np.nan]), 2, np.array([10.0, 40.0, 5.0]))
    assert got.tolist() == pytest.approx([1.0, 0.5, 1.0])


@pytest.mark.parametrize("command", [("sim", "run", "--for-steps", "0"),
                                     ("sim", "capacity", "--gpus-list", "8", "--for-steps", "20000000")])
def test_every_steps_option_has_the_same_bound(command) -> None:
    from conftest import invoke_cli
    from tltcore.prices import MAX_STEPS_PRICED, check_steps

    assert check_steps(MAX_STEPS_PRICED, "--steps") == MAX_STEPS_PRICED and check_steps(None, "--steps") is None
    res = invoke_cli(*command)
    assert res.returncode == 2 and "--for-steps: must be in [1, 10,000,000]" in res.stderr

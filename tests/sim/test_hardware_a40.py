"""The A40 preset (NVIDIA A40 data sheet): a tltcore.hardware preset, the one the A40 profiles' fits use."""

import pytest

from tltcore.cost.measured import PROFILE_GPUS, gpu_spec, profile_key
from tltcore.hardware import GPU_NAMES, get_gpu


def test_a40_is_a_preset_with_its_data_sheet_peaks():
    a40 = get_gpu("a40")
    assert "A40" in GPU_NAMES and get_gpu("NVIDIA-A40") is a40
    assert a40.bf16_flops == pytest.approx(149.7e12) and a40.hbm_bytes_per_s == pytest.approx(0.696e12)
    assert a40.memory_bytes == pytest.approx(48e9) and a40.interconnect_bytes_per_s == pytest.approx(56.25e9)
    assert "A40 data sheet" in a40.source


def test_the_profiles_a40_is_the_preset():
    assert gpu_spec(PROFILE_GPUS["a40"]) is get_gpu("A40")
    assert profile_key("A40") == "a40" and profile_key(get_gpu("h100")) == "h100"

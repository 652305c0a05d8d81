"""GPU catalog: lookup, aliases, and the refusal of table-only machines."""

import pytest

from tltcore.errors import InputError
from tltcore.hardware import GPU_NAMES, get_gpu


def test_aliases_are_case_insensitive():
    assert get_gpu("h100") is get_gpu("H100-SXM")
    assert get_gpu("A100").name == "A100-80GB-SXM"
    assert get_gpu("rtx_4090").name == "RTX4090"


def test_every_preset_resolves_by_its_name():
    for name in GPU_NAMES:
        assert get_gpu(name.upper()).name == name


def test_unknown_gpu_lists_known_names():
    with pytest.raises(InputError, match=r"unknown GPU 'tpu-v5'.*H100-SXM"):
        get_gpu("tpu-v5")


def test_data_sheet_ordering_of_peaks():
    h100, h200, h20, a100 = (get_gpu(n) for n in ("h100", "h200", "h20", "a100"))
    assert h200.bf16_flops == h100.bf16_flops and h200.hbm_bytes_per_s > h100.hbm_bytes_per_s
    # H20: more bandwidth than H100 but ~7x less compute -> a much lower ridge point
    assert h20.hbm_bytes_per_s > h100.hbm_bytes_per_s
    assert h20.ridge_flops_per_byte < h100.ridge_flops_per_byte / 5
    assert a100.effective_bandwidth < h100.effective_bandwidth


def test_cpu_calibrated_has_no_analytic_peaks():
    cpu = get_gpu("cpu-calibrated")
    assert not cpu.analytic
    with pytest.raises(InputError, match="measured cost table"):
        _ = cpu.effective_flops

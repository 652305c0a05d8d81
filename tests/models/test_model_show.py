"""`tlt model list` and `tlt model show`: the catalog and one model's shape, with where it came from."""

from __future__ import annotations

from pathlib import Path

from conftest import invoke_cli

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "model_configs"


def test_model_list_and_show():
    listed = invoke_cli("model", "list")
    assert listed.returncode == 0, listed.stderr
    for needed in ("Qwen/Qwen3-30B-A3B", "deepseek-ai/DeepSeek-V3", "Apache-2.0", "8/128 x 768"):
        assert needed in listed.stdout
    shown = invoke_cli("model", "show", "deepseek-ai/DeepSeek-V3")
    assert shown.returncode == 0, shown.stderr
    for needed in ("multi-head latent attention", "8 of 256 routed experts", "671.03B total", "37.55B active",
                   "fp8", "70,272 bytes per token", "MTP modules", "licence: DeepSeek License",
                   "not built by tlt real"):
        assert needed in shown.stdout, needed
    path = invoke_cli("model", "show", str(CONFIGS / "Qwen3-8B"))
    assert path.returncode == 0 and "q/k RMSNorm" in path.stdout and str(CONFIGS / "Qwen3-8B") in path.stdout
    assert "preset" in invoke_cli("model", "show", "Qwen2.5-7B").stdout
    bad = invoke_cli("model", "show", "nobody/nothing")
    assert bad.returncode == 2 and "tlt model list" in bad.stderr

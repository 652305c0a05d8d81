"""`tlt gpu campaign --device cpu --tiny`: the whole GPU campaign as a CPU dry run, so every line of it
runs here before a GPU is ever lent; a failing stage is recorded and the others still run; the folder
rules of tltcore/atomic.py hold; the wheel bundle's package list."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("torch")
pytest.importorskip("triton")

from conftest import invoke_cli

STAGES = ("environment", "kernels", "engine", "validate", "compare")
FILES = ("README.md", "campaign.jsonl", "environment.csv", "kernels.csv", "ops.csv", "cost_table.parquet",
         "cost_table_validation.parquet", "compare.csv", "compare_summary.csv", "validation/makespans.csv")


def _log(out):
    return [json.loads(line) for line in (out / "campaign.jsonl").read_text().splitlines()]


def test_tiny_campaign_runs_every_stage(tmp_path):
    import pandas as pd

    out = tmp_path / "gpu"
    r = invoke_cli("gpu", "campaign", "--device", "cpu", "--tiny", "--out", str(out))
    assert r.returncode == 0, r.stderr
    log = _log(out)
    assert [x["stage"] for x in log] == list(STAGES)
    assert all(x["status"] == "ok" for x in log), [(x["stage"], x["error"]) for x in log]
    for name in FILES:
        assert (out / name).is_file(), name
    ops = pd.read_csv(out / "ops.csv")
    assert {"decode_forward", "attention_eager", "attention_sdpa", "verify_forward", "draft_step"} <= set(ops["kind"])
    compare = pd.read_csv(out / "compare.csv")
    assert len(compare) >= len(ops) and compare["predicted_s"].gt(0).all()
    kernels = pd.read_csv(out / "kernels.csv")
    assert kernels["matches"].all() and set(kernels["kernel"]) == {"tree_accept", "compact_kv"}
    marker = json.loads((out / ".tlt-results.json").read_text())
    assert marker["kind"] == "gpu-campaign" and "validation" in marker["entries"]
    readme = (out / "README.md").read_text()
    assert "tlt gpu campaign --device cpu --tiny" in readme and "| compare | ok |" in readme
    # a second run replaces its own results
    again = invoke_cli("gpu", "campaign", "--device", "cpu", "--tiny", "--out", str(out), "--budget-s", "300")
    assert again.returncode == 0, again.stderr


def test_failing_stage_is_recorded_and_the_others_run(tmp_path, monkeypatch):
    from tltreal.validation import campaign

    def broken(c):
        raise RuntimeError("planted failure")

    monkeypatch.setattr(campaign, "stage_kernels", broken)
    out = tmp_path / "gpu"
    r = invoke_cli("gpu", "campaign", "--device", "cpu", "--tiny", "--out", str(out))
    assert r.returncode == 0, r.stderr
    log = {x["stage"]: x for x in _log(out)}
    assert list(log) == list(STAGES)
    assert log["kernels"]["status"] == "failed" and "planted failure" in log["kernels"]["error"]
    assert all(log[s]["status"] == "ok" for s in STAGES if s != "kernels")
    assert (out / "compare.csv").is_file() and not (out / "kernels.csv").exists()
    assert "## kernels failed" in (out / "README.md").read_text()


def test_stage_timeout_is_recorded_and_keeps_earlier_rows(tmp_path):
    import time

    from tltcore.atomic import open_results_dir
    from tltreal.validation.campaign import Campaign, run_stage, tiny_grid

    out = tmp_path / "gpu"
    open_results_dir(out, kind="gpu-campaign")
    c = Campaign(out=out, device="cpu", tiny=True, budget_s=30, command="test", grid=tiny_grid())

    def slow(c):
        c.write_json("partial.json", {"rows": 1})
        time.sleep(5)
        return {}

    c.budget_s = 1.0 / 0.04  # the environment stage's share: 1 s
    r = run_stage(c, "environment", slow)
    assert r["status"] == "timeout" and r["seconds"] < 4
    assert (out / "partial.json").is_file()
    assert json.loads((out / "campaign.jsonl").read_text())["status"] == "timeout"


def test_refuses_a_folder_it_did_not_create(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my work")
    r = invoke_cli("gpu", "campaign", "--device", "cpu", "--tiny", "--out", str(out))
    assert r.returncode == 2 and "was not created by tlt" in r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_bad_budget_is_one_line(tmp_path):
    r = invoke_cli("gpu", "campaign", "--device", "cpu", "--tiny", "--budget-s", "5", "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "--budget-s" in r.stderr and not (tmp_path / "x").exists()


def test_bundle_brings_what_the_image_lacks_and_their_requirements():
    """The package-list logic of `make gpu-bundle`, without network: a requirement the image has is not
    brought (nor are its own requirements), a missing one is, with what it requires."""
    from tltcli.gpu_bundle import IMAGE_PACKAGES, missing_distributions, normalize, unexplained

    graph = {"tlt": ["numpy", "pydantic", "simpy", "torch"], "pydantic": ["pydantic-core", "typing-extensions"],
             "pydantic-core": ["typing-extensions"], "simpy": [], "torch": ["sympy", "not-in-image"]}
    missing = missing_distributions(IMAGE_PACKAGES, requires=lambda d: graph.get(d, []))
    assert missing == ["pydantic", "pydantic-core", "simpy"]
    assert unexplained({"tlt", "numpy", "dill", "simpy"}, missing) == ["dill"]
    assert normalize("Typing_Extensions") == "typing-extensions"
    assert {"torch", "triton", "pandas", "pyarrow", "typer", "rich"} <= IMAGE_PACKAGES
    assert not {"simpy", "pydantic", "tomli-w"} & IMAGE_PACKAGES


def test_the_gpu_build_path_builds_in_dtype_seeded_and_restores_the_default_dtype() -> None:
    """What build_model and build_drafter do on a GPU (construct on the device, fill seeded), run on the
    CPU: the device-agnostic half of a path no CI machine has a GPU for."""
    import torch

    from tltreal.model.transformer import Transformer
    from tltreal.spec_decode.proposers.eagle import EagleDrafter
    from tltreal.validation.campaign import _built_on_gpu
    from tltreal.validation.validate import DEFAULT_MODEL

    before = torch.get_default_dtype()
    a = _built_on_gpu(lambda: Transformer(DEFAULT_MODEL), "cpu", torch.bfloat16, 0)
    b = _built_on_gpu(lambda: Transformer(DEFAULT_MODEL), "cpu", torch.bfloat16, 0)
    assert torch.get_default_dtype() == before and not a.training
    assert all(p.dtype == torch.bfloat16 for p in a.parameters())
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    drafter = _built_on_gpu(lambda: EagleDrafter(a), "cpu", a.dtype, 1)
    assert all(p.dtype == torch.bfloat16 for p in drafter.parameters())

"""The bundled model catalog: every entry read by the one reader, sourced and licensed; the same shape
as the real config.json; resolution by hub id, model name, preset or path."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tltcore.errors import InputError
from tltcore.model_catalog import catalog, find
from tltcore.model_shape import MODEL_NAMES, get_model, load_config_json, resolve_model

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "model_configs"
LICENCES = {"Apache-2.0", "MIT", "Llama 3.1 Community License", "Llama 3.3 Community License",
            "DeepSeek License (model), MIT (code)", "Modified MIT", "Qwen Research License"}
REQUIRED = ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-4B", "Qwen/Qwen3-8B", "Qwen/Qwen3-14B", "Qwen/Qwen3-32B",
            "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-235B-A22B", "Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-32B",
            "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.3-70B-Instruct", "mistralai/Mixtral-8x7B-v0.1",
            "mistralai/Mixtral-8x22B-v0.1", "deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1",
            "deepseek-ai/DeepSeek-V2-Lite", "moonshotai/Kimi-K2-Instruct")
# Model cards, billions: total and active (Qwen/Mistral count the embedding in the active share).
PUBLISHED = {"Qwen/Qwen3-235B-A22B": (235.0, 22.0), "mistralai/Mixtral-8x22B-v0.1": (141.0, 39.0),
             "Qwen/Qwen3-0.6B": (0.6, 0.6), "Qwen/Qwen3-32B": (32.8, 32.8)}


def test_the_catalog_holds_the_popular_models_each_sourced_and_licensed():
    assert set(REQUIRED) <= set(catalog())
    names = [m.name.lower() for m in catalog().values()]
    assert len(names) == len(set(names))  # the model part alone resolves too
    for hub_id, entry in catalog().items():
        assert entry.source == f"https://huggingface.co/{hub_id}/blob/main/config.json"
        assert entry.license in LICENCES and entry.checked
        entry.model_config()  # the one reader reads it


@pytest.mark.parametrize(("hub_id", "folder"), [("Qwen/Qwen3-8B", "Qwen3-8B"), ("Qwen/Qwen3-30B-A3B", "Qwen3-30B-A3B"),
                                                ("mistralai/Mixtral-8x7B-v0.1", "Mixtral-8x7B-v0.1"),
                                                ("deepseek-ai/DeepSeek-V3", "DeepSeek-V3")])
def test_a_catalog_entry_and_the_real_config_json_give_the_same_shape(hub_id, folder):
    assert get_model(hub_id) == load_config_json(CONFIGS / folder)


@pytest.mark.parametrize("hub_id", ["Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-32B", "meta-llama/Llama-3.3-70B-Instruct"])
def test_catalog_entries_agree_with_the_presets(hub_id):
    entry = catalog()[hub_id]
    preset = get_model(entry.name.removesuffix("-Instruct"))
    from tltcore.model_shape import ModelShape

    assert ModelShape.from_config(entry.model_config(), preset.name) == preset


@pytest.mark.parametrize("hub_id", sorted(PUBLISHED))
def test_catalog_totals_match_the_model_cards(hub_id):
    shape, (total, active) = get_model(hub_id), PUBLISHED[hub_id]
    assert shape.total_params / 1e9 == pytest.approx(total, rel=0.02)
    assert shape.active_params / 1e9 == pytest.approx(active, rel=0.03)


def test_resolution_order():
    # presets keep their names and values, also by hub id
    assert get_model("Qwen/Qwen2.5-7B") is get_model("qwen2.5-7b")
    assert resolve_model("Qwen/Qwen2.5-7B")[1] is None
    # catalog by hub id, case-insensitive, or by the model part alone
    assert get_model("qwen/qwen3-30b-a3b") is get_model("Qwen3-30B-A3B")
    assert get_model("Qwen/Qwen3-30B-A3B").name == "Qwen3-30B-A3B"
    assert find("nobody/Qwen3-30B-A3B") is None
    with pytest.raises(InputError, match="tlt model list"):
        get_model("Qwen/Qwen9-1T")
    assert len(MODEL_NAMES) == 6


def test_a_path_wins_over_a_catalog_entry_of_the_same_name(tmp_path, monkeypatch):
    folder = tmp_path / "Qwen3-8B"
    folder.mkdir()
    raw = json.loads((CONFIGS / "Qwen3-8B" / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**raw, "num_hidden_layers": 2}))
    monkeypatch.chdir(tmp_path)
    mine, origin = resolve_model("Qwen3-8B")
    assert mine.num_hidden_layers == 2 and origin == Path("Qwen3-8B") / "config.json"
    assert get_model("Qwen/Qwen3-8B").num_hidden_layers == 36


def test_catalog_shapes_are_named_by_their_model_part():
    ds = get_model("deepseek-ai/DeepSeek-R1")
    assert ds == replace(get_model("deepseek-ai/DeepSeek-V3"), name="DeepSeek-R1")

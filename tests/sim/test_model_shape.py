"""Model shapes: parameter counts against the published sizes, config.json loading, errors."""

import json

import pytest

from tltcore.errors import InputError
from tltcore.model_shape import MODEL_NAMES, get_model, load_config_json

# Published parameter counts (model cards), in billions.
PUBLISHED = {"Qwen2.5-7B": 7.62, "Qwen2.5-32B": 32.8, "Llama-3.3-70B": 70.6, "Qwen2.5-1.5B": 1.54,
             "Qwen2.5-0.5B": 0.49, "DeepSeek-R1-Distill-Qwen-7B": 7.62}


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_total_params_match_model_cards(name):
    assert get_model(name).total_params / 1e9 == pytest.approx(PUBLISHED[name], rel=0.01)


def test_lookup_is_case_insensitive_and_accepts_hub_ids():
    assert get_model("qwen2.5-7b") is get_model("Qwen/Qwen2.5-7B")


def test_derived_per_token_costs_qwen7b():
    m = get_model("Qwen2.5-7B")
    assert m.head_dim == 128
    assert m.kv_bytes_per_token == 2 * 28 * 4 * 128 * 2  # K and V, 28 layers, 4 kv heads, bf16
    assert m.weight_bytes == 2 * m.total_params
    assert m.attention_flops_per_position == 4 * 28 * 3584
    # ~2 FLOPs per parameter per token (embedding lookup is free, the LM head is not)
    assert m.matmul_flops_per_token == pytest.approx(2 * (m.total_params - m.embedding_params), rel=1e-3)


def test_drafter_is_one_layer_with_input_projection():
    target = get_model("Qwen2.5-32B")
    d = target.drafter()
    assert d.num_hidden_layers == 1 and d.hidden_size == target.hidden_size
    assert d.decoder_params == target.params_per_layer + 2 * target.hidden_size ** 2 + target.hidden_size
    assert d.vocab_size == target.vocab_size  # shares the LM head


def _write(tmp_path, data):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


def test_load_config_json_round_trip(tmp_path):
    cfg = {"model_type": "qwen2", "num_hidden_layers": 24, "hidden_size": 896, "num_attention_heads": 14,
           "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936,
           "tie_word_embeddings": True}
    shape = get_model(_write(tmp_path, cfg))
    assert shape.total_params == get_model("Qwen2.5-0.5B").total_params
    assert get_model(tmp_path).num_hidden_layers == 24  # a directory holding config.json


def test_missing_field_names_file_and_field(tmp_path):
    path = _write(tmp_path, {"num_hidden_layers": 2, "hidden_size": 64})
    with pytest.raises(InputError, match=r"config\.json.*'num_attention_heads'"):
        load_config_json(path)


def test_malformed_values_and_json(tmp_path):
    bad = {"num_hidden_layers": "two", "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
           "vocab_size": 100}
    with pytest.raises(InputError, match="'num_hidden_layers'"):
        load_config_json(_write(tmp_path, bad))
    heads = dict(bad, num_hidden_layers=2, num_key_value_heads=3)
    with pytest.raises(InputError, match="num_key_value_heads"):
        load_config_json(_write(tmp_path, heads))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(InputError, match="JSON"):
        load_config_json(tmp_path / "config.json")


def test_unknown_model():
    with pytest.raises(InputError, match="unknown model 'gpt-5'"):
        get_model("gpt-5")
    with pytest.raises(InputError, match="file not found"):
        get_model("/nonexistent/config.json")

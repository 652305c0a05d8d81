"""The config reader's families: real config.json files (tests/data/model_configs, sources in its
README), the published parameter totals, and every field read, inert or refused naming the key and file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tltcore.errors import InputError
from tltcore.model_config import FAMILY_FIELDS, INERT_FIELDS, ROUTER_FIELDS, ModelConfig
from tltcore.model_shape import ModelShape, load_config_json

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "model_configs"
FIXTURES = ("Qwen3-8B", "Qwen3-30B-A3B", "Mixtral-8x7B-v0.1", "DeepSeek-V3")


def _raw(name: str) -> dict:
    return json.loads((CONFIGS / name / "config.json").read_text())


def _write(tmp_path: Path, raw: dict) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    return path


# Published totals (model cards), billions: (total, active per token, active counts the embedding).
# Qwen and Mistral count the embedding in the active share; DeepSeek's 37B leaves its 0.9B embedding out
# (README_WEIGHTS: 36.6B activated, the 0.9B output head included).
PUBLISHED = {"Qwen3-8B": (8.2, 8.2, True), "Qwen3-30B-A3B": (30.5, 3.3, True),
             "Mixtral-8x7B-v0.1": (46.7, 12.9, True), "DeepSeek-V3": (671.0, 36.6, False)}


@pytest.mark.parametrize("name", FIXTURES)
def test_real_configs_give_the_published_totals(name):
    shape = load_config_json(CONFIGS / name)
    total, active, with_embedding = PUBLISHED[name]
    counted = shape.active_params - (0 if with_embedding else shape.embedding_params)
    assert shape.total_params / 1e9 == pytest.approx(total, rel=0.01)
    assert counted / 1e9 == pytest.approx(active, rel=0.02)


def test_each_family_maps_onto_the_shape():
    q8, q30, mix, ds = (load_config_json(CONFIGS / n) for n in FIXTURES)
    assert q8.qk_norm and q8.head_dim == 128 and q8.moe is None and not q8.qkv_bias
    assert q30.moe.num_experts == 128 and q30.moe.experts_per_token == 8 and q30.moe.expert_intermediate_size == 768
    assert q30.moe.dense_layers == 0 and q30.moe.shared_intermediate_size == 0 and q30.qk_norm
    assert mix.moe.num_experts == 8 and mix.moe.expert_intermediate_size == 14336 and not mix.qk_norm  # its width
    assert ds.mla.kv_lora_rank == 512 and ds.mla.q_lora_rank == 1536 and ds.mla.latent_dim == 576
    assert ds.moe.dense_layers == 3 and ds.moe.shared_intermediate_size == 2048 and ds.moe.num_experts == 256
    assert ds.weight_dtype == "fp8" and ds.mtp_layers == 1
    assert ds.kv_bytes_per_token == 61 * 576 * 2


def test_a_dense_config_shape_is_unchanged():
    """Llama/Qwen2 configs price exactly as before: no experts, no latent attention, bf16."""
    cfg = ModelConfig.from_dict({"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584,
                                 "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944,
                                 "vocab_size": 152064})
    shape = ModelShape.from_config(cfg, "Qwen2.5-7B")
    assert shape == ModelShape("Qwen2.5-7B", 28, 3584, 28, 4, 18944, 152064, qkv_bias=True)


@pytest.mark.parametrize("name", FIXTURES)
def test_an_unknown_key_is_refused_naming_key_and_file(tmp_path, name):
    path = _write(tmp_path, {**_raw(name), "foo_bar": 1})
    with pytest.raises(InputError) as err:
        ModelConfig.from_json(path)
    text = str(err.value)
    assert str(path) in text and "field 'foo_bar'" in text and "(it may change the network)" in text


@pytest.mark.parametrize("name", FIXTURES)
def test_every_key_of_a_real_config_is_read_or_listed_inert(name):
    raw = _raw(name)
    family = raw["model_type"]
    unlisted = [k for k in raw if k not in FAMILY_FIELDS[family] and k not in INERT_FIELDS
                and k not in ROUTER_FIELDS and k not in {"model_type", "hidden_size", "num_hidden_layers",
                                                         "num_attention_heads", "num_key_value_heads",
                                                         "intermediate_size", "vocab_size", "head_dim",
                                                         "rms_norm_eps", "rope_theta", "rope_scaling",
                                                         "tie_word_embeddings", "hidden_act",
                                                         "max_position_embeddings", "eos_token_id",
                                                         "quantization_config"}]
    assert unlisted == []
    assert all(INERT_FIELDS[k] for k in INERT_FIELDS) and all(ROUTER_FIELDS[k] for k in ROUTER_FIELDS)


def test_a_field_of_another_family_is_refused(tmp_path):
    path = _write(tmp_path, {**_raw("Qwen3-8B"), "num_experts": 8})
    with pytest.raises(InputError, match=r"field 'num_experts': is not supported by tlt's Qwen3 reader"):
        ModelConfig.from_json(path)
    router = {**_raw("Qwen3-8B"), "norm_topk_prob": True}  # inert for MoE families only
    with pytest.raises(InputError, match="norm_topk_prob"):
        ModelConfig.from_dict(router)


@pytest.mark.parametrize(("quant", "field"), [
    ({"quant_method": "gptq", "bits": 4}, "quantization_config.quant_method"),
    ({"quant_method": "awq"}, "quantization_config.quant_method"),
    ({"quant_method": "fp8", "fmt": "e4m3", "dequantize": False}, "quantization_config.dequantize"),
    ({"quant_method": "fp8", "fmt": "e5m2"}, "quantization_config.fmt"),
])
def test_quantisation_other_than_fp8_is_refused_naming_the_key(tmp_path, quant, field):
    path = _write(tmp_path, {**_raw("Qwen3-8B"), "quantization_config": quant})
    with pytest.raises(InputError) as err:
        ModelConfig.from_json(path)
    assert f"field '{field}'" in str(err.value) and str(path) in str(err.value)


def test_fp8_weights_take_one_byte():
    raw = _raw("Qwen3-8B")
    fp8 = ModelConfig.from_dict({**raw, "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                                                                "activation_scheme": "dynamic",
                                                                "weight_block_size": [128, 128]}})
    assert fp8.weight_dtype == "fp8"
    bf16, q = (ModelShape.from_config(c, "m") for c in (ModelConfig.from_dict(raw), fp8))
    assert q.weight_element_bytes == 1 and q.weight_bytes < bf16.weight_bytes and q.total_params == bf16.total_params


def test_qwen_moe_dense_layers_follow_mlp_only_layers_and_sparse_step():
    raw = {**_raw("Qwen3-30B-A3B"), "num_hidden_layers": 8, "decoder_sparse_step": 2, "mlp_only_layers": [1, 6]}
    cfg = ModelConfig.from_dict(raw)
    # transformers: MoE iff i not in mlp_only_layers and (i + 1) % step == 0 -> MoE layers 3, 5, 7
    assert cfg.moe.dense_layer_ids == (0, 1, 2, 4, 6)
    shape = ModelShape.from_config(cfg, "m")
    assert shape.moe_layers == 3 and shape.dense_mlp_layers == 5


def test_deepseek_dense_layers_follow_first_k_and_layer_freq():
    raw = {**_raw("DeepSeek-V3"), "num_hidden_layers": 9, "moe_layer_freq": 2}
    cfg = ModelConfig.from_dict(raw)
    assert cfg.moe.dense_layer_ids == (0, 1, 2, 3, 5, 7)  # vLLM: MoE iff i >= 3 and i % 2 == 0
    assert ModelConfig.from_dict({**raw, "n_routed_experts": None}).moe is None  # DeepSeek's code: all dense


def test_qwen2_moe_has_its_shared_expert_and_biases():
    raw = {"model_type": "qwen2_moe", "num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 16,
           "num_key_value_heads": 16, "intermediate_size": 5632, "vocab_size": 151936, "num_experts": 60,
           "num_experts_per_tok": 4, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
           "norm_topk_prob": False, "use_sliding_window": True, "sliding_window": 32, "max_window_layers": 4}
    cfg = ModelConfig.from_dict(raw)
    assert cfg.moe.shared_intermediate_size == 5632 and cfg.qkv_bias and not cfg.o_bias
    assert cfg.sliding_layers == (0, 2)  # transformers: every other layer below max_window_layers
    # Qwen1.5-MoE-A2.7B's card: 14.3B parameters, 2.7B activated (the shared-expert gate, 2048 a layer, is left out)
    shape = ModelShape.from_config(cfg, "Qwen1.5-MoE-A2.7B")
    assert shape.total_params / 1e9 == pytest.approx(14.3, rel=0.01)
    assert shape.active_params / 1e9 == pytest.approx(2.7, rel=0.03)


def test_kimi_k2_is_read_as_deepseek_v3_and_glm45_maps_cleanly():
    kimi = ModelConfig.from_dict({**_raw("DeepSeek-V3"), "model_type": "kimi_k2", "n_routed_experts": 384,
                                  "num_attention_heads": 64, "num_key_value_heads": 64, "first_k_dense_replace": 1,
                                  "vocab_size": 163840, "num_nextn_predict_layers": 0})
    assert kimi.model_type == "deepseek_v3" and kimi.moe.num_experts == 384 and kimi.mtp_layers == 0
    glm = ModelConfig.from_dict({
        "model_type": "glm4_moe", "hidden_size": 5120, "intermediate_size": 12288, "num_hidden_layers": 92,
        "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151552,
        "n_routed_experts": 160, "n_shared_experts": 1, "num_experts_per_tok": 8, "moe_intermediate_size": 1536,
        "first_k_dense_replace": 3, "use_qk_norm": True, "attention_bias": True, "num_nextn_predict_layers": 1,
        "routed_scaling_factor": 2.5, "n_group": 1, "topk_group": 1, "norm_topk_prob": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5}})
    assert glm.partial_rotary_factor == 0.5 and glm.qk_norm and glm.qkv_bias and not glm.o_bias
    assert glm.moe.dense_layer_ids == (0, 1, 2) and glm.moe.shared_intermediate_size == 1536 and glm.mtp_layers == 1
    small = {"model_type": "glm4_moe", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "vocab_size": 100, "n_routed_experts": 4, "num_experts_per_tok": 2,
             "moe_intermediate_size": 32}
    assert ModelConfig.from_dict(small).partial_rotary_factor == 0.5  # transformers' default for GLM-4.5


def test_latent_attention_fields():
    raw = _raw("DeepSeek-V3")
    direct = ModelConfig.from_dict({**raw, "q_lora_rank": None})  # DeepSeek-V2-Lite: queries projected directly
    assert direct.mla.q_lora_rank == 0
    ModelConfig.from_dict({**raw, "head_dim": 64, "qk_head_dim": 192})  # what transformers 5 writes back
    for bad, field in (({"head_dim": 100}, "head_dim"), ({"qk_head_dim": 128}, "qk_head_dim"),
                       ({"attention_bias": True}, "attention_bias")):
        with pytest.raises(InputError, match=f"'{field}'"):
            ModelConfig.from_dict({**raw, **bad})
    missing = {k: v for k, v in raw.items() if k != "kv_lora_rank"}
    with pytest.raises(InputError, match="'kv_lora_rank': missing required field"):
        ModelConfig.from_dict(missing)


def test_mtp_layers_under_either_name_and_rope_yarn():
    raw = _raw("DeepSeek-V3")
    assert ModelConfig.from_dict({k: v for k, v in raw.items() if k != "num_nextn_predict_layers"}
                                 | {"num_mtp_layers": 2}).mtp_layers == 2
    with pytest.raises(InputError, match="num_mtp_layers"):
        ModelConfig.from_dict({**raw, "num_mtp_layers": 2})
    cfg = ModelConfig.from_dict(raw)
    assert cfg.rope_scaling.kind == "yarn" and cfg.rope_scaling.factor == 40
    assert cfg.rope_scaling.original_max_position_embeddings == 4096 and cfg.rope_scaling.mscale == 1.0
    with pytest.raises(InputError, match=r"'rope_scaling.low_freq_factor'"):
        ModelConfig.from_dict({**raw, "rope_scaling": {**raw["rope_scaling"], "low_freq_factor": 1.0}})


def test_a_wrapped_text_config_names_its_keys_inside():
    wrapped = {"model_type": "some_vl", "text_config": {**_raw("Qwen3-8B"), "foo_bar": 1}}
    with pytest.raises(InputError, match=r"field 'text_config.foo_bar'"):
        ModelConfig.from_dict(wrapped)
    assert ModelConfig.from_dict({"model_type": "some_vl", "text_config": _raw("Qwen3-8B")}).qk_norm


def test_qwen3_defaults_to_transformers_head_dim():
    raw = {k: v for k, v in _raw("Qwen3-8B").items() if k != "head_dim"}
    assert ModelConfig.from_dict({**raw, "hidden_size": 2048}).head_dim == 128  # Qwen3Config's default

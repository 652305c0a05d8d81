"""The native engine against Hugging Face ``transformers`` itself, one config feature at a time.

Each case builds a tiny random model with ``transformers`` (float64), saves it with
``save_pretrained``, loads ``config.json`` + safetensors through tlt's one config reader, and checks
logits equal within float64 tolerance and greedy continuations identical -- with the engine's
speculative decoding on as well as off. Features: rope_parameters (transformers 5) and the older
top-level rope_theta, linear and Llama-3.1 rope scaling, GELU variants and ReLU, Llama attention and
MLP biases, Qwen2 biases and sliding-window layers, tied embeddings, head_dim != hidden / heads.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tltreal.engine import Engine, EngineConfig  # noqa: E402
from tltreal.model import causal_mask, load_model  # noqa: E402
from tltreal.proposers import OracleDrafter  # noqa: E402
from tltsim.errors import InputError  # noqa: E402
from tltsim.model_config import ModelConfig  # noqa: E402
from tltsim.policy.base import NoSD, SDConfig, Static  # noqa: E402

BASE = {"vocab_size": 97, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}

CASES: dict[str, dict] = {
    "llama": {"model_type": "llama"},
    "llama-legacy-rope-theta": {"model_type": "llama", "rope_theta": 500000.0},
    "llama-rope-parameters": {"model_type": "llama", "rope_parameters": {"rope_type": "default", "rope_theta": 3e5}},
    "llama-linear-rope": {"model_type": "llama", "rope_parameters": {"rope_type": "linear", "rope_theta": 1e4,
                                                                       "factor": 4.0}},
    "llama-legacy-rope-scaling": {"model_type": "llama", "rope_theta": 1e4,
                                  "rope_scaling": {"type": "linear", "factor": 2.0}},
    "llama3-rope": {"model_type": "llama", "rope_parameters": {
        "rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}},
    "llama-gelu": {"model_type": "llama", "hidden_act": "gelu"},
    "llama-gelu-tanh": {"model_type": "llama", "hidden_act": "gelu_pytorch_tanh"},
    "llama-gelu-new": {"model_type": "llama", "hidden_act": "gelu_new"},
    "llama-relu": {"model_type": "llama", "hidden_act": "relu"},
    "llama-biases": {"model_type": "llama", "attention_bias": True, "mlp_bias": True},
    "llama-tied-head-dim": {"model_type": "llama", "tie_word_embeddings": True, "head_dim": 16},
    "qwen2": {"model_type": "qwen2"},
    "qwen2-sliding": {"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 6,
                      "max_window_layers": 1},
    "qwen2-tied": {"model_type": "qwen2", "tie_word_embeddings": True},
}


def _hf_model(tmp: Path, fields: dict) -> tuple[object, Path]:
    """A random transformers model (float64, seeded), saved to ``tmp``."""
    raw = {**BASE, **fields}
    (tmp / "in").mkdir()
    (tmp / "in" / "config.json").write_text(json.dumps(raw))
    config = transformers.AutoConfig.from_pretrained(tmp / "in")
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float64)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.15)
    model.eval()
    model.save_pretrained(tmp / "model")
    return model, tmp / "model"


def _prompt(n: int = 20) -> list[int]:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, BASE["vocab_size"], (n,), generator=g).tolist()


@pytest.mark.parametrize("name", list(CASES))
def test_logits_and_greedy_tokens_match_transformers(tmp_path: Path, name: str) -> None:
    hf, folder = _hf_model(tmp_path, CASES[name])
    cfg = ModelConfig.from_json(folder)
    ours = load_model(cfg, folder, dtype=torch.float64)
    prompt = _prompt()
    ids = torch.tensor([prompt])
    with torch.no_grad():
        expected = hf(ids).logits[0]
    t = len(prompt)
    cache = ours.new_cache(1, t + 4)
    logits, _ = ours(ids, torch.arange(t)[None], cache, torch.tensor([0]), torch.tensor([0]), causal_mask(1, t))
    # transformers builds its rotary tables in float32 even in a float64 model (ours are float64):
    # ~1e-7 relative differences, far below any logit margin the greedy check below depends on.
    torch.testing.assert_close(logits[0], expected, rtol=1e-5, atol=1e-6)

    n_new = 24
    with torch.no_grad():
        hf_out = hf.generate(ids, max_new_tokens=n_new, do_sample=False, min_new_tokens=n_new,
                             pad_token_id=0)[0, t:].tolist()
    for policy, drafter in ((NoSD(), None), (Static(SDConfig(3, 2, 6)), OracleDrafter(ours))):
        engine = Engine(ours, policy, drafter, EngineConfig(max_batch=1, max_len=t + n_new + 1, max_verify=6,
                                                            max_draft_nodes=4))
        rid = engine.add_request(prompt, n_new)
        assert engine.run().outputs[rid] == hf_out, (name, policy.name)


def test_config_round_trips_through_transformers(tmp_path: Path) -> None:
    """What tlt writes, transformers reads back to the same model (and tlt reads that back)."""
    for fields in CASES.values():
        cfg = ModelConfig.from_dict({**BASE, **fields})
        folder = tmp_path / f"c{abs(hash(json.dumps(fields, sort_keys=True)))}"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(cfg.to_hf_dict()))
        hf = transformers.AutoConfig.from_pretrained(folder)
        hf.save_pretrained(folder / "again")
        assert ModelConfig.from_json(folder / "again") == cfg


@pytest.mark.parametrize("field,value", [
    ("quantization_config", {"quant_method": "gptq"}),
    ("rope_parameters", {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}),
    ("rope_parameters", {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [1, 2]}),
    ("partial_rotary_factor", 0.5),
    ("hidden_act", "quick_gelu"),
    ("use_mrope", True),
    ("hidden_size", True),
    ("attention_bias", "yes"),
])
def test_unknown_or_unsupported_fields_are_refused_not_ignored(tmp_path: Path, field: str, value: object) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**BASE, "model_type": "llama", field: value}))
    with pytest.raises(InputError) as err:
        ModelConfig.from_json(path)
    assert str(path) in str(err.value) and field in str(err.value)

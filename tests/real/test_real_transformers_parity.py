"""The native engine against Hugging Face ``transformers`` itself, one config feature at a time.

Each case builds a tiny random model with ``transformers`` (float64), saves it with
``save_pretrained``, loads ``config.json`` + safetensors through tlt's one config reader, and checks
logits equal within float64 tolerance and greedy continuations identical -- with the engine's
speculative decoding on as well as off. Features: rope_parameters (transformers 5) and the older
top-level rope_theta, linear and Llama-3.1 rope scaling, GELU variants and ReLU, Llama attention and
MLP biases, Qwen2 biases and sliding-window layers, Mistral's sliding window, Qwen3's per-head q/k
RMSNorm (with its biases, sliding layers and default head_dim), tied embeddings, head_dim != hidden /
heads. Families the engine does not build are refused in one line naming them.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tltcore.errors import InputError  # noqa: E402
from tltcore.model_config import ModelConfig  # noqa: E402
from tltcore.policy.base import NoSD, SDConfig, Static  # noqa: E402
from tltreal.engine.engine import Engine  # noqa: E402
from tltreal.engine.engine_config import EngineConfig  # noqa: E402
from tltreal.model.transformer import causal_mask  # noqa: E402
from tltreal.model.weights import load_model  # noqa: E402
from tltreal.spec_decode.proposers import OracleDrafter  # noqa: E402

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
    "mistral": {"model_type": "mistral"},  # transformers writes its default sliding_window 4096: wider than any test
    "mistral-sliding": {"model_type": "mistral", "sliding_window": 6},
    "qwen3": {"model_type": "qwen3", "head_dim": 8},
    "qwen3-default-head-dim": {"model_type": "qwen3"},  # Qwen3Config's head_dim 128, not hidden / heads
    "qwen3-biases-tied": {"model_type": "qwen3", "head_dim": 16, "attention_bias": True, "tie_word_embeddings": True},
    "qwen3-sliding": {"model_type": "qwen3", "head_dim": 8, "use_sliding_window": True, "sliding_window": 6,
                      "max_window_layers": 1},
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
        back = ModelConfig.from_json(folder / "again")
        # transformers fills in its own default eos_token_id (Llama: 2) where the config had none
        assert back.eos_token_ids in ((), (2,)) and replace(back, eos_token_ids=cfg.eos_token_ids) == cfg


@pytest.mark.parametrize("field,value", [
    ("quantization_config", {"quant_method": "gptq"}),
    ("rope_parameters", {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 4.0}),
    ("rope_parameters", {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "low_freq_factor": 1.0}),
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


def test_tlt_real_generate_matches_transformers_greedy_and_stops_at_eos(tmp_path: Path) -> None:
    """The CLI end to end: prompts from a file, weights and eos_token_id from the saved model, tokens
    written as JSONL; equal to transformers' greedy generate, stopping at EOS (SD on), and running
    to --max-tokens with --ignore-eos."""
    from conftest import invoke_cli

    hf, folder = _hf_model(tmp_path, {"model_type": "llama"})
    prompt = _prompt()
    ids = torch.tensor([prompt])
    with torch.no_grad():
        free = hf.generate(ids, max_new_tokens=20, min_new_tokens=20, do_sample=False, pad_token_id=0)[0, 20:].tolist()
    stop = next(i for i, t in enumerate(free) if i >= 5 and t not in free[:i])  # first new token from the 6th on
    eos = free[stop]
    raw = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**raw, "eos_token_id": eos}))
    with torch.no_grad():
        expected = hf.generate(ids, max_new_tokens=20, do_sample=False, eos_token_id=eos,
                               pad_token_id=eos)[0, 20:].tolist()
    assert expected == free[: stop + 1]
    (tmp_path / "p.jsonl").write_text(json.dumps(prompt) + "\n" + json.dumps({"tokens": prompt[:7]}) + "\n")
    base = ["real", "generate", "--config", str(folder), "--weights", str(folder), "--prompts-file",
            str(tmp_path / "p.jsonl"), "--max-tokens", "20", "--dtype", "float64"]
    res = invoke_cli(*base, "--policy", "static:3_2_6", "--drafter", "oracle", "--out", str(tmp_path / "e.parquet"))
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in (tmp_path / "e.tokens.jsonl").read_text().splitlines()]
    assert [r["prompt"] for r in rows] == [prompt, prompt[:7]]
    assert rows[0]["tokens"] == expected and rows[0]["finish"] == "eos"
    res = invoke_cli(*base, "--ignore-eos", "--out", str(tmp_path / "f.parquet"))
    assert res.returncode == 0, res.stderr
    assert "drafter none" in res.stdout  # no-sd never drafts: no drafter is built
    rows = [json.loads(line) for line in (tmp_path / "f.tokens.jsonl").read_text().splitlines()]
    assert rows[0]["tokens"] == free and rows[0]["finish"] == "length"


MOE_FIXTURES = Path(__file__).resolve().parents[1] / "data" / "model_configs"


@pytest.mark.parametrize(("folder", "family"), [("Qwen3-30B-A3B", "Qwen3-MoE"), ("Mixtral-8x7B-v0.1", "Mixtral"),
                                                 ("DeepSeek-V3", "DeepSeek-V3")])
def test_the_engine_refuses_families_it_cannot_build_in_one_line(folder: str, family: str) -> None:
    """The reader reads them (the simulator prices them); the engine says so before allocating."""
    from tltreal.model.transformer import Transformer

    cfg = ModelConfig.from_json(MOE_FIXTURES / folder)
    with pytest.raises(InputError, match=rf"native engine builds llama, mistral, qwen2, qwen3 models, not {family}"):
        Transformer(cfg)


@pytest.mark.parametrize(("fields", "field"), [
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                          "original_max_position_embeddings": 64}}, "rope_scaling"),
    ({"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}},
     "quantization_config"),
])
def test_the_engine_refuses_what_only_the_simulator_prices(fields: dict, field: str) -> None:
    from tltreal.model.transformer import Transformer

    cfg = ModelConfig.from_dict({**BASE, "model_type": "qwen3", "head_dim": 8, **fields})
    with pytest.raises(InputError, match=f"field '{field}': the native engine") as err:
        Transformer(cfg)
    assert "Qwen3" in str(err.value)


def test_tlt_real_generate_refuses_an_moe_config_in_one_line() -> None:
    from conftest import invoke_cli

    res = invoke_cli("real", "generate", "--config", str(MOE_FIXTURES / "Qwen3-30B-A3B" / "config.json"),
                     "--max-tokens", "2")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "Qwen3-MoE" in res.stderr and "config.json" in res.stderr

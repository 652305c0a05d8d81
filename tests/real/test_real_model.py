"""The target model: config parsing, KV-cache consistency, Qwen2 biases, safetensors round trip."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from conftest import hang_seconds  # noqa: E402
from tltcore.errors import InputError  # noqa: E402
from tltcore.model_config import ModelConfig  # noqa: E402
from tltreal.model.transformer import causal_mask  # noqa: E402
from tltreal.model.weights import load_model, random_model, save_model  # noqa: E402
from tltreal.spec_decode.proposers import EagleDrafter, random_drafter  # noqa: E402

#: 2 layers, 2 query heads on 1 KV head: the safetensors round trip (and its 1-layer twin) and the drafter.
TWO_LAYERS = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1)

HF_QWEN2 = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 96, "hidden_size": 32,
            "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True}


def full_forward(model, tokens):
    b, t = tokens.shape
    cache = model.new_cache(b, t + 4)
    return model(tokens, torch.arange(t).expand(b, t), cache, torch.arange(b), torch.zeros(b, dtype=torch.long),
                 causal_mask(b, t))


def test_config_from_hf_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(HF_QWEN2))
    cfg = ModelConfig.from_json(path)
    assert cfg.qkv_bias and not cfg.o_bias and cfg.tie_word_embeddings
    assert cfg.head_dim == 8 and cfg.num_key_value_heads == 2
    assert ModelConfig.from_dict(cfg.to_hf_dict()) == cfg


@pytest.mark.parametrize(("patch", "field"), [
    ({"hidden_size": "big"}, "hidden_size"), ({"num_key_value_heads": 3}, "num_key_value_heads"),
    ({"model_type": "gpt2"}, "model_type"), ({"num_hidden_layers": None}, "num_hidden_layers"),
])
def test_config_errors_name_the_field(tmp_path, patch, field):
    path = tmp_path / "config.json"
    raw = {**HF_QWEN2, **patch}
    if patch.get("num_hidden_layers", 1) is None:
        del raw["num_hidden_layers"]
    path.write_text(json.dumps(raw))
    with pytest.raises(InputError, match=field) as err:
        ModelConfig.from_json(path)
    assert str(path) in str(err.value)


def test_config_missing_file_and_bad_json(tmp_path):
    with pytest.raises(InputError, match="not found"):
        ModelConfig.from_json(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(InputError, match="JSON"):
        ModelConfig.from_json(tmp_path / "bad.json")


def test_incremental_decode_matches_full_forward():
    """Prefill + one-token decode steps through the cache give the same logits as one causal pass,
    in different slots and with requests of different lengths in one batch."""
    cfg = ModelConfig.from_dict(HF_QWEN2)
    model = random_model(cfg, seed=3, dtype=torch.float64, std=0.2)
    tokens = torch.randint(0, cfg.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
    ref_logits, ref_hidden = full_forward(model, tokens)
    cache = model.new_cache(3, 16)
    slots = torch.tensor([2, 0])
    lens = torch.tensor([4, 6])
    from tltreal.model.transformer import padded_causal_mask
    logits, _ = model(tokens[:, :6], torch.arange(6).expand(2, 6), cache, slots, torch.zeros(2, dtype=torch.long),
                      padded_causal_mask(lens, 6))
    assert torch.allclose(logits[0, :4], ref_logits[0, :4], atol=1e-12)
    assert torch.allclose(logits[1, :6], ref_logits[1, :6], atol=1e-12)
    for _ in range(3):
        step = tokens[torch.arange(2), lens][:, None]
        lg, hid = model(step, lens[:, None], cache, slots, lens, torch.ones(2, 1, 1, dtype=torch.bool))
        for b in range(2):
            assert torch.allclose(lg[b, 0], ref_logits[b, lens[b]], atol=1e-12)
            assert torch.allclose(hid[b, 0], ref_hidden[b, lens[b]], atol=1e-12)
        lens = lens + 1


def test_qwen2_biases_and_tied_head_are_used():
    cfg = ModelConfig.from_dict(HF_QWEN2)
    model = random_model(cfg, seed=0, dtype=torch.float64, std=0.2)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    tokens = torch.randint(0, cfg.vocab_size, (1, 5), generator=torch.Generator().manual_seed(1))
    before, _ = full_forward(model, tokens)
    with torch.no_grad():
        model.model.layers[0].self_attn.k_proj.bias.add_(0.5)
    after, _ = full_forward(model, tokens)
    assert not torch.allclose(before, after)


def test_safetensors_round_trip(tmp_path):
    cfg = replace(TWO_LAYERS, num_hidden_layers=1)
    model = random_model(cfg, seed=5, dtype=torch.float32)
    save_model(model, tmp_path / "model.safetensors")
    loaded = load_model(cfg, tmp_path)
    tokens = torch.randint(0, 64, (1, 7), generator=torch.Generator().manual_seed(2))
    assert torch.equal(full_forward(model, tokens)[0], full_forward(loaded, tokens)[0])
    with pytest.raises(InputError, match="do not match"):  # the same shape with a second layer
        load_model(TWO_LAYERS, tmp_path / "model.safetensors")


def test_drafter_shares_frozen_embedding_and_head():
    target = random_model(TWO_LAYERS, seed=5)
    drafter = random_drafter(target, seed=1)
    names = set(dict(drafter.named_parameters()))
    assert names and not any("embed" in n or "lm_head" in n for n in names)
    assert "fc.weight" in names and "layers.0.post_attention_layernorm.weight" in names
    assert drafter.fc.weight.shape == (32, 64) and isinstance(drafter, EagleDrafter)


def test_noisy_oracle_is_o_vocab_at_qwen_vocabulary_and_perturbs_as_documented():
    """At Qwen's 151,936-token vocabulary the noisy oracle holds O(vocab) state (a vocab^2 table
    would be 92 GB in float32), and each logit's perturbation has standard deviation ~noise."""
    from tltreal.spec_decode.proposers import OracleDrafter

    cfg = ModelConfig(vocab_size=151_936, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1)
    target = random_model(cfg, seed=0, dtype=torch.float32)
    oracle = OracleDrafter(target, noise=0.5, seed=3)
    state = oracle._a.nbytes + oracle._b.nbytes
    assert state < 50e6
    perturb = oracle._a[torch.arange(64)] @ oracle._b
    assert perturb.shape == (64, 151_936)
    assert 0.45 < float(perturb.std()) < 0.55  # over tokens; one token's row scale varies (rank 16)
    assert not torch.equal(perturb[0], perturb[1])  # per input token, fixed by the seed
    again = OracleDrafter(target, noise=0.5, seed=3)
    assert torch.equal(again._a[torch.arange(64)] @ again._b, perturb)


def test_oracle_generation_at_qwen_vocabulary_stays_within_2_gb(tmp_path):
    """`--drafter oracle` end to end at vocab 151,936 (a tiny body, the real vocabulary): the whole
    process's peak RSS, torch included, stays under 2 GB (a vocab^2 noise table alone was 370 GB)."""
    import subprocess
    import sys

    cfg = ModelConfig(vocab_size=151_936, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1)
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_hf_dict()))
    code = (
        "import sys\n"
        "from tltreal.engine.generate import GenerateSettings, generate\n"
        "from tltcore.model_config import ModelConfig\n"
        "cfg = ModelConfig.from_json(sys.argv[1])\n"
        "r = generate(cfg, GenerateSettings(prompts=2, max_tokens=8, prompt_len=8, policy='static:4_2_6',\n"
        "                                   drafter='oracle'))\n"
        "assert r.generated_tokens == 16 and (r.decode_events['depth'] > 0).any()\n"
        "print(next(int(line.split()[1]) for line in open('/proc/self/status') if line.startswith('VmHWM:')))\n")
    # The peak is VmHWM, this process's own high-water mark: ru_maxrss would also count the pytest
    # worker it was forked from (Linux keeps the larger of the two across exec), which after a vLLM
    # test holds about 2 GB itself.
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "config.json")], capture_output=True, text=True,
                          timeout=hang_seconds(60))
    assert proc.returncode == 0, proc.stderr
    peak_gb = int(proc.stdout.split()[-1]) * 1024 / 1e9
    assert peak_gb < 2.0, peak_gb

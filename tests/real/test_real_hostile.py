"""Hostile input to `tlt real generate`: absurd numbers, broken files, oversized trees and memory.

Each case ends as bad input ends everywhere in tlt: exit 2, one ``tlt: error:`` line naming the
option or file (and field), no traceback, nothing written, and -- for the sizes that used to
allocate hundreds of GB or run for a minute -- refused before any model is built.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("torch")

from conftest import invoke_cli
from tltcore.model_config import ModelConfig

CFG = ModelConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, model_type="qwen2", qkv_bias=True,
                  max_position_embeddings=512)


def _cfg(tmp: Path, **changes: object) -> str:
    raw = {**CFG.to_hf_dict(), **changes}
    path = tmp / "config.json"
    path.write_text(json.dumps(raw))
    return str(path)


def _raw_config(text: bytes) -> Callable[[Path], str]:
    def make(tmp: Path) -> str:
        path = tmp / "config.json"
        path.write_bytes(text)
        return str(path)
    return make


def _config_dir_without_json(tmp: Path) -> str:
    (tmp / "model").mkdir()
    return str(tmp / "model")


def _weights(content: bytes) -> Callable[[Path], list[str]]:
    def make(tmp: Path) -> list[str]:
        (tmp / "w.safetensors").write_bytes(content)
        return ["--weights", str(tmp / "w.safetensors")]
    return make


def _empty_weights_dir(tmp: Path) -> list[str]:
    (tmp / "wdir").mkdir()
    return ["--weights", str(tmp / "wdir")]


# Options appended to a valid small run, and what the error line must contain.
FLAGS: list[tuple[list[str], str]] = [
    (["--temperature", "nan"], "--temperature"),
    (["--temperature", "inf"], "--temperature"),
    (["--temperature", "-0.5"], "--temperature"),
    (["--temperature", "1e9"], "--temperature"),
    (["--top-p", "0"], "--top-p"),
    (["--top-p", "1.5"], "--top-p"),
    (["--top-p", "nan"], "--top-p"),
    (["--top-p", "-1"], "--top-p"),
    (["--prompts", "0"], "--prompts"),
    (["--prompts", "-3"], "--prompts"),
    (["--prompts", "1000000000"], "--prompts"),
    (["--prompts", "1000000", "--prompt-len", "400", "--max-tokens", "100"], "GB"),  # all at once: ~150 GB
    (["--max-tokens", "0"], "--max-tokens"),
    (["--max-tokens", "1000000000"], "--max-tokens"),
    (["--max-tokens", "600"], "max_position_embeddings"),
    (["--prompt-len", "500", "--max-tokens", "20"], "max_position_embeddings"),
    (["--prompt-len", "0"], "--prompt-len"),
    (["--batch", "-1"], "--batch"),
    (["--batch", "10000000"], "--batch"),
    (["--seed", "-1"], "--seed"),
    (["--seed", str(2**64)], "--seed"),
    (["--policy", "static:1000_1000_1000"], "policy"),
    (["--policy", "static:8_4_9999"], "policy"),
    (["--policy", "static:8_200_32"], "policy"),
    (["--policy", "beg-mab:arms=8_4_32,4_2_6000"], "policy"),
    (["--policy", "elastic:0+beg-mab"], "policy"),
    (["--policy", ""], "policy"),
    (["--policy", "static:3_1_3", "--drafter", "none"], "--drafter"),
    (["--policy", "elastic+beg-mab", "--drafter", "none"], "--drafter"),
    (["--drafter", "magic"], "--drafter"),
    (["--dtype", "int8"], "--dtype"),
    (["--out", "x.txt"], "--out"),
]

# Broken files: a function of the temp folder returning the --config path, and the expected fragment.
CONFIGS: list[tuple[str, Callable[[Path], str], str]] = [
    ("missing", lambda t: str(t / "nope.json"), "not found"),
    ("folder-without-config", _config_dir_without_json, "config.json"),
    ("empty", _raw_config(b""), "not valid JSON"),
    ("binary", _raw_config(b"\x00\xff\xfe\x80garbage"), "UTF-8"),
    ("list", _raw_config(b"[1, 2]"), "JSON object"),
    ("truncated", _raw_config(b'{"vocab_size": 12'), "not valid JSON"),
    ("huge-int", _raw_config(b'{"vocab_size": 1' + b"0" * 5000 + b"}"), "not valid JSON"),
    ("vocab-zero", lambda t: _cfg(t, vocab_size=0), "vocab_size"),
    ("vocab-text", lambda t: _cfg(t, vocab_size="128"), "vocab_size"),
    ("vocab-bool", lambda t: _cfg(t, vocab_size=True), "vocab_size"),
    ("heads-not-divisor", lambda t: _cfg(t, num_key_value_heads=3), "num_key_value_heads"),
    ("hidden-not-multiple", lambda t: _cfg(t, hidden_size=33), "hidden_size"),
    ("layers-negative", lambda t: _cfg(t, num_hidden_layers=-2), "num_hidden_layers"),
    ("unknown-type", lambda t: _cfg(t, model_type="mamba"), "model_type"),
    ("missing-field", lambda t: _raw_config(json.dumps({"model_type": "llama"}).encode())(t), "missing"),
    ("absurd-size", lambda t: _cfg(t, hidden_size=1 << 16, intermediate_size=1 << 18, num_attention_heads=1 << 9,
                                   num_key_value_heads=1 << 9), "GB"),  # ~550 GB of weights
    ("beyond-bounds", lambda t: _cfg(t, intermediate_size=1 << 22), "intermediate_size"),
]

WEIGHTS: list[tuple[str, Callable[[Path], list[str]], str]] = [
    ("garbage", _weights(b"this is not a safetensors file at all"), "safetensors"),
    ("empty-file", _weights(b""), "safetensors"),
    ("huge-header-length", _weights((2**62).to_bytes(8, "little") + b"{}"), "safetensors"),
    ("empty-folder", _empty_weights_dir, "safetensors"),
    ("missing", lambda t: ["--weights", str(t / "nope.safetensors")], "safetensors"),
]


def _check(res, expect: str, tmp: Path, before: set[str]) -> None:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert len(lines) == 1 and lines[0].startswith("tlt: error:"), res.stderr
    assert expect in lines[0], lines[0]
    assert "Traceback" not in res.stderr
    assert {p.name for p in tmp.iterdir()} == before  # nothing written


def _base(config: str) -> list[str]:
    return ["real", "generate", "--config", config, "--prompts", "2", "--max-tokens", "4", "--prompt-len", "4"]


@pytest.mark.parametrize("flags,expect", FLAGS, ids=[" ".join(f) for f, _ in FLAGS])
def test_hostile_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str], expect: str) -> None:
    monkeypatch.chdir(tmp_path)
    config = _cfg(tmp_path)
    before = {p.name for p in tmp_path.iterdir()}
    t0 = time.process_time()  # CPU time: a loaded machine stretches wall time, not the work done
    res = invoke_cli(*_base(config), *flags)
    _check(res, expect, tmp_path, before)
    assert time.process_time() - t0 < 20  # refused up front, not after running out of memory


@pytest.mark.parametrize("name,make,expect", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_hostile_configs(tmp_path: Path, name: str, make: Callable[[Path], str], expect: str) -> None:
    config = make(tmp_path)
    before = {p.name for p in tmp_path.iterdir()}
    _check(invoke_cli(*_base(config)), expect, tmp_path, before)


@pytest.mark.parametrize("name,make,expect", WEIGHTS, ids=[c[0] for c in WEIGHTS])
def test_hostile_weights(tmp_path: Path, name: str, make: Callable[[Path], list[str]], expect: str) -> None:
    config = _cfg(tmp_path)
    flags = make(tmp_path)
    before = {p.name for p in tmp_path.iterdir()}
    _check(invoke_cli(*_base(config), *flags), expect, tmp_path, before)


def test_draft_wider_than_the_vocabulary_is_refused(tmp_path: Path) -> None:
    config = _cfg(tmp_path, vocab_size=40)
    before = {p.name for p in tmp_path.iterdir()}
    _check(invoke_cli(*_base(config), "--policy", "static:2_48_48"), "vocabulary", tmp_path, before)


def test_config_folder_with_config_json_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    _cfg(tmp_path / "model")
    res = invoke_cli(*_base(str(tmp_path / "model")))
    assert res.returncode == 0, res.stderr


def test_memory_estimate_matches_the_engines_allocations() -> None:
    """The up-front estimate is pinned to what the engine really allocates, term by term."""
    import torch

    from tltcore.policy.base import Static
    from tltreal.engine.engine import Engine
    from tltreal.engine.engine_config import EngineConfig
    from tltreal.engine.memory_plan import estimate, model_params
    from tltreal.model.weights import random_model
    from tltreal.spec_decode.proposers import random_drafter

    for cfg in (CFG, ModelConfig(vocab_size=96, hidden_size=48, intermediate_size=80, num_hidden_layers=3,
                                 num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True),
                ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, qkv_bias=True, o_bias=True, mlp_bias=True)):
        target = random_model(cfg, seed=0, dtype=torch.float32)
        assert model_params(cfg) == sum(p.numel() for p in target.parameters())
        drafter = random_drafter(target, seed=1)
        ec = EngineConfig(max_batch=3, max_len=40, max_verify=6, max_draft_nodes=6)
        engine = Engine(target, Static(), drafter, ec)
        est = estimate(cfg, dtype_bytes=4, max_batch=3, max_len=40, max_verify=6, max_draft_nodes=6, drafter=True)
        assert est.weights == sum(p.numel() * p.element_size() for p in target.parameters())
        assert est.kv_cache == engine.cache.k.nbytes + engine.cache.v.nbytes
        assert est.hidden == engine.hidden.nbytes
        assert engine.draft_cache is not None
        own = sum(p.numel() * p.element_size() for n, p in drafter.named_parameters() if "lm_head" not in n
                  and "embed" not in n)
        assert est.drafter == own + engine.draft_cache.k.nbytes + engine.draft_cache.v.nbytes


PROMPT_FILES: list[tuple[str, bytes | None, str]] = [
    ("missing", None, "not found"),
    ("empty", b"", "no prompts"),
    ("blank-lines", b"\n\n  \n", "no prompts"),
    ("not-json", b"[1, 2\n", "row 1"),
    ("string", b'"hello"\n', "token ids"),
    ("empty-list", b"[]\n", "token ids"),
    ("out-of-vocab", b"[1, 2, 128]\n", "token ids"),
    ("negative", b"[1, -2]\n", "token ids"),
    ("booleans", b"[true, false]\n", "token ids"),
    ("floats", b"[1.0, 2.0]\n", "token ids"),
    ("second-line-bad", b"[1, 2]\n{\"tokens\": \"x\"}\n", "row 2"),
    ("text-without-tokenizer", b'{"text": "hello"}\n', "--tokenizer"),
    ("too-long-for-context", b"[" + b", ".join([b"1"] * 510) + b"]\n", "max_position_embeddings"),
    ("binary", b"\xff\xfe\x00garbage", "UTF-8"),
]


@pytest.mark.parametrize("name,content,expect", PROMPT_FILES, ids=[c[0] for c in PROMPT_FILES])
def test_hostile_prompt_files(tmp_path: Path, name: str, content: bytes | None, expect: str) -> None:
    config = _cfg(tmp_path)
    path = tmp_path / "prompts.jsonl"
    if content is not None:
        path.write_bytes(content)
    before = {p.name for p in tmp_path.iterdir()}
    res = invoke_cli("real", "generate", "--config", config, "--prompts-file", str(path), "--max-tokens", "4")
    _check(res, expect, tmp_path, before)

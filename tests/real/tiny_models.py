"""The tiny model shapes and the setup that several tests of tests/real share.

The fixtures built from them (a session's one copy of each model) are in ``conftest.py``; what is here
is plain data and functions, for module-level constants, parametrize lists and helpers.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from tltcore.model_config import ModelConfig
from tltreal.model.sampling import target_probs
from tltreal.model.transformer import Transformer, causal_mask

#: The engine tests' Llama: 2 layers, GQA (4 query heads on 2 KV heads), a 256-token vocabulary.
TINY = ModelConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2)
#: :data:`TINY` with a 64-token vocabulary (the n-gram loop model, re-prefill, spot training).
TINY_V64 = replace(TINY, vocab_size=64)
#: The narrowest Llama (hidden 32): training-forward, GRPO and drafter-training tests, by vocabulary.
MICRO = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2)


def random_prompts(n: int, max_len: int, vocab: int, seed: int = 0) -> list[list[int]]:
    """``n`` seeded prompts of uniform random tokens, each of a random length in ``[3, max_len)``."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (int(torch.randint(3, max_len, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]


def two_token_marginals(model: Transformer, prompt: list[int], temperature: float, top_p: float
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """p(x2) and p(x3) under ``model`` alone after ``prompt``, by enumerating all x1 and (x1, x2)."""
    v = model.cfg.vocab_size
    temp = torch.full((1,), temperature, dtype=torch.float64)
    top_p_ = torch.full((1,), top_p, dtype=torch.float64)

    def next_dist(contexts: torch.Tensor) -> torch.Tensor:
        b, t = contexts.shape
        logits, _ = model(contexts, torch.arange(t).expand(b, t), model.new_cache(b, t), torch.arange(b),
                          torch.zeros(b, dtype=torch.long), causal_mask(b, t))
        return target_probs(logits[:, -1], temp.expand(b), top_p_.expand(b))

    first = torch.tensor(prompt)
    p1 = next_dist(first[None])[0]
    ctx2 = torch.cat([first.expand(v, -1), torch.arange(v)[:, None]], 1)
    p2_given_1 = next_dist(ctx2)  # [x1, x2]
    ctx3 = torch.cat([ctx2.repeat_interleave(v, 0), torch.arange(v).repeat(v)[:, None]], 1)
    p3_given_12 = next_dist(ctx3).view(v, v, v)
    joint12 = p1[:, None] * p2_given_1
    return joint12.sum(0), (joint12[..., None] * p3_given_12).sum((0, 1))

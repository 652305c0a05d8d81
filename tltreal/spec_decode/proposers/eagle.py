"""TLT's drafter: one EAGLE-style decoder layer (no input norm) on ``Linear([embed(t) ; h])``.

The target's embedding and LM head are shared and frozen (not registered as the drafter's own
parameters). Random-initialised it is the "random drafter" (a lower bound on acceptance); trained
on the target's hidden states it is TLT's adaptive drafter.
"""

from __future__ import annotations

import torch
from torch import nn

from tltreal.model.kv_cache import KVCache
from tltreal.model.transformer import DecoderLayer, TrainBatch, Transformer, make_attn_batch, rope_tables
from tltreal.model.weights import init_weights


class EagleDrafter(nn.Module):
    """EAGLE-style drafter: ``fc([embed(t) ; h]) -> one decoder layer -> feature -> target LM head``."""

    def __init__(self, target: Transformer) -> None:
        super().__init__()
        cfg = target.cfg
        self.cfg = cfg
        self.fc = nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.layers = nn.ModuleList([DecoderLayer(cfg, input_norm=False)])
        # Shared, frozen: kept out of this module's parameters so checkpoints hold only trainables.
        self.__dict__["_target"] = target

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    def new_cache(self, slots: int, max_len: int) -> KVCache:
        c = self.cfg
        return KVCache.allocate(1, slots, c.num_key_value_heads, max_len, c.head_dim, self.dtype,
                                self.fc.weight.device)

    @torch.no_grad()
    def draft_forward(self, tokens: torch.Tensor, feats: torch.Tensor, positions: torch.Tensor,
                      cache: KVCache, slots: torch.Tensor, cache_lens: torch.Tensor,
                      new_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        target = self.__dict__["_target"]
        ab = make_attn_batch(slots, cache_lens, new_mask, positions, self.cfg, self.dtype)
        x = self.fc(torch.cat([target.model.embed_tokens(tokens), feats], -1))
        x = self.layers[0](x, cache, 0, ab)
        return target.lm_head(x), x

    def forward_train(self, tokens: torch.Tensor, feats: torch.Tensor, positions: torch.Tensor,
                      mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Gradient-enabled, cache-free :meth:`draft_forward` over pairs ``(tokens [B, T], feats
        [B, T, H])`` at ``positions`` ``[B, T]``; ``mask`` ``[B, T, T]`` says which pairs each pair
        sees (causal if None; block-diagonal causal for packed windows). Returns ``(logits [B, T, V],
        feats_out [B, T, H])``.

        Why a separate path: ``draft_forward`` runs under ``no_grad`` and writes a KV cache, which
        training neither needs nor wants. The arithmetic is the same (tests check equality with
        ``draft_forward`` in float64), so what is trained is what the engine runs. The target's
        embedding and LM head are used through detached weights: they stay frozen and receive no
        gradient (no wasted backward through the vocabulary-sized matrices' weights)."""
        target = self.__dict__["_target"]
        if mask is None:
            t = tokens.shape[1]
            mask = torch.ones(t, t, dtype=torch.bool, device=tokens.device).tril().expand(tokens.shape[0], t, t)
        embed = nn.functional.embedding(tokens, target.model.embed_tokens.weight.detach())
        x = self.fc(torch.cat([embed.to(feats.dtype), feats], -1))
        cos, sin = rope_tables(positions, self.cfg, x.dtype)
        x = self.layers[0].forward_train(x, TrainBatch(mask[:, None], cos, sin, {}))  # no sliding window
        return nn.functional.linear(x, target.lm_head.weight.detach()), x



def random_drafter(target: Transformer, *, seed: int = 0, std: float = 0.02) -> EagleDrafter:
    """An untrained EAGLE drafter with seeded random weights (low acceptance: a lower bound)."""
    drafter = EagleDrafter(target)
    init_weights(drafter, seed, std)
    return drafter.to(target.dtype).eval()



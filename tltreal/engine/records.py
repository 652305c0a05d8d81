"""The engine's opt-in records of every finished request (``EngineConfig.record_logprobs`` /
``record_hidden``; off costs nothing): its output tokens' log-probs and the target's last hidden
state at every position, taken from what decoding computed anyway (the verified logits, the
hidden-state slab the drafter already uses), so they are the same with SD on or off.

A mixin of :class:`~tltreal.engine.engine.Engine`: the methods use its config, target, cache,
hidden-state slab and clock.
"""

from __future__ import annotations

import numpy as np
import torch

from tltreal.engine.requests import FinishedRequest, Request


class Records:
    """Per-request records of :class:`~tltreal.engine.engine.Engine` (module docstring)."""

    def _finished(self, r: Request) -> FinishedRequest:
        logs = self.cfg.record_logprobs
        return FinishedRequest(r.rid, r.prompt, r.output,
                               torch.tensor(r.logprobs, dtype=torch.float64) if logs else None,
                               torch.tensor(r.raw_logprobs, dtype=torch.float64) if logs else None,
                               r.hidden)

    def _record_logprobs(self, reqs: list[Request], logits: torch.Tensor, probs: torch.Tensor,
                         tokens: torch.Tensor, counts: list[int]) -> None:
        """Append the log-probs of the first ``counts[b]`` of ``tokens [B, T]`` under ``logits`` /
        ``probs`` ``[B, T, V]`` (the rows each token was sampled from) to each request's record."""
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        idx = tokens[..., None]
        raw = logits.log_softmax(-1).gather(-1, idx)[..., 0].tolist()
        used = probs.gather(-1, idx)[..., 0].log().tolist()
        for r, n, a, b in zip(reqs, counts, raw, used, strict=True):
            r.raw_logprobs.extend(a[:n])
            r.logprobs.extend(b[:n])

    def _record_hidden(self, finished: list[Request]) -> None:
        """Copy each finishing request's hidden states out of the slab before its slot is reused.
        The last emitted token has not been through the target yet (decoding never needs it): one
        1-token forward of those tokens first, so every position has its ``h``."""
        last = [r for r in finished if r.cache_len < len(r.tokens)]
        if last:
            ctx = np.array([len(r.tokens) for r in last], dtype=np.int64)
            self._charge(lambda c: c.decode_time(ctx))
            slots, lens, toks = self._tensor([[r.slot, r.cache_len, r.tokens[-1]] for r in last]).unbind(1)
            ones = torch.ones(len(last), 1, 1, dtype=torch.bool, device=lens.device)
            _, hidden = self.target(toks[:, None], lens[:, None], self.cache, slots, lens, ones)
            self.hidden[slots, lens] = hidden[:, 0]
        with torch.inference_mode(False):  # owned, ordinary tensors: usable as training inputs
            for r in finished:
                r.hidden = self.hidden[r.slot, : len(r.tokens)].clone()

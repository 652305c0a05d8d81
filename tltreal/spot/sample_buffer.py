"""Rollout samples for drafter training and the store they are drawn from (TLT's DataBuffer; DESIGN §1).

**What a sample is.** A finished response: its token ids ``t_0 .. t_{n-1}`` (prompt + response) and
the frozen target's last hidden states ``h_0 .. h_{n-1}`` (after the final norm, what the LM head
and the drafter consume). The target's distribution at ``j`` is ``softmax(lm_head(h_j))``: exactly the
target's logits, because :meth:`Transformer.forward` computes them that way, so the buffer keeps
hidden states only (``n * H`` numbers instead of ``n * V``). :func:`target_sample` computes them
with the ordinary cached forward, under ``no_grad``, over a fresh cache.

**Alignment (the same pairs the engine feeds).** :mod:`tltreal.spec_decode.proposers.base`: drafter
pair ``j`` is ``(t_j, h_{j-1})`` with ``h_{-1} = 0``, at position ``j``; its output feature predicts
``h_j`` and, through the LM head, the target's distribution at ``j`` (the token after ``t_j``). The
engine's ``_pending`` (:mod:`tltreal.engine.sd_step`) builds exactly these pairs for ``catch_up``
and the draft root, so a window of pairs ``[a, b)`` is ``tokens t[a:b]``, ``feats h[a-1:b-1]``
(zero for ``j = 0``), ``positions a..b-1``, targets ``h[a:b]``.

**SampleBuffer.** Finished responses of the last ``keep_steps`` (2) RL steps. With TLT's one-step
offset, a step's windows are drawn half from the current step and half from the previous one (this
step's finished responses alone are biased short: the long tail has not finished yet), the same
vocabulary as the simulator's :class:`tltsim.spot.coverage.DataCoverage` (both model TLT's
DataBuffer). A response is cut into aligned ``window_tokens`` windows (the simulator counts windows
the same way).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from tltreal.model.transformer import Transformer, causal_mask


@dataclass(frozen=True)
class Sample:
    """One finished response: ``tokens`` ``[n]`` (prompt + response) and the target's last hidden
    states ``hidden`` ``[n, H]`` at each of them; ``step`` is the RL step that generated it;
    ``prompt_len`` where the response starts (0: unknown, every pair counts), so a response-only
    loss can skip the prompt's pairs (random numbers no drafter can predict)."""

    tokens: torch.Tensor
    hidden: torch.Tensor
    step: int = 0
    prompt_len: int = 0

    def __post_init__(self) -> None:
        if self.tokens.ndim != 1 or self.hidden.ndim != 2 or len(self.tokens) != len(self.hidden):
            raise ValueError(f"tokens [n] and hidden [n, H] must align, got {tuple(self.tokens.shape)} and "
                             f"{tuple(self.hidden.shape)}")
        if len(self.tokens) == 0:
            raise ValueError("empty sample")
        if not 0 <= self.prompt_len <= len(self.tokens):
            raise ValueError(f"prompt_len {self.prompt_len} outside 0..{len(self.tokens)}")

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class Window:
    """Pairs ``[start, end)`` of ``sample`` (module docstring: pair j = (t_j, h_{j-1}))."""

    sample: Sample
    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start


@torch.no_grad()
def target_hidden(target: Transformer, tokens: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """The target's last hidden states ``[n, H]`` over ``tokens``: one prefill through the ordinary
    cached forward on a fresh single-slot cache (the cache is then dropped)."""
    ids = torch.as_tensor(tokens, dtype=torch.long, device=target.model.embed_tokens.weight.device)
    n = len(ids)
    cache = target.new_cache(1, n)
    zero = torch.zeros(1, dtype=torch.long, device=ids.device)
    _, hidden = target(ids[None], torch.arange(n, device=ids.device)[None], cache, zero, zero,
                       causal_mask(1, n, ids.device))
    return hidden[0]


def target_sample(target: Transformer, tokens: Sequence[int] | torch.Tensor, step: int = 0) -> Sample:
    """A :class:`Sample` of ``tokens`` with the target's hidden states."""
    ids = torch.as_tensor(tokens, dtype=torch.long).cpu()
    return Sample(ids, target_hidden(target, ids).cpu(), step)


class SampleBuffer:
    """Finished responses of the last ``keep_steps`` RL steps, drawn with TLT's one-step offset
    (module docstring). Call :meth:`start_step` at each RL step's start, :meth:`add` as responses
    finish."""

    def __init__(self, *, keep_steps: int = 2, window_tokens: int = 512, one_step_offset: bool = True) -> None:
        if keep_steps < 1 or window_tokens < 1:
            raise ValueError("keep_steps and window_tokens must be >= 1")
        self.keep_steps, self.window_tokens, self.one_step_offset = keep_steps, window_tokens, one_step_offset
        self.step = 0
        self._samples: dict[int, list[Sample]] = {}

    def start_step(self, step: int) -> None:
        """A new RL step begins: drop responses older than the last ``keep_steps`` steps."""
        self.step = step
        for old in [s for s in self._samples if s <= step - self.keep_steps]:
            del self._samples[old]

    def add(self, sample: Sample) -> None:
        """Add a finished response (its ``step`` must be one the buffer keeps)."""
        if not self.step - self.keep_steps < sample.step <= self.step:
            raise ValueError(f"sample of step {sample.step} outside the buffer's steps "
                             f"({self.step - self.keep_steps + 1}..{self.step})")
        # Owned copies: an engine's hidden states are views of its slab, which it reuses for the next request.
        own = Sample(sample.tokens.detach().clone(), sample.hidden.detach().clone(), sample.step,
                     sample.prompt_len)
        self._samples.setdefault(sample.step, []).append(own)

    def samples(self, step: int) -> list[Sample]:
        return list(self._samples.get(step, []))

    def windows(self, step: int) -> list[Window]:
        """Step ``step``'s responses cut into aligned ``window_tokens`` windows."""
        w = self.window_tokens
        return [Window(s, a, min(a + w, len(s))) for s in self._samples.get(step, []) for a in range(0, len(s), w)]

    def windows_available(self) -> int:
        """Windows a training step can draw from now (0: training cannot start)."""
        return sum(len(p) for p in self._pools())

    def _pools(self) -> tuple[list[Window], list[Window]]:
        current = self.windows(self.step)
        previous = self.windows(self.step - 1) if self.one_step_offset else []
        return current, previous

    def draw(self, n: int, rng: np.random.Generator) -> list[Window]:
        """Up to ``n`` distinct windows: half (rounded down) from the previous step when the offset
        is on and both steps have data, the rest from the current step; a short pool's shortfall
        is filled from the other one."""
        current, previous = self._pools()
        n_prev = n // 2 if current and previous else (n if previous else 0)
        n_prev = min(n_prev, len(previous))
        n_cur = min(n - n_prev, len(current))
        n_prev = min(n - n_cur, len(previous))
        picked = [previous[i] for i in sorted(rng.choice(len(previous), n_prev, replace=False))] if n_prev else []
        picked += [current[i] for i in sorted(rng.choice(len(current), n_cur, replace=False))] if n_cur else []
        return picked


__all__ = ["Sample", "SampleBuffer", "Window", "target_hidden", "target_sample"]

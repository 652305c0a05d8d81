"""What kind of drafter proposes the draft tokens, and what that means for cost and acceptance.

Three kinds (``drafter.kind``):

* ``eagle`` — TLT's drafter: one trainable decoder layer on the target's hidden states, sharing its
  embedding and LM head (:meth:`~tltcore.model_shape.ModelShape.drafter`). Cost: the roofline's
  default drafter. Acceptance: the scenario's acceptance preset scaled by the drafter's quality,
  which moves with training and policy drift (:mod:`tltcore.drafter.dynamics`).
* ``draft-model`` — a separate small LM (``drafter.draft_model``, e.g. ``Qwen2.5-0.5B``), every draft
  step a forward of all its layers and its own LM head. The paper measures its one-layer drafter
  drafting 2.4x faster than a 0.5B draft LM on Qwen2.5-32B; this kind lets a user check that
  trade-off. Acceptance: the scenario's preset, like ``eagle``.
* ``ngram`` — TLT-Base's model-free drafter: n-gram retrieval over the prompt and the sibling
  responses of the same group. No GPU cost to draft (a CPU lookup, ``drafter.ngram_lookup_s``), no
  drafter KV, nothing to train; chain drafts only. Acceptance is a constant-alpha chain,
  ``drafter.ngram_alpha``. Its default, 0.5 (mean accept length 1.9 at 4 draft tokens), is our
  assumption, not a published number: model-free drafters in RL report speedups of up to ~2x when
  responses to the same prompt repeat across epochs or siblings (SpecRL in veRL, verl-project/verl
  PR #4535; suffix decoding), far less on fresh reasoning; set it from a measured run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tltcore.acceptance import ChainAcceptance
from tltcore.cost.protocol import CostModelBase
from tltcore.cost.roofline import RooflineCostModel
from tltcore.errors import InputError
from tltcore.policy.base import SDConfig

DRAFTER_KINDS = ("eagle", "draft-model", "ngram")


@dataclass(frozen=True)
class ModelFreeDraftCost(CostModelBase):
    """A roofline cost model whose drafts cost no GPU time: an SD iteration is one target verify
    forward, the SD bookkeeping and a CPU lookup. The drafter keeps no KV, so catching it up is
    free. Everything without SD is the base model's. Its batched forms
    (:class:`~tltcore.cost.protocol.PagedKVTimes`) are the base's, the SD ones over the base's
    batched verify forward, wherever the base has them."""

    base: RooflineCostModel
    lookup_s: float = 5e-5

    def prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float:
        return self.base.prefill_time(new_tokens, cached_tokens)

    def decode_time(self, context_lens: np.ndarray) -> float:
        return self.base.decode_time(context_lens)

    def decode_span_time(self, context_lens: np.ndarray, n_iters: int) -> float:
        return self.base.decode_span_time(context_lens, n_iters)

    def drafter_prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float:
        return 0.0

    def sd_time(self, context_lens: np.ndarray, config: SDConfig) -> float:
        if not config.enabled:
            return self.base.decode_time(context_lens)
        if len(context_lens) == 0:
            return 0.0
        b = self.base
        return (b.verify_time(context_lens, config.verify_tokens) + b.sd_overhead_s + b.iteration_overhead_s
                + self.lookup_s)

    # ---- batched forms (PagedKVTimes) -------------------------------------------------------------
    def paged_kv_times(self) -> ModelFreeDraftCost | None:
        """This model where its base roofline gives batched forms, else None."""
        return self if self.base.paged_kv_times() is not None else None

    @property
    def kv_block_size(self) -> int:
        return self.base.kv_block_size

    @property
    def memory_bound_decode(self) -> bool:
        return self.base.memory_bound_decode

    def sd_times_from_sums(self, paged: np.ndarray, ctx_sum: np.ndarray, batch: np.ndarray,
                           config: SDConfig) -> np.ndarray:
        """:meth:`sd_time` of iterations given by their paged KV sums, context sums and batch sizes: the
        base's batched verify forward, then the same three additions in :meth:`sd_time`'s order."""
        b = self.base
        out = b.verify_times_from_sums(paged, ctx_sum, batch, config.verify_tokens)
        out += b.sd_overhead_s
        out += b.iteration_overhead_s
        out += self.lookup_s
        return out

    def sd_rows_times(self, ctx_rows: np.ndarray, config: SDConfig, ctx_sum: np.ndarray | None = None
                      ) -> list[float]:
        """:meth:`sd_time` of every row (iterations x requests) through :meth:`sd_times_from_sums`, or
        one call per row where the base has no batched forms."""
        if self.base.paged_kv_times() is None:
            return super().sd_rows_times(ctx_rows, config, ctx_sum)
        k, b = ctx_rows.shape
        bs = self.base.kv_block_size
        paged = np.add.reduce(-(-ctx_rows // bs), axis=1) * bs
        if ctx_sum is None:
            ctx_sum = np.add.reduce(ctx_rows, axis=1)
        return self.sd_times_from_sums(paged, ctx_sum, np.full(k, b, dtype=np.int64), config).tolist()

    def prefill_passes_time(self, new: np.ndarray, cached: np.ndarray, budget: int, target: bool,
                            drafter: bool) -> tuple[float, int]:
        """The base's chunked prefill; the drafter's passes are free (they would add 0.0 each, which
        leaves a non-negative total as it is)."""
        return self.base.prefill_passes_time(new, cached, budget, target, False)

    def decode_span_time_of(self, ctx: np.ndarray, n: int) -> float:
        return self.base.decode_span_time_of(ctx, n)

    def decode_spans_time(self, n: np.ndarray, b: np.ndarray, ctx_sum: np.ndarray, hist: np.ndarray,
                          start: np.ndarray) -> np.ndarray:
        return self.base.decode_spans_time(n, b, ctx_sum, hist, start)


def ngram_acceptance(alpha: float) -> ChainAcceptance:
    """The n-gram drafter's constant-alpha chain acceptance."""
    if not 0 <= alpha <= 1:
        raise InputError(f"must be in [0, 1], got {alpha}", field="drafter.ngram_alpha")
    return ChainAcceptance((alpha,))


def drafter_acceptance(kind: str, ngram_alpha: float, model_acceptance):
    """The acceptance a drafter of ``kind`` is priced with, the one place that decides it: the
    model-free ``ngram`` drafter its constant-alpha chain (:func:`ngram_acceptance`), a model-based
    drafter (``eagle``, ``draft-model``) the scenario's acceptance model ``model_acceptance`` (the
    paper-fitted EAGLE tree by default). Pricing an n-gram drafter with the EAGLE tree's acceptance
    at no draft cost made it look better than EAGLE."""
    if kind not in DRAFTER_KINDS:
        raise InputError(f"must be one of {', '.join(DRAFTER_KINDS)}, got '{kind}'", field="drafter.kind")
    return ngram_acceptance(ngram_alpha) if kind == "ngram" else model_acceptance

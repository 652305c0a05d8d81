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
from tltcore.cost.protocol import PerConfigSDTimes
from tltcore.cost.roofline import RooflineCostModel
from tltcore.errors import InputError
from tltcore.policy.base import SDConfig

DRAFTER_KINDS = ("eagle", "draft-model", "ngram")


@dataclass(frozen=True)
class ModelFreeDraftCost(PerConfigSDTimes):
    """A roofline cost model whose drafts cost no GPU time: an SD iteration is one target verify
    forward, the SD bookkeeping and a CPU lookup. The drafter keeps no KV, so catching it up is
    free. Everything without SD is the base model's."""

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

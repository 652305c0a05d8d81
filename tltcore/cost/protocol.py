"""The cost-model contract: how long one engine iteration takes on one rollout worker.

All times are seconds on one rollout worker (a tensor-parallel group). Context lengths are *per
request* numpy int arrays, never a batch mean: with long tails the mean mis-states KV traffic and
attention work. ``context_lens[i]`` is request i's prompt + generated tokens (the engines'
``BatchView.context_lens``).

One contract for every reader: the simulator, the real engine's modelled clock
(:mod:`tltreal.engine.engine_config`) and cost-aware (:mod:`tltcore.policy.cost_aware`) all take a
:class:`CostModel`. Its batched forms (:meth:`CostModel.sd_times`, :meth:`CostModel.sd_rows_times`) and
its two optional capabilities (:meth:`CostModel.longest_context_times`, :meth:`CostModel.paged_kv_times`)
have defaults in :class:`CostModelBase`, which every cost model inherits: a :class:`~typing.Protocol`
states what a reader may call, but cannot lend behaviour to a class that only matches it
structurally, so the defaults live in a nominal base class (the loops over the scalar forms, and
"no capability").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:  # annotations only: importing tltcore.policy runs its package, whose cost-aware reads this
    from tltcore.policy.base import SDConfig


class LongestContextTimes(Protocol):
    """Times that read a batch's contexts only through its size and its longest context (a measured
    table under the ``max`` rule: the native slab engine pads attention to the longest). A prefill
    pass holds only the requests with tokens to prefill; ``longest`` is the most any of them has and
    ``tokens`` their sum (the native engine's prefill runs all but attention on the real tokens)."""

    def decode_time_at(self, batch: int, longest: int) -> float: ...

    def sd_times_at(self, batch: int, longest: int, configs: Sequence[SDConfig]) -> list[float]: ...

    def prefill_time_at(self, batch: int, longest: int, tokens: int) -> float: ...

    def drafter_prefill_time_at(self, batch: int, longest: int) -> float: ...


class PagedKVTimes(Protocol):
    """Batched times of a model whose iterations read the contexts only through paged-KV sums: per
    request ``ceil(ctx / kv_block_size)`` blocks and ``ctx`` positions (the roofline). Because those
    are exact integer reductions, whole blocks of SD iterations, runs of chunked prefill passes and
    many plain spans are priced in one vectorised pass each, every float the one the scalar forms
    give (the simulator's fast paths rely on that, ``tests/sim/test_speed_span_cost.py`` pins it).
    Inputs are validated int64 arrays; nothing here checks them again."""

    @property
    def kv_block_size(self) -> int: ...

    @property
    def memory_bound_decode(self) -> bool:
        """Whether plain decoding reads more paged KV than attention positions at every step, the
        case :meth:`decode_span_time_of` and :meth:`decode_spans_time` price in closed form (False:
        the caller prices plain spans through ``decode_span_time``)."""
        ...

    def sd_rows_times(self, ctx_rows: np.ndarray, config: SDConfig, ctx_sum: np.ndarray | None = None
                      ) -> list[float]: ...

    def sd_times_from_sums(self, paged: np.ndarray, ctx_sum: np.ndarray, batch: np.ndarray,
                           config: SDConfig) -> np.ndarray: ...

    def sd_many_from_sums(self, paged: np.ndarray, ctx_sum: np.ndarray, batch: np.ndarray,
                          configs: tuple[SDConfig, ...]) -> np.ndarray:
        """``sd_times_from_sums`` of every config (all drafting), as one ``(iterations, configs)`` array."""
        ...

    def decode_times_from_sums(self, paged: np.ndarray, ctx_sum: np.ndarray, batch: np.ndarray) -> list[float]: ...

    def prefill_passes_time(self, new: np.ndarray, cached: np.ndarray, budget: int, target: bool,
                            drafter: bool) -> tuple[float, int]: ...

    def decode_span_time_of(self, ctx: np.ndarray, n: int) -> float: ...

    def decode_spans_time(self, n: np.ndarray, b: np.ndarray, ctx_sum: np.ndarray, hist: np.ndarray,
                          start: np.ndarray) -> np.ndarray: ...


@runtime_checkable
class CostModel(Protocol):
    """Iteration costs for one rollout instance."""

    def prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float:
        """One prefill pass: request i processes ``new_tokens[i]`` tokens on top of
        ``cached_tokens[i]`` already in its KV cache."""
        ...

    def decode_time(self, context_lens: np.ndarray) -> float:
        """One plain decode iteration (one token per request) at these context lengths."""
        ...

    def decode_span_time(self, context_lens: np.ndarray, n_iters: int) -> float:
        """Sum of ``n_iters`` consecutive plain decode iterations starting at ``context_lens``,
        every context growing by one token per iteration. Lets the simulator advance in closed
        form between events."""
        ...

    def sd_time(self, context_lens: np.ndarray, config: SDConfig) -> float:
        """One speculative iteration: ``config.depth`` drafter steps plus one target verify
        forward over ``config.verify_tokens`` (+1 root) tokens per request."""
        ...

    def drafter_prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float:
        """One drafter-only prefill pass (no LM head): what bringing a drafter up to date over
        already generated tokens costs (elastic switch, drafter catch-up)."""
        ...

    def sd_times(self, context_lens: np.ndarray, configs: Sequence[SDConfig]) -> list[float]:
        """``sd_time`` of every config at the same contexts, each bit-identical to its own call. A
        policy pricing a dozen draft shapes per decision (cost-aware) pays the contexts' checks and
        reductions once instead of once per shape."""
        ...

    def sd_rows_times(self, ctx_rows: np.ndarray, config: SDConfig, ctx_sum: np.ndarray | None = None
                      ) -> list[float]:
        """``sd_time`` of every row of ``ctx_rows`` (iterations x requests, int64, at least one
        request), each bit-identical to its own call (``ctx_sum``: the row sums, when the caller has
        them)."""
        ...

    def iteration_times(self, context_lens: np.ndarray, configs: Sequence[SDConfig]) -> tuple[list[float], float]:
        """``(sd_times(context_lens, configs), decode_time(context_lens))``, each float its own call's: what
        a policy weighing speculation against plain decoding prices at every decision (cost-aware), the
        contexts checked and reduced once."""
        ...

    def longest_context_times(self) -> LongestContextTimes | None:
        """These times read from a batch's size and longest context alone, or None where they read
        every context."""
        ...

    def paged_kv_times(self) -> PagedKVTimes | None:
        """The batched forms over paged-KV sums, or None where the model's times are not of that form
        (the simulator then prices call by call)."""
        ...


class CostModelBase:
    """The defaults every cost model inherits: the batched forms as the scalar form called per item
    (the definition every faster version is pinned to, and all a model needs when its items share
    nothing worth computing once), and neither optional capability."""

    def sd_time(self, context_lens: np.ndarray, config: SDConfig) -> float:
        raise NotImplementedError

    def sd_times(self, context_lens: np.ndarray, configs: Sequence[SDConfig]) -> list[float]:
        return [float(self.sd_time(context_lens, c)) for c in configs]

    def sd_rows_times(self, ctx_rows: np.ndarray, config: SDConfig, ctx_sum: np.ndarray | None = None
                      ) -> list[float]:
        return [float(self.sd_time(row, config)) for row in ctx_rows]

    def decode_time(self, context_lens: np.ndarray) -> float:
        raise NotImplementedError

    def iteration_times(self, context_lens: np.ndarray, configs: Sequence[SDConfig]) -> tuple[list[float], float]:
        return self.sd_times(context_lens, configs), float(self.decode_time(context_lens))

    def longest_context_times(self) -> LongestContextTimes | None:
        return None

    def paged_kv_times(self) -> PagedKVTimes | None:
        return None


#: The former name of :class:`CostModelBase` (when it held only the ``sd_times`` loop).
PerConfigSDTimes = CostModelBase

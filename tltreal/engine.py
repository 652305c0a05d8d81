"""The native engine: continuous batching, prefill/decode, policy-driven tree speculative decoding.

Loop. Waiting requests are admitted into free cache slots and prefilled together (one forward, a
``prefill`` event); then each decode iteration asks the policy for an :class:`SDConfig` for the
current running batch, runs it, reports an :class:`Outcome` and logs one ``decode`` event in the
simulator's event-log schema (``tltsim.events``). Finished requests leave and free their slot.

A plain iteration feeds every request's last token. An SD iteration:
1. brings the drafter up to date (pending pairs of token + target hidden state, see
   :mod:`tltreal.drafter`); requests that lag by more than ``catch_up_limit`` pairs, or all live
   requests when an elastic policy has ``just_switched`` SD on, are caught up first in a separate
   ``reprefill`` forward. The engine keeps every request's target hidden states, so switching SD on
   costs a drafter prefill over each live context, never a target re-prefill;
2. expands the draft tree (``depth``, ``topk``, ``verify_tokens``);
3. runs one target forward over root + tree with the tree attention mask;
4. accepts losslessly (:mod:`tltreal.verify` / :mod:`tltreal.kernels`), emits accepted tokens plus
   the bonus token;
5. compacts the target KV cache and the hidden-state slab to the accepted path.

Numerical policy: see :mod:`tltreal.model`. Run in float64 for bit-identical greedy output across
batch compositions and SD on/off; float32 (the benchmark default) is equal only up to rounding.
Randomness: each request has its own ``torch.Generator`` (seeded from its ``SamplingParams``), so
its sampled tokens do not depend on which requests share its batch.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import pandas as pd
import torch

from tltreal import kernels
from tltreal.drafter import DraftModel, catch_up, expand_tree
from tltreal.kv_cache import SlotPool
from tltreal.model import Transformer, padded_causal_mask
from tltreal.sampling import SamplingParams, draw_uniforms, sample_inverse_cdf, target_probs
from tltsim.events import event_frame
from tltsim.policy.base import BatchView, Outcome, SDConfig, SDPolicy


@dataclass(frozen=True)
class EngineConfig:
    """Capacity and bookkeeping. ``max_len`` bounds prompt + generated tokens per request."""

    max_batch: int = 16
    max_len: int = 1024
    max_verify: int = 64  # largest verify_tokens a policy may pick
    max_draft_nodes: int = 64  # largest (depth - 1) * topk (drafter scratch per request)
    catch_up_limit: int = 16  # pending drafter pairs above which a request is re-prefilled apart
    eos_token_id: int | None = None
    step: int = 0
    instance: int = 0

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.max_len < 2:
            raise ValueError("max_batch must be >= 1 and max_len >= 2")


@dataclass
class Request:
    rid: int
    prompt: list[int]
    max_new_tokens: int
    sampling: SamplingParams
    output: list[int] = field(default_factory=list)
    slot: int = -1
    tokens: list[int] = field(default_factory=list)  # prompt + output; the last one is not cached yet
    cache_len: int = 0  # target KV entries committed
    draft_len: int = 0  # drafter pairs committed
    generator: torch.Generator | None = None
    finished: bool = False


@dataclass
class RunResult:
    outputs: dict[int, list[int]]
    events: pd.DataFrame
    wall_s: float

    @property
    def decode_events(self) -> pd.DataFrame:
        return self.events[self.events["kind"] == "decode"]

    @property
    def generated_tokens(self) -> int:
        return sum(len(v) for v in self.outputs.values())

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def mean_accept_length(self) -> float:
        """Tokens emitted per request per SD iteration (bonus included); 1.0 without SD."""
        d = self.decode_events
        sd = d[d["depth"] > 0]
        d = sd if len(sd) else d
        return float(d["tokens"].sum() / d["batch_size"].sum()) if len(d) else 0.0

    @property
    def mean_iteration_s(self) -> float:
        d = self.decode_events
        return float((d["t_end"] - d["t_start"]).mean()) if len(d) else 0.0


class Engine:
    """Continuous-batching engine for one target model, an optional drafter and an SD policy."""

    def __init__(self, target: Transformer, policy: SDPolicy, drafter: DraftModel | None = None,
                 config: EngineConfig | None = None) -> None:
        self.target, self.policy, self.drafter = target, policy, drafter
        self.cfg = config or EngineConfig()
        c = self.cfg
        self.alloc_len = c.max_len + c.max_verify + 2
        self.cache = target.new_cache(c.max_batch, self.alloc_len)
        self.hidden = torch.zeros(c.max_batch, self.alloc_len, target.cfg.hidden_size, dtype=target.dtype,
                                  device=target.model.embed_tokens.weight.device)
        self.draft_cache = (drafter.new_cache(c.max_batch, 2 * c.max_len + c.max_draft_nodes + 2)
                            if drafter is not None else None)
        self.slots = SlotPool(c.max_batch)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.done: dict[int, Request] = {}
        self.rows: list[dict] = []
        self._next_rid = 0
        self._iteration = 0
        self._recent_accept: deque[float] = deque(maxlen=8)
        self._t0 = 0.0

    # ----------------------------------------------------------------------------------- requests
    def add_request(self, prompt: list[int], max_new_tokens: int,
                    sampling: SamplingParams | None = None) -> int:
        """Queue a request; returns its id. Prompt + max_new_tokens must fit ``max_len``."""
        if not prompt:
            raise ValueError("empty prompt")
        if max_new_tokens < 1 or len(prompt) + max_new_tokens > self.cfg.max_len:
            raise ValueError(f"prompt {len(prompt)} + max_new_tokens {max_new_tokens} exceeds max_len "
                             f"{self.cfg.max_len}")
        if min(prompt) < 0 or max(prompt) >= self.target.cfg.vocab_size:
            raise ValueError("prompt token id out of range")
        sampling = sampling or SamplingParams()
        rid = self._next_rid
        self._next_rid += 1
        gen = None if sampling.greedy else torch.Generator().manual_seed(sampling.seed)
        self.waiting.append(Request(rid, list(prompt), max_new_tokens, sampling, generator=gen))
        return rid

    @torch.inference_mode()
    def run(self) -> RunResult:
        """Run until every queued request has finished."""
        self._t0 = time.perf_counter()
        while self.waiting or self.running:
            self._admit()
            if self.running:
                self._decode_iteration()
        wall = time.perf_counter() - self._t0
        outputs = {rid: r.output for rid, r in sorted(self.done.items())}
        return RunResult(outputs, event_frame(self.rows), wall)

    def _now(self) -> float:
        return time.perf_counter() - self._t0

    def _emit(self, req: Request, tokens: list[int]) -> None:
        for t in tokens:
            req.output.append(t)
            req.tokens.append(t)
            if len(req.output) >= req.max_new_tokens or t == self.cfg.eos_token_id:
                req.finished = True
                return

    def _retire(self) -> None:
        for r in [r for r in self.running if r.finished]:
            self.slots.give(r.slot)
            self.done[r.rid] = r
        self.running = [r for r in self.running if not r.finished]

    def _log(self, kind: str, t_start: float, t_end: float, batch: int, tokens: int,
             config: SDConfig | None = None, drafted: int = 0, accepted: int = 0) -> None:
        cfg = config or SDConfig()
        self.rows.append({
            "source": "real", "policy": self.policy.name, "step": self.cfg.step, "instance": self.cfg.instance,
            "kind": kind, "t_start": t_start, "t_end": t_end, "iterations": 1, "batch_size": batch,
            "sd_config": cfg.name, "depth": cfg.depth, "topk": cfg.topk, "verify_tokens": cfg.verify_tokens,
            "tokens": tokens, "drafted": drafted, "accepted": accepted,
        })

    def _tensor(self, values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=self.hidden.device)

    def _sample_params(self, reqs: list[Request]) -> tuple[torch.Tensor, torch.Tensor]:
        temps = torch.tensor([r.sampling.temperature for r in reqs], dtype=self.target.dtype)
        top_p = torch.tensor([r.sampling.top_p for r in reqs], dtype=self.target.dtype)
        return temps.to(self.hidden.device), top_p.to(self.hidden.device)

    # ------------------------------------------------------------------------------------ prefill
    def _admit(self) -> None:
        new: list[Request] = []
        while self.waiting and self.slots.free:
            req = self.waiting.popleft()
            req.slot = self.slots.take()
            new.append(req)
        if new:
            self._prefill(new)

    def _prefill(self, reqs: list[Request]) -> None:
        t_start = self._now()
        lens = self._tensor([len(r.prompt) for r in reqs])
        t = int(lens.max())
        tokens = torch.zeros(len(reqs), t, dtype=torch.long, device=lens.device)
        for b, r in enumerate(reqs):
            tokens[b, : len(r.prompt)] = self._tensor(r.prompt)
        positions = torch.arange(t, device=lens.device).expand(len(reqs), t)
        slots = self._tensor([r.slot for r in reqs])
        logits, hidden = self.target(tokens, positions, self.cache, slots, torch.zeros_like(lens),
                                     padded_causal_mask(lens, t))
        rows = torch.arange(len(reqs), device=lens.device)
        for b, r in enumerate(reqs):
            self.hidden[r.slot, : len(r.prompt)] = hidden[b, : len(r.prompt)]
            r.tokens = list(r.prompt)
            r.cache_len = len(r.prompt)
            r.draft_len = 0
        first = self._sample(reqs, logits[rows, lens - 1])
        for r, tok in zip(reqs, first, strict=True):
            self._emit(r, [tok])
        self.running.extend(reqs)
        self._log("prefill", t_start, self._now(), len(reqs), int(lens.sum()))
        self._retire()

    def _sample(self, reqs: list[Request], logits: torch.Tensor) -> list[int]:
        """One token per request from ``logits [B, V]`` with its own params and generator."""
        temps, top_p = self._sample_params(reqs)
        probs = target_probs(logits, temps, top_p)
        u = draw_uniforms([r.generator for r in reqs], 1, dtype=probs.dtype)[:, 0].to(probs.device)
        return sample_inverse_cdf(probs, u).tolist()

    # ------------------------------------------------------------------------------------- decode
    def _decode_iteration(self) -> None:
        reqs = list(self.running)
        view = BatchView(batch_size=len(reqs), context_lens=tuple(len(r.tokens) for r in reqs),
                         time=self._now(), iteration=self._iteration,
                         recent_accept=(sum(self._recent_accept) / len(self._recent_accept)
                                        if self._recent_accept else None),
                         instance=self.cfg.instance)
        config = self.policy.decide(view)
        if config.enabled and self.drafter is None:
            raise ValueError(f"policy '{self.policy.name}' chose {config.name} but the engine has no drafter")
        if config.enabled:
            self._check_shape(config)
            self._catch_up_laggards(reqs, force=bool(getattr(self.policy, "just_switched", False)))
        t_start = self._now()
        if config.enabled:
            emitted, drafted, accepted = self._speculative_step(reqs, config)
        else:
            emitted, drafted, accepted = self._plain_step(reqs), 0, 0
        t_end = self._now()
        self._iteration += 1
        self._log("decode", t_start, t_end, len(reqs), emitted, config, drafted, accepted)
        if config.enabled:
            self._recent_accept.append(emitted / len(reqs))
        self.policy.observe(Outcome(config=config, batch_size=len(reqs), emitted_tokens=emitted,
                                    elapsed_s=t_end - t_start, drafted_tokens=drafted,
                                    accepted_tokens=accepted, time=t_end, instance=self.cfg.instance))
        self._retire()

    def _check_shape(self, config: SDConfig) -> None:
        if config.verify_tokens > self.cfg.max_verify or (config.depth - 1) * config.topk > self.cfg.max_draft_nodes:
            raise ValueError(f"SD config {config.name} exceeds the engine's max_verify={self.cfg.max_verify} "
                             f"/ max_draft_nodes={self.cfg.max_draft_nodes}")

    def _plain_step(self, reqs: list[Request]) -> int:
        b = len(reqs)
        slots = self._tensor([r.slot for r in reqs])
        lens = self._tensor([r.cache_len for r in reqs])
        last = self._tensor([r.tokens[-1] for r in reqs])[:, None]
        ones = torch.ones(b, 1, 1, dtype=torch.bool, device=lens.device)
        logits, hidden = self.target(last, lens[:, None], self.cache, slots, lens, ones)
        self.hidden[slots, lens] = hidden[:, 0]
        for r in reqs:
            r.cache_len += 1
        for r, tok in zip(reqs, self._sample(reqs, logits[:, 0]), strict=True):
            self._emit(r, [tok])
        return b

    # ------------------------------------------------------------------------- speculative decoding
    def _pending(self, reqs: list[Request], drop_root: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Pending drafter pairs ``(t_j, h_{j-1})`` for ``j`` in ``[draft_len, cache_len]``."""
        counts = [r.cache_len - r.draft_len + 1 - int(drop_root) for r in reqs]
        p = max(counts)
        h = self.hidden.shape[-1]
        tokens = torch.zeros(len(reqs), p, dtype=torch.long, device=self.hidden.device)
        feats = self.hidden.new_zeros(len(reqs), p, h)
        for b, (r, n) in enumerate(zip(reqs, counts, strict=True)):
            tokens[b, :n] = self._tensor(r.tokens[r.draft_len: r.draft_len + n])
            lo = r.draft_len - 1
            if lo < 0:
                feats[b, 1:n] = self.hidden[r.slot, : n - 1]
            else:
                feats[b, :n] = self.hidden[r.slot, lo: lo + n]
        return tokens, feats, self._tensor(counts)

    def _catch_up_laggards(self, reqs: list[Request], force: bool) -> None:
        """Drafter re-prefill (a ``reprefill`` event) of requests whose drafter lags far behind."""
        limit = 1 if force else self.cfg.catch_up_limit
        lag = [r for r in reqs if r.cache_len - r.draft_len + 1 > limit]
        if not lag:
            return
        t_start = self._now()
        tokens, feats, counts = self._pending(lag, drop_root=True)
        slots = self._tensor([r.slot for r in lag])
        catch_up(self.drafter, self.draft_cache, slots, self._tensor([r.draft_len for r in lag]),
                 tokens, feats, counts)
        for r, n in zip(lag, counts.tolist(), strict=True):
            r.draft_len += n
        self._log("reprefill", t_start, self._now(), len(lag), int(counts.sum()))

    def _speculative_step(self, reqs: list[Request], config: SDConfig) -> tuple[int, int, int]:
        b = len(reqs)
        slots = self._tensor([r.slot for r in reqs])
        tokens, feats, counts = self._pending(reqs)
        draft_lens = self._tensor([r.draft_len for r in reqs])
        root_logits, root_feat = catch_up(self.drafter, self.draft_cache, slots, draft_lens, tokens, feats,
                                          counts)
        for r, n in zip(reqs, counts.tolist(), strict=True):
            r.draft_len += n
        lens = self._tensor([r.cache_len for r in reqs])
        root = self._tensor([r.tokens[-1] for r in reqs])
        tree = expand_tree(self.drafter, self.draft_cache, slots, draft_lens + counts, root, root_logits,
                           root_feat, lens, config)
        logits, hidden = self.target(tree.tokens, lens[:, None] + tree.depths, self.cache, slots, lens,
                                     tree.mask)
        temps, top_p = self._sample_params(reqs)
        p = target_probs(logits, temps, top_p)
        q = torch.zeros_like(p).scatter_(-1, tree.tokens[..., None], 1.0)  # top-k drafts: one-hot proposals
        n1 = tree.num_nodes + 1
        u = draw_uniforms([r.generator for r in reqs], n1 + 1, dtype=p.dtype).to(p.device)
        path, length, nxt = kernels.tree_accept(p, q, tree.tokens, tree.parents, u[:, :n1], u[:, n1],
                                                config.depth)
        kept = length + 1
        kernels.compact_kv(self.cache.k, slots, lens, path, kept)
        kernels.compact_kv(self.cache.v, slots, lens, path, kept)
        lengths, nexts = length.tolist(), nxt.tolist()
        for i, r in enumerate(reqs):
            a = lengths[i]
            accepted_nodes = path[i, : a + 1]
            self.hidden[r.slot, r.cache_len: r.cache_len + a + 1] = hidden[i, accepted_nodes]
            r.cache_len += a + 1
            self._emit(r, [*tree.tokens[i, accepted_nodes[1:]].tolist(), nexts[i]])
        return sum(lengths) + b, b * tree.num_nodes, sum(lengths)

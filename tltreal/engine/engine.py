"""The native engine: continuous batching, prefill/decode, policy-driven tree speculative decoding.

Loop. ``run()`` is one RL step's rollout: the policy is ``reset(step)``, waiting requests are
admitted into free cache slots and prefilled together (one forward, a ``prefill`` event that emits
each request's first token); then each decode iteration asks the policy for a :class:`Decision` for
the current running batch, runs it, reports an :class:`Outcome` (per-request accepted counts
included) and logs one ``decode`` event through the event log shared with the simulator
(:class:`tltcore.events.EventLog`). Finished requests leave and free their slot. The policy's
``recent_accept`` view is the shared :class:`~tltcore.policy.recent_accept.RecentAccept`.

A plain iteration feeds every request's last token. An SD iteration:
1. brings the drafter up to date (pending pairs of token + target hidden state, see
   :mod:`tltreal.spec_decode.proposers.base`). When the decision has ``switch_on`` (the elastic switch), every live
   request is brought up to date first, by the engine's switch mode (``EngineLimits.switch``, one
   default for both engines): ``reprefill`` (default, TLT's mechanism: a ``switch_reprefill`` of every
   live context through target and drafter) or ``catch_up`` (this engine keeps every request's target
   hidden states, so a drafter-only ``catch_up`` pass over what the drafter missed suffices; the
   validation replays use it). Requests
   whose drafter lags by more than ``catch_up_limit`` pairs are caught up in a separate
   ``catch_up`` forward;
2. expands the draft tree (``depth``, ``topk``, ``verify_tokens``);
3. runs one target forward over root + tree with the tree attention mask;
4. accepts losslessly (:mod:`tltreal.spec_decode.verify` / :mod:`tltreal.spec_decode.kernels`), emits
   accepted tokens plus the bonus token;
5. compacts the target KV cache and the hidden-state slab to the accepted path (a chain's accepted
   path is already contiguous, so chains skip the KV copy).

With a model-free :class:`~tltreal.spec_decode.proposers.base.TokenProposer` (``proposer=``, e.g. the n-gram
drafter) instead of a drafter, step 1 and 2 are replaced by one ``propose`` call over the requests'
token ids: each request gets a chain of at most ``min(depth, verify_tokens)`` tokens (policies must
pick chains, ``topk == 1``), padded per batch with nodes no path can reach, verified in steps 3-5
as one-hot (point-mass) proposals. When nobody has a proposal the iteration is a plain step (logged
under the decided config with nothing drafted). The elastic switch has no drafter state to rebuild.

Groups: ``add_request(..., group=...)`` (default: requests with the same prompt form one group, as
GRPO's responses to one prompt do). A token proposer sees each request's group, finished members
included (siblings), within one ``run``.

Records (opt-in, ``EngineConfig.record_logprobs`` / ``record_hidden``; off costs nothing): every
finished request's :class:`FinishedRequest` carries its output tokens' log-probs and the target's
last hidden state at every position, taken from what decoding computed anyway (the verified
logits, the hidden-state slab the drafter already uses), so they are the same with SD on or off.

Numerical policy: see :mod:`tltreal.model.transformer`. Run in float64 for bit-identical greedy output across
batch compositions and SD on/off; float32 (the benchmark default) is equal only up to rounding.
Randomness: each request has its own ``torch.Generator`` (seeded from its ``SamplingParams``), so
its sampled tokens do not depend on which requests share its batch.

Clock: event times and the ``elapsed_s`` policies see are wall-clock seconds by default, so a learning
policy (BEG-MAB rewards tokens per second) can decide differently on a rerun: timings vary. With
``clock="model"`` every operation advances a modelled clock by a cost model's time for it (e.g. the
roofline of this model on an H100), which makes event logs and bandit decisions repeatable.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pandas as pd
import torch

from tltcore.drafter.state import INITIAL_DRAFTER, DrafterState
from tltcore.engine_limits import EngineLimits
from tltcore.events import CLUSTER, EventLog
from tltcore.policy.base import BatchView, Outcome, SDConfig, SDPolicy
from tltcore.policy.recent_accept import RecentAccept
from tltreal.model.kv_cache import SlotPool
from tltreal.model.sampling import SamplingParams, draw_uniforms, sample_inverse_cdf, target_probs
from tltreal.model.transformer import Transformer, padded_causal_mask
from tltreal.spec_decode import kernels
from tltreal.spec_decode.proposers.base import DraftModel, ProposalContext, TokenProposer, catch_up
from tltreal.spec_decode.tree import DraftTree
from tltreal.spec_decode.tree_search import expand_tree
from tltreal.spec_decode.verify import greedy_chain_accept

NATIVE_SWITCH_MODES = ("reprefill", "catch_up")  # SWITCH_MODES less vLLM's in_step
CLOCKS = ("wall", "model")
PADDING_SKIP_MIN = (8, 32)  # skip padded tokens in a target forward from 8 padded of >= 32 in all


def skip_padding(real: int, total: int) -> bool:
    """Whether a target forward of ``total`` tokens, ``real`` of them not padding, should compute the
    real ones only (``Transformer.forward(keep=...)``): the gather/scatter it adds costs a few small
    ops per layer, which pays once the padding is a few rows of the projections' matrix products."""
    return total - real >= PADDING_SKIP_MIN[0] and total >= PADDING_SKIP_MIN[1]


@dataclass(frozen=True)
class EngineConfig(EngineLimits):
    """The shared limits (:class:`~tltcore.engine_limits.EngineLimits`: ``max_batch``,
    ``prefill_budget``, ``switch`` …) plus capacity and bookkeeping only the native engine has.
    ``max_len`` bounds prompt + generated tokens per request."""

    max_len: int = 1024
    max_verify: int = 64  # largest verify_tokens a policy may pick
    max_draft_nodes: int = 64  # largest (depth - 1) * topk (drafter scratch per request)
    clock: str = "wall"  # "wall" or "model" (module docstring)
    eos_token_ids: tuple[int, ...] = ()  # a request finishes when it emits any of these
    record_logprobs: bool = False  # FinishedRequest.logprobs / raw_logprobs (module docstring)
    record_hidden: bool = False  # FinishedRequest.hidden (one extra 1-token forward per finishing request)
    step: int = 0
    worker: int = 0
    run_id: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_len < 2:
            raise ValueError("max_len must be >= 2")
        if self.switch not in NATIVE_SWITCH_MODES:
            raise ValueError(f"switch {self.switch!r} is modelled by the simulator only; the native engine "
                             f"supports {NATIVE_SWITCH_MODES}")
        if self.clock not in CLOCKS:
            raise ValueError(f"clock must be one of {CLOCKS}, got {self.clock!r}")


class ModelledCosts(Protocol):
    """What the modelled clock needs: the simulator's cost-model contract (tltcore.cost.CostModel)."""

    def prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float: ...

    def drafter_prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float: ...

    def decode_time(self, context_lens: np.ndarray) -> float: ...

    def sd_time(self, context_lens: np.ndarray, config: SDConfig) -> float: ...


@dataclass
class Request:
    rid: int
    prompt: list[int]
    max_new_tokens: int
    sampling: SamplingParams
    group: Hashable = None  # requests with the same key are siblings (a token proposer reads them)
    output: list[int] = field(default_factory=list)
    slot: int = -1
    tokens: list[int] = field(default_factory=list)  # prompt + output; the last one is not cached yet
    cache_len: int = 0  # target KV entries committed
    draft_len: int = 0  # drafter pairs committed
    member: int = -1  # index in its group's list of token sequences
    generator: torch.Generator | None = None
    finished: bool = False
    logprobs: list[float] = field(default_factory=list)  # record_logprobs: see FinishedRequest
    raw_logprobs: list[float] = field(default_factory=list)
    hidden: torch.Tensor | None = None  # record_hidden: copied out of the slab when it finishes


@dataclass(frozen=True)
class FinishedRequest:
    """One finished request, with what ``EngineConfig`` asked the engine to record (else None).

    ``logprobs`` ``[len(output)]`` (float64): the log-probability of each output token under the
    distribution it was actually sampled from -- the target's, after temperature and top-p (with SD
    too: lossless verification emits every token with exactly that distribution). Greedy requests
    sample from a one-hot distribution, so theirs are all 0.
    ``raw_logprobs`` ``[len(output)]`` (float64): ``log_softmax`` of the target's raw logits
    (temperature 1, no top-p) at each output token: the policy log-probability an RL loss (GRPO's
    importance ratio, a KL term) is computed from.
    ``hidden`` ``[len(prompt) + len(output), H]`` (the target's dtype): the target's last hidden state
    (after the final norm) at every prompt and output position; row ``i`` is ``h_i``, computed with
    token ``i`` as input, so a drafter's pair ``i + 1`` is ``(token_{i+1}, h_i)``."""

    rid: int
    prompt: list[int]
    output: list[int]
    logprobs: torch.Tensor | None = None
    raw_logprobs: torch.Tensor | None = None
    hidden: torch.Tensor | None = None

    @property
    def tokens(self) -> list[int]:
        """Prompt + output."""
        return self.prompt + self.output


@dataclass
class RunResult:
    """Outputs per request id, the event log (times relative to the run's start) and its duration
    (wall-clock, or modelled with ``clock="model"``). ``finished`` holds each request's
    :class:`FinishedRequest` (with the records ``EngineConfig`` asked for)."""

    outputs: dict[int, list[int]]
    events: pd.DataFrame
    wall_s: float
    prompts: dict[int, list[int]] = field(default_factory=dict)
    finished: dict[int, FinishedRequest] = field(default_factory=dict)

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
    """Continuous-batching engine for one target model, an optional proposer and an SD policy.

    The proposer is either ``drafter`` (a neural :class:`DraftModel`, tree SD) or ``proposer`` (a
    model-free :class:`TokenProposer`, chain SD), not both. ``costs`` is needed with
    ``clock="model"`` only. ``drafter_state`` is the version and quality of the drafter as the
    policies and the event log see it."""

    def __init__(self, target: Transformer, policy: SDPolicy, drafter: DraftModel | None = None,
                 config: EngineConfig | None = None, *, proposer: TokenProposer | None = None,
                 costs: ModelledCosts | None = None, drafter_state: DrafterState = INITIAL_DRAFTER) -> None:
        if drafter is not None and proposer is not None:
            raise ValueError("give a drafter (neural, tree SD) or a token proposer (model-free, chains), not both")
        self.target, self.policy, self.drafter, self.proposer = target, policy, drafter, proposer
        self.cfg = config or EngineConfig()
        c = self.cfg
        if c.clock == "model" and costs is None:
            raise ValueError("clock='model' needs a cost model (costs=...)")
        self.costs = costs
        self.drafter_state = drafter_state
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
        self.groups: dict[Hashable, list[list[int]]] = {}  # group key -> members' token lists (this run)
        self.log = EventLog(run_id=c.run_id, source="real", policy=policy.name)
        self.log.step, self.log.drafter_version = c.step, drafter_state.version
        self.recent = RecentAccept()
        self._next_rid = 0
        self._iteration = 0
        self._t0 = 0.0
        self._model_t = 0.0
        self._step_requests = 0
        self._step_prompt_tokens = 0

    # ----------------------------------------------------------------------------------- requests
    def add_request(self, prompt: list[int], max_new_tokens: int, sampling: SamplingParams | None = None, *,
                    group: Hashable = None) -> int:
        """Queue a request; returns its id. Prompt + max_new_tokens must fit ``max_len``. Requests
        with the same ``group`` (default: the same prompt) are siblings for a token proposer."""
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
        key = ("prompt", tuple(prompt)) if group is None else ("group", group)
        self.waiting.append(Request(rid, list(prompt), max_new_tokens, sampling, key, generator=gen))
        return rid

    @torch.inference_mode()
    def run(self) -> RunResult:
        """One rollout step: reset the policy for ``config.step``, run until every queued request has
        finished, and close the step with a cluster-wide ``stage`` row."""
        self.start()
        while self.iterate():
            pass
        return self.finish()

    def start(self) -> None:
        """Begin a step: reset the policy and the clock (``run`` = start, iterate until done, finish)."""
        self.policy.reset(self.cfg.step)
        self._t0 = time.perf_counter()
        self._model_t = 0.0
        self._step_requests = len(self.waiting)
        self._step_prompt_tokens = sum(len(r.prompt) for r in self.waiting)
        self.groups = {}

    @torch.inference_mode()
    def iterate(self) -> bool:
        """Admit what fits, then one decode iteration. False once nothing is waiting or running."""
        if not (self.waiting or self.running):
            return False
        self._admit()
        if self.running:
            self._decode_iteration()
        return bool(self.waiting or self.running)

    def finish(self) -> RunResult:
        """End the step: the cluster-wide ``stage`` row and the result."""
        end = self._now()
        done = sorted(self.done.items())
        outputs = {rid: r.output for rid, r in done}
        self.log.span(CLUSTER, "stage", 0.0, end, batch=self._step_requests, prefill_tokens=self._step_prompt_tokens,
                      tokens=sum(len(v) for v in outputs.values()))
        prompts = {rid: r.prompt for rid, r in done}
        finished = {rid: self._finished(r) for rid, r in done}
        return RunResult(outputs, self.log.frame(), end, prompts, finished)

    def _finished(self, r: Request) -> FinishedRequest:
        logs = self.cfg.record_logprobs
        return FinishedRequest(r.rid, r.prompt, r.output,
                               torch.tensor(r.logprobs, dtype=torch.float64) if logs else None,
                               torch.tensor(r.raw_logprobs, dtype=torch.float64) if logs else None,
                               r.hidden)

    def request_in_slot(self, slot: int) -> Request:
        """The running request that owns KV-cache slot ``slot`` (proposers that know each request's
        reference continuation look it up this way)."""
        for r in self.running:
            if r.slot == slot:
                return r
        raise KeyError(f"no running request in slot {slot}")

    def _now(self) -> float:
        if self.cfg.clock == "model":
            return self._model_t
        return time.perf_counter() - self._t0

    def _charge(self, cost: Callable[[ModelledCosts], float]) -> None:
        """On the modelled clock, advance it by ``cost(cost model)`` (nothing to do on the wall clock)."""
        if self.cfg.clock == "model" and self.costs is not None:
            self._model_t += float(cost(self.costs))

    def _emit(self, req: Request, tokens: list[int]) -> int:
        """Append ``tokens`` up to the request's end (max tokens or EOS); returns how many went in."""
        for n, t in enumerate(tokens, start=1):
            req.output.append(t)
            req.tokens.append(t)
            if len(req.output) >= req.max_new_tokens or t in self.cfg.eos_token_ids:
                req.finished = True
                return n
        return len(tokens)

    def _retire(self) -> None:
        finished = [r for r in self.running if r.finished]
        if not finished:
            return
        if self.cfg.record_hidden:
            self._record_hidden(finished)
        for r in finished:
            self.slots.give(r.slot)
            self.done[r.rid] = r
        self.running = [r for r in self.running if not r.finished]

    def _tensor(self, values: Sequence[int] | Sequence[Sequence[int]]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=self.hidden.device)

    # ------------------------------------------------------------------------------------ sampling
    @staticmethod
    def _all_greedy(reqs: list[Request]) -> bool:
        return all(r.generator is None for r in reqs)

    def _probs(self, reqs: list[Request], logits: torch.Tensor) -> torch.Tensor:
        """Each request's sampling distributions over ``logits [B, ..., V]`` (:func:`target_probs`).
        An all-greedy batch skips the softmax: the result is the same one-hot rows."""
        if self._all_greedy(reqs):
            logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
            return torch.zeros_like(logits).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
        temps = torch.tensor([r.sampling.temperature for r in reqs], dtype=self.target.dtype)
        top_p = torch.tensor([r.sampling.top_p for r in reqs], dtype=self.target.dtype)
        return target_probs(logits, temps.to(logits.device), top_p.to(logits.device))

    def _uniforms(self, reqs: list[Request], n: int, dtype: torch.dtype) -> torch.Tensor:
        """``[B, n]`` uniforms from each request's generator (greedy rows: 0.5, never read)."""
        if self._all_greedy(reqs):
            return torch.full((len(reqs), n), 0.5, dtype=dtype, device=self.hidden.device)
        return draw_uniforms([r.generator for r in reqs], n, dtype=dtype).to(self.hidden.device)

    def _sample(self, reqs: list[Request], logits: torch.Tensor) -> tuple[list[int], torch.Tensor | None]:
        """One token per request from ``logits [B, V]`` with its own params and generator; also the
        distributions sampled from (None when an all-greedy batch records nothing: then the token is
        the argmax, exactly what inverse-CDF sampling of the one-hot distribution returns)."""
        if self._all_greedy(reqs) and not self.cfg.record_logprobs:
            return logits.argmax(-1).tolist(), None
        probs = self._probs(reqs, logits)
        u = self._uniforms(reqs, 1, probs.dtype)[:, 0]
        return sample_inverse_cdf(probs, u).tolist(), probs

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
        n = np.array([len(r.prompt) for r in reqs], dtype=np.int64)
        self._charge(lambda c: c.prefill_time(n, np.zeros_like(n)))
        lens = self._tensor([len(r.prompt) for r in reqs])
        t = int(lens.max())
        tokens = self._tensor([r.prompt + [0] * (t - len(r.prompt)) for r in reqs])
        positions = torch.arange(t, device=lens.device).expand(len(reqs), t)
        slots = self._tensor([r.slot for r in reqs])
        real = positions < lens[:, None]
        logits, hidden = self.target(tokens, positions, self.cache, slots, torch.zeros_like(lens),
                                     padded_causal_mask(lens, t), logits_at=lens - 1,
                                     keep=real if skip_padding(int(lens.sum()), real.numel()) else None)
        for b, r in enumerate(reqs):
            self.hidden[r.slot, : len(r.prompt)] = hidden[b, : len(r.prompt)]
            r.tokens = list(r.prompt)
            r.cache_len = len(r.prompt)
            r.draft_len = 0
            members = self.groups.setdefault(r.group, [])
            r.member = len(members)
            members.append(r.tokens)
        last_logits = logits[:, 0]
        first, probs = self._sample(reqs, last_logits)
        counts = [self._emit(r, [tok]) for r, tok in zip(reqs, first, strict=True)]
        if self.cfg.record_logprobs:
            self._record_logprobs(reqs, last_logits[:, None], probs[:, None], self._tensor(first)[:, None], counts)
        self.running.extend(reqs)
        self.log.span(self.cfg.worker, "prefill", t_start, self._now(), batch=len(reqs), tokens=len(reqs),
                      prefill_tokens=int(lens.sum()))
        self._retire()

    # ------------------------------------------------------------------------------------- decode
    def _decode_iteration(self) -> None:
        reqs = list(self.running)
        ctx = tuple(len(r.tokens) for r in reqs)
        view = BatchView(batch_size=len(reqs), context_lens=ctx, time=self._now(), iteration=self._iteration,
                         recent_accept=self.recent.value, worker=self.cfg.worker, step=self.cfg.step,
                         drafter=self.drafter_state)
        decision = self.policy.decide(view)
        config = decision.config
        if config.enabled:
            self._check_shape(config)
            if decision.switch_on:
                self._switch(reqs, config)
            self._catch_up_laggards(reqs, self.cfg.catch_up_limit)
        t_start = self._now()
        ctx_arr = np.asarray(ctx, dtype=np.int64)
        if config.enabled:
            self._charge(lambda c: c.sd_time(ctx_arr, config))
            step = self._chain_step if self.proposer is not None else self._speculative_step
            emitted, drafted, accepted = step(reqs, config)
        else:
            self._charge(lambda c: c.decode_time(ctx_arr))
            emitted, drafted, accepted = self._plain_step(reqs), 0, [0] * len(reqs)
        t_end = self._now()
        self._iteration += 1
        total_accepted = sum(accepted)
        self.log.decode(self.cfg.worker, t_start, t_end, 1, len(reqs), config, emitted, drafted, total_accepted)
        if config.enabled:
            self.recent.update(emitted / len(reqs))
        self.policy.observe(Outcome(config=config, batch_size=len(reqs), emitted_tokens=emitted,
                                    elapsed_s=t_end - t_start, drafted_tokens=drafted,
                                    accepted_tokens=total_accepted, time=t_end, worker=self.cfg.worker,
                                    accepted_per_request=tuple(float(a) for a in accepted) if config.enabled else ()))
        self._retire()

    def _check_shape(self, config: SDConfig) -> None:
        if self.drafter is None and self.proposer is None:
            raise ValueError(f"policy '{self.policy.name}' chose {config.name} but the engine has no drafter")
        if self.proposer is not None and config.topk != 1:
            raise ValueError(f"policy '{self.policy.name}' chose the tree {config.name} but a token proposer drafts "
                             "chains (K_1_K) only")
        if config.verify_tokens > self.cfg.max_verify or (config.depth - 1) * config.topk > self.cfg.max_draft_nodes:
            raise ValueError(f"SD config {config.name} exceeds the engine's max_verify={self.cfg.max_verify} "
                             f"/ max_draft_nodes={self.cfg.max_draft_nodes}")

    def _plain_step(self, reqs: list[Request]) -> int:
        """Every request's last token through the target, one new token each; returns tokens emitted."""
        b = len(reqs)
        slots, lens, last = self._tensor([[r.slot, r.cache_len, r.tokens[-1]] for r in reqs]).unbind(1)
        ones = torch.ones(b, 1, 1, dtype=torch.bool, device=lens.device)
        logits, hidden = self.target(last[:, None], lens[:, None], self.cache, slots, lens, ones)
        self.hidden[slots, lens] = hidden[:, 0]
        for r in reqs:
            r.cache_len += 1
        tokens, probs = self._sample(reqs, logits[:, 0])
        counts = [self._emit(r, [tok]) for r, tok in zip(reqs, tokens, strict=True)]
        if self.cfg.record_logprobs:
            self._record_logprobs(reqs, logits, probs[:, None], self._tensor(tokens)[:, None], counts)
        return b

    # ------------------------------------------------------------------------- speculative decoding
    def _pending(self, reqs: list[Request], drop_root: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Pending drafter pairs ``(t_j, h_{j-1})`` for ``j`` in ``[draft_len, cache_len]``, padded
        to the longest (one gather for the features: per-request copies cost a dispatch each)."""
        counts = [r.cache_len - r.draft_len + 1 - int(drop_root) for r in reqs]
        p = max(counts)
        tokens = self._tensor([r.tokens[r.draft_len: r.draft_len + n] + [0] * (p - n)
                               for r, n in zip(reqs, counts, strict=True)])
        info = self._tensor([[r.slot, r.draft_len, n] for r, n in zip(reqs, counts, strict=True)])
        slots, draft_lens, n_t = info.unbind(1)
        src = draft_lens[:, None] - 1 + torch.arange(p, device=info.device)  # h index of each pair
        real = (src >= 0) & (src < (draft_lens + n_t - 1)[:, None])  # h_{-1} = 0 and padding = 0
        feats = self.hidden[slots[:, None], src.clamp_min(0)].masked_fill_(~real[..., None], 0.0)
        return tokens, feats, n_t

    def _switch(self, reqs: list[Request], config: SDConfig) -> None:
        """SD switches on (the elastic switch): bring every live request's drafter up to date (a
        token proposer has no drafter state: the switch is only logged)."""
        self.log.span(self.cfg.worker, "switch", self._now(), self._now(), batch=len(reqs), config=config)
        if self.drafter is None:
            return
        if self.cfg.switch == "reprefill":
            self._reprefill(reqs)
        else:
            self._catch_up_laggards(reqs, 1)

    def _reprefill(self, reqs: list[Request]) -> None:
        """TLT's switch: every live context re-prefilled through the target (KV and hidden states
        rebuilt: the same values, recomputed) and then the drafter, in passes of at most
        ``prefill_budget * switch_prefill_fraction`` tokens."""
        t_start = self._now()
        budget = self.cfg.switch_budget
        groups: list[list[Request]] = [[]]
        for r in reqs:  # pack whole requests into passes (a request longer than the budget runs alone)
            if groups[-1] and sum(x.cache_len for x in groups[-1]) + r.cache_len > budget:
                groups.append([])
            groups[-1].append(r)
        for group in groups:
            lens = self._tensor([r.cache_len for r in group])
            t = int(lens.max())
            tokens = self._tensor([r.tokens[: r.cache_len] + [0] * (t - r.cache_len) for r in group])
            positions = torch.arange(t, device=lens.device).expand(len(group), t)
            slots = self._tensor([r.slot for r in group])
            real = positions < lens[:, None]
            _, hidden = self.target(tokens, positions, self.cache, slots, torch.zeros_like(lens),
                                    padded_causal_mask(lens, t), logits_at=lens - 1,
                                    keep=real if skip_padding(int(lens.sum()), real.numel()) else None)
            for b, r in enumerate(group):
                self.hidden[r.slot, : r.cache_len] = hidden[b, : r.cache_len]
                r.draft_len = 0
        n = np.array([r.cache_len for r in reqs], dtype=np.int64)
        self._charge(lambda c: c.prefill_time(n, np.zeros_like(n)))
        self._catch_up_laggards(reqs, 1, kind=None)
        self.log.span(self.cfg.worker, "switch_reprefill", t_start, self._now(), iterations=len(groups),
                      batch=len(reqs), prefill_tokens=int(n.sum()))

    def _catch_up_laggards(self, reqs: list[Request], limit: int, kind: str | None = "catch_up") -> None:
        """Drafter-only prefill (a ``catch_up`` event unless ``kind`` is None) of the requests whose
        drafter has more than ``limit`` pending pairs (nothing to do without a drafter)."""
        if self.drafter is None:
            return
        lag = [r for r in reqs if r.cache_len - r.draft_len + 1 > limit]
        if not lag:
            return
        t_start = self._now()
        tokens, feats, counts = self._pending(lag, drop_root=True)
        slots = self._tensor([r.slot for r in lag])
        draft_lens = [r.draft_len for r in lag]
        catch_up(self.drafter, self.draft_cache, slots, self._tensor(draft_lens), tokens, feats, counts)
        n = counts.cpu().numpy().astype(np.int64)
        self._charge(lambda c: c.drafter_prefill_time(n, np.asarray(draft_lens, dtype=np.int64)))
        for r, k in zip(lag, counts.tolist(), strict=True):
            r.draft_len += k
        if kind is not None:
            self.log.span(self.cfg.worker, kind, t_start, self._now(), batch=len(lag), prefill_tokens=int(n.sum()))

    def _speculative_step(self, reqs: list[Request], config: SDConfig) -> tuple[int, int, list[int]]:
        """One tree-SD iteration with the drafter; returns (tokens emitted, draft tokens verified,
        accepted per request)."""
        assert self.drafter is not None and self.draft_cache is not None
        b = len(reqs)
        tokens, feats, counts = self._pending(reqs)
        info = self._tensor([[r.slot, r.draft_len, r.cache_len, r.tokens[-1]] for r in reqs])
        slots, draft_lens, lens, root = info.unbind(1)
        root_logits, root_feat = catch_up(self.drafter, self.draft_cache, slots, draft_lens, tokens, feats,
                                          counts)
        for r, n in zip(reqs, counts.tolist(), strict=True):
            r.draft_len += n
        tree = expand_tree(self.drafter, self.draft_cache, slots, draft_lens + counts, root, root_logits,
                           root_feat, lens, config)
        # topk 1: the verify tree is a chain (select_tree keeps a prefix), so accepted paths are contiguous
        lengths, emitted = self._verify(reqs, tree, slots, lens, config.depth, chain=config.topk == 1)
        return emitted, b * tree.num_nodes, lengths

    def _chain_step(self, reqs: list[Request], config: SDConfig) -> tuple[int, int, list[int]]:
        """One SD iteration with the token proposer: chains of at most ``min(depth, verify_tokens)``
        tokens, verified like a tree; a plain step when nobody has a proposal."""
        assert self.proposer is not None
        k = min(config.depth, config.verify_tokens)
        no_group: list[list[int]] = []
        contexts = [ProposalContext(r.tokens, self.groups.get(r.group, no_group), r.member) for r in reqs]
        drafts = self.proposer.propose(contexts, k)
        if len(drafts) != len(reqs) or any(len(d) > k for d in drafts):
            raise ValueError(f"the token proposer must return one list of at most {k} tokens per request")
        counts = [len(d) for d in drafts]
        m = max(counts)
        if m == 0:
            return self._plain_step(reqs), 0, [0] * len(reqs)
        info = self._tensor([[r.slot, r.cache_len] for r in reqs])
        slots, lens = info.unbind(1)
        tree = self._chain_tree([[r.tokens[-1], *d] + [0] * (m - len(d)) for r, d in zip(reqs, drafts, strict=True)],
                                counts)
        real = sum(counts) + len(reqs)
        keep = tree.parents >= 0 if skip_padding(real, tree.tokens.numel()) else None
        if keep is not None:
            keep[:, 0] = True  # the root
        lengths, emitted = self._verify(reqs, tree, slots, lens, m, chain=True, keep=keep)
        return emitted, sum(counts), lengths

    def _chain_tree(self, rows: list[list[int]], counts: list[int]) -> DraftTree:
        """Root + drafts per request, padded to one width. Padding nodes get parent -1, so no path
        reaches them (acceptance only tests children of the current node), and see only themselves."""
        tokens = self._tensor(rows)
        b, n1 = tokens.shape
        if int(tokens.min()) < 0 or int(tokens.max()) >= self.target.cfg.vocab_size:
            raise ValueError("the token proposer returned a token id outside the vocabulary")
        real = self._tensor(counts)[:, None] + 1  # root + drafts
        depths = torch.arange(n1, device=tokens.device).expand(b, n1)
        parents = torch.where(depths < real, depths - 1, torch.full_like(depths, -1))
        return DraftTree(tokens, parents, depths, padded_causal_mask(real[:, 0], n1))

    def _verify(self, reqs: list[Request], tree: DraftTree, slots: torch.Tensor, lens: torch.Tensor,
                max_depth: int, *, chain: bool, keep: torch.Tensor | None = None) -> tuple[list[int], int]:
        """Target forward over ``tree``, lossless acceptance, commit of the accepted path (KV, hidden
        slab, tokens, records). Returns (accepted drafts per request, tokens emitted).

        Drafts are one-hot proposals (top-k choices or retrieved tokens): a rejected token is removed
        from the residual (:mod:`tltreal.spec_decode.verify`). With ``chain`` the accepted path is nodes
        ``0..a`` in place, so the KV compaction (an identity copy) is skipped. ``keep`` (optional): the
        nodes some path can reach; the target skips the others (padding)."""
        b = len(reqs)
        logits, hidden = self.target(tree.tokens, lens[:, None] + tree.depths, self.cache, slots, lens, tree.mask,
                                     keep=keep)
        p = None
        if chain and not self.cfg.record_logprobs and self._all_greedy(reqs):
            # exact match along the chain: the same outputs as the general rule, without its walk
            path, length, nxt = greedy_chain_accept(logits, tree.tokens, tree.parents, max_depth)
        else:
            p = self._probs(reqs, logits)
            q = torch.zeros_like(p).scatter_(-1, tree.tokens[..., None], 1.0)
            n1 = tree.num_nodes + 1
            u = self._uniforms(reqs, n1 + 1, p.dtype)
            path, length, nxt = kernels.tree_accept(p, q, tree.tokens, tree.parents, u[:, :n1], u[:, n1], max_depth)
        if not chain:
            kept = length + 1
            kernels.compact_kv(self.cache.k, slots, lens, path, kept)
            kernels.compact_kv(self.cache.v, slots, lens, path, kept)
        # Commit in a few batched ops: the accepted nodes' hidden states, then the emitted tokens.
        cols = torch.arange(path.shape[1], device=path.device)
        rows = torch.arange(b, device=path.device)[:, None]
        on_path = cols[None, :] <= length[:, None]
        src = path.clamp_min(0)
        dst = lens[:, None] + cols
        self.hidden[slots[:, None].expand_as(src)[on_path], dst[on_path]] = hidden[rows, src][on_path]
        # emission i of a request: the accepted draft at path node i + 1, or the bonus at i == a
        emitted_t = torch.cat([tree.tokens[rows, src][:, 1:], nxt[:, None]], 1)
        emitted_t = torch.where(cols[None, :] == length[:, None], nxt[:, None], emitted_t)
        lengths = length.tolist()
        counts = []
        for r, a, toks in zip(reqs, lengths, emitted_t.tolist(), strict=True):
            r.cache_len += a + 1
            counts.append(self._emit(r, toks[: a + 1]))
        if self.cfg.record_logprobs and p is not None:  # emission i was drawn from p at path node i
            self._record_logprobs(reqs, logits[rows, src], p[rows, src], emitted_t, counts)
        return lengths, sum(counts)

"""The native engine: continuous batching, prefill/decode, policy-driven tree speculative decoding.

Loop. ``run()`` is one RL step's rollout: the policy is ``reset(step)``, waiting requests are
admitted into free cache slots and prefilled together (one forward, a ``prefill`` event that emits
each request's first token); then each decode iteration asks the policy for a :class:`Decision` for
the current running batch, runs it, reports an :class:`Outcome` (per-request accepted counts
included) and logs one ``decode`` event through the event log shared with the simulator
(:class:`tltcore.events.EventLog`). Finished requests leave and free their slot. A plain decision
is run for its ``hold`` while the running batch keeps its size, without asking again, and the span is
reported in one Outcome (the policy contract's spans, as the simulator runs them): asking and
reporting every iteration of a long plain phase was a policy's whole cost on this engine's CPU
iterations of a few ms. A request finishing while a waiting one takes its slot leaves the size, and
the plain decision, standing (the contract's churn): on a full batch that is most finishes, and
asking at each was 60% of a step's policy calls. SD decisions are asked for and reported
every iteration. The policy's ``recent_accept`` view is the shared
:class:`~tltcore.policy.recent_accept.RecentAccept`.

A plain iteration feeds every request's last token. An SD iteration (:mod:`tltreal.engine.sd_step`,
hop by hop) catches the drafter up, expands the draft tree (``depth``, ``topk``, ``verify_tokens``),
runs one target forward over root + tree, accepts losslessly, commits the accepted path's KV and
hidden states and emits the accepted tokens plus the bonus token. When the decision has
``switch_on`` (the elastic switch), every live request's drafter is brought up to date first
(:mod:`tltreal.engine.switch`: ``reprefill`` by default, or ``catch_up``). With a model-free
:class:`~tltreal.spec_decode.proposers.base.TokenProposer` (``proposer=``, e.g. the n-gram drafter)
instead of a drafter the drafts are chains of retrieved tokens, verified the same way; the elastic
switch has no drafter state to rebuild.

Partial rollout: :meth:`Engine.hand_back` stops a step early and hands back every unfinished request
(:class:`~tltreal.engine.requests.Unfinished`: prompt, tokens so far, budget, sampling state), and
:meth:`Engine.resume` queues one in a later step's engine, possibly under new weights. A resumed
request is **re-prefilled** (KV and hidden states recomputed under the weights of now), its own
generator carried, in one of two ways (:data:`RESUME_MODES`, :mod:`tltreal.engine.partial` says
which is lossless when):

- ``exact`` (default): the prompt and every generated token but the last go through the target, the
  last stays pending as in the engine that stopped, and the next token comes from the request's next
  decode iteration: it runs the iterations and draws the uniforms an uninterrupted run does;
- ``resubmit``: prompt + every generated token are prefilled and the prefill emits the next token, as
  a framework that re-submits ``prompt + generated`` as a new prompt to its engine does (and as the
  simulator models it).

Groups: ``add_request(..., group=...)`` (default: requests with the same prompt form one group, as
GRPO's responses to one prompt do). A token proposer sees each request's group, finished members
included (siblings), within one ``run``.

Records (opt-in, ``EngineConfig.record_logprobs`` / ``record_hidden``; off costs nothing, see
:mod:`tltreal.engine.records`): every finished request's :class:`FinishedRequest` carries its output
tokens' log-probs and the target's last hidden state at every position, the same with SD on or off.

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
from dataclasses import dataclass

import numpy as np
import torch

from tltcore.cost.protocol import CostModel
from tltcore.drafter.state import INITIAL_DRAFTER, DrafterState
from tltcore.events import CLUSTER, EventLog
from tltcore.policy.base import NO_SD, BatchView, Decision, Outcome, SDConfig, SDPolicy
from tltcore.policy.recent_accept import RecentAccept
from tltreal.engine.engine_config import EngineConfig, skip_padding
from tltreal.engine.records import Records
from tltreal.engine.requests import Request, RunResult, Unfinished
from tltreal.engine.sd_step import SpeculativeStep
from tltreal.engine.switch import ElasticSwitch
from tltreal.model.kv_cache import SlotPool
from tltreal.model.sampling import SamplingParams, draw_uniforms, sample_inverse_cdf, target_probs
from tltreal.model.transformer import Transformer, padded_causal_mask
from tltreal.spec_decode.proposers.base import DraftModel, TokenProposer

#: How :meth:`Engine.resume` re-prefills a handed-back request (module docstring).
RESUME_MODES = ("exact", "resubmit")


@dataclass
class _PlainSpan:
    """A plain decision the engine runs for its hold while the batch keeps its size (``batch_size``),
    and what the span's iterations did so far: reported in one :class:`Outcome` when it ends."""

    decision: Decision
    batch_size: int
    left: int
    iterations: int = 0
    emitted: int = 0
    elapsed_s: float = 0.0
    end: float = 0.0


class Engine(SpeculativeStep, ElasticSwitch, Records):
    """Continuous-batching engine for one target model, an optional proposer and an SD policy.

    The proposer is either ``drafter`` (a neural :class:`DraftModel`, tree SD) or ``proposer`` (a
    model-free :class:`TokenProposer`, chain SD), not both. ``costs`` is needed with
    ``clock="model"`` only. ``drafter_state`` is the version and quality of the drafter as the
    policies and the event log see it."""

    def __init__(self, target: Transformer, policy: SDPolicy, drafter: DraftModel | None = None,
                 config: EngineConfig | None = None, *, proposer: TokenProposer | None = None,
                 costs: CostModel | None = None, drafter_state: DrafterState = INITIAL_DRAFTER) -> None:
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
        self._span: _PlainSpan | None = None  # the plain decision being held, not yet reported
        self._t0 = 0.0
        self._model_t = 0.0
        self._step_requests = 0
        self._step_prompt_tokens = 0
        self._handed_back_tokens = 0  # tokens the requests handed back generated in this step

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

    def resume(self, request: Unfinished, mode: str = "exact") -> int:
        """Queue a request another engine (or this one, in an earlier step) handed back
        (:meth:`hand_back`); returns its id here. It continues where it stopped: re-prefilled on
        admission as ``mode`` says (:data:`RESUME_MODES`), its budget, sampling state and records
        carried (module docstring)."""
        if mode not in RESUME_MODES:
            raise ValueError(f"resume mode must be one of {RESUME_MODES}, got {mode!r}")
        n = len(request.prompt) + request.max_new_tokens
        if request.remaining < 1 or n > self.cfg.max_len:
            raise ValueError(f"resumed request: prompt {len(request.prompt)} + max_new_tokens "
                             f"{request.max_new_tokens} exceeds max_len {self.cfg.max_len}, or nothing is left")
        rid = self._next_rid
        self._next_rid += 1
        self.waiting.append(Request(rid, list(request.prompt), request.max_new_tokens, request.sampling, request.group,
                                    output=list(request.output), generator=request.generator,
                                    logprobs=list(request.logprobs), raw_logprobs=list(request.raw_logprobs),
                                    resumed=len(request.output), resubmit=mode == "resubmit"))
        return rid

    def hand_back(self) -> list[Unfinished]:
        """Stop the step here: every request not finished leaves the engine (its slot freed) with what
        it needs to continue (:class:`~tltreal.engine.requests.Unfinished`), the running ones in
        admission order, then the waiting ones. Call between :meth:`iterate` and :meth:`finish`;
        :meth:`finish` then reports the requests that did finish."""
        out = []
        for r in [*self.running, *self.waiting]:
            if r.slot >= 0:
                self.slots.give(r.slot)
            self._handed_back_tokens += len(r.output) - r.resumed
            out.append(Unfinished(r.rid, r.prompt, list(r.output), r.max_new_tokens, r.sampling, r.group, r.generator,
                                  list(r.logprobs), list(r.raw_logprobs)))
        self.running, self.waiting = [], deque()
        return out

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
        self._span = None
        self._t0 = time.perf_counter()
        self._model_t = 0.0
        self._step_requests = len(self.waiting)
        self._step_prompt_tokens = sum(self._prefill_len(r) for r in self.waiting)
        self._handed_back_tokens = 0
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
        self._report_span()
        end = self._now()
        done = sorted(self.done.items())
        outputs = {rid: r.output for rid, r in done}
        tokens = sum(len(r.output) - r.resumed for _, r in done) + self._handed_back_tokens  # this step's
        self.log.span(CLUSTER, "stage", 0.0, end, batch=self._step_requests, prefill_tokens=self._step_prompt_tokens,
                      tokens=tokens)
        prompts = {rid: r.prompt for rid, r in done}
        finished = {rid: self._finished(r) for rid, r in done}
        return RunResult(outputs, self.log.frame(), end, prompts, finished)

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
        if self.hidden.is_cuda:  # kernels run asynchronously: a wall-clock reading waits for them
            torch.cuda.synchronize(self.hidden.device)
        return time.perf_counter() - self._t0

    def _charge(self, cost: Callable[[CostModel], float]) -> None:
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

    # ------------------------------------------------------------------------------------ prefill
    def _admit(self) -> None:
        new: list[Request] = []
        while self.waiting and self.slots.free:
            req = self.waiting.popleft()
            req.slot = self.slots.take()
            new.append(req)
        if new:
            self._prefill(new)

    @staticmethod
    def _prefill_len(r: Request) -> int:
        """Tokens a request's prefill puts through the target: its prompt, and for a resumed request
        every generated token (``resubmit``) or all but the last, which stays pending (``exact``)."""
        return len(r.prompt) + (len(r.output) if r.resubmit else max(len(r.output) - 1, 0))

    def _prefill(self, reqs: list[Request]) -> None:
        t_start = self._now()
        n = np.array([self._prefill_len(r) for r in reqs], dtype=np.int64)
        self._charge(lambda c: c.prefill_time(n, np.zeros_like(n)))
        lens = self._tensor(n.tolist())
        t = int(lens.max())
        known = [r.prompt + r.output for r in reqs]  # a fresh request's output is empty
        fresh = [b for b, r in enumerate(reqs) if not r.output or r.resubmit]
        tokens = self._tensor([k[:m] + [0] * (t - m) for k, m in zip(known, n.tolist(), strict=True)])
        positions = torch.arange(t, device=lens.device).expand(len(reqs), t)
        slots = self._tensor([r.slot for r in reqs])
        real = positions < lens[:, None]
        logits, hidden = self.target(tokens, positions, self.cache, slots, torch.zeros_like(lens),
                                     padded_causal_mask(lens, t), logits_at=lens - 1,
                                     keep=real if skip_padding(int(lens.sum()), real.numel()) else None)
        for b, (r, m) in enumerate(zip(reqs, n.tolist(), strict=True)):
            self.hidden[r.slot, :m] = hidden[b, :m]
            r.tokens = known[b]
            r.cache_len = m
            r.draft_len = 0
            members = self.groups.setdefault(r.group, [])
            r.member = len(members)
            members.append(r.tokens)
        # each fresh (or resubmitted) request's next token; an exact resume's comes from its next iteration
        emitting = reqs if len(fresh) == len(reqs) else [reqs[b] for b in fresh]
        last_logits = logits[:, 0] if len(fresh) == len(reqs) else logits[fresh, 0]
        if emitting:
            first, probs = self._sample(emitting, last_logits)
            counts = [self._emit(r, [tok]) for r, tok in zip(emitting, first, strict=True)]
            if self.cfg.record_logprobs:
                self._record_logprobs(emitting, last_logits[:, None], probs[:, None], self._tensor(first)[:, None],
                                      counts)
        self.running.extend(reqs)
        self.log.span(self.cfg.worker, "prefill", t_start, self._now(), batch=len(reqs), tokens=len(emitting),
                      prefill_tokens=int(lens.sum()))
        self._retire()

    # ------------------------------------------------------------------------------------- decode
    def _report_span(self) -> None:
        """Report the held plain span, if any, in one Outcome (before the policy is asked again)."""
        span, self._span = self._span, None
        if span is not None and span.iterations > 0:
            self.policy.observe(Outcome(config=NO_SD, batch_size=span.batch_size, emitted_tokens=span.emitted,
                                        elapsed_s=span.elapsed_s, time=span.end, worker=self.cfg.worker,
                                        iterations=span.iterations))

    def _decode_iteration(self) -> None:
        reqs = list(self.running)
        span = self._span
        if span is not None and span.left > 0 and span.batch_size == len(reqs):
            decision = span.decision  # a plain decision still held: the same batch size, hold not used up
        else:
            self._report_span()
            ctx = tuple(len(r.tokens) for r in reqs)
            view = BatchView(batch_size=len(reqs), context_lens=ctx, time=self._now(), iteration=self._iteration,
                             recent_accept=self.recent.value, worker=self.cfg.worker, step=self.cfg.step,
                             drafter=self.drafter_state)
            decision = self.policy.decide(view)
            span = None
            if not decision.config.enabled and decision.hold > 1:
                span = self._span = _PlainSpan(decision, len(reqs), decision.hold)
        config = decision.config
        if config.enabled:
            self._check_shape(config)
            if decision.switch_on:
                self._switch(reqs, config)
            self._catch_up_laggards(reqs, self.cfg.catch_up_limit)
        t_start = self._now()

        def contexts() -> np.ndarray:  # built only on the modelled clock, which prices the iteration
            return np.array([len(r.tokens) for r in reqs], dtype=np.int64)

        if config.enabled:
            self._charge(lambda c: c.sd_time(contexts(), config))
            step = self._chain_step if self.proposer is not None else self._speculative_step
            emitted, drafted, accepted = step(reqs, config)
        else:
            self._charge(lambda c: c.decode_time(contexts()))
            emitted, drafted, accepted = self._plain_step(reqs), 0, [0] * len(reqs)
        t_end = self._now()
        self._iteration += 1
        # telemetry: one decode event, the recent-accept view, the policy's outcome
        total_accepted = sum(accepted)
        self.log.decode(self.cfg.worker, t_start, t_end, 1, len(reqs), config, emitted, drafted, total_accepted)
        if config.enabled:
            self.recent.update(emitted / len(reqs))
        if span is not None:  # a held plain span: reported whole when it ends
            span.left -= 1
            span.iterations += 1
            span.emitted += emitted
            span.elapsed_s += t_end - t_start
            span.end = t_end
        else:
            self.policy.observe(Outcome(config=config, batch_size=len(reqs), emitted_tokens=emitted,
                                        elapsed_s=t_end - t_start, drafted_tokens=drafted,
                                        accepted_tokens=total_accepted, time=t_end, worker=self.cfg.worker,
                                        accepted_per_request=tuple(float(a) for a in accepted) if config.enabled
                                        else ()))
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

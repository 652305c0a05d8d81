"""The RL rollout configuration in miniature, and a χ² test of sampled tokens against exact
distributions (tests/real/test_rollout_lossless.py).

**The policy.** A float32 Llama (:data:`CFG`) trained for a few seconds on *noisy* arithmetic
progressions: each step adds ``d`` (1, 2 or 3, fixed per sequence) plus a noise of 0 (80%), +1
(15%) or -1 (5%), modulo the vocabulary. Its next-token distribution therefore has real spread at
every position (top-1 0.5-0.75, so a χ² test sees several well-filled bins), while a drafter that
reads the target's hidden state can still guess the likely token (so drafts are accepted often).

**The drafter.** TLT's EAGLE drafter (:class:`~tltreal.spec_decode.proposers.eagle.EagleDrafter`)
trained as the Spot Trainer trains it: on the policy's own temperature-1 rollouts and the hidden
states the engine recorded for them (``record_hidden``, what the rollout worker streams).

**The rollout.** :func:`rollout_engine` builds the engine the rollout worker builds
(:mod:`tltreal.spot.worker_process`): the elastic policy around a static ``4_1_4`` chain (the
``SpotConfig`` default's inner policy), temperature 1, top-p 1. A few short *filler* requests keep
the batch above the elastic threshold until they finish; then the batch is at the threshold and,
``consecutive`` iterations later, SD switches on while every measured request is mid-generation.

**The χ² test** (:func:`rank_chi2`). Each sampled token ``x_i`` has its own exact distribution
``p_i`` (the target's softmax over the realised prefix, computed by a full cache-free forward). Bin
``x_i`` by its rank under ``p_i`` (rank 0 = most likely; ranks whose expected count is small are
pooled into one tail bin). Under the null hypothesis (``x_i ~ p_i`` given its prefix) the bin
indicator ``e_i`` has mean ``π_i`` (``p_i``'s mass per rank bin) and covariance
``diag(π_i) - π_i π_iᵀ``; the statistic is ``(O - E)ᵀ Σ⁻¹ (O - E)`` over all bins but one, with
``O = Σ e_i``, ``E = Σ π_i`` and ``Σ = Σ_i (diag(π_i) - π_i π_iᵀ)``: asymptotically χ² with
(bins - 1) degrees of freedom. When every ``p_i`` is the same this is exactly Pearson's χ² (the
Mahalanobis form of the multinomial). Tokens of one request at several positions are dependent,
but ``e_t - π_t`` is a martingale difference given the prefix, so the same statistic (with the
summed conditional covariances) is asymptotically χ² there too (martingale CLT).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import nn

from tltcore.policy.registry import make_policy
from tltreal.engine.engine import Engine
from tltreal.engine.engine_config import EngineConfig
from tltreal.engine.requests import RunResult
from tltreal.model.sampling import SamplingParams
from tltreal.model.transformer import Transformer
from tltreal.model.weights import random_model
from tltreal.rl.drafter_train import DrafterTrainer, DrafterTrainerConfig
from tltreal.spec_decode.proposers.eagle import EagleDrafter, random_drafter
from tltreal.spot.sample_buffer import Sample, SampleBuffer

from .tiny_models import TINY_V64

CFG = replace(TINY_V64, max_position_embeddings=128)
NOISE = ((0, 0.8), (1, 0.15), (-1, 0.05))  # (added to the step, probability)
CHAIN = "static:4_1_4"  # the inner policy of SpotConfig's default sd_policy
CONSECUTIVE = 2  # elastic: small-batch iterations until the switch (the last one is the first SD one)
FILLER_TOKENS = 3  # the fillers' max_new_tokens: they leave after the prefill token and 2 plain iterations


def noisy_progressions(n: int, length: int, seed: int, vocab: int = CFG.vocab_size) -> torch.Tensor:
    """``[n, length]`` noisy progressions (module docstring), seeded."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, vocab, (n, 1), generator=g)
    step = torch.randint(1, 4, (n, 1), generator=g)
    u = torch.rand(n, length - 1, generator=g)
    noise = torch.full_like(u, NOISE[0][0], dtype=torch.long)
    edge = NOISE[0][1]
    for value, prob in NOISE[1:]:
        noise = torch.where((u >= edge) & (u < edge + prob), value, noise)
        edge += prob
    inc = torch.cat([torch.zeros(n, 1, dtype=torch.long), step + noise], 1).cumsum(1)
    return (start + inc) % vocab


def train_policy(steps: int = 400, *, seed: int = 0, batch: int = 16, length: int = 32, lr: float = 3e-3
                 ) -> Transformer:
    """The float32 policy (module docstring): next-token cross-entropy, AdamW; deterministic."""
    torch.manual_seed(seed)
    model = random_model(CFG, seed=seed, dtype=torch.float32).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    v = CFG.vocab_size
    for i in range(steps):
        tokens = noisy_progressions(batch, length, seed * 100_003 + i)
        logits = model.forward_train(tokens)[0]
        loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, v), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return model.eval()


def train_rollout_drafter(target: Transformer, *, steps: int = 300, rollouts: int = 64, seed: int = 0
                          ) -> EagleDrafter:
    """An EAGLE drafter trained on the target's own temperature-1 rollouts (SD off) and the hidden
    states the engine recorded for them, as the Spot Trainer trains it."""
    prompts = noisy_progressions(rollouts, 8, seed + 5_000).tolist()
    engine = Engine(target, make_policy("no-sd"), config=EngineConfig(max_batch=rollouts, max_len=40,
                                                                       record_hidden=True))
    for i, p in enumerate(prompts):
        engine.add_request(p, 32, SamplingParams(1.0, seed=seed * 1_000 + i))
    buffer = SampleBuffer()
    buffer.start_step(0)
    for f in engine.run().finished.values():
        buffer.add(Sample(torch.tensor(f.tokens), f.hidden, 0))
    drafter = random_drafter(target, seed=seed + 3)
    DrafterTrainer(drafter, DrafterTrainerConfig(lr=3e-3, seed=seed, max_steps=steps)).train(buffer, steps)
    return drafter.eval()


@dataclass(frozen=True)
class Rollout:
    """One rollout run: the result, the measured requests' ids (fillers excluded) and how many
    tokens each had emitted when SD switched on (the output index of the first token after it)."""

    result: RunResult
    measured: list[int]
    switch_at: int

    def sd_stats(self) -> tuple[float, int, int]:
        """(mean accept length: tokens per request per SD iteration, bonus included; drafts
        accepted; drafts verified) over the SD iterations."""
        d = self.result.decode_events
        sd = d[d["depth"] > 0]
        return self.result.mean_accept_length, int(sd["accepted"].sum()), int(sd["drafted"].sum())


def rollout_engine(target: Transformer, drafter: EagleDrafter, prompts: Sequence[Sequence[int]],
                   seeds: Sequence[int], max_new_tokens: int, *, switch: str = "reprefill", fillers: int = 8,
                   record_logprobs: bool = False, inner: str = CHAIN) -> tuple[Engine, list[int]]:
    """The rollout worker's engine (module docstring) with ``prompts`` queued at temperature 1,
    top-p 1 (request ``i`` seeded ``seeds[i]``), plus ``fillers`` short requests that finish first;
    returns the engine and the measured requests' ids."""
    n = len(prompts)
    longest = max(len(p) for p in prompts)
    policy = make_policy(f"elastic:{n}:{CONSECUTIVE}+{inner}")
    engine = Engine(target, policy, drafter,
                    EngineConfig(max_batch=n + fillers, max_len=longest + max_new_tokens + 1, max_verify=8,
                                 max_draft_nodes=8, switch=switch, record_logprobs=record_logprobs,
                                 record_hidden=True))
    rids = [engine.add_request(list(p), max_new_tokens, SamplingParams(1.0, 1.0, seed=s))
            for p, s in zip(prompts, seeds, strict=True)]
    for i in range(fillers):
        engine.add_request(list(prompts[i % n]), FILLER_TOKENS, SamplingParams(1.0, seed=-1 - i))
    return engine, rids


def run_rollout(target: Transformer, drafter: EagleDrafter, prompts: Sequence[Sequence[int]],
                seeds: Sequence[int], max_new_tokens: int, **kwargs: object) -> Rollout:
    """:func:`rollout_engine`, run; checks that SD switched on mid-generation (plain iterations
    first, then one switch while the measured requests were all running, SD from then on)."""
    engine, rids = rollout_engine(target, drafter, prompts, seeds, max_new_tokens, **kwargs)
    result = engine.run()
    ev = result.events
    switches = ev[ev["kind"] == "switch"]
    assert len(switches) == 1, "SD must switch on exactly once"
    decode = result.decode_events
    plain = decode[decode["depth"] == 0]
    assert len(plain) >= 1 and (decode["depth"].to_numpy()[len(plain):] > 0).all(), "plain first, then SD"
    assert int(switches["batch_size"].iloc[0]) == len(rids) < int(plain["batch_size"].iloc[0]), \
        "the switch comes when the batch has shrunk, with every measured request still running"
    switch_at = 1 + int(plain["iterations"].sum())  # the prefill's token, then one per plain iteration
    assert switch_at < max_new_tokens
    return Rollout(result, rids, switch_at)


def exact_next_token_probs(target: Transformer, sequences: Sequence[Sequence[int]]) -> torch.Tensor:
    """``[n, T-1, V]`` float64: the target's own next-token distribution (temperature 1, top-p 1)
    after every prefix of each sequence (all of one length ``T``), by one full cache-free forward."""
    tokens = torch.tensor([list(s) for s in sequences], dtype=torch.long)
    with torch.no_grad():
        logits = target.forward_train(tokens)[0]
    return logits[:, :-1].double().softmax(-1)


def output_probs(target: Transformer, rollout: Rollout) -> tuple[torch.Tensor, torch.Tensor]:
    """The measured requests' output tokens ``[n, M]`` and the target's exact distribution for
    each of them given its realised prefix ``[n, M, V]`` (requests batched by prompt length; every
    measured request has ``M`` output tokens)."""
    fin = rollout.result.finished
    by_len: dict[int, list[int]] = {}
    for rid in rollout.measured:
        by_len.setdefault(len(fin[rid].prompt), []).append(rid)
    probs: dict[int, torch.Tensor] = {}
    for n, rids in by_len.items():
        p = exact_next_token_probs(target, [fin[r].tokens for r in rids])
        probs.update({r: p[i, n - 1:] for i, r in enumerate(rids)})
    tokens = torch.tensor([fin[r].output for r in rollout.measured], dtype=torch.long)
    return tokens, torch.stack([probs[r] for r in rollout.measured])


@dataclass(frozen=True)
class Chi2:
    statistic: float
    df: int
    p_value: float
    n: int
    observed: list[int]
    expected: list[float]


def rank_chi2(probs: torch.Tensor, tokens: torch.Tensor, *, min_expected: float = 20.0) -> Chi2:
    """The χ² test of ``tokens [n]`` against their own distributions ``probs [n, V]`` by rank bins
    (module docstring). Ranks 0, 1, ... get their own bin while both it and the mass of all later
    ranks have expected counts >= ``min_expected``; the rest is one pooled tail bin."""
    probs = probs.double()
    n = probs.shape[0]
    sorted_p, order = probs.sort(dim=-1, descending=True, stable=True)
    rank = (order == tokens[:, None]).long().argmax(-1)
    mass = sorted_p.sum(0)  # expected count per rank
    tail = mass.flip(0).cumsum(0).flip(0)  # expected count of ranks >= r
    k = 0
    while k + 1 < mass.numel() and mass[k] >= min_expected and tail[k + 1] >= min_expected:
        k += 1  # ranks 0..k-1 have their own bins, ranks >= k the tail
    if k == 0:
        raise ValueError("too few draws for even two bins")
    pi = torch.cat([sorted_p[:, :k], sorted_p[:, k:].sum(-1, keepdim=True)], 1)  # [n, k + 1]
    obs = torch.bincount(rank.clamp_max(k), minlength=k + 1).double()
    exp = pi.sum(0)
    cov = torch.diag(exp) - pi.T @ pi
    d = (obs - exp)[:-1]
    stat = float(d @ torch.linalg.solve(cov[:-1, :-1], d))
    p = float(torch.special.gammaincc(torch.tensor(k / 2, dtype=torch.float64),
                                      torch.tensor(stat / 2, dtype=torch.float64)))
    return Chi2(stat, k, p, n, [int(x) for x in obs], [round(float(x), 1) for x in exp])

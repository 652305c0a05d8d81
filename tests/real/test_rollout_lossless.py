"""Losslessness where it matters: the configuration RL rollouts actually run (issue 26, item 5).

The rollout worker (:mod:`tltreal.spot.worker_process`) samples GRPO's responses with a *trained*
EAGLE drafter, SD switched on *mid-generation* by the elastic policy, float32, temperature 1,
top-p 1. The greedy equality tests (tests/real/test_real_lossless_greedy.py) say nothing about
sampling; these tests do (setup and statistics: :mod:`tests.real.rollout_fixtures`):

- **Every position is sampled from the target's distribution.** ``N`` requests (10^4, independent
  seeds, 64 prompts of lengths 5-10) run in one engine with the rollout's policy
  (``elastic+static:4_1_4``); a few short requests keep the batch above the elastic threshold until
  they finish, so SD switches on while every measured request is mid-generation (the engine's
  default switch ``reprefill``, and ``catch_up``). Each measured token is compared with the target's
  exact softmax over its realised prefix (a full cache-free forward) by a χ² test on rank bins with
  pooled rare bins: at the first position after the switch and three later (n = 10^4 each), and
  at all positions after the switch pooled (n = 4·10^4). Pass: p > 1e-4 (:data:`ALPHA`).
- **The test has power**: the same test on the same number of draws must fail when the acceptance
  rule is broken by a one-line mutant (every draft accepted; the bonus drawn without removing the
  rejected draft).
- **The recorded log-probs are the trainer's**: ``FinishedRequest.raw_logprobs`` / ``logprobs``
  (``EngineConfig.record_logprobs``) of SD-generated responses equal GRPO's recomputation
  (:func:`tltreal.rl.grpo.batch_logprobs` over :func:`~tltreal.rl.grpo.policy_batch`: a packed full
  forward of prompt + response) within 1e-5, for every kind of emitted token: the prefill's, plain
  decoding's, accepted drafts, the bonus after a rejection (the residual sample) and after a fully
  accepted chain. (Today GRPO recomputes its old log-probs with that forward, so the recorded ones
  are not consumed; this pins that either may be used.)
"""

from __future__ import annotations

import os
import time

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")

from tltreal.engine.sd_step import SpeculativeStep  # noqa: E402
from tltreal.rl.grpo import Rollout as GRPORollout  # noqa: E402
from tltreal.rl.grpo import batch_logprobs, policy_batch  # noqa: E402
from tltreal.spec_decode import kernels, verify  # noqa: E402

from .rollout_fixtures import (  # noqa: E402
    Chi2,
    Rollout,
    noisy_progressions,
    output_probs,
    rank_chi2,
    run_rollout,
    train_policy,
    train_rollout_drafter,
)

N = 10_000  # measured requests per run: n per position
NEW_TOKENS = 8  # the switch comes after 4 of them (prefill + 3 plain iterations)
LATER = 3  # the later position tested: the switch position + LATER
ALPHA = 1e-4  # a lossless engine fails a test with this probability
PROMPTS = [p[: 5 + i % 6] for i, p in enumerate(noisy_progressions(64, 10, 42).tolist())]
SEED_BASE = {"reprefill": 0, "catch_up": 1_000_000, "accept_every_draft": 2_000_000,
             "residual_keeps_rejected": 3_000_000}


@pytest.fixture(scope="module")
def policy():
    """The float32 policy and its EAGLE drafter trained on the policy's own rollouts."""
    t0 = time.perf_counter()
    target = train_policy()
    t1 = time.perf_counter()
    drafter = train_rollout_drafter(target)
    print(f"\npolicy trained in {t1 - t0:.1f} s, drafter in {time.perf_counter() - t1:.1f} s")
    return target, drafter


def _rollout(policy, label: str, switch: str = "reprefill", n: int = N) -> Rollout:
    target, drafter = policy
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(n)]
    seeds = [SEED_BASE[label] + i for i in range(n)]
    return run_rollout(target, drafter, prompts, seeds, NEW_TOKENS, switch=switch)


def _chi2_tests(target, rollout: Rollout) -> dict[str, Chi2]:
    """The χ² tests of one rollout: the first position after the switch, a later one, and every
    position after the switch pooled."""
    tokens, probs = output_probs(target, rollout)
    s = rollout.switch_at
    return {f"position {s} (first after the switch)": rank_chi2(probs[:, s], tokens[:, s]),
            f"position {s + LATER}": rank_chi2(probs[:, s + LATER], tokens[:, s + LATER]),
            f"positions {s}-{NEW_TOKENS - 1} pooled": rank_chi2(probs[:, s:].flatten(0, 1), tokens[:, s:].flatten())}


def _report(label: str, rollout: Rollout, tests: dict[str, Chi2], seconds: float) -> None:
    accept, accepted, drafted = rollout.sd_stats()
    print(f"\n{label}: {seconds:.1f} s, switch after {rollout.switch_at} tokens, accept length {accept:.2f} "
          f"(drafts accepted {accepted}/{drafted} = {accepted / drafted:.2f})")
    for name, c in tests.items():
        print(f"  {name}: n={c.n} chi2={c.statistic:.2f} df={c.df} p={c.p_value:.3g} observed={c.observed} "
              f"expected={c.expected}")


# ---- the statistic itself ---------------------------------------------------------------------------
def test_rank_chi2_is_calibrated_on_exact_draws_and_rejects_a_tilted_sampler():
    """Draws from their own (different) distributions pass at the nominal rate; draws from
    tempered distributions (p^1.15, renormalised) fail."""
    g = torch.Generator().manual_seed(0)
    pvals = []
    for _ in range(200):
        probs = (2.0 * torch.randn(1_000, 64, generator=g, dtype=torch.float64)).softmax(-1)
        pvals.append(rank_chi2(probs, torch.multinomial(probs, 1, generator=g)[:, 0]).p_value)
    rejected = sum(p < 0.05 for p in pvals) / len(pvals)
    assert 0.01 <= rejected <= 0.10, rejected
    probs = (2.0 * torch.randn(10_000, 64, generator=g, dtype=torch.float64)).softmax(-1)
    tilted = probs ** 1.15
    assert rank_chi2(probs, torch.multinomial(tilted, 1, generator=g)[:, 0]).p_value < ALPHA


# ---- the rollout configuration samples the target's distribution -----------------------------------
@pytest.mark.parametrize("switch", ["reprefill", "catch_up"])
def test_rollout_samples_every_position_from_the_target_distribution(policy, switch):
    t0 = time.perf_counter()
    rollout = _rollout(policy, switch, switch)
    tests = _chi2_tests(policy[0], rollout)
    _report(f"switch={switch}", rollout, tests, time.perf_counter() - t0)
    accept, accepted, drafted = rollout.sd_stats()
    assert accept > 1.5 and accepted > 0.15 * drafted, "the trained drafter must be accepted often"
    for name, c in tests.items():
        assert c.n >= N and c.df >= 3, name
        assert c.p_value > ALPHA, f"{name}: p = {c.p_value:.3g}, observed {c.observed}, expected {c.expected}"


# ---- ... and the test would see a broken acceptance rule -------------------------------------------
def _accept_every_draft(p, q, tokens, parents, u, u_bonus, max_depth):
    return verify.tree_accept_reference(p, q, tokens, parents, torch.zeros_like(u), u_bonus, max_depth)


MUTANTS = {
    # u = 0: min(1, p/q) > 0 for every draft, so every draft is accepted
    "accept_every_draft": (kernels, "tree_accept_reference", _accept_every_draft),
    # after a rejection the bonus is drawn from p itself: the rejected draft is not removed
    "residual_keeps_rejected": (verify, "residual", lambda r, q: r),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_the_same_test_fails_on_a_broken_acceptance_rule(policy, monkeypatch, mutant):
    module, name, broken = MUTANTS[mutant]
    monkeypatch.setattr(kernels, "_USE_TRITON", False)  # the PyTorch reference, which the mutant patches
    monkeypatch.setattr(module, name, broken)
    t0 = time.perf_counter()
    rollout = _rollout(policy, mutant)
    tests = _chi2_tests(policy[0], rollout)
    _report(f"mutant {mutant}", rollout, tests, time.perf_counter() - t0)
    pooled = tests[next(k for k in tests if k.endswith("pooled"))]
    assert pooled.p_value < ALPHA
    assert min(c.p_value for c in tests.values()) < 1e-12


# ---- the recorded log-probs are the trainer's ------------------------------------------------------
def test_recorded_logprobs_equal_the_trainers_recomputation(policy, monkeypatch):
    target, drafter = policy
    kinds: dict[tuple[int, int], str] = {}  # (rid, output index) -> how the token was emitted
    verify_step = SpeculativeStep._verify

    def traced(self, reqs, tree, slots, lens, max_depth, **kw):
        before = [(r.rid, len(r.output)) for r in reqs]
        lengths, emitted = verify_step(self, reqs, tree, slots, lens, max_depth, **kw)
        for (rid, k), a in zip(before, lengths, strict=True):
            kinds.update({(rid, k + j): "accepted draft" for j in range(a)})
            kinds[(rid, k + a)] = "bonus after a rejection" if a < tree.num_nodes else "bonus after the whole chain"
        return lengths, emitted

    monkeypatch.setattr(SpeculativeStep, "_verify", traced)
    n, new_tokens = 64, 40
    prompts = [PROMPTS[i] for i in range(n)]
    rollout = run_rollout(target, drafter, prompts, [7_000 + i for i in range(n)], new_tokens, record_logprobs=True)
    fin = [rollout.result.finished[r] for r in rollout.measured]
    # the trainer: GRPO's packing and forward (its pi_old), over prompt + response
    rollouts = [GRPORollout(i, tuple(f.tokens), len(f.prompt), 0.0) for i, f in enumerate(fin)]
    batch = policy_batch(rollouts, [0.0] * n, row_len=max(len(f.tokens) for f in fin) * 4, pad_id=0)
    with torch.no_grad():
        trainer = batch_logprobs(target, batch)[batch.packed.weights > 0].double()
    raw = torch.cat([f.raw_logprobs for f in fin])
    used = torch.cat([f.logprobs for f in fin])
    assert raw.shape == trainer.shape == (n * new_tokens,)
    s = rollout.switch_at
    labels = [("prefill" if k == 0 else "plain decoding") if k < s else kinds[(f.rid, k)]
              for f in fin for k in range(len(f.output))]
    print(f"\nlog-probs of {len(labels)} tokens (switch after {s}; accept length {rollout.sd_stats()[0]:.2f}):")
    for kind in ("prefill", "plain decoding", "accepted draft", "bonus after a rejection",
                 "bonus after the whole chain"):
        idx = torch.tensor([i for i, x in enumerate(labels) if x == kind])
        assert len(idx) > 0, f"no token emitted as {kind}"
        d_raw = float((raw[idx] - trainer[idx]).abs().max())
        d_used = float((used[idx] - trainer[idx]).abs().max())
        print(f"  {kind}: {len(idx)} tokens, max |recorded - trainer| raw {d_raw:.2e}, sampled-from {d_used:.2e}")
        assert d_raw <= 1e-5 and d_used <= 1e-5, kind

"""The model-free n-gram drafter (TLT-Base) and the engine's chain verification of token proposals.

- the proposer's rule against a naive reference (longest match, most recent occurrence, periodic
  extension, siblings, incremental byte cache), on hand-made and random sequences;
- greedy: the engine with n-gram chains emits exactly what the target alone emits, whatever the
  batch composition, grouping and policy; accept length is high on repetitive text and with
  identical siblings; requests or whole iterations without a proposal decode plainly;
- sampling: point-mass drafts keep the output distribution exact (chi-squared against the target's
  enumerated marginals), and the same test rejects a sampler that skips the residual.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")

from tltcore.policy.base import NO_SD, NoSD, SDConfig, Static  # noqa: E402
from tltcore.policy.registry import make_policy  # noqa: E402
from tltreal.engine.engine import Engine  # noqa: E402
from tltreal.engine.engine_config import EngineConfig  # noqa: E402
from tltreal.engine.requests import RunResult  # noqa: E402
from tltreal.model.sampling import SamplingParams  # noqa: E402
from tltreal.model.transformer import Transformer  # noqa: E402
from tltreal.model.weights import random_model  # noqa: E402
from tltreal.spec_decode import verify  # noqa: E402
from tltreal.spec_decode.proposers import NgramProposer, OracleDrafter, ProposalContext  # noqa: E402
from tltreal.spec_decode.proposers.ngram import extend_periodic  # noqa: E402
from tltreal.spec_decode.tree import make_tree  # noqa: E402

from .test_real_sampling import chi2_pvalue  # noqa: E402
from .tiny_models import TINY as CFG  # noqa: E402
from .tiny_models import TINY_V64 as LOOP_CFG  # noqa: E402
from .tiny_models import random_prompts, two_token_marginals  # noqa: E402

ALPHA_OK = 1e-3
ALPHA_BROKEN = 1e-6


# ----------------------------------------------------------------------------------- the proposer
def naive(tokens: Sequence[int], k: int, siblings: Sequence[Sequence[int]] = (), min_n: int = 1,
          max_n: int = 3) -> list[int]:
    """The rule of tltreal.spec_decode.proposers.ngram, written the slow obvious way."""
    tokens = list(tokens)
    n_tok = len(tokens)
    for n in range(min(max_n, n_tok - 1), min_n - 1, -1):
        pattern = tokens[n_tok - n:]
        for p in range(n_tok - n - 1, -1, -1):  # occurrences ending before the last token, latest first
            if tokens[p: p + n] == pattern:
                return extend_periodic(tokens, p + n, k)
        for sib in siblings:
            aligned = min(len(sib) - 1, n_tok)  # occurrences ending here or earlier first
            for p in [*range(aligned - n, -1, -1), *range(len(sib) - n - 1, aligned - n, -1)]:
                if list(sib[p: p + n]) == pattern:
                    return list(sib[p + n: p + n + k])
    return []


@pytest.mark.parametrize(("tokens", "k", "expected"), [
    ([1, 2, 3, 4, 8, 2, 3, 6, 1, 2, 3], 4, [4, 8, 2, 3]),  # the longest match wins over a later shorter one
    ([1, 2, 9, 1, 2, 7, 1, 2], 4, [7, 1, 2, 7]),  # most recent occurrence; periodic past the end
    ([5, 5, 5], 4, [5, 5, 5, 5]),  # period 1 still fills k
    ([1, 2, 1, 2], 5, [1, 2, 1, 2, 1]),
    ([7, 8, 9], 4, []),  # nothing repeats
    ([4], 3, []),  # a lone token has nothing before it
    ([7, 3, 9, 3], 2, [9, 3]),
    ([7, 3, 9, 3], 0, []),
    ([2**40, 1, 2**16, 1], 2, [2**16, 1]),  # byte patterns of large ids never match off a token boundary
])
def test_ngram_rule_on_known_sequences(tokens, k, expected):
    assert NgramProposer().propose([ProposalContext(tokens)], k) == [expected]
    assert naive(tokens, k) == expected


def test_ngram_min_n_and_siblings():
    assert NgramProposer(min_n=2).propose([ProposalContext([7, 3, 9, 3])], 2) == [[]]
    group = [[1, 2, 3], [1, 2, 3, 4, 5, 6], [1, 2, 3, 4], [1, 2, 3, 4, 9]]
    own = ProposalContext(group[2], group, 2)
    assert NgramProposer().propose([own], 3) == [[5, 6]]  # first sibling with "4" followed by something
    assert NgramProposer(siblings=False).propose([own], 3) == [[]]
    assert NgramProposer(max_siblings=1).propose([ProposalContext(group[2], group[1:], 1)], 3) == [[5, 6]]
    assert NgramProposer(max_siblings=1).propose([ProposalContext(group[3], group, 3)], 3) == [[]]
    with pytest.raises(ValueError):
        NgramProposer(min_n=3, max_n=2)


def test_ngram_matches_naive_reference_while_sequences_grow():
    """Random sequences over a small vocabulary (many repeats), extended between calls so that the
    incremental byte cache is exercised, siblings included."""
    rng = random.Random(0)
    prop = NgramProposer(min_n=1, max_n=4)
    group = [[rng.randrange(6) for _ in range(rng.randrange(1, 8))] for _ in range(5)]
    for _ in range(60):
        for seq in group:
            seq.extend(rng.randrange(6) for _ in range(rng.randrange(0, 4)))
        k = rng.randrange(0, 7)
        contexts = [ProposalContext(seq, group, i) for i, seq in enumerate(group)]
        got = prop.propose(contexts, k)
        want = [naive(seq, k, [s for j, s in enumerate(group) if j != i and len(s) > 1], 1, 4) if k else []
                for i, seq in enumerate(group)]
        assert got == want


# --------------------------------------------------------------------------------- engine, greedy
def loop_model(scale: float, noise: float, period: int = 4, seed: int = 0) -> Transformer:
    """A target that loops: token x is followed (with logit margin ~8 * scale) by its successor in a
    cycle of ``period`` tokens, plus ``noise`` in every weight. Repetitive text by construction."""
    v = LOOP_CFG.vocab_size
    target = random_model(LOOP_CFG, seed=seed, dtype=torch.float64, std=noise)
    g = torch.Generator().manual_seed(seed)
    ids = torch.arange(v)
    succ = ids - ids % period + (ids + 1) % period
    with torch.no_grad():
        target.model.embed_tokens.weight.copy_(torch.eye(v, dtype=torch.float64)
                                               + noise * torch.randn(v, v, generator=g, dtype=torch.float64))
        head = torch.zeros(v, v, dtype=torch.float64)
        head[succ, ids] = scale
        target.lm_head.weight.add_(head)
    return target


@pytest.fixture(scope="module")
def prompts():
    """4 groups of 4 identical prompts (GRPO-style) and 8 prompts of their own."""
    rand = random_prompts(12, 16, CFG.vocab_size)
    return [p for p in rand[:4] for _ in range(4)] + rand[4:]


def run(target, prompts, policy, batch: int, n_new: int = 48, **engine_kwargs) -> RunResult:
    engine = Engine(target, policy, config=EngineConfig(max_batch=batch, max_len=16 + n_new + 40), **engine_kwargs)
    for i, p in enumerate(prompts):
        engine.add_request(p, n_new + (i % 3) * 8)
    return engine.run()


@pytest.fixture(scope="module")
def reference(tiny_target, prompts):
    return run(tiny_target, prompts, NoSD(), batch=len(prompts))


@pytest.mark.parametrize(("policy", "batch", "proposer"), [
    ("static:4_1_4", 1, NgramProposer),
    ("static:4_1_4", 3, NgramProposer),
    ("static:6_1_3", 8, lambda: NgramProposer(max_n=5)),  # verify_tokens < depth: chains of 3
    ("static:5_1_5", 24, lambda: NgramProposer(siblings=False)),
    ("elastic:10:2+static:4_1_4", 24, NgramProposer),
    ("vllm-table", 11, lambda: NgramProposer(min_n=2)),
])
def test_ngram_greedy_equals_target_alone(tiny_target, prompts, reference, policy, batch, proposer):
    result = run(tiny_target, prompts, make_policy(policy, seed=0), batch, proposer=proposer())
    assert result.outputs == reference.outputs
    sd = result.decode_events[result.decode_events["depth"] > 0]
    assert int(sd["drafted"].sum()) > 0 and int(sd["accepted"].sum()) > 0
    assert (sd["accepted"] <= sd["drafted"]).all()
    assert (sd["tokens"] <= sd["accepted"] + sd["batch_size"]).all()


def test_high_accept_length_on_repetitive_text():
    loop = loop_model(scale=1.0, noise=0.02)
    g = torch.Generator().manual_seed(0)
    loop_prompts = [torch.randint(0, LOOP_CFG.vocab_size, (10,), generator=g).tolist() for _ in range(6)]
    ref = run(loop, loop_prompts, NoSD(), batch=6, n_new=64)
    assert ref.outputs[0][4:8] == ref.outputs[0][:4]  # the target does loop
    sd = run(loop, loop_prompts, Static(SDConfig(4, 1, 4)), batch=3, n_new=64, proposer=NgramProposer(siblings=False))
    assert sd.outputs == ref.outputs
    assert sd.mean_accept_length > 4.0  # of at most 5 (4 drafts + the bonus)


def accept_per_request(result: RunResult) -> list[float]:
    """Tokens per decode iteration of each request of a one-request-at-a-time run (its decode
    rows follow its prefill row)."""
    per: list[list[float]] = []
    for kind, tokens, iterations in zip(result.events["kind"], result.events["tokens"], result.events["iterations"],
                                        strict=True):
        if kind == "prefill":
            per.append([0.0, 0.0])
        elif kind == "decode":
            per[-1][0] += tokens
            per[-1][1] += iterations
    return [t / n for t, n in per]


def test_identical_siblings_are_copied(tiny_target, prompts):
    """One request at a time: each later member of a group finds its whole greedy answer in the
    finished sibling's (aligned occurrence), which only sibling retrieval can see."""
    group = [prompts[0]] * 4
    with_sib = run(tiny_target, group, Static(SDConfig(4, 1, 4)), batch=1, proposer=NgramProposer())
    alone = run(tiny_target, group, Static(SDConfig(4, 1, 4)), batch=1, proposer=NgramProposer(siblings=False))
    assert with_sib.outputs == alone.outputs
    longest = max(alone.outputs.values(), key=len)
    assert all(out == longest[: len(out)] for out in alone.outputs.values())  # greedy: one answer, cut at 3 lengths
    first, *later = accept_per_request(with_sib)
    assert max(accept_per_request(alone)) < 2.0 and first < 2.0
    assert min(later) > 3.5  # of at most 5 (own-history matches still win ties)


class Stub:
    """A proposer returning fixed answers: nothing, or wrong tokens for some requests."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def propose(self, contexts: Sequence[ProposalContext], k: int) -> list[list[int]]:
        if self.mode == "none":
            return [[] for _ in contexts]
        if self.mode == "bad-token":
            return [[10**6] for _ in contexts]
        if self.mode == "too-long":
            return [[1] * (k + 1) for _ in contexts]
        # every other request: k copies of its last token (mostly wrong), the others nothing
        return [[c.tokens[-1]] * k if i % 2 == 0 else [] for i, c in enumerate(contexts)]


def test_no_proposal_falls_back_to_plain_steps(tiny_target, prompts, reference):
    result = run(tiny_target, prompts, Static(SDConfig(4, 1, 4)), 8, proposer=Stub("none"))
    assert result.outputs == reference.outputs
    dec = result.decode_events
    assert (dec["depth"] == 4).all() and int(dec["drafted"].sum()) == 0 and int(dec["accepted"].sum()) == 0
    assert result.mean_accept_length == 1.0
    plain = run(tiny_target, prompts, NoSD(), 8)
    assert dec["iterations"].sum() == plain.decode_events["iterations"].sum()


def test_requests_without_proposals_share_a_batch_with_drafting_ones(tiny_target, prompts, reference):
    result = run(tiny_target, prompts, Static(SDConfig(3, 1, 3)), 7, proposer=Stub("some"))
    assert result.outputs == reference.outputs
    sd = result.decode_events
    assert int(sd["drafted"].sum()) > 0


@pytest.mark.parametrize(("mode", "message"), [("bad-token", "vocabulary"), ("too-long", "at most")])
def test_bad_proposals_are_refused(tiny_target, prompts, mode, message):
    with pytest.raises(ValueError, match=message):
        run(tiny_target, prompts[:2], Static(SDConfig(3, 1, 3)), 2, proposer=Stub(mode))


def test_trees_and_two_proposers_are_refused(tiny_target, prompts):
    with pytest.raises(ValueError, match="chains"):
        run(tiny_target, prompts[:2], Static(SDConfig(3, 2, 4)), 2, proposer=NgramProposer())
    with pytest.raises(ValueError, match="not both"):
        Engine(tiny_target, NoSD(), OracleDrafter(tiny_target), EngineConfig(max_batch=2, max_len=40),
               proposer=NgramProposer())


# ------------------------------------------------------------------------------- sampling, exact
V = 8


def rule_draws(n: int, seed: int, drafts: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple]:
    """``n`` verifications of the deterministic chain root -> d1 -> d2 (one-hot q, as the engine
    verifies retrieved tokens). Returns the first emitted tokens, the second emitted tokens of the
    verifications that accepted d1, the accept lengths and the target's p(x1), p(x2 | x1)."""
    g = torch.Generator().manual_seed(seed)
    p0 = (torch.randn(V, generator=g, dtype=torch.float64) * 1.5).softmax(-1)
    p1 = (torch.randn(V, V, generator=g, dtype=torch.float64) * 1.5).softmax(-1)  # p(x2 | x1)
    d1, d2 = drafts
    tokens = torch.tensor([0, d1, d2]).expand(n, 3).contiguous()
    tree = make_tree(tokens, torch.tensor([-1, 0, 1]).expand(n, 3).contiguous())
    p = torch.stack([p0, p1[d1], p1[d2]]).expand(n, 3, V)  # (row 2: the bonus after d2, not checked)
    q = torch.zeros(n, 3, V, dtype=torch.float64).scatter_(-1, tokens[..., None], 1.0)
    u = torch.rand(n, 3, generator=g, dtype=torch.float64)
    ub = torch.rand(n, generator=g, dtype=torch.float64)
    _, length, nxt = verify.tree_accept_reference(p, q, tree.tokens, tree.parents, u, ub, 2)
    first = torch.where(length >= 1, torch.full_like(nxt, d1), nxt)
    second = torch.where(length >= 2, torch.full_like(nxt, d2), nxt)
    return first, second[length >= 1], length, (p0, p1)


def test_point_mass_rule_matches_target():
    """Deterministic (one-hot) drafts: the first token follows p0 and, after an accepted d1, the
    second follows p(. | d1); a sampler that skips the residual is rejected."""
    d1 = 0
    first, second, length, (p0, p1) = rule_draws(40_000, 0, drafts=(d1, 3))
    assert chi2_pvalue(torch.bincount(first, minlength=V), p0) > ALPHA_OK
    assert chi2_pvalue(torch.bincount(second, minlength=V), p1[d1]) > ALPHA_OK
    assert 0.05 < float((length >= 1).double().mean()) < 0.95  # both branches exercised


def test_point_mass_rule_test_rejects_broken_residual(monkeypatch):
    monkeypatch.setattr(verify, "residual", lambda r, q: r / r.sum(-1, keepdim=True))
    first, _, _, (p0, _) = rule_draws(40_000, 0, drafts=(0, 3))
    assert chi2_pvalue(torch.bincount(first, minlength=V), p0) < ALPHA_BROKEN


LOOP_PROMPT = [40, 41, 42, 43, 40, 41]
DRAWS = 10_000
SAMPLING = {"temperature": 0.9, "top_p": 0.95}


@pytest.fixture(scope="module")
def soft_loop():
    return loop_model(scale=0.8, noise=0.05, seed=3)


@pytest.fixture(scope="module")
def loop_marginals(soft_loop):
    """p(x2) and p(x3) under the target alone, by enumerating all x1 and (x1, x2)."""
    return two_token_marginals(soft_loop, LOOP_PROMPT, **SAMPLING)


def ngram_draws(target, siblings: bool) -> tuple[torch.Tensor, torch.Tensor, float]:
    engine = Engine(target, Static(SDConfig(3, 1, 3)), config=EngineConfig(max_batch=2_500, max_len=12, max_verify=4),
                    proposer=NgramProposer(siblings=siblings))
    for seed in range(DRAWS):
        engine.add_request(LOOP_PROMPT, 3, SamplingParams(seed=seed, **SAMPLING))
    result = engine.run()
    toks = torch.tensor(list(result.outputs.values()))
    sd = result.decode_events[result.decode_events["depth"] > 0]
    return toks[:, 1], toks[:, 2], float(sd["accepted"].sum() / sd["batch_size"].sum())


@pytest.mark.parametrize("siblings", [False, True])
def test_engine_ngram_sampling_matches_target(soft_loop, loop_marginals, siblings):
    x2, x3, accepted = ngram_draws(soft_loop, siblings)
    assert chi2_pvalue(torch.bincount(x2, minlength=LOOP_CFG.vocab_size), loop_marginals[0]) > ALPHA_OK
    assert chi2_pvalue(torch.bincount(x3, minlength=LOOP_CFG.vocab_size), loop_marginals[1]) > ALPHA_OK
    assert accepted > 0.3  # retrieved drafts produced many of these tokens


def test_engine_ngram_test_rejects_broken_residual(soft_loop, loop_marginals, monkeypatch):
    monkeypatch.setattr(verify, "residual", lambda r, q: r / r.sum(-1, keepdim=True))
    x2, _, _ = ngram_draws(soft_loop, siblings=False)
    assert chi2_pvalue(torch.bincount(x2, minlength=LOOP_CFG.vocab_size), loop_marginals[0]) < ALPHA_BROKEN


def test_no_sd_config_with_proposer_is_plain(tiny_target, prompts, reference):
    result = run(tiny_target, prompts, Static(NO_SD), 5, proposer=NgramProposer())
    assert result.outputs == reference.outputs
    assert (result.decode_events["depth"] == 0).all()

"""The n-gram proposer only drafts from whole-token matches (tltreal.spec_decode.proposers.ngram).

The proposer searches packed 8-byte token ids with ``bytes.rfind``, so the bytes of the request's
last ``n`` tokens can also turn up straddling two tokens: token 1 is ``01 00 00 00 00 00 00 00``, and
so are bytes 1..8 of ``256, 0``. Such a hit is not an occurrence of the n-gram at all; drafting from
it proposes tokens that never followed the pattern (wasted verification), and with real vocabularies
(ids above 255) these byte coincidences are common. What must hold: every proposal continues right
after a real, token-aligned occurrence of the last ``n`` tokens, in the request or in a sibling, and
a misaligned hit neither produces a proposal nor hides an earlier aligned occurrence.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Sequence

import pytest

from tltreal.spec_decode.proposers import NgramProposer, ProposalContext
from tltreal.spec_decode.proposers.ngram import extend_periodic

#: Ids whose little-endian bytes overlap each other's at offsets that are not multiples of 8.
COLLIDING = (0, 1, 2, 256, 257, 512, 65536, 2**40, 2**40 + 1, 2**56)


@pytest.mark.parametrize(("tokens", "k", "expected"), [
    ([256, 0, 5, 1], 3, []),  # token 1's bytes appear only across "256, 0": no occurrence, no proposal
    ([1, 7, 256, 0, 5, 1], 3, [7, 256, 0]),  # the later byte hit is misaligned: the earlier real one wins
    ([2**56, 0, 9, 2**48], 2, []),  # 2**48's bytes straddle "2**56, 0"
])
def test_own_matches_are_whole_tokens(tokens: list[int], k: int, expected: list[int]) -> None:
    assert NgramProposer(siblings=False).propose([ProposalContext(tokens)], k) == [expected]


def test_sibling_matches_are_whole_tokens() -> None:
    own, sibling = [9, 1], [256, 0, 4, 4]  # the sibling holds token 1's bytes only across "256, 0"
    group = [own, sibling]
    assert NgramProposer().propose([ProposalContext(own, group, 0)], 3) == [[]]
    sibling = [256, 0, 1, 4, 4]  # now a real "1" follows the fake one
    group = [own, sibling]
    assert NgramProposer().propose([ProposalContext(own, group, 0)], 3) == [[4, 4]]


def real_continuations(tokens: Sequence[int], siblings: Sequence[Sequence[int]], k: int,
                       ns: range) -> set[tuple[int, ...]]:
    """Every draft that continues right after a token-aligned occurrence of the last ``n`` tokens."""
    out: set[tuple[int, ...]] = set()
    for n in ns:
        if n > len(tokens) - 1:
            continue
        pattern = list(tokens[len(tokens) - n:])
        for p in range(len(tokens) - n):  # occurrences ending before the last token
            if list(tokens[p: p + n]) == pattern:
                out.add(tuple(extend_periodic(tokens, p + n, k)))
        for sib in siblings:
            for p in range(len(sib) - n):
                if list(sib[p: p + n]) == pattern:
                    out.add(tuple(sib[p + n: p + n + k]))
    return out


def test_every_proposal_continues_a_real_occurrence() -> None:
    """Random groups over ids whose bytes collide across token boundaries: a proposal is always the
    continuation of a real occurrence, and a request with a real occurrence always gets one."""
    rng = random.Random(0)
    ns = range(1, 4)
    proposer = NgramProposer(min_n=ns.start, max_n=ns.stop - 1)
    misaligned_only = 0
    for _ in range(400):
        group = [[rng.choice(COLLIDING) for _ in range(rng.randrange(2, 12))] for _ in range(3)]
        k = rng.randrange(1, 5)
        drafts = proposer.propose([ProposalContext(seq, group, i) for i, seq in enumerate(group)], k)
        for i, (seq, draft) in enumerate(zip(group, drafts, strict=True)):
            siblings = [s for j, s in enumerate(group) if j != i and len(s) > 1]
            real = real_continuations(seq, siblings, k, ns)
            if draft:
                assert tuple(draft) in real, (seq, siblings, draft)
            else:
                assert not real, (seq, siblings)
            packed_hit = any(_pack(seq[-1:]) in _pack(s) for s in [seq[:-1], *siblings])
            misaligned_only += packed_hit and not real
    assert misaligned_only > 0  # the sample did contain byte hits that are no occurrence


def _pack(seq: Sequence[int]) -> bytes:
    """``seq`` as the proposer searches it: packed 8-byte ids."""
    return array("q", seq).tobytes()

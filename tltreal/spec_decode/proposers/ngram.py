"""TLT-Base's model-free drafter: n-gram retrieval over the request's own tokens and its siblings'.

Reasoning rollouts repeat themselves: a response re-quotes its prompt, loops over the same step
pattern, and GRPO's G responses to one prompt share much of their text. So the tokens that followed
the last occurrence of the current suffix are a cheap, often right guess of what comes next. This
proposer costs no GPU time and no model: a byte search per request per iteration.

Rule, per request (``k`` draft tokens at most):

1. For ``n`` from ``max_n`` down to ``min_n`` (longest match first: a longer match is more
   specific), take the request's last ``n`` tokens as the pattern.
2. Look for the pattern's last earlier occurrence in the request's own prompt + output (an
   occurrence must end before the last token, so something follows it). The most recent occurrence
   wins because loops in reasoning are local. The draft is what followed it; where that runs into
   the end of the sequence, the copy continues from the draft itself, so a loop of period ``p < k``
   still yields ``k`` tokens (a sequence ``a b a b`` proposes ``a b a b ...``).
3. Failing that, look in the sibling responses (the other requests of its group, at most
   ``max_siblings`` of them, in admission order; prompt + output, so a match can run from the
   shared prompt into a sibling's answer). Siblings answer the same prompt roughly in step, so the
   last occurrence ending at or before the request's own length wins (for an identical sibling
   that is the aligned position, whose continuation is exactly right); failing that, the last
   occurrence anywhere. The draft is what followed, up to the sibling's current end.
4. No match at any ``n``: no proposal (the engine decodes that request plainly).

vLLM's ``ngram`` method (v1 ``NgramProposer``) differs in three ways: it takes the *earliest*
occurrence of the longest match, does not extend through the draft, and has no siblings.

Proposals are a deterministic function of tokens already emitted (the request's and its
siblings'), never of the request's own future random draws, so verifying them as point-mass
drafts keeps sampling exact (:mod:`tltreal.spec_decode.verify`). With siblings, a request's *sampled* tokens
depend on how far its siblings had got, i.e. on the batch composition (still exactly the target's
distribution); greedy output never does.

Search cost. Each sequence is kept as packed 8-byte token ids, extended incrementally by the new
tokens of each call (a sequence's bytes are built once, not per iteration) and searched with
``bytes.rfind``; entries of sequences that no call mentions any more are dropped.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from tltreal.spec_decode.proposers.base import ProposalContext

_ITEM = 8  # bytes per packed token id (array typecode "q")


@dataclass
class _Packed:
    """One sequence's tokens as packed bytes; ``seq`` is held so its ``id`` stays unique."""

    seq: Sequence[int]
    data: bytearray


class NgramProposer:
    """Prompt-lookup / n-gram retrieval drafts (module docstring); a :class:`TokenProposer`."""

    def __init__(self, *, min_n: int = 1, max_n: int = 3, siblings: bool = True, max_siblings: int = 16) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        if max_siblings < 0:
            raise ValueError(f"max_siblings must be >= 0, got {max_siblings}")
        self.min_n, self.max_n = min_n, max_n
        self.siblings, self.max_siblings = siblings, max_siblings
        self._packed: dict[int, _Packed] = {}
        self._seen: dict[int, _Packed] = {}

    def propose(self, contexts: Sequence[ProposalContext], k: int) -> list[list[int]]:
        """At most ``k`` draft tokens per context (empty list: no match)."""
        self._seen = {}
        try:
            return [self._propose_one(c, k) if k > 0 else [] for c in contexts]
        finally:
            self._packed = self._seen  # forget sequences no context mentions any more

    def _propose_one(self, ctx: ProposalContext, k: int) -> list[int]:
        tokens = ctx.tokens
        own = self._bytes(tokens)
        sibs = self._sibling_seqs(ctx)
        for n in range(min(self.max_n, len(tokens) - 1), self.min_n - 1, -1):
            pattern = own[len(own) - n * _ITEM:]
            start = last_match(own, pattern, len(own) - _ITEM)
            if start >= 0:
                return extend_periodic(tokens, start + n, k)
            for sib in sibs:
                data = self._bytes(sib)
                # siblings run roughly in step: prefer the last occurrence not beyond our own position
                aligned = min(len(sib) - 1, len(tokens)) * _ITEM
                start = last_match(data, pattern, aligned)
                if start < 0:
                    start = last_match(data, pattern, len(data) - _ITEM)
                if start >= 0:
                    c = start + n
                    return list(sib[c: c + k])
        return []

    def _sibling_seqs(self, ctx: ProposalContext) -> list[Sequence[int]]:
        """The first ``max_siblings`` other members of the group (lazily: a group may be large)."""
        out: list[Sequence[int]] = []
        if not self.siblings:
            return out
        for i, seq in enumerate(ctx.group):
            if len(out) >= self.max_siblings:
                break
            if i != ctx.member and len(seq) > 1:
                out.append(seq)
        return out

    def _bytes(self, seq: Sequence[int]) -> bytes | bytearray:
        """``seq`` packed, from the cache when only new tokens were appended since the last call."""
        key = id(seq)
        entry = self._seen.get(key) or self._packed.get(key)
        n_old = len(entry.data) // _ITEM if entry is not None else 0
        if entry is None or entry.seq is not seq or n_old > len(seq) or (n_old and seq[n_old - 1] != _last(entry)):
            entry = _Packed(seq, bytearray(array("q", seq).tobytes()))
        elif n_old < len(seq):
            entry.data.extend(array("q", seq[n_old:]).tobytes())
        self._seen[key] = entry
        return entry.data


def _last(entry: _Packed) -> int:
    return array("q", entry.data[-_ITEM:])[0]


def last_match(data: bytes | bytearray, pattern: bytes | bytearray, end: int) -> int:
    """Token index of the last occurrence of ``pattern`` lying wholly in ``data[:end]`` (byte
    offsets; only occurrences starting on a token boundary count), or -1."""
    while True:
        i = data.rfind(pattern, 0, end)
        if i < 0:
            return -1
        if i % _ITEM == 0:
            return i // _ITEM
        end = i + len(pattern) - 1  # a misaligned hit: look for occurrences starting before it


def extend_periodic(tokens: Sequence[int], start: int, k: int) -> list[int]:
    """``k`` tokens copied from ``tokens[start:]``, continuing from the copy itself past the end
    (``start < len(tokens)``): the continuation a repeat of period ``len(tokens) - start`` predicts."""
    out: list[int] = []
    n = len(tokens)
    for i in range(start, start + k):
        out.append(tokens[i] if i < n else out[i - n])
    return out

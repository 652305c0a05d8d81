"""Triton kernels vs their PyTorch references, under TRITON_INTERPRET=1 on CPU."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tltreal.spec_decode.kernels import compact_kv_reference  # noqa: E402
from tltreal.spec_decode.kernels.accept import tree_accept_triton  # noqa: E402
from tltreal.spec_decode.kernels.compact import compact_kv_triton  # noqa: E402
from tltreal.spec_decode.tree_search import select_tree  # noqa: E402
from tltreal.spec_decode.verify import tree_accept_reference  # noqa: E402


def random_tree(gen: torch.Generator, b: int, n: int, k: int, vocab: int):
    """A random ancestor-closed tree in verify order, built like the drafter builds its trees."""
    pool = k + 3 * k * k
    scores = -torch.rand(b, pool, generator=gen).cumsum(1)  # decreasing: parents outrank children
    parents = torch.full((b, pool), -1, dtype=torch.long)
    for i in range(k, pool):
        parents[:, i] = torch.randint(0, i, (b,), generator=gen)
    tokens = torch.randint(0, vocab, (b, pool), generator=gen)
    root = torch.randint(0, vocab, (b,), generator=gen)
    return select_tree(root, tokens, scores, parents, n)


@pytest.mark.parametrize(("b", "n", "k", "vocab", "one_hot"), [
    (1, 1, 1, 7, False), (3, 6, 2, 33, False), (4, 12, 3, 100, True), (2, 4, 1, 64, False),
])
def test_tree_accept_kernel_matches_reference(b, n, k, vocab, one_hot):
    gen = torch.Generator().manual_seed(b * 100 + n)
    tree = random_tree(gen, b, n, k, vocab)
    # Peaky target distributions so that acceptances actually happen.
    logits = torch.randn(b, n + 1, vocab, generator=gen) * 3
    p = logits.softmax(-1)
    if one_hot:
        q = torch.nn.functional.one_hot(tree.tokens, vocab).float()
        # Greedy form: one-hot targets that agree with some drafts, so paths get long.
        p = torch.zeros_like(p)
        p.scatter_(2, torch.cat([tree.tokens[:, 1:], tree.tokens[:, :1]], 1)[..., None], 1.0)
    else:
        q = (torch.randn(b, n + 1, vocab, generator=gen) * 3).softmax(-1)
    u = torch.rand(b, n + 1, generator=gen)
    ub = torch.rand(b, generator=gen)
    depth = tree.max_depth
    ref = tree_accept_reference(p, q, tree.tokens, tree.parents, u, ub, depth)
    got = tree_accept_triton(p, q, tree.tokens, tree.parents, u, ub, depth)
    for r, g in zip(ref, got, strict=True):
        assert torch.equal(r, g)


def test_tree_accept_kernel_accepts_and_rejects():
    """Guard against a vacuous comparison: the inputs above must produce both outcomes."""
    gen = torch.Generator().manual_seed(7)
    tree = random_tree(gen, 8, 6, 2, 5)
    p = (torch.randn(8, 7, 5, generator=gen) * 2).softmax(-1)
    q = torch.full_like(p, 0.2)
    _, length, _ = tree_accept_triton(p, q, tree.tokens, tree.parents, torch.rand(8, 7, generator=gen),
                                      torch.rand(8, generator=gen), tree.max_depth)
    assert int(length.max()) >= 1 and int(length.min()) == 0


@pytest.mark.parametrize(("layers", "slots", "heads", "plen", "dim", "b", "dtype"), [
    (2, 4, 2, 24, 16, 3, torch.float32), (1, 3, 1, 40, 48, 2, torch.float64), (3, 5, 3, 16, 8, 5, torch.float16),
])
def test_compact_kernel_matches_reference(layers, slots, heads, plen, dim, b, dtype):
    gen = torch.Generator().manual_seed(layers + slots)
    cache = torch.randn(layers, slots, heads, plen, dim, generator=gen).to(dtype)
    slot_ids = torch.randperm(slots, generator=gen)[:b]
    base = torch.randint(0, 6, (b,), generator=gen)
    maxp = 5
    src = torch.full((b, maxp), -1, dtype=torch.long)
    counts = torch.randint(1, maxp + 1, (b,), generator=gen)
    for i in range(b):
        picks = torch.randperm(9, generator=gen)[: int(counts[i]) - 1] + 1
        src[i, : counts[i]] = torch.cat([torch.zeros(1, dtype=torch.long), picks.sort().values])
    expected = cache.clone()
    compact_kv_reference(expected, slot_ids, base, src, counts)
    got = cache.clone()
    compact_kv_triton(got, slot_ids, base, src, counts)
    assert torch.equal(got, expected)
    assert not torch.equal(expected, cache)  # something actually moved


def test_triton_is_within_the_verified_range():
    """The `real` extra states the Triton range these kernels were verified on (pinned and newest);
    the version this run imports must lie in it, and is printed so a log shows which one ran."""
    import tomllib

    import triton
    from packaging.requirements import Requirement

    from conftest import REPO

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["real"]
    spec = next(Requirement(r).specifier for r in extra if Requirement(r).name == "triton")
    print(f"\ntriton {triton.__version__} from {triton.__file__}; verified range {spec}")
    assert spec.contains(triton.__version__), f"triton {triton.__version__} is outside {spec}"

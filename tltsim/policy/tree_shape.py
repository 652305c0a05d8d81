"""Valid EAGLE-2 draft-tree shapes, including TLT's ``8_4_48`` arm.

An EAGLE-2 tree with ``depth`` drafting steps and ``topk`` children per step keeps ``topk`` nodes
after the first step and expands each of the ``topk`` frontier nodes into ``topk`` children at every
later step, so it holds up to ``topk + (depth - 1) * topk**2`` draft nodes; the best
``verify_tokens`` of them are verified (``8_4_48`` picks 48 of 116 nodes).

``SDConfig.__post_init__`` in ``base.py`` currently caps ``verify_tokens`` at ``depth * topk``,
which rejects TLT's published arm ``8_4_48``. Until that bound is relaxed there (reported to the
owner of ``base.py``), :func:`tree_config` builds configs that are valid EAGLE-2 trees but exceed
that cap by setting the frozen fields directly; every other check stays with ``SDConfig``. Once
``base.py`` accepts these shapes the fallback is never taken.
"""

from __future__ import annotations

from tltsim.policy.base import SDConfig


def max_tree_nodes(depth: int, topk: int) -> int:
    """Draft nodes an EAGLE-2 tree of this depth and top-k can offer for verification."""
    return topk + (depth - 1) * topk * topk if depth > 0 else 0


def tree_config(depth: int, topk: int, verify_tokens: int) -> SDConfig:
    """``SDConfig(depth, topk, verify_tokens)``, accepting every shape a real EAGLE-2 tree allows."""
    try:
        return SDConfig(depth, topk, verify_tokens)
    except ValueError:
        if not (depth > 0 and topk >= 1 and 1 <= verify_tokens <= max_tree_nodes(depth, topk)):
            raise
    config = object.__new__(SDConfig)
    object.__setattr__(config, "depth", depth)
    object.__setattr__(config, "topk", topk)
    object.__setattr__(config, "verify_tokens", verify_tokens)
    return config


def parse_config(text: str) -> SDConfig:
    """Like ``SDConfig.parse`` (``"8_4_32"`` or ``"off"``), with the EAGLE-2 bound of :func:`tree_config`."""
    config_or_none = _parse_tree_name(text)
    return config_or_none if config_or_none is not None else SDConfig.parse(text)


def _parse_tree_name(text: str) -> SDConfig | None:
    parts = text.strip().split("_")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    depth, topk, verify = (int(p) for p in parts)
    if depth == 0:
        return None
    return tree_config(depth, topk, verify)

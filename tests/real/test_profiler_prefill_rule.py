"""The native profiler writes the prefill rule the engine follows (``padded_attention``,
:data:`tltreal.validation.profiler.PREFILL_RULE`), and the engine does what that rule assumes: a
prefill pass of mixed lengths computes all but attention on its real tokens only (a ``keep`` mask to
the target), a uniform one pads nothing."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def test_the_profiler_writes_the_padded_attention_prefill_rule(tiny_target) -> None:
    import pandas as pd

    from tltcore.cost import TableCostModel
    from tltreal.validation.profiler import profile_metadata

    meta = profile_metadata(tiny_target, command="test", model_fingerprint="tiny")
    assert meta["prefill_rule"] == "padded_attention" and meta["context_rule"] == "max"
    rows = pd.DataFrame([{"kind": k, "batch_size": 1, "context": 1, "seconds": 1.0} for k in ("decode", "prefill")])
    assert TableCostModel.from_frame(rows, meta).target_prefill_rule == "padded_attention"


@pytest.mark.parametrize(("lengths", "skips"), [([40] + [3] * 3, True), ([12] * 4, False)])
def test_a_mixed_prefill_pass_computes_the_real_tokens_only(tiny_target, lengths, skips) -> None:
    from tltcore.policy.base import NoSD
    from tltreal.engine.engine import Engine
    from tltreal.engine.engine_config import EngineConfig

    seen: list[bool] = []
    forward = tiny_target.forward

    def spy(*args, keep=None, **kwargs):
        seen.append(keep is not None and not bool(keep.all()))
        return forward(*args, keep=keep, **kwargs)

    engine = Engine(tiny_target, NoSD(), None, EngineConfig(max_batch=8, max_len=64))
    for i, n in enumerate(lengths):
        engine.add_request([(i + j) % 200 + 1 for j in range(n)], 2)
    engine.start()
    tiny_target.forward = spy
    try:
        engine.iterate()  # the admission prefill, then one decode
    finally:
        del tiny_target.forward
    assert seen[0] is skips

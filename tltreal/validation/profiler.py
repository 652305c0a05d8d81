"""Profiler: measure the native engine's iteration latencies and write the simulator's cost table.

For every batch size ``b`` and context ``c`` of the grid it runs ``b`` identical-length requests
through the engine and times, from the engine's own event log:

* ``decode``: plain iterations (no SD) at context ~``c``;
* ``sd`` per draft shape: whole SD iterations (drafting, verification, acceptance, compaction) with
  the :class:`~tltreal.spec_decode.proposers.pinned.PinnedDrafter` (a real drafter's compute, acceptance from the
  acceptance model's positional table), prompts sized so the timed iterations sit around ``c``;
* ``prefill``: the admission prefill of ``b`` prompts, and ``drafter_prefill``: the drafter's
  catch-up over them when SD switches on (both gridded on ``prefill_lengths`` tokens per request).

Each point is the median of ``iterations`` timed iterations after ``warmup`` untimed ones. The table
is written as Parquet (:func:`tltcore.cost.write_table`) with the device, the model fingerprint, TP 1,
the dtype, the ``max`` context rule (the slab engine pads attention to the longest request), the
``padded_attention`` prefill rule (:data:`PREFILL_RULE`), versions, date and the command, so
:class:`tltcore.cost.TableCostModel` can refuse it for another model or device.
"""

from __future__ import annotations

import platform
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import torch

from tltcore.acceptance import eagle_tree_reach
from tltcore.cost import table_frame
from tltcore.policy.base import NoSD, SDConfig, Static
from tltcore.policy.elastic import Elastic
from tltreal.engine.engine import Engine
from tltreal.engine.engine_config import EngineConfig
from tltreal.model.transformer import Transformer
from tltreal.spec_decode.proposers import PinnedDrafter, random_drafter
from tltreal.validation.clock import engine_class

PROFILE_DEVICE = "cpu-calibrated"


def device_of(target: Transformer) -> torch.device:
    """The device ``target``'s weights live on (the engine allocates its caches there; a drafter built
    beside it is moved there too)."""
    return target.model.embed_tokens.weight.device


@dataclass(frozen=True)
class ProfileGrid:
    """What to measure. ``contexts`` should cover the contexts the simulated workload reaches."""

    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    contexts: tuple[int, ...] = (64, 256, 1024)
    prefill_lengths: tuple[int, ...] = (1, 8, 64, 512)  # prompt (or catch-up) tokens per request
    sd_configs: tuple[SDConfig, ...] = ()
    iterations: int = 5
    warmup: int = 2
    decode_warmup: int = 10  # a fresh engine's first plain iterations run slow (allocator warm-up); cheap to skip
    repeats: int = 3  # engines per point; each quantity is the median over them
    clock: str = "wall"  # "wall" or "thread" (tltreal.validation.clock)
    # The engine every point runs on: None sizes it to the point (b slots, just the tokens it needs).
    # tlt validate sizes it as the replay's engine (its max batch and longest sequence): a KV slab of
    # 32 slots x ~1,400 positions made decode iterations 2-4% slower than a point-sized one on this
    # CPU (batch 8-32; tltreal.validation.validate.profile_grid), a bias the table then carried.
    engine_max_batch: int | None = None
    engine_max_len: int | None = None


def _median_decode(engine: Engine, n: int) -> float:
    """Median duration of the last ``n`` decode rows."""
    ev = engine.log.frame()
    dec = ev[ev["kind"] == "decode"]
    return float(statistics.median((dec["t_end"] - dec["t_start"]).to_numpy()[-n:]))


def _prefill_seconds(engine: Engine) -> float:
    ev = engine.log.frame()
    pre = ev[ev["kind"] == "prefill"]
    return float((pre["t_end"] - pre["t_start"]).iloc[0])


def _prompts(target: Transformer, b: int, length: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, target.cfg.vocab_size, (length,), generator=g).tolist() for _ in range(b)]


def _engine(target: Transformer, policy, drafter, prompts: list[list[int]], new_tokens: int, clock: str = "wall",
            size: tuple[int | None, int | None] = (None, None)) -> Engine:
    """An engine holding ``prompts``, each to generate ``new_tokens``, timed on ``clock``; ``size``:
    its (max batch, max length) at least (:attr:`ProfileGrid.engine_max_batch`), None: the point's."""
    # catch_up: the switch cost profiled is the drafter's catch-up (the validation replays switch so)
    slots, length = size
    cfg = EngineConfig(max_batch=max(len(prompts), slots or 0),
                       max_len=max(len(prompts[0]) + new_tokens + 2, length or 0), switch="catch_up")
    engine = engine_class(clock)(target, policy, drafter, cfg)
    for p in prompts:
        engine.add_request(p, new_tokens)
    return engine


def _step(engine: Engine, iterations: int) -> Engine:
    """Start the engine's step and run ``iterations`` iterations (admission + one decode each)."""
    engine.start()
    for _ in range(iterations):
        engine.iterate()
    return engine


def _run(target: Transformer, policy, drafter, prompts: list[list[int]], new_tokens: int, iterations: int,
         clock: str = "wall", size: tuple[int | None, int | None] = (None, None)) -> Engine:
    return _step(_engine(target, policy, drafter, prompts, new_tokens, clock, size), iterations)


def _size(grid: ProfileGrid) -> tuple[int | None, int | None]:
    return grid.engine_max_batch, grid.engine_max_len


class _ReferenceLookup:
    """``truth(slot)`` for the pinned drafter: each request's reference sequence and root position."""

    def __init__(self, sequences: dict[int, list[int]]) -> None:
        self.sequences = sequences
        self.engine: Engine | None = None

    def __call__(self, slot: int) -> tuple[list[int], int]:
        assert self.engine is not None
        req = self.engine.request_in_slot(slot)
        return self.sequences[req.rid], req.cache_len


def _decode_point(target: Transformer, b: int, c: int, grid: ProfileGrid, seed: int) -> float:
    """Decode seconds with the timed iterations at context ~c."""
    steps = grid.decode_warmup + grid.iterations
    prompt_len = max(1, round(c - 1 - (grid.decode_warmup + grid.iterations / 2)))
    engine = _run(target, NoSD(), None, _prompts(target, b, prompt_len, seed), steps + 2, steps, grid.clock,
                  _size(grid))
    return _median_decode(engine, grid.iterations)


def _prefill_points(target: Transformer, b: int, length: int, seed: int, clock: str = "wall",
                    size: tuple[int | None, int | None] = (None, None)) -> tuple[float, float]:
    """(target prefill seconds, drafter catch-up seconds) of ``b`` prompts of ``length`` tokens: the
    catch-up is the elastic switch's, over every prompt token and the first emitted one."""
    prompts = _prompts(target, b, length, seed)
    lookup = _ReferenceLookup({i: [*p, 0, 0] for i, p in enumerate(prompts)})
    inner = random_drafter(target, seed=seed + 1).to(device_of(target))
    drafter = PinnedDrafter(inner, np.full((1, 1), 0.5), lookup, seed=seed)
    switch_at_once = Elastic(Static(SDConfig(1, 1, 1)), threshold=b, consecutive=1)
    engine = lookup.engine = _engine(target, switch_at_once, drafter, prompts, 3, clock, size)
    _step(engine, 1)
    ev = engine.log.frame()
    cu = ev[ev["kind"] == "catch_up"]
    return _prefill_seconds(engine), float((cu["t_end"] - cu["t_start"]).iloc[0])


def _sd_points(target: Transformer, b: int, c: int, grid: ProfileGrid, probs: dict[SDConfig, np.ndarray],
               seed: int) -> dict[SDConfig, float]:
    """Per draft shape, SD iteration seconds with timed iterations around context ~c (acceptance as the
    pinned table says, on the target's real greedy continuation)."""
    steps = grid.warmup + grid.iterations
    typical = max(_expected_accept(p, cfg) for cfg, p in probs.items())
    prompt_len = max(1, round(c - 1 - typical * (grid.warmup + grid.iterations / 2)))
    new_tokens = (steps + 2) * (max(cfg.depth for cfg in probs) + 1)
    prompts = _prompts(target, b, prompt_len, seed)
    reference = _run(target, NoSD(), None, prompts, new_tokens, new_tokens + 1)
    sequences = {rid: prompts[rid] + out for rid, out in reference.finish().outputs.items()}
    seconds = {}
    for config, table in probs.items():
        lookup = _ReferenceLookup(sequences)
        drafter = PinnedDrafter(random_drafter(target, seed=seed + 1).to(device_of(target)), table, lookup, seed=seed)
        engine = lookup.engine = _engine(target, Static(config), drafter, prompts, new_tokens, grid.clock, _size(grid))
        _step(engine, steps)
        seconds[config] = _median_decode(engine, grid.iterations)
    return seconds


def _expected_accept(probs: np.ndarray, config: SDConfig) -> float:
    """Expected accept length of ``config`` under the pinned drafter's positional table."""
    rows = probs[np.minimum(np.arange(config.depth), len(probs) - 1)][:, : config.topk]
    return 1.0 + float(eagle_tree_reach(rows, config.depth, config.topk, config.verify_tokens).sum())


@dataclass(frozen=True)
class ProfilePoint:
    """One unit of a profile: the prefill (and drafter catch-up) of ``batch_size`` prompts of ``size``
    tokens (``kind`` ``prefill``), or decode and every SD shape at ``batch_size`` requests of context
    ~``size`` (``kind`` ``decode``). A validation interleaves these with its real runs
    (:mod:`tltreal.validation.rounds`), so each is a few seconds of work."""

    kind: str  # "prefill" or "decode"
    batch_size: int
    size: int  # prompt tokens per request (prefill) or context (decode)


def profile_points(grid: ProfileGrid) -> list[ProfilePoint]:
    """The grid's points in the table's row order: per batch size, every prefill length, then every
    context."""
    return [p for b in grid.batch_sizes
            for p in [*(ProfilePoint("prefill", b, n) for n in grid.prefill_lengths),
                      *(ProfilePoint("decode", b, c) for c in grid.contexts)]]


def grid_points(grid: ProfileGrid) -> int:
    """How many points :func:`profile_native` measures (each calls its ``on_point`` once): per batch
    size, every prefill length and every context."""
    return len(profile_points(grid))


def profile_warmup(target: Transformer, grid: ProfileGrid, probs: dict[SDConfig, np.ndarray], seed: int = 0) -> None:
    """One untimed decode point and one SD point: a process's first runs are slower."""
    _decode_point(target, grid.batch_sizes[0], grid.contexts[0], grid, seed)
    if probs:
        _sd_points(target, grid.batch_sizes[0], grid.contexts[0], grid, probs, seed)


def measure_point(target: Transformer, grid: ProfileGrid, point: ProfilePoint, probs: dict[SDConfig, np.ndarray],
                  seed: int = 0) -> list[dict]:
    """The cost-table rows of one :class:`ProfilePoint`, each quantity the median over
    ``grid.repeats`` fresh engines (different prompts)."""
    b = point.batch_size
    if point.kind == "prefill":
        runs = [_prefill_points(target, b, point.size, seed + r, grid.clock, _size(grid))
                for r in range(grid.repeats)]
        return [{"kind": kind, "batch_size": b, "context": point.size,
                 "seconds": statistics.median(x[i] for x in runs)}
                for i, kind in enumerate(("prefill", "drafter_prefill"))]
    c = point.size
    rows = [{"kind": "decode", "batch_size": b, "context": c,
             "seconds": statistics.median(_decode_point(target, b, c, grid, seed + r) for r in range(grid.repeats))}]
    if probs:
        sd = [_sd_points(target, b, c, grid, probs, seed + r) for r in range(grid.repeats)]
        rows += [{"kind": "sd", "batch_size": b, "context": c, "depth": config.depth, "topk": config.topk,
                  "verify_tokens": config.verify_tokens, "seconds": statistics.median(x[config] for x in sd)}
                 for config in probs]
    return rows


def profile_native(target: Transformer, grid: ProfileGrid, *, position_probs: dict[SDConfig, np.ndarray],
                   seed: int = 0, on_point: Callable[[int], None] | None = None) -> pd.DataFrame:
    """The cost-table rows (see module docstring). ``position_probs[config]`` is the pinned drafter's
    table for each SD shape of the grid. Every quantity is the median over ``grid.repeats`` fresh
    engines (different prompts). ``on_point(1)`` is called after each of the :func:`grid_points`
    points (a profile takes minutes: progress)."""
    probs = {cfg: position_probs[cfg] for cfg in grid.sd_configs}
    profile_warmup(target, grid, probs, seed)
    rows: list[dict] = []
    for point in profile_points(grid):
        rows += measure_point(target, grid, point, probs, seed)
        if on_point is not None:
            on_point(1)
    return table_frame(rows)


#: How the native engine's target prefill spends its time on a pass of mixed lengths, which the
#: uniform-length rows cannot show (:mod:`tltcore.cost.table`): ``Engine._prefill`` pads every request
#: to the longest, then (``skip_padding``: from 8 padded tokens of 32 or more) hands the transformer a
#: ``keep`` mask, so the embeddings, the q/k/v and output projections, the MLPs and the KV writes run on
#: the real tokens only (``Transformer.forward(keep=...)``) while attention still reads every row's
#: padded queries against the longest row's keys, and the LM head reads one position per request. The
#: drafter's catch-up (``catch_up``, the ``drafter_prefill`` rows) keeps no mask and pads everything:
#: the context rule. Measured on the validation's model (CPU, float32, thread clock), one 276-token
#: re-prefill with 31 four-token prompts took 327 ms; the table read 1017 ms by ``max``, 50 ms by
#: ``sum``, 304 ms by ``padded_attention``.
PREFILL_RULE = "padded_attention"


def profile_metadata(target: Transformer, *, command: str, model_fingerprint: str, clock: str = "wall"
                     ) -> dict[str, str]:
    """What was measured where (stored with the table). The table's ``device`` is
    ``cpu-calibrated`` on a CPU and ``<type>-calibrated`` elsewhere (``cuda-calibrated``), with the
    accelerator's name beside it, so a table measured on one device is never read as another's."""
    import tltcore

    dev = device_of(target)
    meta = {
        "device": PROFILE_DEVICE if dev.type == "cpu" else f"{dev.type}-calibrated", "model": model_fingerprint,
        "tp": "1", "dtype": str(target.dtype).removeprefix("torch."), "context_rule": "max",
        "prefill_rule": PREFILL_RULE, "engine": "native",
        "host": f"{platform.machine()} {platform.processor() or platform.platform()}",
        "threads": str(torch.get_num_threads()),
        "versions": f"tlt {tltcore.__version__}, torch {torch.__version__}, python {platform.python_version()}",
        "date": datetime.now(UTC).strftime("%Y-%m-%d"), "command": command, "clock": clock,
    }
    if dev.type == "cuda":
        meta["accelerator"] = torch.cuda.get_device_name(dev)
    return meta

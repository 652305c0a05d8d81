"""Does a trained EAGLE drafter pay on this CPU? SD speedup of our engine on a padded target.

The target is a trained small model (``--target``, a ``save_pretrained`` folder such as the
arithmetic model of :mod:`tltreal.rl.pretrain`) padded by :func:`tltreal.rl.padded_target.pad_target` into
a model of a few hundred million parameters with exactly the small model's outputs (every MLP
widened to ``--intermediate`` with zero down-projection columns, ``--extra-layers`` appended layers
whose output projections are zero; see that module). The drafter (``--drafter``, a checkpoint file,
or a folder whose newest checkpoint is used) was trained against the small model and is rebound to
the padded one (:func:`tltreal.rl.padded_target.rebind_drafter`): same inputs, same proposals.

Per batch size, RL-task prompts (:func:`tltreal.rl.task.sample_problems` at a fixed difficulty, so a
batch's requests finish together, encoded with the target folder's tokenizer) are decoded greedily
to their end (EOS) or ``--new-tokens``, without SD and with static EAGLE chains of each depth,
interleaved, ``--repeats`` times; medians. Plain and SD greedy outputs must be identical.

    OMP_NUM_THREADS=1 python benchmarks/sd_pays_cpu.py --target /tmp/tlt-pretrained --drafter DIR
    python benchmarks/sd_pays_cpu.py --target T --drafter D --batches 1 --depths 3 --repeats 1  # quick look
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import platform
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from options import Batches, Threads, int_list, run


class DType(StrEnum):
    float32 = "float32"
    float64 = "float64"

os.environ.setdefault("OMP_NUM_THREADS", "1")


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command(help=__doc__)
def main(
    target: Annotated[Path, typer.Option(help="save_pretrained folder of the small target.")],
    drafter_path: Annotated[Path, typer.Option(
        "--drafter", help="Drafter checkpoint file, or a folder (its newest checkpoint).")],
    extra_layers: Annotated[int, typer.Option(help="Appended zero-output layers.")] = 12,
    intermediate: Annotated[int, typer.Option(
        help="MLP width of every layer (32768: 16 layers, 202M parameters on the hidden-128 4-layer arithmetic "
             "model).")] = 32768,
    batches: Batches = "1,2,4",
    depths: Annotated[str, typer.Option(help="EAGLE chain depths (Static SDConfig(d, 1, d)), comma-separated.")]
    = "3,4,5",
    difficulty: Annotated[int, typer.Option(help="Solution lines per prompt (fixed).")] = 4,
    new_tokens: Annotated[int, typer.Option(
        help="Token cap per request (0: the longest worked solution + EOS).")] = 0,
    repeats: Annotated[int, typer.Option(help="Timed repeats (medians, plain/SD interleaved).")] = 3,
    threads: Threads = 1,
    seed: Annotated[int, typer.Option(help="Prompts' and padding's seed.")] = 0,
    dtype_name: Annotated[DType, typer.Option("--dtype", help="Weights' dtype.")] = DType.float32,
    out: Annotated[Path | None, typer.Option(help="Write the rows here (.json or .csv).")] = None,
) -> None:
    batch_sizes, chain_depths = int_list(batches, "--batches"), int_list(depths, "--depths")
    import torch

    from tltcore.atomic import write_text, write_with
    from tltreal.rl.adaptive_run import record_path
    from tltreal.rl.padded_target import measure_sd_speedups, pad_target, parameter_count, rebind_drafter
    from tltreal.rl.pretrain import load_pretrained
    from tltreal.rl.task import sample_problems
    from tltreal.spec_decode.proposers.eagle import EagleDrafter
    from tltreal.spot.drafter_checkpoint import load_checkpoint, load_latest, restore

    torch.set_num_threads(threads)
    dtype = getattr(torch, dtype_name.value)
    small, tokenizer = load_pretrained(target, dtype=dtype)
    drafter = EagleDrafter(small).to(dtype).eval()
    ckpt = load_latest(drafter_path, drafter) if drafter_path.is_dir() else load_checkpoint(drafter_path)
    if ckpt is None:
        print(f"no drafter checkpoint matching the target in {drafter_path}", file=sys.stderr)
        raise typer.Exit(2)
    restore(drafter, ckpt)
    t0 = time.perf_counter()
    big = pad_target(small, extra_layers=extra_layers, intermediate_size=intermediate, seed=seed)
    pad_s = time.perf_counter() - t0
    rebound = rebind_drafter(drafter, big)
    n_params = parameter_count(big)
    bytes_ = sum(p.numel() * p.element_size() for p in big.parameters())
    c = big.cfg
    print(f"# padded target: {c.num_hidden_layers} layers ({small.cfg.num_hidden_layers} trained + "
          f"{extra_layers} appended), hidden {c.hidden_size}, MLP {small.cfg.intermediate_size} -> "
          f"{c.intermediate_size}, {n_params / 1e6:.1f}M parameters ({parameter_count(small) / 1e6:.2f}M trained), "
          f"{bytes_ / 2**30:.2f} GiB {dtype_name.value}, built in {pad_s:.1f}s")
    print(f"# drafter: {record_path(Path(ckpt.path), 'DRAFTER')} (version {ckpt.version}, {ckpt.step} steps), "
          f"{parameter_count(rebound) / 1e6:.2f}M parameters")
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} thread(s), {os.cpu_count()} CPUs "
          f"({platform.processor() or platform.machine()}), repeats {repeats} (medians, plain/SD interleaved), "
          f"greedy, difficulty-{difficulty} RL prompts")
    header = (f"{'batch':>5} {'depth':>5} {'tokens':>6} {'base tok/s':>10} {'SD tok/s':>9} {'speedup':>7} "
              f"{'decode x':>8} {'accept':>6} {'identical':>9}")
    print(header)
    rows = []
    for batch in batch_sizes:
        problems = sample_problems(batch, seed + batch, difficulty=difficulty)
        prompts = [tokenizer.encode(p.prompt, bos=True) for p in problems]
        new_tokens = new_tokens or max(len(tokenizer.encode(p.solution)) + 1 for p in problems)
        results = measure_sd_speedups(big, rebound, prompts, batch=batch, new_tokens=new_tokens,
                                      depths=chain_depths, repeats=repeats,
                                      eos_token_ids=(tokenizer.eos_id,))
        for r in results:
            print(f"{r.batch:>5} {r.depth:>5} {r.tokens:>6} {r.base_tok_s:>10.2f} {r.sd_tok_s:>9.2f} "
                  f"{r.speedup:>6.2f}x {r.decode_speedup:>7.2f}x {r.accept_length:>6.2f} {r.outputs_identical!s:>9}",
                  flush=True)
            rows.append({**dataclasses.asdict(r), "params": n_params, "intermediate": c.intermediate_size,
                         "layers": c.num_hidden_layers, "dtype": dtype_name.value})
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix == ".csv":
            def write_csv(tmp: Path) -> None:
                with tmp.open("w", newline="") as fh:
                    writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
                    writer.writeheader()
                    writer.writerows(rows)

            write_with(out, write_csv)
        else:
            write_text(out, json.dumps(rows, indent=1) + "\n")
        print(f"# wrote {record_path(out, 'OUT')}")  # a committed log never shows a machine's path
    if not all(r["outputs_identical"] for r in rows):
        raise typer.Exit(1)


if __name__ == "__main__":
    run(app)

"""``tlt sim capacity``: step time and hours vs GPU count for a fixed workload (capacity planning)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer
from rich.table import Table

from tltcli.sim import PriceOption
from tltcore.prices import missing_price


def capacity(
    gpus_list: Annotated[str, typer.Option(help="GPU counts to run, comma-separated (e.g. 16,32,64,128).")],
    scenario: Annotated[Path | None, typer.Option(help="Scenario TOML or a bundled scenario's name.")] = None,
    policy: Annotated[list[str] | None, typer.Option(
        help="SD policy spec, repeatable (replaces the scenario's; no-sd is always added).")] = None,
    for_steps: Annotated[int | None, typer.Option(help="RL steps to price (default: the simulated steps).")] = None,
    price: PriceOption = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="dotted.field=value, repeatable.")] = None,
    out: Annotated[Path | None, typer.Option(help="Folder for capacity.csv and capacity.png.")] = None,
) -> None:
    """Step time and hours vs GPU count for a fixed workload: the scenario re-run at each of
    ``gpus_list``'s counts with no SD and its SD policies; a table, and with ``out`` capacity.csv and
    capacity.png (hours for N steps vs GPUs, one line per policy)."""
    from pathlib import Path

    from rich.console import Console

    from tltcli.sim import _parse_sets
    from tltcore.atomic import atomic_dir, check_output_dir
    from tltcore.errors import InputError
    from tltcore.prices import check_steps, parse_prices
    from tltcore.summary import run_totals
    from tltsim.scenario import compare_policies, prepare, resolve, scenario_gpu, with_values

    try:
        counts = sorted({int(x) for x in gpus_list.split(",") if x.strip()})
    except ValueError:
        raise InputError(f"'{gpus_list}' is not a comma-separated list of GPU counts (e.g. 16,32,64)",
                         path="--gpus-list") from None
    if not counts or len(counts) > 16 or counts[0] < 1:
        raise InputError(f"needs 1 to 16 GPU counts >= 1, got '{gpus_list}'", path="--gpus-list")
    prices = parse_prices(price or [])
    check_steps(for_steps, "--for-steps")
    if out is not None:
        check_output_dir(Path(out), False, kind="sim-capacity", inputs=[str(scenario)] if scenario else [])
    settings = _parse_sets(set_ or []) + ([("policies", tuple(policy), "--policy")] if policy else [])
    s = resolve(scenario, settings).scenario
    console = Console(width=None, highlight=False)
    frames = []
    for g in counts:
        try:
            sg = with_values(s, {"cluster.gpus": g})
            inputs = prepare(sg)
        except InputError as exc:
            raise InputError(f"at {g} GPUs: {exc.message}", path="--gpus-list") from None
        _, summary = compare_policies(sg, inputs)
        totals = run_totals(summary, gpus=g)
        frames.append(totals.assign(gpus=g, status="ok"))
    table = pd.concat(frames, ignore_index=True)
    gpu = scenario_gpu(s)
    from tltcore.prices import resolve_price

    p = resolve_price(gpu.name, prices, s.cluster.usd_per_gpu_hour)
    n = for_steps if for_steps is not None else int(table["steps"].max())
    table["step_s"] = table["rollout_s"] / table["steps"]
    table["hours"] = table["step_s"] * n / 3600.0
    table["gpu_hours"] = table["hours"] * table["gpus"]
    table["usd"] = table["gpu_hours"] * p.usd_per_gpu_hour if p else float("nan")
    shown = Table(title=f"Capacity: {s.trace.name}, {s.model.name} on {gpu.name} (TP {s.cluster.tp}), rollout of "
                        f"{n:,} steps per GPU count (one seed)")
    for c in ("GPUs", "policy", "step s", "hours", "GPU-h", "$"):
        shown.add_column(c, justify="left" if c == "policy" else "right", no_wrap=True)
    for r in table.to_dict("records"):
        shown.add_row(str(r["gpus"]), str(r["policy"]), f"{r['step_s']:.2f}", f"{r['hours']:.2f}",
                      f"{r['gpu_hours']:,.1f}", "–" if not math.isfinite(r["usd"]) else f"{r['usd']:,.2f}")
    console.print(shown)
    console.print("prices: " + (p.describe() if p else missing_price(gpu.name)), markup=False)
    if out is not None:
        cols = ["gpus", "policy", "steps", "rollout_s", "step_s", "hours", "gpu_hours", "usd", "speedup"]
        with atomic_dir(Path(out), kind="sim-capacity", force=False) as tmp:
            table[cols].to_csv(tmp / "capacity.csv", index=False)
            _capacity_figure(table, tmp / "capacity.png", n, gpu.name)
        console.print(f"results: {out}")


def _capacity_figure(table: pd.DataFrame, path: Any, steps: int, gpu: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for policy, part in table.groupby("policy", sort=False):
        ax.plot(part["gpus"], part["hours"], marker="o", label=str(policy))
    ax.set_xscale("log", base=2)
    ax.set_xlabel(f"GPUs ({gpu})")
    ax.set_ylabel(f"rollout hours for {steps:,} RL steps")
    ax.set_title("Capacity: hours vs GPU count")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

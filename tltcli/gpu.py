"""`tlt gpu campaign`: ../shared/GPU-CHECKLIST.md as one command, for a GPU lent for minutes.

The stages live in :mod:`tltreal.validation.campaign`; stage d (``tlt validate``) is defined here,
because the real half imports no simulator. Torch is imported inside the command, after the
TRITON_INTERPRET the device needs is set (Triton reads it when a kernel module is imported).
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from tltcore.errors import InputError

app = typer.Typer(help="GPU validation campaign (needs the `real` extra: torch, triton).", no_args_is_help=True)

#: --budget-s bounds: under a minute no stage gets a useful cap; the device tool's command limit is 600 s.
BUDGET_BOUNDS = (30.0, 3600.0)


@app.callback()
def _gpu() -> None:
    """GPU validation campaign: kernels, the native engine at a real size, validate, compare."""


def validate_stage(c) -> dict:
    """Stage d: ``tlt validate`` on the campaign's device with the validation model's cost table from
    stage c (``--table``: no profiling here), on a one-step scenario the campaign writes
    (``validate_scenario.toml``), three rounds. Written to a temporary folder (a results folder may not
    be written inside another) and moved to ``validation/``."""
    import pandas as pd

    from tltcli.validate import Clock, RealBackend, validate
    from tltcore.atomic import write_text
    from tltreal.validation.campaign import validation_scenario_text

    table = c.out / "cost_table_validation.parquet"
    if not table.is_file():
        raise RuntimeError("stage c wrote no cost_table_validation.parquet to validate with")
    scenario = c.out / "validate_scenario.toml"
    write_text(scenario, validation_scenario_text(c.tiny))
    c.written()
    work = Path(tempfile.mkdtemp(prefix="tlt-campaign-validate-"))
    try:
        dest = work / "validation"
        validate(scenario=str(scenario), backend=RealBackend.native, model=None,
                 length_scale=1 / 256 if c.tiny else 1 / 64, max_batch=4 if c.tiny else 32, table=table, repeats=3,
                 max_rounds=3, ci_width=0.02, out=dest, force=False, drafter="draft", device=c.device, clock=Clock.wall,
                 late_scale=0.05)
        final = c.out / "validation"
        if final.exists():
            shutil.rmtree(final)
        shutil.move(str(dest), str(final))
        c.written()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    m = pd.read_csv(final / "makespans.csv")
    err = m["calibrated_predicted_err"].abs()
    return {"runs": len(m), "median_abs_makespan_error": round(float(err.median()), 4),
            "policies": ", ".join(sorted(m["policy"].unique()))}


@app.command("campaign")
def campaign(
    out: Annotated[Path, typer.Option("--out", help="Results folder, e.g. reports/gpu/h100 (written as it goes: a "
                                      "stage that finished keeps its files whatever happens later).")],
    device: Annotated[str, typer.Option("--device", help="Torch device: cuda, cuda:1, or cpu (a dry run).")]
    = "cuda",
    tiny: Annotated[bool, typer.Option("--tiny", help="A tiny float32 model and grid instead of the Qwen2.5-7B-"
                                       "shaped bf16 one: the whole campaign in seconds (a CPU dry run).")] = False,
    budget_s: Annotated[float, typer.Option("--budget-s", help="Seconds for the whole campaign; each stage is capped "
                                            "at its share (environment 4%, kernels 12%, engine 50%, validate 25%, "
                                            "compare 5%).")] = 480.0,
    force: Annotated[bool, typer.Option("--force", help="Write into an existing folder tlt did not create (nothing "
                                        "is deleted).")] = False,
) -> None:
    """Run the GPU measurement plan in one command, stage by stage, each under its time cap: environment,
    kernels, engine (ops, cost tables), validate, compare (measured vs the calibrated model).

    Example: tlt gpu campaign --out reports/gpu/h100
    Example: tlt gpu campaign --device cpu --tiny --out reports/gpu/cpu-dry-run
    """
    from tltcli.validate import command_line, need_torch, torch_device
    from tltcore.atomic import check_output_dir, open_results_dir

    lo, hi = BUDGET_BOUNDS
    if not (math.isfinite(budget_s) and lo <= budget_s <= hi):
        raise InputError(f"must be in [{lo:.0f}, {hi:.0f}] seconds, got {budget_s}", field="--budget-s")
    check_output_dir(out, force, kind="gpu-campaign")
    need_torch()
    if not device.startswith("cpu"):
        os.environ["TRITON_INTERPRET"] = "0"  # compiled for real; before any kernel module is imported
    else:
        os.environ["TRITON_INTERPRET"] = "1"
    dev = torch_device(device)
    from tltreal.validation.campaign import Campaign, default_stages, full_grid, run_campaign, tiny_grid

    marked = open_results_dir(out, kind="gpu-campaign", force=force)
    c = Campaign(out=out, device=dev, tiny=tiny, budget_s=budget_s, command=command_line(), marked=marked,
                 grid=tiny_grid() if tiny else full_grid())
    results = run_campaign(c, default_stages(validate_stage), say=typer.echo)
    bad = [r["stage"] for r in results if r["status"] != "ok"]
    typer.echo(f"wrote {out}/README.md; stages not ok: {', '.join(bad) if bad else 'none'}")

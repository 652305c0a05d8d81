"""Log a finished tlt output folder (``tlt sim run`` or ``tlt advise``) to Weights & Biases.

Why: RL teams track their runs in W&B; a prediction that lives beside the run it predicts is one that
gets checked. This module reads only what the command already wrote to its folder (the resolved
scenario, the summary or ranking table, the figures, the README), so what W&B shows is byte for byte
what the folder holds, and the simulation code knows nothing of W&B.

``wandb`` is an optional dependency (``pip install 'tlt[wandb]'``): :func:`require_wandb` is called
before any simulation starts, so a missing package costs the user nothing. The run honours W&B's own
environment (``WANDB_MODE=offline``, ``WANDB_DIR``, ``WANDB_ENTITY``, ``WANDB_API_KEY``); tests use
offline mode, which writes the run under ``WANDB_DIR`` without any network.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from tltcore.errors import InputError

#: The table each command writes, one row per policy (sim run) or per ranked setting (advise).
TABLES = {"sim run": "summary.csv", "advise": "ranking.csv"}
#: Per-row metrics copied into the run summary, where the table has them.
METRICS = ("speedup", "rollout_s", "makespan_s", "e2e_speedup", "gpu_idle_s", "idle_fraction", "mean_accept_length",
           "accept", "sd_share", "tokens_per_s")
#: advise's ranking gives each metric over seeds as these columns (``speedup_median``...).
SPREAD = ("median", "min", "max")
MAX_FIGURES = 32


def require_wandb() -> None:
    """Refuse ``--wandb`` at once, in one line, when the package is not installed."""
    try:
        import wandb  # noqa: F401
    except ImportError:
        raise InputError("needs the optional 'wandb' package: pip install 'tlt[wandb]' (or pip install wandb)",
                         field="--wandb") from None


@dataclass(frozen=True)
class Payload:
    """What one run logs: its config (the resolved scenario), summary numbers, a table and figures."""

    name: str
    command: str
    config: dict[str, Any]
    summary: dict[str, float | str]
    table: pd.DataFrame | None
    figures: tuple[Path, ...] = field(default=())
    files: tuple[Path, ...] = field(default=())


def _flat(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def _label_column(table: pd.DataFrame) -> str | None:
    return next((c for c in ("label", "policy", "setting") if c in table.columns), None)


def payload(folder: Path, command: str) -> Payload:
    """The run to log for the output ``folder`` of ``command`` (``"sim run"`` or ``"advise"``)."""
    if command not in TABLES:
        raise ValueError(f"unknown command {command!r}")
    folder = Path(folder)
    config: dict[str, Any] = {}
    scenario = folder / "scenario.resolved.toml"
    if scenario.is_file():
        config = _flat(tomllib.loads(scenario.read_text(encoding="utf-8")))
    table_path = folder / TABLES[command]
    table = pd.read_csv(table_path) if table_path.is_file() else None
    summary: dict[str, float | str] = {}
    if table is not None:
        label = _label_column(table)
        # sim run: one row per policy and step; the summary is each policy's median over its rows
        for name, rows in table.groupby(label, sort=False) if label else [("all", table)]:
            for metric in METRICS:
                columns = {metric: metric} if metric in rows.columns else {
                    f"{metric}_{s}": f"{metric}_{s}" for s in SPREAD if f"{metric}_{s}" in rows.columns}
                for key, column in columns.items():
                    values = pd.to_numeric(rows[column], errors="coerce").dropna()
                    if len(values):
                        value = float(values.median())
                        if math.isfinite(value):
                            summary[f"{name}/{key}"] = value
        if command == "advise" and label and len(table):
            summary["recommended"] = str(table.iloc[0][label])
    figures = tuple(sorted(folder.glob("*.png")))[:MAX_FIGURES]
    files = tuple(p for p in (folder / "README.md", scenario) if p.is_file())
    return Payload(folder.name, command, config, summary, table, figures, files)


def log_folder(folder: Path, command: str, *, project: str) -> str:
    """Log ``folder`` as one W&B run in ``project``; returns where it went (a URL, or the offline run folder)."""
    require_wandb()
    import wandb

    p = payload(folder, command)
    run = wandb.init(project=project, name=p.name, job_type=command.replace(" ", "-"), config=p.config,
                     tags=["tlt", command.replace(" ", "-")], reinit="finish_previous")
    try:
        for key, value in p.summary.items():
            run.summary[key] = value
        if p.table is not None:
            run.log({TABLES[command].removesuffix(".csv"): wandb.Table(dataframe=p.table)})
        for fig in p.figures:
            run.log({f"figures/{fig.stem}": wandb.Image(str(fig))})
        for f in p.files:
            run.save(str(f), base_path=str(f.parent), policy="now")
        where = run.url or run.dir
    finally:
        run.finish()
        wandb.teardown()  # W&B keeps process-wide settings (WANDB_DIR...): the next log reads them afresh
    return str(where)


__all__ = ["Payload", "log_folder", "payload", "require_wandb"]

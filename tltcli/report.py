"""`tlt report`: turn a run or sweep results folder into a README with figures and tables."""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Annotated

import typer


def report(path: Annotated[Path, typer.Argument(help="A `tlt sim run` or `tlt sweep run` results folder.",
                                                show_default=False)],
           out: Annotated[Path, typer.Option(help="Report folder (README.md + figures as PNG and PDF).")],
           force: Annotated[bool, typer.Option(help="Write into an existing --out folder tlt did not create "
                                               "(same-named files replaced, nothing deleted).")] = False) -> None:
    """Write a report (README with figures, tables, versions and the commands) for a run or a sweep.

    Examples:
      tlt sim run --preset tlt --steps 3 --out results/rl3 && tlt report results/rl3 --out reports/rl3
      tlt sweep run elastic_threshold_gpu && tlt report results/sweeps/elastic_threshold_gpu --out reports/etg
    """
    from analysis.report import write_report
    from tltcore.atomic import check_output_dir

    # Before any reading: a report written into (or around) the folder it reads would replace it.
    check_output_dir(out, force, kind="report", inputs=[path])
    command = "tlt report " + " ".join(shlex.quote(str(a)) for a in (path, "--out", out))
    start = time.monotonic()

    def on_figure(i: int, n: int, stem: str) -> None:  # a large run's figures take minutes: say which is drawn
        seconds = int(time.monotonic() - start)
        typer.echo(f"[{seconds // 60}:{seconds % 60:02d}] figure {i}/{n}: {stem}")

    files = write_report(path, out, command=command, force=force, on_figure=on_figure)
    figures = sum(f.endswith(".png") for f in files)
    typer.echo(f"wrote {out}/ (README.md, {figures} figures as PNG + PDF)")

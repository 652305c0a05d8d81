"""Sweeps: a base scenario plus axes (grid, zip, seeded random) over dotted fields, run resumably.

:mod:`~tltsim.sweep.spec` reads a spec and expands it into points keyed by the scenario hash;
:mod:`~tltsim.sweep.runner` evaluates the points without a result on local processes or Ray;
:mod:`~tltsim.sweep.store` keeps the results as a Parquet dataset that survives SIGKILL.
"""

from tltsim.sweep.runner import evaluate_point, run_sweep
from tltsim.sweep.spec import Axis, Point, SweepSpec, expand, load_spec, parse_spec
from tltsim.sweep.store import SweepStore

__all__ = ["Axis", "Point", "SweepSpec", "SweepStore", "evaluate_point", "expand", "load_spec", "parse_spec",
           "run_sweep"]

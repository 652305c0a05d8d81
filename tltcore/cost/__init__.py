"""Cost models: how long one engine iteration takes (DESIGN §2.2).

One concept per module: ``protocol`` (the :class:`CostModel` contract every reader uses -- the
simulator, the real engine's modelled clock, cost-aware -- and :class:`CostModelBase`, its defaults),
``roofline`` (analytic, from a model shape and a GPU, each formula with its batched form),
``table`` (interpolated measurements), ``calibration`` (fitting constants to measured or published
speedups), ``lengths`` (input checks), ``gpu_profiles`` (measured per-op GPU latencies) and
``measured`` (a cost model fitted to them).
"""

from tltcore.cost.calibration import SDMeasurement, fit_sd_overheads
from tltcore.cost.measured import MeasuredCostModel, measured_cost_model
from tltcore.cost.protocol import CostModel, CostModelBase, LongestContextTimes, PagedKVTimes
from tltcore.cost.roofline import (
    CUDA_GRAPH_BATCH_SIZES,
    DEFAULT_DRAFT_STEP_OVERHEAD_S,
    DEFAULT_ITERATION_OVERHEAD_S,
    DEFAULT_SD_OVERHEAD_S,
    RooflineCostModel,
    padded_batch,
)
from tltcore.cost.table import TABLE_COLUMNS, TABLE_KINDS, TableCostModel, shape_fingerprint, table_frame, write_table

__all__ = ["CUDA_GRAPH_BATCH_SIZES", "DEFAULT_DRAFT_STEP_OVERHEAD_S", "DEFAULT_ITERATION_OVERHEAD_S",
           "DEFAULT_SD_OVERHEAD_S", "TABLE_COLUMNS", "TABLE_KINDS", "CostModel", "CostModelBase",
           "LongestContextTimes", "MeasuredCostModel", "PagedKVTimes", "RooflineCostModel", "SDMeasurement",
           "TableCostModel", "fit_sd_overheads", "measured_cost_model", "padded_batch", "shape_fingerprint",
           "table_frame", "write_table"]

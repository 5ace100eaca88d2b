"""What happened: append-only records -> numpy tables (``sim.metrics.table.Columns``) ->
``summary.json``; DataFrames for the callers that ask for them.

Invariant: recording never changes the simulation; every figure is in simulation time
except ``wall_time_s``, which the run layer measures and fills in; the run path (record,
summarize, write) does not import pandas.
"""

from sim.metrics.recorder import (
    MEMORY_COLUMNS,
    REQUEST_COLUMNS,
    STEP_COLUMNS,
    TRAJECTORY_COLUMNS,
    HbmLayout,
    Recorder,
)
from sim.metrics.stats import TimeWeighted, describe, describe_weighted, weighted_percentile
from sim.metrics.summary import WALL_CLOCK_KEYS, package_versions, summarize

__all__ = [
    "MEMORY_COLUMNS",
    "REQUEST_COLUMNS",
    "STEP_COLUMNS",
    "TRAJECTORY_COLUMNS",
    "WALL_CLOCK_KEYS",
    "HbmLayout",
    "Recorder",
    "TimeWeighted",
    "describe",
    "describe_weighted",
    "package_versions",
    "summarize",
    "weighted_percentile",
]

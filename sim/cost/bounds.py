"""The cost model's ceilings on measured or user-set times and rates, by their old names.

Responsibility: none of its own; the constants live in ``sim.profiles.bounds`` (the
lowest layer that states hardware, so the accelerator profile's all-reduce latency shares
the calibration's and the scenario's bound) and are re-exported here, the same objects.

Invariant: every name here *is* ``sim.profiles.bounds``'s (no second copy of a value).
"""

from __future__ import annotations

from sim.profiles.bounds import (
    MAX_ALLREDUCE_LATENCY_S,
    MAX_BW_BYTES_PER_S,
    MAX_COPY_OVERHEAD_S,
    MAX_EFFICIENCY,
    MAX_FLOPS_PER_S,
    MAX_KERNEL_FLOOR_S,
    MAX_KERNEL_S,
    MAX_STEP_OVERHEAD_S,
)

__all__ = [
    "MAX_ALLREDUCE_LATENCY_S",
    "MAX_BW_BYTES_PER_S",
    "MAX_COPY_OVERHEAD_S",
    "MAX_EFFICIENCY",
    "MAX_FLOPS_PER_S",
    "MAX_KERNEL_FLOOR_S",
    "MAX_KERNEL_S",
    "MAX_STEP_OVERHEAD_S",
]

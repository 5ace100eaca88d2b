"""Ceilings on hardware figures (times and rates), in one place.

Responsibility: the constants alone, shared by every file kind that states such a figure:
an accelerator profile (``sim.profiles.schema``: the all-reduce's latency), a calibration
file (``sim.cost.calibration``), the scenario's ``cost`` section (``sim.cost.config``) and
its cluster's KV link (``sim.cluster.config``), so a figure that several of them may set (a
step overhead, an all-reduce's latency and bandwidth, a kernel floor) has one bound, not a
copy per file kind. They live in the profiles layer, the lowest that states hardware, so
every layer above imports them from here (``sim.cost.calibration`` also exports them, as
before they moved here).

Invariant: each ceiling is far above any measurement (so no real device is refused) and
far below what breaks a run (a step overhead of 1e308 s ran the clock to t=1e+308 and
stopped at ``engine.max_sim_time_s`` without naming the file or field); every figure they
bound is also finite (the models set ``allow_inf_nan=False``). docs/kernels_validation.md,
"Bounds".
"""

from __future__ import annotations

#: an efficiency (fraction of a reference figure): above 1 only for cache effects; a typo
#: like 95 for 0.95 fails
MAX_EFFICIENCY = 1.5
#: seconds of host time per step (measured: 0 to a few ms)
MAX_STEP_OVERHEAD_S = 10.0
#: seconds one kernel, one collective call or one driver call (cudaMalloc / cudaFree) may
#: take (measured: microseconds to ms)
MAX_KERNEL_S = 10.0
#: seconds of set-up per pinned host<->device copy (measured: ~10 us)
MAX_COPY_OVERHEAD_S = 1.0
#: seconds of fixed latency per all-reduce call (measured: ~5 to 50 us)
MAX_ALLREDUCE_LATENCY_S = 1e-2
#: seconds of the per-kernel launch floor (measured: a few us)
MAX_KERNEL_FLOOR_S = 1e-3
#: bytes/s of any bandwidth (HBM, host link, NCCL bus): ~100x the fastest HBM (8e12)
MAX_BW_BYTES_PER_S = 1e15
#: FLOP/s of a reference peak: ~100x the fastest dense peak (~1e16)
MAX_FLOPS_PER_S = 1e18

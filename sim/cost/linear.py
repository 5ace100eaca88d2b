"""Kernel time laws for per-group pricing: measured GEMM tables, fitted rooflines, all-reduce.

Responsibility: answer "how long does this kernel take" for the three kinds of kernel
the per-group cost model prices from measurements:

- ``GemmTable``: one GEMM shape (per-GPU K x N, bf16/fp16) measured at a list of token
  counts M. A query at M costs what the **next measured M' >= M** costs: cuBLAS pads M up
  to its tile, so time is a staircase that steps up right after a tile boundary, and the
  measured counts (multiples of 8..256) sit on the steps' upper edges. Below the first
  point the first point applies (the kernel floor); above the last, time grows in
  proportion to M (the compute-bound regime).
- ``KernelFit``: ``kernel_floor_s + max(bytes / (bandwidth x bw_efficiency),
  FLOPs / (peak x flops_efficiency))``, the roofline of one kernel with fitted effective
  figures and a per-kernel floor (shapes no table covers; element-wise kernels).
- ``AllReduceFit``: ``latency_s + 2 (p - 1) / p x bytes / bus_bw_bytes_per_s`` per call
  (NCCL's bus bandwidth over p GPUs), or a measured curve (linear interpolation in
  message size) where one is given, the line beyond its last size.

Invariant: every function is pure and returns seconds; the same arithmetic serves a
scalar and a numpy array (the fast decode path prices runs of steps with arrays, and the
results equal step-by-step pricing).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sim.lazy_numpy import numpy_on_first_use

if TYPE_CHECKING:
    import numpy as np
else:
    np = numpy_on_first_use(globals())


@dataclass(frozen=True)
class GemmTable:
    """Measured times of one GEMM shape: ``time_s[i]`` at ``tokens[i]`` (increasing)."""

    k: int
    n: int
    tokens: tuple[int, ...]
    time_s: tuple[float, ...]
    models: tuple[str, ...] = ()  # informational: models whose layers have this shape

    def time_at(self, m: float) -> float:
        """Seconds for ``m`` tokens (next measured count at or above ``m``): on the tuples
        (a bisection; ``np.searchsorted`` on one value cost more than the look-up), the
        arrays' IEEE arithmetic on floats (tokens are exact integers)."""
        tokens, times = self.tokens, self.time_s
        if m > tokens[-1]:
            return float(times[-1] * (m / tokens[-1]))
        return float(times[bisect_left(tokens, m)])


@dataclass(frozen=True)
class KernelFit:
    """A kernel's roofline with fitted efficiencies and a floor (see the module docstring)."""

    kernel_floor_s: float
    bw_efficiency: float
    flops_efficiency: float = 1.0

    def time_s(self, n_bytes, flops, hbm_bw: float, peak: float):
        """Seconds for one kernel moving ``n_bytes`` and doing ``flops`` (scalar or array)."""
        mem = n_bytes / (hbm_bw * self.bw_efficiency)
        comp = flops / (peak * self.flops_efficiency)
        if mem.__class__ is float and comp.__class__ is float:  # np.maximum's choice, no call
            return self.kernel_floor_s + (comp if comp > mem else mem)
        return self.kernel_floor_s + np.maximum(mem, comp)


@dataclass(frozen=True)
class AllReduceFit:
    """One TP degree's all-reduce: a line, and optionally a measured curve."""

    latency_s: float
    bus_bw_bytes_per_s: float
    size_bytes: tuple[float, ...] = ()
    time_s: tuple[float, ...] = ()

    def call_s(self, n_bytes: float, tp: int) -> float:
        """Seconds for one all-reduce of ``n_bytes`` over ``tp`` GPUs."""
        if self.size_bytes and n_bytes <= self.size_bytes[-1]:
            return float(np.interp(n_bytes, self.size_bytes, self.time_s))
        return self.latency_s + 2 * (tp - 1) / tp * n_bytes / self.bus_bw_bytes_per_s


def gemm_flops(m: float, k: int, n: int) -> float:
    return 2.0 * m * k * n


def gemm_bytes(m: float, k: int, n: int, weight_bytes: float, act_bytes: float) -> float:
    """Bytes one GEMM moves: its weights once, its input and output activations."""
    return k * n * weight_bytes + m * (k + n) * act_bytes

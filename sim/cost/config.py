"""The ``cost`` section of a scenario: the cost model's efficiencies, switches and overheads.

Responsibility: ``CostConfig`` alone, in a module of its own, so the scenario schema (and
``kvsim validate``) can name it without importing the step pricers (``roofline``,
``groups``: the cost model that reads it).

Invariant: every figure is a fraction, seconds or bytes, as each field says, finite; a
time or rate that a calibration file may also set (the step overhead, an all-reduce's
latency and bandwidth, the kernel floor) and the allocation latency have the
calibration's ceilings (``sim.profiles.bounds``): a scenario's ``step_overhead_s: 1e300`` ran
the clock past ``engine.max_sim_time_s`` without naming the field. The model is frozen and
refuses unknown keys.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from sim.config_model import ConfigModel
from sim.profiles.bounds import (
    MAX_ALLREDUCE_LATENCY_S,
    MAX_BW_BYTES_PER_S,
    MAX_KERNEL_FLOOR_S,
    MAX_KERNEL_S,
    MAX_STEP_OVERHEAD_S,
)


class CostConfig(ConfigModel):
    """Efficiencies, switches and overheads of the cost model (scenario key ``cost``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    mfu_prefill: float = Field(0.6, gt=0, le=1)  # any step containing prefill tokens
    mfu_decode: float = Field(0.5, gt=0, le=1)  # pure decode steps
    bw_efficiency: float = Field(1.0, gt=0, le=1)  # achieved / datasheet HBM bandwidth
    weights: bool = True  # stream the weights every step
    kv_read: bool = True  # attention reads the batch's KV
    gemm_flops: bool = True
    attention_flops: bool = True
    # pairs a prefill chunk's attention computes: ``causal`` (the kernel skips the masked
    # upper triangle of the new tokens) or ``square`` (F23's full 4 L d S^2, the chapter)
    attention_mask: Literal["causal", "square"] = "causal"
    allreduce: bool = True  # two all-reduces per layer under TP
    copies: bool = True  # allocator-caused HBM copies (growth, deep-copy forks, CoW)
    elementwise: bool = True  # per_group: norms, RoPE, activation, residual add, embedding
    # CPU scheduling + launch per step (a calibration's measured one has the same ceiling)
    step_overhead_s: float = Field(0.0, ge=0, le=MAX_STEP_OVERHEAD_S)
    # per cudaMalloc/cudaFree call (contiguous kinds): a driver call, bounded as one kernel
    alloc_latency_s: float = Field(0.0, ge=0, le=MAX_KERNEL_S)
    # per all-reduce call: latency + 2 (p-1)/p x bytes / bandwidth. None: roofline_max uses
    # the chapter's 450e9 B/s and 5 us; per_group the calibration's or accelerator
    # profile's measurement of this TP degree (then 450e9 / 5 us). A value overrides, with
    # the calibration's ceilings on a measured all-reduce's bus bandwidth and latency.
    allreduce_bw_bytes_per_s: float | None = Field(None, gt=0, le=MAX_BW_BYTES_PER_S)
    allreduce_latency_s: float | None = Field(None, ge=0, le=MAX_ALLREDUCE_LATENCY_S)
    # how a step is priced: one max(memory, compute) over the whole batch (roofline_max),
    # or operator group by group (per_group); auto: per_group with a version-2 calibration
    # kernel_tables: the calibration's measured per-layer kernels of this model (auto picks
    # it when the calibration has tables for the model's geometry and TP degree)
    step_pricing: Literal["auto", "roofline_max", "per_group", "kernel_tables"] = "auto"
    # per_group without calibration: per kernel (the calibration's kernel fits' ceiling)
    kernel_floor_s: float = Field(0.0, ge=0, le=MAX_KERNEL_FLOOR_S)
    activation_dtype: str = "bf16"
    weights_bytes: float | None = Field(None, gt=0)  # whole-model override (E20: 140e9)
    params: float | None = Field(None, gt=0)  # active parameter override
    calibration: str | None = None  # a file in hardware_profiles/calibration (opt-in)
    # kernel_tables: LLMServingSim's correction for decodes of unequal contexts, where the
    # calibration has a skew fit; off by default: it moves the Qwen3-32B dev run's TTFT
    # mean from +1.3 % to +5.2 % of vLLM (docs/validation.md, "Skew correction")
    skew_correction: bool = False
    # every step's total seconds times this (1: as priced); a sensitivity knob: `kvsim
    # capacity` answers again at 1 -/+ the calibration's error (sim.sweep.error_band)
    step_time_scale: float = Field(1.0, gt=0, le=100)
    block_size: int = Field(16, ge=1)  # for calibrated attention bandwidth

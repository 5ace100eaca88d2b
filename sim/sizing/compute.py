"""Compute and pause economics: F21, F23, F29-F33.

Invariant: FLOPs, seconds, bytes and bytes/s in; no hidden efficiencies (an MFU or a
sustained rate is always an explicit argument).
"""

from __future__ import annotations

import math

from sim.errors import KvsimError


def ridge_point(peak_flops_per_s: float, mem_bw_bytes_per_s: float) -> float:
    """F21: ``I* = T_peak / B_mem`` in FLOP per byte."""
    return peak_flops_per_s / mem_bw_bytes_per_s


def prefill_flops(
    params: float, n_layers: int, d_model: int, tokens: int, attention: bool = True
) -> float:
    """F23: ``2*N*S + 4*L*d_model*S^2`` (the attention term only when ``attention``)."""
    linear = 2 * params * tokens
    return linear + (4 * n_layers * d_model * tokens**2 if attention else 0)


def prefill_time_s(flops: float, mfu: float, peak_flops_per_s: float) -> float:
    """F23: ``T = FLOPs / (MFU * peak)``."""
    if not 0 < mfu <= 1:
        raise KvsimError(f"mfu must be in (0, 1], got {mfu}")
    return flops / (mfu * peak_flops_per_s)


def hold_cost_byte_s(kv_bytes: float, wait_s: float) -> float:
    """F29: ``C_hold = M_KV * T_wait`` in byte-seconds."""
    return kv_bytes * wait_s


def recompute_time_s(
    params: float, tokens: int, prefill_flops_per_s: float, n_layers: int = 0, d_model: int = 0
) -> float:
    """F30: ``2*P*S / R_prefill``; the attention term is added when L and d_model are given."""
    flops = prefill_flops(params, n_layers, d_model, tokens, attention=bool(n_layers and d_model))
    return flops / prefill_flops_per_s


def reload_time_s(kv_bytes: float, link_bw_bytes_per_s: float) -> float:
    """F30: ``T_reload = M_KV / B_link`` (one direction)."""
    return kv_bytes / link_bw_bytes_per_s


def reload_over_recompute(
    kv_bytes_per_token: float, params: float, prefill_flops_per_s: float, link_bw_bytes_per_s: float
) -> float:
    """F31: ``(m_token * R_prefill) / (2 * P * B_link)``; < 1 means reload wins."""
    return kv_bytes_per_token * prefill_flops_per_s / (2 * params * link_bw_bytes_per_s)


def offload_round_trip_s(kv_bytes: float, link_bw_bytes_per_s: float) -> float:
    """F32: ``2 * M_KV / B_link``."""
    return 2 * kv_bytes / link_bw_bytes_per_s


def hbm_free_window_s(wait_s: float, kv_bytes: float, link_bw_bytes_per_s: float) -> float:
    """F32 (corrected form): HBM is free for ``T_wait - T_egress - T_ingress`` (>= 0)."""
    return max(0.0, wait_s - offload_round_trip_s(kv_bytes, link_bw_bytes_per_s))


def offload_feasible(wait_s: float, kv_bytes: float, link_bw_bytes_per_s: float) -> bool:
    """F32: offload only pays when the wait exceeds the round trip."""
    return wait_s > offload_round_trip_s(kv_bytes, link_bw_bytes_per_s)


def break_even_wait_s(
    kv_bytes: float, link_bw_bytes_per_s: float, mu_ratio: float = math.inf, stall_s: float = 0.0
) -> float:
    """F33: ``T* = RT * mu_HBM / (mu_HBM - mu_DRAM) + Delta_T_stall``.

    ``mu_ratio`` is mu_HBM / mu_DRAM (> 1); infinite means host memory is free, T* = RT.
    """
    if mu_ratio <= 1:
        raise KvsimError(f"mu_ratio (mu_HBM/mu_DRAM) must exceed 1, got {mu_ratio}")
    factor = 1.0 if math.isinf(mu_ratio) else mu_ratio / (mu_ratio - 1)
    return offload_round_trip_s(kv_bytes, link_bw_bytes_per_s) * factor + stall_s

"""The numbers each report plot draws, computed from the run's tables (no matplotlib).

Responsibility: one pure function per plot, returning plain numpy arrays, so tests check
that a plot draws exactly its table's figures and the plots module only draws. Long
series are downsampled to at most ``MAX_POINTS`` points (rows picked at even strides, the
first and last kept, so a step function keeps its shape); CDFs to ``MAX_POINTS`` quantiles.

Invariant: with at most ``MAX_POINTS`` rows a series is the table's column itself, in
table order; nothing here reads files or the clock.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

#: the most points a plotted series keeps (drawing cost grows with points)
MAX_POINTS = 1000
GB = 1e9

#: the physical HBM partition of memory.parquet, per GPU (bottom of the stack first)
PHYSICAL_PARTS = (
    "gpu_weights_bytes",
    "gpu_reserve_bytes",
    "gpu_active_kv_bytes",
    "gpu_paused_kv_bytes",
    "gpu_cached_kv_bytes",
    "gpu_internal_waste_bytes",
    "gpu_external_waste_bytes",
    "gpu_free_bytes",
)


def stride_index(n: int, max_points: int = MAX_POINTS) -> np.ndarray:
    """Row indices that keep at most ``max_points`` of ``n`` rows (first and last kept)."""
    if n <= max_points:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, max_points).round().astype(np.int64))


@dataclass
class Stack:
    """A stacked area: times and one series per layer, in drawing order."""

    t_s: np.ndarray
    layers: dict[str, np.ndarray]


def memory_stack(memory: pd.DataFrame) -> Stack:
    """KV pool use over time, in GB: token states (useful), the rest of what sequences
    hold (allocated - useful: reserved slots, partial blocks), prefix-cached blocks, free.
    With the per-GPU physical partition in the table, that partition instead."""
    idx = stride_index(len(memory))
    m = memory.iloc[idx]
    t = m.t_s.to_numpy(dtype=float) if len(m) else np.empty(0)
    if len(m) and all(c in m for c in PHYSICAL_PARTS):
        return Stack(t, {c.removeprefix("gpu_").removesuffix("_bytes"): m[c].to_numpy(float) / GB
                         for c in PHYSICAL_PARTS})  # fmt: skip
    if not len(m):
        return Stack(t, {})
    useful = m.useful_bytes.to_numpy(float)
    allocated = m.allocated_bytes.to_numpy(float)
    return Stack(
        t,
        {
            "token states": useful / GB,
            "held, not token states": np.maximum(allocated - useful, 0.0) / GB,
            "prefix cache": m.cached_bytes.to_numpy(float) / GB,
            "free": m.free_bytes.to_numpy(float) / GB,
        },
    )


def efficiency(memory: pd.DataFrame) -> dict[str, np.ndarray]:
    """``t_s`` and the ratios over time: eta_alloc, eta_effective and, when recorded, the
    external fragmentation columns (``phi_ext*``)."""
    idx = stride_index(len(memory))
    m = memory.iloc[idx]
    out = {"t_s": m.t_s.to_numpy(float) if len(m) else np.empty(0)}
    for col in m.columns:
        if col in ("eta_alloc", "eta_effective") or col.startswith("phi_ext"):
            out[col] = m[col].to_numpy(float)
    return out


def cdf(values, weights=None, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(sorted values, cumulative fraction <= each) of a sample (NaN dropped); with more
    than ``max_points`` values, ``max_points`` evenly spaced quantiles of it."""
    v = np.asarray(values, dtype=float)
    w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=float)
    keep = ~np.isnan(v) & (w > 0)
    v, w = v[keep], w[keep]
    if not len(v):
        return np.empty(0), np.empty(0)
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    frac = np.cumsum(w) / w.sum()
    idx = stride_index(len(v), max_points)
    return v[idx], frac[idx]


def itl_sample(steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Inter-token gaps as (per-step duration, weight = decodes x steps) from the step
    table: a row of ``n_steps`` identical decode steps is ``n_steps`` gaps of its mean
    duration for each decoding request. Gaps that span several steps (a stall) are not
    in the table; summary.json's ``itl_s`` has them."""
    if not len(steps):
        return np.empty(0), np.empty(0)
    s = steps[(steps.n_steps > 0) & (steps.n_decode > 0)]
    n = s.n_steps.to_numpy(float)
    return s.duration_s.to_numpy(float) / n, s.n_decode.to_numpy(float) * n


def latency_cdfs(run) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The CDFs of the latency plot: TTFT, ITL (from steps) and resume latency."""
    out = {}
    if len(run.requests):
        out["TTFT"] = cdf(run.requests.ttft_s)
    if len(run.steps):
        out["ITL"] = cdf(*itl_sample(run.steps))
    if len(run.pauses):
        out["resume latency"] = cdf(run.pauses.resume_latency_s)
    return {k: v for k, v in out.items() if len(v[0])}


def pause_counts(pauses: pd.DataFrame) -> pd.DataFrame:
    """Pauses by decision (rows) and outcome (columns), counts."""
    if not len(pauses):
        return pd.DataFrame()
    return pd.crosstab(pauses.decision, pauses.outcome)


def prefix_hit_by_trajectory(traj: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(start time, hit_tokens / lookup_tokens) of trajectories that looked anything up."""
    if not len(traj):
        return np.empty(0), np.empty(0)
    t = traj[traj.lookup_tokens > 0]
    return t.start_s.to_numpy(float), (t.hit_tokens / t.lookup_tokens).to_numpy(float)


def batch_composition(steps: pd.DataFrame, bins: int = 300) -> dict[str, np.ndarray]:
    """Prefill and decode tokens per step over time: rows binned by start time (at most
    ``bins`` bins, step-weighted means; each row's composition holds for its n_steps)."""
    s = steps[steps.n_steps > 0] if len(steps) else steps
    if not len(s):
        return {"t_s": np.empty(0), "prefill": np.empty(0), "decode": np.empty(0)}
    t = s.start_s.to_numpy(float)
    n = s.n_steps.to_numpy(float)
    edges = np.linspace(t.min(), t.max(), min(bins, len(s)) + 1)
    which = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, len(edges) - 2)
    count = np.bincount(which, weights=n, minlength=len(edges) - 1)
    keep = count > 0
    out = {"t_s": edges[:-1][keep]}
    for name, col in (("prefill", s.prefill_tokens), ("decode", s.n_decode)):
        total = np.bincount(which, weights=col.to_numpy(float) * n, minlength=len(edges) - 1)
        out[name] = total[keep] / count[keep]
    return out

"""The numbers each report plot draws, computed from the run's tables (no matplotlib).

Responsibility: one pure function per plot, returning plain numpy arrays, so tests check
that a plot draws exactly its table's figures and the plots module only draws. Long
series are downsampled to at most ``MAX_POINTS`` points (rows picked at even strides, the
first and last kept, so a step function keeps its shape); CDFs to ``MAX_POINTS`` quantiles.

A cluster run's tables interleave its nodes (each samples at its own times): a per-node
series is computed on that node's rows; a cluster-wide one (``node_sum``) holds each
node's value as a step function (its last row at or before each time, nothing before its
first row), evaluated on the union of every node's times, and sums the nodes.

Invariant: with at most ``MAX_POINTS`` rows a series is the table's column itself, in
table order; nothing here reads files or the clock.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

#: the most points a plotted series keeps (drawing cost grows with points)
MAX_POINTS = 1000
#: a ratio over time with more rows than this is drawn time-binned (``time_binned_mean``)
#: over the raw: a contiguous allocator's eta flips between 0 and 1 at every admission
SMOOTH_ROWS = 200
SMOOTH_BINS = 120
GB = 1e9

#: the physical HBM partition of memory.parquet, per GPU (bottom of the stack first), with
#: the plot's label of each (= sim.metrics.recorder.GPU_PARTS; a test checks it)
PHYSICAL_PARTS = {
    "gpu_weights_bytes": "weights",
    "gpu_reserve_bytes": "reserve",
    "gpu_active_kv_bytes": "active KV",
    "gpu_paused_kv_bytes": "paused KV",
    "gpu_cached_kv_bytes": "prefix cache",
    "gpu_internal_waste_bytes": "internal waste",
    "gpu_external_waste_bytes": "external waste",
    "gpu_free_bytes": "free",
}


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
    """HBM use of one GPU over time, in GB: the per-GPU physical partition of the table
    (weights, reserve, active and paused KV, prefix cache, internal and external waste,
    free). A table without it (an older run folder): the KV pool's token states (useful),
    the rest of what sequences hold (allocated - useful), prefix-cached blocks, free."""
    idx = stride_index(len(memory))
    m = memory.iloc[idx]
    t = m.t_s.to_numpy(dtype=float) if len(m) else np.empty(0)
    if len(m) and all(c in m for c in PHYSICAL_PARTS):
        return Stack(t, {label: m[c].to_numpy(float) / GB for c, label in PHYSICAL_PARTS.items()})
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


def node_sum(frame: pd.DataFrame, cols: list[str],
             weights: dict[int, float] | None = None) -> pd.DataFrame:  # fmt: skip
    """``t_s`` (the union of the nodes' times, sorted, once each) and, for each column,
    the sum over nodes of ``weight x`` the node's step function at that time (the node's
    last row with ``t_s <= t``; 0 before its first row). A table without ``node`` is one
    node."""
    if not len(frame):
        return pd.DataFrame({"t_s": np.empty(0), **{c: np.empty(0) for c in cols}})
    nodes = frame["node"].to_numpy() if "node" in frame else np.zeros(len(frame), int)
    t = np.unique(frame.t_s.to_numpy(float))
    total = np.zeros((len(t), len(cols)))
    for node in np.unique(nodes):
        g = frame[nodes == node].sort_values("t_s", kind="stable")
        last = np.searchsorted(g.t_s.to_numpy(float), t, side="right") - 1
        vals = g[cols].to_numpy(float)[np.maximum(last, 0)]
        w = 1.0 if weights is None else float(weights.get(int(node), 1.0))
        total += np.where(last[:, None] >= 0, vals * w, 0.0)
    return pd.DataFrame({"t_s": t, **{c: total[:, i] for i, c in enumerate(cols)}})


def group_stack(groups: pd.DataFrame) -> Stack:
    """KV allocated to each layer group over time, in GB over all GPUs, one layer per group
    labelled ``name (kind)`` in the table's order (memory_groups.parquet: each memory row
    is one run of consecutive rows, one per group). A cluster table sums its nodes
    (``node_sum``; a group a node lacks counts 0 there). Empty without the table (a model
    of one layer group)."""
    if not len(groups):
        return Stack(np.empty(0), {})
    nodes = groups["node"].to_numpy() if "node" in groups else np.zeros(len(groups), int)
    labels: dict[str, str] = {}
    wide = []
    for node in np.unique(nodes):
        g = groups[nodes == node]
        names = list(dict.fromkeys(g.group))
        labels.update((n, f"{n} ({k})") for n, k in zip(g.group[: len(names)], g.kind[: len(names)],
                                                       strict=True))  # fmt: skip
        vals = g.allocated_bytes.to_numpy(float).reshape(-1, len(names))
        frame = pd.DataFrame(vals, columns=names)
        frame.insert(0, "t_s", g.t_s.to_numpy(float)[:: len(names)])
        frame["node"] = node
        wide.append(frame)
    table = pd.concat(wide, ignore_index=True).fillna(0.0)
    if len(wide) > 1:
        table = node_sum(table, list(labels))
    t = table.t_s.to_numpy(float)[stride_index(len(table))]
    rows = table.iloc[stride_index(len(table))]
    return Stack(t, {labels[n]: rows[n].to_numpy(float) / GB for n in labels})


def cluster_memory_stack(memory: pd.DataFrame, gpus: dict[int, float] | None = None) -> Stack:
    """The cluster's HBM over time, stacked by use (GB): every node's per-GPU partition
    times its GPUs (``gpus``: node id -> GPU count), summed (``node_sum``); a table without
    the partition sums the nodes' KV pools instead."""
    if len(memory) and all(c in memory for c in PHYSICAL_PARTS):
        return memory_stack(node_sum(memory, list(PHYSICAL_PARTS), gpus))
    cols = ["useful_bytes", "allocated_bytes", "cached_bytes", "free_bytes"]
    return memory_stack(node_sum(memory, cols) if len(memory) else memory)


def cluster_efficiency(memory: pd.DataFrame, pool_bytes: dict[int, float]) -> dict[str, np.ndarray]:
    """``t_s``, eta_alloc and eta_effective of the cluster as a whole: summed token states
    over summed allocated bytes, and over the summed pools of the nodes recording by then
    (``pool_bytes``: node id -> KV pool). phi_ext is a node's own (no cluster figure)."""
    if not len(memory):
        return {"t_s": np.empty(0)}
    nodes = memory["node"].to_numpy() if "node" in memory else np.zeros(len(memory), int)
    pool = np.array([float(pool_bytes.get(int(n), np.nan)) for n in nodes])
    s = node_sum(memory.assign(pool_bytes=pool), ["useful_bytes", "allocated_bytes", "pool_bytes"])
    s = s.iloc[stride_index(len(s))]
    useful, alloc = s.useful_bytes.to_numpy(float), s.allocated_bytes.to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {"t_s": s.t_s.to_numpy(float),
                "eta_alloc": np.where(alloc > 0, useful / alloc, np.nan),
                "eta_effective": useful / s.pool_bytes.to_numpy(float)}  # fmt: skip


def efficiency(memory: pd.DataFrame, max_points: int | None = MAX_POINTS) -> dict[str, np.ndarray]:
    """``t_s`` and the ratios over time: eta_alloc, eta_effective and, when recorded, the
    external fragmentation columns (``phi_ext*``); every row with ``max_points=None``."""
    idx = stride_index(len(memory), max_points) if max_points else np.arange(len(memory))
    m = memory.iloc[idx]
    out = {"t_s": m.t_s.to_numpy(float) if len(m) else np.empty(0)}
    for col in m.columns:
        if col in ("eta_alloc", "eta_effective") or col.startswith("phi_ext"):
            out[col] = m[col].to_numpy(float)
    return out


def time_binned_mean(t_s: np.ndarray, values: np.ndarray,
                     bins: int = SMOOTH_BINS) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(bin centres, time-weighted mean per bin) of a step function (``values[i]`` holds
    from ``t_s[i]`` to ``t_s[i + 1]``; the last row has no length) over ``bins`` equal bins
    from the first to the last time. NaN values carry no weight; a bin with no weight is
    NaN. The mean of the bin means, weighted by their widths, is the function's mean."""
    t = np.asarray(t_s, float)
    v = np.asarray(values, float)
    if len(t) < 2 or t[-1] <= t[0]:
        return t.copy(), v.copy()
    valid = ~np.isnan(v)
    filled = np.where(valid, v, 0.0)
    dt = np.diff(t)
    area = np.concatenate([[0.0], np.cumsum(filled[:-1] * dt)])  # integral up to t[k]
    weight = np.concatenate([[0.0], np.cumsum(valid[:-1] * dt)])
    edges = np.linspace(t[0], t[-1], bins + 1)
    k = np.clip(np.searchsorted(t, edges, side="right") - 1, 0, len(t) - 1)
    into = edges - t[k]
    a = area[k] + filled[k] * into
    w = weight[k] + valid[k] * into
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(np.diff(w) > 0, np.diff(a) / np.diff(w), np.nan)
    return (edges[:-1] + edges[1:]) / 2, mean


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

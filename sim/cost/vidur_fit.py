"""Fit a version-2 calibration from the Vidur profiles of one GPU (here, not on the device).

Responsibility: from the *fitted* rows of ``vidur_data`` (alternate token counts of each
(model, TP) grid and alternate message sizes; the other half is held back for
validation) derive the sections of ``schema_version: 2``:

  linear.shapes    each per-GPU GEMM shape's measured times (models sharing a shape are
                   merged by median), thinned: a point is dropped when the next kept
                   point is within ``THIN_TOL`` of it (the lookup takes the next measured
                   count at or above a query, so a flat run needs only its last point);
  linear.fallback  ``floor + max(bytes / (HBM x e_bw), FLOPs / (peak x e_flops))`` fitted to
                   every GEMM point (minimum mean |log error|), for shapes with no table;
  elementwise      floor and bandwidth efficiency of the five element-wise kernels of a
                   layer (``sim.cost.groups.elementwise_elements_per_token``), fitted to
                   their sum;
  embedding        the same for Vidur's ``emb`` operator (2 d elements per token);
  allreduce.by_tp  per degree, the line ``latency + 2 (p-1)/p x bytes / bus_bw`` fitted
                   on messages >= 1 MiB (least squares on relative error), and the
                   measured curve: a running median of 5 (the repeats are noisy), thinned
                   to the points linear interpolation needs within ``CURVE_TOL``.

Invariant: only fitted rows are used (``held`` False); the result validates as
a calibration before it is returned. Uses numpy, pandas and ``sim``; never torch.
``kernels_validation/vidur_fit.py`` re-exports this module.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.cost.calibration import validate_mapping
from sim.cost.groups import elementwise_elements_per_token
from sim.cost.vidur_data import (
    ELEMENTWISE_OPS,
    LINEAR_OPS,
    SOURCE,
    VidurData,
    gemm_shapes,
)

THIN_TOL = 0.005
CURVE_TOL = 0.02
ACT_BYTES = 2  # Vidur profiles fp16/bf16
MIB = 1 << 20
#: Vidur GPU folder -> (accelerator profile, device name)
GPUS = {"a100": ("a100-80gb", "NVIDIA A100-SXM4-80GB"), "h100": ("h100-sxm-80gb", "NVIDIA H100 80GB HBM3")}


def gemm_points(data: VidurData, gpu: str) -> pd.DataFrame:
    """Linear-operator rows of one GPU with their per-GPU shape (k, n) and held-back flag."""
    ops = data.operators[data.operators["gpu"] == gpu]
    rows = []
    for (model, tp), g in ops.groupby(["model", "tp"]):
        shapes = gemm_shapes(data.geometry[(gpu, model)], int(tp))
        for op in LINEAR_OPS:
            k, n = shapes[op]
            rows.append(g[g["op"] == op].assign(k=k, n=n))
    return pd.concat(rows, ignore_index=True)


def thin(tokens: np.ndarray, times: np.ndarray, tol: float = THIN_TOL) -> list[int]:
    """Indices to keep so that the next-at-or-above lookup changes no time by > ``tol``."""
    keep = [len(tokens) - 1]
    for i in range(len(tokens) - 2, -1, -1):
        if abs(times[i] / times[keep[-1]] - 1) > tol:
            keep.append(i)
    return sorted(keep)


def linear_shapes(points: pd.DataFrame) -> list[dict]:
    """One table per shape from the fitted points (``held`` False)."""
    out = []
    for (k, n), g in points[~points["held"]].groupby(["k", "n"]):
        curve = g.groupby("tokens")["time_s"].median()
        x, t = curve.index.to_numpy(), curve.to_numpy()
        keep = thin(x, t)
        out.append({"k": int(k), "n": int(n), "models": sorted(g["model"].unique()),
                    "tokens": " ".join(str(int(v)) for v in x[keep]),
                    "time_s": " ".join(f"{v:.4g}" for v in t[keep])})  # fmt: skip
    return out


def regime_weights(tokens: np.ndarray) -> np.ndarray:
    """Weights that give the memory-bound (<= 64 tokens), middle and compute-bound
    (>= 512) regimes equal say in a fit, however many points each has."""
    regime = np.digitize(tokens, [64.5, 511.5])
    counts = np.bincount(regime, minlength=3).astype(float)
    w = 1.0 / counts[regime]
    return w / w.sum()


def _coordinate_search(loss, start: list[float], steps: list[float], lo: list[float],
                       hi: list[float], rounds: int = 6) -> list[float]:  # fmt: skip
    """Deterministic coordinate descent on a grid that halves each round."""
    best = list(start)
    steps = list(steps)
    for _ in range(rounds):
        for i in range(len(best)):
            grid = np.clip(best[i] + steps[i] * np.arange(-8, 9), lo[i], hi[i])
            vals = [loss([*best[:i], v, *best[i + 1:]]) for v in grid]
            best[i] = float(grid[int(np.argmin(vals))])
        steps = [s / 2 for s in steps]
    return best


def fit_linear_fallback(points: pd.DataFrame, hbm: float, peak: float) -> dict:
    """floor, e_bw, e_flops of the per-kernel roofline over every fitted GEMM point."""
    fit = points[~points["held"]]
    m, k, n = (fit[c].to_numpy(float) for c in ("tokens", "k", "n"))
    t = fit["time_s"].to_numpy(float)
    by = ACT_BYTES * (k * n + m * (k + n))
    fl = 2.0 * m * k * n
    w = regime_weights(m)

    def loss(p):
        pred = p[0] + np.maximum(by / (hbm * p[1]), fl / (peak * p[2]))
        return float(np.sum(w * np.abs(np.log(pred / t))))

    floor, e_bw, e_fl = _coordinate_search(loss, [5e-6, 0.8, 0.7], [1e-6, 0.05, 0.05],
                                           [0.0, 0.05, 0.05], [1e-4, 1.5, 1.0])  # fmt: skip
    return {"kernel_floor_s": round(floor, 8), "bw_efficiency": round(e_bw, 4),
            "flops_efficiency": round(e_fl, 4)}  # fmt: skip


def elementwise_points(data: VidurData, gpu: str) -> pd.DataFrame:
    """Per (model, tp, tokens): the element-wise sum, its per-kernel element counts, emb."""
    ops = data.operators[data.operators["gpu"] == gpu]
    wide = ops.pivot_table(index=["model", "tp", "tokens"], columns="op",
                           values="time_s").reset_index()  # fmt: skip
    flags = ops.groupby(["model", "tp", "tokens"])["held"].first()
    wide["held"] = flags.to_numpy()
    wide["elementwise_s"] = wide[list(ELEMENTWISE_OPS)].sum(axis=1)
    per_kernel = []
    for _, r in wide.iterrows():
        g = data.geometry[(gpu, r["model"])]
        per_kernel.append(elementwise_elements_per_token(
            g.d_model, g.head_dim, g.n_head, g.n_kv_head, g.d_ff, g.gated_mlp, int(r["tp"])))
    wide["elements"] = per_kernel
    wide["d_model"] = [data.geometry[(gpu, m)].d_model for m in wide["model"]]
    return wide


def fit_memory_kernels(times: np.ndarray, bytes_per_kernel: np.ndarray, tokens: np.ndarray,
                       hbm: float) -> dict:  # fmt: skip
    """floor and e_bw with ``sum_j floor + bytes_j / (hbm x e)`` = the measured times
    (``bytes_per_kernel``: one row per point, one column per kernel)."""
    n_kernels = bytes_per_kernel.shape[1]
    w = regime_weights(tokens)

    def loss(p):
        pred = n_kernels * p[0] + bytes_per_kernel.sum(axis=1) / (hbm * p[1])
        return float(np.sum(w * np.abs(np.log(pred / times))))

    floor, e_bw = _coordinate_search(loss, [4e-6, 0.5], [1e-6, 0.05], [0.0, 0.02], [1e-4, 1.5])
    return {"kernel_floor_s": round(floor, 8), "bw_efficiency": round(e_bw, 4)}


def fit_elementwise(points: pd.DataFrame, hbm: float) -> tuple[dict, dict]:
    fit = points[~points["held"]]
    tok = fit["tokens"].to_numpy(float)[:, None]
    elem = np.array([list(e) for e in fit["elements"]], dtype=float) * tok * ACT_BYTES
    tokens = fit["tokens"].to_numpy(float)
    elementwise = fit_memory_kernels(fit["elementwise_s"].to_numpy(float), elem, tokens, hbm)
    emb_bytes = 2.0 * fit["d_model"].to_numpy(float) * tokens * ACT_BYTES
    embedding = fit_memory_kernels(fit["emb"].to_numpy(float), emb_bytes[:, None], tokens, hbm)
    return elementwise, embedding


def running_median(values: np.ndarray, width: int = 5) -> np.ndarray:
    h = width // 2
    return np.array([np.median(values[max(0, i - h): i + h + 1]) for i in range(len(values))])


def curve_knots(x: np.ndarray, t: np.ndarray, tol: float = CURVE_TOL) -> list[int]:
    """Greedy knots: add the worst-interpolated point until all are within ``tol``."""
    knots = [0, len(x) - 1]
    while True:
        ks = sorted(knots)
        err = np.abs(np.interp(x, x[ks], t[ks]) / t - 1)
        j = int(np.argmax(err))
        if err[j] <= tol or j in knots:
            return ks
        knots.append(j)


def fit_allreduce(allreduce: pd.DataFrame, gpu: str) -> dict[int, dict]:
    ar = allreduce[allreduce["gpu"] == gpu]
    out = {}
    for tp, g in ar[~ar["held"]].groupby("tp"):
        g = g.sort_values("size_bytes")
        s, t = g["size_bytes"].to_numpy(float), g["time_s"].to_numpy(float)
        big = s >= MIB
        fac = 2 * (tp - 1) / tp
        a = np.column_stack([1 / t[big], fac * s[big] / t[big]])
        (lat, inv_bw), *_ = np.linalg.lstsq(a, np.ones(int(big.sum())), rcond=None)
        smooth = running_median(t)
        ks = curve_knots(s, smooth)
        out[int(tp)] = {"latency_s": float(f"{max(lat, 0.0):.4g}"),
                        "bus_bw_bytes_per_s": float(f"{1 / inv_bw:.4g}"),
                        "size_bytes": " ".join(str(int(v)) for v in s[ks]),
                        "time_s": " ".join(f"{v:.4g}" for v in smooth[ks])}  # fmt: skip
    return out


def build_mapping(data: VidurData, gpu: str, date: str) -> dict:
    """The version-2 calibration of one Vidur GPU (validated)."""
    from sim.profiles import load_accelerator

    profile, device = GPUS[gpu]
    acc = load_accelerator(profile)
    hbm, peak = acc.hbm_bw_bytes_per_s, acc.peak_flops_per_s("bf16")
    points = gemm_points(data, gpu)
    elem, emb = fit_elementwise(elementwise_points(data, gpu), hbm)
    models = sorted(points["model"].unique())
    mapping = {
        "schema_version": 2, "device": device, "driver": "n/a (public measurement)",
        "torch_version": "n/a", "date": date, "source": "public-measurement",
        "origin": {**SOURCE, "path": f"{SOURCE['path']}/compute/{gpu}, {SOURCE['path']}/network/{gpu}_dgx"},
        "notes": (f"Vidur operator profiles of {', '.join(models)} (TP 1, 2, 4, 8) and NCCL "
                  f"all-reduce on a DGX {gpu.upper()}; fitted on alternate token counts and "
                  "message sizes (the others are held back: docs/kernels_validation.md)"),
        "reference": {"hbm_bw_bytes_per_s": hbm, "peak_flops_per_s": peak,
                      "host_link_bw_bytes_per_s": acc.host_link.bw_bytes_per_s_per_direction,
                      "basis": f"datasheet (accelerator profile {profile})"},
        "step_overhead_s": None,
        "not_measured": {
            "attention": "not in the data: KV reads at linear.fallback.bw_efficiency, attention "
                         "FLOPs at the step's GEMM throughput (sim/cost/groups.py)",
            "copy": "not in the data: the accelerator profile's host link",
            "decode": "per_group pricing uses linear; roofline_max uses linear.fallback",
            "gemm": "per_group pricing uses linear; roofline_max uses linear.fallback",
        },
        "linear": {"fallback": fit_linear_fallback(points, hbm, peak),
                   "shapes": linear_shapes(points)},
        "elementwise": elem, "embedding": emb,
        "allreduce": {"by_tp": fit_allreduce(data.allreduce, gpu)},
        "measured": {},
    }  # fmt: skip
    validate_mapping(mapping, f"<vidur {gpu}>")
    return mapping

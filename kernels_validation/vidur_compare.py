"""Predicted vs measured per operator group, against the Vidur profiles (here, not on the device).

Responsibility: price every (model, TP, tokens) point of ``vidur_data`` with the
simulator's own per-group code (``sim.cost.groups.GroupPricer`` on a one-layer model
profile built from Vidur's geometry) under several predictors, and report relative
errors ``(predicted - measured) / measured`` per group and regime:

  groups      linear (the layer's four GEMMs), elementwise (norms, RoPE, activation,
              add), embedding, allreduce (per call);
  predictors  sim-cost    kvsim's ``roofline_max`` CostModel, weights + GEMM terms, the
                          step's share per layer (the model before per-group pricing);
              datasheet   per-group roofline at datasheet figures (efficiency 1, no floor);
              fitted      per-group roofline with the calibration's fitted effective
                          FLOP/s, bandwidth and kernel floor (no measured tables);
              calibrated  the calibration as the simulator uses it (measured tables);
  regimes     memory-bound (tokens <= 64), middle, compute-bound (tokens >= 512);
              all-reduce: < 1 MiB and >= 1 MiB messages.

Held-back points (the ``held`` rows of ``vidur_data``) are the ones the fitted predictors never saw.
A held-back point is an *outlier* (tile quantisation, or noisy repeats) when its two
neighbouring fitted points differ by more than ``STEP_MARGIN`` (a tile step or dip lies
between them and which side the point falls on is unknown: GEMMs; or the measurement is
bimodal: all-reduce), or when its measured time lies more than ``OUTLIER_MARGIN`` outside
their range (a dip or spike of its own). No interpolation of the fitted points can be
sure to reach such a point; the reports list them and give the worst error with and
without them.

It also checks end-to-end prefill: the TTFT of a lone prompt of N tokens through the
engine against the measured-implied time (L x the sum of the measured operator medians
at N, TP 1, plus causal attention FLOPs 2 L d N^2 at the measured GEMM throughput at N).
Invariant: read-only on its inputs; uses numpy, pandas, matplotlib (Agg) and ``sim``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from vidur_data import ALL_OPS, LINEAR_OPS, MODEL_PROFILES, VidurData

from sim.cost.calibration import Calibration
from sim.cost.linear import AllReduceFit
from sim.cost.vidur_crossval import (  # noqa: F401  (the one implementation; names kept here)
    COMPUTE_BOUND_MIN_TOKENS,
    GPU_PROFILES,
    MEMORY_BOUND_MAX_TOKENS,
    Pricers,
    layer_profile,
    operator_table,
    pricers,
)
from sim.profiles import load_accelerator

MIB = 1 << 20
OUTLIER_MARGIN = 0.05
STEP_MARGIN = 0.10
PREDICTORS = ("sim-cost", "datasheet", "fitted", "calibrated")
TTFT_MODELS = ("llama-2-7b", "llama-3-8b")  # fit one GPU at TP 1


def allreduce_table(data: VidurData, gpu: str, cal: Calibration) -> pd.DataFrame:
    """One row per (tp, size): measured and predicted seconds per call, held flag."""
    acc = load_accelerator(GPU_PROFILES[gpu])
    ar = data.allreduce[data.allreduce["gpu"] == gpu]
    legacy = AllReduceFit(5e-6, 450e9)
    rows = []
    for _, r in ar.iterrows():
        tp, size = int(r["tp"]), float(r["size_bytes"])
        line = acc.allreduce.by_tp.get(tp) if acc.allreduce else None
        fit = cal.allreduce_fit(tp)
        rows.append({
            "gpu": gpu, "tp": tp, "size_bytes": size, "held": bool(r["held"]),
            "outlier": bool(r["outlier"]) if r["outlier"] == r["outlier"] else False,
            "measured_s": float(r["time_s"]), "sim-cost_s": legacy.call_s(size, tp),
            "datasheet_s": legacy.call_s(size, tp),
            "fitted_s": AllReduceFit(line.latency_s, line.bus_bw_bytes_per_s).call_s(size, tp)
            if line else np.nan,
            "calibrated_s": fit.call_s(size, tp) if fit else np.nan,
        })  # fmt: skip
    out = pd.DataFrame(rows)
    out["regime"] = np.where(out["size_bytes"] >= MIB, ">= 1 MiB", "< 1 MiB")
    return out


def add_errors(table: pd.DataFrame) -> pd.DataFrame:
    for name in PREDICTORS:
        table[f"{name}_err"] = table[f"{name}_s"] / table["measured_s"] - 1
    return table


def mark_outliers(table: pd.DataFrame, keys: list[str], axis: str) -> pd.DataFrame:
    """Flag held-back outliers (module docstring) where the fitted neighbours are present;
    elsewhere (a subset of held-back rows) the flags given with the data stay."""
    if "outlier" not in table.columns:
        table["outlier"] = False
    for _, g in table.groupby(keys):
        g = g.sort_values(axis)
        fit = g[~g["held"]]
        x, t = fit[axis].to_numpy(float), fit["measured_s"].to_numpy(float)
        if len(x) < 2:
            continue
        table.loc[g.index, "outlier"] = False
        for idx, r in g[g["held"]].iterrows():
            i = int(np.clip(np.searchsorted(x, r[axis]), 1, len(x) - 1))
            lo, hi = min(t[i - 1], t[i]), max(t[i - 1], t[i])
            m = r["measured_s"]
            step = hi > lo * (1 + STEP_MARGIN)
            outside = m < lo * (1 - OUTLIER_MARGIN) or m > hi * (1 + OUTLIER_MARGIN)
            table.loc[idx, "outlier"] = bool(step or outside)
    return table


def summary(table: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Median signed, median |.|, p95 |.| and worst |.| error per predictor, held-back rows."""
    rows = []
    held = table[table["held"]]
    for key, g in held.groupby(by):
        for name in PREDICTORS:
            err = g[f"{name}_err"].dropna()
            if err.empty:
                continue
            clean = g.loc[~g["outlier"], f"{name}_err"].dropna().abs()
            rows.append({
                **dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True)),
                "predictor": name, "points": len(err), "median_err": float(err.median()),
                "median_abs_err": float(err.abs().median()),
                "p95_abs_err": float(err.abs().quantile(0.95)), "worst_abs_err": float(err.abs().max()),
                "worst_abs_err_without_outliers": float(clean.max()) if len(clean) else np.nan,
                "outliers": int(g["outlier"].sum()),
            })  # fmt: skip
    return pd.DataFrame(rows)


def measured_implied_ttft_s(data: VidurData, gpu: str, model: str, n: int, layers: int) -> float:
    """L x the sum of the measured operator medians at N (TP 1) + causal attention FLOPs
    (2 L d N^2) at the measured GEMM throughput at N."""
    ops = data.operators
    sel = ops[(ops["gpu"] == gpu) & (ops["model"] == model) & (ops["tp"] == 1) & (ops["tokens"] == n)]
    if sel.empty:
        raise KeyError(f"no TP-1 measurement of {model} at {n} tokens on {gpu}")
    g = data.geometry[(gpu, model)]
    t = sel.set_index("op")["time_s"]
    shapes = layer_profile(model, g)
    from sim.cost.groups import gemm_shapes

    linear_flops = sum(2.0 * n * k * nn for k, nn in gemm_shapes(shapes, 1))
    rate = linear_flops / float(t[list(LINEAR_OPS)].sum())
    attention_flops = 2.0 * layers * g.d_model * n * n
    return layers * float(t[list(ALL_OPS)].sum()) + attention_flops / rate


def lone_prefill_scenario(model: str, accelerator: str, calibration: str, n: int) -> dict:
    """A scenario with one prompt of ``n`` tokens prefilled in one chunk, one output token."""
    return {
        "schema_version": 1, "name": f"lone-prefill-{n}", "seed": 0, "model": model,
        "hardware": {"accelerator": accelerator, "tp": 1},
        "cost": {"calibration": calibration, "step_overhead_s": 0.0},
        "allocator": {"kind": "paged", "block_size": 16},
        "scheduler": {"kind": "vllm_v1", "max_num_batched_tokens": max(n, 512),
                      "long_prefill_token_threshold": 0, "max_num_seqs": 8},
        "workload": {"kind": "requests", "requests": [
            {"count": 1, "at_s": 0.0, "prompt_tokens": n, "output_tokens": 1}]},
    }  # fmt: skip


def ttft_table(data: VidurData, gpu: str, calibration: str, token_counts: list[int]) -> pd.DataFrame:
    """TTFT through the engine vs the measured-implied time, for each Vidur model with a
    kvsim profile (TP 1)."""
    from sim.run import run_scenario

    rows = []
    for vidur_model, profile in MODEL_PROFILES.items():
        if profile not in TTFT_MODELS or (gpu, vidur_model) not in data.geometry:
            continue
        from sim.profiles import load_model

        layers = load_model(profile).num_layers
        for n in token_counts:
            try:
                implied = measured_implied_ttft_s(data, gpu, vidur_model, n, layers)
            except KeyError:
                continue
            if n > (load_model(profile).max_context_tokens or n):
                continue
            scenario = lone_prefill_scenario(profile, GPU_PROFILES[gpu], calibration, n)
            res = run_scenario(scenario, **{"engine.check_invariants": False})
            ttft = float(res.requests["ttft_s"].iloc[0])
            rows.append({"gpu": gpu, "model": profile, "tokens": n, "ttft_s": ttft,
                         "implied_s": implied, "err": ttft / implied - 1})  # fmt: skip
    return pd.DataFrame(rows)


# -- reports -------------------------------------------------------------------------------

TTFT_TOKENS = (136, 264, 520, 1040, 2080, 4064)  # held-back token counts, ~128 to ~4k


@dataclass
class GpuReport:
    gpu: str
    calibration: str
    operators: pd.DataFrame
    allreduce: pd.DataFrame
    ttft: pd.DataFrame

    def groups(self) -> pd.DataFrame:
        return summary(self.operators, ["group", "regime"])

    def allreduce_summary(self) -> pd.DataFrame:
        return summary(self.allreduce, ["regime"])


def gpu_report(data: VidurData, gpu: str, calibration: str | None = None,
               ttft_tokens=TTFT_TOKENS) -> GpuReport:  # fmt: skip
    """Every table of one GPU (the calibration defaults to ``<accelerator>-vidur``)."""
    from sim.cost.calibration import load_calibration

    name = calibration or f"{GPU_PROFILES[gpu]}-vidur"
    cal = load_calibration(name)
    ops = mark_outliers(add_errors(operator_table(data, gpu, cal)), ["model", "tp", "group"], "tokens")
    ar = mark_outliers(add_errors(allreduce_table(data, gpu, cal)), ["tp"], "size_bytes")
    tt = ttft_table(data, gpu, name, list(ttft_tokens)) if ttft_tokens else pd.DataFrame()
    return GpuReport(gpu, name, ops, ar, tt)


def _pct(x: float) -> str:
    return "" if pd.isna(x) else f"{x * 100:+.1f}%" if x < 0 or x > 0 else "0.0%"


def _abs_pct(x: float) -> str:
    return "" if pd.isna(x) else f"{x * 100:.1f}%"


def _summary_lines(s: pd.DataFrame, keys: list[str]) -> list[str]:
    head = " | ".join(keys)
    lines = [f"| {head} | predictor | points | median err | median abs | p95 abs | worst abs | "
             "worst abs w/o outliers | outliers |",
             "|" + "---|" * len(keys) + "---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for _, r in s.iterrows():
        cells = " | ".join(str(r[k]) for k in keys)
        lines.append(
            f"| {cells} | {r['predictor']} | {r['points']} | {_pct(r['median_err'])} | "
            f"{_abs_pct(r['median_abs_err'])} | {_abs_pct(r['p95_abs_err'])} | "
            f"{_abs_pct(r['worst_abs_err'])} | {_abs_pct(r['worst_abs_err_without_outliers'])} | "
            f"{r['outliers']} |"
        )
    return lines


def to_markdown(rep: GpuReport) -> str:
    """The per-GPU report: group summaries, all-reduce, TTFT, and the outliers."""
    lines = [f"# Vidur profiles vs kvsim's cost model: {rep.gpu.upper()}", "",
             f"Calibration `{rep.calibration}`; relative error (predicted - measured) / measured "
             "on held-back points (alternate token counts / message sizes). Regimes: "
             f"memory-bound <= {MEMORY_BOUND_MAX_TOKENS} tokens, compute-bound >= "
             f"{COMPUTE_BOUND_MIN_TOKENS}. Made by `kernels_validation/compare_steps.py --vidur`.",
             "", "## Operator groups (per layer; embedding per step)", ""]  # fmt: skip
    lines += _summary_lines(rep.groups(), ["group", "regime"])
    lines += ["", "## TP all-reduce (per call)", ""]
    lines += _summary_lines(rep.allreduce_summary(), ["regime"])
    if not rep.ttft.empty:
        lines += ["", "## TTFT of a lone prefill through `kvsim run` (TP 1, one chunk)", "",
                  "| model | tokens | kvsim ms | measured-implied ms | error |",
                  "|---|---:|---:|---:|---:|"]  # fmt: skip
        for _, r in rep.ttft.iterrows():
            lines.append(f"| {r['model']} | {r['tokens']} | {r['ttft_s'] * 1e3:.2f} | "
                         f"{r['implied_s'] * 1e3:.2f} | {_pct(r['err'])} |")  # fmt: skip
        for model, g in rep.ttft.groupby("model"):
            lines.append(f"\n{model}: median error {_pct(g['err'].median())}, "
                         f"worst {_abs_pct(g['err'].abs().max())}")  # fmt: skip
    out = rep.operators[rep.operators["held"] & rep.operators["outlier"]
                        & (rep.operators["group"] == "linear")]  # fmt: skip
    lines += ["", f"## Tile-quantisation outliers of the linear group ({len(out)} held-back points)",
              "", "| model | TP | tokens | measured us | calibrated error |", "|---|---:|---:|---:|---:|"]
    for _, r in out.sort_values("calibrated_err", key=abs, ascending=False).head(40).iterrows():
        lines.append(f"| {r['model']} | {r['tp']} | {r['tokens']} | {r['measured_s'] * 1e6:.1f} | "
                     f"{_pct(r['calibrated_err'])} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def plot(rep: GpuReport, path) -> None:
    """Predicted vs measured (log-log), held-back points: linear group and all-reduce."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    lin = rep.operators[(rep.operators["group"] == "linear") & rep.operators["held"]]
    ar = rep.allreduce[rep.allreduce["held"]]
    for ax, tab, title, names in (
        (axes[0], lin, "linear group per layer", ("sim-cost", "datasheet", "fitted", "calibrated")),
        (axes[1], ar, "TP all-reduce per call", ("sim-cost", "fitted", "calibrated")),
    ):
        for name, marker in zip(names, "x+.o", strict=False):
            label = {"sim-cost": "kvsim roofline_max" if tab is lin else "450 GB/s + 5 us",
                     "fitted": "fitted roofline" if tab is lin else "profile line"}.get(name, name)
            ax.scatter(tab["measured_s"] * 1e6, tab[f"{name}_s"] * 1e6, s=6, marker=marker,
                       label=label, alpha=0.6)  # fmt: skip
        lo = float(tab["measured_s"].min()) * 1e6 / 2
        hi = float(tab["measured_s"].max()) * 1e6 * 2
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.set(xscale="log", yscale="log", xlabel="measured us", ylabel="predicted us",
               title=f"{rep.gpu.upper()}: {title} (held-back)")  # fmt: skip
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_reports(data: VidurData, out_dir, gpus: list[str] | None = None) -> list[GpuReport]:
    """``<gpu>.md``, ``<gpu>.png`` and ``summary.csv`` for each GPU under ``out_dir``."""
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    reports, frames = [], []
    for gpu in gpus or [g for g in data.gpus() if g in GPU_PROFILES]:
        rep = gpu_report(data, gpu)
        (out / f"{gpu}.md").write_text(to_markdown(rep))
        plot(rep, out / f"{gpu}.png")
        frames += [rep.groups().assign(gpu=gpu), rep.allreduce_summary().assign(gpu=gpu, group="allreduce")]
        reports.append(rep)
    pd.concat(frames, ignore_index=True).to_csv(out / "summary.csv", index=False, float_format="%.5g")
    return reports


def write_subset(data: VidurData, out_dir) -> None:
    """The project's copy: the held-back rows only (the fitted half lives in the
    calibrations), with each row's outlier flag computed here on the full data."""
    from pathlib import Path

    from vidur_data import write_subset as write

    ops = data.operators.copy()
    ar = data.allreduce.copy()
    ops["outlier"], ar["outlier"] = False, False
    for gpu in [g for g in data.gpus() if g in GPU_PROFILES]:
        rep = gpu_report(data, gpu, ttft_tokens=())
        lin = rep.operators[rep.operators["group"] == "linear"].set_index(["model", "tp", "tokens"])["outlier"]
        sel = ops["gpu"] == gpu
        keys = pd.MultiIndex.from_frame(ops.loc[sel, ["model", "tp", "tokens"]])
        ops.loc[sel, "outlier"] = lin.reindex(keys).fillna(False).to_numpy()
        flags = rep.allreduce.set_index(["tp", "size_bytes"])["outlier"]
        sel = ar["gpu"] == gpu
        keys = pd.MultiIndex.from_frame(ar.loc[sel, ["tp", "size_bytes"]])
        ar.loc[sel, "outlier"] = flags.reindex(keys).fillna(False).to_numpy()
    write(VidurData(ops, ar, data.geometry), Path(out_dir), ops["held"], ar["held"])

"""Write a SYNTHETIC results folder, in run_all.sh's formats, from known ground truth.

Responsibility: make CSVs exactly like the benchmarks' (same columns) whose numbers come
from chosen curves (H200-like datasheet figures, made-up efficiencies, a copy overhead and
bandwidth, a step overhead), optionally with seeded multiplicative noise. ``calibrate.py``
must recover the truth from them; the tests check that, and the shipped
``hardware_profiles/calibration/synthetic-example.yaml`` is made from such a folder, so the
calibration pipeline is exercised end to end before any GPU run exists.

Invariant: every file says it is synthetic (env.json ``device_kind: synthetic``, device
name starting with "SYNTHETIC"); nothing here is a measurement. Runs here (numpy, sim).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare_steps  # noqa: E402
from geometry import GEOMETRIES  # noqa: E402

from sim.cost.calibration import Calibration, CopyFit  # noqa: E402

LLAMA_3_8B = GEOMETRIES["llama-3-8b"]
KV_HEADS, HEAD_DIM, ELEM = LLAMA_3_8B.n_kv_heads, LLAMA_3_8B.head_dim, 2  # bf16

PAGED_COLUMNS = [
    "sweep", "impl", "device", "dtype", "num_seqs", "num_heads", "num_kv_heads", "head_dim",
    "block_size", "context_tokens", "kv_bytes", "bytes_moved", "rotations",
    "time_s_median", "time_s_p10", "time_s_p90", "reps", "achieved_bw_bytes_per_s",
]  # fmt: skip
COPY_COLUMNS = [
    "test", "direction", "memory", "size_bytes", "n_transfers", "device",
    "time_s_median", "time_s_p10", "time_s_p90", "reps", "bw_bytes_per_s",
    "alone_s", "slowdown", "note",
]  # fmt: skip
GEMM_COLUMNS = [
    "geometry", "op", "tokens", "in_features", "out_features", "dtype", "device", "flops",
    "weight_bytes", "act_bytes", "rotations", "time_s_median", "time_s_p10", "time_s_p90",
    "reps", "flop_per_s", "weight_bw_bytes_per_s",
]  # fmt: skip
LAYER_COLUMNS = [
    "geometry", "n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "dtype",
    "dtype_bytes", "device", "phase", "prefill_chunk_tokens", "prefill_history_tokens",
    "decode_seqs", "decode_context_tokens", "block_size", "tokens_in_step", "weight_bytes",
    "kv_bytes_read", "kv_bytes_written", "linear_flops", "attention_flops", "cuda_graph",
    "time_s_median", "time_s_p10", "time_s_p90", "reps",
]  # fmt: skip


@dataclass(frozen=True)
class Truth:
    """The made-up answers (H200 datasheet figures as the reference)."""

    hbm_bw: float = 4.8e12
    peak_flops: float = 989.4e12
    block_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
    block_factor: tuple[float, ...] = (0.50, 0.66, 0.80, 0.90, 0.95, 0.96, 0.96, 0.95)
    contexts: tuple[int, ...] = (1024, 4096, 16384, 65536)
    context_factor: tuple[float, ...] = (0.88, 0.96, 0.99, 1.0)
    weight_stream_eff: float = 0.85  # decode GEMMs: fraction of HBM bandwidth
    gemm_tokens: tuple[int, ...] = tuple(2**i for i in range(15))
    gemm_mfu_max: float = 0.75
    gemm_half_tokens: float = 64.0  # MFU ramps as t / (t + half)
    copy: dict = field(
        default_factory=lambda: {"h2d": (8e-6, 53.0e9), "d2h": (9e-6, 52.5e9)}
    )  # (overhead s, bytes/s), pinned
    pageable: tuple[float, float] = (20e-6, 20e9)
    step_overhead_s: float = 250e-6

    def attention_eff(self, bi: int, ci: int) -> float:
        return self.block_factor[bi] * self.context_factor[ci]

    def gemm_time_s(self, weight_bytes: float, flops: float, tokens: int) -> float:
        mfu = self.gemm_mfu_max * tokens / (tokens + self.gemm_half_tokens)
        return max(weight_bytes / (self.hbm_bw * self.weight_stream_eff),
                   flops / (self.peak_flops * mfu))  # fmt: skip


def _write(path: Path, columns: list[str], rows: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)


def _timing(t: float, rng, noise: float) -> dict:
    t = t * float(np.exp(rng.normal(0, noise))) if noise else t
    return {"time_s_median": t, "time_s_p10": t, "time_s_p90": t, "reps": 10}


def paged_rows(tr: Truth, rng, noise: float) -> list[dict]:
    rows, total = [], 262_144
    for ci, ctx in enumerate(tr.contexts):
        seqs = total // ctx
        kv = 2 * seqs * ctx * KV_HEADS * HEAD_DIM * ELEM
        for bi, b in enumerate(tr.block_sizes):
            t = _timing(kv / (tr.attention_eff(bi, ci) * tr.hbm_bw), rng, noise)
            rows.append({
                "sweep": "block_context", "impl": "triton_paged", "device": "synthetic",
                "dtype": "bfloat16", "num_seqs": seqs, "num_heads": 32, "num_kv_heads": KV_HEADS,
                "head_dim": HEAD_DIM, "block_size": b, "context_tokens": ctx, "kv_bytes": kv,
                "bytes_moved": kv, "rotations": 1, **t,
                "achieved_bw_bytes_per_s": kv / t["time_s_median"],
            })  # fmt: skip
    return rows


def copy_rows(tr: Truth, rng, noise: float) -> list[dict]:
    rows = []
    sizes = [4096 * 4**i for i in range(11)] + [2**31]
    for memory in ("pinned", "pageable"):
        for d in ("h2d", "d2h"):
            over, bw = tr.copy[d] if memory == "pinned" else tr.pageable
            for n in sizes:
                t = _timing(over + n / bw, rng, noise)
                rows.append({
                    "test": "single", "direction": d, "memory": memory, "size_bytes": n,
                    "n_transfers": 1, "device": "synthetic", **t,
                    "bw_bytes_per_s": n / t["time_s_median"], "alone_s": "nan",
                    "slowdown": "nan", "note": "synthetic",
                })  # fmt: skip
    n = 2**30
    rows.append({"test": "d2d", "direction": "d2d", "memory": "device", "size_bytes": n,
                 "n_transfers": 1, "device": "synthetic", **_timing(2 * n / 4.3e12, rng, 0),
                 "bw_bytes_per_s": 4.3e12, "alone_s": "nan", "slowdown": "nan",
                 "note": "synthetic"})  # fmt: skip
    return rows


def gemm_rows(tr: Truth, rng, noise: float) -> list[dict]:
    rows = []
    params = LLAMA_3_8B.linear_params_per_layer()
    for tokens in tr.gemm_tokens:
        flops, wbytes = 2 * tokens * params, params * ELEM
        t = _timing(tr.gemm_time_s(wbytes, flops, tokens), rng, noise)
        rows.append({
            "geometry": "llama-3-8b", "op": "layer", "tokens": tokens, "in_features": 4096,
            "out_features": 4096, "dtype": "bfloat16", "device": "synthetic", "flops": flops,
            "weight_bytes": wbytes, "act_bytes": 0, "rotations": 1, **t,
            "flop_per_s": flops / t["time_s_median"],
            "weight_bw_bytes_per_s": wbytes / t["time_s_median"],
        })  # fmt: skip
    return rows


def truth_calibration(tr: Truth, gemm: list[dict]) -> Calibration:
    """The curves calibrate.py should recover (noise-free), as a Calibration."""
    grid = tuple(tuple(tr.attention_eff(bi, ci) for ci in range(len(tr.contexts)))
                 for bi in range(len(tr.block_sizes)))  # fmt: skip
    dec = [r for r in gemm if r["tokens"] <= 1024]
    return Calibration(
        device="SYNTHETIC", driver="n/a", torch_version="n/a", date="2026-11-29",
        source="synthetic", step_overhead_s=tr.step_overhead_s,
        attention_block_sizes=tr.block_sizes, attention_context_tokens=tr.contexts,
        attention_bw_grid=grid, decode_batches=tuple(r["tokens"] for r in dec),
        decode_bw_curve=tuple(r["weight_bytes"] / r["time_s_median"] / tr.hbm_bw for r in dec),
        gemm_tokens=tuple(r["tokens"] for r in gemm),
        gemm_curve=tuple(r["flops"] / r["time_s_median"] / tr.peak_flops for r in gemm),
        copy_fits=tuple((d, CopyFit(*tr.copy[d])) for d in ("h2d", "d2h")),
        reference_hbm_bw_bytes_per_s=tr.hbm_bw, reference_peak_flops_per_s=tr.peak_flops,
    )  # fmt: skip


LAYER_STEPS = [(0, 0, 1, 1024), (0, 0, 32, 4096), (512, 0, 0, 0), (2048, 0, 0, 0),
               (512, 0, 32, 4096), (0, 0, 128, 1024), (2048, 8192, 0, 0)]  # fmt: skip


def layer_rows(tr: Truth, cal: Calibration, rng, noise: float) -> list[dict]:
    params = LLAMA_3_8B.linear_params_per_layer()
    kv_tok = 2 * KV_HEADS * HEAD_DIM * ELEM * 32
    predict = compare_steps.calibrated_predictor(cal)
    rows = []
    for chunk, hist, seqs, ctx in LAYER_STEPS:
        tokens = chunk + seqs
        pairs = seqs * ctx + chunk * hist + chunk * (chunk + 1) // 2
        shape = {
            "geometry": "llama-3-8b", "n_layers": 32, "d_model": 4096, "n_heads": 32,
            "n_kv_heads": KV_HEADS, "head_dim": HEAD_DIM, "d_ff": 14336, "dtype": "bfloat16",
            "dtype_bytes": ELEM, "phase": "hybrid" if chunk and seqs else
            ("prefill" if chunk else "decode"), "prefill_chunk_tokens": chunk,
            "prefill_history_tokens": hist, "decode_seqs": seqs, "decode_context_tokens": ctx,
            "block_size": 16, "tokens_in_step": tokens, "weight_bytes": params * ELEM * 32,
            "kv_bytes_read": kv_tok * (seqs * ctx + hist + chunk),
            "kv_bytes_written": kv_tok * tokens, "linear_flops": 2 * tokens * params * 32,
            "attention_flops": 4 * 32 * HEAD_DIM * pairs * 32,
        }  # fmt: skip
        t = predict(compare_steps.StepShape(**shape))
        rows.append({**shape, "device": "synthetic", "cuda_graph": True,
                     **_timing(t, rng, noise)})  # fmt: skip
    return rows


def write_run(out: Path, *, noise: float = 0.0, seed: int = 0, truth: Truth | None = None):
    """Write env.json and the four CSVs; returns the truth Calibration."""
    tr = truth or Truth()
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    env = {"date_utc": "2026-11-29T00:00:00Z", "mode": "synthetic", "device_kind": "synthetic",
           "device": "SYNTHETIC H200-like example", "driver": "n/a", "torch": "n/a",
           "note": "made-up numbers with known answers; not a measurement"}  # fmt: skip
    (out / "env.json").write_text(json.dumps(env, indent=2) + "\n")
    _write(out / "paged_attention.csv", PAGED_COLUMNS, paged_rows(tr, rng, noise))
    _write(out / "copies.csv", COPY_COLUMNS, copy_rows(tr, rng, noise))
    gemm = gemm_rows(tr, rng, 0.0)  # noise-free: the truth curves come from these rows
    _write(out / "gemm.csv", GEMM_COLUMNS, gemm)
    cal = truth_calibration(tr, gemm)
    _write(out / "layer.csv", LAYER_COLUMNS, layer_rows(tr, cal, rng, noise))
    return cal


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--noise", type=float, default=0.0, help="lognormal sigma on each time")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    write_run(args.out, noise=args.noise, seed=args.seed)
    print(f"wrote SYNTHETIC run to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Import LLMServingSim's measured vLLM kernel tables into a version-2 calibration file.

Responsibility: read ``kernels/<GPU>/<org>/<model>/bf16/tp<N>/`` of the LLMServingSim
performance data (casys-kaist/LLMServingSim, MIT; README in the data folder):
``dense.csv`` (layer, tokens, time_us), ``per_sequence.csv`` (layer, sequences, time_us),
``attention.csv`` (prefill_chunk, kv_prefill, n_decode, kv_decode, time_us),
``moe.csv`` (tokens, activated_experts, time_us) and, where ``meta.yaml`` has the skew fit
enabled, ``skew_fit.csv`` (alpha by bucket: pc, n_label, skew_rate_label, kv_big_label,
kp_label) with the fit's ``bucket_axes`` and pooled ``alpha_default``, and write
``hardware_profiles/calibration/<accelerator>-llmservingsim.yaml`` with a
``kernel_tables`` section per model (``sim.cost.table_schema``), selected by a scenario's
``cost.calibration``.

What is kept: every dense and per-sequence point; the attention grid on its doubling
axes (prefill chunk 0, 16..2048; history and context 0, 16..16384; decodes 0, 1..256),
which every table has complete (the RTX PRO 6000 tables add points on a x1.5 grid: they
are held back and only used to check the interpolation, ``--check``); the expert grid;
the skew fit's alpha as a grid over (pc, the buckets of the four other axes), ``nan``
where the fit has no bucket (a profile with ``skew_fit.enabled: false`` gets none: upstream
then applies no correction).
Nothing is rescaled or fitted. The per-step host overhead and the all-reduce are not in
these tables (the profiler runs one GPU, eagerly): the overhead comes from ``--overhead-s``
(measured from a dev run, docs/validation.md), the all-reduce from the accelerator
profile.

Usage::

    python kernels_validation/llmservingsim_import.py DATA/kernels/RTX4090 \
        --accelerator rtx-4090-24gb --overhead-s 0.0 --out hardware_profiles/calibration/...

Invariant: reads CSV with pandas only; nothing here imports torch; the file it writes
loads with ``sim.cost.calibration.load_calibration`` (checked before it returns).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

SOURCE = {
    "repository": "https://github.com/casys-kaist/LLMServingSim",
    "commit": "5daddb21a545658d5150b535712d0494584b5278",
    "licence": "MIT",
    "path": "profiler/perf/<GPU>/<org>/<model>/bf16 (copied to ../shared/data/llmservingsim_perf/kernels)",
}

#: source model folder -> (kvsim table name, geometry, layer ops, step ops, sequence ops)
LLAMA_OPS = {"layernorm": 2, "qkv_proj": 1, "rotary_emb": 1, "o_proj": 1, "gate_up_proj": 1,
             "act_fn": 1, "down_proj": 1}  # fmt: skip
QWEN3_OPS = {**LLAMA_OPS, "qk_norm": 1}
QWEN3_MOE_OPS = {"layernorm": 2, "qkv_proj": 1, "qk_norm": 1, "rotary_emb": 1, "o_proj": 1}
MODELS = {
    "meta-llama/Llama-3.1-8B": ("llama-3.1-8b", LLAMA_OPS, {
        "num_layers": 32, "d_model": 4096, "num_q_heads": 32, "num_kv_heads": 8, "head_dim": 128,
        "intermediate_size": 14336, "vocab_size": 128256}),
    "Qwen/Qwen3-32B": ("qwen3-32b", QWEN3_OPS, {
        "num_layers": 64, "d_model": 5120, "num_q_heads": 64, "num_kv_heads": 8, "head_dim": 128,
        "intermediate_size": 25600, "vocab_size": 151936}),
    "Qwen/Qwen3-30B-A3B-Instruct-2507": ("qwen3-30b-a3b", QWEN3_MOE_OPS, {
        "num_layers": 48, "d_model": 2048, "num_q_heads": 32, "num_kv_heads": 4, "head_dim": 128,
        "vocab_size": 151936, "num_experts": 128, "experts_per_token": 8}),
}  # fmt: skip
STEP_OPS = ["embedding", "final_layernorm"]
SEQUENCE_OPS = ["lm_head", "sampler"]
ACCELERATORS = {  # accelerator profile -> reference figures (its datasheet)
    "rtx-4090-24gb": (1.008e12, 165.2e12, 32.0e9),
    "rtx-pro-6000-server-96gb": (1.792e12, 503.8e12, 64.0e9),
}


def doubling(values, start: int) -> list[int]:
    """0 and the points start x 2^k among ``values`` (the profiler's doubling grid)."""
    out = [0] if 0 in values else []
    x = start
    while x <= max(values):
        if x in values:
            out.append(x)
        x *= 2
    return out


def attention_grid(frame: pd.DataFrame) -> tuple[dict, pd.DataFrame]:
    """(the doubling grid as a calibration mapping, the held-back rows)."""
    cols = ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode")
    axes = {c: doubling(set(frame[c]), 1 if c == "n_decode" else 16) for c in cols}
    keep = np.ones(len(frame), dtype=bool)
    for c in cols:
        keep &= frame[c].isin(axes[c]).to_numpy()
    kept, held = frame[keep], frame[~keep]
    grid = np.full([len(axes[c]) for c in cols], np.nan)
    index = [kept[c].map({v: i for i, v in enumerate(axes[c])}).to_numpy() for c in cols]
    grid[tuple(index)] = kept["time_us"].to_numpy()
    return {**axes, "time_us": _fmt(grid.ravel())}, held


def _fmt(values) -> str:
    return " ".join("nan" if np.isnan(v) else f"{v:.5g}" for v in np.asarray(values, dtype=float))


def curves(frame: pd.DataFrame, key: str) -> dict:
    """``layer, <key>, time_us`` -> {key: axis, time_us: {layer: values}} (one shared axis)."""
    table = frame.pivot(index=key, columns="layer", values="time_us").sort_index()
    if table.isna().any().any():
        raise SystemExit(f"error: {key} axis differs between operators")
    return {key: " ".join(str(int(x)) for x in table.index),
            "time_us": {op: _fmt(table[op]) for op in table.columns}}  # fmt: skip


def moe_grid(frame: pd.DataFrame) -> dict:
    table = frame.pivot(index="tokens", columns="activated_experts", values="time_us").sort_index()
    return {"tokens": [int(x) for x in table.index], "activated_experts": [int(x) for x in table.columns],
            "time_us": _fmt(table.to_numpy().ravel())}  # fmt: skip


SKEW_AXES = (("n_label", "n_bins", "n_labels", "n_decode_edges"),
             ("skew_rate_label", "skew_rate_bins", "skew_rate_labels", "skew_rate_edges"),
             ("kv_big_label", "kv_big_bins", "kv_big_labels", "kv_decode_max_edges"),
             ("kp_label", "kp_bins", "kp_labels", "kv_prefill_edges"))  # fmt: skip


def skew_fit(meta: dict, tp_dir: Path, tp: int) -> dict | None:
    """The skew fit of one TP degree as a calibration mapping, or None where not enabled."""
    fit = meta.get("skew_fit") or {}
    entry = (fit.get("per_tp") or {}).get(tp)
    if not fit.get("enabled") or not entry or not (tp_dir / "skew_fit.csv").is_file():
        return None
    axes = entry.get("bucket_axes") or fit["bucket_axes"]
    frame = pd.read_csv(tp_dir / "skew_fit.csv")
    pcs = sorted(int(x) for x in frame["pc"].unique())
    index = [frame["pc"].map({v: i for i, v in enumerate(pcs)}).to_numpy()]
    shape = [len(pcs)]
    for col, _, labels, _ in SKEW_AXES:
        names = list(axes[labels])
        unknown = set(frame[col]) - set(names)
        if unknown:
            raise SystemExit(f"error: {tp_dir / 'skew_fit.csv'}: {col} {sorted(unknown)[0]!r} not in {names}")
        index.append(frame[col].map({v: i for i, v in enumerate(names)}).to_numpy())
        shape.append(len(names))
    grid = np.full(shape, np.nan)
    grid[tuple(index)] = frame["alpha"].to_numpy()
    out = {"alpha_default": float(entry["alpha_default"]), "prefill_chunk": pcs}
    for _, bins, _, key in SKEW_AXES:
        out[key] = [float(x) for x in axes[bins]]
    out["alpha"] = _fmt(grid.ravel())
    return out


def model_tables(folder: Path, source: str) -> tuple[str, dict, dict[int, pd.DataFrame]]:
    """(table name, the kernel_tables entry, held-back attention rows per TP)."""
    name, ops, geometry = MODELS[source]
    meta = yaml.safe_load((folder / "meta.yaml").read_text())
    by_tp, held = {}, {}
    for tp_dir in sorted(folder.glob("tp*")):
        tp = int(tp_dir.name[2:])
        attn, held[tp] = attention_grid(pd.read_csv(tp_dir / "attention.csv"))
        dense = pd.read_csv(tp_dir / "dense.csv")
        entry = {"dense": curves(dense[dense.layer.isin([*ops, *STEP_OPS])], "tokens"),
                 "per_sequence": curves(pd.read_csv(tp_dir / "per_sequence.csv"), "sequences"),
                 "attention": attn}  # fmt: skip
        if (tp_dir / "moe.csv").is_file():
            entry["moe"] = moe_grid(pd.read_csv(tp_dir / "moe.csv"))
        skew = skew_fit(meta, tp_dir, tp)
        if skew is not None:
            entry["skew_fit"] = skew
        by_tp[tp] = entry
    tables = {"source_model": source, "geometry": geometry, "layer_ops": ops,
              "step_ops": STEP_OPS, "sequence_ops": SEQUENCE_OPS, "by_tp": by_tp}  # fmt: skip
    return name, tables, held


def build(gpu_dir: Path, accelerator: str, overhead_s: float) -> tuple[dict, dict]:
    """(the calibration mapping, held-back attention rows by (table, tp))."""
    hbm, peak, link = ACCELERATORS[accelerator]
    kernel_tables, held, devices = {}, {}, set()
    for meta in sorted(gpu_dir.glob("*/*/bf16/meta.yaml")):
        info = yaml.safe_load(meta.read_text())
        devices.add(info["gpu"])
        if info["model"] not in MODELS:
            continue
        name, tables, rows = model_tables(meta.parent, info["model"])
        kernel_tables[name] = tables
        held.update({(name, tp): r for tp, r in rows.items()})
    first = yaml.safe_load(next(iter(sorted(gpu_dir.glob("*/*/bf16/meta.yaml")))).read_text())
    mapping = {
        "schema_version": 2, "device": ", ".join(sorted(devices)), "driver": f"CUDA {first['cuda_version']}",
        "torch_version": f"vLLM {first['vllm_version']}", "date": str(first["profiled_at"])[:10],
        "source": "public-measurement", "origin": SOURCE,
        "notes": ("vLLM 0.19 kernels of one layer measured eagerly on one GPU by LLMServingSim's profiler "
                  "(TP shards as per-GPU shapes). Priced with cost.step_pricing kernel_tables "
                  "(docs/engine.md); step_overhead_s: per-step host time not hidden by vLLM's async "
                  "scheduling, measured from the dev run (docs/validation.md)."),
        "reference": {"hbm_bw_bytes_per_s": hbm, "peak_flops_per_s": peak,
                      "host_link_bw_bytes_per_s": link, "basis": f"datasheet ({accelerator})"},
        "step_overhead_s": overhead_s,
        "not_measured": {
            "copy": "host<->device copies are not in the data: the accelerator profile's link",
            "allreduce": "the profiler runs one GPU: the accelerator profile's allreduce.by_tp",
        },
        "kernel_tables": kernel_tables,
    }  # fmt: skip
    return mapping, held


def write(mapping: dict, out: Path, argv: list[str]) -> None:
    header = [
        "# Measured vLLM 0.19 kernel tables (LLMServingSim profiler), imported unchanged.",
        f"# Source: {SOURCE['repository']} @ {SOURCE['commit']} ({SOURCE['licence']} licence),",
        f"#   {SOURCE['path']}.",
        f"# Written by kernels_validation/llmservingsim_import.py {' '.join(argv)}",
        f"# on {dt.date.today().isoformat()}; see docs/validation.md.",
    ]
    body = yaml.safe_dump(mapping, sort_keys=False, width=10**9, allow_unicode=False)
    out.write_text("\n".join(header) + "\n" + body)
    from sim.cost.calibration import load_calibration

    load_calibration(str(out))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gpu_dir", type=Path, help="kernels/<GPU> folder of the LLMServingSim data")
    ap.add_argument("--accelerator", required=True, choices=sorted(ACCELERATORS))
    ap.add_argument("--overhead-s", type=float, default=0.0, help="per-step host overhead (s)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if not args.gpu_dir.is_dir():
        print(f"error: {args.gpu_dir}: not a folder", file=sys.stderr)
        return 2
    mapping, _ = build(args.gpu_dir, args.accelerator, args.overhead_s)
    if not mapping["kernel_tables"]:
        print(f"error: {args.gpu_dir}: no model this importer knows ({', '.join(MODELS)})", file=sys.stderr)
        return 2
    write(mapping, args.out, sys.argv[1:] if argv is None else argv)
    print(f"wrote {args.out} ({', '.join(mapping['kernel_tables'])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""LLMServingSim's measured vLLM kernel tables as a kvsim calibration, with its held-out error.

Responsibility: read ``kernels/<GPU>/<org>/<model>/bf16/tp<N>/`` of the LLMServingSim
performance data (casys-kaist/LLMServingSim, MIT; README in the data folder):
``dense.csv`` (layer, tokens, time_us), ``per_sequence.csv`` (layer, sequences, time_us),
``attention.csv`` (prefill_chunk, kv_prefill, n_decode, kv_decode, time_us),
``moe.csv`` (tokens, activated_experts, time_us) and, where ``meta.yaml`` has the skew fit
enabled, ``skew_fit.csv`` (alpha by bucket: pc, n_label, skew_rate_label, kv_big_label,
kp_label) with the fit's ``bucket_axes`` and pooled ``alpha_default``, and build the
version-2 calibration mapping with a ``kernel_tables`` section per model
(``sim.cost.table_schema``), selected by a scenario's ``cost.calibration``
(``kvsim calibrate --llmservingsim DIR``; ``kernels_validation/llmservingsim_import.py``
is a thin wrapper of this module).

What is kept: every dense and per-sequence point; the attention grid on its doubling
axes (prefill chunk 0, 16..2048; history and context 0, 16..16384; decodes 0, 1..256),
which every table has complete (the RTX PRO 6000 tables add points on a x1.5 grid: they
are held back and only used to check the interpolation); the expert grid; the skew fit's
alpha as a grid over (pc, the buckets of the four other axes), ``nan`` where the fit has
no bucket (a profile with ``skew_fit.enabled: false`` gets none: upstream then applies no
correction). Nothing is rescaled or fitted. The per-step host overhead and the all-reduce
are not in these tables (the profiler runs one GPU, eagerly): the overhead is an argument
(measured from a dev run, docs/validation.md), the all-reduce the accelerator profile's.

Held-out error (``cross_validation``): the tables are not a fit but a lookup, so what can
be wrong is the interpolation and extrapolation the pricer does between and beyond the
measured token counts. Leave one token range out: for each range of
``vidur_crossval.TOKEN_RANGES`` in turn, every dense operator curve keeps only its points
outside the range, and the points inside are priced from the rest with the pricer's own
``kernel_tables.Curve`` (linear inside, clamped below the first point, the last slope
above), per (model, TP, tokens, operator group: linear, element-wise, embedding = the
step operators), summed with the layer's operator counts. Leave one model out does not
apply: ``kernel_tables`` prices only the models it measured (a scenario of another model
is refused), so no prediction of an unmeasured model exists to score.

Invariant: reads CSV with pandas from bytes read within the project's file-size bound
(``sim.yamlio.read_bytes_bounded``) and YAML with the project's bounded safe loader only
(``sim.yamlio.load_yaml``: its size, node and depth bounds, a key twice in one mapping
refused naming both lines); bad input is a ``LlmServingSimDataError`` naming the file (a
one-line message, with the line where the loader has one); deterministic.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.cost.kernel_tables import Curve
from sim.cost.vidur_crossval import TOKEN_RANGES, split_errors
from sim.errors import ConfigError, KvsimError
from sim.yamlio import load_yaml, read_bytes_bounded


class LlmServingSimDataError(KvsimError):
    """An LLMServingSim data folder this reader cannot use (one line, naming the file)."""


META_GLOB = "*/*/bf16/meta.yaml"
TP_FOLDER = re.compile(r"tp\d+")
ATTENTION_COLUMNS = ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us")
#: meta.yaml's ``gpu`` -> the accelerator profile whose datasheet is the reference
DEVICES = {
    "NVIDIA GeForce RTX 4090": "rtx-4090-24gb",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "rtx-pro-6000-server-96gb",
}
LINEAR_OPS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
QUANTITY = ("per-layer dense operator-group time (linear, element-wise; embedding: the step "
            "operators) priced from the kernel tables' curves")  # fmt: skip


def read_csv(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    """A table of the data with the columns it must have (else a one-line error). Its bytes
    are read by ``sim.yamlio.read_bytes_bounded`` (the bound of every user file,
    ``MAX_FILE_BYTES``; a device such as ``/dev/zero`` refused before it is opened) before
    pandas parses them."""
    if not path.exists():
        raise LlmServingSimDataError(f"{path}: missing (an LLMServingSim table)")
    try:
        frame = pd.read_csv(io.BytesIO(read_bytes_bounded(path)))
    except ConfigError as exc:
        raise LlmServingSimDataError(str(exc)) from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise LlmServingSimDataError(f"{path}: not a CSV table ({str(exc).splitlines()[0]})") from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise LlmServingSimDataError(
            f"{path}: no column {missing[0]!r} (expected {', '.join(columns)})"
        )
    return frame


def read_meta(path: Path) -> dict[str, Any]:
    """A ``meta.yaml`` of the data, with the keys this reader uses (read by the bounded
    loader every other YAML input goes through: ``file:line: message`` when it refuses)."""
    try:
        info, _ = load_yaml(path)
    except ConfigError as exc:
        raise LlmServingSimDataError(str(exc)) from None
    need = ("gpu", "model", "vllm_version", "cuda_version", "profiled_at")
    if not isinstance(info, dict) or any(k not in info for k in need):
        raise LlmServingSimDataError(f"{path}: a meta.yaml with keys {', '.join(need)}")
    return info


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


def doubling(values: set[int], start: int) -> list[int]:
    """0 and the points start x 2^k among ``values`` (the profiler's doubling grid)."""
    out = [0] if 0 in values else []
    x = start
    while x <= max(values):
        if x in values:
            out.append(x)
        x *= 2
    return out


def attention_grid(frame: pd.DataFrame) -> tuple[dict[str, Any], pd.DataFrame]:
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


def _fmt(values: Any) -> str:
    return " ".join("nan" if np.isnan(v) else f"{v:.5g}" for v in np.asarray(values, dtype=float))


def curves(frame: pd.DataFrame, key: str) -> dict[str, Any]:
    """``layer, <key>, time_us`` -> {key: axis, time_us: {layer: values}} (one shared axis)."""
    table = frame.pivot(index=key, columns="layer", values="time_us").sort_index()
    if table.isna().any().any():
        raise LlmServingSimDataError(f"{key} axis differs between operators")
    return {key: " ".join(str(int(x)) for x in table.index),
            "time_us": {op: _fmt(table[op]) for op in table.columns}}  # fmt: skip


def moe_grid(frame: pd.DataFrame) -> dict[str, Any]:
    table = frame.pivot(index="tokens", columns="activated_experts", values="time_us").sort_index()
    return {"tokens": [int(x) for x in table.index], "activated_experts": [int(x) for x in table.columns],
            "time_us": _fmt(table.to_numpy().ravel())}  # fmt: skip


SKEW_AXES = (("n_label", "n_bins", "n_labels", "n_decode_edges"),
             ("skew_rate_label", "skew_rate_bins", "skew_rate_labels", "skew_rate_edges"),
             ("kv_big_label", "kv_big_bins", "kv_big_labels", "kv_decode_max_edges"),
             ("kp_label", "kp_bins", "kp_labels", "kv_prefill_edges"))  # fmt: skip


def skew_fit(meta: dict[str, Any], tp_dir: Path, tp: int) -> dict[str, Any] | None:
    """The skew fit of one TP degree as a calibration mapping, or None where not enabled."""
    fit = meta.get("skew_fit") or {}
    entry = (fit.get("per_tp") or {}).get(tp)
    if not fit.get("enabled") or not entry or not (tp_dir / "skew_fit.csv").is_file():
        return None
    axes = entry.get("bucket_axes") or fit["bucket_axes"]
    frame = read_csv(tp_dir / "skew_fit.csv", ("pc", "alpha", *(a[0] for a in SKEW_AXES)))
    pcs = sorted(int(x) for x in frame["pc"].unique())
    index = [frame["pc"].map({v: i for i, v in enumerate(pcs)}).to_numpy()]
    shape = [len(pcs)]
    for col, _, labels, _ in SKEW_AXES:
        names = list(axes[labels])
        unknown = set(frame[col]) - set(names)
        if unknown:
            raise LlmServingSimDataError(
                f"{tp_dir / 'skew_fit.csv'}: {col} {sorted(unknown)[0]!r} not in {names}"
            )
        index.append(frame[col].map({v: i for i, v in enumerate(names)}).to_numpy())
        shape.append(len(names))
    grid = np.full(shape, np.nan)
    grid[tuple(index)] = frame["alpha"].to_numpy()
    out = {"alpha_default": float(entry["alpha_default"]), "prefill_chunk": pcs}
    for _, bins, _, key in SKEW_AXES:
        out[key] = [float(x) for x in axes[bins]]
    out["alpha"] = _fmt(grid.ravel())
    return out


def model_tables(folder: Path, source: str) -> tuple[str, dict[str, Any], dict[int, pd.DataFrame]]:
    """(table name, the kernel_tables entry, held-back attention rows per TP)."""
    name, ops, geometry = MODELS[source]
    meta = read_meta(folder / "meta.yaml")
    by_tp, held = {}, {}
    for tp, tp_dir in tp_folders(folder):
        attn, held[tp] = attention_grid(read_csv(tp_dir / "attention.csv", ATTENTION_COLUMNS))
        dense = read_csv(tp_dir / "dense.csv", ("layer", "tokens", "time_us"))
        entry = {"dense": curves(dense[dense.layer.isin([*ops, *STEP_OPS])], "tokens"),
                 "per_sequence": curves(read_csv(tp_dir / "per_sequence.csv", ("layer", "sequences", "time_us")), "sequences"),
                 "attention": attn}  # fmt: skip
        if (tp_dir / "moe.csv").is_file():
            entry["moe"] = moe_grid(read_csv(tp_dir / "moe.csv", ("tokens", "activated_experts", "time_us")))
        skew = skew_fit(meta, tp_dir, tp)
        if skew is not None:
            entry["skew_fit"] = skew
        by_tp[tp] = entry
    tables = {"source_model": source, "geometry": geometry, "layer_ops": ops,
              "step_ops": STEP_OPS, "sequence_ops": SEQUENCE_OPS, "by_tp": by_tp}  # fmt: skip
    return name, tables, held


def build(
    gpu_dir: Path, accelerator: str, overhead_s: float
) -> tuple[dict[str, Any], dict[tuple[str, int], pd.DataFrame]]:
    """(the calibration mapping, held-back attention rows by (table, tp))."""
    hbm, peak, link = ACCELERATORS[accelerator]
    kernel_tables, held, devices = {}, {}, set()
    for meta in sorted(gpu_dir.glob(META_GLOB)):
        info = read_meta(meta)
        devices.add(info["gpu"])
        if info["model"] not in MODELS:
            continue
        name, tables, rows = model_tables(meta.parent, info["model"])
        kernel_tables[name] = tables
        held.update({(name, tp): r for tp, r in rows.items()})
    first = read_meta(next(iter(sorted(gpu_dir.glob(META_GLOB)))))
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


def tp_folders(folder: Path) -> list[tuple[int, Path]]:
    """The ``tpN`` folders of a model's tables (N: digits), by N; other names are ignored."""
    found = [(int(d.name[2:]), d) for d in folder.iterdir() if d.is_dir() and TP_FOLDER.fullmatch(d.name)]
    return sorted(found)


def the_gpu(gpu_dir: Path) -> str:
    """The one GPU (meta.yaml's ``gpu``) whose tables ``gpu_dir`` holds."""
    metas = sorted(gpu_dir.glob(META_GLOB))
    if not metas:
        raise LlmServingSimDataError(
            f"{gpu_dir}: no {META_GLOB} (name the kernels/<GPU> folder of the LLMServingSim data)"
        )
    gpus = sorted({str(read_meta(m)["gpu"]) for m in metas})
    if len(gpus) > 1:
        raise LlmServingSimDataError(f"{gpu_dir}: tables of several GPUs ({'; '.join(gpus)})")
    return gpus[0]


def accelerator_of(gpu_dir: Path) -> str:
    """The accelerator profile of the one GPU whose tables ``gpu_dir`` holds."""
    gpu = the_gpu(gpu_dir)
    if gpu not in DEVICES:
        raise LlmServingSimDataError(
            f"{gpu_dir}: GPU {gpu!r} has no accelerator profile here; name one with "
            f"--accelerator (valid: {', '.join(sorted(ACCELERATORS))})"
        )
    return DEVICES[gpu]


def group_errors(dense: pd.DataFrame, ops: dict[str, int], lo: int, hi: int) -> np.ndarray:
    """Relative errors of the operator groups at the token counts in [lo, hi] priced from
    each operator's curve without them (module docstring); empty if nothing to predict."""
    counts = {**ops, **dict.fromkeys(STEP_OPS, 1)}
    table = dense[dense.layer.isin(list(counts))].pivot(index="tokens", columns="layer",
                                                      values="time_us").sort_index()  # fmt: skip
    inside = (table.index >= lo) & (table.index <= hi)
    if not inside.any() or inside.all():
        return np.empty(0)
    x, q = table.index[~inside].to_numpy(float), table.index[inside].to_numpy(float)
    errors = []
    for group in ("linear", "elementwise", "embedding"):
        names = [op for op in counts if _group(op) == group and op in table.columns]
        if not names:
            continue
        measured = sum(counts[op] * table.loc[inside, op].to_numpy(float) for op in names)
        predicted = sum(counts[op] * _curve_at(x, table.loc[~inside, op].to_numpy(float), q)
                        for op in names)  # fmt: skip
        errors.append(predicted / measured - 1.0)
    return np.concatenate(errors) if errors else np.empty(0)


def _curve_at(x: np.ndarray, time_us: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The pricer's own interpolation (``kernel_tables.Curve``) of these points at ``q``."""
    return np.asarray(Curve(tuple(x), tuple(time_us)).at(q))  # type: ignore[no-untyped-call]


def _group(op: str) -> str:
    if op in STEP_OPS:
        return "embedding"
    return "linear" if op in LINEAR_OPS else "elementwise"


def cross_validation(gpu_dir: Path, accelerator: str) -> dict[str, Any]:
    """The ``cross_validation`` section of the calibration of ``gpu_dir`` (module docstring)."""
    by_range: dict[str, list[np.ndarray]] = {name: [] for name in TOKEN_RANGES}
    models, tps, max_tokens = set(), set(), 0
    for meta in sorted(gpu_dir.glob(META_GLOB)):
        info = read_meta(meta)
        if info["model"] not in MODELS:
            continue
        name, ops, _ = MODELS[info["model"]]
        models.add(name)
        for tp, tp_dir in tp_folders(meta.parent):
            tps.add(tp)
            dense = read_csv(tp_dir / "dense.csv", ("layer", "tokens", "time_us"))
            max_tokens = max(max_tokens, int(dense.tokens.max()))
            for rng, (lo, hi) in TOKEN_RANGES.items():
                by_range[rng].append(group_errors(dense, ops, lo, hi))
    errors = {k: np.concatenate(v) for k, v in by_range.items() if v and sum(map(len, v))}
    if not errors:
        raise LlmServingSimDataError(f"{gpu_dir}: too few token counts to hold any range out")
    return {
        "quantity": QUANTITY,
        "leave_one_token_range_out": split_errors(errors),
        "domain": {"accelerator": accelerator, "models": sorted(models),
                   "max_tokens": max_tokens, "tp": sorted(tps)},
    }  # fmt: skip


def llmservingsim_calibration(
    gpu_dir: Path, accelerator: str | None, overhead_s: float, *, cross_validate: bool
) -> dict[str, Any]:
    """The calibration mapping of the tables in ``gpu_dir`` (``kvsim calibrate
    --llmservingsim``), with its ``cross_validation`` section when asked. Tables that parse
    but do not hold together (an empty grid, a duplicate row, a meta.yaml field missing, a
    value that is not a number) are refused in one line, never a traceback."""
    try:
        return _calibration(gpu_dir, accelerator, overhead_s, cross_validate=cross_validate)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        what = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
        raise LlmServingSimDataError(f"{gpu_dir}: malformed LLMServingSim tables: {what}") from None


def _calibration(
    gpu_dir: Path, accelerator: str | None, overhead_s: float, *, cross_validate: bool
) -> dict[str, Any]:
    """``llmservingsim_calibration``'s work, which may trip on malformed tables."""
    acc = accelerator_of(gpu_dir) if accelerator is None else accelerator
    if acc not in ACCELERATORS:
        raise LlmServingSimDataError(
            f"--accelerator {acc!r}: no reference figures (valid: {', '.join(sorted(ACCELERATORS))})"
        )
    the_gpu(gpu_dir)  # one GPU, with meta.yaml files (--accelerator names its profile)
    mapping, _ = build(gpu_dir, acc, overhead_s)
    if not mapping["kernel_tables"]:
        raise LlmServingSimDataError(
            f"{gpu_dir}: no model this reader knows (valid: {', '.join(MODELS)})"
        )
    if cross_validate:
        mapping["cross_validation"] = cross_validation(gpu_dir, acc)
    mapping["header"] = [
        "# Measured vLLM kernel tables (LLMServingSim profiler), imported unchanged: PUBLIC",
        f"# MEASUREMENTS (not ours), {SOURCE['repository']} @ {SOURCE['commit']}",
        f"# ({SOURCE['licence']} licence), {SOURCE['path']}.",
        "# Schema: sim/cost/table_schema.py; docs/kernels_validation.md.",
        f"# Remake: kvsim calibrate --llmservingsim {gpu_dir.name} --accelerator {acc}"
        + (f" --overhead-s {overhead_s:g}" if overhead_s else "")
        + (" --cross-validate" if cross_validate else "") + " --out FILE",
    ]
    return mapping

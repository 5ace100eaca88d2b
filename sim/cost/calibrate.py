"""``kvsim calibrate``: a calibration file for ``sim.cost`` from measured kernel tables.

Responsibility: read a results folder written by ``kernels_validation/run_all.sh``
(``env.json`` and the CSVs) and derive, as fractions of the reference figures (the
accelerator's datasheet):
  attention   KV bytes / time / HBM bandwidth of the fused paged decode kernel, by block
              size and context (the ``block_context`` sweep; the cost model charges KV
              bytes, so q/output/table bytes are left out here);
  decode      weight bytes / time / HBM bandwidth of one layer's linears, by tokens <= 1024;
  gemm        FLOPs / time / dense peak of one layer's linears, by tokens;
  copy        per direction, pinned, ``t = overhead + bytes / bw`` fitted by least squares
              on relative error (so small transfers weigh as much as large ones);
  step overhead  the median of (measured - calibrated prediction without overhead) over the
              ``bench_layer`` steps (``read_steps``, ``calibrated_predictor``), clamped at
              0: a fitted intercept, not a measured one;
plus informational figures (d2d ceiling, pageable and bidirectional peaks, copy/GEMM
overlap slowdowns). Then it validates the result with ``sim.cost.calibration`` and writes
the YAML (``write_calibration``, also the writer of the Vidur-fitted files that
``kvsim calibrate --vidur`` makes from ``sim.cost.vidur_crossval``, with their
cross-validated error).
``kernels_validation/calibrate.py`` is a thin wrapper of this module.

Invariant: nothing is written unless it loads back with ``load_calibration``; the file
says where its numbers came from (device, driver, torch, date, source).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from sim.cost.calibration import (
    Calibration,
    calibration_from_spec,
    load_calibration,
    validate_mapping,
)
from sim.errors import KvsimError
from sim.profiles.bounds import MAX_EFFICIENCY
from sim.yamlio import json_value, read_bytes_bounded

#: device-name fragment -> accelerator profile (first match wins: 'gh200' before 'h200')
DEVICE_PROFILES = [
    ("gh200", "gh200-96gb"), ("h200", "h200-141gb"), ("h100", "h100-sxm-80gb"),
    ("a100", "a100-80gb"), ("b200", "b200-192gb"), ("v100", "v100-32gb"),
    ("mi300x", "mi300x-192gb"),
]  # fmt: skip
CSV_FILES = ("paged_attention", "copies", "gemm", "layer")
DECODE_MAX_TOKENS = 1024
# clipped to what the calibration file accepts, so a written file always loads
EFF_MIN, EFF_MAX = 1e-6, MAX_EFFICIENCY


@dataclass
class RunData:
    folder: Path
    env: dict
    frames: dict[str, pd.DataFrame]

    def csv(self, name: str) -> pd.DataFrame:
        if name not in self.frames:
            raise KvsimError(f"{self.folder}: {name}.csv is missing or empty")
        return self.frames[name]


def read_run(folder: Path) -> RunData:
    env_path = folder / "env.json"
    if not env_path.is_file():
        raise KvsimError(f"{folder}: env.json is missing (run_all.sh writes it)")
    try:
        text = env_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KvsimError(f"{env_path}: cannot read: {exc}") from None
    env = json_value(text, str(env_path), lines=True)  # syntax, digits, depth, a key twice
    frames = {}
    for name in CSV_FILES:
        path = folder / f"{name}.csv"
        if path.is_file():
            df = pd.read_csv(io.BytesIO(read_bytes_bounded(path)))
            if not df.empty:
                frames[name] = df
    return RunData(folder, env, frames)


@dataclass(frozen=True)
class Reference:
    hbm_bw_bytes_per_s: float
    peak_flops_per_s: float
    host_link_bw_bytes_per_s: float | None
    basis: str


def profile_for_device(device: str) -> str | None:
    low = device.lower()
    return next((prof for frag, prof in DEVICE_PROFILES if frag in low), None)


def reference_figures(run: RunData, accelerator: str | None) -> Reference:
    """Datasheet figures of the accelerator profile; a CPU run uses its measured ceilings."""
    name = accelerator or profile_for_device(str(run.env.get("device", "")))
    if name:
        from sim.profiles import load_accelerator

        acc = load_accelerator(name)
        return Reference(acc.hbm_bw_bytes_per_s, acc.peak_flops_per_s("bf16"),
                         acc.host_link.bw_bytes_per_s_per_direction,
                         f"datasheet (accelerator profile {name})")  # fmt: skip
    if run.env.get("device_kind") != "cpu":
        raise KvsimError(f"no accelerator profile matches device {run.env.get('device')!r}; "
                         "name one with --accelerator")  # fmt: skip
    copies, gemm = run.csv("copies"), run.csv("gemm")
    d2d = copies[copies["test"] == "d2d"]["bw_bytes_per_s"]
    if d2d.empty:
        raise KvsimError(f"{run.folder}: copies.csv has no d2d row (the CPU memory ceiling)")
    return Reference(float(d2d.max()), float(gemm["flop_per_s"].max()), None,
                     "measured ceilings of this CPU run (d2d copy, best GEMM): no datasheet")  # fmt: skip


def _clip(x) -> np.ndarray:
    return np.clip(np.asarray(x, dtype=float), EFF_MIN, EFF_MAX)


def attention_grid(paged: pd.DataFrame, hbm: float):
    """(block sizes, contexts, efficiency grid) from the paged rows of the block sweep."""
    rows = paged[(paged["sweep"] == "block_context") & paged["impl"].str.endswith("_paged")]
    if rows.empty:
        raise KvsimError("paged_attention.csv has no block_context rows of a paged kernel")
    eff = rows["kv_bytes"] / rows["time_s_median"] / hbm
    grid = (rows.assign(eff=eff).pivot_table(index="block_size", columns="context_tokens",
                                             values="eff", aggfunc="mean"))  # fmt: skip
    grid = grid.dropna(axis=1, how="any")  # a context cut short by the time budget
    if grid.empty:
        raise KvsimError("paged_attention.csv: no context was measured at every block size")
    blocks = [int(b) for b in grid.index]
    contexts = [int(c) for c in grid.columns]
    return blocks, contexts, [list(map(float, _clip(r))) for r in grid.to_numpy()]


def _layer_rows(gemm: pd.DataFrame) -> pd.DataFrame:
    rows = gemm[gemm["op"] == "layer"]
    if rows.empty:
        raise KvsimError("gemm.csv has no 'layer' rows")
    return rows


def decode_curve(gemm: pd.DataFrame, hbm: float):
    """Weight-streaming efficiency by tokens (<= 1024), mean over the geometries measured."""
    rows = _layer_rows(gemm)
    rows = rows[rows["tokens"] <= DECODE_MAX_TOKENS]
    eff = (rows["weight_bytes"] / rows["time_s_median"] / hbm).groupby(rows["tokens"]).mean()
    return [int(t) for t in eff.index], list(map(float, _clip(eff.to_numpy())))


def gemm_curve(gemm: pd.DataFrame, peak: float):
    """Fraction of dense peak by tokens, mean over the geometries measured."""
    rows = _layer_rows(gemm)
    eff = (rows["flops"] / rows["time_s_median"] / peak).groupby(rows["tokens"]).mean()
    return [int(t) for t in eff.index], list(map(float, _clip(eff.to_numpy())))


def fit_copy(sizes_bytes, times_s) -> tuple[float, float, float]:
    """Fit ``t = overhead + bytes / bw`` minimising relative error; (overhead, bw, max err).

    Each equation is divided by its measured time, so a 4 KiB copy counts as much as a
    2 GiB one. A negative intercept is refitted as 0 (no overhead).
    """
    n = np.asarray(sizes_bytes, dtype=float)
    t = np.asarray(times_s, dtype=float)
    if len(n) < 2 or np.any(t <= 0):
        raise KvsimError("a copy fit needs at least two sizes with positive times")
    a = np.column_stack([1.0 / t, n / t])
    (overhead, inv_bw), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    if overhead < 0:
        overhead = 0.0
        inv_bw = float(np.sum(n / t) / np.sum((n / t) ** 2))
    if inv_bw <= 0:
        raise KvsimError("copy times do not grow with size; cannot fit a bandwidth")
    pred = overhead + n * inv_bw
    return float(overhead), float(1.0 / inv_bw), float(np.max(np.abs(pred - t) / t))


def copy_fits(copies: pd.DataFrame) -> tuple[dict, dict, str]:
    """Per direction fits of single pinned copies (pageable only if no pinned rows)."""
    single = copies[copies["test"] == "single"]
    memory = "pinned" if (single["memory"] == "pinned").any() else "pageable"
    fits, extra = {}, {}
    for direction in ("h2d", "d2h"):
        rows = single[(single["memory"] == memory) & (single["direction"] == direction)]
        overhead, bw, err = fit_copy(rows["size_bytes"], rows["time_s_median"])
        fits[direction] = {"overhead_s": overhead, "bw_bytes_per_s": bw}
        extra[f"copy_{direction}_fit_max_rel_err"] = err
    note = "" if memory == "pinned" else "copy fits use pageable rows (no pinned memory here)"
    return fits, extra, note


def measured_extras(run: RunData) -> dict[str, float]:
    """Informational figures for the file's ``measured`` section."""
    out: dict[str, float] = {}
    cp = run.frames.get("copies")
    if cp is not None:
        for (test, mem, d), g in cp.groupby(["test", "memory", "direction"]):
            if test in ("single", "bidir", "d2d"):
                out[f"peak_{test}_{mem}_{d}_bw_bytes_per_s"] = float(g["bw_bytes_per_s"].max())
        for _, r in cp[cp["test"].isin(["overlap", "overlap_gemm"])].iterrows():
            who = "copy" if r["test"] == "overlap" else "gemm"
            out[f"overlap_{r['direction']}_{who}_slowdown"] = float(r["slowdown"])
        for _, r in cp[cp["test"] == "blocks"].iterrows():
            kind = "many" if r["n_transfers"] > 1 else "gathered"
            out[f"blocks_{kind}_{r['direction']}_bw_bytes_per_s"] = float(r["bw_bytes_per_s"])
    pa = run.frames.get("paged_attention")
    if pa is not None:
        best = pa.groupby("impl")["achieved_bw_bytes_per_s"].max()
        for impl, v in best.items():
            out[f"peak_attention_{impl}_bw_bytes_per_s"] = float(v)
    gm = run.frames.get("gemm")
    if gm is not None:
        out["peak_gemm_flop_per_s"] = float(gm["flop_per_s"].max())
    return out


def step_overhead(run: RunData, spec_without_overhead) -> tuple[float, str]:
    """Median residual of the calibrated prediction over bench_layer steps, clamped at 0."""
    if "layer" not in run.frames:
        return 0.0, "no layer.csv: step overhead set to 0"
    cal = calibration_from_spec(spec_without_overhead)
    shapes, measured = read_steps(run.folder / "layer.csv")
    pred = calibrated_predictor(cal, with_overhead=False)
    residual = measured - np.array([pred(s) for s in shapes])
    return max(0.0, float(np.median(residual))), ""


#: what a results folder's held-out error is of (``layer_cross_validation``)
LAYER_QUANTITY = ("step time of bench_layer's random-weight {geometry} stack ({layers} "
                  "layers, PyTorch + the Triton paged kernel), not of a serving engine")  # fmt: skip


def layer_cross_validation(run: RunData, spec_without_overhead, accelerator: str | None) -> dict:
    """The ``cross_validation`` section of a results folder: leave one token range out
    (``vidur_crossval.TOKEN_RANGES``) over ``bench_layer``'s steps. The efficiency curves
    come from the other benchmarks (none of them sees a layer step); the one figure fitted
    on the steps, the step overhead, is refitted as the median residual of the steps
    outside each range in turn (clamped at 0, as ``step_overhead``), and the steps inside
    are predicted with it: errors ``predicted / measured - 1``. Needs ``layer.csv`` and
    steps in at least two ranges. The domain: the accelerator profile of the reference
    figures, bench_layer's geometry (a kvsim model profile name where one matches), its
    largest step and TP 1."""
    from sim.cost.vidur_crossval import TOKEN_RANGES, split_errors

    if "layer" not in run.frames:
        raise KvsimError(f"{run.folder}: --cross-validate needs layer.csv (bench_layer.py writes it)")
    shapes, measured = read_steps(run.folder / "layer.csv")
    pred = calibrated_predictor(calibration_from_spec(spec_without_overhead), with_overhead=False)
    residual = measured - np.array([pred(sh) for sh in shapes])
    tokens = np.array([sh.tokens_in_step for sh in shapes])
    errors = {}
    for name, (lo, hi) in TOKEN_RANGES.items():
        inside = (tokens >= lo) & (tokens <= hi)
        if inside.any() and (~inside).any():
            overhead = max(0.0, float(np.median(residual[~inside])))
            predicted = measured[inside] - residual[inside] + overhead
            errors[name] = predicted / measured[inside] - 1.0
    if len(errors) < 2:
        raise KvsimError(f"{run.folder}: layer.csv: --cross-validate needs steps in at least "
                         f"two token ranges ({', '.join(TOKEN_RANGES)})")  # fmt: skip
    geometries = sorted({sh.geometry for sh in shapes})
    layers = sorted({sh.n_layers for sh in shapes})
    from sim.profiles.registry import available

    known = set(available("model"))
    return {
        "quantity": LAYER_QUANTITY.format(geometry="/".join(geometries),
                                          layers="/".join(map(str, layers))),
        "leave_one_token_range_out": split_errors(errors),
        "domain": {"accelerator": accelerator or profile_for_device(str(run.env.get("device", ""))),
                   "models": [g for g in geometries if g in known], "max_tokens": int(tokens.max()),
                   "tp": [1]},
    }  # fmt: skip


def build_mapping(run: RunData, accelerator: str | None, source: str | None,
                  cross_validate: bool = False) -> dict:  # fmt: skip
    """The calibration file's content (validated before it is returned); with
    ``cross_validate``, its ``cross_validation`` section (``layer_cross_validation``)."""
    env = run.env
    ref = reference_figures(run, accelerator)
    blocks, contexts, grid = attention_grid(run.csv("paged_attention"), ref.hbm_bw_bytes_per_s)
    dec_x, dec_e = decode_curve(run.csv("gemm"), ref.hbm_bw_bytes_per_s)
    gem_x, gem_e = gemm_curve(run.csv("gemm"), ref.peak_flops_per_s)
    fits, fit_err, copy_note = copy_fits(run.csv("copies"))
    kind = env.get("device_kind", "gpu")
    mapping = {
        "schema_version": 1, "device": str(env.get("device") or "unknown"),
        "driver": str(env.get("driver") or "n/a"), "torch_version": str(env.get("torch") or "n/a"),
        "date": str(env.get("date_utc", "1970-01-01"))[:10],
        "source": source or (kind if kind in ("gpu", "cpu", "synthetic") else "gpu"),
        "notes": "", "reference": {
            "hbm_bw_bytes_per_s": ref.hbm_bw_bytes_per_s,
            "peak_flops_per_s": ref.peak_flops_per_s,
            "host_link_bw_bytes_per_s": ref.host_link_bw_bytes_per_s, "basis": ref.basis},
        "step_overhead_s": 0.0,
        "attention": {"block_sizes": blocks, "context_tokens": contexts, "bw_efficiency": grid},
        "decode": {"x": dec_x, "efficiency": dec_e}, "gemm": {"x": gem_x, "efficiency": gem_e},
        "copy": fits, "measured": {**measured_extras(run), **fit_err},
    }  # fmt: skip
    spec = validate_mapping(mapping, str(run.folder))
    overhead, overhead_note = step_overhead(run, spec)
    mapping["step_overhead_s"] = overhead
    if cross_validate:
        mapping["cross_validation"] = layer_cross_validation(run, spec, accelerator)
    notes = [f"made by kvsim calibrate from {run.folder.name}/",
             f"run mode: {env.get('mode', '?')}", copy_note, overhead_note]  # fmt: skip
    if mapping["source"] == "cpu":
        notes.insert(0, "CPU QUICK RUN: checks the pipeline only; NOT GPU numbers")
    if mapping["source"] == "synthetic":
        notes.insert(0, "SYNTHETIC: made-up data with known answers; NOT a measurement")
    mapping["notes"] = "; ".join(n for n in notes if n)
    validate_mapping(mapping, str(run.folder))
    return mapping


def _round(x):
    if isinstance(x, float):
        return float(f"{x:.6g}")
    if isinstance(x, list):
        return [_round(v) for v in x]
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    return x


class _Dumper(yaml.SafeDumper):
    """Mappings in block style, lists of numbers (and rows of them) on one line."""

    def represent_list(self, data):
        flat = all(not isinstance(v, (list, dict)) for v in data)
        rows = all(isinstance(v, list) for v in data)
        return self.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flat and not rows)


_Dumper.add_representer(list, _Dumper.represent_list)


def write_calibration(mapping: dict, path: Path) -> None:
    """Write the YAML with a header, then prove it loads."""
    header = [
        f"# Calibration for {mapping['device']} ({mapping['source']}), {mapping['date']}.",
        "# Written by `kvsim calibrate`; efficiencies are fractions of `reference`.",
        "# Schema and interpolation: sim/cost/calibration.py. How it was measured:",
        "# docs/kernels_validation.md.",
    ]
    if "header" in mapping:  # the builder wrote its own (sim.cost.llmservingsim)
        header, mapping = mapping["header"], {k: v for k, v in mapping.items() if k != "header"}
    elif mapping["source"] == "public-measurement":
        o = mapping["origin"]
        header = [
            f"# Calibration for {mapping['device']} from PUBLIC MEASUREMENTS (not ours):",
            f"# the Vidur authors' profiling data, {o['repository']} at commit {o['commit']},",
            f"# licence {o['licence']} (workloads/data/vidur_profiling/LICENSE), {o['path']}.",
            "# Fitted on alternate token counts / message sizes; the other half is held back and",
            "# checked in tests/kernels/test_vidur_profiles.py. Not measured here (see",
            "# not_measured): attention, host copies. Units: seconds, bytes, bytes/s; efficiencies",
            "# are fractions of `reference`. Schema: sim/cost/calibration.py, docs/kernels_validation.md.",
            f"# Remake: kvsim calibrate DATA --vidur {mapping['gpu_key']} --out FILE",
        ]
        if "cross_validation" in mapping:
            header[-1] += " --cross-validate"
            header.insert(-1, "# cross_validation: held-out error of a refit without each model / "
                              "token range (sim/cost/vidur_crossval.py).")  # fmt: skip
        mapping = {k: v for k, v in mapping.items() if k != "gpu_key"}
    elif mapping["source"] != "gpu":
        header.insert(0, f"# {mapping['source'].upper()} -- not a GPU measurement.")
    if "cross_validation" in mapping and mapping["schema_version"] == 1:
        header += ["# cross_validation: held-out error of the step time (the step overhead",
                   "# refitted without each token range; layer_cross_validation)."]
    if mapping["source"] == "synthetic":
        header.insert(
            1,
            "# Remake: python kernels_validation/synthetic_run.py DIR && python "
            "kernels_validation/calibrate.py DIR --accelerator h200-141gb --source synthetic --out FILE",
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    body = yaml.dump(_round(mapping), Dumper=_Dumper, sort_keys=False, width=100)
    tmp = path.with_name(f".{path.stem}.partial.yaml")  # renamed once it loads back
    try:
        tmp.write_text("\n".join(header) + "\n" + body)
        load_calibration(str(tmp))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)



# ------------------------------------------------------- bench_layer steps (layer.csv)
@dataclass(frozen=True)
class StepShape:
    """One measured step, as bench_layer wrote it (whole stack of ``n_layers``)."""

    geometry: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    dtype: str
    dtype_bytes: int
    phase: str
    prefill_chunk_tokens: int
    prefill_history_tokens: int
    decode_seqs: int
    decode_context_tokens: int
    block_size: int
    tokens_in_step: int
    weight_bytes: float
    kv_bytes_read: float
    kv_bytes_written: float
    linear_flops: float
    attention_flops: float

    @property
    def n_seqs(self) -> int:
        return self.decode_seqs + (1 if self.prefill_chunk_tokens else 0)

    @property
    def mean_context_tokens(self) -> int:
        """KV tokens read per sequence, averaged over the step's sequences."""
        kv = self.decode_seqs * self.decode_context_tokens
        kv += self.prefill_history_tokens + self.prefill_chunk_tokens
        return max(1, round(kv / max(1, self.n_seqs)))

    @property
    def label(self) -> str:
        parts = []
        if self.prefill_chunk_tokens:
            parts.append(f"chunk {self.prefill_chunk_tokens}+hist {self.prefill_history_tokens}")
        if self.decode_seqs:
            parts.append(f"{self.decode_seqs} dec x ctx {self.decode_context_tokens}")
        return f"{self.phase}: " + ", ".join(parts)


Predictor = Callable[[StepShape], float]
_SHAPE_FIELDS = [f.name for f in fields(StepShape)]


def read_steps(layer_csv: str | Path) -> tuple[list[StepShape], np.ndarray]:
    """(shapes, measured median seconds) from a bench_layer CSV."""
    path = Path(layer_csv)
    if not path.is_file():
        raise KvsimError(f"{path}: no such file (bench_layer.py writes layer.csv)")
    df = pd.read_csv(io.BytesIO(read_bytes_bounded(path)))
    missing = [c for c in [*_SHAPE_FIELDS, "time_s_median"] if c not in df.columns]
    if missing:
        raise KvsimError(f"{path}: not a bench_layer CSV; missing columns: {', '.join(missing)}")
    if df.empty:
        raise KvsimError(f"{path}: no rows")
    shapes = []
    for rec in df[_SHAPE_FIELDS].to_dict("records"):
        kw = {}
        for f in fields(StepShape):
            v = rec[f.name]
            kw[f.name] = str(v) if f.type == "str" else (int(v) if f.type == "int" else float(v))
        shapes.append(StepShape(**kw))
    return shapes, df["time_s_median"].to_numpy(dtype=float)


def calibrated_predictor(cal: Calibration, *, with_overhead: bool = True) -> Predictor:
    """Roofline terms scaled by the measured efficiencies, plus the fixed step overhead."""

    def predict(s: StepShape) -> float:
        hbm = cal.reference_hbm_bw_bytes_per_s
        weights_s = s.weight_bytes / (hbm * cal.decode_bw_efficiency(s.tokens_in_step))
        kv_eff = cal.attention_bw_efficiency(s.block_size, s.mean_context_tokens)
        mem_s = weights_s + s.kv_bytes_read / (hbm * kv_eff)
        rate = cal.reference_peak_flops_per_s * cal.gemm_efficiency(s.tokens_in_step)
        comp_s = (s.linear_flops + s.attention_flops) / rate
        return max(mem_s, comp_s) + (cal.step_overhead_s if with_overhead else 0.0)

    return predict

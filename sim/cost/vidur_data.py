"""Read the Vidur authors' public GPU profiles into tidy tables (here, not on the device).

Responsibility: turn Vidur's ``compute/<gpu>/<org>/<model>/mlp.csv`` (per-operator times
of one transformer layer, milliseconds, by token count and tensor-parallel degree) and
``network/<gpu>_dgx/all_reduce.csv`` (NCCL all-reduce, milliseconds, by message size in
bytes and number of GPUs) into two flat frames in seconds:

  operators  gpu, model, tp, tokens, op, time_s, held   (the median of Vidur's
             repetitions; duplicate (model, tp, tokens) rows are merged by their median);
  allreduce  gpu, tp, size_bytes, time_s, held          (intra-node rows only:
             devices_per_node equal to the number of GPUs, i.e. one DGX box over NVSwitch).

``held`` marks the held-back half used only for validation: alternate token counts of
each (gpu, model, tp) grid and alternate message sizes of each (gpu, tp); a subset file
carries it in a ``held_back`` column (Vidur's own files have none). ``outlier`` is
NaN for Vidur's files; a subset carries the flag ``vidur_compare.mark_outliers`` computed
on the full data (``linear_outlier`` / ``outlier`` columns), since a subset of held-back
rows has no fitted neighbours to compute it from.

Each (gpu, model) also gets its geometry (heads, widths, gated MLP), from which
``gemm_shapes`` derives the per-GPU GEMM shape (K x N) of every linear operator. The
same reader takes Vidur's own folder layout or the project's subset
(``workloads/data/vidur_profiling``, written by ``write_subset``: the same columns, fewer
rows). Invariant: times are seconds, sizes bytes; nothing here imports torch or another ``sim``
module. ``kernels_validation/vidur_data.py`` re-exports this module.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sim.yamlio import read_bytes_bounded

#: Vidur's operator columns of one layer, grouped as the cost model prices them
LINEAR_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEMENTWISE_OPS = ("input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")
STEP_OPS = ("emb",)  # once per step, not per layer
ALL_OPS = (*STEP_OPS, *ELEMENTWISE_OPS, *LINEAR_OPS)
GEOMETRY_COLUMNS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size",
                    "use_gated_mlp")  # fmt: skip
#: Vidur model folder -> kvsim model profile with the same geometry (None: no profile)
MODEL_PROFILES = {
    "Llama-2-7b-hf": "llama-2-7b",
    "Meta-Llama-3-8B": "llama-3-8b",
    "Llama-2-70b-hf": None,  # Llama-3-70B's layer geometry, 32k vocabulary
    "Meta-Llama-3-70B": "llama-3-70b",
}
SOURCE = {
    "repository": "https://github.com/microsoft/vidur",
    "commit": "7d47513363ec447a741ac5e47241580b47724fbf",
    "licence": "MIT",
    "path": "data/profiling",
}


class VidurDataError(ValueError):
    """A folder or file that is not Vidur profiling data (one line)."""


@dataclass(frozen=True)
class Geometry:
    """One model's layer geometry as Vidur's CSV states it."""

    n_head: int
    n_kv_head: int
    d_model: int
    d_ff: int
    vocab_size: int
    gated_mlp: bool

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head


@dataclass
class VidurData:
    operators: pd.DataFrame  # gpu, model, tp, tokens, op, time_s
    allreduce: pd.DataFrame  # gpu, tp, size_bytes, time_s
    geometry: dict[tuple[str, str], Geometry]  # (gpu, model) -> geometry

    def gpus(self) -> list[str]:
        return sorted(set(self.operators["gpu"]) | set(self.allreduce["gpu"]))


def gemm_shapes(g: Geometry, tp: int) -> dict[str, tuple[int, int]]:
    """Per-GPU (K, N) of each linear operator at tensor-parallel degree ``tp``.

    Column-parallel layers split N, row-parallel ones split K; KV heads fewer than the
    TP degree are replicated (one per GPU), as vLLM does.
    """
    hd = g.head_dim
    q = -(-g.n_head // tp) * hd
    kv = max(1, g.n_kv_head // tp) * hd
    up = (2 if g.gated_mlp else 1) * (g.d_ff // tp)
    return {
        "attn_pre_proj": (g.d_model, q + 2 * kv),
        "attn_post_proj": (q, g.d_model),
        "mlp_up_proj": (g.d_model, up),
        "mlp_down_proj": (g.d_ff // tp, g.d_model),
    }


def _median_col(op: str) -> str:
    return f"time_stats.{op}.median"


def read_mlp_csv(path: Path, gpu: str, model: str) -> tuple[pd.DataFrame, Geometry]:
    """One ``mlp.csv`` -> (tidy operator rows, geometry)."""
    try:
        df = pd.read_csv(io.BytesIO(read_bytes_bounded(path)))
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise VidurDataError(f"{path}: not a readable CSV ({exc})") from None
    need = [*GEOMETRY_COLUMNS, "num_tokens", "num_tensor_parallel_workers"]
    need += [_median_col(op) for op in ALL_OPS]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise VidurDataError(f"{path}: not a Vidur mlp.csv; missing columns: {', '.join(missing)}")
    geo = df[list(GEOMETRY_COLUMNS)].drop_duplicates()
    if len(geo) != 1:
        raise VidurDataError(f"{path}: more than one model geometry in one file")
    r = geo.iloc[0]
    geometry = Geometry(int(r.n_head), int(r.n_kv_head), int(r.n_embd), int(r.n_expanded_embd),
                        int(r.vocab_size), bool(r.use_gated_mlp))  # fmt: skip
    for col in ("held_back", "linear_outlier"):  # subset files only
        if col not in df.columns:
            df[col] = np.nan
    long = df.melt(
        id_vars=["num_tokens", "num_tensor_parallel_workers", "held_back", "linear_outlier"],
        value_vars=[_median_col(op) for op in ALL_OPS], var_name="op", value_name="time_ms",
    )  # fmt: skip
    long["op"] = long["op"].str.split(".").str[1]
    long = long.rename(columns={"num_tokens": "tokens", "num_tensor_parallel_workers": "tp"})
    tidy = long.groupby(["tp", "tokens", "op"], as_index=False).agg(
        time_ms=("time_ms", "median"), held=("held_back", "first"),
        outlier=("linear_outlier", "first"))  # fmt: skip
    tidy["time_s"] = tidy.pop("time_ms") * 1e-3
    tidy.insert(0, "model", model)
    tidy.insert(0, "gpu", gpu)
    return tidy, geometry


def read_allreduce_csv(path: Path, gpu: str) -> pd.DataFrame:
    """One ``all_reduce.csv`` -> intra-node rows (gpu, tp, size_bytes, time_s)."""
    df = pd.read_csv(io.BytesIO(read_bytes_bounded(path)))
    need = ["num_workers", "devices_per_node", "size", "time_stats.all_reduce.median"]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise VidurDataError(f"{path}: not a Vidur all_reduce.csv; missing: {', '.join(missing)}")
    df = df[df["devices_per_node"] == df["num_workers"]].copy()
    for col in ("held_back", "outlier"):  # subset files only
        if col not in df.columns:
            df[col] = np.nan
    out = df.groupby(["num_workers", "size"], as_index=False).agg(
        time_ms=("time_stats.all_reduce.median", "median"), held=("held_back", "first"),
        outlier=("outlier", "first"))  # fmt: skip
    out = out.rename(columns={"num_workers": "tp", "size": "size_bytes"})
    out["time_s"] = out.pop("time_ms") * 1e-3
    out.insert(0, "gpu", gpu)
    return out


def read_vidur(root: str | Path) -> VidurData:
    """Every GPU and model under ``root`` (Vidur's ``data/profiling`` layout)."""
    root = Path(root)
    if not (root / "compute").is_dir() and not (root / "network").is_dir():
        raise VidurDataError(f"{root}: no compute/ or network/ folder (Vidur profiling layout)")
    ops, geos, ars = [], {}, []
    for path in sorted(root.glob("compute/*/*/*/mlp.csv")):
        gpu, model = path.parts[-4], path.parts[-2]
        tidy, geo = read_mlp_csv(path, gpu, model)
        ops.append(tidy)
        geos[(gpu, model)] = geo
    for path in sorted(root.glob("network/*_dgx/all_reduce.csv")):
        ars.append(read_allreduce_csv(path, path.parent.name.removesuffix("_dgx")))
    if not ops and not ars:
        raise VidurDataError(f"{root}: no mlp.csv or all_reduce.csv found")
    operators = pd.concat(ops, ignore_index=True) if ops else pd.DataFrame(
        columns=["gpu", "model", "tp", "tokens", "op", "time_s", "held"])  # fmt: skip
    allreduce = pd.concat(ars, ignore_index=True) if ars else pd.DataFrame(
        columns=["gpu", "tp", "size_bytes", "time_s", "held"])  # fmt: skip
    if operators["held"].isna().any():
        operators["held"] = split_operators(operators)
    if allreduce["held"].isna().any():
        allreduce["held"] = split_allreduce(allreduce)
    operators["held"] = operators["held"].astype(bool)
    allreduce["held"] = allreduce["held"].astype(bool)
    return VidurData(operators, allreduce, geos)


def held_back(values: np.ndarray) -> np.ndarray:
    """Mask of the held-back points of one grid: every other value in sorted order
    (1st, 3rd, ... are fitted; 2nd, 4th, ... are held back)."""
    order = np.argsort(values, kind="stable")
    mask = np.zeros(len(values), dtype=bool)
    mask[order[1::2]] = True
    return mask


def split_operators(operators: pd.DataFrame) -> pd.Series:
    """Held-back flag per operator row: alternate token counts of each (gpu, model, tp)."""
    flag = pd.Series(False, index=operators.index)
    for _, g in operators.groupby(["gpu", "model", "tp"]):
        tokens = np.sort(g["tokens"].unique())
        held = set(tokens[held_back(tokens)])
        flag.loc[g.index] = g["tokens"].isin(held)
    return flag


def split_allreduce(allreduce: pd.DataFrame) -> pd.Series:
    """Held-back flag per all-reduce row: alternate message sizes of each (gpu, tp)."""
    flag = pd.Series(False, index=allreduce.index)
    for _, g in allreduce.groupby(["gpu", "tp"]):
        flag.loc[g.index] = held_back(g["size_bytes"].to_numpy())
    return flag


def write_subset(data: VidurData, out: Path, keep_ops, keep_allreduce) -> None:
    """Write the rows selected by the boolean masks in Vidur's own layout and columns
    (medians only, plus ``held_back``), so ``read_vidur`` reads the subset like the
    original and keeps each row's held-back flag."""
    for (gpu, model), g in data.operators[keep_ops].groupby(["gpu", "model"]):
        geo = data.geometry[(gpu, model)]
        wide = g.pivot_table(index=["tp", "tokens"], columns="op", values="time_s").reset_index()
        held = g.groupby(["tp", "tokens"])["held"].first().to_numpy()
        outlier = g.groupby(["tp", "tokens"])["outlier"].first().fillna(False).to_numpy()
        rows = pd.DataFrame({_median_col(op): wide[op] * 1e3 for op in ALL_OPS})
        rows["n_head"], rows["n_kv_head"], rows["n_embd"] = geo.n_head, geo.n_kv_head, geo.d_model
        rows["n_expanded_embd"], rows["vocab_size"] = geo.d_ff, geo.vocab_size
        rows["use_gated_mlp"] = geo.gated_mlp
        rows["num_tokens"], rows["num_tensor_parallel_workers"] = wide["tokens"], wide["tp"]
        rows["held_back"], rows["linear_outlier"] = held, outlier.astype(bool)
        path = out / "compute" / gpu / "meta-llama" / model / "mlp.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        rows.to_csv(path, index=False, float_format="%.6g")
    for gpu, g in data.allreduce[keep_allreduce].groupby("gpu"):
        rows = pd.DataFrame({
            "time_stats.all_reduce.median": g["time_s"] * 1e3, "num_workers": g["tp"],
            "size": g["size_bytes"], "devices_per_node": g["tp"], "collective": "all_reduce",
            "held_back": g["held"], "outlier": g["outlier"].fillna(False).astype(bool),
        })  # fmt: skip
        path = out / "network" / f"{gpu}_dgx" / "all_reduce.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        rows.to_csv(path, index=False, float_format="%.6g")

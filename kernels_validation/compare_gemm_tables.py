"""Our measured GEMM times against a calibration's measured GEMM tables, shape by shape.

Usage: ``python kernels_validation/compare_gemm_tables.py RUN/gemm.csv --calibration NAME
[--out FILE.md]``. Every ``gemm.csv`` row (one linear of a layer, not ``op=layer``) whose
per-GPU shape ``(in_features, out_features)`` and token count the calibration's
``linear.shapes`` measured too is listed with both times and their ratio
(calibration / ours), then the median ratio per regime: weight streaming (<= 64 tokens)
of the shapes with >= 256 MiB of weights, where the time is the weights over HBM
bandwidth and the ratio should approach the bandwidth ratio of the two devices, and the
compute-bound steps (>= 2048 tokens), where it should approach their dense-peak ratio.
Runs here (numpy, pandas, sim), not on the device. Invariant: reads only; writes only
``--out``.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from compare_steps import emit

from sim.cost.calibration import load_calibration
from sim.errors import KvsimError
from sim.yamlio import read_bytes_bounded

STREAMING_MAX_TOKENS = 64
STREAMING_MIN_WEIGHT_BYTES = 256 * 2**20
COMPUTE_MIN_TOKENS = 2048


def matched(gemm_csv: Path, calibration: str) -> pd.DataFrame:
    """Rows of ``gemm_csv`` whose shape and token count the calibration's tables measured."""
    cal = load_calibration(calibration)
    df = pd.read_csv(io.BytesIO(read_bytes_bounded(gemm_csv)))
    rows = []
    for r in df[df["op"] != "layer"].itertuples():
        tab = cal.gemm_table(int(r.in_features), int(r.out_features))
        if tab is None or int(r.tokens) not in tab.tokens:
            continue
        theirs = tab.time_at(int(r.tokens))
        rows.append({"geometry": r.geometry, "op": r.op, "k": int(r.in_features),
                     "n": int(r.out_features), "tokens": int(r.tokens),
                     "weight_bytes": int(r.weight_bytes), "ours_s": float(r.time_s_median),
                     "theirs_s": theirs, "ratio": theirs / float(r.time_s_median)})  # fmt: skip
    if not rows:
        raise KvsimError(f"{gemm_csv}: no GEMM shape and token count in common with {calibration}")
    return pd.DataFrame(rows)


def regimes(m: pd.DataFrame) -> dict[str, tuple[int, float]]:
    """Regime -> (rows, median ratio)."""
    stream = m[(m["tokens"] <= STREAMING_MAX_TOKENS) & (m["weight_bytes"] >= STREAMING_MIN_WEIGHT_BYTES)]
    compute = m[m["tokens"] >= COMPUTE_MIN_TOKENS]
    return {f"weight streaming (<= {STREAMING_MAX_TOKENS} tokens, >= 256 MiB of weights)":
            (len(stream), float(np.median(stream["ratio"])) if len(stream) else float("nan")),
            f"compute-bound (>= {COMPUTE_MIN_TOKENS} tokens)":
            (len(compute), float(np.median(compute["ratio"])) if len(compute) else float("nan"))}  # fmt: skip


def to_markdown(m: pd.DataFrame, title: str, calibration: str) -> str:
    lines = [f"# {title}", "", f"Per-GPU GEMM times: ours (`gemm.csv`) and `{calibration}`'s "
             "measured tables, at token counts both measured; ratio = theirs / ours.", "",
             "| regime | rows | median ratio |", "|---|---:|---:|"]  # fmt: skip
    lines += [f"| {k} | {n} | {v:.2f} |" for k, (n, v) in regimes(m).items()]
    lines += ["", "| model | op | k x n | tokens | ours us | theirs us | ratio |",
              "|---|---|---|---:|---:|---:|---:|"]  # fmt: skip
    lines += [f"| {r.geometry} | {r.op} | {r.k}x{r.n} | {r.tokens} | {r.ours_s * 1e6:.1f} | "
              f"{r.theirs_s * 1e6:.1f} | {r.ratio:.2f} |" for r in m.itertuples()]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gemm_csv", type=Path)
    ap.add_argument("--calibration", required=True, help="a name or a file with linear.shapes")
    ap.add_argument("--title", default="Our GEMM times against a calibration's tables")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    try:
        text = to_markdown(matched(args.gemm_csv, args.calibration), args.title, args.calibration)
    except (KvsimError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return emit(text, args.out)


if __name__ == "__main__":
    sys.exit(main())

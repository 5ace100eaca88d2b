"""Run-to-run repeatability of two ``run_all.sh`` results folders on the same device.

Usage: ``python kernels_validation/compare_runs.py RUN_A RUN_B [--out FILE.md]``. For each
CSV both folders hold, rows are matched on every column that is not a timing or a rate
(``time_s_*``, ``reps``, ``*_per_s``, ``slowdown``, ``alone_s``), and the table gives, per
file and sweep, the median and the largest ``|time_B / time_A - 1|`` of ``time_s_median``
over the rows both measured. Runs here (pandas), not on the device. Invariant: reads the
two folders only; writes only ``--out``.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import pandas as pd
from compare_steps import emit

from sim.yamlio import read_bytes_bounded

FILES = ("paged_attention", "copies", "gemm", "layer")
GROUP = {"paged_attention": "sweep", "copies": "test", "gemm": "geometry", "layer": "phase"}


def _timing(col: str) -> bool:
    return (col.startswith("time_s") or col.endswith("_per_s") or col in
            ("reps", "slowdown", "alone_s", "cuda_graph", "rotations"))  # fmt: skip


def compare(a: Path, b: Path) -> pd.DataFrame:
    """One row per (file, group): rows matched, median and largest |B/A - 1|, the worst row."""
    out = []
    for name in FILES:
        pa, pb = a / f"{name}.csv", b / f"{name}.csv"
        if not (pa.is_file() and pb.is_file()):
            continue
        da = pd.read_csv(io.BytesIO(read_bytes_bounded(pa)))
        db = pd.read_csv(io.BytesIO(read_bytes_bounded(pb)))
        keys = [c for c in da.columns if c in db.columns and not _timing(c)]
        m = da.merge(db, on=keys, suffixes=("_a", "_b"))
        m["rel"] = m["time_s_median_b"] / m["time_s_median_a"] - 1.0
        for group, g in m.groupby(GROUP[name]):
            worst = g.loc[g["rel"].abs().idxmax()]
            varying = [k for k in keys if k != GROUP[name] and g[k].nunique() > 1]
            label = ", ".join(f"{k}={worst[k]}" for k in varying)
            out.append({"file": name, "group": group, "rows": len(g),
                        "median_abs": g["rel"].abs().median(), "worst": worst["rel"],
                        "worst_row": label})  # fmt: skip
    return pd.DataFrame(out)


def to_markdown(df: pd.DataFrame, a: Path, b: Path) -> str:
    lines = [f"# Repeatability: {b.name} against {a.name}", "",
             "`time_s_median` of rows measured in both runs: |B / A - 1|.", "",
             "| file | group | rows | median | worst | worst row |", "|---|---|---:|---:|---:|---|"]
    for r in df.itertuples():
        lines.append(f"| {r.file} | {r.group} | {r.rows} | {r.median_abs:.1%} | {r.worst:+.1%} | {r.worst_row} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_a", type=Path)
    ap.add_argument("run_b", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    for p in (args.run_a, args.run_b):
        if not p.is_dir():
            print(f"error: {p}: not a folder (run_all.sh writes one)", file=sys.stderr)
            return 2
    return emit(to_markdown(compare(args.run_a, args.run_b), args.run_a, args.run_b), args.out)


if __name__ == "__main__":
    sys.exit(main())

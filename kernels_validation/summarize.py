"""Print a short table of a run's results (the device reply keeps only the output's tail).

Responsibility: read the CSVs that run_all.sh wrote under a folder and print, in a few
dozen lines, the numbers the chapter's claims are about: correctness pass/fail, paged
decode bandwidth by block size, pinned/pageable copy peaks, copy-compute overlap, GEMM
peaks and step times. Invariant: reads only; a missing or partial CSV is reported, never
fatal. Imports only the standard library.
"""

from __future__ import annotations

import csv
import sys
from collections import Counter
from pathlib import Path


def rows(folder: Path, name: str) -> list[dict]:
    path = folder / name
    if not path.exists():
        print(f"{name}: missing")
        return []
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def f(row: dict, key: str) -> float:
    try:
        return float(row[key])
    except (KeyError, ValueError):
        return float("nan")


def correctness(folder: Path) -> None:
    rs = rows(folder, "correctness.csv")
    if rs:
        counts = Counter((r["impl"], r["status"]) for r in rs)
        worst = {}
        for r in rs:
            if r["status"] == "pass":
                key = (r["impl"], r["dtype"])
                worst[key] = max(worst.get(key, 0.0), f(r, "rel_err"))
        print("correctness:", dict(counts))
        for (impl, dtype), err in sorted(worst.items()):
            print(f"  worst passing rel err {impl:10s} {dtype:9s} {err:.2e}")


def paged(folder: Path) -> None:
    rs = [r for r in rows(folder, "paged_attention.csv") if r["sweep"] == "block_context"]
    if not rs:
        return
    print("paged decode attention, achieved GB/s (bytes_moved / median time):")
    contexts = sorted({int(r["context_tokens"]) for r in rs})
    impls = sorted({(r["impl"], r["block_size"] if "paged" in r["impl"] else "-") for r in rs},
                   key=lambda t: (t[0], int(t[1]) if t[1] != "-" else 0))  # fmt: skip
    print("  " + f"{'impl':28s}{'B':>5}" + "".join(f"{c:>10}" for c in contexts))
    for impl, b in impls:
        cells = []
        for c in contexts:
            m = [r for r in rs if r["impl"] == impl and int(r["context_tokens"]) == c
                 and (b == "-" or r["block_size"] == b)]  # fmt: skip
            cells.append(f"{f(m[0], 'achieved_bw_bytes_per_s') / 1e9:10.1f}" if m else " " * 10)
        print(f"  {impl:28s}{b:>5}" + "".join(cells))


def copies(folder: Path) -> None:
    rs = rows(folder, "copies.csv")
    if not rs:
        return
    print("copies:")
    for test, memory, direction in [("single", "pinned", "h2d"), ("single", "pinned", "d2h"),
                                    ("single", "pageable", "h2d"), ("single", "pageable", "d2h"),
                                    ("bidir", "pinned", "both"), ("d2d", "device", "d2d")]:  # fmt: skip
        m = [r for r in rs if (r["test"], r["memory"], r["direction"]) == (test, memory, direction)]
        if m:
            best = max(m, key=lambda r: f(r, "bw_bytes_per_s"))
            print(f"  {test:7s} {memory:8s} {direction:5s} peak {f(best, 'bw_bytes_per_s') / 1e9:8.2f}"
                  f" GB/s at {int(best['size_bytes']):,} B")  # fmt: skip
    for r in rs:
        if r["test"] in ("blocks", "overlap", "overlap_gemm"):
            print(f"  {r['test']:12s} {r['direction']:4s} {f(r, 'time_s_median') * 1e3:9.3f} ms"
                  f"  slowdown {f(r, 'slowdown'):.3f}  {r['note']}")  # fmt: skip


def gemm_and_layer(folder: Path) -> None:
    rs = [r for r in rows(folder, "gemm.csv") if r["op"] == "layer"]
    for geo in sorted({r["geometry"] for r in rs}):
        m = [r for r in rs if r["geometry"] == geo]
        best = max(m, key=lambda r: f(r, "flop_per_s"))
        low = min(m, key=lambda r: int(r["tokens"]))
        print(f"gemm {geo}: peak {f(best, 'flop_per_s') / 1e12:.1f} TFLOP/s at {best['tokens']} "
              f"tokens; {low['tokens']} token: {f(low, 'weight_bw_bytes_per_s') / 1e9:.0f} GB/s")  # fmt: skip
    for r in rows(folder, "layer.csv"):
        print(f"layer {r['phase']:7s} chunk={r['prefill_chunk_tokens']:>5} hist="
              f"{r['prefill_history_tokens']:>5} seqs={r['decode_seqs']:>3} ctx="
              f"{r['decode_context_tokens']:>5} graph={r['cuda_graph']:5s} "
              f"{f(r, 'time_s_median') * 1e3:9.3f} ms")  # fmt: skip


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".")
    correctness(folder)
    paged(folder)
    copies(folder)
    gemm_and_layer(folder)


if __name__ == "__main__":
    main()

"""Whether two runs of one scenario simulated the same steps while their engines grouped
them into different decisions (a fast-path change: longer runs, fewer decisions).

    python benchmarks/same_steps.py RUN_A RUN_B

``same_run.py`` compares tables row by row; ``steps.parquet`` and ``memory.parquet`` have a
row per decision, so a change that only merges runs moves them while the simulation does
not. Here every decision of the run with fewer (B) must be a stretch of consecutive
decisions of the other (A): the same start, step index and decision-time columns as the
stretch's first row (batch, queues, admissions, the first step's tokens, price and
breakdown), the stretch's end, ``n_steps`` summed, ``prefill_s`` and ``attention_max_s``
summed (to 1e-9 relative); every memory row of B is a memory row of A (the same time,
every column equal). With ``summary.json`` (every key but ``engine_decisions``) and the
other tables equal (``same_run.py``), the two simulated the same steps. Exit status 0 when they agree, 1 when not (the
first differences printed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

#: columns of a decision's row that add up over the steps it ran (or its end)
SUMMED = ("n_steps", "prefill_s", "attention_max_s")
STRETCH = ("end_s", "duration_s", "batch_tokens")  # the stretch's end; n_steps-dependent


def compare(a_dir: Path, b_dir: Path) -> list[str]:
    errors: list[str] = []
    a = pd.read_parquet(a_dir / "steps.parquet")
    b = pd.read_parquet(b_dir / "steps.parquet")
    starts = a.start_s.to_numpy()
    lo = np.searchsorted(starts, b.start_s.to_numpy())
    hi = np.append(lo[1:], len(a))
    if len(lo) and (lo >= len(a)).any() or not np.array_equal(starts[np.minimum(lo, len(a) - 1)], b.start_s):
        return ["steps: a decision of B starts where none of A does"]
    firsts = a.iloc[lo].reset_index(drop=True)
    same = [c for c in b.columns if c not in SUMMED and c not in STRETCH]
    for c in same:
        if not firsts[c].equals(b[c]):
            n = int((firsts[c] != b[c]).sum())
            errors.append(f"steps.{c}: {n} decisions differ from their stretch's first row")
    last = a.end_s.to_numpy()[hi - 1]
    if not np.array_equal(last, b.end_s.to_numpy()):
        errors.append("steps.end_s: a decision of B does not end where its stretch does")
    for c in SUMMED:
        sums = np.add.reduceat(a[c].to_numpy(dtype=np.float64), lo) if len(lo) else np.array([])
        if not np.allclose(sums, b[c].to_numpy(dtype=np.float64), rtol=1e-9, atol=0):
            errors.append(f"steps.{c}: stretch sums differ")
    ma = pd.read_parquet(a_dir / "memory.parquet")
    mb = pd.read_parquet(b_dir / "memory.parquet")
    ta = ma.t_s.to_numpy()
    idx = np.searchsorted(ta, mb.t_s.to_numpy())
    if (idx >= len(ma)).any() or not np.array_equal(ta[np.minimum(idx, len(ma) - 1)], mb.t_s):
        errors.append("memory: a row of B is at a time no row of A is")
    else:
        picked = ma.iloc[idx].reset_index(drop=True)
        for c in mb.columns:
            if not picked[c].equals(mb[c]):
                errors.append(f"memory.{c}: {int((picked[c] != mb[c]).sum())} rows differ")
    return errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_a", type=Path, help="the run with more decisions")
    ap.add_argument("run_b", type=Path, help="the run with fewer")
    args = ap.parse_args()
    errors = compare(args.run_a, args.run_b)
    for e in errors[:20]:
        print(e)
    print("same steps" if not errors else f"{len(errors)} differences")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()

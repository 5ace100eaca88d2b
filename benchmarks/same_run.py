"""Whether two kvsim runs give the same results: every table (each ``*.parquet``, NaN equal
to NaN, the same dtypes) and every ``summary.json`` key but the wall clock and the
provenance of the command (``IGNORED_KEYS``).

    python benchmarks/same_run.py RUN_A RUN_B
    python benchmarks/same_run.py --trees TREE_A TREE_B SCENARIO [--set KEY=VALUE ...]

The first form compares two run folders. The second runs ``SCENARIO`` (a path inside each
tree) with each checkout's own kvsim, then compares: each run starts in its own tree's
folder with ``PYTHONPATH`` set to it, and checks which ``sim`` it imported, because
``python -m`` puts the working directory before ``PYTHONPATH`` (run from one checkout, a
second checkout's "kvsim" is the first one's). Exit status 0 when identical, 1 when not;
every difference is printed.

A speed change that claims "no result moves" is checked with this on the reference
scenarios (docs/performance.md, "How to measure"); ``kvsim regress`` checks the golden
cases' summary metrics against their baselines.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

#: summary.json keys that say how and when the run was made, not what it found
IGNORED_KEYS = frozenset({"wall_time_s", "command", "scenario_path"})


def _strip(x: Any) -> Any:
    """``x`` without the ignored keys (and any key naming wall-clock time), at any depth."""
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k not in IGNORED_KEYS and "wall" not in k}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def _diff_keys(a: Any, b: Any, path: str = "") -> list[str]:
    """The dotted keys where two stripped summaries differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                out.append(f"{path}{k} (only in {'the second' if k not in a else 'the first'})")
            else:
                out += _diff_keys(a[k], b[k], f"{path}{k}.")
        return out
    return [] if a == b else [path.rstrip(".") or "(the whole summary)"]


def differences(a: Path, b: Path) -> list[str]:
    """What differs between run folders ``a`` and ``b`` (empty: the same results)."""
    out = []
    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    out += [f"only in {a}: {p}" for p in sorted(files_a - files_b)]
    out += [f"only in {b}: {p}" for p in sorted(files_b - files_a)]
    for rel in sorted(files_a & files_b):
        if rel.suffix == ".parquet":
            fa, fb = pd.read_parquet(a / rel), pd.read_parquet(b / rel)
            wall = [c for c in fa.columns if "wall" in c]
            fa, fb = fa.drop(columns=wall), fb.drop(columns=wall, errors="ignore")
            if not fa.equals(fb):
                cols = [c for c in fa.columns if c not in fb or not fa[c].equals(fb[c])]
                out.append(f"{rel}: differs (columns {', '.join(map(str, cols)) or 'layout'})")
        elif rel.name == "summary.json":
            sa = _strip(json.loads((a / rel).read_text()))
            sb = _strip(json.loads((b / rel).read_text()))
            out += [f"summary.json: {k}" for k in _diff_keys(sa, sb)]
    return out


def run_in(tree: Path, scenario: str, sets: list[str], out: Path) -> None:
    """``kvsim run`` of ``scenario`` with ``tree``'s own kvsim, from ``tree``'s folder."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    check = f"import sim, sys; sys.exit(not sim.__file__.startswith({str(tree) + os.sep!r}))"
    if subprocess.run([sys.executable, "-c", check], cwd=tree, env=env).returncode:
        raise SystemExit(f"{tree}: its kvsim is not the one Python imports from there")
    cmd = [sys.executable, "-m", "sim.cli", "run", scenario, "--out", str(out), "--no-report", "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    subprocess.run(cmd, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", help="RUN_A RUN_B, or SCENARIO with --trees")
    ap.add_argument("--trees", nargs=2, type=Path, metavar=("TREE_A", "TREE_B"))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.trees:
            if len(args.paths) != 1:
                ap.error("--trees takes one SCENARIO")
            runs = []
            for i, tree in enumerate(args.trees):
                runs.append(Path(tmp) / f"run{i}")
                run_in(tree.resolve(), args.paths[0], args.set, runs[-1])
            a, b = runs
        else:
            if len(args.paths) != 2 or args.set:
                ap.error("give two run folders (or --trees TREE_A TREE_B SCENARIO)")
            a, b = map(Path, args.paths)
        found = differences(a, b)
        n = sum(1 for p in a.rglob("*") if p.is_file())
    for line in found:
        print(line)
    print("identical" if not found else f"{len(found)} differences", f"({n} files)")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()

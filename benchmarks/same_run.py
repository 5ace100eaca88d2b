"""Whether two kvsim runs give the same results: every table (each ``*.parquet``, NaN equal
to NaN, the same dtypes) and every ``summary.json`` key but the wall clock and the
provenance of the command (``IGNORED_KEYS``).

    python benchmarks/same_run.py RUN_A RUN_B
    python benchmarks/same_run.py --trees TREE_A TREE_B SCENARIO [--set KEY=VALUE ...]

The first form compares two run folders. The second runs ``SCENARIO`` (a path inside each
tree) with each checkout's own kvsim, then compares: each run starts in its own tree's
folder with ``PYTHONPATH`` set to it, and checks which ``sim`` it imported, because
``python -m`` puts the working directory before ``PYTHONPATH`` (run from one checkout, a
second checkout's "kvsim" is the first one's). Exit status 0 when identical, 1 when not
(every difference printed), 2 when nothing could be compared (a folder without
``summary.json``, a tree without kvsim, a run that failed: one line on stderr).

Compared: every ``*.parquet`` at any depth (``DataFrame.equals``: the same columns in the
same order, the same dtypes, NaN equal to NaN) and every ``summary.json`` (each value of
the same JSON type and equal, at any depth). Not compared: ``config.resolved.yaml`` (the
input, with absolute paths; ``summary.json``'s ``config_sha256`` covers its content), the
report's files; the summary's wall clock (``sim.metrics.summary.WALL_CLOCK_KEYS``), its
``command`` and its ``scenario_path``.

A speed change that claims "no result moves" is checked with this on the reference
scenarios (docs/performance.md, "How to measure"); ``kvsim regress`` checks the golden
cases' summary metrics against their baselines.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, NoReturn

import pandas as pd

from sim.metrics.summary import WALL_CLOCK_KEYS

#: summary.json keys that say how and when the run was made, not what it found
IGNORED_KEYS = frozenset({*WALL_CLOCK_KEYS, "command", "scenario_path"})


def _strip(x: Any) -> Any:
    """``x`` without the ignored keys, at any depth."""
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k not in IGNORED_KEYS}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def _same_leaf(a: Any, b: Any) -> bool:
    """Equal values of the same JSON type (0 and 0.0, or 0 and false, differ; NaN is NaN)."""
    if type(a) is not type(b):
        return False
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


def _diff_keys(a: Any, b: Any, path: str = "") -> list[str]:
    """The dotted keys (list items by index) where two stripped summaries differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                out.append(f"{path}{k} (only in {'the second' if k not in a else 'the first'})")
            else:
                out += _diff_keys(a[k], b[k], f"{path}{k}.")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _diff_keys(x, y, f"{path}{i}.")]
    return [] if _same_leaf(a, b) else [path.rstrip(".") or "(the whole summary)"]


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
            if not fa.equals(fb):
                cols = [c for c in fa.columns if c not in fb or not fa[c].equals(fb[c])]
                cols += [c for c in fb.columns if c not in fa]
                out.append(f"{rel}: differs (columns {', '.join(map(str, cols)) or 'order or index'})")
        elif rel.name == "summary.json":
            sa = _strip(json.loads((a / rel).read_text()))
            sb = _strip(json.loads((b / rel).read_text()))
            out += [f"{rel}: {k}" for k in _diff_keys(sa, sb)]
    return out


def _fail(message: str) -> NoReturn:
    """Nothing could be compared: one line on stderr, exit status 2."""
    print(f"same_run: {message}", file=sys.stderr)
    sys.exit(2)


def run_in(tree: Path, scenario: str, sets: list[str], out: Path) -> None:
    """``kvsim run`` of ``scenario`` with ``tree``'s own kvsim, from ``tree``'s folder."""
    if not (tree / "sim").is_dir():
        _fail(f"{tree}: not a kvsim checkout (no sim/ folder)")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    check = f"import sim, sys; sys.exit(not sim.__file__.startswith({str(tree) + os.sep!r}))"
    if subprocess.run([sys.executable, "-c", check], cwd=tree, env=env, capture_output=True).returncode:
        _fail(f"{tree}: Python started there does not import that tree's kvsim")
    cmd = [sys.executable, "-m", "sim.cli", "run", scenario, "--out", str(out), "--no-report", "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    done = subprocess.run(cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL)
    if done.returncode:
        _fail(f"{tree}: kvsim run {scenario} failed (exit {done.returncode}; its message is above)")


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
        for run in (a, b):
            if not (run / "summary.json").is_file():
                _fail(f"{run}: not a kvsim run folder (no summary.json)")
        found = differences(a, b)
        n = sum(1 for p in a.rglob("*") if p.is_file())
    for line in found:
        print(line)
    print("identical" if not found else f"{len(found)} differences", f"({n} files)")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()

"""The report's cost (issue: run reports, item 3): time to render plot_*.png + report.html
for benchmarks/chat_azure_5000.yaml, as ``kvsim run`` does after a run.

    python benchmarks/bench_report.py            # results in benchmarks/results_report.md
    python benchmarks/bench_report.py --whole --tree /path/to/main --tree . --repeat 3

Without ``--whole``, each measurement is a fresh process that loads the run's tables (not
timed), then times importing matplotlib and rendering the report into a temporary folder
(what rendering costs in one process), wall clock and CPU.

With ``--whole`` (issue 25 item 7 (a)): the whole ``kvsim run SCENARIO --quiet`` process,
with the report and with ``--no-report``, per checkout (``--tree``, interleaved so the
trees see the same load), median wall and CPU seconds (user + system of the process and
everything it waited for: the report worker's too) and what the report adds to each.
Byte-code is cached per tree first, as in bench_startup.py. Speed is measured here,
never asserted in a test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _pyc import tree_env

HERE = Path(__file__).resolve().parent
SCENARIO = HERE / "chat_azure_5000.yaml"

CHILD = r"""
import json, sys, tempfile, time
from sim.report.data import load_run
run = load_run(sys.argv[1])
rows = {n: len(getattr(run, n)) for n in ("requests", "steps", "memory")}
t0, c0 = time.perf_counter(), time.process_time()
import matplotlib.figure
t1, c1 = time.perf_counter(), time.process_time()
from sim.report.render import render_report
with tempfile.TemporaryDirectory() as d:
    render_report(run, d)
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"rows": rows, "import_wall_s": t1 - t0, "import_cpu_s": c1 - c0,
                  "render_wall_s": t2 - t1, "render_cpu_s": c2 - c1,
                  "total_wall_s": t2 - t0, "total_cpu_s": c2 - c0}))
"""


def _whole_once(tree: Path, cache: Path, out: Path, report: bool) -> tuple[float, float]:
    """(wall s, CPU s of the process and its waited-for children) of one ``kvsim run``."""
    shutil.rmtree(out, ignore_errors=True)
    argv = [sys.executable, "-m", "sim.cli", "run", str(SCENARIO), "--out", str(out), "--quiet"]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv + ([] if report else ["--no-report"]), cwd=tree,
                   env=tree_env(tree, cache), check=True, capture_output=True)  # fmt: skip
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def whole(trees: list[Path], repeat: int) -> None:
    """Whole ``kvsim run`` processes with and without the report, trees interleaved."""
    times: dict[tuple[Path, bool], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cache, out = Path(tmp) / "pyc", Path(tmp) / "run"
        for tree in trees:  # untimed: fills the byte-code cache
            _whole_once(tree, cache, out, True)
        load0 = os.getloadavg()
        for _ in range(repeat):
            for tree in trees:
                for report in (True, False):
                    times.setdefault((tree, report), []).append(
                        _whole_once(tree, cache, out, report))
        load1 = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average {load0[0]:.1f} before, {load1[0]:.1f} after; "
          f"{repeat} runs each, interleaved")  # fmt: skip
    print("| tree | report | median wall s | min wall s | median CPU s | report adds, wall s "
          "| report adds, CPU s |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|")
    for tree in trees:
        med = {r: (statistics.median(w for w, _ in times[tree, r]),
                   statistics.median(c for _, c in times[tree, r])) for r in (True, False)}  # fmt: skip
        for report in (True, False):
            walls = [w for w, _ in times[tree, report]]
            adds = (f"{med[True][0] - med[False][0]:.2f} | {med[True][1] - med[False][1]:.2f}"
                    if report else " | ")  # fmt: skip
            print(f"| {tree} | {'yes' if report else '--no-report'} | {med[report][0]:.2f} "
                  f"| {min(walls):.2f} | {med[report][1]:.2f} | {adds} |")  # fmt: skip


def main(repeat: int = 5) -> None:
    from sim.run import run_scenario

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "run"
        run_scenario(str(SCENARIO)).write(folder)
        out = []
        for _ in range(repeat):
            res = subprocess.run([sys.executable, "-c", CHILD, str(folder)], check=True,
                                 capture_output=True, text=True)  # fmt: skip
            out.append(json.loads(res.stdout))
    for m in out:
        print(json.dumps(m))
    med = {k: sorted(m[k] for m in out)[len(out) // 2] for k in out[0] if k != "rows"}
    print("median", json.dumps(med))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--whole", action="store_true", help="time whole kvsim run processes")
    ap.add_argument("--tree", action="append", type=Path, help="a checkout (--whole)")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    if a.whole:
        whole(a.tree or [HERE.parent], a.repeat)
    else:
        main(a.repeat)

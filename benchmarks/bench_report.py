"""The report's cost (issue: run reports, item 3): time to render plot_*.png + report.html
for benchmarks/chat_azure_5000.yaml, as ``kvsim run`` does after a run.

    python benchmarks/bench_report.py            # results in benchmarks/results_report.md

Each measurement is a fresh process that loads the run's tables (not timed), then times
importing matplotlib and rendering the report into a temporary folder (timed: what the
report adds to ``kvsim run``), wall clock and CPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

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
    main()

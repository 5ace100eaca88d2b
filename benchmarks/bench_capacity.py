"""Capacity-search speed (the capacity issue, "Speed"): one ``kvsim capacity`` on the
shipped coding-agent node, 3 replications on a local pool of 2 workers.

    python benchmarks/bench_capacity.py                   # H100 (the documented search)
    python benchmarks/bench_capacity.py --vary            # H100 and H200 in one call

Times the whole ``kvsim capacity --json`` process and reads its answer: runs per
replication, the capacity with its interval, F37's estimate. Prints a markdown row to
paste into ``results_capacity.md`` with the machine and date.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
_SCRIPT = Path(sys.executable).with_name("kvsim")
KVSIM = [str(_SCRIPT)] if _SCRIPT.exists() else ["kvsim"]
SCENARIO = "workloads/coding_agents_capacity.yaml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vary", action="store_true", help="H100 and H200 in one call")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    cmd = [*KVSIM, "capacity", SCENARIO, "--slo", "ttft_p99_s=2", "--json",
           "--workers", str(args.workers)]  # fmt: skip
    if args.vary:
        cmd += ["--vary", "hardware.accelerator=h100-sxm-80gb,h200-141gb"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    wall_s = time.perf_counter() - t0
    doc = json.loads(out)
    configs = doc["configurations"] if args.vary else [doc]
    for c in configs:
        runs = len(c["points"])
        cap = c["capacity"]
        label = c["config"].get("hardware.accelerator", "h100-sxm-80gb")
        print(
            f"| {label} | {len(c['seeds'])} | {runs} | {cap['value']:.2f} "
            f"({cap['ci95_low']:.1f} - {cap['ci95_high']:.1f}) | "
            f"{c['analytic_estimate']['value']} / {c['analytic_estimate']['peak_value']} |"
        )
    print(f"whole command: {wall_s:.1f} s on {args.workers} workers, {datetime.date.today()}")


if __name__ == "__main__":
    main()

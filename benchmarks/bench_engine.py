"""Engine speed benchmarks (issue 5, item 6; "Engine core v2"): simulated requests per
loop second, whole-process time and peak RSS of ``kvsim run``.

    python benchmarks/bench_engine.py                 # (a) 5k and 50k chat, (b) agents
    python benchmarks/bench_engine.py --only chat     # just (a)
    python benchmarks/bench_engine.py --agents 100    # (b) with fewer trajectories

The 5,000-request rows are the median of ``--repeat`` runs (5 by default) by whole-process
time; every other row is one run.

``wall_time_s`` (the simulation loop alone) comes from the run's summary; the whole
process (imports, loading, simulation, writing the run folder) is timed around a
``kvsim run --quiet`` subprocess, whose peak RSS is read from ``getrusage``. Prints a
markdown table to paste into ``results_engine.md`` with the machine and date.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
_SCRIPT = Path(sys.executable).with_name("kvsim")
KVSIM = [str(_SCRIPT)] if _SCRIPT.exists() else ["kvsim"]


def machine() -> str:
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def run_once(scenario: str, sets: list[str]) -> dict:
    """One ``kvsim run`` in a fresh process: its summary, wall time and peak RSS."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [*KVSIM, "run", str(HERE / scenario), "--out", out, "--quiet"]
        for s in sets:
            cmd += ["--set", s]
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=HERE.parent)
        process_s = time.perf_counter() - t0
        rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        summary = json.loads((Path(out) / "summary.json").read_text())
    return {"summary": summary, "process_s": process_s, "rss_mb": max(rss_kib, before) / 1024}


def row(label: str, r: dict) -> str:
    s = r["summary"]
    n = s["requests_completed"]
    loop = s["wall_time_s"]
    return (
        f"| {label} | {n:,} | {s['trajectories_completed']:,} | {s['sim_time_s']:,.0f} | "
        f"{s['engine_decisions']:,} | {s['steps']:,} | {loop:.2f} | {n / loop:,.0f} | "
        f"{r['process_s']:.2f} | {r['rss_mb']:.0f} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["chat", "agents"], default=None)
    ap.add_argument("--agents", type=int, default=500, help="trajectories for (b)")
    ap.add_argument("--repeat", type=int, default=5, help="runs of (a); the median is kept")
    args = ap.parse_args()
    print(f"Machine: {machine()}  \nDate: {datetime.date.today().isoformat()}\n")
    print(
        "| run | requests | trajectories | simulated s | decisions | steps | loop s | "
        "requests / loop s | process s | peak RSS MB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    if args.only in (None, "chat"):
        for label, sets in (
            ("(a) chat 5,000, paged", []),
            ("(a) chat 5,000, paged, no calibration", ["cost.calibration=null"]),
        ):
            runs = sorted(
                (run_once("chat_azure_5000.yaml", sets) for _ in range(args.repeat)),
                key=lambda r: r["process_s"],
            )
            print(row(label, runs[len(runs) // 2]), flush=True)
        big = run_once("chat_azure_5000.yaml", ["workload.num_requests=50000"])
        print(row("(a) chat 50,000, paged", big), flush=True)
    if args.only in (None, "agents"):
        n = args.agents
        for kind in ("radix", "paged_hash", "paged"):
            r = run_once(
                "agents_500.yaml", [f"workload.num_trajectories={n}", f"allocator.kind={kind}"]
            )
            print(row(f"(b) agents {n}, {kind}", r), flush=True)
        for policy in ("hold", "offload_host"):
            sets = [f"workload.num_trajectories={n}", "allocator.kind=paged"]
            sets += ["hardware.node=dgx-h100", f"pause_policy.kind={policy}"]
            r = run_once("agents_500.yaml", sets)
            print(row(f"(b) agents {n}, paged + dgx-h100, {policy}", r), flush=True)


if __name__ == "__main__":
    main()

"""Cluster speed (the cluster issue, "Speed"): a 4-node cluster against its four nodes run
alone.

    python benchmarks/bench_cluster.py [--trajectories 32] [--repeat 3]

The cluster is workloads/cluster_coding_agents.yaml reduced to ``--trajectories`` (agents:
half of them) under its router (``prefix_affinity``, which keeps a prefix directory) and
under ``session_affinity`` (no directory). Each node's share is the same scenario without
``cluster:`` with a quarter of the trajectories and agents, on seeds s .. s+3; the target
is a cluster run within 1.3x the sum of the four single-node runs. Times are whole
``run_scenario`` calls (build, simulation, tables, summary), the best of ``--repeat``, in
one process after a warm-up run; steps and requests show that the work compared is alike.
Prints markdown rows for ``results_cluster.md``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "workloads" / "cluster_coding_agents.yaml"


def _timed(source, repeat: int, **overrides) -> tuple[float, dict]:
    from sim.run import run_scenario

    best, summary = float("inf"), {}
    for _ in range(repeat):
        t0 = time.perf_counter()
        summary = run_scenario(source, **overrides).summary
        best = min(best, time.perf_counter() - t0)
    return best, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trajectories", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    n, c = args.trajectories, max(1, args.trajectories // 2)
    doc = yaml.safe_load(SCENARIO.read_text())
    seed = int(doc["seed"])
    single = {k: v for k, v in doc.items() if k != "cluster"}
    _timed(str(SCENARIO), 1, **{"workload.num_trajectories": 4})  # warm-up (imports, caches)
    alone_s, steps, requests = 0.0, 0, 0
    for i in range(4):
        share = {"workload.num_trajectories": n // 4, "workload.arrival.concurrency": c // 4,
                 "seed": seed + i}  # fmt: skip
        t, s = _timed(single, args.repeat, **share)
        alone_s += t
        steps += s["steps"]
        requests += s["requests_submitted"]
    print("| run | wall (s) | steps | requests | vs the four nodes alone |")
    print("|---|---:|---:|---:|---:|")
    print(f"| 4 single-node runs ({n // 4} trajectories, {c // 4} agents each), sum "
          f"| {alone_s:.2f} | {steps:,} | {requests:,} | 1.00x |")  # fmt: skip
    for kind in ("prefix_affinity", "session_affinity"):
        over = {"workload.num_trajectories": n, "workload.arrival.concurrency": c}
        if kind != "prefix_affinity":
            over["cluster.router.kind"] = kind
        t, s = _timed(str(SCENARIO), args.repeat, **over)
        print(f"| 4-node cluster, {kind} ({n} trajectories, {c} agents) | {t:.2f} "
              f"| {s['steps']:,} | {s['requests_submitted']:,} | {t / alone_s:.2f}x |")


if __name__ == "__main__":
    main()

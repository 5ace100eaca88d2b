"""What running a capacity search's replications as chains saves (issue 25 item 7 (d)),
measured in CPU seconds so that a loaded machine does not blur it.

    python benchmarks/bench_capacity_schedule.py [--workers 2] [--set KEY=VALUE ...]

Runs ``kvsim capacity workloads/coding_agents_capacity.yaml --slo ttft_p99_s=2`` once in
this process (the ``inline`` executor: one probe after the other), timing each probe's CPU
seconds, then replays those costs on ``--workers`` workers two ways: in rounds (every
replication's probe of a round must finish before the next round starts: the search
before the chains) and as chains (a replication's next probe is submitted as soon as its
last one finishes, first come first served: ``Executor.run_chains``). Prints each probe
and both makespans. The replay leaves out what a real pool adds (each worker's imports,
pickling): those are the same both ways.
"""

from __future__ import annotations

import argparse
import datetime
import heapq
import os
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCENARIO = HERE.parent / "workloads" / "coding_agents_capacity.yaml"


def rounds_makespan(chains: list[list[float]], workers: int) -> float:
    """Round r runs probe r of every chain still going, greedily on the workers."""
    total = 0.0
    for r in range(max(len(c) for c in chains)):
        free = [0.0] * workers
        for c in chains:
            if r < len(c):
                t = heapq.heappop(free)
                heapq.heappush(free, t + c[r])
        total += max(free)
    return total


def chains_makespan(chains: list[list[float]], workers: int) -> float:
    """Each chain's next probe is queued when its last one ends; a free worker takes the
    oldest queued probe."""
    ready = [(0.0, i, 0) for i in range(len(chains))]  # (ready at, chain, probe index)
    heapq.heapify(ready)
    free = [0.0] * workers
    end = 0.0
    while ready:
        at, i, k = heapq.heappop(ready)
        start = max(at, heapq.heappop(free))
        done = start + chains[i][k]
        heapq.heappush(free, done)
        end = max(end, done)
        if k + 1 < len(chains[i]):
            heapq.heappush(ready, (done, i, k + 1))
    return end


def main() -> None:
    from sim.scenario import parse_set
    from sim.sweep import find_capacity
    from sim.sweep import task as task_mod
    from sim.sweep.executor import Executor

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--set", dest="sets", action="append", default=[])
    args = ap.parse_args()
    costs: dict[int, list[float]] = {}
    probe = task_mod.run_probe

    class Timed(Executor):
        def run_chains(self, fn, tasks, follow):
            def timed(task):
                t0 = time.process_time()
                out = probe(task)
                costs.setdefault(task["replication"], []).append(time.process_time() - t0)
                return out

            return super().run_chains(timed, tasks, follow)

    res = find_capacity(SCENARIO, ["ttft_p99_s=2"], sets=parse_set(args.sets), executor=Timed())
    chains = [costs[i] for i in sorted(costs)]
    for i, c in enumerate(chains):
        print(f"replication {i}: probes CPU s {[round(x, 2) for x in c]}")
    r, c = rounds_makespan(chains, args.workers), chains_makespan(chains, args.workers)
    print(f"capacity {res.capacity['value']:.2f} ({res.capacity['per_replication']}), "
          f"{sum(map(len, chains))} probes, {sum(map(sum, chains)):.1f} CPU s in all")  # fmt: skip
    print(f"on {args.workers} workers: rounds {r:.1f} s, chains {c:.1f} s ({c / r - 1:+.0%}); "
          f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()}")


if __name__ == "__main__":
    main()

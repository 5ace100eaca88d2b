"""Where a decision's CPU time goes: the simulation loop of one scenario under cProfile,
timed by CPU seconds (``time.process_time``, so other jobs on a shared machine do not
inflate it), with each function's own time summed by area (cost, memory, prefix cache,
scheduler, engine, metrics, workload, SimPy, numpy and the rest) and divided by the
run's engine decisions.

    python benchmarks/profile_engine.py benchmarks/chat_azure_5000.yaml
    python benchmarks/profile_engine.py benchmarks/agents_500.yaml --set workload.num_trajectories=100

Only the loop is profiled (``Simulation.run``: building the scenario and importing are
not). cProfile adds its own cost per call, about the same to every function, so the
shares are what to read; the loop's CPU seconds without the profiler are printed too.
Paste the table into docs/performance.md with the date and the machine state.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import time
from collections import defaultdict

import yaml

from sim.run.runner import build

#: (area, path fragment) in order; the first fragment a function's file contains wins
AREAS = (
    ("cost (step pricing)", "/sim/cost/"),
    ("memory: allocator, block pool", "/sim/memory/"),
    ("prefix cache (radix index)", "/sim/prefix/"),
    ("scheduler", "/sim/sched/"),
    ("engine: node, pauses, lockstep", "/sim/engine/"),
    ("metrics: recorder", "/sim/metrics/"),
    ("workload", "/sim/workload/"),
    ("SimPy", "/simpy/"),
    ("numpy", "numpy"),
)


def area(filename: str, func: str) -> str:
    for name, fragment in AREAS:
        if fragment in filename:
            return name
    if filename == "~" and ("numpy" in func or "ufunc" in func or "array" in func):
        return "numpy"
    return "Python built-ins and other"


def loop(sim) -> None:
    """The simulation loop alone (``Simulation.run`` without collecting the tables)."""
    sim.env.process(sim.driver)
    sim.env.run(until=sim.node.process)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--top", type=int, default=15, help="functions listed by own time")
    args = ap.parse_args()
    overrides = {}
    for item in args.set:
        key, value = item.split("=", 1)
        overrides[key] = yaml.safe_load(value)

    plain = build(args.scenario, **overrides)
    c0 = time.process_time()
    loop(plain)
    loop_cpu_s = time.process_time() - c0
    decisions, requests = plain.recorder.decisions, plain.ctx.completed

    sim = build(args.scenario, **overrides)
    prof = cProfile.Profile(time.process_time)
    prof.enable()
    loop(sim)
    prof.disable()
    stats = pstats.Stats(prof)
    by_area: dict[str, float] = defaultdict(float)
    total = 0.0
    rows = []
    for (filename, _line, func), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():
        by_area[area(filename, func)] += tt
        total += tt
        rows.append((tt, f"{os.path.relpath(filename) if filename != '~' else ''}:{func}"))

    print(f"scenario {args.scenario} {' '.join(args.set)}; load average {os.getloadavg()}")
    print(f"loop CPU s without profiler: {loop_cpu_s:.2f}; decisions {decisions:,}; "
          f"trajectories {requests:,}; "
          f"{loop_cpu_s / decisions * 1e6:,.0f} us CPU per decision\n")  # fmt: skip
    print("| area | share of loop CPU | us per decision (scaled to the unprofiled loop) |")
    print("|---|---:|---:|")
    for name, tt in sorted(by_area.items(), key=lambda kv: -kv[1]):
        share = tt / total
        print(f"| {name} | {share:.1%} | {share * loop_cpu_s / decisions * 1e6:,.1f} |")
    print("\n| function | share of loop CPU |\n|---|---:|")
    for tt, name in sorted(rows, reverse=True)[: args.top]:
        print(f"| `{name}` | {tt / total:.1%} |")


if __name__ == "__main__":
    main()

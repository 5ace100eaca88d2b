"""Why a decision's step was not a longer run: each engine decision classed by the cut
that ended it, in one scenario's simulation loop (issue 25 item 7 (b), session 24).

    python benchmarks/census_runs.py benchmarks/agents_500.yaml --set workload.num_trajectories=100

Classes (the first that applies): ``no run`` (the scheduler's ``plan.run`` is None, or
the engine steps exactly / holds posts), ``one step`` (the scheduler allows one step),
``memory, free blocks only`` (the run's prefill publishes late, so the run plans in free
blocks alone, and evictable blocks would have let it go further), ``memory`` (the pool
itself), ``full`` (the run went as long as the scheduler allowed). Runs planned with a
prefill are counted apart (``+ prefill``). Not a speed figure.
"""

from __future__ import annotations

import argparse
from collections import Counter

import yaml

import sim.engine.node as node_mod
from sim.run.runner import build


def census(scenario: str, overrides: dict) -> tuple[Counter, int]:
    counts: Counter = Counter()
    node_cls = node_mod.Node
    original = node_cls._plan_run

    def plan_run(self, plan, work, m, cost):
        lim = plan.run
        run = original(self, plan, work, m, cost)
        pre = " + prefill" if lim is not None and lim.chunks is not None else ""
        if lim is None or self.exact or self._held:
            counts["no run"] += 1
            return run
        k = lim.max_steps if self._own_scheduler else self._run_steps(plan, lim)
        got = 1 if run is None else len(run.durations)
        if k <= 1:
            counts["one step" + pre] += 1
        elif got >= k:
            counts["full" + pre] += 1
        else:
            kind = "memory"
            prefill = plan.scheduled[-1][0] if lim.chunks is not None else None
            if prefill is not None and self.kv.publishes_late(prefill):
                late = (plan.scheduled[-1][0], len(lim.chunks)) if lim.late else None
                more = self.kv.ledger.plan_run(plan.decodes, k - 1, m[1], late, True).steps + 1
                if more > got:
                    kind = "memory, free blocks only"
            counts[kind + pre] += 1
            counts[kind + pre + ", steps lost"] += k - got
        return run

    node_cls._plan_run = plan_run
    try:
        sim = build(scenario, **overrides)
        sim.env.process(sim.driver)
        sim.env.run(until=sim.node.process)
    finally:
        node_cls._plan_run = original
    return counts, sim.recorder.decisions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    overrides = {}
    for item in args.set:
        key, value = item.split("=", 1)
        overrides[key] = yaml.safe_load(value)
    counts, decisions = census(args.scenario, overrides)
    print(f"decisions {decisions:,}\n\n| class | decisions | steps the scheduler allowed beyond |\n|---|---:|---:|")
    for name in sorted(k for k in counts if not k.endswith("steps lost")):
        print(f"| {name} | {counts[name]:,} | {counts.get(name + ', steps lost', 0):,} |")


if __name__ == "__main__":
    main()

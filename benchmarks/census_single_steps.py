"""Why a decision ran a single step instead of a run: every ``commit`` of one scenario's
simulation loop, classed by what kept it from running longer.

    python benchmarks/census_single_steps.py benchmarks/chat_azure_5000.yaml
    python benchmarks/census_single_steps.py benchmarks/agents_500.yaml --set workload.num_trajectories=60

A decision is a run (several steps at once) or a single step; a single step is one for one
of these reasons, asked in this order (``VllmV1Scheduler.run_limit``, then
``Node._plan_run``):

- ``N prefills``: the batch has N > 1 prefill chunks (a run carries at most one);
- ``finish next``: a decode reaches its output limit at the end of this step;
- ``one chunk, no late join``: the one prefill completes its prompt in this step and may
  not decode on in the run (a waiting request would be admitted next step);
- ``other run_limit``: preempted, rejected, dropped, copied or allocated, or not every
  running request scheduled;
- ``posts held``: the scheduler allowed a run, but posts received at this boundary are
  held for the next plan (async scheduling), so the node steps once;
- ``memory``: the run's memory plan allowed no second step;
- ``cut by a post``: a run was planned and a post cut it after its first step.

Counts only; not a speed figure (no timing is taken).
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

import yaml

import sim.engine.node as node_mod
import sim.sched.vllm_v1 as vllm_v1
from sim.run.runner import build


def census(scenario: str, overrides: dict[str, Any]) -> Counter:
    counts: Counter = Counter()
    why: dict[int, str] = {}
    sched_cls, node_cls = vllm_v1.VllmV1Scheduler, node_mod.Node
    real_limit, real_plan, real_commit = sched_cls.run_limit, node_cls._plan_run, sched_cls.commit

    def run_limit(self, plan):
        out = real_limit(self, plan)
        if out is None:
            why[id(plan)] = _no_run(self, plan)
        return out

    def plan_run(self, plan, work, m, cost):
        out = real_plan(self, plan, work, m, cost)
        if out is None and id(plan) not in why:
            why[id(plan)] = "exact mode" if self.exact else "posts held" if self._held else "memory"
        return out

    def commit(self, plan, steps=1):
        kind = "mixed" if plan.prefill_chunks else "decodes alone"
        counts[(kind, "run") if steps > 1 else (kind, why.get(id(plan), "cut by a post"))] += 1
        why.pop(id(plan), None)
        return real_commit(self, plan, steps)

    sched_cls.run_limit, node_cls._plan_run, sched_cls.commit = run_limit, plan_run, commit
    try:
        sim = build(scenario, **overrides)
        sim.env.process(sim.driver)
        sim.env.run(until=sim.node.process)
    finally:
        sched_cls.run_limit, node_cls._plan_run, sched_cls.commit = real_limit, real_plan, real_commit
    return counts


def _no_run(sched, plan) -> str:
    if len(plan.prefill_chunks) > 1:
        return f"{len(plan.prefill_chunks)} prefills"
    if plan.decodes and vllm_v1.steps_to_first_finish(plan.decodes) <= 1:
        return "finish next"
    if plan.prefill_chunks and sched.run_chunks(plan, 1 << 30) is not None:
        return "one chunk, no late join"
    return "other run_limit"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    overrides = {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in args.set)}
    counts = census(args.scenario, overrides)
    total = sum(counts.values())
    print(f"{args.scenario}: {total:,} decisions")
    print("| batch | single step because / run | decisions | share |")
    print("|---|---|---:|---:|")
    for (kind, what), n in counts.most_common():
        print(f"| {kind} | {what} | {n:,} | {n / total:.1%} |")


if __name__ == "__main__":
    main()

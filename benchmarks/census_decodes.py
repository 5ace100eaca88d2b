"""What a batch-level decode clock could save: the decision mix, the per-request passes'
CPU time, and who reads a request's token counts, in one scenario's simulation loop.

    python benchmarks/census_decodes.py benchmarks/chat_azure_5000.yaml

Three runs of the loop, each instrumented one way (none of them is a speed figure; the
plain loop's CPU seconds are printed first for scale):

1. **decision mix**: every ``commit`` classed as decodes alone or mixed (a prefill
   chunk in it), as a single step or a run, with the requests it carried;
2. **per-request passes**: the CPU seconds (``time.process_time_ns`` around each call,
   less a calibrated wrapper cost) of the passes that walk every scheduled decode:
   ``commit``, ``grow_each``, ``_decodes_from``, ``_add_stretch``, ``advance``,
   ``steps_to_first_finish``, ``decode_span``, ``Recorder.emit``, ``plan_run`` and
   ``apply_run`` (those two include their block-boundary arithmetic and block appends, which stay
   O(changed));
3. **token-count reads**: ``Request.num_computed`` / ``num_output`` made counting
   properties, each access counted by the calling function: what a clock behind those
   names would tax outside the passes it replaces. A decode cohort's members (whose class
   is the cohort's ``Member``, its counters properties of their own: ``sim.sched.cohort``)
   are counted alike, their accesses marked ``member``, so every read and write is in the
   table whether or not its request is in the cohort at the time.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import yaml

import sim.memory.deferred as deferred
import sim.metrics.recorder as recorder
import sim.sched.plan as plan_mod
import sim.sched.request as request
import sim.sched.vllm_v1 as vllm_v1
from sim.run.node import run_workload
from sim.run.runner import build


def loop(sim) -> None:
    """The simulation loop alone (``Simulation.run`` without collecting the tables): a
    cluster's (a data-parallel engine's lockstep ranks too) until every node has ended."""
    parts = getattr(sim, "parts", None)
    if parts is not None:  # sim.run.cluster.ClusterSimulation
        run_workload(sim.env, [p.node for p in parts], sim.ctx, sim.driver)
        return
    sim.env.process(sim.driver)
    sim.env.run(until=sim.node.process)


def node_parts(sim) -> list[Any]:
    """What each node's loop decides with: the simulation itself for one node, each node's
    parts (its ``recorder``, its ``scheduler``) for a cluster."""
    return list(getattr(sim, "parts", None) or [sim])


def decisions_of(sim) -> int:
    """The scheduling decisions of every node (a cluster's front records none of them)."""
    return sum(p.recorder.decisions for p in node_parts(sim))


def _patched(owner: Any, name: str, wrapper: Callable) -> Callable[[], None]:
    """Replace ``owner.name`` by ``wrapper(original)``; returns the undo."""
    original = owner.__dict__[name]
    setattr(owner, name, wrapper(original))
    return lambda: setattr(owner, name, original)


def decision_mix(scenario: str, overrides: dict) -> Counter:
    counts: Counter = Counter()

    def wrap(commit):
        def counted(self, plan, steps=1):
            kind = ("mixed" if plan.prefill_chunks else "decodes alone", "run" if steps > 1 else "step")
            counts[kind] += 1
            counts[(*kind, "requests")] += len(plan.scheduled)
            return commit(self, plan, steps)

        return counted

    undo = _patched(vllm_v1.VllmV1Scheduler, "commit", wrap)
    try:
        loop(build(scenario, **overrides))
    finally:
        undo()
    return counts


PASSES = (
    (vllm_v1.VllmV1Scheduler, "commit"),
    (deferred.DeferredAppends, "grow_each"),
    (vllm_v1, "_decodes_from"),
    (vllm_v1, "_add_stretch"),
    (deferred.DeferredAppends, "advance"),
    (vllm_v1, "steps_to_first_finish"),
    (plan_mod.BatchPlan, "decode_span"),
    (recorder.Recorder, "emit"),
    (deferred.DeferredAppends, "plan_run"),
    (deferred.DeferredAppends, "apply_run"),
)


def passes(scenario: str, overrides: dict) -> tuple[dict[str, tuple[int, float]], float]:
    """{pass: (calls, CPU s less the wrapper's cost)}, and the instrumented loop's CPU s."""
    clock = time.process_time_ns
    spent: Counter = Counter()
    calls: Counter = Counter()

    def timer(label: str):
        def wrap(fn):
            def timed(*args, **kwargs):
                t = clock()
                out = fn(*args, **kwargs)
                spent[label] += clock() - t
                calls[label] += 1
                return out

            return timed

        return wrap

    def nothing() -> None:
        pass

    empty = timer("calibration")(nothing)
    for _ in range(100_000):
        empty()
    per_call = spent["calibration"] / calls["calibration"]
    undo = [_patched(owner, name, timer(name)) for owner, name in PASSES]
    try:
        sim = build(scenario, **overrides)
        c0 = time.process_time()
        loop(sim)
        loop_s = time.process_time() - c0
    finally:
        for u in undo:
            u()
    out = {name: (calls[name], (spent[name] - per_call * calls[name]) / 1e9) for _, name in PASSES}
    return out, loop_s


def token_reads(scenario: str, overrides: dict) -> Counter:
    """Accesses of ``num_computed`` / ``num_output`` by (name, get/set, calling function),
    a cohort member's marked ``member`` in the get/set column."""
    counts: Counter = Counter()
    frame = sys._getframe
    cls = request.Request
    names = ("num_computed", "num_output")

    def counting(name: str, inner: Any, mark: str = "") -> property:
        """``inner`` (a slot descriptor or a property) behind a counting property."""
        get_inner, set_inner = inner.__get__, inner.__set__

        def get(self):
            code = frame(1).f_code
            counts[(name, "get" + mark, f"{code.co_filename.rsplit('/sim/', 1)[-1]}:{code.co_name}")] += 1
            return get_inner(self)

        def set_(self, value):
            code = frame(1).f_code
            counts[(name, "set" + mark, f"{code.co_filename.rsplit('/sim/', 1)[-1]}:{code.co_name}")] += 1
            set_inner(self, value)

        return property(get, set_)

    # a property and a slot cannot share a name in one class: a subclass with the
    # properties shadows the slots, and every Request made during the run is one of it
    # (a member leaving the cohort gets it back: ``sim.sched.cohort`` names it Request)
    counted = type("Request", (cls,), {"__slots__": (), **{n: counting(n, cls.__dict__[n]) for n in names}})
    modules = [m for m in list(sys.modules.values()) if getattr(m, "Request", None) is cls]
    for m in modules:
        m.Request = counted
    try:
        sim = build(scenario, **overrides)
        cohorts = [getattr(part.scheduler, "cohort", None) for part in node_parts(sim)]
        # each node's cohort (a cluster's ranks too); a Member class they share, once
        members = list(dict.fromkeys(c.Member for c in cohorts if c is not None))
        for member in members:  # its members' counters: the Member class's own properties
            for n in names:
                setattr(member, n, counting(n, member.__dict__[n], " (member)"))
        loop(sim)
    finally:
        for m in modules:
            m.Request = cls
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    overrides = {}
    for item in args.set:
        key, value = item.split("=", 1)
        overrides[key] = yaml.safe_load(value)
    import numpy  # noqa: F401  (imported on first use otherwise: inside a timed pass)

    sim = build(args.scenario, **overrides)
    c0 = time.process_time()
    loop(sim)
    plain_s = time.process_time() - c0
    decisions = decisions_of(sim)
    print(f"loop CPU s, plain: {plain_s:.2f}; decisions {decisions:,}\n")
    if decisions == 0:  # no engine step: no decision mix, no pass, no share to report
        print("no scheduling decision in this run: the census does not apply")
        return

    mix = decision_mix(args.scenario, overrides)
    visits = sum(v for k, v in mix.items() if len(k) == 3)
    print("| decision | decisions | share | requests carried | share |\n|---|---:|---:|---:|---:|")
    for kind in sorted(k for k in mix if len(k) == 2):
        n, r = mix[kind], mix[(*kind, "requests")]
        print(f"| {' '.join(kind)} | {n:,} | {n / decisions:.0%} | {r:,} | {r / max(visits, 1):.0%} |")

    timed, loop_s = passes(args.scenario, overrides)
    total = sum(s for _, s in timed.values())
    print(f"\ninstrumented loop CPU s {loop_s:.2f}; the passes below {total:.2f} s "
          f"({total / max(plain_s, 1e-9):.0%} of the plain loop)\n")  # fmt: skip
    print("| pass | calls | CPU s | us per call |\n|---|---:|---:|---:|")
    for name, (n, s) in sorted(timed.items(), key=lambda kv: -kv[1][1]):
        print(f"| `{name}` | {n:,} | {s:.3f} | {s / max(n, 1) * 1e6:.2f} |")

    reads = token_reads(args.scenario, overrides)
    print(f"\n{sum(reads.values()):,} accesses of num_computed / num_output\n")
    print("| accesses | name | get/set | caller |\n|---:|---|---|---|")
    for (name, op, where), n in reads.most_common():
        print(f"| {n:,} | {name} | {op} | `{where}` |")


if __name__ == "__main__":
    main()

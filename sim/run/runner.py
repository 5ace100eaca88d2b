"""One run's lifecycle: build -> run -> collect (desmod's shape).

Responsibility: from a scenario (a YAML path, a dict, or an already loaded scenario) and
dotted overrides, build the allocator, KV manager, scheduler, cost model, recorder, node
and workload (one node: ``sim.run.node``; a scenario with a ``cluster`` section:
``sim.run.cluster``, one node per entry); run the SimPy environment until the node stops; collect the record
tables (numpy) and the summary into a ``RunResult``. This (and ``sim.run.cluster``) is the only place that
reads the wall clock, to report ``wall_time_s`` (the simulation loop alone: no imports,
loading or writing).

Invariant: the same scenario and seed give the same ``RunResult`` (``wall_time_s``
aside); nothing here writes files (``RunResult.write`` does, under one folder); a
one-node run does not import pandas (its tables stay numpy until read as DataFrames;
tests/cli/test_startup_imports.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from sim.cost import CostModel
from sim.engine import Node
from sim.engine.pauses import PauseLifecycle
from sim.memory.kv_manager import KVManager
from sim.metrics import Recorder, summarize
from sim.metrics.evicted_reuse import EvictedReuse
from sim.metrics.pauses import pause_summary, pause_table
from sim.metrics.summary import (
    closed_loop_workloads,
    fill_hold,
    pause_warnings,
    speculative_summary,
)
from sim.policy.registry import policy_class
from sim.run.accuracy import _least_trusted, add_accuracy, run_accuracy
from sim.run.checks import (  # noqa: F401  (re-exported: sim.run.runner's names survive)
    TIER_KEYS,
    TIER_NAMES,
    check_pause_policy,
    preflight,
    preflight_node,
)
from sim.run.node import NodeParts, RunResult, build_node, engine_meta, run_workload  # noqa: F401
from sim.run.pricing import cost_summary
from sim.run.provenance import config_sha256, resolved_config, scenario_path
from sim.scenario import LoadedScenario, Resolved, load_scenario
from sim.sched import Scheduler
from sim.workload import Streams, WorkloadContext, workload_kind


def churn_not_counted(sc: Any, kv: Any) -> str:
    """Why ``metrics.count_prefix_churn`` cannot count this run, or "" when it can: the
    count needs a prefix cache, and every block it caches computed (a pause policy that
    reloads KV caches blocks it copied back) and evicted for room only (a ``recompute``
    that evicts its dropped blocks on purpose is not churn)."""
    if kv.prefix_metrics() is None:
        return "the allocator keeps no prefix cache"
    if policy_class(sc.pause_policy.kind).reloads_kv:  # (blocks copied back, not computed)
        return f"pause policy {sc.pause_policy.kind!r} reloads KV (only hold and recompute are counted)"
    # (only ``recompute``'s options have the field)
    if getattr(sc.pause_policy, "evict_from_prefix_cache", False):
        return "pause_policy.evict_from_prefix_cache evicts on purpose"
    return ""


@dataclass
class Simulation:
    """A built, not yet run, simulation (exposed for tests and notebooks)."""

    resolved: Resolved
    env: simpy.Environment
    node: Node
    kv: KVManager
    scheduler: Scheduler
    cost: CostModel
    recorder: Recorder
    ctx: WorkloadContext
    driver: Any  # the workload's generator
    pauses: PauseLifecycle
    #: the prefix cache's reuse lost to evictions (None without a prefix cache)
    evicted_reuse: Any = None

    def run(self, progress=None) -> RunResult:
        """Run to the end; ``progress(sim_time_s, trajectories_completed, total)`` is
        called now and then (from the engine loop) when given."""
        if progress is not None:
            ctx = self.ctx
            self.node.progress = lambda now: progress(now, ctx.completed, ctx.total)
        t0 = time.perf_counter()
        run_workload(self.env, [self.node], self.ctx, self.driver)
        wall = time.perf_counter() - t0
        return collect(self, wall)


def _loaded(source: Any, overrides: dict[str, Any]) -> LoadedScenario:
    if isinstance(source, LoadedScenario):
        if overrides:
            data = source.scenario.model_dump(mode="json")
            loaded = load_scenario(data, overrides)
            loaded.source, loaded.base_dir = source.source, source.base_dir
            return loaded
        return source
    if hasattr(source, "model_dump") and not isinstance(source, dict):
        source = source.model_dump(mode="json")
    return load_scenario(source, overrides)


def build(source: Any, **overrides: Any):
    """Build a simulation from a scenario and dotted overrides (``seed=3``,
    ``**{"allocator.kind": "static"}``); a scenario with a ``cluster`` section builds a
    ``sim.run.cluster.ClusterSimulation``."""
    loaded = _loaded(source, overrides)
    if loaded.scenario.cluster is not None:
        from sim.run.cluster import build_cluster  # a one-node run never imports it

        return build_cluster(loaded)
    resolved = preflight(loaded)
    sc = resolved.scenario
    env = simpy.Environment()
    p = build_node(env, resolved)
    kind = workload_kind(sc.workload.kind)
    ctx = WorkloadContext(
        env,
        p.node,
        Streams(sc.seed),
        p.recorder,
        resolved.loaded.base_dir,
        kind.count(sc.workload),
        context_window=resolved.context_window_tokens,
    )
    driver = kind.driver(sc.workload, ctx)
    reuse = None
    if sc.metrics.count_prefix_churn and not churn_not_counted(sc, p.kv):
        reuse = EvictedReuse()
        if not reuse.watch(p.kv):
            reuse = None
    return Simulation(
        resolved, env, p.node, p.kv, p.scheduler, p.cost, p.recorder, ctx, driver, p.pauses,
        reuse,
    )


def run_scenario(source: Any, *, progress=None, **overrides: Any) -> RunResult:
    """Build and run a scenario; see ``build`` for the arguments."""
    return build(source, **overrides).run(progress)


def collect(sim: Simulation, wall_time_s: float) -> RunResult:
    """Gather the record tables (numpy ``Columns``: no pandas) and the summary after a run."""
    rec = sim.recorder
    sim.kv.flush_all()
    for req in (*sim.scheduler.running, *sim.scheduler.waiting):
        rec.request_ended(req)  # unfinished at the horizon
    tables = rec.tables()
    sim_time = sim.node.end_s
    fill_hold(tables["trajectories"], sim.kv, sim_time)
    r = sim.resolved
    config = resolved_config(r.loaded)
    meta = {
        **engine_meta(r),
        "trajectories_total": sim.ctx.total,
        "command": None,  # the command line, set by the CLI (None from the Python API)
        "scenario_path": scenario_path(r.loaded),
        "config_sha256": config_sha256(config),
    }
    reuse = sim.evicted_reuse
    summary = summarize(rec, tables, sim_time_s=sim_time, kv=sim.kv, meta=meta,
                        closed_loop=closed_loop_workloads(r.scenario.workload),
                        recomputed_tokens=None if reuse is None else reuse.recomputed_tokens)
    summary["warnings"] = [*r.warnings, *summary["warnings"]]  # what vLLM would not run
    if r.scenario.metrics.count_prefix_churn and reuse is None:
        why = churn_not_counted(r.scenario, sim.kv) or "the prefix cache takes no listener"
        summary["warnings"].append(f"metrics.count_prefix_churn: not counted: {why}")
    if r.scenario.speculative is not None:
        summary.update(speculative_summary(rec, summary, r.draft_kv_bytes_per_token_per_gpu * r.num_gpus,
                                           tables["requests"]))
    pauses = pause_table(sim.pauses.records(sim_time))
    summary.update(pause_summary(pauses))
    pause_warnings(summary)
    summary["hints_released"] = sim.pauses.hint_releases
    summary.update(cost_summary(r, summary))  # usd_* from the price per GPU-hour
    add_accuracy(summary, [(r, sim.cost, tables["steps"])])  # how far to trust the step times
    summary["wall_time_s"] = wall_time_s
    groups = rec.group_table()  # None: a model of one layer group
    for table in (*tables.values(), pauses, *([] if groups is None else [groups])):
        rows = len(next(iter(table.values())))
        table["node"] = np.zeros(rows, dtype=np.int64)  # one node: node 0
    return RunResult(
        summary,
        tables["requests"],
        tables["steps"],
        tables["memory"],
        tables["trajectories"],
        config,
        r,
        pauses,
        groups,
    )


def scenario_accuracy(source, **overrides: Any) -> dict[str, Any]:
    """The ``accuracy`` a run of ``source`` (with dotted ``overrides``) would report, from
    its built engines, without running it (here, not in ``sim.run.accuracy``: it builds,
    and the builders import that module)."""
    sim = build(source, **overrides)
    parts = getattr(sim, "parts", None)  # a cluster: one engine per node
    engines = [(p.resolved, p.cost) for p in parts] if parts else [(sim.resolved, sim.cost)]
    return _least_trusted([run_accuracy(r, c) for r, c in engines])

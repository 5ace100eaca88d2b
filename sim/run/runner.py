"""One run's lifecycle: build -> run -> collect (desmod's shape).

Responsibility: from a scenario (a YAML path, a dict, or an already loaded scenario) and
dotted overrides, build the allocator, KV manager, scheduler, cost model, recorder, node
and workload (a scenario with a ``cluster`` section: ``sim.run.cluster``, one node per
entry); run the SimPy environment until the node stops; collect the DataFrames and
the summary into a ``RunResult``. This (and ``sim.run.cluster``) is the only place that
reads the wall clock, to report ``wall_time_s`` (the simulation loop alone: no imports,
loading or writing).

Invariant: the same scenario and seed give the same ``RunResult`` (``wall_time_s``
aside); nothing here writes files (``RunResult.write`` does, under one folder).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import simpy

from sim.cost import CostModel
from sim.engine import Node
from sim.engine.copy_engine import CopyEngines
from sim.engine.pauses import PauseLifecycle
from sim.errors import ConfigError, KvsimError
from sim.memory.kv_manager import KVManager
from sim.metrics import HbmLayout, Recorder, summarize
from sim.metrics.pauses import pause_frame, pause_summary
from sim.metrics.summary import fill_hold
from sim.prefix.kinds import engine_rules
from sim.run.pricing import cost_summary
from sim.run.provenance import config_sha256, resolved_config, scenario_path
from sim.scenario import LoadedScenario, Resolved, load_scenario, make_allocator_for, resolve
from sim.scenario.paths import missing_files
from sim.sched import Scheduler, make_scheduler
from sim.workload import Streams, WorkloadContext, workload_kind


@dataclass
class RunResult:
    """What a run produced: the summary and the record tables."""

    summary: dict
    requests: pd.DataFrame
    steps: pd.DataFrame
    memory: pd.DataFrame
    trajectories: pd.DataFrame
    config: dict  # the resolved scenario (every default filled in, trace paths absolute)
    resolved: Resolved | None = field(default=None, repr=False)
    pauses: pd.DataFrame | None = None  # one row per tool pause (pauses.parquet)

    def write(self, out_dir: str | Path, *, force: bool = False) -> Path:
        """Write the run folder (see ``sim.run.output``); ``force`` replaces a non-empty one."""
        from sim.run.output import write_run

        return write_run(self, out_dir, force=force)


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

    def run(self, progress=None) -> RunResult:
        """Run to the end; ``progress(sim_time_s, trajectories_completed, total)`` is
        called now and then (from the engine loop) when given."""
        if progress is not None:
            ctx = self.ctx
            self.node.progress = lambda now: progress(now, ctx.completed, ctx.total)
        self.env.process(self.driver)
        t0 = time.perf_counter()
        self.env.run(until=self.node.process)
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


def preflight(loaded: LoadedScenario) -> Resolved:
    """Every check a scenario passes before a run (``build``) or ``kvsim validate``: the
    files it names, then the profiles and the pool (``resolve``), the allocator's options
    and the tiers the pause policy needs. One problem is raised as it is; several as one
    ``ConfigError`` that says the first, counts the rest and lists them in ``problems``."""
    problems: list[KvsimError] = list(missing_files(loaded))  # each with its scenario line
    resolved = None
    try:
        _check_expert_shards(loaded)
        resolved = resolve(loaded)
        _check_ranks_per_expert(resolved)
        make_allocator_for(resolved)  # the allocator's options
        check_pause_policy(resolved)  # the tiers the policy needs
        if loaded.scenario.cluster is not None:
            from sim.run.cluster import preflight_cluster

            preflight_cluster(loaded)  # every node group's scenario
    except KvsimError as exc:
        if str(exc) not in {str(p) for p in problems}:  # a missing file, found again
            problems.append(exc)
    if len(problems) == 1:
        raise problems[0]
    if problems:
        n = len(problems) - 1
        raise ConfigError(
            f"{problems[0]} (and {n} more problem{'s' if n > 1 else ''})", problems=problems
        )
    return resolved


def _check_expert_shards(loaded: LoadedScenario) -> None:
    """``hardware.expert_shards`` is each data-parallel rank's (set by
    ``cluster.data_parallel``): an engine alone holds every expert."""
    if loaded.scenario.hardware.expert_shards > 1 and not loaded.data_parallel_rank:
        raise ConfigError(
            "expert_shards is set for each rank by cluster.data_parallel (an engine alone "
            "holds every expert and steps alone): remove it, or make the engine data-parallel "
            "with cluster: {nodes: [{count: N}], data_parallel: {}}",
            location=loaded.where("hardware", "expert_shards"),
            field="hardware.expert_shards",
        )


def _check_ranks_per_expert(resolved: Resolved) -> None:
    """Every GPU of a data-parallel MoE engine holds at least one routed expert."""
    sc, model = resolved.scenario, resolved.model
    section = sc.cluster
    if section is None or section.data_parallel is None or not model.num_experts:
        return
    gpus = section.n_nodes * sc.hardware.tp
    if gpus > model.num_experts:
        raise ConfigError(
            f"{section.n_nodes} data-parallel ranks x tp {sc.hardware.tp} = {gpus} GPUs for "
            f"{model.num_experts} routed experts of {model.name}: at most {model.num_experts} "
            "(each GPU holds at least one expert)",
            location=resolved.loaded.where("cluster", "nodes", 0, "count"),
            field="cluster.nodes.0.count",
        )


@dataclass
class NodeParts:
    """One node's engine and everything it owns (a cluster has one per node)."""

    resolved: Resolved
    node: Node
    kv: KVManager
    scheduler: Scheduler
    cost: CostModel
    recorder: Recorder
    pauses: PauseLifecycle


def build_node(env: simpy.Environment, resolved: Resolved) -> NodeParts:
    """One node: cost model, allocator, KV manager, scheduler, recorder, pause lifecycle
    and copy engines, as the resolved (node) scenario says."""
    sc = resolved.scenario
    cost = CostModel(resolved.model, resolved.accelerator, sc.hardware.tp, sc.hardware.pp, sc.cost,
                     expert_shards=sc.hardware.expert_shards)  # fmt: skip
    allocator = make_allocator_for(resolved)
    pauses = PauseLifecycle(env, sc.pause_policy, resolved, cost)
    kv = KVManager(allocator)
    scheduler = make_scheduler(sc.scheduler, kv)
    cost.async_scheduling = scheduler.async_scheduling  # host work overlaps the GPU's step
    recorder = Recorder(
        pool_bytes=resolved.pool_bytes,
        phi_ext_request_bytes=sc.metrics.phi_ext_request_tokens * resolved.kv_bytes_per_token,
        block_kind=allocator.block_size is not None,
        hbm=HbmLayout.of(resolved),
    )
    node = Node(
        env,
        scheduler,
        kv,
        cost,
        recorder,
        exact=sc.engine.exact,
        check_invariants=sc.engine.check_invariants,
        horizon_s=sc.duration_s,
        max_sim_time_s=sc.engine.max_sim_time_s,
        pauses=pauses,
    )
    t = resolved.tiers
    copies = CopyEngines(  # the link per direction: scenario, else calibration, else profile
        env,
        resolved.num_gpus,
        t.link_bw_bytes_per_s,
        overhead_s=t.link_overhead_s,
        d2h_bw_bytes_per_s=t.d2h_bw_bytes_per_s,
        d2h_overhead_s=t.d2h_overhead_s,
        sharing=t.link_sharing,
        nvme_bw_bytes_per_s=t.nvme_bw_bytes_per_s if t.nvme_pool_bytes > 0 else 0.0,
    )
    pauses.attach(node, kv, scheduler, copies, track=sc.engine.check_invariants)
    return NodeParts(resolved, node, kv, scheduler, cost, recorder, pauses)


def build(source: Any, **overrides: Any):
    """Build a simulation from a scenario and dotted overrides (``seed=3``,
    ``**{"allocator.kind": "static"}``); a scenario with a ``cluster`` section builds a
    ``sim.run.cluster.ClusterSimulation``."""
    loaded = _loaded(source, overrides)
    if loaded.scenario.cluster is not None:
        from sim.run.cluster import build_cluster

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
    return Simulation(
        resolved, env, p.node, p.kv, p.scheduler, p.cost, p.recorder, ctx, driver, p.pauses
    )


def run_scenario(source: Any, *, progress=None, **overrides: Any) -> RunResult:
    """Build and run a scenario; see ``build`` for the arguments."""
    return build(source, **overrides).run(progress)


def engine_meta(r: Resolved) -> dict[str, Any]:
    """The summary's facts about one engine (a run's, or a cluster node's)."""
    sc = r.scenario
    return {
        "scenario": sc.name,
        "schema_version": sc.schema_version,
        "seed": sc.seed,
        "model": r.model.name,
        "accelerator": r.accelerator.name,
        "num_gpus": r.num_gpus,
        "allocator": r.allocator_kind,
        "engine_rules": engine_rules(r.allocator_kind, r.allocator_options),
        "scheduler": sc.scheduler.kind,
        "pause_policy": sc.pause_policy.kind,
        "exact": sc.engine.exact,
        "kv_pool_bytes": round(r.pool_bytes),  # byte totals are integers (sim/metrics/schema)
        "kv_bytes_per_token": float(r.kv_bytes_per_token),
    }


def collect(sim: Simulation, wall_time_s: float) -> RunResult:
    """Gather the record tables and the summary after a run."""
    rec = sim.recorder
    sim.kv.flush_all()
    for req in (*sim.scheduler.running, *sim.scheduler.waiting):
        rec.request_ended(req)  # unfinished at the horizon
    frames = rec.frames()
    sim_time = sim.node.end_s
    fill_hold(frames["trajectories"], sim.kv, sim_time)
    r = sim.resolved
    config = resolved_config(r.loaded)
    meta = {
        **engine_meta(r),
        "trajectories_total": sim.ctx.total,
        "command": None,  # the command line, set by the CLI (None from the Python API)
        "scenario_path": scenario_path(r.loaded),
        "config_sha256": config_sha256(config),
    }
    summary = summarize(rec, frames, sim_time_s=sim_time, kv=sim.kv, meta=meta)
    pauses = pause_frame(sim.pauses.records(sim_time))
    summary.update(pause_summary(pauses))
    summary.update(cost_summary(r, summary))  # usd_* from the price per GPU-hour
    summary["wall_time_s"] = wall_time_s
    for frame in (*frames.values(), pauses):
        frame["node"] = np.zeros(len(frame), dtype=np.int64)  # one node: node 0
    return RunResult(
        summary,
        frames["requests"],
        frames["steps"],
        frames["memory"],
        frames["trajectories"],
        config,
        r,
        pauses,
    )


#: the hardware keys that give each tier below HBM (named when a policy needs a missing one)
TIER_KEYS = {
    "offload_host": "hardware.node (a node profile) or hardware.host_kv_pool_bytes",
    "offload_nvme": "hardware.node (a node profile with NVMe drives; "
    "hardware.nvme_kv_pool_bytes sizes it)",
}

TIER_NAMES = {"offload_host": "a host-DRAM tier", "offload_nvme": "an NVMe tier"}


#: policy options the engine does not run yet (refused, never silently ignored)
def check_pause_policy(resolved: Resolved) -> None:
    """Refuse pause-policy options the engine does not implement yet, and tiers a policy
    names that the hardware section does not configure (they would silently hold), with
    the line."""
    policy = resolved.scenario.pause_policy
    if policy.preempt_swap:
        raise ConfigError(
            "preemption by swap is not run by the engine yet",
            location=resolved.loaded.where("pause_policy", "preempt_swap"),
            field="pause_policy.preempt_swap",
        )
    t = resolved.tiers
    have = {
        "offload_host": t is not None and t.host_pool_bytes > 0,
        "offload_nvme": t is not None and t.nvme_pool_bytes > 0,
    }
    if policy.kind == "break_even" and not any(have.values()):
        _missing_tier(resolved, "kind", "break_even", "a host-DRAM or NVMe tier", "offload_host")
    # the options model's declared fields that name a tier (each kind declares its own)
    for key, tier in policy.model_dump(include={"kind", "when_full", "fallback"}).items():
        if tier in have and not have[tier]:
            _missing_tier(resolved, key, tier, TIER_NAMES[tier], tier)


def _missing_tier(resolved: Resolved, key: str, value: str, what: str, tier: str) -> None:
    raise ConfigError(
        f"pause policy {key} {value!r} needs {what}, and none is configured: set "
        f"{TIER_KEYS[tier]}",
        location=resolved.loaded.where("pause_policy", key),
        field=f"pause_policy.{key}",
    )

"""One cluster run: a node per ``cluster.nodes`` entry behind the router, one workload.

Responsibility: derive each node group's scenario from the top-level one (its sections
override the defaults; ``sim.cluster.config.group_overrides``), check them all before a
run, build every node (``sim.run.node.build_node``) on one SimPy environment, the
router, the prefix directory (when the router reads one) and the front the workload
submits to; after the run, gather every node's tables (each with its ``node`` column),
the cluster-wide summary (the single-node keys over the whole cluster, ``sim.cluster.
aggregate``), one summary per node under ``nodes`` and the routing figures.

Invariants: node ids are consecutive from 0 in the order the groups list them; the
cluster's simulated time is the last node's; the same scenario and seed give the same
result; nothing here writes files.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import simpy

from sim.cluster.aggregate import KVSum, RecorderSum, cluster_cost
from sim.cluster.config import node_groups, node_roles
from sim.cluster.front import ClusterFront
from sim.cluster.routers import make_router
from sim.metrics import Recorder, summarize
from sim.metrics.pauses import pause_frame, pause_summary
from sim.metrics.summary import SummaryKV, closed_loop_workloads, fill_hold, pause_warnings
from sim.prefix.kinds import engine_rules
from sim.run.accuracy import add_accuracy
from sim.run.checks import (  # noqa: F401  (node_scenarios re-exported: its old home)
    node_scenarios,
    preflight_cluster,
    preflight_node,
)
from sim.run.node import RunResult, build_node, engine_meta, layer_group_meta, run_workload
from sim.run.pricing import cost_summary
from sim.run.provenance import config_sha256, resolved_config, scenario_path
from sim.scenario import LoadedScenario, Resolved
from sim.workload import Streams, WorkloadContext, workload_kind

#: summary keys that describe the run, not a node (kept out of each ``nodes`` entry)
_RUN_KEYS = ("kvsim_version", "versions", "command", "scenario_path", "config_sha256", "wall_time_s", "warnings")


@dataclass
class ClusterSimulation:
    """A built, not yet run, cluster simulation."""

    loaded: LoadedScenario
    env: simpy.Environment
    parts: list[Any]  # sim.run.node.NodeParts, by node id
    front: ClusterFront
    directory: Any
    recorder: Recorder  # the front's: trajectories and requests the router refused
    ctx: WorkloadContext
    driver: Any
    resolved: Resolved | None = field(repr=False, default=None)  # node 0's (the defaults' view)
    lockstep: Any = None  # sim.engine.lockstep.Lockstep of data-parallel MoE ranks

    @property
    def node(self):
        return self.parts[0].node

    def run(self, progress=None):
        if progress is not None:
            ctx = self.ctx
            for p in self.parts:
                p.node.progress = lambda now: progress(now, ctx.completed, ctx.total)
        t0 = time.perf_counter()
        run_workload(self.env, [p.node for p in self.parts], self.ctx, self.driver)
        wall = time.perf_counter() - t0
        return collect_cluster(self, wall)


def build_cluster(loaded: LoadedScenario) -> ClusterSimulation:
    section = loaded.scenario.cluster
    # the top-level sections (every node's defaults) are valid on their own, and every group
    preflight_node(loaded, then=preflight_cluster)
    by_group = preflight_cluster(loaded)
    resolved = [by_group[g] for g in node_groups(section)]
    env = simpy.Environment()
    parts = [build_node(env, r) for r in resolved]
    for part in parts:  # the front's router reads each node while its runs go on
        part.node.runs_past_receipt = False
    lockstep = _lockstep(env, section, parts)
    router = make_router(section.router, len(parts))
    directory = None
    if router.uses_directory and not section.disaggregated:
        from sim.cluster.directory import PrefixDirectory

        opts = section.router
        directory = PrefixDirectory(
            env,
            len(parts),
            chunk_tokens=opts.chunk_tokens,
            update_delay_s=router.directory_update_delay_s,
        )
        for j, p in enumerate(parts):
            directory.attach(j, p.kv)
    r0 = resolved[0]
    sc = r0.scenario
    recorder = Recorder(
        pool_bytes=sum(r.pool_bytes for r in resolved),
        phi_ext_request_bytes=sc.metrics.phi_ext_request_tokens * r0.kv_bytes_per_token,
        block_kind=True,
    )
    common = dict(pool_bytes=[r.pool_bytes for r in resolved], network_delay_s=section.network_delay_s,
                  on_rejected=recorder.request_ended)  # fmt: skip
    front: ClusterFront
    if section.disaggregated:
        from sim.cluster.disagg import DisaggFront
        from sim.sizing.groups import group_bytes

        front = DisaggFront(env, [p.node for p in parts], roles=node_roles(section),
                            groups=node_groups(section), link=section.link,
                            kv_groups=[group_bytes(r.model) for r in resolved],
                            num_layers=[r.model.num_layers for r in resolved], **common)  # fmt: skip
    else:
        front = ClusterFront(env, [p.node for p in parts], router, directory=directory, **common)
    windows = [r.context_window_tokens for r in resolved if r.context_window_tokens]
    kind = workload_kind(sc.workload.kind)
    ctx = WorkloadContext(
        env,
        front,
        Streams(sc.seed),
        recorder,
        loaded.base_dir,
        kind.count(sc.workload),
        context_window=min(windows) if windows else None,
    )
    driver = kind.driver(sc.workload, ctx)
    return ClusterSimulation(loaded, env, parts, front, directory, recorder, ctx, driver, r0,
                             lockstep)  # fmt: skip


def _lockstep(env: simpy.Environment, section, parts: list[Any]):
    """The data-parallel ranks of a MoE model step together (None: each node alone; a
    dense model's ranks are independent engines in vLLM too)."""
    dp = section.data_parallel
    if dp is None or not parts[0].resolved.model.num_experts:
        return None
    from sim.cost.expert_parallel import LockstepPricer
    from sim.engine.lockstep import Lockstep

    pricer = LockstepPricer(parts[0].cost, len(parts), cudagraph_max_tokens=dp.cudagraph_max_tokens)
    node = parts[0].resolved.scenario.engine
    group = Lockstep(env, pricer, runs=not node.exact, horizon_s=parts[0].resolved.scenario.duration_s)
    for j, p in enumerate(parts):
        p.node.lockstep, p.node.rank = group, j
    return group


# --------------------------------------------------------------------------- collect
def _with_node(frame: pd.DataFrame, node: int | Any) -> pd.DataFrame:
    frame = frame.copy() if frame is not None else pd.DataFrame()
    frame["node"] = node
    frame["node"] = frame["node"].astype("int64")
    return frame


def collect_cluster(sim: ClusterSimulation, wall_time_s: float):
    sim_time = max(p.node.end_s for p in sim.parts)
    node_frames, node_pauses, node_groups_frames = [], [], []
    for j, p in enumerate(sim.parts):
        p.kv.flush_all()
        for req in sim.front.in_flight(j):  # unfinished at the horizon, on the network too
            p.recorder.request_ended(req)
        f = p.recorder.frames()
        node_frames.append({k: _with_node(v, j) for k, v in f.items()})
        node_pauses.append(_with_node(pause_frame(p.pauses.records(sim_time)), j))
        groups = p.recorder.group_frame()
        if groups is not None:
            node_groups_frames.append(_with_node(groups, j))
    front = sim.recorder.frames()
    traj = front["trajectories"]
    homes = [sim.front.trajectory_node(int(t)) for t in traj.traj_id]
    # a trajectory the router refused every call of was never on a node: -1
    traj = _with_node(traj, [-1 if h is None else h for h in homes] if len(traj) else 0)
    kv_all: SummaryKV = KVSum([p.kv for p in sim.parts])  # checked here: the call ignores arg types
    fill_hold(traj, kv_all, sim_time)
    roles = node_roles(sim.loaded.scenario.cluster)
    frames = {
        # a prefill instance's requests are the prefill halves of the calls (in its own
        # summary under nodes), not calls of the workload
        "requests": _concat([_with_node(front["requests"], -1)]
                            + [f["requests"] for f, r in zip(node_frames, roles, strict=True)
                               if r != "prefill"], "req_id"),  # fmt: skip
        "steps": _concat([f["steps"] for f in node_frames]),
        "memory": _concat([f["memory"] for f in node_frames]),
        "trajectories": traj,
    }
    pauses = _concat(node_pauses)
    rec_all = RecorderSum([p.recorder for p in sim.parts])
    # the workload's output: a prefill instance's one sampled token per remote prefill
    # (vLLM's max_tokens=1 prefill half) is its own (under nodes), not the cluster's
    rec_all.output_tokens -= sum(p.recorder.output_tokens for p, r in zip(sim.parts, roles, strict=True)
                                 if r == "prefill")  # fmt: skip
    config = resolved_config(sim.loaded)
    meta = _meta(sim, config)
    # RecorderSum has the Recorder's read side (the metrics layer declares no protocol yet)
    summary = summarize(rec_all, frames, sim_time_s=sim_time, kv=kv_all, meta=meta,  # type: ignore[arg-type]
                        closed_loop=closed_loop_workloads(sim.loaded.scenario.workload))
    said = dict.fromkeys(w for p in sim.parts for w in p.resolved.warnings)  # vLLM would not
    summary["warnings"] = [*said, *summary["warnings"]]
    summary.update(pause_summary(pauses))
    pause_warnings(summary)
    summary["hints_released"] = sum(p.pauses.hint_releases for p in sim.parts)
    nodes = [
        _node_summary(sim, j, node_frames[j], node_pauses[j], traj, sim_time)
        for j in range(len(sim.parts))
    ]
    for key in ("paused_kv_bytes_peak", "paused_hbm_bytes_peak"):  # sums, as peak_allocated
        summary[key] = int(sum(n[key] for n in nodes))
    summary.update(cluster_cost(nodes, summary))
    summary.update(_routing(sim))
    if roles_split(roles):
        from sim.run.disagg import disagg_summary

        summary.update(disagg_summary(sim.front, frames["requests"], nodes, roles, sim_time))
    add_accuracy(summary, [(p.resolved, p.cost, node_frames[j]["steps"])
                           for j, p in enumerate(sim.parts)])
    summary["nodes"] = nodes
    summary["wall_time_s"] = wall_time_s
    return RunResult(
        summary,
        frames["requests"],
        frames["steps"],
        frames["memory"],
        frames["trajectories"],
        config,
        sim.resolved,
        pauses,
        _concat(node_groups_frames) if node_groups_frames else None,
    )


def roles_split(roles: list[str]) -> bool:
    """Prefill and decode on separate nodes."""
    return any(r != "both" for r in roles)


def _concat(frames: list[pd.DataFrame], sort: str | None = None) -> pd.DataFrame:
    frames = [f for f in frames if len(f.columns)]
    nonempty = [f for f in frames if len(f)]
    out = pd.concat(nonempty or frames[:1], ignore_index=True)
    if sort is not None and len(out):
        out = out.sort_values(sort, kind="stable").reset_index(drop=True)
    return out


def _meta(sim: ClusterSimulation, config: dict) -> dict:
    rs = [p.resolved for p in sim.parts]
    sc = rs[0].scenario

    def names(values) -> str:
        return "+".join(dict.fromkeys(values))

    return {
        "scenario": sim.loaded.scenario.name,
        "schema_version": sc.schema_version,
        "seed": sc.seed,
        "model": names(r.model.name for r in rs),
        "accelerator": names(r.accelerator.name for r in rs),
        "num_gpus": sum(r.num_gpus for r in rs),
        "allocator": names(r.allocator_kind for r in rs),
        "engine_rules": names(x for x in map(_rules, rs) if x) or None,
        "scheduler": names(r.scenario.scheduler.kind for r in rs),
        "pause_policy": names(r.scenario.pause_policy.kind for r in rs),
        "exact": sc.engine.exact,
        "kv_pool_bytes": sum(round(r.pool_bytes) for r in rs),  # = the nodes' own, summed
        "kv_bytes_per_token": float(rs[0].kv_bytes_per_token),
        **layer_group_meta(rs[0]),  # allocator_kv_bytes_per_token etc., node 0's as above
        "trajectories_total": sim.ctx.total,
        "command": None,
        "scenario_path": scenario_path(sim.loaded),
        "config_sha256": config_sha256(config),
    }


def _rules(r: Resolved) -> str | None:
    return engine_rules(r.allocator_kind, r.allocator_options)


def _node_summary(sim, j: int, frames: dict, pauses: pd.DataFrame, traj, sim_time: float):
    p = sim.parts[j]
    r = p.resolved
    mine = {**frames, "trajectories": traj[traj.node == j].reset_index(drop=True)}
    meta = {
        "node_id": j,
        **engine_meta(r),
        "scenario": sim.loaded.scenario.name,
        "trajectories_total": int(len(mine["trajectories"])),
    }
    s = summarize(p.recorder, mine, sim_time_s=sim_time, kv=p.kv, meta=meta,
                  closed_loop=closed_loop_workloads(sim.loaded.scenario.workload))
    s.update(pause_summary(pauses))
    s["hints_released"] = p.pauses.hint_releases
    s.update(cost_summary(r, s))
    s["routing_decisions"] = int(sim.front.routed[j])
    role = node_roles(sim.loaded.scenario.cluster)[j]
    if role != "both":
        s["role"] = role
    for k in _RUN_KEYS:
        s.pop(k, None)
    return s


def _routing(sim: ClusterSimulation) -> dict:
    d, f = sim.directory, sim.front
    prompt = f.match_prompt_tokens
    return {
        "n_nodes": len(sim.parts),
        "router": "disaggregated" if sim.loaded.scenario.cluster.disaggregated else sim.loaded.scenario.cluster.router.kind,
        "routing_decisions": int(sum(sim.front.routed)),
        "rejected_by_router": int(sim.front.rejected),
        "sequence_moves": int(sim.front.moves),
        "directory_entries": int(d.entries) if d is not None else None,
        "directory_staleness_s": float(d.mean_staleness_s) if d is not None else None,
        "routed_match_rate": f.match_chosen_tokens / prompt if prompt else None,
        "global_match_rate": f.match_best_tokens / prompt if prompt else None,
        **_data_parallel(sim),
    }


def _data_parallel(sim: ClusterSimulation) -> dict:
    """The data-parallel engine's figures (nothing for a cluster of separate nodes)."""
    dp = sim.loaded.scenario.cluster.data_parallel
    if dp is None:
        return {}
    g = sim.lockstep
    out = {"dp_ranks": len(sim.parts), "expert_parallel": dp.expert_parallel}
    keys = ("lockstep_steps", "dummy_rank_steps", "lockstep_busy_s", "lockstep_moe_s",
            "lockstep_comm_s", "lockstep_wait_s", "dp_padded_tokens")  # fmt: skip
    if g is None:
        return {**out, **dict.fromkeys(keys)}
    moe = g.moe_s if g.pricer.split else None  # else inside each rank's own price
    vals = (g.steps, g.dummy_rank_steps, g.busy_s, moe, g.comm_s, g.wait_s, g.padded_tokens)
    return {**out, **dict(zip(keys, vals, strict=True))}

"""One node of a run: its checks before a run, its parts, its facts, and the run's result.

Responsibility: everything a single-node run and a cluster run share, below both
(``sim.run.runner`` builds one node, ``sim.run.cluster`` one per entry): ``build_node`` (cost model, allocator, KV manager,
scheduler, recorder, pause lifecycle, copy engines), ``run_workload`` (the environment run
to the nodes' end, with the workload's driver held to its kind's ``count``),
``engine_meta`` (the summary's facts about one engine) and ``RunResult``. Keeping them here keeps ``runner`` -> ``cluster`` ->
``node`` acyclic.

Invariant: nothing here reads the wall clock or writes files; the same resolved scenario
builds the same node; nothing here imports pandas (a ``RunResult``'s tables become
DataFrames when read).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import simpy

from sim.cost import CostModel
from sim.cost.speculative import DraftPricer, drafter_profile
from sim.engine import Node
from sim.engine.copy_engine import CopyEngines
from sim.engine.node import SimTimeLimitError, WorkloadStoppedError
from sim.engine.pauses import PauseLifecycle
from sim.errors import InvariantError
from sim.memory.kv_manager import KVManager
from sim.metrics import HbmLayout, Recorder
from sim.metrics.recorder import OBJECT_COLUMNS
from sim.metrics.table import Columns, to_frame
from sim.prefix.hybrid_hit import kv_groups_limiting_group
from sim.prefix.kinds import engine_rules
from sim.scenario import Resolved, make_allocator_for
from sim.scenario.speculative import grouped_draft_layers
from sim.sched import Scheduler, make_scheduler
from sim.sizing.group_demand import kv_groups, with_saved_states
from sim.sizing.group_split import GroupSplit, kv_split
from sim.workload import WorkloadContext

if TYPE_CHECKING:
    from typing import TypeAlias

    import pandas as pd

    #: a record table as a ``RunResult`` holds it: numpy ``Columns`` (a run's), or a DataFrame
    RecordTable: TypeAlias = Columns | pd.DataFrame


Table = TypeVar("Table")


class _Table(Generic[Table]):
    """A record table of a ``RunResult``: a pandas DataFrame to its reader, made from the
    numpy ``Columns`` the result holds on the first access (then kept in their place);
    setting it holds what is set."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, result: RunResult, owner: type | None = None) -> Table:
        return result._frame(self.name)

    def __set__(self, result: RunResult, value: Table) -> None:
        result._tables[self.name] = value


class RunResult:
    """What a run produced: the summary and the record tables.

    The tables (``requests``, ``steps``, ``memory``, ``trajectories``, ``pauses``: one row
    per tool pause; ``memory_groups``: KV by layer group at each memory row, None for a
    model of one group) read as pandas DataFrames. A run hands them over as numpy
    ``Columns`` (``sim.metrics.table``), and each becomes a DataFrame on its first access
    (``sim.metrics.table.to_frame``), so a run that only writes its folder never imports
    pandas; a DataFrame given (a cluster's tables) is kept as it is. ``table(name)`` is
    what the result holds, as it is (the run folder's writer reads it).
    """

    requests: _Table[pd.DataFrame] = _Table()
    steps: _Table[pd.DataFrame] = _Table()
    memory: _Table[pd.DataFrame] = _Table()
    trajectories: _Table[pd.DataFrame] = _Table()
    pauses: _Table[pd.DataFrame | None] = _Table()
    memory_groups: _Table[pd.DataFrame | None] = _Table()

    def __init__(
        self,
        summary: dict,
        requests: RecordTable,
        steps: RecordTable,
        memory: RecordTable,
        trajectories: RecordTable,
        config: dict,  # the resolved scenario (every default filled in, trace paths absolute)
        resolved: Resolved | None = None,
        pauses: RecordTable | None = None,
        memory_groups: RecordTable | None = None,
    ) -> None:
        self.summary = summary
        self.config = config
        self.resolved = resolved
        self._tables: dict[str, RecordTable | None] = {
            "requests": requests,
            "steps": steps,
            "memory": memory,
            "trajectories": trajectories,
            "pauses": pauses,
            "memory_groups": memory_groups,
        }

    def __repr__(self) -> str:
        tables = [n for n, t in self._tables.items() if t is not None]
        return f"RunResult(scenario={self.summary.get('scenario')!r}, tables={tables})"

    def table(self, name: str) -> RecordTable | None:
        """The table ``name`` (one of ``sim.run.output.TABLES``) as held: numpy
        ``Columns`` until read as a DataFrame, then that DataFrame; None: no such table."""
        return self._tables[name]

    def _frame(self, name: str) -> Any:
        table = self._tables[name]
        if isinstance(table, dict):  # numpy Columns: the DataFrame takes their place
            table = self._tables[name] = to_frame(table, OBJECT_COLUMNS)
        return table

    def write(self, out_dir: str | Path, *, force: bool = False) -> Path:
        """Write the run folder (see ``sim.run.output``); ``force`` replaces a previous run's."""
        from sim.run.output import write_run

        return write_run(self, out_dir, force=force)


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
    scheduler = make_scheduler(sc.scheduler, kv, sc.speculative)
    cost.async_scheduling = scheduler.async_scheduling  # host work overlaps the GPU's step
    recorder = Recorder(
        pool_bytes=resolved.pool_bytes,
        phi_ext_request_bytes=sc.metrics.phi_ext_request_tokens * allocator.kv_bytes_per_token,
        block_kind=allocator.block_size is not None,
        hbm=HbmLayout.of(resolved, allocator.kv_bytes_per_token),
        groups=group_split(resolved, allocator),
    )
    if recorder.groups is not None and len(recorder.groups.side) > 1:
        recorder.side_weights = kv.side_bytes_by_group  # several side groups share a lump
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
        draft=draft_pricer(resolved),
    )
    t = resolved.tiers
    if t is None:  # resolve() sets the tiers of every scenario it resolves
        raise InvariantError(f"{sc.name}: resolved without tiers")
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


def run_workload(env: simpy.Environment, nodes: list[Node], ctx: WorkloadContext, driver: Any) -> None:
    """Run ``env`` until every one of ``nodes`` has ended, with the workload's ``driver``.

    A driver that disagrees with its kind's ``count`` is a one-line ``KvsimError`` naming
    the kind and both numbers (``WorkloadContext.miscounted``): one that starts or ends
    more trajectories is refused as it does (``trajectory_started``/``_ended``); one that
    ends fewer and then posts nothing more leaves the nodes idle with nothing left to
    wake them (``WorkloadStoppedError``, at ``engine.max_sim_time_s``: simulated time
    jumps there at once); one still running when the trajectories its count says have
    all ended (more to start later, which would be dropped) is refused after the run: a
    driver's generator returns once it has started its trajectories (every shipped one
    does; O(1) after the run). A ``mix``'s components (``ctx.component_drivers``) are checked each
    against its own count, the miscounted one named by its place."""
    process = env.process(driver)
    until = nodes[0].process if len(nodes) == 1 else simpy.AllOf(env, [n.process for n in nodes])
    try:
        env.run(until=until)
    except (WorkloadStoppedError, SimTimeLimitError):
        if ctx.ended < ctx.total and any(n.workload_stopped for n in nodes):
            # a mix: the first component that ended fewer than its count
            part = next((p for p, _ in ctx.component_drivers if p.ended < p.total), ctx)
            what = f"ended {part.ended} (of {part.started} started) and then posted nothing more"
            raise part.miscounted(what) from None
        raise
    if ctx.ended >= ctx.total:  # every driver, a mix's components' too, must have returned
        for part, proc in ((ctx, process), *ctx.component_drivers):
            if proc.is_alive:
                what = f"was still running when those {part.total} had ended (a driver returns once it has started them all)"
                raise part.miscounted(what)


def group_split(r: Resolved, allocator: Any) -> GroupSplit | None:
    """How the recorder splits the allocator's bytes by layer group (None: a model of one
    group): the groups as the engine sees them (``Resolved.kv_groups``, or the table's
    groups of a model without side groups, e.g. MLA with an indexer, with the saved states
    of ``mamba_cache_mode: all`` riding on the table as the allocator charges them)."""
    hw = r.scenario.hardware
    groups = r.kv_groups
    if groups is None:
        groups = kv_groups(r.model, hw.tp, hw.pp, num_gpus=r.num_gpus,
                           draft_layers=grouped_draft_layers(r.scenario.speculative))
        if r.saved_state_bytes_per_token:
            groups = with_saved_states(groups, r.allocator_options["block_size"],
                                       r.saved_state_page_bytes)  # fmt: skip
    return kv_split(groups, allocator.kv_bytes_per_token, allocator.kv_groups is not None)


def draft_pricer(resolved: Resolved) -> DraftPricer | None:
    """The drafter's pricer of a speculative-decoding run (None: no speculative decoding):
    the drafter's model on the target's accelerator and TP, with no per-step host
    overhead of its own (``sim.cost.speculative``)."""
    sc = resolved.scenario
    spec = sc.speculative
    if spec is None:
        return None
    model = drafter_profile(resolved.model, spec.method, resolved.draft_model)
    # the target's calibration and whole-model overrides are not the drafter's
    pricing = "roofline_max" if sc.cost.step_pricing == "kernel_tables" else sc.cost.step_pricing
    config = sc.cost.model_copy(update={"step_overhead_s": 0.0, "calibration": None,
                                        "weights_bytes": None, "params": None,
                                        "step_pricing": pricing})  # fmt: skip
    cost = CostModel(model, resolved.accelerator, sc.hardware.tp, 1, config)
    return DraftPricer(cost, spec.drafter_steps)


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
        **layer_group_meta(r),
    }


def layer_group_meta(r: Resolved) -> dict[str, Any]:
    """The summary's optional facts about a hybrid model's layer groups (the hit rule's
    limiting group, the raised block size, the block table's bytes per token): a run's,
    a cluster node's, and a cluster's (its node 0's, as ``kv_bytes_per_token``)."""
    return {
        **_hit_limit(r),
        **_raised_block(r),
        **_table_bytes(r),
        **({} if r.mamba_cache_mode == "none" else {"mamba_cache_mode": r.mamba_cache_mode}),
    }


def _table_bytes(r: Resolved) -> dict[str, Any]:
    """``allocator_kv_bytes_per_token``, present for a hybrid model: the bytes per token of
    its block table (the layers that keep every token, and the saved states of
    ``mamba_cache_mode: all``), what its allocator charges."""
    if r.kv_groups is None and not r.saved_state_bytes_per_token:
        return {}
    return {"allocator_kv_bytes_per_token": float(r.allocator_kv_bytes_per_token)}


def _raised_block(r: Resolved) -> dict[str, Any]:
    """``block_size_tokens`` and ``requested_block_size_tokens``, present when the block
    size was raised for a model with state layers (vLLM's page unification, as ``plan``)."""
    if r.requested_block_size_tokens is None:
        return {}
    return {
        "block_size_tokens": int(r.allocator_options["block_size"]),
        "requested_block_size_tokens": r.requested_block_size_tokens,
    }


def _hit_limit(r: Resolved) -> dict[str, Any]:
    """``prefix_hit_limited_by``, present when a layer group stops a prefix cache's hits."""
    if engine_rules(r.allocator_kind, r.allocator_options) is None:
        return {}
    group = kv_groups_limiting_group(r.kv_groups)
    return {} if group is None else {"prefix_hit_limited_by": group}



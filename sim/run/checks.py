"""Every check a scenario passes before a run or ``kvsim validate``, with nothing heavy.

Responsibility: ``preflight`` (one node's checks, ``preflight_node``, and every node
group's for a ``cluster`` section, ``preflight_cluster``), the node scenarios a cluster
section derives (``node_scenarios``) and the pause policy's tiers
(``check_pause_policy``). Below ``sim.run.node``, ``sim.run.cluster`` and
``sim.run.runner``, which build and run what passed.

Invariant: this module imports no engine, no SimPy and no pandas (``kvsim validate``
stays quick; tests/cli/test_startup_imports.py); it reads the scenario and the profiles
only; a problem is a ``KvsimError`` located at its scenario line.
"""

from __future__ import annotations

from collections.abc import Callable

from sim.errors import ConfigError, InvariantError, KvsimError
from sim.scenario import LoadedScenario, Resolved, load_scenario, make_allocator_for, resolve
from sim.scenario.paths import missing_files


def preflight(loaded: LoadedScenario) -> Resolved:
    """Every check a scenario passes before a run (``build``) or ``kvsim validate``
    (``sim.run.node.preflight_node``), with every node group's for a ``cluster`` section."""
    then = preflight_cluster if loaded.scenario.cluster is not None else None
    return preflight_node(loaded, then=then)


def preflight_node(
    loaded: LoadedScenario, then: Callable[[LoadedScenario], object] | None = None
) -> Resolved:
    """Every check a scenario passes before a run (``build``) or ``kvsim validate``: the
    files it names, then the profiles and the pool (``resolve``), the allocator's options
    and the tiers the pause policy needs. One problem is raised as it is; several as one
    ``ConfigError`` that says the first, counts the rest and lists them in ``problems``.
    ``then`` adds its checks to the same list (``sim.run.runner.preflight`` passes the
    cluster's node groups for a scenario with a ``cluster`` section)."""
    problems: list[KvsimError] = list(missing_files(loaded))  # each with its scenario line
    resolved = None
    try:
        _check_expert_shards(loaded)
        resolved = resolve(loaded)
        _check_ranks_per_expert(resolved)
        make_allocator_for(resolved)  # the allocator's options
        check_pause_policy(resolved)  # the tiers the policy needs
        if then is not None:
            then(loaded)
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
    if resolved is None:  # every failure above raised
        raise InvariantError("preflight: no problem and no resolved scenario")
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


def node_scenarios(loaded: LoadedScenario) -> list[LoadedScenario]:
    """One node scenario per ``cluster.nodes`` group (no ``cluster`` section in them);
    a problem in a group is one line located at that group."""
    from sim.cluster.config import group_overrides, node_extra_overrides  # a cluster's only

    section = loaded.scenario.cluster
    data = loaded.scenario.model_dump(mode="json", exclude={"cluster"})
    out = []
    for i, group in enumerate(section.nodes):
        try:
            node = load_scenario(data, {**group_overrides(group), **node_extra_overrides(section)})
        except KvsimError as exc:
            raise _at_group(loaded, i, exc) from None
        node.source, node.base_dir, node.lines = loaded.source, loaded.base_dir, {}
        node.overrides = {}
        node.data_parallel_rank = section.data_parallel is not None
        out.append(node)
    return out


def _at_group(loaded: LoadedScenario, i: int, exc: KvsimError) -> ConfigError:
    msg = exc.message if isinstance(exc, ConfigError) else str(exc)
    sub = exc.field if isinstance(exc, ConfigError) and exc.field else ""
    sub = sub.removeprefix("--set ")
    return ConfigError(
        msg, location=loaded.where("cluster", "nodes", i), field=f"cluster.nodes.{i}.{sub}".rstrip(".")
    )


def preflight_cluster(loaded: LoadedScenario) -> list[Resolved]:
    """Every node group's checks (``preflight_node`` of each node scenario), in group order."""
    out = []
    for i, node in enumerate(node_scenarios(loaded)):
        try:
            out.append(preflight_node(node))
        except KvsimError as exc:
            raise _at_group(loaded, i, exc) from None
    return out


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

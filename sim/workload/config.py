"""Scenario configuration of workloads and arrival processes: every name in one place.

Responsibility: the names of the workload configuration, wherever each lives: the shared
parts and one-turn kinds (``sim.workload.common_config``) are imported here; the agent
kinds (``sim.workload.agent_config``), ``vllm_requests`` and ``mix`` with the whole
``workload`` union (``sim.workload.mix_config``) load on their first look-up here (PEP
562), so a scenario that names one kind imports only that kind's module
(``sim.workload.kind_models``).

Invariant: this module defines nothing: every name is its home module's object.
"""

from __future__ import annotations

from typing import Any

from sim.workload.common_config import (  # noqa: F401  (the names of this layer's config)
    MAX_BRANCHES,
    MAX_COMPONENTS,
    MAX_CONCURRENCY,
    MAX_COUNT,
    MAX_CV,
    MAX_RATE_PER_S,
    MAX_TREE_BRANCHES,
    MAX_TURNS,
    MIN_CV,
    Arrival,
    BranchDist,
    ChatWorkload,
    ClosedLoopArrival,
    DiurnalArrival,
    FixedArrival,
    GammaArrival,
    Lengths,
    MooncakeWorkload,
    ParametricLengths,
    PoissonArrival,
    RequestGroup,
    RequestsWorkload,
    Sinusoid,
    TimeDist,
    TokenDist,
    TraceArrival,
    TraceLengths,
    TurnDist,
    WorkloadConfigModel,
)

#: the names that load on first look-up -> their module of ``sim.workload``
_LATER = {
    **{name: "agent_config" for name in (
        "ForkConfig", "TrajectoryWorkload", "AgentWorkload", "ParamsFile",
        "CodingAgentWorkload", "FunctionCallingWorkload", "HumanInLoopWorkload",
        "MultiAgentTeamWorkload", "TreeSearchWorkload", "AgentTraceWorkload",
        "ClaudeCodeWorkload", "InteractiveCodingAgentWorkload")},
    "VllmRequestsWorkload": "vllm_requests",
    "MixWorkload": "mix_config",
    "Workload": "mix_config",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    home = _LATER.get(name)
    if home == "agent_config":
        from sim.workload import agent_config as module
    elif home == "vllm_requests":
        from sim.workload import vllm_requests as module
    elif home == "mix_config":
        from sim.workload import mix_config as module
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(module, name)

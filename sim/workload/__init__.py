"""Who asks: trajectory processes, arrival processes, traces, seeded random streams.

Workloads are registered by name (``chat``, ``agent``, ``requests``, ``mooncake``, ``vllm_requests``,
``mix``, and the agent kinds ``coding_agent``, ``function_calling``, ``human_in_loop``,
``multi_agent_team``, ``tree_search``, ``agent_trace``, ``claude_code``,
``interactive_coding_agent`` that share ``sim.workload.agent``'s
trajectory engine); each has a config model (``sim.workload.config``'s table of kinds), a trajectory count and a
driver (a SimPy generator that starts trajectories through an arrival strategy). A
registered driver labels its context with the kind (the ``workload`` column) unless a
``mix`` already named it. Every agent kind lays out its prompts through one builder
(``workload.harness``, ``sim.workload.layout``) and may be billed by a provider's prompt
cache (``workload.provider_cache``, ``sim.workload.billing``).

Invariant: this layer talks to the engine only through the node's workload API (submit,
fork, release, cancel); randomness comes only from the named streams of ``rng``.
Importing this package is cheap: the shipped kinds register on the first look-up
(``sim.workload.builtin``, a plug-in loader that ``workload_kind`` runs) and the names
below load their modules on first use (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from sim import plugins as _plugins

if TYPE_CHECKING:
    from sim.workload.agent_config import AgentWorkload
    from sim.workload.arrivals import ARRIVALS, arrival_strategy
    from sim.workload.common_config import ChatWorkload, MooncakeWorkload, RequestsWorkload
    from sim.workload.context import WorkloadContext
    from sim.workload.kinds import WORKLOADS, WorkloadKind, register_workload, workload_kind
    from sim.workload.mix_config import MixWorkload, Workload
    from sim.workload.rng import Streams


def _load_builtin_kinds() -> None:
    import sim.workload.builtin  # noqa: F401  (registers the shipped kinds)


_plugins.add_loader("workloads", _load_builtin_kinds)

__all__ = [
    "ARRIVALS",
    "WORKLOADS",
    "AgentWorkload",
    "ChatWorkload",
    "MixWorkload",
    "MooncakeWorkload",
    "RequestsWorkload",
    "Streams",
    "Workload",
    "WorkloadContext",
    "WorkloadKind",
    "arrival_strategy",
    "register_workload",
    "workload_kind",
]

#: each public name -> the module of this package that defines it
_HOME = {
    "ARRIVALS": "arrivals", "arrival_strategy": "arrivals",
    "AgentWorkload": "agent_config", "ChatWorkload": "common_config", "MixWorkload": "mix_config",
    "MooncakeWorkload": "common_config", "RequestsWorkload": "common_config", "Workload": "mix_config",
    "WorkloadContext": "context", "Streams": "rng",
    "WORKLOADS": "kinds", "WorkloadKind": "kinds", "register_workload": "kinds",
    "workload_kind": "kinds",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name == "WORKLOADS":  # the table, with the shipped kinds in it
        _plugins.load_plugins("workloads")
    return getattr(importlib.import_module(f"sim.workload.{home}"), name)

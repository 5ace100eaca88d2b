"""Who asks: trajectory processes, arrival processes, traces, seeded random streams.

Workloads are registered by name (``chat``, ``agent``, ``requests``); each has a config
model (``sim.workload.config``), a trajectory count and a driver (a SimPy generator that
starts trajectories through an arrival strategy).

Invariant: this layer talks to the engine only through the node's workload API (submit,
fork, release, cancel); randomness comes only from the named streams of ``rng``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.errors import UnknownNameError
from sim.workload.agent import agent_driver
from sim.workload.arrivals import ARRIVALS, arrival_strategy
from sim.workload.chat import chat_driver, requests_count, requests_driver
from sim.workload.config import (
    AgentWorkload,
    ChatWorkload,
    RequestsWorkload,
    Workload,
)
from sim.workload.context import WorkloadContext
from sim.workload.rng import Streams


@dataclass(frozen=True)
class WorkloadKind:
    """A registered workload: how many trajectories it starts and its driver."""

    name: str
    config: type
    count: Any  # config -> int
    driver: Any  # (config, WorkloadContext) -> SimPy generator


WORKLOADS: dict[str, WorkloadKind] = {}


def register_workload(kind: WorkloadKind) -> WorkloadKind:
    WORKLOADS[kind.name] = kind
    return kind


register_workload(WorkloadKind("chat", ChatWorkload, lambda c: c.num_requests, chat_driver))
register_workload(WorkloadKind("agent", AgentWorkload, lambda c: c.num_trajectories, agent_driver))
register_workload(WorkloadKind("requests", RequestsWorkload, requests_count, requests_driver))


def workload_kind(name: str) -> WorkloadKind:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UnknownNameError("workload", name, list(WORKLOADS)) from None


__all__ = [
    "ARRIVALS",
    "WORKLOADS",
    "AgentWorkload",
    "ChatWorkload",
    "RequestsWorkload",
    "Streams",
    "Workload",
    "WorkloadContext",
    "WorkloadKind",
    "arrival_strategy",
    "register_workload",
    "workload_kind",
]

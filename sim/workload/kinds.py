"""The registry of workload kinds: name -> config model, trajectory count, driver.

Invariant: a kind is looked up by name at the moment it is used (never copied into a
table at import time), so a kind registered late is as usable as a shipped one; an unknown
name is a one-line ``UnknownNameError`` listing the registered kinds. The shipped kinds are
registered by ``sim.workload.builtin`` on the first look-up; drivers that dispatch on a kind (``mix``) import this module,
not the package, so the package's imports stay acyclic.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sim.errors import UnknownNameError
from sim.plugins import load_plugins
from sim.workload.context import WorkloadContext


@dataclass(frozen=True)
class WorkloadKind:
    """A registered workload: how many trajectories it starts and its driver."""

    name: str
    config: type
    count: Any  # config -> int
    driver: Any  # (config, WorkloadContext) -> SimPy generator


WORKLOADS: dict[str, WorkloadKind] = {}


def register_workload(kind: WorkloadKind) -> WorkloadKind:
    """Register ``kind``; its driver labels an unlabelled context with the kind's name."""
    driver = kind.driver

    def labelled(cfg, ctx: WorkloadContext):
        if not ctx.label:
            ctx.label = kind.name
        return driver(cfg, ctx)

    kind = replace(kind, driver=labelled)
    WORKLOADS[kind.name] = kind
    return kind


def workload_kind(name: str) -> WorkloadKind:
    """The registered kind ``name`` (the shipped kinds load on the first look-up)."""
    load_plugins("workloads")
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UnknownNameError("workload", name, list(WORKLOADS)) from None

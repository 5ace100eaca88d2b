"""The scheduler protocol and the registry of schedulers by name.

Responsibility: one place where a ``scheduler.kind`` becomes an object, and the contract
the engine relies on: ``add`` (submit), ``cancel``, ``schedule() -> BatchPlan`` and
``commit(plan, steps) -> CommitResult``. A scheduler is pure: no SimPy, no clock; it
mutates its queues and asks the KV manager to admit, grow and preempt.

Invariant: a request is in at most one of ``running`` and ``waiting``; every registered
name maps to one class whose ``Config`` is a pydantic model with ``kind`` = that name.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from pydantic import BaseModel

from sim.errors import UnknownNameError
from sim.sched.plan import BatchPlan, CommitResult
from sim.sched.request import Request


class Scheduler(Protocol):
    """What the engine needs from a scheduler."""

    name: ClassVar[str]
    Config: ClassVar[type[BaseModel]]
    running: list[Request]
    waiting: Any  # a deque of Request, head first

    def add(self, req: Request) -> bool: ...
    def cancel(self, req: Request) -> bool: ...
    def schedule(self) -> BatchPlan: ...
    def commit(self, plan: BatchPlan, steps: int = 1) -> CommitResult: ...
    def check_invariants(self) -> None: ...


_REGISTRY: dict[str, type] = {}


def register_scheduler(cls: type) -> type:
    """Class decorator: make ``cls`` reachable by ``cls.name``."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"scheduler {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def scheduler_names() -> list[str]:
    return sorted(_REGISTRY)


def scheduler_class(kind: str) -> type:
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise UnknownNameError("scheduler", str(kind), list(_REGISTRY)) from None


def make_scheduler(config: BaseModel, kv: Any) -> Scheduler:
    """A scheduler from its validated config and the KV manager it talks to."""
    return scheduler_class(config.kind)(config, kv)


def scheduler_configs() -> tuple[type[BaseModel], ...]:
    """Every registered scheduler's config model (for the scenario schema)."""
    return tuple(cls.Config for cls in _REGISTRY.values())

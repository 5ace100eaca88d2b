"""The scheduler contract and the registry of schedulers by name.

Responsibility: one place where a ``scheduler.kind`` becomes an object, and the complete
contract the engine relies on (``Scheduler``): every call the node and the pause
lifecycle make, with types. A new scheduler subclasses ``Scheduler`` and implements the
abstract methods; the optional abilities (runs of identical steps for the engine's fast
path: ``supports_runs`` and ``BatchPlan.run``) have defaults that switch them off, so the
engine asks, never probes. A scheduler
is pure: no SimPy, no clock; it mutates its queues and asks the KV manager to admit, grow
and preempt. ``tests/sched/test_protocol.py`` runs a scenario with a minimal FCFS
scheduler written only to this contract.

Invariant: a request is in at most one of ``running`` and ``waiting``; every registered
name maps to one class whose ``Config`` is a pydantic model with ``kind`` = that name;
``check_invariants`` raises ``InvariantError`` (the one invariant-failure mechanism).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from typing import ClassVar

from pydantic import BaseModel

from sim.errors import UnknownNameError
from sim.memory.errors import InvariantError
from sim.memory.kv_manager import KVManager
from sim.sched.plan import BatchPlan, CommitResult
from sim.sched.request import RUNNING, WAITING, Request


class Scheduler(ABC):
    """What the engine needs from a scheduler (the node and the pause lifecycle call
    nothing else)."""

    name: ClassVar[str]
    Config: ClassVar[type[BaseModel]]
    #: this scheduler bounds how long each batch may repeat unchanged (``BatchPlan.run``),
    #: so the engine may advance it by several identical steps at once and then call
    #: ``commit(plan, steps=k)``; False = ``plan.run`` stays None, one ``commit(plan)`` a step
    supports_runs: ClassVar[bool] = False

    def __init__(self, config: BaseModel, kv: KVManager) -> None:
        self.config = config
        self.kv = kv
        self.running: list[Request] = []  # admission order
        self.waiting: deque[Request] = deque()  # head first

    # ------------------------------------------------------------ queues
    @abstractmethod
    def add(self, req: Request) -> bool:
        """Queue a new request; False (its status REJECTED, its ``finish_reason`` set) if
        it can never run."""

    @abstractmethod
    def cancel(self, req: Request) -> bool:
        """Remove a queued or running request (a pruned branch); True if it was there."""

    @property
    def async_scheduling(self) -> bool:
        """The next step is planned while the current one runs (vLLM's async scheduling):
        the cost model then overlaps the host's per-step work with the GPU's."""
        return False

    @property
    def token_budget(self) -> int:
        """Tokens one step may compute at most (a cluster router prices a full-budget
        prefill chunk with it); 2,048 unless the kind declares its own."""
        return 2048

    @property
    def has_work(self) -> bool:
        """Requests are running or waiting."""
        return bool(self.running or self.waiting)

    # ------------------------------------------------------------ steps
    @abstractmethod
    def schedule(self) -> BatchPlan:
        """The next step's batch, with the scheduling events that produced it, and (a
        scheduler that ``supports_runs``) how long it may repeat unchanged (``plan.run``,
        a ``RunLimit``; the engine decides whether to run it and for how many steps)."""

    @abstractmethod
    def commit(self, plan: BatchPlan, steps: int = 1) -> CommitResult:
        """Apply a step, or (``steps`` > 1, only within ``plan.run``) that many steps of
        the same batch: what each of them computes follows from the plan alone."""

    @abstractmethod
    def prefill_chunks(self, cached_tokens: int, new_tokens: int) -> list[int]:
        """The chunks in which this scheduler would prefill ``new_tokens`` after
        ``cached_tokens`` of a request running alone (the pause lifecycle prices a
        pipelined reload's overlap with them; nobody re-derives the chunking rule)."""

    # ------------------------------------------------------------ checks
    def check_invariants(self) -> None:
        """No request both running and waiting; statuses match the queues."""
        run_ids = {id(r) for r in self.running}
        if len(run_ids) != len(self.running):
            raise InvariantError("a request is twice in running")
        for r in self.waiting:
            if id(r) in run_ids:
                raise InvariantError(f"{r!r} is both running and waiting")
            if r.status != WAITING:
                raise InvariantError(f"{r!r} is in waiting with another status")
        for r in self.running:
            if r.status != RUNNING:
                raise InvariantError(f"{r!r} is in running with another status")
            if not 0 <= r.num_computed <= r.num_tokens:
                raise InvariantError(f"{r!r}: computed tokens out of range")


_REGISTRY: dict[str, type[Scheduler]] = {}


def register_scheduler(cls: type[Scheduler]) -> type[Scheduler]:
    """Class decorator: make ``cls`` reachable by ``cls.name``."""
    if not (isinstance(cls, type) and issubclass(cls, Scheduler)):
        raise TypeError(f"{cls!r} must subclass sim.sched.Scheduler")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"scheduler {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def scheduler_names() -> list[str]:
    return sorted(_REGISTRY)


def scheduler_class(kind: str) -> type[Scheduler]:
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise UnknownNameError("scheduler", str(kind), list(_REGISTRY)) from None


def make_scheduler(config: BaseModel, kv: KVManager) -> Scheduler:
    """A scheduler from its validated config and the KV manager it talks to."""
    return scheduler_class(config.kind)(config, kv)


def scheduler_configs() -> tuple[type[BaseModel], ...]:
    """Every registered scheduler's config model (for the scenario schema)."""
    return tuple(cls.Config for cls in _REGISTRY.values())

"""The scheduler contract and the registry of schedulers by name.

Responsibility: one place where a ``scheduler.kind`` becomes an object, and the complete
contract the engine relies on (``Scheduler``): every call the node and the pause
lifecycle make, with types. A new scheduler subclasses ``Scheduler`` and implements the
abstract methods; the optional abilities (runs of identical steps for the engine's fast
path: ``supports_runs`` and ``BatchPlan.run``) have defaults that switch them off, so the
engine asks, never probes. A scheduler
is pure: no SimPy, no clock; it mutates its queues and asks the KV manager to admit, grow
and preempt.

Two duties of every decision are the base class's, not the subclass's (``complete_plan``
runs after every subclass's ``schedule``, wrapped in by ``__init_subclass__``): relieving
memory pressure when nothing runs and the head of the queue was not admitted (held KV of
paused trajectories and idle waiting requests is dropped: ``relieve``; rejecting a request
stays the scheduler's decision), and putting the allocator's activity since the last
priced step (copies, cudaMalloc/cudaFree calls) on the next plan that runs a step, where
the cost model prices it. A scheduler that relieves itself (``vllm_v1`` does, before
admitting), or collects the activity onto a plan that runs a step, changes nothing: both
are idempotent.
Publication to a prefix cache is the base class's too: after every ``commit`` the KV
manager publishes what was computed (``KVManager.computed``), and under vLLM's rule a
scheduler that does not tell the KV manager as it schedules (``publishes_scheduled``)
has its plan's scheduled tokens published once the plan is made.
``tests/sched/test_protocol.py`` runs scenarios with minimal schedulers written only to
this contract, one of them under memory pressure on a copying allocator.

Invariant: a request is in at most one of ``running`` and ``waiting``; every registered
name maps to one class whose ``Config`` is a pydantic model with ``kind`` = that name;
``check_invariants`` raises ``InvariantError`` (the one invariant-failure mechanism).
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from typing import ClassVar

from pydantic import BaseModel

from sim.errors import InvariantError, UnknownNameError
from sim.memory.kv_manager import KVManager
from sim.plugins import check_kind_tag
from sim.sched.plan import BatchPlan, CommitResult, RunLimit
from sim.sched.request import NEVER_FITS, REJECTED, RUNNING, WAITING, Request
from sim.sched.speculative import SpeculativeConfig


class Scheduler(ABC):
    """What the engine needs from a scheduler (the node and the pause lifecycle call
    nothing else)."""

    name: ClassVar[str]
    Config: ClassVar[type[BaseModel]]
    #: this scheduler bounds how long each batch may repeat unchanged (``BatchPlan.run``),
    #: so the engine may advance it by several identical steps at once and then call
    #: ``commit(plan, steps=k)``; False = ``plan.run`` stays None, one ``commit(plan)`` a step
    supports_runs: ClassVar[bool] = False
    #: this scheduler runs speculative decoding when ``speculative`` is set (the scenario
    #: key of that name, ``sim.sched.speculative``); False = ``make_scheduler`` refuses it
    supports_speculative: ClassVar[bool] = False
    #: this scheduler tells the KV manager what it schedules as it does
    #: (``KVManager.scheduled`` after each request's tokens, before the next admission
    #: looks up: vLLM's order); False = ``complete_plan`` tells it for the whole plan
    publishes_scheduled: ClassVar[bool] = False
    #: inside a (wrapped) ``schedule``: a subclass calling ``super().schedule()`` completes
    #: its plan once, in the outermost call
    _in_schedule: bool = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("schedule")
        if own is not None and own not in _COMPLETING:
            cls.schedule = _completing(own)  # type: ignore[method-assign, assignment]
        commit = cls.__dict__.get("commit")
        if commit is not None and commit not in _PUBLISHING:
            cls.commit = _publishing(commit)  # type: ignore[method-assign]

    def __init__(self, config: BaseModel, kv: KVManager) -> None:
        self.config = config
        self.kv = kv
        self.running: list[Request] = []  # admission order
        self.waiting: deque[Request] = deque()  # head first
        #: speculative decoding (None: off); set by ``make_scheduler``
        self.speculative: SpeculativeConfig | None = None

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
        """The next step's batch, with the scheduling events that produced it. The base
        class completes it (``complete_plan``): a subclass need not relieve memory
        pressure nor collect the allocator's activity; a scheduler that ``supports_runs``
        says how long the completed batch may repeat unchanged in ``run_limit``."""

    def complete_plan(self, plan: BatchPlan) -> BatchPlan:
        """The duties of every decision, run after the subclass's ``schedule``: when the
        plan is empty, nothing runs and requests wait (the head was not admitted), relieve
        the pressure once by dropping held KV (``relieve`` without rejecting: the engine
        then decides again at the same time);
        then put the allocator's copies and cudaMalloc/cudaFree calls since the last
        priced step on the plan, so the step prices them (a decision that runs no step,
        e.g. a preemption, leaves them to the next one rather than dropping them)."""
        if not self.running and self.waiting and plan.empty and not plan.held_drops:
            if not plan.rejected and not plan.preempted:
                self.relieve(plan, self.waiting[0], reject=False)
        kv = self.kv
        if not self.publishes_scheduled and kv.holds_back and kv.publish_rule == "scheduled":
            for req, n in plan.scheduled:  # (idempotent: what is seen stays seen)
                kv.scheduled(req, req.num_computed + n)
        if plan.scheduled:  # a decision that runs no step prices nothing: its activity
            copied, calls = self.kv.take_step_activity()  # waits for the next step
            plan.copy_bytes += copied
            plan.alloc_calls += calls
        if self.supports_runs:  # asked last: the activity just added forbids a run
            plan.run = self.run_limit(plan)
        return plan

    def run_limit(self, plan: BatchPlan) -> RunLimit | None:
        """How long the completed ``plan`` may repeat unchanged (``plan.run``, a
        ``RunLimit``: the engine decides whether to run it and for how many steps), or
        None for one step; asked only when ``supports_runs``."""
        return None

    def relieve(self, plan: BatchPlan, head: Request, *, reject: bool = True) -> bool:
        """Nothing runs and ``head`` (the first waiting request) does not fit: drop the KV
        held by a paused trajectory (the lowest retain priority, then the most recent
        first: ``KVManager.drop_paused``), else another waiting request's held KV (newest
        first), else the head's own; with ``reject``, when the pool holds
        nothing at all, reject the head (its admission failed in an empty pool: it can
        never fit). Each is one event on ``plan``; True when something changed (admission
        is worth trying again). ``complete_plan`` never rejects: it cannot know whether
        the head's admission was tried, so a scheduler that admits nothing into an empty
        pool stays visibly stuck (``EngineStuckError``) instead of rejecting work."""
        kv = self.kv
        if kv.drop_paused() is not None:
            plan.held_drops += 1
            return True
        for req in reversed(self.waiting):
            if req is not head and kv.drop_idle(req.seq_id):
                plan.held_drops += 1
                return True
        if kv.drop_idle(head.seq_id):
            plan.held_drops += 1
            return True
        if reject and kv.num_sequences == 0:
            if not self.waiting or self.waiting[0] is not head:
                raise InvariantError(f"relieve: {head!r} is not the head of waiting")
            self.waiting.popleft()
            head.end(REJECTED, NEVER_FITS)
            plan.rejected.append(head)
            return True
        return False

    @abstractmethod
    def commit(self, plan: BatchPlan, steps: int = 1) -> CommitResult:
        """Apply a step, or (``steps`` > 1, only within ``plan.run``) that many steps of
        the same batch: what each of them computes follows from the plan alone (the
        scheduled requests' computed tokens advance; the engine stops a run whose steps
        make no progress for ``sim.engine.node.MAX_STALLED_STEPS`` steps). The base
        class then tells the KV manager (``KVManager.computed``), wrapped in by
        ``__init_subclass__``: a prefix cache shows the computed KV to look-ups."""

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


#: ``schedule`` methods that complete their plan (``_completing``)
_COMPLETING: set[Callable[[Scheduler], BatchPlan]] = set()


def _completing(schedule: Callable[[Scheduler], BatchPlan]) -> Callable[[Scheduler], BatchPlan]:
    """A subclass's ``schedule`` with the base class's duties run after it
    (``Scheduler.complete_plan``), once per decision however deep ``super()`` calls go.
    A plain function (as ``_publishing``): binding it to a scheduler is Python's own
    method binding, with no descriptor code run at every decision."""

    @functools.wraps(schedule)
    def completing(sched: Scheduler) -> BatchPlan:
        if sched._in_schedule:
            return schedule(sched)
        sched._in_schedule = True
        try:
            plan = schedule(sched)
        finally:
            sched._in_schedule = False
        return sched.complete_plan(plan)

    _COMPLETING.add(completing)
    return completing


#: ``commit`` methods that publish what they computed (``_publishing``)
_PUBLISHING: set[Callable[..., CommitResult]] = set()


def _publishing(commit: Callable[..., CommitResult]) -> Callable[..., CommitResult]:
    """A subclass's ``commit`` followed by ``KVManager.computed``: the KV of the tokens
    the step computed is seen by look-ups from now on (the "computed" rule, SGLang's
    ``cache_unfinished_req``), before the engine releases or holds a finished request's
    KV. Nested ``super().commit`` calls publish more than once: it is idempotent."""

    @functools.wraps(commit)
    def publishing(self: Scheduler, plan: BatchPlan, steps: int = 1) -> CommitResult:
        out = commit(self, plan, steps)
        self.kv.computed()
        return out

    _PUBLISHING.add(publishing)
    return publishing


_REGISTRY: dict[str, type[Scheduler]] = {}


def register_scheduler(cls: type[Scheduler]) -> type[Scheduler]:
    """Class decorator: make ``cls`` reachable by ``cls.name``."""
    if not (isinstance(cls, type) and issubclass(cls, Scheduler)):
        raise TypeError(f"{cls!r} must subclass sim.sched.Scheduler")
    check_kind_tag("scheduler", cls.name, cls.Config)
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


def make_scheduler(
    config: BaseModel, kv: KVManager, speculative: SpeculativeConfig | None = None
) -> Scheduler:
    """A scheduler from its validated config and the KV manager it talks to, with
    speculative decoding when ``speculative`` is given (a kind that does not support it
    is refused)."""
    # every registered Config declares its ``kind`` (the registry's invariant)
    kind: str = config.kind  # type: ignore[attr-defined]
    sched = scheduler_class(kind)(config, kv)
    if speculative is not None:
        if not sched.supports_speculative:
            raise ValueError(f"scheduler {kind!r} does not run speculative decoding")
        sched.speculative = speculative
    return sched


def scheduler_configs() -> tuple[type[BaseModel], ...]:
    """Every registered scheduler's config model (for the scenario schema)."""
    return tuple(cls.Config for cls in _REGISTRY.values())

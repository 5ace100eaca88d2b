"""Scheduling: what runs in each engine step (token budget, chunked prefill, admission,
preemption), as pure objects with no SimPy and no clock.

Invariant: this layer imports only lower layers (``sim.memory`` through the KV manager it
is handed, ``sim.prefix`` spans, ``sim.cost`` step work); schedulers are registered by name.
"""

from sim.sched import vllm_v1  # noqa: F401  (registers)
from sim.sched.base import (
    Scheduler,
    make_scheduler,
    register_scheduler,
    scheduler_class,
    scheduler_configs,
    scheduler_names,
)
from sim.sched.plan import BatchPlan, CommitResult, RunLimit
from sim.sched.request import (
    CANCELLED,
    FINISHED,
    REJECTED,
    RUNNING,
    STATUS_NAMES,
    WAITING,
    Request,
)
from sim.sched.vllm_v1 import VllmV1Config, VllmV1Scheduler

__all__ = [
    "CANCELLED",
    "FINISHED",
    "REJECTED",
    "RUNNING",
    "STATUS_NAMES",
    "WAITING",
    "BatchPlan",
    "CommitResult",
    "Request",
    "RunLimit",
    "Scheduler",
    "VllmV1Config",
    "VllmV1Scheduler",
    "make_scheduler",
    "register_scheduler",
    "scheduler_class",
    "scheduler_configs",
    "scheduler_names",
]

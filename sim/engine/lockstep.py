"""Lockstep: several nodes (the data-parallel ranks of one MoE engine) step together.

Responsibility: the one place where a lockstep step starts and ends. A rank that has a
batch at a step boundary ``join``s with its work; once every rank has acted at that
instant (the group closes at a priority below every node's settling,
``CLOSE_PRIORITY``), the step is priced for all ranks at once
(``sim.cost.expert_parallel.LockstepPricer``: ranks without a batch run vLLM's dummy
batch) and every joined rank's step ends at the same time. While a step is in progress
the group is busy (``busy_until``): a rank that was idle and gets work meanwhile waits
for that step's end before it plans (it was running the dummy batch), as vLLM's ranks
do.

Invariants: every step of the group starts and ends at the same instants on every rank
that runs it; no rank starts a step while the group is busy; the same posts give the
same steps (ranks in index order, no clock but SimPy's).
"""

from __future__ import annotations

import math

import simpy

from sim.cost import StepWork
from sim.cost.expert_parallel import LockstepCost, LockstepPricer

#: the group closes after every node has settled at that instant (node settle: 2)
CLOSE_PRIORITY = 3


class Lockstep:
    """A group of ``pricer.R`` ranks that step together (see the module docstring)."""

    def __init__(self, env: simpy.Environment, pricer: LockstepPricer) -> None:
        self.env, self.pricer = env, pricer
        self.n_ranks = pricer.R
        self.busy_until = -math.inf
        #: succeeds at the end of the step in progress (what an idle rank waits for: a delay
        #: recomputed from ``busy_until`` could land one rounding step after it)
        self.step_end: simpy.Event | None = None
        self._works: dict[int, StepWork] = {}
        self._done: simpy.Event | None = None
        # what the summary reports (sim.run.cluster)
        self.steps = 0  # lockstep steps run
        self.dummy_rank_steps = 0  # rank-steps run as a dummy batch
        self.busy_s = 0.0  # seconds the group was stepping
        self.moe_s = 0.0  # of which expert layers
        self.comm_s = 0.0  # of which dispatch, combine and sync
        self.wait_s = 0.0  # rank-seconds a joined rank waited for a slower one
        self.padded_tokens = 0  # tokens the padding added (dummies included)

    def join(self, rank: int, work: StepWork) -> simpy.Event:
        """Rank ``rank`` runs ``work`` in the step starting now; the event's value is the
        ``LockstepCost`` at the step's end."""
        if rank in self._works:
            raise RuntimeError(f"rank {rank} joined the step at t={self.env.now} twice")
        if self._done is None:
            self._done = self.env.event()
            close = simpy.Event(self.env)
            close._ok, close._value = True, None
            close.callbacks.append(self._close)
            self.env.schedule(close, CLOSE_PRIORITY)
        self._works[rank] = work
        return self._done

    def _close(self, _event) -> None:
        works = [self._works.get(r) for r in range(self.n_ranks)]
        done, self._done, self._works = self._done, None, {}
        priced: LockstepCost = self.pricer.price(works)
        d = priced.total_s
        self.busy_until = self.env.now + d
        self.step_end = done
        self.steps += 1
        self.dummy_rank_steps += sum(priced.dummy)
        self.busy_s += d
        self.moe_s += priced.moe_s or 0.0
        self.comm_s += priced.comm_s
        top = max(priced.rank_gpu_s)
        self.wait_s += sum(top - g for g, w in zip(priced.rank_gpu_s, works, strict=True) if w)
        self.padded_tokens += priced.padding_tokens
        self.env.timeout(d).callbacks.append(lambda _ev: done.succeed(priced))


__all__ = ["CLOSE_PRIORITY", "Lockstep"]

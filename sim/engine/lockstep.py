"""Lockstep: several nodes (the data-parallel ranks of one MoE engine) step together.

Responsibility: the one place where a lockstep step starts and ends. A rank that has a
batch at a step boundary ``join``s with its work; once every rank has acted at that
instant (the group closes at a priority below every node's settling,
``CLOSE_PRIORITY``), the step is priced for all ranks at once
(``sim.cost.expert_parallel.LockstepPricer``: ranks without a batch run vLLM's dummy
batch) and every joined rank's step ends at the same time. While a step is in progress
the group is busy (``busy_until``, ``step_end``): a rank that was idle and gets work
meanwhile waits for that step's end before it plans (it was running the dummy batch),
as vLLM's ranks do.

Group runs (the fast path, ``runs=True``, i.e. not ``engine.exact``): when every joined
rank offers a run of pure-decode steps (``RunOffer``: the same decodes until one
finishes, as far as its memory allows), the group waits for the run at once: its length
is the shortest offer, its step durations ``LockstepPricer.run_and_wait``. A post to any
rank of the group during the run (``cut``) ends the run at the end of the step in
progress, for every rank, exactly where stepping (``runs=False``) would have let the
post act, and a post that reaches a rank after it joined, before the group closes (a
rank's commit at that instant can post to another), keeps that step a single one; both
give the same results, bit for bit (the run's timer rings at its end time itself; tested).

Invariants: every step of the group starts and ends at the same instants on every rank
that runs it; no rank starts a step while the group is busy; the same posts give the
same steps (ranks in index order, no clock but SimPy's).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from heapq import heappush
from itertools import accumulate

import numpy as np
import simpy
from simpy.events import NORMAL

from sim.cost import StepWork
from sim.cost.expert_parallel import LockstepCost, LockstepPricer
from sim.memory.deferred import DecodeRun

#: the group closes after every node has settled at that instant (node settle: 2)
CLOSE_PRIORITY = 3


@dataclass(frozen=True)
class RunOffer:
    """What a rank whose batch can repeat offers the group: its decodes (the run's first
    step, a ``StepWork`` of decodes alone),
    the most steps before one of them finishes, and how memory limits a run
    (``plan_memory(extra_steps)`` -> the rank's ``DecodeRun``: steps after the first it
    can take, allocated bytes during them)."""

    decode: StepWork
    max_steps: int
    plan_memory: Callable[[int], DecodeRun]


@dataclass(frozen=True)
class GroupStep:
    """What every joined rank gets at the end: the first step's prices, the end of each
    step it ran, and (a run) the memory each rank's steps 2.. held."""

    priced: LockstepCost
    ends: list[float]
    durations: list[float] | None = None  # a run's step durations (None: one step)
    allocated: dict[int, list[float]] | None = None  # per rank, allocated bytes, steps 2..


@dataclass
class _Run:
    ends: list[float]
    durations: list[float]
    wait: np.ndarray
    deadline: int  # index in ends of the step the run ends after
    done: simpy.Event
    priced: LockstepCost
    allocated: dict[int, list[float]]
    n_dummy: int


class Lockstep:
    """A group of ``pricer.R`` ranks that step together (see the module docstring)."""

    def __init__(self, env: simpy.Environment, pricer: LockstepPricer, *, runs: bool = True,
                 horizon_s: float | None = None) -> None:  # fmt: skip
        self.env, self.pricer = env, pricer
        self.n_ranks = pricer.R
        self.runs, self.horizon_s = runs, horizon_s
        self.busy_until = -math.inf
        #: succeeds at the end of the step (or run) in progress: what an idle rank waits
        #: for (a delay recomputed from ``busy_until`` could land a rounding step after it)
        self.step_end: simpy.Event | None = None
        self._works: dict[int, StepWork] = {}
        self._offers: dict[int, RunOffer | None] = {}
        self._done: simpy.Event | None = None
        self._run: _Run | None = None  # the group run in progress
        # a post reached a rank after it joined the step now closing: that step runs alone
        # (the post acts at its end, as stepping would let it)
        self._one_step = False
        # what the summary reports (sim.run.cluster)
        self.steps = 0  # lockstep steps run
        self.dummy_rank_steps = 0  # rank-steps run as a dummy batch
        self.busy_s = 0.0  # seconds the group was stepping
        self.moe_s = 0.0  # of which expert layers
        self.comm_s = 0.0  # of which dispatch, combine and sync
        self.wait_s = 0.0  # rank-seconds a joined rank waited for a slower one
        self.padded_tokens = 0  # tokens the padding added (dummies included)

    def join(self, rank: int, work: StepWork, offer: RunOffer | None = None) -> simpy.Event:
        """Rank ``rank`` runs ``work`` in the step starting now (``offer``: it could
        repeat it); the event's value is the ``GroupStep`` at the end."""
        if rank in self._works:
            raise RuntimeError(f"rank {rank} joined the step at t={self.env.now} twice")
        if self._done is None:
            self._done = self.env.event()
            close = simpy.Event(self.env)
            close._ok, close._value = True, None
            close.callbacks.append(self._close)
            self.env.schedule(close, CLOSE_PRIORITY)
        self._works[rank] = work
        self._offers[rank] = offer
        return self._done

    def cut(self, now: float) -> None:
        """A post reached a rank of the group: a run in progress ends after the step in
        progress (at once when ``now`` is a step's end)."""
        run = self._run
        if run is None:
            if self._done is not None:  # ranks have joined the step about to close
                self._one_step = True
            return
        i = bisect_left(run.ends, now)
        if i < run.deadline:
            run.deadline = i
            self.busy_until = run.ends[i]
            self._arm(run, i)

    # ------------------------------------------------------------------ internals
    def _close(self, _event) -> None:
        works = [self._works.get(r) for r in range(self.n_ranks)]
        offers = [self._offers.get(r) for r in range(self.n_ranks)]
        done, self._done, self._works, self._offers = self._done, None, {}, {}
        one_step, self._one_step = self._one_step, False
        priced: LockstepCost = self.pricer.price(works)
        run = self._plan_run(works, offers, priced, done) if self.runs and not one_step else None
        if run is not None:
            self._run, self.busy_until, self.step_end = run, run.ends[run.deadline], done
            self._arm(run, run.deadline)
            return
        d = priced.total_s
        self.busy_until = self.env.now + d
        self.step_end = done
        self._count(priced, d, priced.wait_s)
        end = self.busy_until

        def finish(_ev) -> None:
            self.busy_until = self.env.now
            done.succeed(GroupStep(priced, [end]))

        self.env.timeout(d).callbacks.append(finish)

    def _plan_run(self, works, offers, priced: LockstepCost, done) -> _Run | None:
        """A run when every rank with a batch offers one: as long as the shortest offer,
        as far as every rank's memory allows, and steps starting before the horizon."""
        joined = [r for r, w in enumerate(works) if w is not None]
        if any(offers[r] is None for r in joined):
            return None
        k = min(offers[r].max_steps for r in joined)
        if k <= 1:
            return None
        mem = {}
        for r in joined:
            m = offers[r].plan_memory(k - 1)
            mem[r] = m
            k = min(k, 1 + m.steps)
            if k <= 1:
                return None
        decode = [offers[r].decode if works[r] is not None else None for r in range(self.n_ranks)]
        durations, wait = self.pricer.run_and_wait(decode, k)
        durations = durations.tolist()
        durations[0] = priced.total_s  # the first step as priced alone (the same number)
        now = self.env.now
        ends = list(accumulate(durations, initial=now))
        del ends[0]
        if self.horizon_s is not None:  # steps must start before the horizon
            k = min(k, bisect_left(ends, self.horizon_s) + 1)
            if k <= 1:
                return None
        allocated = {r: m.allocated_bytes[: k - 1] for r, m in mem.items()}
        n_dummy = self.n_ranks - len(joined)
        return _Run(ends[:k], durations[:k], wait[:k], k - 1, done, priced, allocated, n_dummy)

    def _arm(self, run: _Run, i: int) -> None:
        """Ring at ``ends[i]`` itself: a delay added to now may miss it by a rounding step,
        while stepping reaches each end as the same running sum (bit-equal results)."""
        timer = simpy.Event(self.env)
        timer._ok, timer._value = True, None
        timer.callbacks.append(lambda _ev: self._ring(run, i))
        env = self.env
        heappush(env._queue, (max(run.ends[i], env.now), NORMAL, next(env._eid), timer))

    def _ring(self, run: _Run, i: int) -> None:
        if self._run is not run or run.deadline != i:
            return
        k = i + 1
        self._run = None
        self.busy_until = self.env.now
        p = run.priced
        for j in range(k):  # the same additions, in the same order, as stepping
            self._count(p, run.durations[j], p.wait_s if j == 0 else float(run.wait[j]))
        allocated = {r: a[: k - 1] for r, a in run.allocated.items()}
        run.done.succeed(GroupStep(p, run.ends[:k], run.durations[:k], allocated))

    def _count(self, priced: LockstepCost, busy_s: float, wait_s: float) -> None:
        """One group step's figures."""
        self.steps += 1
        self.dummy_rank_steps += sum(priced.dummy)
        self.busy_s += busy_s
        self.moe_s += priced.moe_s or 0.0
        self.comm_s += priced.comm_s
        self.wait_s += wait_s
        self.padded_tokens += priced.padding_tokens


__all__ = ["CLOSE_PRIORITY", "GroupStep", "Lockstep", "RunOffer"]

"""The node: one SimPy process that repeats schedule -> price -> timeout -> commit.

Responsibility: the only place where engine steps take time. Each loop iteration lets
same-time processes act (``settle``: at a priority below every other event of that time,
so the nodes of a cluster, on one environment, settle together), applies what the
workload posted (submissions, forks, releases, cancellations, in order), asks the scheduler for a batch, prices it with
the cost model, waits ``step.total_s``, commits it and reports what happened to the
recorder and to the waiting trajectories.

Fast path (``exact=False``): the scheduler's plan says how long its batch may repeat
(``BatchPlan.run``: the same decodes, plus at most one chunked prefill that then decodes
with them); the node alone decides to step or to run. When memory allows the run (no
block exhaustion, miss or copy), it is priced
at once (``CostModel.price_run`` and ``price``, ``sim.cost.pricer``) and waited for in one SimPy
event. A workload post during the run wakes the engine at the end of the step in progress,
so the run is cut exactly where step-by-step execution (``exact=True``) would have seen
the post; both modes give the same results (tested to 1e-9). Under async scheduling a post
received at the end of step i is first planned into step i + 2, so the plan made at that
boundary would be the run's own step i + 1: the run goes on through it and is cut after it
(``runs_past_receipt``; off in a cluster, whose router reads the nodes between steps), with
the posts stamped and applied as if it had been cut at step i (bit for bit the same results,
one decision fewer).

Lockstep (``lockstep``, ``sim.engine.lockstep``): the node is one data-parallel rank of
a MoE engine; each step is priced with the other ranks' and ends with theirs; runs are
the group's (every rank with a batch offers a run of pure-decode steps, ``RunOffer``, and
a post to any rank cuts it), and while the group steps an idle rank waits for the step's
end.

Async scheduling (vLLM's default, ``Scheduler.async_scheduling``): the plan of a step is
made while the step before it runs, so what is posted while step N runs is received at
its end and applied at the next boundary, into step N + 2; with no step in flight it
applies at once (``_take_posts``).

Invariants: one SimPy event per step or run (never per token or per sequence); workload
operations take effect only at step boundaries, in the order they were posted; the batch
is never empty while work is runnable (otherwise ``EngineStuckError`` names the stuck
requests), and no more than ``MAX_STALLED_STEPS`` steps in a row make no progress (a
plug-in scheduler whose ``commit`` advances nothing: ``EngineStuckError`` names it); a
plug-in scheduler's ``plan.run`` is checked and capped where it is taken
(``_run_steps``); with ``check_invariants`` the KV manager, the scheduler and token-count
monotonicity are checked after every decision; the simulated clock never passes
``max_sim_time_s`` (``SimTimeLimitError`` names the unfinished trajectories), busy or
idle (an idle node is woken just past it), unless the horizon comes first, in which case
the run ends at the horizon; past it with nothing left that could post and the workload
unfinished, ``WorkloadStoppedError``.
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_left
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import simpy

from sim.cost import CostModel, StepCost, StepWork
from sim.cost.pricer import prefill_share_s
from sim.cost.speculative import DraftPricer
from sim.engine.lockstep import RunOffer
from sim.engine.pauses import PauseLifecycle
from sim.errors import InvariantError, KvsimError, shown
from sim.memory.kv_manager import KVManager
from sim.memory.metrics import KVSlots, MemoryMetrics
from sim.sched import BatchPlan, Request, RunLimit, Scheduler
from sim.sched.plan import run_steps_bound

if TYPE_CHECKING:
    from sim.engine.lockstep import Lockstep

#: zero-time reschedules (preemptions, drops, rejections without a step) before giving up
MAX_ZERO_TIME_DECISIONS = 100_000
#: consecutive steps without progress before giving up: progress is what moves the run
#: toward its end (a token computed or sampled, a finish, rejection, drop or
#: cancellation); an admission or a preemption alone is not (a scheduler that preempts a
#: request and readmits it every step, its ``commit`` advancing nothing, is a livelock).
#: Every step of a correct scheduler computes a token (``BatchPlan``: each scheduled
#: request has ``n_new >= 1``), so a real run has none
MAX_STALLED_STEPS = 10_000


@dataclass(slots=True)
class _Run:
    """A planned run of steps (see ``Node._plan_run``; never changed once made)."""

    durations: list[float]  # every step's duration
    allocated: list[float]  # allocated bytes during steps 2..k
    chunks: tuple[int, ...] | None  # the prefill's chunks, one per step, while it lasts
    late: tuple | None  # (that prefill, its first decode step) when it decodes in the run
    #: every step's attention seconds (each step's own: ``CostModel.price_run_attention``)
    attention: np.ndarray
    #: the work of each step in which the prefill computes a chunk (None: no prefill); the
    #: seconds charged to prefill are priced only for the steps taken (runs are mostly cut)
    prefill_works: list[StepWork] | None = None


class StepRecorder(Protocol):
    """What the node reports to (``sim.metrics.Recorder``; declared here so the engine
    imports nothing above it). Every call the node makes, with the recorder's signature:
    mypy checks ``Recorder`` against it where ``sim.run`` hands one to a ``Node``."""

    decisions: int  # engine decisions so far (the node's progress callback reads it)

    def step(
        self,
        start_s: float,
        ends: list[float] | np.ndarray,
        plan: BatchPlan,
        cost: StepCost,
        n_running: int,
        n_waiting: int,
        prefill_s: float = 0.0,
        attention_max_s: float | None = None,
    ) -> int: ...
    def run_prefill(self, tokens: int) -> None: ...
    def events(self, plan: BatchPlan, now_s: float, n_running: int, n_waiting: int) -> None: ...
    def rejected_at_submit(
        self, now_s: float, count: int, n_running: int, n_waiting: int
    ) -> None: ...
    def emit(self, requests: Iterable[Request], s0: int, k: int) -> None: ...
    def memory(
        self,
        t: float,
        m: MemoryMetrics,
        paused_bytes: float,
        n_paused: int,
        n_running: int,
        n_waiting: int,
        extra_bytes: float = 0.0,
        next_request_bytes: float | None = None,
        slots: KVSlots | None = None,
    ) -> tuple[float, float]: ...
    def memory_run(
        self, starts: Sequence[float], useful: Sequence[float], allocated: Sequence[float]
    ) -> None: ...
    def request_ended(self, req: Request) -> None: ...
    def speculative(self, accepted: int, drafts: int, wasted: int, verifies: int) -> None: ...


class EngineStuckError(KvsimError):
    """Work is runnable but no step can be scheduled (a livelock, i.e. a simulator bug)."""


class SimTimeLimitError(KvsimError):
    """The simulated clock passed ``engine.max_sim_time_s`` (e.g. a tool pause of years)."""


class WorkloadStoppedError(KvsimError):
    """Nothing is left that could post, yet the workload never said it finished (a
    driver that ended fewer trajectories than its kind's ``count``); ``sim.run`` names
    the workload kind and both numbers."""


class _Alarm(simpy.Timeout):
    """A node's own wake-up (at the horizon, past ``max_sim_time_s``): an environment
    holding nothing else has no event left that could post."""


class Node:
    """One engine instance (a TP x PP replica) serving requests step by step."""

    def __init__(
        self,
        env: simpy.Environment,
        scheduler: Scheduler,
        kv: KVManager,
        cost: CostModel,
        recorder: StepRecorder,
        pauses: PauseLifecycle,
        *,
        exact: bool = False,
        check_invariants: bool = False,
        horizon_s: float | None = None,
        max_sim_time_s: float | None = None,
        progress: Callable[[float], None] | None = None,
        progress_every: int = 2048,
        draft: DraftPricer | None = None,
    ) -> None:
        self.env, self.sched, self.kv, self.cost, self.rec = env, scheduler, kv, cost, recorder
        self.exact = exact
        self.check = check_invariants
        self.horizon_s = horizon_s
        self.max_sim_time_s = max_sim_time_s  # None: no guard
        self.progress, self.progress_every = progress, progress_every
        self.inbox: list[tuple] = []
        #: async scheduling (``Scheduler.async_scheduling``, vLLM's default): the plan of a
        #: step is made while the step before it runs, so posts received at a boundary
        #: (``_held``) reach the plan made at the next one (``_take_posts``)
        self.lag = scheduler.async_scheduling
        #: with ``lag``, a run goes on through the step after the one in which the first
        #: post came (``_post``): those posts are received at that step's end, so the plan
        #: made there would be the run's next step anyway. A cluster turns it off: the
        #: front's router reads its nodes while they run, and a run commits at its end
        self.runs_past_receipt = True
        self._recv_s: float | None = None  # when the posts of a run going on were received
        self._recv_split = -1  # index in ``inbox`` of the first post made after ``_recv_s``
        self._held: list[tuple] = []
        self._stepped = False  # a step ended at this boundary (its posts are received now)
        self._step_start = 0.0  # when the latest step (the last of a run) began
        self._plan_s = 0.0  # when the plan made at this boundary was made (vLLM's view)
        self._wake = None  # event the engine sleeps on while idle or in a run
        self._ends: list[float] | None = None  # end times of the run in progress
        self._deadline = -1  # index in _ends of the step the engine will wake after
        self._workload_done = False
        self._stalled = 0  # consecutive steps without progress (``MAX_STALLED_STEPS``)
        #: the scheduler is one of kvsim's own (``sim.sched``): its ``plan.run`` is trusted;
        #: a plug-in's is checked and capped where the engine takes it (``_run_steps``)
        self._own_scheduler = type(scheduler).__module__.startswith("sim.sched.")
        self._alarm: simpy.Event | None = None  # the idle wake past max_sim_time_s
        self._idle_s = 0.0  # when the node last went idle (named if the workload stopped)
        self._stopped = False  # at the limit, nothing was left that could post (``_wake_at_limit``)
        self._seen: dict[int, tuple[int, int]] = {}  # id(request) -> (output, computed)
        self.end_s = 0.0
        self.last_step_s = 0.0  # duration of the latest step
        #: the pause lifecycle (``sim.engine.pauses``): owns every pause, gates submissions of
        #: trajectories whose KV is away, and acts at step boundaries
        self.pauses = pauses
        #: the data-parallel group this node steps with (``sim.engine.lockstep``) and its
        #: rank there; None: the node steps alone
        self.lockstep: Lockstep | None = None
        self.rank = 0
        #: speculative decoding's drafter (``sim.cost.speculative``): its passes after a
        #: verify step are added to that step's time; None: no drafter
        self.draft = draft
        self.process = env.process(self._loop())

    # --------------------------------------------------------------- workload API
    def submit(self, req: Request) -> None:
        """Queue a request (its ``on_done`` is called when it finishes or is refused)."""
        self._post(("submit", req))

    def fork(self, parent: Hashable, child: Hashable) -> None:
        """Give sequence ``child`` the KV of ``parent`` (copy-on-write or deep copy)."""
        self._post(("fork", parent, child))

    def release(self, seq: Hashable) -> None:
        """Free a sequence nobody will extend again."""
        self._post(("release", seq))

    def cancel(self, req: Request | None, seq: Hashable) -> None:
        """Abort ``req`` (if queued or running) and free ``seq`` (a pruned branch)."""
        self._post(("cancel", req, seq))

    def refused(self, req: Request) -> None:
        """A cluster's router refused ``req``, a turn of a sequence this node holds (it
        never comes here): the sequence's pause ends ``refused`` and its KV is freed, as
        when this node refuses a turn itself."""
        self._post(("refused", req))

    def call_at_boundary(self, fn: Callable[[], Any]) -> None:
        """Call ``fn()`` at the next step boundary (a copy completed, a TTL expired)."""
        self._post(("call", fn))

    def workload_finished(self) -> None:
        """No more posts will come: the engine stops once its queues are empty."""
        self._workload_done = True
        self._post(None)

    def _post(self, op) -> None:
        if op is not None:
            self.inbox.append(op)
            if self.lockstep is not None:  # a group run ends after the step in progress
                self.lockstep.cut(self.env.now)
            recv = self._recv_s
            if recv is not None:  # a run goes on past the receipt of earlier posts
                if self._recv_split < 0 and self.env.now > recv:
                    self._recv_split = len(self.inbox) - 1  # received at the run's end
                return
        wake = self._wake
        if wake is None or wake.triggered:
            return
        if self._ends is None:  # idle
            wake.succeed()
            return
        if op is None:
            return  # the end of the workload changes nothing for the run in progress
        i = bisect_left(self._ends, self.env.now)
        if i >= self._deadline:
            return
        if self.lag and self.runs_past_receipt and self.lockstep is None:
            # received at the end of step i and first planned into step i + 2: step i + 1
            # is the one the run has next (the same batch), so the run goes on through it,
            # unless it would end past max_sim_time_s (the loop stops there, before the
            # posts would be taken)
            limit = self.max_sim_time_s
            if limit is None or self._ends[i + 1] <= limit:
                self._recv_s = self._ends[i]
                i += 1
                if i >= self._deadline:
                    return
        # wake after the step in progress (or the one after it) instead of the run's end
        self._deadline = i
        self._arm(wake, i, self.env.now)

    def _wake_at_horizon(self, _event) -> None:
        wake = self._wake
        if wake is not None and not wake.triggered and self._ends is None:
            wake.succeed()

    def _arm_limit(self, now: float) -> None:
        """Wake the node, if idle then, at the first time past ``max_sim_time_s`` (the
        loop stops there as it does after a step past it): a workload that waits without
        posting (a driver that polls) cannot keep an idle node's run going for ever. One
        event a run, armed the first time the node goes idle (not with a horizon before
        the limit: the horizon ends the run first)."""
        limit = self.max_sim_time_s
        if limit is None or not math.isfinite(limit):
            return
        if self.horizon_s is not None and self.horizon_s <= limit:
            return
        delay = math.nextafter(limit, math.inf) - now
        while now + delay <= limit:  # simpy adds the delay to now: land strictly past it
            delay = math.nextafter(delay, math.inf)
        self._alarm = _Alarm(self.env, delay)
        self._alarm.callbacks.append(self._wake_at_limit)

    @property
    def workload_stopped(self) -> bool:
        """At ``max_sim_time_s`` this node found nothing left that could post, the
        workload unfinished (``WorkloadStoppedError``; in a cluster the node that looked
        first: another stopping at the same time may raise ``SimTimeLimitError``)."""
        return self._stopped

    def _wake_at_limit(self, event) -> None:
        """Past ``max_sim_time_s``: wake the node if idle; ``_stopped`` when nothing is left
        in the environment but the nodes' own wake-ups (``_Alarm``): nothing can post
        again, yet the workload never said it finished (its driver ended fewer
        trajectories than it declared). Looked at once a run (O(events left))."""
        if self._ends is None and not self._workload_done:
            self._stopped = all(isinstance(item[3], _Alarm) for item in self.env._queue)
        self._wake_at_horizon(event)

    def _arm(self, wake, i: int, now: float) -> None:
        """Ring ``wake`` at the end of step ``i`` of the run (``now``: ``env.now``)."""
        timer = self.env.timeout(max(0.0, float(self._ends[i]) - now))
        timer.callbacks.append(lambda _ev: self._ring(wake, i))

    def _ring(self, wake, i: int) -> None:
        if not wake.triggered and self._wake is wake and self._deadline == i:
            wake.succeed()

    # ------------------------------------------------------------------- loop
    def _loop(self):
        env, zero_time = self.env, 0
        while True:
            now = env.now  # (settling below is zero-time: ``now`` holds to the decision)
            # checked before settling: at t = inf (a pause of .inf) settling never ends
            if self.max_sim_time_s is not None and now > self.max_sim_time_s:
                if self.horizon_s is None or self.horizon_s > self.max_sim_time_s:
                    if self._stopped:
                        raise WorkloadStoppedError(
                            f"the node is idle since t={self._idle_s:.6g} s and nothing is "
                            "left that could post, yet the workload never said it finished "
                            f"(its trajectories did not all end); {self._stuck_list()}"
                        )
                    self._too_long()
                self.end_s = self.horizon_s  # woken idle, past the horizon: it ends there
                return
            group = self.lockstep
            if group is not None and group.busy_until > now:
                # the group is stepping: this rank runs its dummy batch until the step ends
                yield group.step_end
                continue
            while _busy_now(env, now):  # let same-time processes post first
                yield _settle(env)
            self._take_posts(now)
            if self.horizon_s is not None and now >= self.horizon_s:
                break
            self.kv.set_time(now)
            self.pauses.at_boundary()
            if self.pauses.boundary_drops:  # a reload dropped held KV: a row of its own
                self._boundary_drops(now)
            plan = self.sched.schedule()
            self._scheduling_events(plan, now)
            if self._held and not plan.scheduled:  # (``plan.empty``)
                continue  # no step to plan ahead of: posts received now apply at once
            if not plan.scheduled:  # (``plan.empty``)
                if plan.preempted or plan.rejected or plan.held_drops:
                    zero_time += 1
                    if zero_time > MAX_ZERO_TIME_DECISIONS:
                        self._stuck("no step in", zero_time, "zero-time decisions")
                    continue
                if self.sched.has_work and not self.pauses.copies_in:  # a reload ends in a submit
                    self._stuck("empty batch with runnable work")
                self._record_memory(now)
                if self._workload_done and not self.inbox and not self.pauses.streaming:
                    if self.check:  # the workload's end: every pause has ended
                        self.pauses.check_closed()
                    break  # (a pipelined copy-in still running ends in a post)
                if self.inbox:  # posted at this boundary (a reload fell back to recompute)
                    continue
                self._wake, self._ends = env.event(), None
                self._idle_s = now
                if self.horizon_s is not None:  # idle: wake at the horizon at the latest
                    _Alarm(env, self.horizon_s - now).callbacks.append(self._wake_at_horizon)
                if self._alarm is None:  # and just past max_sim_time_s (armed once a run)
                    self._arm_limit(now)
                yield self._wake
                self._wake = None
                continue
            zero_time = 0
            yield from self._run(plan, now)
            self._stepped, self._step_start = True, env.now - self.last_step_s
        self.end_s = env.now

    def _run(self, plan: BatchPlan, now: float):
        """Price, wait for and commit one step or one run of steps of the same batch."""
        m = self._record_memory(now)
        work = plan.work()
        if self.lockstep is not None:  # priced and ended with the group's ranks
            step = yield self.lockstep.join(self.rank, work, self._run_offer(plan, work, m))
            run, rank_cost = None, step.priced.costs[self.rank]
            att = _attention_s(rank_cost)
            if step.durations is not None and len(step.ends) > 1:
                # the rank's own decodes, a token longer a step (its breakdown's terms)
                attention = self.cost.price_run_attention(work, len(step.ends))[1]
                run = _Run(step.durations, step.allocated[self.rank], None, None, attention)
                att = float(attention.sum())
            # the group's step, split by this rank's own batch (a run is decodes alone)
            pre = (step.ends[0] - now) * prefill_share_s(self.cost.price_s, work, plan.verify_chunks)
            self._commit(plan, now, step.ends, rank_cost, m, run, pre, att)
            return
        cost = self.cost.price(work)
        if self.draft is not None and plan.verify_seqs:
            cost = self.draft.with_draft(cost, plan.verify_seqs, plan.verify_history_tokens)
        run = self._plan_run(plan, work, m, cost)
        if run is None:
            yield self.env.timeout(cost.total_s)
            pre = cost.total_s * prefill_share_s(self.cost.price_s, work, plan.verify_chunks)
            self._commit(plan, now, [now + cost.total_s], cost, m, None, pre, _attention_s(cost))
            return
        # the same sequential sums as numpy's cumsum, in Python: runs are planned long but
        # mostly cut after a few steps, and small numpy calls cost more than they save
        ends = list(accumulate(run.durations, initial=now))
        del ends[0]
        k = len(ends)
        if self.horizon_s is not None:  # steps must start before the horizon
            k = min(k, bisect_left(ends, self.horizon_s) + 1)
        self._wake, self._ends, self._deadline = self.env.event(), ends[:k], k - 1
        self._arm(self._wake, k - 1, now)  # (no time passed since the decision)
        yield self._wake
        k = self._deadline + 1
        self._wake, self._ends = None, None
        att = float(run.attention[:k].sum())
        self._commit(plan, now, ends[:k], cost, m, run, self._run_prefill_s(run, k), att)

    def _plan_run(self, plan: BatchPlan, work: StepWork, m: tuple[float, float], cost: StepCost) -> _Run | None:
        """A run of several steps of this batch, or None for a single step: as long as
        the scheduler's ``plan.run`` allows (the same decodes up to the first completion,
        plus at most one chunked prefill that, once its prompt is done, may decode with
        the others), and as far as memory allows without a miss or a copy."""
        lim = plan.run
        if self.exact or self._held or lim is None:  # held posts change the next batch
            return None
        k = lim.max_steps if self._own_scheduler else self._run_steps(plan, lim)
        if k <= 1:
            return None
        chunks = lim.chunks
        late = (plan.scheduled[-1][0], len(chunks)) if lim.late else None
        if plan.decodes or late:
            prefill = plan.scheduled[-1][0] if chunks is not None else None
            mem = self.kv.plan_decode_run(plan.decodes, k - 1, m[1], late, prefill, plan.apart)
            k = 1 + mem.steps
            if k == 1:
                return None
            allocated = mem.allocated_bytes
        else:
            allocated = [float(m[1])] * (k - 1)
        if chunks is None:  # decodes alone (only they repeat)
            durations, attention = self.cost.price_run_attention(work, k)
            return _Run(durations.tolist(), allocated, None, late, attention)
        durations, works, attention = self._prefill_run_durations(plan, work, cost, chunks, late is not None, k)
        return _Run(durations, allocated, chunks, late, attention, works)

    def _run_prefill_s(self, run: _Run, k: int) -> float:
        """Seconds of the first ``k`` steps of ``run`` charged to prefill: each prefill
        step's duration times its prefill share (``sim.cost.pricer.prefill_share_s``);
        the steps after the prompt is done charge nothing."""
        works = run.prefill_works
        if works is None:
            return 0.0
        price, durations = self.cost.price_s, run.durations
        return sum(durations[i] * prefill_share_s(price, w) for i, w in enumerate(works[:k]))

    def _run_offer(self, plan: BatchPlan, work: StepWork, m: tuple[float, float]) -> RunOffer | None:
        """A lockstep rank's offer of a run of pure-decode steps (``plan.run`` of a batch
        of decodes alone; the group decides the run's length), or None."""
        lim = plan.run
        if self.exact or self._held or lim is None:
            return None
        k = lim.max_steps if self._own_scheduler else self._run_steps(plan, lim)
        if lim.chunks is not None:
            return None
        decodes, kv, base, apart = plan.decodes, self.kv, m[1], plan.apart
        # ``apart`` as ``_plan_run`` passes it: the clocked decodes' ledger is not settled
        return RunOffer(work, k, lambda steps: kv.plan_decode_run(decodes, steps, base, apart=apart))

    def _run_steps(self, plan: BatchPlan, lim: object) -> int:
        """A plug-in scheduler's ``plan.run`` as the steps the engine may plan: a
        ``RunLimit`` whose ``max_steps`` is a whole number >= 1 (any integer type but a
        bool; anything else is a one-line ``KvsimError`` naming the scheduler), capped at
        the steps it can describe (``run_steps_bound``: to the first decode's finish, the
        prefill's chunks), so the run's plan (per-step lists) stays as long as the
        batch can repeat. O(1) checks, plus the cap's O(decodes) pass, as planning the
        run's memory takes; kvsim's own schedulers skip both."""
        if type(lim) is not RunLimit:
            raise KvsimError(
                f"scheduler {_named(self.sched)}: plan.run is {shown(lim)}; it must be a "
                "sim.sched.RunLimit or None (docs/engine.md, the scheduler contract)"
            )
        k: Any = lim.max_steps
        steps = None
        if not isinstance(k, bool):
            try:
                steps = operator.index(k)
            except TypeError:
                pass
        if steps is None or steps < 1:
            raise KvsimError(
                f"scheduler {_named(self.sched)}: RunLimit.max_steps is {shown(k)}; it must "
                "be a whole number >= 1 (an int, not a bool; docs/engine.md, the scheduler "
                "contract)"
            )
        return min(steps, run_steps_bound(plan, lim))

    def _prefill_run_durations(
        self, plan: BatchPlan, work: StepWork, cost: StepCost, chunks: tuple[int, ...], late: bool, k: int
    ) -> tuple[list[float], list[StepWork], np.ndarray]:
        """Decodes plus one prefill advancing by ``chunks``, then (if the run goes on)
        every request decoding. Every decode's context grows by one per step, so do the
        longest and shortest (the skew correction's); the prefill joins at its prompt.
        Returns every step's duration, the work of each step with a prefill chunk, and
        every step's attention seconds."""
        n_pre = min(len(chunks), k)
        cached, n_dec = plan.prefill_chunks[0][1], plan.n_decode
        # seconds and attention alone: no breakdown is recorded for these steps
        price = self.cost.price_s_attention
        out = [cost.total_s]
        att = [_attention_s(cost)]
        works = [work]
        hist = plan.decode_history_tokens
        hi, lo = work.decode_max_history_tokens, work.decode_min_history_tokens  # decode_span()
        # a last chunk that is only the last token of a request with output (a recompute
        # after preemption) is a decode in a step of its own (``Request.is_decode``)
        tail = n_pre - 1 if _decode_like_tail(plan, chunks, n_pre) else n_pre
        for i in range(1, n_pre):
            cached += chunks[i - 1]
            hist += n_dec
            if i == tail:  # priced as exact steps it: n_dec + 1 decodes, no prompt chunk
                span = (max(hi + i, cached), min(lo + i, cached)) if n_dec else (cached, cached)
                seconds, attention = price(StepWork(n_dec + 1, hist + cached, (), 0.0, 0, *span))
                out.append(seconds)
                att.append(attention)
                break  # the last step of the prefill; not a prefill work
            span = (hi + i, lo + i) if n_dec else (None, None)
            step = StepWork(n_dec, hist, ((chunks[i], cached),), 0.0, 0, *span)
            seconds, attention = price(step)
            out.append(seconds)
            att.append(attention)
            works.append(step)
        if late and k > n_pre:  # the prompt is done: n_dec + 1 decodes
            prefill = plan.scheduled[-1][0]
            hist = plan.decode_history_tokens + n_pre * n_dec + prefill.num_tokens
            joined = prefill.num_tokens
            hi, lo = (max(hi + n_pre, joined), min(lo + n_pre, joined)) if n_dec else (joined, joined)
            tail = StepWork(n_dec + 1, hist, (), 0.0, 0, hi, lo)
            durations, attention = self.cost.price_run_attention(tail, k - n_pre)
            out += durations.tolist()
            return out, works, np.concatenate((att, attention))
        return out, works, np.asarray(att, dtype=np.float64)

    # ----------------------------------------------------------------- commit
    def _commit(
        self,
        plan: BatchPlan,
        start: float,
        ends: Any,
        cost: StepCost,
        m: tuple[float, float],
        run: _Run | None,
        prefill_s: float,
        attention_s: float,
    ) -> None:
        """Record and commit ``len(ends)`` steps of ``plan`` (``run``: planned as a run);
        ``prefill_s`` and ``attention_s``: their seconds charged to prefill and their
        attention seconds (each step's own, ``CostModel.price_run_attention``)."""
        k = len(ends)
        rec, kv = self.rec, self.kv
        s0 = rec.step(start, ends, plan, cost, len(self.sched.running), len(self.sched.waiting), prefill_s,
                      attention_s)  # fmt: skip
        if k > 1:
            late = run.late if run.late is not None and run.late[1] <= k - 1 else None
            starts = [start, *ends[:-1]]
            prefill = None if run.chunks is None else (plan.scheduled[-1][0], run.chunks)
            kv.apply_decode_run(plan.decodes, k - 1, starts, late, prefill, plan.apart)
            if self.check and kv.take_step_activity() != (0, 0):
                raise InvariantError("fast path: a planned run copied or allocated buffers")
            n_dec, bpt, u0 = plan.n_decode, kv.kv_bytes_per_token, m[0]
            if late is None:
                useful = [u0 + i * n_dec * bpt for i in range(k)]
            else:
                f = late[1] - 1
                useful = [u0 + (i * n_dec + max(0, i - f)) * bpt for i in range(k)]
            allocated = [m[1], *run.allocated[: k - 1]]
            rec.memory_run(starts, useful, allocated)
            if run.chunks is not None:
                n_pre = min(len(run.chunks), k)
                pre_tokens = sum(run.chunks[:n_pre])
                rec.run_prefill(pre_tokens - run.chunks[0] - _decode_like_tail(plan, run.chunks, n_pre))
        probe = plan.scheduled[0][0]  # a step with no token sampled still computes some
        computed = probe.num_computed
        end = float(ends[-1])
        kv.set_time(end)  # (the commit publishes computed KV: a prefix cache stamps it now)
        result = self.sched.commit(plan, k)
        if (
            result.emitted
            or result.finished
            or result.emitted_from
            or probe.num_computed != computed
            or plan.rejected
            or plan.held_drops
        ):  # not plan.admitted nor plan.preempted: readmitting for ever is no progress
            self._stalled = 0
        else:
            self._stalled += 1
            if self._stalled >= MAX_STALLED_STEPS:
                self._stuck(
                    f"scheduler {_named(self.sched)} made no progress in {self._stalled} "
                    "consecutive steps (no token computed or sampled, no finish, rejection, "
                    "drop or cancellation; admissions and preemptions alone are not "
                    "progress): its commit advances nothing (docs/engine.md, the scheduler "
                    "contract)"
                )
        rec.emit(result.emitted, s0, k)
        if result.drafts:
            rec.speculative(result.extra_tokens, result.drafts, result.wasted_tokens, plan.verify_seqs)
        for req, first in result.emitted_from:
            rec.emit([req], s0 + first, k - first)
        self.last_step_s = end - (float(ends[-2]) if k > 1 else start)
        for req in result.finished:
            req.finish_s = end
            if req.last_turn:
                self.pauses.session_ended(req)
            else:  # a tool call follows: the pause lifecycle decides where the KV goes
                self.pauses.turn_ended(req)
            self._ended(req)
        self.pauses.committed(plan, ends, None if run is None else run.chunks)
        if self.check:
            self._check_invariants()
        if self.progress is not None and rec.decisions % self.progress_every == 0:
            self.progress(end)

    def _boundary_drops(self, now: float) -> None:
        """Held KV the pause lifecycle dropped for a reload while nothing ran: counted with
        the scheduler's drops (summary.json ``held_kv_drops``, steps.parquet ``held_drops``,
        a zero-time row)."""
        n, self.pauses.boundary_drops = self.pauses.boundary_drops, 0
        sched = self.sched
        self.rec.events(BatchPlan(held_drops=n), now, len(sched.running), len(sched.waiting))

    def _scheduling_events(self, plan: BatchPlan, now: float) -> None:
        sched = self.sched  # counts after the decision (a zero-time one gets its own row)
        self.rec.events(plan, now, len(sched.running), len(sched.waiting))
        if plan.held_drops:  # book the drops on their pauses before admissions read them
            self.pauses.dropped(now)
        for req in plan.admitted:
            if req.admitted_s is None:
                req.admitted_s = now
                req.scheduled_s = self._plan_s
            self.pauses.admitted(req, now)
        for req in plan.rejected:
            self.kv.release(req.seq_id)
            self._ended(req)

    def _ended(self, req: Request) -> None:
        self._seen.pop(id(req), None)
        self.pauses.turn_gone(req)
        self.rec.request_ended(req)
        if req.on_done is not None:
            req.on_done(req)

    def _record_memory(self, now: float) -> tuple[float, float]:
        """Record the memory state; returns (useful, allocated) bytes."""
        kv, sched = self.kv, self.sched
        m, extra = kv.memory_state()
        # what the head-of-queue request asks for (memory.parquet's phi_ext_next)
        nxt = kv.request_bytes(sched.waiting[0]) if sched.waiting else None
        return self.rec.memory(
            now, m, kv.paused_bytes, kv.n_paused, len(sched.running), len(sched.waiting), extra,
            nxt, kv.kv_slots(),
        )

    # ------------------------------------------------------------------ inbox
    def _take_posts(self, now: float) -> None:
        """Receive the workload's posts at this boundary (``now``) and apply those the plan
        made now may see.

        Every submission is stamped ``queued_s`` when received (vLLM's ``queued_ts``: its
        engine core takes requests from its input queue between steps). With async
        scheduling (vLLM's engine core keeps two steps queued: it plans step N + 1, hands
        it to the GPU, then waits for step N's output), a step's plan is made while the
        step before it runs, from what was received before that step began: what was posted
        while step N ran is received at its end and first planned into step N + 2. So after
        a step, the node applies the posts received at the previous boundary and holds
        those received now. With no step in flight (idle, or an empty plan) there is
        nothing to plan ahead of, and everything received applies at once.
        """
        recv, split = self._recv_s, self._recv_split
        if recv is not None:  # a run went on one step past posts received at ``recv``
            self._recv_s, self._recv_split = None, -1
            inbox = self.inbox
            early, late = (inbox, []) if split < 0 else (inbox[:split], inbox[split:])
            _stamp(early, recv)
            _stamp(late, now)
            # what was received at ``recv`` was held there and applies now, into the plan
            # made at the start of the step just ended, as if the run had been cut there
            ops, self._held, self.inbox = self._held + early, late, []
            self._plan_s = self._step_start
            self._stepped = False
            self._apply_ops(ops, now)
            return
        if self.inbox:
            _stamp(self.inbox, now)
        if self.lag and self._stepped:  # this plan was made when the step just ended began
            ops, self._held, self.inbox = self._held, self.inbox, []
            self._plan_s = self._step_start
        else:
            ops, self._held, self.inbox = self._held + self.inbox, [], []
            self._plan_s = now
        self._stepped = False
        if ops:
            self._apply_ops(ops, now)

    def _apply_ops(self, ops: list[tuple], now: float) -> None:
        """Apply the posts ``ops`` at ``now`` (``env.now``: applying them takes no time)."""
        if not ops:
            return
        kv, sched = self.kv, self.sched
        kv.set_time(now)
        refused = 0  # requests that can never run, refused on submission (one steps row)
        for op in ops:
            kind = op[0]
            if kind == "submit":
                req = op[1]
                if not self.pauses.admit_now(req):
                    continue  # its context is copied back first; submitted again then
                if not sched.add(req):
                    kv.release(req.seq_id)
                    self._ended(req)
                    refused += 1
            elif kind == "fork":
                kv.fork(op[1], op[2])
            elif kind == "call":
                op[1]()
            elif kind == "release":
                self.pauses.released(op[1])
                kv.release(op[1])
            elif kind == "refused":  # (by a cluster's router)
                self.pauses.refused_by_router(op[1])
                kv.release(op[1].seq_id)
            elif kind == "cancel":
                req = op[1]
                if req is not None and sched.cancel(req):
                    req.finish_s = now
                    self._ended(req)
                    self._stalled = 0
                self.pauses.released(op[2], cancelled=True)
                kv.release(op[2])
        self.rec.rejected_at_submit(now, refused, len(sched.running), len(sched.waiting))

    # ------------------------------------------------------------- guards
    def _check_invariants(self) -> None:
        self.kv.check_invariants()
        self.sched.check_invariants()
        self.pauses.check_invariants()
        for req in (*self.sched.running, *self.sched.waiting):
            before = self._seen.get(id(req))
            now = (req.num_output, req.num_computed)
            if before is not None and now[0] < before[0]:
                raise InvariantError(f"{req!r}: output tokens went down ({before[0]} -> {now[0]})")
            if before is not None and now[1] < before[1] and req.preemptions == 0:
                raise InvariantError(f"{req!r}: computed tokens went down without a preemption")
            self._seen[id(req)] = now

    def _stuck_list(self) -> str:
        """``stuck trajectories: ...``: those with a request submitted or in a tool pause."""
        reqs = [op[1] for op in (*self._held, *self.inbox) if op[0] == "submit"]
        reqs += [*self.sched.running, *self.sched.waiting]
        queued = {r.traj_id for r in reqs}
        pausing = {p.req.traj_id for p in self.pauses.open_pauses()} - queued
        parts = [
            f"{what} {_ids(ids)}"
            for what, ids in (("a request submitted", queued), ("in a tool pause", pausing))
            if ids
        ]
        return f"stuck trajectories: {'; '.join(parts) or 'none'}"

    def _too_long(self) -> None:
        raise SimTimeLimitError(
            f"simulated time reached t={self.env.now:.6g} s, past engine.max_sim_time_s = "
            f"{self.max_sim_time_s:.6g} s; {self._stuck_list()}; "
            "raise engine.max_sim_time_s if the run is meant to be this long, or set duration_s "
            "below it to stop cleanly there"
        )

    def _stuck(self, why: str, *detail) -> None:
        sched = self.sched
        stuck = [*sched.running, *sched.waiting][:5]
        names = ", ".join(repr(r) for r in stuck)
        more = len(sched.running) + len(sched.waiting) - len(stuck)
        extra = f" (+{more} more)" if more > 0 else ""
        info = " ".join(str(d) for d in detail)
        raise EngineStuckError(
            f"engine stuck at t={self.env.now:.6f}s: {why} {info}".rstrip()
            + f"; free {self.kv.free_bytes:.4g} B; stuck: {names}{extra}"
        )


#: a node settles after every other event of the same time (simpy: URGENT 0, NORMAL 1), so
#: several nodes settling at once do not wait on each other's settling forever
SETTLE_PRIORITY = 2


def _busy_now(env: simpy.Environment, now: float) -> bool:
    """Whether an event other than a node's settling is due ``now`` (``env.now``)."""
    queue = env._queue  # simpy's heap of (time, priority, id, event)
    return bool(queue) and queue[0][0] <= now and queue[0][1] < SETTLE_PRIORITY


def _settle(env: simpy.Environment) -> simpy.Event:
    """An event due now, after every URGENT and NORMAL event due now."""
    event = simpy.Event(env)
    event._ok, event._value = True, None
    env.schedule(event, SETTLE_PRIORITY)
    return event


def _stamp(ops: list[tuple], received_s: float) -> None:
    """The engine received ``ops`` at ``received_s``: a submission's ``queued_s``."""
    for op in ops:
        if op[0] == "submit" and op[1].queued_s is None:
            op[1].queued_s = received_s


def _attention_s(cost: StepCost) -> float:
    """A step's attention seconds: the larger of its breakdown's KV reads and attention
    FLOPs (``CostModel.price_run_attention``'s, for a step priced with a breakdown)."""
    kv, flops = cost.kv_read_s, cost.attention_s
    return flops if flops > kv else kv


def _decode_like_tail(plan: BatchPlan, chunks: tuple[int, ...], n_pre: int) -> int:
    """1 when the run's last prefill step (of ``n_pre``; ``chunks``: the run's) computes
    only the last token of a request that already has output (a recompute after
    preemption): a step of its own would schedule that token as a decode
    (``Request.is_decode``), so it is not a prefill token, and that step is priced as a
    decode step (``Node._prefill_run_durations``)."""
    req = plan.scheduled[-1][0]
    completes = sum(chunks) == req.num_tokens - req.num_computed
    last = n_pre == len(chunks) and n_pre > 1 and chunks[-1] == 1 and completes
    return 1 if last and req.num_output > 0 else 0


def _named(sched: Scheduler) -> str:
    """A scheduler as errors name it: its registered name and its class."""
    cls = type(sched)
    return f"{sched.name!r} ({cls.__module__}.{cls.__qualname__})"


def _ids(ids: set[int], most: int = 10) -> str:
    shown = sorted(ids)[:most]
    more = f" (+{len(ids) - most} more)" if len(ids) > most else ""
    return ", ".join(str(i) for i in shown) + more


__all__ = ["EngineStuckError", "Node", "SimTimeLimitError", "WorkloadStoppedError"]

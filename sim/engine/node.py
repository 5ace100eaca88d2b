"""The node: one SimPy process that repeats schedule -> price -> timeout -> commit.

Responsibility: the only place where engine steps take time. Each loop iteration lets
same-time processes act (``settle``), applies what the workload posted (submissions,
forks, releases, cancellations, in order), asks the scheduler for a batch, prices it with
the cost model, waits ``step.total_s``, commits it and reports what happened to the
recorder and to the waiting trajectories.

Fast path (``exact=False``): when the batch is pure decode and nothing can change it
before the next step (no arrival, no completion, no block exhaustion or copy), the run of
identical decode steps up to the first completion or memory limit is priced in closed form
(``CostModel.decode_run_times``) and waited for in one SimPy event. A workload post during
the run wakes the engine at the end of the step in progress, so the run is cut exactly
where step-by-step execution (``exact=True``) would have seen the post; both modes give
the same results.

Invariants: one SimPy event per step or run (never per token or per sequence); workload
operations take effect only at step boundaries, in the order they were posted; the batch
is never empty while work is runnable (otherwise ``EngineStuckError`` names the stuck
requests); with ``check_invariants`` the KV manager, the scheduler and token-count
monotonicity are checked after every decision.
"""

from __future__ import annotations

import numpy as np

from sim.cost import StepWork
from sim.errors import KvsimError
from sim.memory.errors import InvariantError
from sim.sched.request import CANCELLED, FINISHED, REJECTED

#: zero-time reschedules (preemptions, drops, rejections without a step) before giving up
MAX_ZERO_TIME_DECISIONS = 100_000


class EngineStuckError(KvsimError):
    """Work is runnable but no step can be scheduled (a livelock, i.e. a simulator bug)."""


class Node:
    """One engine instance (a TP x PP replica) serving requests step by step."""

    def __init__(
        self,
        env,
        scheduler,
        kv,
        cost,
        recorder,
        *,
        exact: bool = False,
        check_invariants: bool = False,
        horizon_s: float | None = None,
        progress=None,
        progress_every: int = 2048,
    ) -> None:
        self.env, self.sched, self.kv, self.cost, self.rec = env, scheduler, kv, cost, recorder
        self.exact = exact
        self.check = check_invariants
        self.horizon_s = horizon_s
        self.progress, self.progress_every = progress, progress_every
        self.inbox: list[tuple] = []
        self._wake = None  # event the engine sleeps on while idle or in a run
        self._ends: np.ndarray | None = None  # end times of the run in progress
        self._deadline = -1  # index in _ends of the step the engine will wake after
        self._workload_done = False
        self._seen: dict[int, tuple[int, int]] = {}  # id(request) -> (output, computed)
        self.end_s = 0.0
        self.process = env.process(self._loop())

    # --------------------------------------------------------------- workload API
    def submit(self, req) -> None:
        """Queue a request (its ``on_done`` is called when it finishes or is refused)."""
        self._post(("submit", req))

    def fork(self, parent, child) -> None:
        """Give sequence ``child`` the KV of ``parent`` (copy-on-write or deep copy)."""
        self._post(("fork", parent, child))

    def release(self, seq) -> None:
        """Free a sequence nobody will extend again."""
        self._post(("release", seq))

    def cancel(self, req, seq) -> None:
        """Abort ``req`` (if queued or running) and free ``seq`` (a pruned branch)."""
        self._post(("cancel", req, seq))

    def workload_finished(self) -> None:
        """No more posts will come: the engine stops once its queues are empty."""
        self._workload_done = True
        self._post(None)

    def _post(self, op) -> None:
        if op is not None:
            self.inbox.append(op)
        wake = self._wake
        if wake is None or wake.triggered:
            return
        if self._ends is None:  # idle
            wake.succeed()
            return
        i = int(np.searchsorted(self._ends, self.env.now, side="left"))
        if i < self._deadline:  # wake after the step in progress instead of the run's end
            self._deadline = i
            self._arm(wake, i)

    def _arm(self, wake, i: int) -> None:
        timer = self.env.timeout(max(0.0, float(self._ends[i]) - self.env.now))
        timer.callbacks.append(lambda _ev: self._ring(wake, i))

    def _ring(self, wake, i: int) -> None:
        if not wake.triggered and self._wake is wake and self._deadline == i:
            wake.succeed()

    # ------------------------------------------------------------------- loop
    def _loop(self):
        env, zero_time = self.env, 0
        while True:
            while env.peek() <= env.now:  # let same-time processes post first
                yield env.timeout(0)
            self._apply_inbox()
            now = env.now
            if self.horizon_s is not None and now >= self.horizon_s:
                break
            self.kv.set_time(now)
            plan = self.sched.schedule()
            self._scheduling_events(plan, now)
            if plan.empty:
                if plan.preempted or plan.rejected or plan.held_drops:
                    zero_time += 1
                    if zero_time > MAX_ZERO_TIME_DECISIONS:
                        self._stuck("no step in", zero_time, "zero-time decisions")
                    continue
                if self.sched.has_work:
                    self._stuck("empty batch with runnable work")
                self._record_memory(now)
                if self._workload_done and not self.inbox:
                    break
                self._wake, self._ends = env.event(), None
                yield self._wake
                self._wake = None
                continue
            zero_time = 0
            yield from self._run(plan, now)
        self.end_s = env.now

    def _run(self, plan, now: float):
        """Price, wait for and commit one step or one run of steps of the same batch."""
        m = self._record_memory(now)
        cost = self.cost.iteration_time(plan.work())
        run = self._plan_run(plan, m, cost)
        if run is None:
            yield self.env.timeout(cost.total_s)
            self._commit(plan, now, [now + cost.total_s], None, cost, m, None)
            return
        durations, run_alloc, chunks = run
        ends = np.cumsum(np.concatenate(([now], durations)))[1:]
        k = len(ends)
        if self.horizon_s is not None:  # steps must start before the horizon
            k = min(k, int(np.searchsorted(ends, self.horizon_s, side="left")) + 1)
        self._wake, self._ends, self._deadline = self.env.event(), ends[:k], k - 1
        self._arm(self._wake, k - 1)
        yield self._wake
        k = self._deadline + 1
        self._wake, self._ends = None, None
        self._commit(
            plan, now, ends[:k], durations[:k], cost, m, run_alloc, sum(chunks[:k]) if chunks else 0
        )

    def _plan_run(self, plan, m, cost):
        """A run of several steps of this batch: (durations, allocated bytes during steps
        2..k, prefill chunks) or None for a single step.

        A run repeats the batch while nothing can change it: pure decodes up to the first
        completion, or decodes plus one chunked prefill up to the end of that prompt
        (``scheduler.run_chunks``), and only as far as memory allows without a miss or a copy.
        """
        sched = self.sched
        if (
            self.exact
            or len(plan.scheduled) != len(sched.running)
            or plan.preempted
            or plan.rejected
            or plan.held_drops
            or plan.copy_bytes
            or plan.alloc_calls
        ):
            return None
        decodes = plan.decodes
        k = min((r.max_output_tokens - r.num_output for r in decodes), default=1 << 30)
        chunks = None
        if plan.prefill_chunks:
            chunks = sched.run_chunks(plan, k)
            if chunks is None:
                return None
            k = min(k, len(chunks))
        elif plan.admitted:
            return None
        if k <= 1:
            return None
        if decodes:
            mem = self.kv.plan_decode_run(decodes, k - 1, base_allocated=m[1])
            k = 1 + mem.steps
            if k == 1:
                return None
            run_alloc = mem.allocated_bytes
        else:
            run_alloc = np.full(k - 1, float(m[1]))
        if chunks is None:
            durations = self.cost.decode_run_times(plan.n_decode, plan.decode_history_tokens, k)
            return durations, run_alloc, None
        return self._hybrid_durations(plan, cost, chunks[:k]), run_alloc, chunks[:k]

    def _hybrid_durations(self, plan, cost, chunks: list[int]) -> np.ndarray:
        """Step durations of decodes plus one prefill advancing by ``chunks``."""
        cached, n_dec = plan.prefill_chunks[0][1], plan.n_decode
        out = [cost.total_s]
        hist = plan.decode_history_tokens
        price = self.cost.iteration_time
        for i in range(1, len(chunks)):
            cached += chunks[i - 1]
            hist += n_dec
            out.append(price(StepWork(n_dec, hist, ((chunks[i], cached),))).total_s)
        return np.asarray(out)

    # ----------------------------------------------------------------- commit
    def _commit(
        self, plan, start: float, ends, durations, cost, m, run_alloc, prefill_tokens: int = 0
    ) -> None:
        k = len(ends)
        rec, kv = self.rec, self.kv
        s0 = rec.step(start, ends, plan, cost, len(self.sched.running), len(self.sched.waiting))
        if k > 1:
            starts = np.concatenate(([start], ends[:-1]))
            kv.apply_decode_run(plan.decodes, k - 1, starts)
            if self.check and kv.take_step_activity() != (0, 0):
                raise InvariantError("fast path: a planned run copied or allocated buffers")
            useful = m[0] + np.arange(k) * (plan.n_decode * kv.kv_bytes_per_token)
            allocated = np.concatenate(([m[1]], run_alloc[: k - 1]))
            rec.memory_run(starts, useful, allocated)
        result = self.sched.commit(plan, k, prefill_tokens)
        rec.emit(result.emitted, s0, k, durations)
        if result.emitted_last:
            rec.emit(result.emitted_last, s0 + k - 1, 1)
        end = float(ends[-1])
        kv.set_time(end)
        for req in result.finished:
            req.finish_s = end
            kv.finish(req)
            self._ended(req)
        if self.check:
            self._check_invariants()
        if self.progress is not None and rec.decisions % self.progress_every == 0:
            self.progress(end)

    def _scheduling_events(self, plan, now: float) -> None:
        self.rec.events(plan)
        for req in plan.admitted:
            if req.admitted_s is None:
                req.admitted_s = now
        for req in plan.rejected:
            self.kv.release(req.seq_id, "rejected")
            self._ended(req)

    def _ended(self, req) -> None:
        self._seen.pop(id(req), None)
        self.rec.request_ended(req)
        if req.on_done is not None:
            req.on_done(req)

    def _record_memory(self, now: float) -> tuple[float, float]:
        """Record the memory state; returns (useful, allocated) bytes."""
        kv, sched = self.kv, self.sched
        m, extra = kv.memory_state()
        return self.rec.memory(
            now, m, kv.paused_bytes, len(kv.paused), len(sched.running), len(sched.waiting), extra
        )

    # ------------------------------------------------------------------ inbox
    def _apply_inbox(self) -> None:
        if not self.inbox:
            return
        ops, self.inbox = self.inbox, []
        kv, sched = self.kv, self.sched
        kv.set_time(self.env.now)
        for op in ops:
            kind = op[0]
            if kind == "submit":
                req = op[1]
                kv.resume(req.seq_id)
                if not sched.add(req):
                    kv.release(req.seq_id, "rejected")
                    self._ended(req)
            elif kind == "fork":
                kv.fork(op[1], op[2])
            elif kind == "release":
                kv.release(op[1])
            elif kind == "cancel":
                req = op[1]
                if req is not None and sched.cancel(req):
                    req.finish_s = self.env.now
                    self._ended(req)
                kv.release(op[2], "cancelled")

    # ------------------------------------------------------------- guards
    def _check_invariants(self) -> None:
        self.kv.check_invariants()
        self.sched.check_invariants()
        for req in (*self.sched.running, *self.sched.waiting):
            before = self._seen.get(id(req))
            now = (req.num_output, req.num_computed)
            if before is not None and now[0] < before[0]:
                raise InvariantError(f"{req!r}: output tokens went down ({before[0]} -> {now[0]})")
            if before is not None and now[1] < before[1] and req.preemptions == 0:
                raise InvariantError(f"{req!r}: computed tokens went down without a preemption")
            self._seen[id(req)] = now

    def _stuck(self, why: str, *detail) -> None:
        sched = self.sched
        stuck = [*sched.running, *sched.waiting][:5]
        names = ", ".join(repr(r) for r in stuck)
        more = len(sched.running) + len(sched.waiting) - len(stuck)
        extra = f" (+{more} more)" if more > 0 else ""
        info = " ".join(str(d) for d in detail)
        raise EngineStuckError(
            f"engine stuck at t={self.env.now:.6f}s: {why} {info}".rstrip()
            + f"; free {self.kv.alloc.metrics().free_bytes:.4g} B; stuck: {names}{extra}"
        )


__all__ = ["CANCELLED", "FINISHED", "REJECTED", "EngineStuckError", "Node"]

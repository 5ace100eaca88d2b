"""One owner per pause: the lifecycle of every tool call's pause, in the engine.

Responsibility: the engine side of rules 3.11-3.13. When a non-final turn ends the node
calls ``turn_ended``: the decider (``decide``) builds the facts and asks the scenario's
policy, and this object, the only caller of the KV manager's pause verbs, acts:
  * ``hold``: the blocks stay resident (a TTL hold releases them when the TTL expires);
  * ``recompute``: the blocks are freed now; the next turn prefills again;
  * ``offload_host`` / ``offload_nvme``: frames are taken and a copy-out starts
    (``transfers``); the GPU blocks are freed at the first step boundary after it
    completes (rule 3.12). At tool return the next turn is held back (the node's gate,
    ``admit_now``): HBM blocks are taken first (retried at every step boundary), then the
    copy-in runs, and only once the context is resident is the turn submitted. A prefix
    cache sees the reloaded blocks only from the step boundary after the copy-in ends
    (``KVManager.restored``); a reload abandoned before frees them uncached.
A tool that returns before its copy-out completed finds its blocks still resident and goes
on at once. ``resume: speculative`` starts the reload before the tool returns and
``resume: pipelined`` submits the turn while its copy-in still runs (``resume``); a
``ttl_pin`` hold (or a ``hints`` pin) gets its release action when the TTL expires. A
session's last call ends in ``session_ended``: its sequence is freed (with its prefix-cache
blocks when the ``hints`` policy honours a ``release`` hint). Memory pressure may drop a
pause's held KV (the scheduler's relief, or a reload's own at a step boundary): each drop
is booked on its pause when it happens (``dropped``: ``blocks_freed_s``, the note); a
turn resumed on resident KV (held, prefetched, reloaded or streaming in) that loses it
while queued ends its pause recomputed (``admitted``); a turn that ends before its
context is resident again (unadmitted, or during its recompute) ends its pause
(``turn_gone``): ``refused`` when refused, ``cancelled`` when cancelled; a turn a
cluster's router refuses never comes here: the node ends its sequence's pause ``refused``
when told (``refused_by_router``). ``hold`` is the trivial form: one record, one
``kv.hold``, one ``kv.resume``. Every pause is one ``Pause`` record whose state moves
only along ``state.TRANSITIONS``; ``records()`` feed pauses.parquet (schema in
``sim.metrics.pauses``, built by the run layer).

Invariants (``check_invariants``): no running request reads a sequence whose blocks are
not all in HBM; host and NVMe frame pools never exceed their capacity; every pause is in
exactly one state; memory never calls into this object (it asks the KV manager). When the
workload has ended, every pause has ended in exactly one outcome (``check_closed``).
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any

import numpy as np
import simpy

from sim.engine.copy_engine import CopyEngines
from sim.engine.pauses.decide import PauseDecider
from sim.engine.pauses.resume import pipelined_release_delay_s, prefetch_delay_s
from sim.engine.pauses.state import Pause, PauseState
from sim.engine.pauses.transfers import Transfers
from sim.errors import InvariantError
from sim.memory.kv_manager import KVManager
from sim.sched import Request, Scheduler
from sim.sched.request import CANCELLED, FINISHED, REJECTED

S = PauseState
NAN = float("nan")
HOLD, RECOMPUTE = "hold", "recompute"
#: a pause's note when memory pressure dropped its held KV (``sim.metrics.pauses.DROPPED_NOTE``)
DROPPED = "dropped under memory pressure"
WAITED = "dropped under memory pressure while its turn waited"
#: the outcome of a pause whose next turn was refused (``sim.metrics.pauses.PAUSE_OUTCOMES``)
REFUSED = "refused"
#: the outcome of a pause whose sequence or next turn the workload cancelled
CANCELLED_OUTCOME = "cancelled"
#: a pause's note when its next turn ended (refused, cancelled) before any admission
NEVER_ADMITTED = "its turn was never admitted"
#: states of a pause whose KV memory pressure may drop (held: ``KVManager.hold``)
DROPPABLE = frozenset({S.HELD, S.COPYING_OUT, S.COPYING_IN, S.PREFETCHED})


class PauseLifecycle:
    """Every pause of a run, from its decision to its next turn's context being resident."""

    def __init__(self, env: simpy.Environment, options: Any, resolved: Any, cost: Any) -> None:
        self.env = env
        self.name = options.kind
        self.decider = PauseDecider(options, resolved, cost)
        self.cost = cost
        self.bpt = resolved.kv_bytes_per_token
        self.tiers = resolved.tiers
        self.node: Any = None
        self.kv: KVManager | None = None
        self.sched: Scheduler | None = None
        self.transfers: Transfers | None = None
        self.pauses: list[Pause] = []
        self._by_seq: dict[Hashable, Pause] = {}
        self._restores: list[Pause] = []
        self.copies_in = 0  # copy-ins running: their turns come to the node when done
        self.streaming = 0  # pipelined copy-ins still running after their turn went on
        #: the next request -> its pause, recomputing. Both maps are keyed by the request
        #: itself (hashed by identity; the pause's ``next_req`` keeps it alive), never by an
        #: ``id()`` that a collected request could pass on
        self._recomputing: dict[Request, Pause] = {}
        #: the next request -> its pause, resumed on resident KV (held, prefetched, reloaded
        #: or streaming in), until the turn is admitted (memory pressure may drop the KV of
        #: a turn still waiting: ``admitted``) or ends unadmitted (``turn_gone``)
        self._waiting: dict[Request, Pause] = {}
        #: the ``hints`` policy honours ``release`` and ``retain_priority`` beyond its decisions
        self.honours_hints = options.kind == "hints"
        self.hint_releases = 0  # sessions whose last call's ``release`` hint freed the cache
        #: held KV ``at_boundary`` dropped for a reload, not yet counted (the node takes it)
        self.boundary_drops = 0

    def attach(
        self, node: Any, kv: KVManager, sched: Scheduler, copies: CopyEngines, track: bool
    ) -> None:
        """Wire the lifecycle to the engine it serves (after all are built); ``track``
        keeps the tier-tagged block table that the invariant checks read."""
        self.node, self.kv, self.sched = node, kv, sched
        block_bytes = (kv.block_size or 16) * self.bpt
        t = self.tiers
        self.transfers = Transfers(
            copies, t.host_pool_bytes, t.nvme_pool_bytes, block_bytes, track
        )

    @property
    def host(self):
        return self.transfers.host

    @property
    def nvme(self):
        return self.transfers.nvme

    # ------------------------------------------------------------- a turn ended
    def session_ended(self, req: Request) -> None:
        """A trajectory's last call ended: free its sequence; a ``release`` hint (honoured
        by the ``hints`` policy) drops its blocks from a prefix cache too."""
        hint = req.hint
        if self.honours_hints and hint is not None and hint.release:
            self.kv.drop(req.seq_id, uncache=True)
            self.hint_releases += 1
        else:
            self.kv.release(req.seq_id)

    def turn_ended(self, req: Request) -> None:
        """A non-final turn ended: decide, start what the decision needs, hold or drop."""
        kv, seq, now = self.kv, req.seq_id, self.env.now
        tokens = kv.resident_tokens(seq)
        t = self.transfers
        facts = self.decider.facts(
            req, tokens, kv, self.sched, (t.host, t.nvme), now, self.node.last_step_s
        )
        d = self.decider.decide(facts)
        p = Pause(
            len(self.pauses), req, seq, tokens, facts.state_bytes_per_gpu,
            facts.state_bytes_total, d.action, d.reason, facts.predicted_wait_s, now,
        )  # fmt: skip
        self.pauses.append(p)
        self._by_seq[seq] = p
        p.prefetch, p.facts, p.hint_refused = d.prefetch, facts, d.hint_refused
        if d.ttl_s is not None:
            p.release = d.release
            self.env.process(self._ttl(p, d.ttl_s))
        self._retain(seq, req)
        self._apply(p, d.action, d.evict_from_prefix_cache, first=True)

    def _retain(self, seq: Hashable, req: Request) -> None:
        """The ``hints`` policy's eviction bias: the hint's ``retain_priority`` holds while
        the KV is paused and once its blocks are cached (``KVManager.retain``)."""
        if self.honours_hints:
            self.kv.retain(seq, 0.0 if req.hint is None else req.hint.retain_priority)

    def _apply(self, p: Pause, action: str, evict: bool = False, first: bool = False) -> None:
        """Start ``action`` for the pause (at its decision, or at a TTL's expiry)."""
        kv = self.kv
        p.moved_to = action
        if action == RECOMPUTE:
            p.to(S.RECOMPUTE)
            kv.drop(p.seq, uncache=evict)
            p.freed_s = self.env.now
            return
        if action != HOLD:
            t = self.transfers
            if t.take_frames(p, t.pool_for(action)):
                p.to(S.COPYING_OUT)
                self.env.process(self._copy_out(p))
            else:
                p.moved_to, p.note = HOLD, f"{action}: no room at copy time"
                if p.facts.hint is not None and p.facts.hint.demote is not None:
                    p.hint_refused = _joined(p.hint_refused, "demote: no room at copy time")
                p.to(S.HELD)
        else:
            p.to(S.HELD)
        if first:  # resident until the copy-out completes (or the tool returns)
            kv.hold(p.seq, p.req.traj_id, p.pause_id)

    # --------------------------------------------------------------- processes
    def _copy_out(self, p: Pause):
        yield self.transfers.copy_out(p)
        p.copy_out_done_s = self.env.now
        p.bytes_out = p.bytes_total
        self.node.call_at_boundary(lambda: self._copied_out(p))

    def _copied_out(self, p: Pause) -> None:
        kv, seq = self.kv, p.seq
        if p.state != S.COPYING_OUT:  # resumed, released or dropped meanwhile
            self.transfers.free_frames(p)
            return
        if not kv.is_live(seq) or not kv.is_held(seq):  # dropped under pressure
            self.transfers.free_frames(p)
            p.to(S.RECOMPUTE)
            p.moved_to, p.note = RECOMPUTE, f"{DROPPED} before copy-out end"
            return
        kv.release(seq)
        p.freed_s = self.env.now
        p.to(S.OFFLOADED)
        self.transfers.track(p)
        if p.prefetch is not None and p.prefetch.strategy == "speculative":
            self.env.process(self._prefetch_timer(p, prefetch_delay_s(p, self.env.now)))

    def _prefetch_timer(self, p: Pause, delay_s: float):
        yield self.env.timeout(delay_s)
        self.node.call_at_boundary(lambda: self._prefetch(p))

    def _prefetch(self, p: Pause) -> None:
        """Speculative prefetch (rule 3.13): start the reload before the tool returns."""
        if p.state == S.OFFLOADED:
            p.to(S.WAITING_HBM)
            self._restores.append(p)

    def _copy_in(self, p: Pause):
        yield self.transfers.copy_in(p)
        now = self.env.now
        if p.state in (S.COPYING_IN, S.STREAMING):  # (not released meanwhile)
            # the reloaded blocks become prefix hits once the load is seen complete, at
            # the next step boundary (vLLM: the connector's finished loads, then
            # ``cache_blocks``), before the turn this copy-in submits is admitted
            seq, kv = p.seq, self.kv
            self.node.call_at_boundary(lambda: kv.restored(seq))
        self._unawait(p)
        p.copy_in_done_s = now
        p.bytes_in = p.bytes_total
        self.transfers.free_frames(p)
        self.transfers.untrack(p.seq)
        if p.state == S.STREAMING:  # pipelined: the turn went on before the copy ended
            p.to(S.RESIDENT)
            self.streaming -= 1
            self.node.call_at_boundary(_nothing)  # wake the node: it ends after the copy
            return
        if p.state != S.COPYING_IN:  # released meanwhile
            return
        if p.next_req is None:  # prefetched: resident before the tool returned
            p.to(S.PREFETCHED)
            return
        if not self.kv.is_live(p.seq):  # a prefetch dropped under pressure (booked at the
            # drop, ``dropped``, whether its tool had returned yet or not)
            self._recompute(p, "prefetched KV dropped under memory pressure")
            return
        p.to(S.RESIDENT)
        p.resident_s = now
        self._waiting[p.next_req] = p  # until its turn is admitted (``admitted``)
        self.node.submit(p.next_req)

    def _pipelined_release(self, p: Pause):
        """Pipelined reload (rule 3.13): submit the turn once the rest of the copy-in is
        at most the observation's predicted prefill time."""
        delay = pipelined_release_delay_s(p, self.sched, self.cost, self.tiers.link_overhead_s)
        yield self.env.timeout(delay)
        if p.state != S.COPYING_IN or not self.kv.is_live(p.seq):
            return  # the copy-in ended first (it submits the turn) or the state is gone
        self._unawait(p)
        p.to(S.STREAMING)
        p.resident_s = self.env.now
        self.streaming += 1
        self.transfers.overlap_resident(p.seq)
        self._waiting[p.next_req] = p  # until its turn is admitted (``admitted``)
        self.node.submit(p.next_req)

    def _ttl(self, p: Pause, ttl_s: float):
        yield self.env.timeout(ttl_s)
        self.node.call_at_boundary(lambda: self._ttl_expired(p))

    def _ttl_expired(self, p: Pause) -> None:
        if p.state != S.HELD or not self.kv.is_held(p.seq):
            return
        if p.release == RECOMPUTE:
            self.kv.drop(p.seq)
            p.to(S.RECOMPUTE)
            p.moved_to = RECOMPUTE
            p.freed_s = self.env.now
        else:
            self._apply(p, p.release)

    # ---------------------------------------------------------------- the gate
    def admit_now(self, req: Request) -> bool:
        """The node got ``req``: True = queue it now (its hold, if any, ends); False = its
        context comes back first (it is submitted again then)."""
        if self._gate(req):
            self.kv.resume(req.seq_id)
            return True
        return False

    def _gate(self, req: Request) -> bool:
        p = self._by_seq.get(req.seq_id)
        if p is None or p.next_req is req:
            if p is not None:
                del self._by_seq[req.seq_id]
            return True
        now, kv = self.env.now, self.kv
        # the tool returned when the harness submitted the next turn (its arrival), not
        # when the node, busy with a step, takes the submission in (a step boundary later)
        ret = min(req.arrival_s, now)
        p.tool_return_s, p.taken_in_s, p.next_req = ret, now, req
        self.decider.observe(p.req.tool_name, ret - p.start_s)
        if p.state == S.OFFLOADED:
            p.to(S.WAITING_HBM)
            self._restores.append(p)
            return False
        if p.state in (S.WAITING_HBM, S.COPYING_IN):  # a prefetch under way
            if p.state == S.COPYING_IN:
                self._await(p)
            return False
        del self._by_seq[req.seq_id]
        if p.state == S.PREFETCHED and kv.is_live(p.seq):
            p.to(S.DONE)  # resident at tool return, or when the prefetch ended after it
            p.resident_s = max(ret, p.copy_in_done_s)
            self._waiting[req] = p
            return True
        if p.state in (S.HELD, S.COPYING_OUT) and kv.is_live(p.seq):
            if p.state == S.COPYING_OUT:
                p.note = "tool returned before the copy-out ended"
            p.to(S.DONE)
            p.resident_s = ret  # a held context is resident when its tool returns
            self._waiting[req] = p  # until its turn is admitted (``admitted``)
            return True
        if p.state != S.RECOMPUTE:  # held (or prefetched) KV dropped under pressure: the
            # next turn prefills the context again, a recompute the policy did not choose
            self._book_drop(p, now)  # (booked at the drop already: ``dropped``)
            p.moved_to = RECOMPUTE
        p.to(S.RECOMPUTE)
        self._recomputing[req] = p
        return True

    def at_boundary(self) -> None:
        """Give waiting restores HBM blocks (FIFO) and start their copy-ins."""
        kv = self.kv
        while self._restores:
            p = self._restores[0]
            content = p.req.content_slice(0, p.tokens) if kv.uses_content else None
            if kv.restore(p.seq, p.tokens, content):
                self._restores.pop(0)
                self._retain(p.seq, p.req)  # a restored sequence is a new one: bias it again
                p.to(S.COPYING_IN)
                p.reload_start_s = self.env.now
                if p.next_req is None:  # a prefetch: held (counted, droppable) meanwhile
                    kv.hold(p.seq, p.req.traj_id, p.pause_id)
                else:
                    self._await(p)
                self.env.process(self._copy_in(p))
                if p.next_req is not None and p.prefetch is not None and p.prefetch.pipelined:
                    self.env.process(self._pipelined_release(p))
                continue
            if p.next_req is None:  # a prefetch that finds no room: reload at tool return
                self._restores.pop(0)
                p.to(S.OFFLOADED)
                continue
            if self.sched.running:
                return  # room comes when running requests finish
            seq = kv.drop_paused()
            if seq is not None:
                self.boundary_drops += 1
                p = self._by_seq.get(seq)
                if p is not None:
                    self._book_drop(p, self.env.now)
                continue
            # nothing runs and nothing can be dropped: the pool is too small: recompute
            self._restores.pop(0)
            self.transfers.free_frames(p)
            self.transfers.untrack(p.seq)
            self._recompute(p, "no HBM room for the reload")

    def _await(self, p: Pause) -> None:
        if not p.awaited:
            p.awaited = True
            self.copies_in += 1

    def _unawait(self, p: Pause) -> None:
        if p.awaited:
            p.awaited = False
            self.copies_in -= 1

    def _recompute(self, p: Pause, note: str) -> None:
        """The reload cannot happen: the next turn prefills its context again."""
        p.to(S.RECOMPUTE)
        p.moved_to, p.note = RECOMPUTE, note
        self._recomputing[p.next_req] = p
        self._by_seq.pop(p.seq, None)
        self.node.submit(p.next_req)

    def released(self, seq: Hashable, cancelled: bool = False) -> None:
        """The workload released ``seq`` (a fork's parent, a compaction, an ended
        trajectory) or cancelled it (a pruned branch): its open pause ends there."""
        if self._waiting:  # a resumed turn cancelled while it waited for its admission
            for key in [k for k, w in self._waiting.items() if w.seq == seq]:
                del self._waiting[key]
        p = self._by_seq.pop(seq, None)
        if p is None:
            return
        self._let_go(p)
        p.to(S.GONE)
        p.outcome = CANCELLED_OUTCOME if cancelled else "released"
        p.ended_s = self.env.now

    # ------------------------------------------------------------ memory pressure
    def dropped(self, now: float) -> None:
        """The scheduler's decision at ``now`` dropped held KV to relieve memory pressure
        (``plan.held_drops`` > 0: ``KVManager.drop_paused`` / ``drop_idle``): book each
        drop on its pause, the time its blocks left the pool (``blocks_freed_s``) and its
        note. A pause held (or copying out, or prefetched) whose sequence is no longer live,
        and a resumed pause whose turn waits for admission and lost its KV, were dropped in
        this decision (the check runs after every decision that drops), unless booked
        already: a speculative prefetch is held while it copies in, also once its tool
        returned (its turn then waits for the copy-in, not in the queue). A dropped
        sequence with no pause of its own (a fork of a held parent, held under no pause)
        has no row to book on."""
        kv = self.kv
        for p in self._by_seq.values():
            # (a reload started at tool return is neither held nor queued: never dropped)
            if p.state in DROPPABLE and not kv.is_live(p.seq):
                self._book_drop(p, now)
        for p in self._waiting.values():
            if not kv.is_live(p.seq):
                self._book_drop(p, now, WAITED)

    def _book_drop(self, p: Pause, now: float, note: str = DROPPED) -> None:
        """Memory pressure dropped ``p``'s held KV at ``now`` (once per pause)."""
        if DROPPED in p.note:
            return
        p.freed_s = now
        p.note = _joined(p.note, note)

    def turn_gone(self, req: Request) -> None:
        """``req`` ended without finishing (rejected, refused at submission, cancelled): a
        pause still waiting for its admission (``_waiting``) or for its recompute
        (``_recomputing``) ends there, at that time (``ended_s``), whatever its KV did
        (resumed on it, reloaded, streaming in, or waiting for a recompute, nothing will
        prefill it); a finished turn's entries are gone already, or go at the
        ``committed`` that follows. One whose turn was never admitted says so. A turn
        refused (``REJECTED``: at submission or at admission, e.g. beyond the context
        window or never fitting the pool) ends its pause ``refused``; one cancelled
        (``CANCELLED``: a fork's losing or pruned branch, queued or running) ends it
        ``cancelled``, as a cancellation that finds the pause before its turn came back
        does (``released``). The outcome is set before the terminal state, which keeps
        it: a recompute still to come ends in DONE (refused) or GONE (cancelled); a
        resumed one stays DONE, a reloaded one RESIDENT, a streaming one STREAMING until
        its copy-in ends."""
        if req.status == FINISHED or not (self._waiting or self._recomputing):
            return
        waiting, recomputing = self._waiting.pop(req, None), self._recomputing.pop(req, None)
        p = waiting or recomputing
        if p is None:
            return
        if req.admitted_s is None:
            p.note = _joined(p.note, NEVER_ADMITTED)
        if recomputing is not None and p.recompute_tokens > 0:
            self._cut_recompute(p, req)
        if req.status == REJECTED:
            self._end(p, REFUSED, S.DONE)
        elif req.status == CANCELLED:
            self._end(p, CANCELLED_OUTCOME, S.GONE)

    def _cut_recompute(self, p: Pause, req: Request) -> None:
        """A turn that ends while its recompute runs (cancelled after its admission, its
        chunks done so far short of the context): the pause's recompute is what those
        chunks rebuilt (past the prefix-cache hit at the admission), priced again as
        ``admitted`` priced the whole of it."""
        cached = p.tokens - p.recompute_tokens
        done = max(0, min(req.num_computed, p.tokens) - cached)
        if done < p.recompute_tokens:
            p.recompute_tokens = done
            p.recompute_s, p.recompute_flops = self.decider.recompute_price(
                self.sched, cached, done
            )

    def _end(self, p: Pause, outcome: str, state: PauseState) -> None:
        """End ``p`` now with ``outcome`` (its next turn will not run); a pause still
        waiting for its recompute moves to ``state``, any other keeps the terminal (or
        streaming) state it is in, and the outcome set first."""
        p.outcome, p.ended_s = outcome, self.env.now
        if p.state == S.RECOMPUTE:
            p.to(state)

    def refused_by_router(self, req: Request) -> None:
        """A cluster's router refused ``req`` (``rejected_by_router``): it never reached
        this node, its sequence's home. The pause that sequence is in (its tool returned
        at the refusal: the turn's arrival) ends ``refused`` at that time, as a node's own
        refusal ends it (``turn_gone``); its frames and a queued reload are let go (the
        node then frees the sequence's KV: ``Node.refused``)."""
        p = self._by_seq.pop(req.seq_id, None)
        if p is None:
            return
        if not math.isfinite(p.tool_return_s):
            p.tool_return_s = req.arrival_s
            self.decider.observe(p.req.tool_name, p.tool_return_s - p.start_s)
        p.next_req = req
        p.note = _joined(p.note, NEVER_ADMITTED)
        self._let_go(p)
        p.outcome, p.ended_s = REFUSED, req.finish_s if req.finish_s is not None else self.env.now
        p.to(S.GONE)

    def _let_go(self, p: Pause) -> None:
        """Free what an ending pause keeps off HBM: a queued reload, its host / NVMe frames
        (a copy running frees its own when it ends)."""
        if p.state in (S.OFFLOADED, S.WAITING_HBM):
            if p in self._restores:
                self._restores.remove(p)
            self.transfers.free_frames(p)
            self.transfers.untrack(p.seq)

    # -------------------------------------------------- residency after a recompute
    def admitted(self, req: Request, now: float) -> None:
        """``req`` was admitted at ``now``: price the recompute of a pause it ends (the
        context less the prefix-cache hit), and see whether it is resident already."""
        if self._waiting:
            self._dropped_while_waiting(req)
        p = self._recomputing.get(req)
        if p is not None and p.recompute_tokens == 0:
            cached = min(req.num_computed, p.tokens)
            p.recompute_tokens = p.tokens - cached
            p.recompute_s, p.recompute_flops = self.decider.recompute_price(
                self.sched, cached, p.recompute_tokens
            )
        if p is not None and req.num_computed >= p.tokens:
            self._resident(req, now)

    def committed(self, plan: Any, ends: Any, chunks: tuple[int, ...] | None) -> None:
        """After a step or run: recomputing requests whose context is resident again."""
        if not self._recomputing:
            return
        for req, _n in plan.scheduled:
            p = self._recomputing.get(req)
            if p is None or req.num_computed < p.tokens:
                continue
            t = float(ends[-1])
            if chunks and len(ends) > 1 and req is plan.scheduled[-1][0]:
                done = plan.prefill_chunks[0][1] + np.cumsum(chunks[: len(ends)])
                i = int(np.searchsorted(done, p.tokens, side="left"))
                t = float(ends[min(i, len(ends) - 1)])
            self._resident(req, t)

    def _dropped_while_waiting(self, req: Request) -> None:
        """A pause resumed on resident KV whose turn then waited in the queue: if memory
        pressure dropped that KV meanwhile (the turn's admission finds less of the context
        than the pause held, prefix-cache hits counted), the turn prefills the rest again:
        the pause ends recomputed, priced as one (its context resident when that prefill
        covers it; a reloaded one keeps its copy-in's bytes and times, its stall and cost
        are the recompute's; a pipelined one still streaming in ends recomputed when its
        copy-in ends)."""
        p = self._waiting.pop(req, None)
        if p is None or req.num_computed >= p.tokens:
            return
        # (its state stays DONE, RESIDENT or STREAMING: ``Pause.to`` keeps the outcome)
        p.moved_to, p.outcome = RECOMPUTE, "recomputed"
        self._book_drop(p, self.env.now, WAITED)  # (dropped in this decision, if not booked)
        p.resident_s = NAN
        self._recomputing[req] = p

    def _resident(self, req: Request, t: float) -> None:
        p = self._recomputing.pop(req)
        p.resident_s = t
        if p.state == S.RECOMPUTE:  # (one dropped while its turn waited is DONE or
            p.to(S.DONE)  # RESIDENT already, or STREAMING until its copy-in ends)

    # --------------------------------------------------------------- invariants
    def check_invariants(self) -> None:
        """Steps read only HBM blocks; tiers within capacity."""
        self.transfers.check(self.pauses, self.sched)

    def check_closed(self) -> None:
        """At the end of a workload (every trajectory ended, nothing queued): every pause
        ended in one outcome; one still open is an ``InvariantError`` naming it (a run cut
        at its ``duration_s`` may leave pauses open: it is not checked there)."""
        left = self.open_pauses()
        if left:
            named = ", ".join(
                f"pause {p.pause_id} (trajectory {p.req.traj_id}, {p.state.value})"
                for p in left[:5]
            )
            raise InvariantError(
                f"{len(left)} pause(s) still open when the workload ended: {named}"
            )

    def open_pauses(self) -> list[Pause]:
        """Pauses not yet in a terminal state."""
        return [p for p in self.pauses if p.open]

    # ------------------------------------------------------------------ records
    def records(self, sim_time_s: float) -> list[tuple[Pause, float, float]]:
        """Every pause with its HBM byte-seconds held (F29, its own sequence) and the
        FLOPs of its recomputed tokens (the step pricer's, ``Pause.recompute_flops``; its
        seconds are ``Pause.recompute_s``): what pauses.parquet is made of
        (``sim.metrics.pauses.pause_frame``)."""
        held = self.kv.held_token_seconds(sim_time_s).by_key
        return [
            (p, held.get(p.pause_id, 0.0) * self._bytes_per_token(p), p.recompute_flops)
            for p in self.pauses
        ]

    def _bytes_per_token(self, p: Pause) -> float:
        """HBM bytes per held token of ``p``'s state: F1 for a dense model; a hybrid
        model's state bytes spread over its tokens (its side groups are not per token)."""
        if self.decider.groups is None or p.tokens <= 0:
            return self.bpt
        return p.bytes_total / p.tokens


def _nothing() -> None:
    """A boundary call that only wakes the node."""


def _joined(first: str, more: str) -> str:
    return f"{first}; {more}" if first else more


#: the former name (notebooks and scripts may use it)
PauseController = PauseLifecycle

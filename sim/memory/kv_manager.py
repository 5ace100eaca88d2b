"""The KV manager: the scheduler's only door to KV memory.

Responsibility: compose one allocator (any kind made by ``make_allocator``) with the
bookkeeping the engine needs around it: admitting a request (a fresh sequence with a
prefix-cache lookup, or a held sequence extended by the new turn), growing a running
request, preemption (drop and recompute), forks, releases, the *pause hook* that decides
what happens to a trajectory's KV between turns (default ``hold``; the pause-policy layer
plugs in here), the KV held by paused trajectories (with its byte-seconds, F29), and the
memory side of the engine's fast path (how many unchanged decode steps fit, and the
allocated bytes after each).

It knows requests only by duck typing (``seq_id``, ``num_tokens``, ``num_computed``,
``content_slice``...) so this layer imports nothing above ``sim.memory``; it never asks
which allocator kind it holds, only what the allocator can do (``block_size``,
``seq_capacity_tokens``, ``available_blocks``, ``uses_content``).

Deferred appends (speed): a token that fits in capacity the sequence already holds (the
rest of its last block, or of its buffer) needs no allocator work, so ``grow`` only counts
it (``pending``); the allocator is told when the sequence needs new capacity, when a
prefix cache would see a block fill (content-aware allocators are told at every block
fill, so they cache blocks at the same simulated time as eager appends would), and before
any other operation on the sequence. ``metrics()`` adds the pending tokens, so every
figure equals that of eager appends.

Invariants: a sequence is in ``paused`` only while it is live and no request of it is
running or waiting; ``paused_tokens`` = the sum of the paused sequences' tokens; every
operation that fails (a miss) leaves the allocator unchanged; for every sequence,
``room + pending + allocator tokens <= capacity`` (equal except after a fork, whose shared
last block must be copied on the next write) and ``pending_tokens`` = sum of pending.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from sim.errors import UnknownNameError
from sim.memory.base import Allocator
from sim.memory.errors import InvariantError

HOLD, RECOMPUTE = "hold", "recompute"


class PauseHook(Protocol):
    """Decides at the end of a non-final turn what happens to the trajectory's KV."""

    name: str

    def on_turn_end(self, request: Any, kv: KVManager) -> str:
        """``'hold'`` (keep every block resident) or ``'recompute'`` (free it now)."""


class _Fixed:
    def __init__(self, name: str) -> None:
        self.name = name

    def on_turn_end(self, request: Any, kv: KVManager) -> str:
        return self.name


#: pause hooks by name; the pause-policy layer (issue 6) registers richer ones here
PAUSE_HOOKS: dict[str, PauseHook] = {HOLD: _Fixed(HOLD), RECOMPUTE: _Fixed(RECOMPUTE)}


def pause_hook(name: str) -> PauseHook:
    """A registered pause hook by name."""
    try:
        return PAUSE_HOOKS[name]
    except KeyError:
        raise UnknownNameError("pause policy", name, list(PAUSE_HOOKS)) from None


@dataclass(slots=True)
class PauseRecord:
    """KV held by one paused sequence between two turns (F29: bytes x seconds)."""

    seq_id: Hashable
    owner: int  # trajectory id
    tokens: int
    start_s: float
    end_s: float | None = None
    outcome: str = ""  # 'resumed', 'released', 'dropped' (pressure), 'cancelled'


@dataclass(frozen=True, slots=True)
class DecodeRun:
    """Memory plan of ``steps`` more decode steps of the same sequences."""

    steps: int  # how many more steps fit without a miss, a copy or a new buffer
    allocated_bytes: np.ndarray  # allocated bytes during each of those steps


class KVManager:
    """One allocator plus admission, growth, preemption, forks, pauses and the fast path."""

    def __init__(
        self,
        allocator: Allocator,
        *,
        pause: str | PauseHook = HOLD,
        uses_content: bool | None = None,
    ) -> None:
        self.alloc = allocator
        self.kv_bytes_per_token = allocator.kv_bytes_per_token
        self.pause_hook = pause_hook(pause) if isinstance(pause, str) else pause
        if uses_content is None:  # a prefix cache (it reports prefix metrics) needs content
            uses_content = getattr(allocator, "uses_content", None)
            if uses_content is None:
                uses_content = callable(getattr(allocator, "prefix_metrics", None))
        self.uses_content = uses_content
        self.capacity_tokens = allocator.max_sequence_tokens  # on the empty pool
        self._capacity = getattr(allocator, "seq_capacity_tokens", None)
        self._pending: dict[Hashable, int] = {}  # tokens counted here, not yet appended
        self._owner: dict[Hashable, Any] = {}  # the request whose content they are
        self._room: dict[Hashable, int] = {}  # tokens that still fit without new capacity
        self.pending_tokens = 0
        self.now = 0.0  # simulation time of the current step (prefix caches' access times)
        self.paused: dict[Hashable, PauseRecord] = {}  # insertion order = pause order
        self.paused_tokens = 0
        self.pause_log: list[PauseRecord] = []
        self.held_drops = 0  # paused/idle sequences dropped to relieve memory pressure
        self.forks_failed = 0  # forks that did not fit (the child recomputes)

    # ----------------------------------------------------------------- time
    def set_time(self, now: float) -> None:
        """The engine's clock before it schedules (passed to a prefix cache that wants it)."""
        self.now = now
        setter = getattr(self.alloc, "set_time", None)
        if setter is not None:
            setter(now)

    # ------------------------------------------------------------ scheduler
    def can_ever_fit(self, tokens: int) -> bool:
        """Whether a sequence of ``tokens`` fits the empty pool at all."""
        return tokens <= self.capacity_tokens

    def admit(self, req: Any) -> bool:
        """Give a waiting request its KV: extend its held sequence, or allocate a new one.

        A new sequence is matched against the prefix cache (hit tokens need no prefill);
        a held one (the trajectory kept its KV over the pause) starts computed up to what
        it holds. False = does not fit; nothing changed.
        """
        alloc, seq = self.alloc, req.seq_id
        n = req.num_tokens
        first = req.admitted_s is None and req.preemptions == 0
        if alloc.is_live(seq):
            self._flush(seq)
            held = alloc.seq_tokens(seq)
            if held >= n:
                raise InvariantError(f"{req!r}: sequence holds {held} tokens, request has {n}")
            content = req.content_slice(held, n) if self.uses_content else None
            if not alloc.append(seq, n - held, content=content):
                return False
            self._set_room(seq)
            req.num_computed = held
            if first:
                req.held_tokens = held
            return True
        content = req.content_slice(0, n) if self.uses_content else None
        result = alloc.allocate(seq, n, content=content)
        if not result:
            return False
        self._set_room(seq)
        matched = min(result.matched_tokens, n - 1)
        req.num_computed = matched
        req.lookup_tokens += n
        req.hit_tokens += matched
        return True

    def grow(self, req: Any, n_new: int) -> bool:
        """Room for ``n_new`` more computed tokens of a running request; False = miss."""
        seq = req.seq_id
        pend = self._pending.get(seq, 0)
        base = self.alloc.seq_tokens(seq)
        need = req.num_computed + n_new - base - pend
        if need <= 0:
            return True
        room = self._room.get(seq, 0)
        if need < room or (need == room and not self.uses_content):
            self._room[seq] = room - need
            self._pending[seq] = pend + need
            self._owner[seq] = req
            self.pending_tokens += need
            return True
        total = pend + need
        content = req.content_slice(base, base + total) if self.uses_content else None
        if not self.alloc.append(seq, total, content=content):
            return False
        if pend:
            self._drop_pending(seq)
        self._set_room(seq)
        return True

    def preempt(self, req: Any) -> None:
        """Drop a running request's KV (vLLM V1 recompute); it prefills again later."""
        self._forget(req.seq_id)
        if self.alloc.is_live(req.seq_id):
            self.alloc.free(req.seq_id)
        req.num_computed = 0

    # ------------------------------------------------------ deferred appends
    def _set_room(self, seq: Hashable) -> None:
        if self._capacity is not None:
            self._room[seq] = self._capacity(seq) - self.alloc.seq_tokens(seq)

    def _drop_pending(self, seq: Hashable) -> None:
        self.pending_tokens -= self._pending.pop(seq)
        del self._owner[seq]

    def _flush(self, seq: Hashable) -> None:
        """Tell the allocator a sequence's pending tokens (they fit: no new capacity)."""
        p = self._pending.get(seq)
        if not p:
            return
        req = self._owner[seq]
        have = self.alloc.seq_tokens(seq)
        content = req.content_slice(have, have + p) if self.uses_content else None
        if not self.alloc.append(seq, p, content=content):
            raise InvariantError(f"deferred append of {p} tokens to {seq!r} missed")
        self._drop_pending(seq)

    def _forget(self, seq: Hashable) -> None:
        """The sequence is about to be freed: its pending tokens need not be appended."""
        if seq in self._pending:
            self._drop_pending(seq)
        self._room.pop(seq, None)

    def flush_all(self) -> None:
        """Append every pending token (end of a run, or before inspecting the allocator)."""
        for seq in list(self._pending):
            self._flush(seq)

    def tokens(self, seq: Hashable) -> int:
        """Tokens a live sequence holds, pending ones included."""
        return self.alloc.seq_tokens(seq) + self._pending.get(seq, 0)

    def metrics(self, request_bytes: float | None = None):
        """The allocator's metrics as if every pending token had been appended."""
        m = self.alloc.metrics(request_bytes)
        if not self.pending_tokens:
            return m
        extra = self.pending_tokens * self.kv_bytes_per_token
        useful = m.useful_bytes + extra
        return replace(
            m, useful_bytes=useful, logical_bytes=m.logical_bytes + extra,
            eta_alloc=useful / m.allocated_bytes if m.allocated_bytes > 0 else None,
            eta_effective=useful / m.pool_bytes,
        )

    def finish(self, req: Any) -> str:
        """A request generated its last token: release its sequence or ask the pause hook.

        Returns what happened: ``'released'``, ``'hold'`` or ``'recompute'``.
        """
        seq = req.seq_id
        if req.last_turn:
            self._forget(seq)
            self.alloc.free(seq)
            return "released"
        action = self.pause_hook.on_turn_end(req, self)
        if action == HOLD:
            self._flush(seq)
            tokens = self.alloc.seq_tokens(seq)
            rec = PauseRecord(seq, req.traj_id, tokens, self.now)
            self.paused[seq] = rec
            self.paused_tokens += tokens
            self.pause_log.append(rec)
        elif action == RECOMPUTE:
            self._forget(seq)
            self.alloc.free(seq)
        else:
            raise InvariantError(f"pause hook {self.pause_hook.name!r} answered {action!r}")
        return action

    # ------------------------------------------------------------- workload
    def fork(self, parent: Hashable, child: Hashable) -> bool:
        """The child shares the parent's KV (copy-on-write or a deep copy, per kind)."""
        if not self.alloc.is_live(parent):
            self.forks_failed += 1
            return False
        self._flush(parent)
        ok = bool(self.alloc.fork(parent, child))
        self._room[parent] = 0  # its last block may be shared now: the next write goes
        self._room[child] = 0  # to the allocator (copy-on-write)
        if ok and parent in self.paused:
            tokens = self.alloc.seq_tokens(child)
            rec = PauseRecord(child, self.paused[parent].owner, tokens, self.now)
            self.paused[child] = rec
            self.paused_tokens += tokens
            self.pause_log.append(rec)
        self.forks_failed += not ok
        return ok

    def resume(self, seq: Hashable) -> None:
        """The trajectory's next turn was submitted: its pause is over (KV stays held)."""
        self._unpause(seq, "resumed")

    def release(self, seq: Hashable, outcome: str = "released") -> None:
        """Free a sequence the workload no longer needs (no-op if already gone)."""
        self._unpause(seq, outcome)
        self._forget(seq)
        if self.alloc.is_live(seq):
            self.alloc.free(seq)

    def drop_paused(self) -> Hashable | None:
        """Relieve pressure: drop the most recently paused sequence's KV (LIFO, like
        vLLM's victim choice); its next turn recomputes. None when nothing is paused."""
        if not self.paused:
            return None
        seq = next(reversed(self.paused))
        self.release(seq, "dropped")
        self.held_drops += 1
        return seq

    def drop_idle(self, seq: Hashable) -> bool:
        """Drop the held KV of a waiting request's sequence (pressure relief)."""
        if not self.alloc.is_live(seq):
            return False
        self.release(seq, "dropped")
        self.held_drops += 1
        return True

    def _unpause(self, seq: Hashable, outcome: str) -> None:
        rec = self.paused.pop(seq, None)
        if rec is not None:
            rec.end_s = self.now
            rec.outcome = outcome
            self.paused_tokens -= rec.tokens

    @property
    def paused_bytes(self) -> float:
        """KV held by paused sequences (each sequence's tokens; shared blocks per sequence)."""
        return self.paused_tokens * self.kv_bytes_per_token

    # ---------------------------------------------------------------- engine
    def take_step_activity(self) -> tuple[float, int]:
        """(bytes copied, cudaMalloc/cudaFree calls) since the previous call."""
        act = self.alloc.take_activity()
        return act.bytes_copied, act.buffer_allocs + act.buffer_frees

    def plan_decode_run(
        self, requests: Sequence[Any], max_steps: int, base_allocated: float | None = None
    ) -> DecodeRun:
        """How many more decode steps (after the one just scheduled) the memory allows.

        Each step appends one token to every request's sequence. A run stops before any
        step that would miss, copy (buffer growth) or need a new buffer; block kinds may
        take new blocks (from free or evictable cached ones) as long as enough exist.
        ``allocated_bytes[i]`` is the allocated figure during step ``i + 1`` of the run.
        """
        alloc = self.alloc
        if base_allocated is None:
            base_allocated = alloc.metrics().allocated_bytes
        if max_steps <= 0 or not requests or self._capacity is None:
            return DecodeRun(0, np.empty(0))
        room = self._room
        slack = np.fromiter((room.get(r.seq_id, 0) for r in requests), dtype=np.int64,
                            count=len(requests))
        bs = alloc.block_size
        if bs is None:  # buffers: only within the current capacity
            steps = int(min(max_steps, slack.min()))
            return DecodeRun(steps, np.full(steps, float(base_allocated)))
        if slack.max() >= bs:  # not the shape of a block table: step exactly
            return DecodeRun(0, np.empty(0))
        per_residue = np.bincount(slack, minlength=bs)
        r = np.arange(max_steps)  # step r + 1 takes a block for seqs with slack == r mod bs
        taken = np.cumsum(per_residue[r % bs])
        steps = int(np.searchsorted(taken, alloc.available_blocks(), side="right"))
        return DecodeRun(steps, base_allocated + taken[:steps] * (bs * self.kv_bytes_per_token))

    def apply_decode_run(self, requests: Sequence[Any], steps: int, starts: Sequence[float],
                         ) -> None:
        """Append ``steps`` tokens to each request's sequence (a run planned above).

        ``starts[i]`` is the start time of the run's step ``i`` (step 0 was scheduled
        normally). The allocator sees exactly the calls step-by-step ``grow`` would make
        (block fills for content-aware kinds, new blocks), in the same order and at the
        same simulated times, so both modes leave identical state.
        """
        alloc = self.alloc
        bs = alloc.block_size
        if not self.uses_content:
            self._apply_run_plain(requests, steps)
            return
        events: list[tuple[int, int]] = []
        totals = []
        for j, req in enumerate(requests):
            seq = req.seq_id
            r = self._room.get(seq, 0)
            totals.append(alloc.seq_tokens(seq) + self._pending.get(seq, 0))
            if bs is None:
                continue
            events.extend((i, j) for i in range(r + 1, steps + 1, bs))  # a new block
            if self.uses_content:  # a block fills
                events.extend((i, j) for i in range(r if r >= 1 else bs, steps + 1, bs))
        events.sort()
        step = -1
        for i, j in events:
            if i != step and self.uses_content:
                self.set_time(float(starts[i]))
                step = i
            req = requests[j]
            self._append_upto(req, totals[j] + i)
        for j, req in enumerate(requests):  # what is left stays pending
            seq = req.seq_id
            target = totals[j] + steps
            left = target - alloc.seq_tokens(seq)
            self.pending_tokens += left - self._pending.get(seq, 0)
            if left:
                self._pending[seq] = left
                self._owner[seq] = req
            elif seq in self._pending:
                del self._pending[seq], self._owner[seq]
            self._room[seq] = self._capacity(seq) - target

    def _apply_run_plain(self, requests: Sequence[Any], steps: int) -> None:
        """A run on an allocator without content: order and timing do not matter, so each
        sequence gets one append when it outgrows its capacity (else its tokens wait)."""
        room, pending, owner = self._room, self._pending, self._owner
        for req in requests:
            seq = req.seq_id
            r = room.get(seq, 0)
            if steps <= r:
                room[seq] = r - steps
                pending[seq] = pending.get(seq, 0) + steps
                owner[seq] = req
                self.pending_tokens += steps
                continue
            total = pending.get(seq, 0) + steps
            if not self.alloc.append(seq, total):
                raise InvariantError(f"fast path: planned append of {total} to {req!r} missed")
            if seq in pending:
                self._drop_pending(seq)
            self._set_room(seq)

    def _append_upto(self, req: Any, target: int) -> None:
        """Append (pending + new) tokens so the sequence holds ``target`` tokens."""
        seq = req.seq_id
        base = self.alloc.seq_tokens(seq)
        n = target - base
        if n <= 0:
            return
        content = req.content_slice(base, target) if self.uses_content else None
        if not self.alloc.append(seq, n, content=content):
            raise InvariantError(f"fast path: planned append of {n} tokens to {req!r} missed")
        if seq in self._pending:
            self._drop_pending(seq)

    def check_invariants(self) -> None:
        """The allocator's own books, the deferred appends' and the paused set's."""
        self.alloc.check_invariants()
        if sum(self._pending.values()) != self.pending_tokens:
            raise InvariantError("pending tokens out of sync")
        for seq, room in self._room.items():
            if not self.alloc.is_live(seq):
                raise InvariantError(f"room kept for a sequence that is not live: {seq!r}")
            cap = self._capacity(seq)
            free = cap - self._pending.get(seq, 0) - self.alloc.seq_tokens(seq)
            if not 0 <= room <= free:  # room < free only after a fork (a shared last block)
                raise InvariantError(f"{seq!r}: room {room} outside [0, {free}]")
        total = 0
        for seq, rec in self.paused.items():
            if not self.alloc.is_live(seq):
                raise InvariantError(f"paused sequence {seq!r} is not live")
            if self.alloc.seq_tokens(seq) != rec.tokens:
                raise InvariantError(f"paused sequence {seq!r} changed size while paused")
            total += rec.tokens
        if total != self.paused_tokens:
            raise InvariantError(f"paused tokens {self.paused_tokens} != {total}")

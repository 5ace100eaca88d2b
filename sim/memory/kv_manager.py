"""The KV manager: the scheduler's only door to KV memory.

Responsibility: compose one allocator (any kind made by ``make_allocator``) with the
bookkeeping the engine needs around it: admitting a request (a fresh sequence with a
prefix-cache lookup, or a held sequence extended by the new turn), growing a running
request, preemption (drop and recompute), forks, releases, the *pause hook* that decides
what happens to a trajectory's KV between turns (default ``hold``; the pause-policy layer
plugs in here through ``PAUSE_HOOKS``), the KV held by paused trajectories with its
byte-seconds (F29), the HBM side of an offload's reload (``restore`` takes the blocks
before the copy-in; ``pause`` marks a prefetched sequence paused again), and the memory
side of the engine's fast path. Appends that fit in
capacity a sequence already holds are deferred (``sim.memory.deferred``); ``metrics()``
reports the allocator as if they had been made.

It knows requests only by duck typing (``seq_id``, ``num_tokens``, ``num_computed``,
``content_slice``...) so this layer imports nothing above ``sim.memory``; it never asks
which allocator kind it holds, only what the allocator can do (``block_size``,
``seq_capacity_tokens``, ``available_blocks``, ``set_time``, ``prefix_metrics``,
``free_uncached``).

Invariants: a sequence is in ``paused`` only while it is live and no request of it is
running or waiting; ``paused_tokens`` = the sum of the paused sequences' tokens; every
operation that fails (a miss) leaves the allocator unchanged; the deferred ledger's own
invariants (``DeferredAppends.check``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from sim.errors import UnknownNameError
from sim.memory.base import Allocator
from sim.memory.deferred import DecodeRun, DeferredAppends
from sim.memory.errors import InvariantError

HOLD, RECOMPUTE = "hold", "recompute"
#: recompute, and drop the freed context from a prefix cache too (``free_uncached``)
RECOMPUTE_EVICT = "recompute_evict"


class PauseHook(Protocol):
    """Decides at the end of a non-final turn what happens to the trajectory's KV."""

    name: str

    def on_turn_end(self, request: Any, kv: KVManager) -> str:
        """``'hold'`` (keep every block resident), ``'recompute'`` (free it now) or
        ``'recompute_evict'`` (free it now and drop it from a prefix cache too)."""


class _Fixed:
    def __init__(self, name: str) -> None:
        self.name = name

    def on_turn_end(self, request: Any, kv: KVManager) -> str:
        return self.name


#: pause hooks by name; the pause-policy layer registers richer ones here
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
    outcome: str = ""  # 'resumed', 'released', 'dropped' (pressure), 'cancelled', 'rejected'


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
        self.uses_content = bool(uses_content)
        self.ledger = DeferredAppends(allocator, self.uses_content)
        #: ``grow_to(req, tokens)``: make the request's sequence hold ``tokens`` (hot path)
        self.grow_to = self.ledger.grow
        self.capacity_tokens = allocator.max_sequence_tokens  # on the empty pool
        self._set_time = getattr(allocator, "set_time", None)
        self.now = 0.0  # simulation time of the current step (prefix caches' access times)
        self.paused: dict[Hashable, PauseRecord] = {}  # insertion order = pause order
        self.paused_tokens = 0
        self.pause_log: list[PauseRecord] = []
        self.held_drops = 0  # paused/idle sequences dropped to relieve memory pressure
        self.forks_failed = 0  # forks that did not fit (the child recomputes)

    # ----------------------------------------------------------------- time
    def set_time(self, now: float) -> None:
        """The engine's clock (passed on to a prefix cache that wants it)."""
        self.now = now
        if self._set_time is not None:
            self._set_time(now)

    # ------------------------------------------------------------ scheduler
    def can_ever_fit(self, tokens: int) -> bool:
        """Whether a sequence of ``tokens`` fits the empty pool at all."""
        return tokens <= self.capacity_tokens

    def admit(self, req: Any) -> bool:
        """Give a waiting request its KV: extend its held sequence, or allocate a new one.

        A new sequence is matched against the prefix cache (hit tokens need no prefill);
        a held one (the trajectory kept its KV over the pause) starts computed up to what
        it holds. The whole prompt is allocated now (SPEC 3.4.2). False = does not fit;
        nothing changed.
        """
        alloc, seq = self.alloc, req.seq_id
        n = req.num_tokens
        if alloc.is_live(seq):
            self.ledger.flush(seq)
            held = alloc.seq_tokens(seq)
            if held >= n:
                raise InvariantError(f"{req!r}: sequence holds {held} tokens, request has {n}")
            content = req.content_slice(held, n) if self.uses_content else None
            if not alloc.append(seq, n - held, content=content):
                return False
            self.ledger.track(seq)
            if req.admitted_s is None and req.preemptions == 0:
                req.held_tokens = held
            req.num_computed = held
            return True
        content = req.content_slice(0, n) if self.uses_content else None
        result = alloc.allocate(seq, n, content=content)
        if not result:
            return False
        self.ledger.track(seq)
        matched = min(result.matched_tokens, n - 1)
        req.num_computed = matched
        req.lookup_tokens += n
        req.hit_tokens += matched
        return True

    def grow(self, req: Any, n_new: int) -> bool:
        """Room for ``n_new`` more computed tokens of a running request; False = miss."""
        return self.ledger.grow(req, req.num_computed + n_new)

    def preempt(self, req: Any) -> None:
        """Drop a running request's KV (vLLM V1 recompute); it prefills again later."""
        self._free(req.seq_id)
        req.num_computed = 0

    def finish(self, req: Any) -> str:
        """A request generated its last token: release its sequence or ask the pause hook.

        Returns what happened: ``'released'``, ``'hold'``, ``'recompute'`` or
        ``'recompute_evict'``.
        """
        seq = req.seq_id
        if req.last_turn:
            self._free(seq)
            return "released"
        action = self.pause_hook.on_turn_end(req, self)
        if action == HOLD:
            self.ledger.flush(seq)
            self._pause(seq, req.traj_id, self.alloc.seq_tokens(seq))
        elif action == RECOMPUTE or action == RECOMPUTE_EVICT:
            self._free(seq, uncache=action == RECOMPUTE_EVICT)
        else:
            raise InvariantError(f"pause hook {self.pause_hook.name!r} answered {action!r}")
        return action

    # ------------------------------------------------------------- workload
    def fork(self, parent: Hashable, child: Hashable) -> bool:
        """The child shares the parent's KV (copy-on-write or a deep copy, per kind)."""
        if not self.alloc.is_live(parent):
            self.forks_failed += 1
            return False
        self.ledger.flush(parent)
        ok = bool(self.alloc.fork(parent, child))
        if not ok:
            self.forks_failed += 1
            return False
        self.ledger.track(parent, shared_tail=True)  # the next write copies the last block
        self.ledger.track(child, shared_tail=True)
        rec = self.paused.get(parent)
        if rec is not None:
            self._pause(child, rec.owner, self.alloc.seq_tokens(child))
        return True

    def resume(self, seq: Hashable) -> None:
        """The trajectory's next turn was submitted: its pause is over (KV stays held)."""
        self._unpause(seq, "resumed")

    def release(self, seq: Hashable, outcome: str = "released") -> None:
        """Free a sequence the workload no longer needs (no-op if already gone)."""
        self._unpause(seq, outcome)
        self._free(seq)

    def restore(self, seq: Hashable, tokens: int, content: Any = None) -> bool:
        """Take HBM blocks for ``tokens`` of an offloaded sequence about to be copied back
        (before the copy-in starts); False = no room, nothing changed. The sequence is
        live but neither paused nor queued until its next turn is submitted."""
        if self.alloc.is_live(seq):
            raise InvariantError(f"restore: sequence {seq!r} is already resident")
        if not self.alloc.allocate(seq, tokens, content=content):
            return False
        self.ledger.track(seq)
        return True

    def pause(self, seq: Hashable, owner: int) -> None:
        """Mark an idle live sequence paused again (KV prefetched before its tool returned:
        counted in the paused byte-seconds and droppable under pressure)."""
        if seq in self.paused or not self.alloc.is_live(seq):
            raise InvariantError(f"pause: sequence {seq!r} is paused already or not live")
        self.ledger.flush(seq)
        self._pause(seq, owner, self.alloc.seq_tokens(seq))

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

    def _free(self, seq: Hashable, uncache: bool = False) -> None:
        """Free a live sequence; ``uncache``: also drop its context from a prefix cache
        (an allocator without ``free_uncached`` has no cache to drop it from)."""
        self.ledger.untrack(seq)
        if not self.alloc.is_live(seq):
            return
        free_uncached = getattr(self.alloc, "free_uncached", None) if uncache else None
        if free_uncached is not None:
            free_uncached(seq)
        else:
            self.alloc.free(seq)

    def _pause(self, seq: Hashable, owner: int, tokens: int) -> None:
        rec = PauseRecord(seq, owner, tokens, self.now)
        self.paused[seq] = rec
        self.paused_tokens += tokens
        self.pause_log.append(rec)

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
    def memory_state(self):
        """(the allocator's ``MemoryMetrics``, bytes of deferred tokens to add to its
        useful and logical bytes): the cheap form of ``metrics()`` for the recorder."""
        return self.alloc.metrics(), self.ledger.pending_tokens * self.kv_bytes_per_token

    def metrics(self, request_bytes: float | None = None):
        """The allocator's ``MemoryMetrics`` as if every deferred token had been appended."""
        m = self.alloc.metrics(request_bytes)
        pending = self.ledger.pending_tokens
        if not pending:
            return m
        extra = pending * self.kv_bytes_per_token
        useful = m.useful_bytes + extra
        return replace(
            m,
            useful_bytes=useful,
            logical_bytes=m.logical_bytes + extra,
            eta_alloc=useful / m.allocated_bytes if m.allocated_bytes > 0 else None,
            eta_effective=useful / m.pool_bytes,
        )

    def flush_all(self) -> None:
        """Make every deferred append (before inspecting the allocator directly)."""
        self.ledger.flush_all()

    def take_step_activity(self) -> tuple[float, int]:
        """(bytes copied, cudaMalloc/cudaFree calls) since the previous call."""
        act = self.alloc.take_activity()
        return act.bytes_copied, act.buffer_allocs + act.buffer_frees

    def plan_decode_run(
        self,
        requests: Sequence[Any],
        max_steps: int,
        base_allocated: float | None = None,
        late: tuple[Any, int] | None = None,
    ) -> DecodeRun:
        """How many more decode steps of ``requests`` (and of ``late`` from its first
        step on) memory allows (see ``deferred``)."""
        if base_allocated is None:
            base_allocated = self.alloc.metrics().allocated_bytes
        return self.ledger.plan_run(requests, max_steps, base_allocated, late)

    def apply_decode_run(
        self,
        requests: Sequence[Any],
        steps: int,
        starts: Sequence[float],
        late: tuple[Any, int] | None = None,
    ) -> None:
        """Append one token per step to each request's sequence, as ``grow`` would have."""
        self.ledger.apply_run(requests, steps, starts, self.set_time, late)

    def check_invariants(self) -> None:
        """The allocator's own books, the deferred ledger's and the paused set's."""
        self.alloc.check_invariants()
        self.ledger.check()
        total = 0
        for seq, rec in self.paused.items():
            if not self.alloc.is_live(seq):
                raise InvariantError(f"paused sequence {seq!r} is not live")
            if self.alloc.seq_tokens(seq) != rec.tokens:
                raise InvariantError(f"paused sequence {seq!r} changed size while paused")
            total += rec.tokens
        if total != self.paused_tokens:
            raise InvariantError(f"paused tokens {self.paused_tokens} != {total}")


__all__ = [
    "HOLD",
    "PAUSE_HOOKS",
    "RECOMPUTE",
    "RECOMPUTE_EVICT",
    "DecodeRun",
    "KVManager",
    "PauseHook",
    "PauseRecord",
    "pause_hook",
]

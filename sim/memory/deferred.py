"""Deferred appends: tell an allocator about new tokens only when it has work to do.

Responsibility: a token that fits in capacity its sequence already holds (the rest of its
last block, or of its buffer) costs the allocator nothing but a counter, so ``grow`` only
counts it here (*pending*). The allocator is told (one ``append`` with all pending tokens)
when the sequence needs new capacity, when a content-aware allocator (a prefix cache)
would see a block fill, so it caches blocks at the same simulated time as eager appends,
and before anything else happens to the sequence (``flush``). ``extra_tokens`` lets the
owner report metrics as if everything had been appended. ``grow_each`` is ``grow`` for a
step's decodes in one call (it stops at the first miss). The engine's fast path asks the
same ledger how many decode steps fit (``plan_run``) and replays a run's appends
(``apply_run``) with exactly the calls step-by-step growth would make, or, where the
allocator says their order cannot matter (``appends_in_bulk``), one append per sequence.

The clock (``clock``, ``advance``, ``settle``; a scheduler's decode cohort drives it):
a clocked sequence grows by one token a tick without being touched; its ``total``,
``room`` and ``pending`` are stored as of the tick it was clocked or settled at
(``_since``), and it is filed under the tick whose growth needs a new block, so a step or
a run touches only the sequences at a block boundary; anything else done to it settles it
first.

Invariants, for every tracked sequence, with ``d`` the ticks since a clocked sequence was
stored (0 for the others): ``total + d = allocator tokens + pending + d``;
``0 <= room - d <= capacity - total - d`` (equal except after a fork, whose shared last
block must be copied on the next write, so ``room`` is 0 then); ``pending_tokens`` = sum
of pending plus every clocked sequence's ``d``; each clocked sequence filed once, at the
tick its room runs out.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import attrgetter
from typing import Any

from sim.errors import InvariantError


@dataclass(slots=True)
class DecodeRun:
    """Memory plan of ``steps`` more decode steps of the same sequences."""

    steps: int  # how many more steps fit without a miss, a copy or a new buffer
    allocated_bytes: list[float]  # allocated bytes during each of those steps


_seq_id = attrgetter("seq_id")


class DeferredAppends:
    """Per-sequence token ledger in front of one allocator."""

    def __init__(self, alloc, uses_content: bool) -> None:
        self.alloc = alloc
        self.uses_content = uses_content
        self._capacity = alloc.seq_capacity_tokens  # every kind declares it
        self._bs = alloc.block_size  # block kinds: a table maps ceil(tokens / B) blocks
        self.total: dict[Hashable, int] = {}  # tokens, pending ones included
        self.room: dict[Hashable, int] = {}  # tokens that still fit without new capacity
        self.pending: dict[Hashable, int] = {}  # counted here, not yet appended
        self.owner: dict[Hashable, Any] = {}  # the request whose content they are
        self.pending_tokens = 0
        # the clock (a scheduler's decode cohort, ``clock``): clocked sequences grow by one
        # token a tick; their ``total`` / ``room`` / ``pending`` are stored as of the tick
        # in ``_since`` (``settle`` brings them to now), and ``_at`` files each under the
        # tick whose growth needs a new block (its room is 0 before it), with its order
        self.clk = 0
        self._since: dict[Hashable, int] = {}
        self._at: dict[int, list[tuple[int, Hashable]]] = {}
        self._clockable = not uses_content and self._bs is not None

    # ----------------------------------------------------------------- tracking
    def track(self, seq: Hashable, shared_tail: bool = False) -> None:
        """(Re)read a sequence after the allocator changed it (allocate, append, fork)."""
        if seq in self._since:
            self.settle(seq)
        tokens = self.alloc.seq_tokens(seq)
        self.total[seq] = tokens
        if shared_tail:
            self.room[seq] = 0
        else:
            self.room[seq] = self._capacity(seq) - tokens

    def untrack(self, seq: Hashable) -> None:
        """The sequence is about to be freed: its pending tokens need not be appended."""
        if seq in self._since:
            self.settle(seq)
        if seq in self.pending:
            self._drop(seq)
        self.total.pop(seq, None)
        self.room.pop(seq, None)

    def _drop(self, seq: Hashable) -> None:
        self.pending_tokens -= self.pending.pop(seq)
        del self.owner[seq]

    # ------------------------------------------------------------------- growth
    def grow(self, req: Any, target: int) -> bool:
        """Make ``req``'s sequence hold ``target`` tokens; False = miss (nothing changed)."""
        seq = req.seq_id
        if seq in self._since:
            self.settle(seq)
        have = self.total[seq]
        need = target - have
        if need <= 0:
            return True
        room = self.room[seq]
        if need < room or (need == room and not self.uses_content):
            self.room[seq] = room - need
            self.total[seq] = target
            p = self.pending.get(seq)
            if p is None:
                self.pending[seq] = need
                self.owner[seq] = req
            else:
                self.pending[seq] = p + need
            self.pending_tokens += need
            return True
        pending = self.pending
        p = pending.get(seq)
        base = have if p is None else have - p
        content = req.content_slice(base, target) if self.uses_content else None
        if not self.alloc.append(seq, target - base, content=content):
            return False
        if p is not None:  # (``_drop``)
            del pending[seq], self.owner[seq]
            self.pending_tokens -= p
        self._appended(seq, target)
        return True

    def _appended(self, seq: Hashable, tokens: int) -> None:
        """``track`` after an append brought ``seq`` to ``tokens`` (no shared tail): a block
        kind's room is the rest of its last block, without asking the allocator."""
        bs = self._bs
        if bs is None:
            self.track(seq)
            return
        self.total[seq] = tokens
        self.room[seq] = -tokens % bs

    def grow_each(self, requests: Sequence[Any], n: int = 1) -> int:
        """``grow(req, req.num_computed + n)`` for each request in order (a step's decodes
        at once); returns how many succeeded: it stops at the first miss, which changes
        nothing (so the caller can handle that request and the rest one by one). Where the
        allocator lets appends go in a batch (``bulk_free_blocks``), the block-boundary
        appends that surely fit go in one ``append_each``, in order, made before any other
        allocator call (``_queue``)."""
        if self._since:
            self.settle_all()
        total, room, pending, owner = self.total, self.room, self.pending, self.owner
        strict = self.uses_content  # a prefix cache must see the block fill: no == room
        bs = self._bs
        budget = None if bs is None or strict else self.alloc.bulk_free_blocks()
        bulk: list[tuple[Hashable, int]] = []  # appends known to fit, not yet made
        added = done = 0
        try:  # what was queued is made even if a misuse raises (the books stay one)
            for req in requests:
                seq = req.seq_id
                target = req.num_computed + n
                t = total[seq]
                need = target - t
                if need > 0:
                    r = room[seq]
                    if need < r or (need == r and not strict):
                        room[seq] = r - need
                        total[seq] = target
                        p = pending.get(seq)
                        if p is None:
                            pending[seq] = need
                            owner[seq] = req
                        else:
                            pending[seq] = p + need
                        added += need
                    elif budget is not None and (t + r) % bs == 0 and (k := (need - r + bs - 1) // bs) <= budget:  # fmt: skip
                        budget -= k  # the last block is the sequence's own: k new blocks
                        self._queue(seq, t, target, bulk)
                    else:
                        if bulk:
                            self._append_queued(bulk)
                        grown = self.grow(req, target)
                        if budget is not None:
                            budget = self.alloc.bulk_free_blocks()
                        if not grown:
                            break
                done += 1
        finally:
            self.pending_tokens += added
            self._append_queued(bulk)
        return done

    def _queue(
        self, seq: Hashable, tokens: int, target: int, bulk: list[tuple[Hashable, int]]
    ) -> None:
        """Book ``seq``'s growth from ``tokens`` to ``target`` as appended (its pending
        tokens with it) and queue the allocator's append in ``bulk``."""
        p = self.pending.pop(seq, None)
        if p is not None:
            del self.owner[seq]
            self.pending_tokens -= p
        else:
            p = 0
        bulk.append((seq, target - tokens + p))
        self.total[seq] = target
        self.room[seq] = -target % self._bs

    def _append_queued(self, bulk: list[tuple[Hashable, int]]) -> None:
        """Make the queued appends (they fit: ``_queue`` counted their blocks)."""
        if bulk:
            self.alloc.append_each(bulk)
            bulk.clear()

    def flush(self, seq: Hashable) -> None:
        """Append a sequence's pending tokens (they fit: no new capacity is needed)."""
        if seq in self._since:
            self.settle(seq)
        p = self.pending.get(seq)
        if not p:
            return
        req = self.owner[seq]
        base = self.total[seq] - p
        content = req.content_slice(base, base + p) if self.uses_content else None
        if not self.alloc.append(seq, p, content=content):
            raise InvariantError(f"deferred append of {p} tokens to {seq!r} missed")
        self._drop(seq)

    def flush_all(self) -> None:
        self.settle_all()
        for seq in list(self.pending):
            self.flush(seq)

    # ------------------------------------------------------------------ the clock
    def clock(self, req: Any, order: int) -> bool:
        """From now on ``req``'s sequence grows by one token a tick (``advance``) until it
        is settled; ``order``: its place among the clocked ones (appends go in that order).
        False (nothing changed) where the ledger cannot: a content allocator, a buffer
        kind, a fork's shared last block, or already clocked."""
        seq = req.seq_id
        if not self.clockable or seq in self._since or seq not in self.room:
            return False
        r = self.room[seq]
        if not 0 <= r < self._bs or (r == 0 and self.total[seq] % self._bs):
            return False
        if seq not in self.pending:
            self.pending[seq] = 0
            self.owner[seq] = req
        t = self.clk
        self._since[seq] = t
        b = self._at.get(t + r + 1)
        if b is None:
            self._at[t + r + 1] = [(order, seq)]
        else:
            b.append((order, seq))
        return True

    @property
    def clocked(self) -> int:
        return len(self._since)

    @property
    def clockable(self) -> bool:
        """Whether ``clock`` can take sequences at all: appends without content into a
        block kind that takes them in a batch (``bulk_free_blocks``: no prefix index, no
        side groups, no plug-in's own appends)."""
        return self._clockable and self.alloc.bulk_free_blocks() is not None

    def settle(self, seq: Hashable) -> None:
        """Bring a clocked sequence's books to now and stop its clock."""
        t0 = self._since.pop(seq, None)
        if t0 is None:
            return
        d = self.clk - t0
        r = self.room[seq]
        b = self._at[t0 + r + 1]
        for i, (_, s) in enumerate(b):
            if s == seq:
                del b[i]
                break
        if not b:
            del self._at[t0 + r + 1]
        self.total[seq] += d
        self.room[seq] = r - d
        self.pending[seq] += d

    def settle_all(self) -> None:
        for seq in list(self._since):
            self.settle(seq)

    def advance(self, steps: int, others: Sequence[tuple[int, Any, int]], n_requests: int) -> bool:
        """Every clocked sequence grows by ``steps`` tokens and each of ``others``
        (``(order, request, target)``, not clocked) to its target, as ``grow_each`` /
        ``_grow_needs`` would: the block-boundary appends in one ``append_each`` in
        ``order``. Only where all of them surely fit in free blocks (``bulk_free_blocks``)
        and ``n_requests`` (the batch's size) is the clocked and the others together;
        False (nothing changed) otherwise: the caller settles and grows them one by one.
        Steps: the clocked sequences that cross a block boundary (``_crossing``) and the
        others' needs (``_others_needs``) count the blocks; then those crossing settle and
        are filed again (``_settle_crossing``, one pass), the others grow
        (``_grow_others``), and the appends go in one batch: in ``order``, or as they come
        where the allocator says their order cannot matter (``appends_unordered``)."""
        if len(self._since) + len(others) != n_requests:
            return False
        alloc = self.alloc
        budget = alloc.bulk_free_blocks()
        if budget is None:
            return False
        clk1 = self.clk + steps
        if steps == 1:  # (a step: one tick's file, one block each; no ``_crossing`` call)
            cross = self._at.get(clk1, ())
            blocks = len(cross)
        else:
            cross, blocks = self._crossing(steps, clk1)
        plain: list[tuple[int, Any, int, int]] = []
        if others:
            more = self._others_needs(others, plain)
            if more is None:
                return False
            blocks += more
        if blocks > budget:
            return False
        # fits: apply
        self.clk = clk1
        self.pending_tokens += steps * len(self._since)
        at = self._at  # the ticks passed: their files go (``cross`` holds them)
        if steps == 1:
            at.pop(clk1, None)
        else:
            for t in range(clk1 - steps + 1, clk1 + 1):
                at.pop(t, None)
        if alloc.appends_unordered():  # no order to keep: ``(seq, tokens)`` straight away
            bare: list[tuple[Hashable, int]] = []
            if cross:
                self._settle_crossing(cross, clk1, bare, None)
            if plain:
                self._grow_others(plain, bare, None)
            if bare:
                alloc.append_each(bare)
            return True
        items: list[tuple[int, Hashable, int]] = []
        if cross:
            self._settle_crossing(cross, clk1, None, items)
        if plain:
            self._grow_others(plain, None, items)
        if items:
            if len(items) > 1:
                items.sort()
            alloc.append_each([(seq, n) for _, seq, n in items])
        return True

    def _crossing(self, steps: int, clk1: int) -> tuple[Sequence[tuple[int, Hashable]], int]:
        """The clocked sequences (``(order, seq)``) whose block boundary falls in the next
        ``steps`` ticks (their files ``_at``), and the blocks they take by tick ``clk1``:
        each one's last block is its own (``clock``), so ceil(overflow / B), where one
        filed at tick ``t`` overflows by ``clk1 - t + 1`` tokens (one block each for a
        window of at most B ticks): counted per file, not per sequence."""
        at, bs = self._at, self._bs
        cross = []
        blocks = 0
        for t in range(clk1 - steps + 1, clk1 + 1):
            b = at.get(t)
            if b:
                cross += b
                blocks += len(b) * ((clk1 - t + bs) // bs)
        return cross, blocks

    def _others_needs(
        self, others: Sequence[tuple[int, Any, int]], plain: list[tuple[int, Any, int, int]]
    ) -> int | None:
        """The blocks the requests off the clock take to reach their targets, each put in
        ``plain`` as ``(order, req, target, need)``; None when one is clocked after all or
        needs a block while its last one is shared and partly filled (no batch then)."""
        bs, total, room, since = self._bs, self.total, self.room, self._since
        blocks = 0
        for order, req, target in others:
            seq = req.seq_id
            if seq in since:
                return None
            t = total[seq]
            need = target - t
            if need > 0:
                r = room[seq]
                if need > r:
                    if (t + r) % bs:
                        return None
                    blocks += (need - r + bs - 1) // bs
            plain.append((order, req, target, need))
        return blocks

    def _settle_crossing(
        self,
        cross: Sequence[tuple[int, Hashable]],
        clk1: int,
        bare: list[tuple[Hashable, int]] | None,
        items: list[tuple[int, Hashable, int]] | None,
    ) -> None:
        """Bring the crossing sequences' books to tick ``clk1``, their appends (pending
        tokens included) put in ``bare`` as ``(seq, tokens)`` or, where their order
        matters, in ``items`` as ``(order, seq, tokens)``; and clock each again from
        ``clk1``, filed at the tick its new last block fills (after the passed ticks'
        files went: ``advance``)."""
        bs, total, room, pending, since = self._bs, self.total, self.room, self.pending, self._since
        at = self._at
        dropped = 0
        for e in cross:
            seq = e[1]
            d = clk1 - since[seq]
            target = total[seq] + d
            p = pending[seq] + d
            pending[seq] = 0  # (its owner stays: clocked again)
            dropped += p
            if bare is not None:
                bare.append((seq, p))
            else:
                items.append((e[0], seq, p))  # type: ignore[union-attr]
            total[seq] = target
            r = room[seq] = -target % bs
            since[seq] = clk1
            key = clk1 + r + 1
            b = at.get(key)
            if b is None:
                at[key] = [e]
            else:
                b.append(e)
        self.pending_tokens -= dropped

    def _grow_others(
        self,
        plain: Sequence[tuple[int, Any, int, int]],
        bare: list[tuple[Hashable, int]] | None,
        items: list[tuple[int, Hashable, int]] | None,
    ) -> None:
        """Each request off the clock grows to its target (``_others_needs``): within its
        room only counted (pending), past it an append in ``bare`` or ``items`` (as
        ``_settle_crossing``'s)."""
        bs, total, room, pending, owner = self._bs, self.total, self.room, self.pending, self.owner
        added = 0
        for order, req, target, need in plain:
            if need <= 0:
                continue
            seq = req.seq_id
            r = room[seq]
            if need <= r:
                room[seq] = r - need
                total[seq] = target
                p = pending.get(seq)
                if p is None:
                    pending[seq] = need
                    owner[seq] = req
                else:
                    pending[seq] = p + need
                added += need
            else:
                p = pending.pop(seq, None)
                if p is not None:
                    del owner[seq]
                    self.pending_tokens -= p
                else:
                    p = 0
                if bare is not None:
                    bare.append((seq, target - total[seq] + p))
                else:
                    items.append((order, seq, target - total[seq] + p))  # type: ignore[union-attr]
                total[seq] = target
                room[seq] = -target % bs
        self.pending_tokens += added

    # ----------------------------------------------------------------- fast path
    def plan_run(
        self,
        requests: Sequence[Any],
        max_steps: int,
        base_allocated: float,
        late: tuple[Any, int] | None = None,
        evict: bool = True,
        apart: Sequence[tuple[int, Any]] | None = None,
    ) -> DecodeRun:
        """How many more steps, each appending one token per request, fit in memory
        (``evict`` False: in free blocks alone, no cached block evicted).
        ``apart``: the requests that are not clocked (``clock``), when the caller knows
        them (the others are every clocked sequence: their rooms are read from the
        clock's files); None: every clocked sequence is settled first.

        ``late = (request, first)``: one more request that appends only from remaining
        step ``first`` on (a prompt that finishes its prefill inside the run). A run stops
        before any step that would miss, copy (buffer growth) or need a new buffer; block
        kinds may take new blocks (free or evictable cached ones) while enough exist; a
        fork's shared last block (``track(shared_tail=True)``: its first write copies it)
        makes no run.
        ``allocated_bytes[i]`` is the allocated figure during step ``i + 1``.

        Block boundaries by arithmetic, in plain Python (runs are planned a few steps long:
        numpy's per-call cost was most of this): a sequence with ``room`` tokens left in
        its last block takes a block at steps ``room + 1, room + 1 + B, ...``, so the
        blocks taken per step repeat with period ``B``, counted once by ``room`` for the
        first ``min(B, max_steps)`` steps (no list of ``B`` counts: a huge ``B`` is cheap). A
        negative room is a broken book (``InvariantError``).
        """
        if max_steps <= 0 or not (requests or late):
            return DecodeRun(0, [])
        clocked = self._since and apart is not None and len(self._since) + len(apart) == len(requests)
        if self._since and not clocked:
            self.settle_all()
        bs = self.alloc.block_size
        if bs is None:  # buffers: only within the current capacity
            return self._plan_in_buffers(requests, max_steps, base_allocated, late)
        if self.alloc.kv_groups is not None:  # side groups take and free blocks: step exactly
            return DecodeRun(0, [])
        if clocked:  # the clocked sequences' rooms are read from the clock's files
            requests = [req for _, req in apart]  # type: ignore[union-attr]
        per_step = self._blocks_per_step(requests, max_steps, late, bool(clocked))
        if per_step is None:
            return DecodeRun(0, [])
        taken = list(accumulate(per_step))
        have = self.alloc.available_blocks() if evict else self.alloc.free_blocks
        steps = bisect_right(taken, have)
        block_bytes = bs * self.alloc.kv_bytes_per_token
        return DecodeRun(steps, [base_allocated + t * block_bytes for t in taken[:steps]])

    def _plan_in_buffers(
        self, requests: Sequence[Any], max_steps: int, base_allocated: float,
        late: tuple[Any, int] | None,
    ) -> DecodeRun:  # fmt: skip
        """``plan_run`` of a buffer kind: as many steps as every buffer's room allows
        (the late request's from its first step), the allocated figure unchanged."""
        room = self.room
        steps = max_steps
        if requests:
            steps = min(steps, min([room[seq] for seq in map(_seq_id, requests)]))
        if late is not None:
            steps = min(steps, late[1] - 1 + room[late[0].seq_id])
        steps = max(0, steps)
        return DecodeRun(steps, [float(base_allocated)] * steps)

    def _blocks_per_step(
        self, requests: Sequence[Any], max_steps: int, late: tuple[Any, int] | None,
        clocked: bool,
    ) -> list[int] | None:  # fmt: skip
        """``plan_run`` of a block kind: the blocks each of the ``max_steps`` steps takes
        (``requests`` and, with ``clocked``, every clocked sequence by its file; the late
        request from its first step), or None where no run is planned (a shared partly
        filled last block, whose first write copies it: one block more at once, which
        this arithmetic does not count; a room no block table leaves, ``_off_shape``)."""
        room, total, bs = self.room, self.total, self._bs
        late_room = 0 if late is None else room[late[0].seq_id]
        if not 0 <= late_room < bs:
            return self._off_shape(late_room)
        shared = late is not None and late_room == 0 and total[late[0].seq_id] % bs != 0
        # step r + 1 takes a block for every seq with room == r % B: the first
        # min(B, max_steps) residues, repeated (O(batch + steps), whatever B is)
        width = min(bs, max_steps)
        per_step = [0] * width
        if clocked:
            at, clk = self._at, self.clk
            for r in range(width):
                b = at.get(clk + r + 1)
                if b:
                    per_step[r] += len(b)
        for seq in map(_seq_id, requests):
            r = room[seq]
            if 0 < r < width:
                per_step[r] += 1
            elif r == 0:
                if total[seq] % bs:
                    shared = True
                per_step[0] += 1
            elif not 0 <= r < bs:
                return self._off_shape(r)
        if shared:
            return None
        if max_steps > bs:
            per_step = (per_step * (max_steps // bs + 1))[:max_steps]
        if late is not None:  # its appends start at step `first`: blocks at first + room + t B
            for r in range(late[1] - 1 + late_room, max_steps, bs):
                per_step[r] += 1
        return per_step

    @staticmethod
    def _off_shape(room: int) -> None:
        """A room no block table leaves: ``B`` or more (a buffer-like sequence behind a
        block kind) is stepped exactly (no run: None); a negative one is a broken book."""
        if room < 0:
            raise InvariantError(f"plan_run: a negative room ({room})")
        return None

    def apply_run(
        self,
        requests: Sequence[Any],
        steps: int,
        starts: Sequence[float],
        set_time,
        late: tuple[Any, int] | None = None,
        publishes: Sequence[tuple[int, Callable[[], None]]] = (),
        apart: Sequence[tuple[int, Any]] | None = None,
    ) -> None:
        """Append ``steps`` tokens to each request's sequence, as ``grow`` would have
        (and ``steps - first + 1`` to the ``late`` one, from remaining step ``first``).
        ``publishes``: ``(step, publish)`` pairs in step order, each step in
        ``1..steps``; ``publish`` is called at ``starts[step]``, before that step's
        appends (a prefill chunk was computed at the end of the step before: a prefix
        cache that publishes computed KV sees it then, stamped then); the appends between
        two of them go in windows, each in bulk where the allocator takes it so.

        ``starts[i]`` is the start of the run's step ``i`` (step 0 was grown normally).
        Without content, order and timing cannot matter: each sequence gets at most one
        append. With content, the allocator sees every block fill and every new block at
        the step it happens (``set_time``), in scheduling order (the late request last),
        unless it says the order cannot matter (``Allocator.appends_in_bulk``: a radix
        cache whose sequences each grow a leaf of their own): then one append per sequence.
        ``apart``: as ``plan_run``'s (the clocked sequences advance by ``steps`` ticks).
        """
        if self._since:
            if apart is not None and not publishes and self.advance(
                steps, [(o, req, self.total[req.seq_id] + steps) for o, req in apart], len(requests)
            ):
                if late is not None and late[1] <= steps:
                    req = late[0]
                    if not self.grow(req, self.total[req.seq_id] + steps - late[1] + 1):
                        raise InvariantError(f"fast path: planned growth of {req!r} missed")
                return
            self.settle_all()
        if not self.uses_content or self.alloc.block_size is None:
            self._grow_by(requests, steps)
            if late is not None and late[1] <= steps:
                req = late[0]
                if not self.grow(req, self.total[req.seq_id] + steps - late[1] + 1):
                    raise InvariantError(f"fast path: planned growth of {req!r} missed")
            for f, publish in publishes:  # (no content: nothing to order them with)
                set_time(float(starts[f]))
                publish()
            return
        # each sequence once (C-level: one pass; a sequence without an event is only
        # counted below, so a second entry of it would grow it twice unseen)
        ids = set(map(_seq_id, requests))
        if len(ids) != len(requests) or (late is not None and late[0].seq_id in ids):
            raise InvariantError("fast path: a sequence twice in one run")
        # the plan: the sequences with an event in the run (a block fill or a new block),
        # the late one last, and their tokens "before step 1"; one whose room outlasts the
        # run (its first fill at step room > steps, its new block after it) has none: its
        # tokens go pending now (``_grow_needs``, where they would go after the windows:
        # no allocator call reads the ledger's books)
        total, room, pending, owner = self.total, self.room, self.pending, self.owner
        bs = self._bs
        plan: list[tuple[Any, int]] = []
        bases: list[int] = []
        # one window (no publication, no late request): its events (``_events(plan, 1,
        # steps)``) read here, in the same pass
        whole: list[tuple[int, int, int, int, int]] | None = None
        if not publishes and (late is None or late[1] > steps):
            whole = []
        added = 0
        try:
            for req in requests:
                seq = req.seq_id
                r = room[seq]
                if r > steps:
                    if steps <= 0:
                        continue
                    room[seq] = r - steps
                    total[seq] += steps
                    p = pending.get(seq)
                    if p is None:
                        pending[seq] = steps
                        owner[seq] = req
                    else:
                        pending[seq] = p + steps
                    added += steps
                    continue
                if whole is not None:  # its first new block at step r + 1, its first fill
                    new, fill = r + 1, r or bs  # at r (a full last block: at bs)
                    last_new = new + (steps - new) // bs * bs if new <= steps else 0
                    last_fill = fill + (steps - fill) // bs * bs if fill <= steps else 0
                    if new <= steps or fill <= steps:
                        whole.append((last_fill, len(plan), max(last_new, last_fill), new, fill))
                plan.append((req, 1))
                bases.append(total[seq])
        finally:
            self.pending_tokens += added
        if late is not None and late[1] <= steps:
            plan.append(late)
            bases.append(total[late[0].seq_id] - late[1] + 1)
        # every window's events from the rooms before any append
        cuts = [f for f, _ in publishes]
        if whole is not None:
            windows = [whole]
        else:
            bounds = zip([1, *cuts], [*(f - 1 for f in cuts), steps], strict=True)
            windows = [self._events(plan, lo, hi) for lo, hi in bounds]
        self._apply_window(plan, bases, windows[0], cuts[0] - 1 if cuts else steps, starts, set_time)
        for i, (f, publish) in enumerate(publishes):
            set_time(float(starts[f]))
            publish()
            hi = cuts[i + 1] - 1 if i + 1 < len(cuts) else steps
            self._apply_window(plan, bases, windows[i + 1], hi, starts, set_time)
        # what is left of the run stays pending
        self._grow_needs([req for req, _ in plan],
                         [bases[j] + steps - total[req.seq_id] for j, (req, _) in enumerate(plan)])  # fmt: skip

    def _events(self, plan, lo: int, hi: int) -> list[tuple[int, int, int, int, int]]:
        """The sequences with an event in steps ``lo..hi`` of the run: (its last block
        fill there or 0, its index in the plan, its last event there, its first new block
        and its first block fill from ``lo`` on); a sequence's fills come bs - 1 steps
        after its new blocks (at its first step when its room is 0), and each repeats
        every bs steps. Read from the rooms before the run's appends."""
        bs, room = self.alloc.block_size, self.room
        todo = []
        for j, (req, first) in enumerate(plan):
            r = room[req.seq_id]
            new = first + r
            fill = new - 1 if r else new + bs - 1
            if new < lo:
                new += -(-(lo - new) // bs) * bs
            if fill < lo:
                fill += -(-(lo - fill) // bs) * bs
            if new <= hi or fill <= hi:
                last_new = new + (hi - new) // bs * bs if new <= hi else 0
                last_fill = fill + (hi - fill) // bs * bs if fill <= hi else 0
                todo.append((last_fill, j, max(last_new, last_fill), new, fill))
        return todo

    def _apply_window(self, plan, bases, todo, steps: int, starts, set_time) -> None:
        """The events ``todo`` (``_events``, up to step ``steps``): in bulk where the
        allocator takes them so, else in step order."""
        if todo and not self._apply_in_bulk(plan, bases, todo, starts, set_time):
            self._apply_in_order(plan, bases, todo, steps, starts, set_time)

    def _apply_in_order(self, plan, bases, todo, steps: int, starts, set_time) -> None:
        """``apply_run``'s appends in step order: every new block and every block fill of
        the sequences in ``todo`` at its step's start, sequences in plan order within a
        step (what stepping would do)."""
        bs = self.alloc.block_size
        events = [(i, t[1]) for t in todo for e in t[3:] for i in range(e, steps + 1, bs)]
        events.sort()
        step = -1
        for i, j in events:
            if i != step:
                set_time(float(starts[i]))
                step = i
            self._append_upto(plan[j][0], bases[j] + i)

    def _apply_in_bulk(self, plan, bases, todo, starts, set_time) -> bool:
        """``apply_run``'s appends one per sequence, if the allocator takes them so
        (``Allocator.append_in_bulk``; False: nothing changed): each sequence with an event
        is appended up to its last event of the run (a new block or a block fill) after the
        time of its last fill, in the order of those fills (so every path's last access is
        its latest fill), and the clock ends at the run's last event. ``todo``: ``(last
        fill or 0, plan index, last event, ...)`` per sequence."""
        todo.sort()
        last_event = clock = 0  # clock: the step whose start was set last (0: none yet)
        total, pending = self.total, self.pending
        items: list[tuple[Hashable, int]] = []
        contents, times_s, targets = [], [], []
        for fill, j, end, _, _ in todo:
            if fill != clock and fill > 0:  # setting the same time again changes nothing
                times_s.append(float(starts[fill]))
                clock = fill
            else:
                times_s.append(None)
            req = plan[j][0]
            seq, target = req.seq_id, bases[j] + end
            base = total[seq]
            if seq in pending:
                base -= pending[seq]
            items.append((seq, target - base))
            contents.append(req.content_slice(base, target))
            targets.append(target)
            if end > last_event:
                last_event = end
        # (each sequence once: ``apply_run`` checked; each from its base before the run)
        if not self.alloc.append_in_bulk(items, contents, times_s):
            return False
        # each sequence's pending tokens went with its append (``_drop``), and its room is
        # the rest of its last block (``_appended``: a block kind)
        room, owner, bs = self.room, self.owner, self._bs
        dropped = 0
        for (seq, _), target in zip(items, targets, strict=True):
            if seq in pending:
                dropped += pending.pop(seq)
                del owner[seq]
            total[seq] = target
            room[seq] = -target % bs
        self.pending_tokens -= dropped
        set_time(float(starts[last_event]))  # the clock where the appends one by one leave it
        return True

    def _grow_by(self, requests: Sequence[Any], steps: int) -> None:
        """Each request's sequence grows by ``steps`` tokens (no content: one append at
        most per sequence, when the run passes its room)."""
        self._grow_needs(requests, repeat(steps))

    def _grow_needs(self, requests: Sequence[Any], needs: Iterable[int]) -> None:
        """Each request's sequence grows by its ``needs`` tokens (``grow``, with the
        pending arithmetic in line, and the block-boundary appends made in one
        ``append_each``, in request order, where the allocator offers it: the planned run
        counted their blocks): a miss is a broken plan (``InvariantError``)."""
        total, room, pending, owner = self.total, self.room, self.pending, self.owner
        strict = self.uses_content
        bs = self._bs
        batched = not (bs is None or strict) and self.alloc.bulk_free_blocks() is not None
        bulk: list[tuple[Hashable, int]] = []
        added = 0
        try:
            for req, need in zip(requests, needs, strict=False):  # needs may be endless
                if need <= 0:
                    continue
                seq = req.seq_id
                r = room[seq]
                if need < r or (need == r and not strict):
                    room[seq] = r - need
                    total[seq] += need
                    p = pending.get(seq)
                    if p is None:
                        pending[seq] = need
                        owner[seq] = req
                    else:
                        pending[seq] = p + need
                    added += need
                    continue
                t = total[seq]
                if batched:  # a shared last block too: ``append_each`` copies it in turn
                    self._queue(seq, t, t + need, bulk)
                elif not self.grow(req, t + need):
                    raise InvariantError(f"fast path: planned growth of {req!r} missed")
        finally:
            self.pending_tokens += added
            self._append_queued(bulk)

    def _append_upto(self, req: Any, target: int) -> None:
        seq = req.seq_id
        base = self.total[seq] - self.pending.get(seq, 0)
        content = req.content_slice(base, target)
        if not self.alloc.append(seq, target - base, content=content):
            raise InvariantError(f"fast path: planned append to {req!r} missed")
        if seq in self.pending:
            self._drop(seq)
        self._appended(seq, target)

    # ---------------------------------------------------------------- checking
    def tokens(self, seq: Hashable) -> int | None:
        """Tokens of a tracked sequence, pending ones included (None: not tracked)."""
        t = self.total.get(seq)
        if t is not None and seq in self._since:
            t += self.clk - self._since[seq]
        return t

    def check(self) -> None:
        since, clk = self._since, self.clk
        ticks = {seq: clk - t0 for seq, t0 in since.items()}
        if sum(self.pending.values()) + sum(ticks.values()) != self.pending_tokens:
            raise InvariantError("pending tokens out of sync")
        filed = {s: t - self.room[s] - 1 for t, b in self._at.items() for _, s in b}
        if filed != since or sum(map(len, self._at.values())) != len(since):  # once each
            raise InvariantError("clocked sequences not filed at their next block boundary")
        for seq, total in self.total.items():
            d = ticks.get(seq, 0)
            total += d
            if not self.alloc.is_live(seq):
                raise InvariantError(f"tracked sequence {seq!r} is not live")
            if total != self.alloc.seq_tokens(seq) + self.pending.get(seq, 0) + d:
                raise InvariantError(f"{seq!r}: total {total} != tokens + pending")
            free = self._capacity(seq) - total
            if not 0 <= self.room[seq] - d <= free:
                raise InvariantError(f"{seq!r}: room {self.room[seq] - d} outside [0, {free}]")

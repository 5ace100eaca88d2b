"""``paged``: PagedAttention blocks with block tables, refcounts and copy-on-write (F13-F15,
F16, rules 3.4, 3.5).

The pool is ``floor(pool_bytes / (block_size * kv_bytes_per_token))`` blocks (F13); what
does not make a whole block is reported as ``remainder_bytes``. A sequence of S tokens maps
``ceil(S / B)`` blocks through its block table (F14); only its last block can be partly
filled (tail waste, F15). A fork copies the parent's table and increments each block's
refcount: no tensor bytes move (F16). A write into a block whose refcount is above one
(only ever the partly filled last block) first copies it: a new block from the free queue,
``cow_copies`` += 1, ``bytes_copied`` += one block (the chapter copies the B slots), the old
block loses a reference. Freeing decrements every block of the table, last block first;
blocks that reach zero go back to the FIFO free queue (``block_pool``).

Count mode (the start of every allocator): while no block's identity matters, no block has
an id. Without a fork, a hold, an index or side groups every table is private and full but
for its last block, so a sequence of S tokens maps ``ceil(S / B)`` blocks of its own and
the pool (``block_pool.CountPool``) keeps only its free count: ``allocate``, ``append``,
``append_each`` and ``free`` move counts in O(1) per sequence (no ``take``, no table
list, no refcount). The first need of identity (``track_block_ids``: a fork, a hold,
``use_kv_groups`` with side groups, ``compose``, ``block_table``) gives the live tables
ids once, in O(pool): the sequences in admission order, each its blocks from a fresh FIFO
queue; the allocator keeps them from then on. Those ids can differ from what an
allocator with ids from the start would have handed out (it had freed blocks to the
queue's tail); nothing but ``block_table`` and the pool's queue and refcounts shows an
id, so every result is the same (``tests/memory/test_count_mode.py`` runs random
operations on both). A test that names blocks calls ``track_block_ids`` first.

Composition with a prefix cache (``sim.memory.prefix_index``): ``compose(index)`` gives
an empty allocator a ``PrefixIndex``; the core then asks it which cached blocks a new
sequence shares (``match``), to evict for room (``make_room``), and tells it when blocks
fill, fork or are released (``releasing`` before a release drops any reference);
``useful_tokens``, ``prefix_metrics``, ``set_time`` and ``free_uncached`` consult it.
Without an index (the ``paged`` kind) none of that runs. The prefix kinds (``radix``,
``paged_hash``) are this class composed with an index from ``sim.prefix``, where they are
defined and registered; this module never imports them.

Physical slots (``kv_slots``) are counters kept as blocks change hands, never a scan:
``_unfilled`` is the empty slots of distinct partly filled blocks (only a table's last
block can be partial, and a shared one counts once), moved in O(1) per operation; the
paused slots (filled slots of blocks that only held tables map: a block shared by an
active and a held sequence is active) are ``sim.memory.paused_blocks``'s, from the first
hold on, at a cost of the blocks whose sharing changes (a hold, resume, free or fork
touches a table's shared blocks only), never at query time.

Hybrid models (``use_kv_groups``, ``sim.sizing.group_demand``): the table holds the layer
groups that keep every token; a sequence also maps ``side_blocks(tokens)`` blocks of the
same pool for its sliding-window, chunked-local and state-space groups, taken and returned
as its tokens change (oldest first), shared with a fork's child by refcount; while it runs
a prefill chunk ``[n, e)`` (``set_step``, from the scheduler through the KV manager; a new
sequence's first chunk from its ``allocate``, ``first_step``, counted with its table's
blocks before any is taken, with a prefix index in ``match``'s fit check) it
holds that step's blocks instead (``step_side_blocks(n, e)``: ``w - 1`` tokens plus the
chunk, vLLM V1), until its next ``set_step``, an append or its free; in
``kv_slots`` a side block is full (B filled slots) and, like a table block, paused when only
held sequences map it; of the active sequences' side slots, those that hold no side token
state (vLLM's padding layers, whole blocks' rest: ``KVGroups.useful_side_bytes``) are
unfilled.

Invariants: in count mode, no table, side block, step or hold, the pool's allocated
blocks = the sum of ceil(tokens / B) over the live sequences and ``_unfilled`` = the sum
of their last blocks' empty slots; with ids, len(table) = ceil(tokens / B) for every sequence, and len(side blocks) =
``side_blocks(tokens)``, or ``step_side_blocks(n, e)`` during a step (``set_step``, or
``allocate``'s ``first_step``); a miss of ``allocate`` or ``set_step`` changes nothing
(everything is counted before a block is evicted or taken); the refcount of every block = the number of tables and side lists
that map it; a block mapped by several tables holds the same number
of tokens in each (it is never written while shared); free + allocated + cached +
remainder = pool; ``_unfilled`` and the paused slots equal a scan of the tables (and
``PausedBlocks.check``); with an index, also the index's own (``PrefixIndex.check``).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, ClassVar

from sim.errors import InvariantError
from sim.memory.base import Allocator, Books, FirstStep, checked_count, positive_int
from sim.memory.block_pool import BlockPool, CountPool, PagedPool
from sim.memory.errors import AllocatorError
from sim.memory.metrics import (
    ADMITTED,
    MISSED,
    AllocResult,
    KVSlots,
    PrefixMetrics,
)
from sim.memory.paused_blocks import PausedBlocks
from sim.memory.prefix_index import PrefixIndex, PrefixListener, PrefixListeners

#: a named tuple made from its fields in one C call (its ``__new__`` is Python code)
_new_tuple = tuple.__new__


def _takes_extra_blocks(index: PrefixIndex) -> bool:
    """Whether ``index.match`` names ``extra_blocks`` as a parameter the core can pass by
    keyword (the contract since the first step was counted with the admission; an index
    written before it takes two arguments, and the core then counts a hybrid model's side
    blocks itself). ``**kwargs`` alone is not enough: a proxy forwarding them to an index
    of the old contract would pass the keyword on to it."""
    try:
        params = inspect.signature(index.match).parameters
    except (TypeError, ValueError):  # a builtin or C callable: assume the old contract
        return False
    p = params.get("extra_blocks")
    return p is not None and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)


class PagedAllocator(Allocator):
    """Fixed-size blocks from a FIFO free queue; forks share blocks, writes copy on write."""

    kind = "paged"
    counts_kv_groups = True
    #: a prefix kind's hybrid prefix-hit rule (``sim.prefix.hybrid_hit``, set by the kinds
    #: of ``sim.prefix.kinds``): KVGroups -> the group that stops every hit, or None
    hit_rule: Any = None
    #: the layer group that stops prefix hits (None: the block table's hit stands); when
    #: one does, the kind ignores content: it caches nothing, as vLLM turns caching off
    hit_limited_by: str | None = None
    _content_off = False
    #: a subclass's own ``append`` or ``_append`` (a plug-in's): it sees every append, so
    #: none go in a batch that would pass it by; the class's answer, made with the class
    #: (``__init_subclass__``): the batch paths ask it several times a decision
    _own_appends: ClassVar[bool] = False

    def __init__(
        self, *, pool_bytes: float, kv_bytes_per_token: float, block_size: int = 16
    ) -> None:
        super().__init__(pool_bytes=pool_bytes, kv_bytes_per_token=kv_bytes_per_token)
        self.block_size = positive_int(block_size, "block_size")
        self.block_bytes = self.block_size * self.kv_bytes_per_token
        #: count mode (no block ids) until identity first matters (``track_block_ids``):
        #: the pool is then this ``CountPool``; None once blocks have ids (a ``BlockPool``)
        self._count_pool: CountPool | None = CountPool(
            math.floor(self.pool_bytes / self.block_bytes)
        )
        self.pool: PagedPool = self._count_pool
        #: seq -> physical block ids, by logical (empty in count mode)
        self._tables: dict[Hashable, list[int]] = {}
        self.index: PrefixIndex | None = None  # the prefix cache, if composed with one
        self._prefix_listeners: list[PrefixListener] = []  # ``subscribe_prefix``'s, in order
        self._match_counts_extra = False  # whether its ``match`` takes ``extra_blocks``
        self._unfilled = 0  # empty slots of distinct partly filled allocated blocks
        self._paused: PausedBlocks | None = None  # the paused slots, from the first hold on
        self._side: dict[Hashable, list[int]] = {}  # seq -> blocks of its side groups
        self._side_allocated = 0  # distinct side blocks allocated (a fork shares them)
        #: seq -> (computed, end) of the prefill chunk it runs (``set_step``); absent: the
        #: decode rule of its tokens
        self._step: dict[Hashable, tuple[int, int]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._own_appends = cls._append is not PagedAllocator._append or cls.append is not Allocator.append

    def use_kv_groups(self, groups) -> None:
        """Count a hybrid model's side groups (``KVGroups``) in this empty allocator: each
        sequence also holds ``groups.side_blocks(tokens)`` blocks of the pool, beside its
        block table (a dense model's groups change nothing)."""
        if groups is None or not groups.hybrid:
            return
        if self._tokens or self.kv_groups is not None:
            raise ValueError(f"{self.kind}: set the KV groups of an empty allocator once")
        if not math.isclose(groups.table_bytes_per_token, self.kv_bytes_per_token):
            raise ValueError(
                f"{self.kind}: kv_bytes_per_token {self.kv_bytes_per_token} is not the block "
                f"table's {groups.table_bytes_per_token}"
            )
        self.track_block_ids()  # side blocks are taken and shared by id
        self.kv_groups = groups
        if self.hit_rule is not None:
            self.hit_limited_by = self.hit_rule(groups)
            self._content_off = self.hit_limited_by is not None

    def _side_delta(self, seq_id: Hashable | None, tokens: int) -> int:
        """Side blocks a sequence at ``tokens`` needs beyond those it holds (may be < 0),
        by the decode rule (an append ends a prefill chunk's ``set_step``)."""
        groups = self.kv_groups
        if groups is None:
            return 0
        held = 0 if seq_id is None else len(self._side[seq_id])
        return groups.side_blocks(tokens, self.block_size) - held

    def _side_target(self, seq_id: Hashable, tokens: int) -> int:
        """Side blocks a live sequence holds now: its prefill chunk's (``set_step``) or the
        decode rule of its ``tokens``."""
        step = self._step.get(seq_id)
        if step is None:
            return self.kv_groups.side_blocks(tokens, self.block_size)
        return self.kv_groups.step_side_blocks(step[0], step[1], self.block_size)

    def set_step(self, seq_id: Hashable, computed: int | None, end: int = 0) -> bool:
        """Hold the side blocks of the step that computes ``[computed, end)`` (vLLM V1's
        ``remove_skipped_blocks(computed)`` then ``allocate_new_blocks(end)``), or, with
        ``computed`` None, those of the decode rule; False = no room, nothing changed."""
        tokens = self._live_tokens(seq_id, "set_step")
        groups = self.kv_groups
        if groups is None or not groups.steps_matter:
            return True
        step = None if computed is None else self._step_span(seq_id, tokens, computed, end)
        if self._held and seq_id in self._held:
            raise AllocatorError(f"{self.kind}: set_step: sequence {seq_id!r} is held")
        delta = self._step_side(tokens, step) - len(self._side.setdefault(seq_id, []))
        need = self._side_need(seq_id, delta) if delta else 0
        pool, index = self.pool, self.index
        if need > 0 and need > pool.num_free and (
            index is None or not index.make_room(need - pool.num_free)
        ):
            return False
        if delta:
            self._side_resize(seq_id, delta)
            self.changes += 1
        before = self._side_useful_of(seq_id, tokens)
        if step is None:
            self._step.pop(seq_id, None)
        else:
            self._step[seq_id] = step
        self._side_useful += self._side_useful_of(seq_id, tokens) - before
        self._note_peak(self._allocated_bytes())
        return True

    def _step_span(
        self, seq_id: Hashable, tokens: int, computed: Any, end: Any, op: str = "set_step"
    ) -> tuple[int, int] | None:
        """A step ``[computed, end)`` of a ``tokens``-token sequence, checked (misuse
        raises ``AllocatorError``); None when it is a decode (the decode rule itself)."""
        computed = checked_count(computed, op)
        end = checked_count(end, f"{op} (end)")
        if not computed < end <= tokens:
            raise AllocatorError(
                f"{self.kind}: {op}: tokens [{computed}, {end}) of a {tokens}-token "
                f"sequence {seq_id!r}"
            )
        if computed == end - 1 and end == tokens:
            return None
        return (computed, end)

    def _step_side(self, tokens: int, step: tuple[int, int] | None) -> int:
        """Side blocks a sequence of ``tokens`` holds during ``step`` (None: the decode
        rule of its tokens); 0 for a dense model."""
        groups = self.kv_groups
        if groups is None:
            return 0
        if step is None:
            return groups.side_blocks(tokens, self.block_size)
        return groups.step_side_blocks(step[0], step[1], self.block_size)

    def step_of(self, seq_id: Hashable) -> tuple[int, int] | None:
        return self._step.get(seq_id)

    def _side_need(self, seq_id: Hashable, delta: int) -> int:
        """Free blocks a side ``delta`` (``_side_delta``) costs the pool: ``delta`` when it
        grows; when it shrinks, minus the dropped blocks that really go back (refcount 1:
        a block a fork also maps stays in use)."""
        if delta >= 0:
            return delta
        rc = self.pool.refcount
        return -sum(1 for b in self._side[seq_id][:-delta] if rc[b] == 1)

    def _side_resize(self, seq_id: Hashable, delta: int) -> None:
        """Take ``delta`` more side blocks (the pool has them) or drop ``-delta``, oldest
        first (blocks that left a window)."""
        side = self._side.setdefault(seq_id, [])
        if delta > 0:
            new = self.pool.take(delta)
            side.extend(new)
            if self._paused is not None:
                self._paused.taken(seq_id, new)
            self._count.blocks_taken += delta
            self._side_allocated += delta
        elif delta < 0:
            old = side[:-delta]
            del side[:-delta]
            returned = self.pool.decref(old)
            self._count.blocks_returned += returned
            self._side_allocated -= returned
            if self._paused is not None:  # the sequence is active: blocks it shared with
                self._paused.unmapped(seq_id, old)  # held forks only may pause

    def compose(self, index: PrefixIndex) -> None:
        """Give this empty allocator a prefix cache (once); blocks come from ``index.pool``."""
        if self.index is not None or self._tokens:
            raise ValueError(f"{self.kind}: compose an empty allocator with one index")
        self.index = index
        self._count_pool = None  # empty: the index's pool names every block from now on
        self.pool = index.pool
        self._match_counts_extra = _takes_extra_blocks(index)

    # ------------------------------------------------------------------- operations
    def _allocate(self, seq_id: Hashable, n_tokens: int, content: Any) -> AllocResult:
        return self._place(seq_id, n_tokens, content, None)

    def _allocate_stepped(
        self,
        seq_id: Hashable,
        n_tokens: int,
        content: Any,
        final_tokens: int | None,
        first_step: FirstStep,
    ) -> AllocResult:
        if self.kv_groups is None or not self.kv_groups.steps_matter:
            return self._place(seq_id, n_tokens, content, None)
        return self._place(seq_id, n_tokens, content, first_step)

    def _place(
        self, seq_id: Hashable, n_tokens: int, content: Any, first_step: FirstStep | None
    ) -> AllocResult:
        """Count the table's new blocks and the side blocks of the first step (the decode
        rule without ``first_step``) before taking any: a miss changes nothing."""
        pool, index = self.pool, self.index
        if self._content_off:
            content = None
        n_new = -(-n_tokens // self.block_size)
        steps = None if first_step is None else self._first_steps(seq_id, n_tokens, first_step)
        if index is None:
            step = None if steps is None else steps(0)
            side = self._step_side(n_tokens, step)
            if n_new + side > pool.num_free:
                return MISSED
            counted = self._count_pool
            if counted is not None:  # count mode: no side blocks, no hold, no step
                counted.num_free -= n_new
                self._count.blocks_taken += n_new
                self._unfilled += -n_tokens % self.block_size
                return ADMITTED
            self._tables[seq_id] = ids = pool.take(n_new)
            if self._paused is not None:
                self._paused.taken(seq_id, ids)
            self._count.blocks_taken += n_new
            self._unfilled += -n_tokens % self.block_size  # the new last block's rest
            self._hold_first(seq_id, side, step)
            return ADMITTED
        if self.kv_groups is not None and self._match_counts_extra:
            # the side blocks of the hit's first step count in the index's fit check
            hit = index.match(n_tokens, content, extra_blocks=self._first_sides(n_tokens, steps))
        else:  # (an index without ``extra_blocks``: the core's own count below decides)
            hit = index.match(n_tokens, content)
        if hit is None:
            return MISSED
        step = None if steps is None else steps(hit.hit_tokens)
        side = reserve = self._step_side(n_tokens, step)
        if steps is not None and not self._match_counts_extra:
            # an index of the old contract may still copy a partial block (under a block of
            # tokens) and start the first step that much later: room for the most of those
            for more in range(1, min(self.block_size, n_tokens - hit.hit_tokens)):
                reserve = max(reserve, self._step_side(n_tokens, steps(hit.hit_tokens + more)))
        shared = hit.block_ids
        n_new -= len(shared)
        if shared:
            pool.incref(shared)  # pin before making room, so eviction cannot take them
        # the index's count of the side blocks, or the core's own of the hit it returned
        # (an index that counts none, or fewer): room for all before any block is taken
        need = n_new + max(hit.extra_blocks, reserve)
        if need > pool.num_free and not index.make_room(need - pool.num_free):
            if shared:
                pool.decref(shared)
            index.cancel(hit)
            return MISSED
        table = shared + pool.take(n_new)
        self._tables[seq_id] = table
        self._count.blocks_taken += n_new
        self._hold_first(seq_id, side, step)
        self._unfilled += -n_tokens % self.block_size  # hit blocks are whole: the tail is new
        if self._paused is not None:
            self._paused.taken(seq_id, table[len(shared) :])
            if shared:  # full cached blocks, maybe mapped by held tables only until now
                self._paused.mapped(seq_id, shared, self.block_size)
        copied = index.admitted(seq_id, n_tokens, table, hit)
        if copied:  # a cached partial block copied into the private tail (radix cow_tail)
            self._count.cow_copies += 1
            self._add_copy(copied * self.kv_bytes_per_token)
            if steps is not None:  # its first step starts later: within the room counted
                step = steps(hit.hit_tokens + copied)
                more = self._step_side(n_tokens, step) - side
                if more > pool.num_free and not index.make_room(more - pool.num_free):
                    raise InvariantError(
                        f"{self.kind}: allocate: the prefix index copied a partial block "
                        f"without counting its first step's side blocks (match's extra_blocks)"
                    )
                self._hold_first(seq_id, more, step)
        served = hit.hit_tokens + copied
        return AllocResult(True, served) if served else ADMITTED

    def _first_steps(self, seq_id: Hashable, n_tokens: int, first_step: FirstStep) -> FirstStep:
        """``first_step`` checked: a new sequence's first step when its hit serves so many
        tokens (None for the decode rule); misuse raises before anything changes."""

        def step_of(served: int) -> tuple[int, int] | None:
            step = first_step(served)
            if step is None:
                return None
            return self._step_span(seq_id, n_tokens, *step, op="allocate (first_step)")

        return step_of

    def _first_sides(self, n_tokens: int, steps: FirstStep | None) -> Callable[[int], int]:
        """Side blocks a new sequence of ``n_tokens`` takes when its hit serves so many
        tokens: its first step's, or (``steps`` None) the decode rule's."""
        if steps is None:
            side = self._step_side(n_tokens, None)
            return lambda served: side
        return lambda served: self._step_side(n_tokens, steps(served))

    def _hold_first(self, seq_id: Hashable, side: int, step: tuple[int, int] | None) -> None:
        """A new sequence takes (or drops) ``side`` side blocks, room made, and runs
        ``step`` (None: the decode rule)."""
        if side:
            self._side_resize(seq_id, side)
        if step is None:
            self._step.pop(seq_id, None)
        else:
            self._step[seq_id] = step

    def _append(self, seq_id: Hashable, tokens: int, n_tokens: int, content: Any) -> bool:
        counted = self._count_pool
        if counted is not None:  # count mode: a private last block, no index, no side
            bs = self.block_size
            end = tokens + n_tokens
            n_new = (end + bs - 1) // bs - (tokens + bs - 1) // bs
            if n_new > counted.num_free:
                return False
            self._unfilled += -end % bs - -tokens % bs
            if n_new:
                counted.num_free -= n_new
                self._count.blocks_taken += n_new
            return True
        index = self.index
        if self._content_off:
            content = None
        if index is not None and content is not None:  # misuse raises before any change
            content = index.check_content(content, n_tokens, "append")
        table = self._tables[seq_id]
        bs = self.block_size
        n_new = (tokens + n_tokens + bs - 1) // bs - len(table)
        pool = self.pool
        cow = tokens % bs != 0 and pool.refcount[table[-1]] > 1
        need = n_new + 1 if cow else n_new
        side = self._side_delta(seq_id, tokens + n_tokens) if self.kv_groups else 0
        need += self._side_need(seq_id, side) if side else 0
        if need > 0 and need > pool.num_free and (
            index is None or not index.make_room(need - pool.num_free)
        ):
            return False
        if self._step and seq_id in self._step:  # it moved on: the decode rule of its tokens
            before = self._side_useful_of(seq_id, tokens)
            del self._step[seq_id]
            self._side_useful += self._side_useful_of(seq_id, tokens) - before
        if side < 0:  # blocks that left the window go back first
            self._side_resize(seq_id, side)
        if cow:
            old = table[-1]
            self._copy_on_write(seq_id, table)
            self._unfilled += -(tokens + n_tokens) % bs  # the shared block keeps its rest
            if self._paused is not None:
                self._paused.unmapped(seq_id, (old,))
        else:  # the last block, if partial, is the writer's own
            self._unfilled += -(tokens + n_tokens) % bs - -tokens % bs
        if n_new:
            new = pool.take(n_new)
            table.extend(new)
            if self._paused is not None:
                self._paused.taken(seq_id, new)
            self._count.blocks_taken += n_new
        if side > 0:
            self._side_resize(seq_id, side)
        if index is not None:
            index.appended(seq_id, tokens, n_tokens, content, table)
        return True

    def bulk_free_blocks(self) -> int | None:
        """Free blocks, without a prefix index or side groups: an append into a sequence
        whose last block is its own (or full) then only takes ``ceil`` of its overflow in
        free blocks; None with them (an append may evict, or take and return side
        blocks)."""
        if self.index is None and self.kv_groups is None and not self._own_appends:
            return self.pool.num_free
        return None

    def _appends_overridden(self) -> bool:
        """A subclass's own ``append`` or ``_append`` (``_own_appends``)."""
        return self._own_appends

    def appends_unordered(self) -> bool:
        """In count mode (no block ids), where a batch goes in one pass
        (``bulk_free_blocks``): each append moves its sequence's tokens and the free count,
        so their order changes nothing."""
        # (count mode has no prefix index and no side groups: ``compose`` and
        # ``use_kv_groups`` end it)
        return self._count_pool is not None and not self._own_appends

    def append_each(self, items: Iterable[tuple[Hashable, int]]) -> None:
        """The appends one by one (``Allocator.append_each``) in two passes: count each
        sequence's new blocks, take them all from the queue at once (the same ids, in the
        same order, as one ``take`` each), then extend the tables and the books. Appends
        with an index or side groups, into a held sequence, a shared last block (a copy
        on write) or of an odd count are made one by one, through ``append``."""
        items = items if isinstance(items, list) else list(items)
        counted = self._count_pool
        if counted is not None and items and not self._own_appends:
            self._append_each_counted(items, counted)  # (``bulk_free_blocks`` in count mode)
            return
        if not items or self.bulk_free_blocks() is None:  # an index, side groups, a plug-in
            super().append_each(items)
            return
        held = self._held
        tables, tokens_of, bs = self._tables, self._tokens, self.block_size
        pool = self.pool
        rc = pool.refcount
        counts = []
        need = unfilled = 0
        after: dict[Hashable, tuple[int, int]] = {}  # tokens and blocks after its appends
        for seq_id, n_tokens in items:
            if n_tokens.__class__ is not int or n_tokens <= 0 or (held and seq_id in held):
                super().append_each(items)  # nothing has changed yet
                return
            so_far = after.get(seq_id)
            if so_far is None:
                tokens = tokens_of.get(seq_id)
                if tokens is None or (tokens % bs and rc[tables[seq_id][-1]] > 1):
                    super().append_each(items)
                    return
                blocks = len(tables[seq_id])
            else:  # its second append in the batch: its own last block now
                tokens, blocks = so_far
            end = tokens + n_tokens
            k = (end + bs - 1) // bs - blocks
            after[seq_id] = (end, blocks + k)
            counts.append(k)
            need += k
            unfilled += -end % bs - -tokens % bs
        if need > pool.num_free:
            raise InvariantError(f"{self.kind}: append_each: {need} blocks, {pool.num_free} free")
        ids = pool.take(need) if need else []
        paused = self._paused
        at = 0
        for (seq_id, n_tokens), k in zip(items, counts, strict=True):
            tokens_of[seq_id] += n_tokens
            if k:
                new = ids[at : at + k]
                at += k
                tables[seq_id].extend(new)
                if paused is not None:
                    paused.taken(seq_id, new)
        self._unfilled += unfilled
        self._count.blocks_taken += need
        self.changes += len(items)
        self._lineage.extend_each(items)
        self._note_peak(self._allocated_bytes())

    def _append_each_counted(self, items: list[tuple[Hashable, int]], pool: CountPool) -> None:
        """``append_each`` in count mode: each sequence's tokens and the free count move
        (a sequence's blocks are ``ceil(tokens / B)``, all its own), in one pass; misuse
        (an odd count, a sequence not live) undoes the pass and goes one by one, where
        it raises at its item."""
        tokens_of, bs = self._tokens, self.block_size
        bm1 = bs - 1
        need = added = i = 0
        for seq_id, n_tokens in items:
            tokens = tokens_of.get(seq_id)
            if tokens is None or n_tokens.__class__ is not int or n_tokens <= 0:
                self._undo_counted(items[:i])
                super().append_each(items)
                return
            end = tokens_of[seq_id] = tokens + n_tokens
            need += (end + bm1) // bs - (tokens + bm1) // bs
            added += n_tokens
            i += 1
        if need > pool.num_free:
            self._undo_counted(items)  # as it was: the books stay one
            raise InvariantError(f"{self.kind}: append_each: {need} blocks, {pool.num_free} free")
        pool.num_free -= need
        # each sequence's unfilled slots are ceil(tokens / B) B - tokens: together they
        # grow by the new blocks' slots less the tokens written
        self._unfilled += need * bs - added
        self._count.blocks_taken += need
        self.changes += len(items)
        self._lineage.extend_each(items)
        self._note_peak(self._allocated_bytes())

    def _undo_counted(self, items: list[tuple[Hashable, int]]) -> None:
        """Take back the tokens ``_append_each_counted`` added for ``items``."""
        tokens_of = self._tokens
        for seq_id, n_tokens in reversed(items):
            tokens_of[seq_id] -= n_tokens

    def _append_each_content(
        self,
        items: Sequence[tuple[Hashable, int]],
        contents: Sequence[Any],
        times_s: Sequence[float | None],
    ) -> bool | None:
        """``Allocator.append_in_bulk`` in one pass where the prefix index takes the run in
        bulk (``PrefixIndex.appends_in_bulk``: only room evicts between the appends, and
        each sequence's fills join its own content): the content checked for all first,
        room for all made in one ``make_room`` before any block is taken (the blocks each
        item's shortfall in turn would free, in that order: the blocks earlier items take
        come from the head of the free queue and room returns evicted blocks to its
        tail), the new blocks taken at once (the same ids as one ``take`` each), then per
        item its time, table, the index's ``appended`` and its tokens, and the books once;
        True. False (one by one) where the pass would not be the appends one by one (a
        plug-in's appends, a sequence twice or held, an odd count, a shared last block,
        bad content or time, no room); None where the index does not take the run in
        bulk (or there is none, it is ignored, or side groups change block by block).
        Nothing changed but for True (a miss frees nothing: the appends one by one then
        free the earlier items' room themselves and miss at the same item)."""
        index = self.index
        if index is None or self._content_off or self.kv_groups is not None:
            return None  # ``appends_in_bulk`` is False
        tables, tokens_of = self._tables, self._tokens
        held, bs, rc = self._held, self.block_size, self.pool.refcount
        seen: set[Hashable] = set()
        one_by_one = self._appends_overridden()
        check = index.check_content
        # one pass: each item's checks, then (while none failed) its content checked (no
        # change: bad content sends the batch one by one, where it raises at that item)
        # and its new blocks
        checked, counts, starts = [], [], []
        for (seq_id, n_tokens), content, now_s in zip(items, contents, times_s, strict=True):
            tokens = tokens_of[seq_id]
            table = tables[seq_id]
            if (
                n_tokens.__class__ is not int
                or n_tokens <= 0
                or seq_id in seen
                or (held and seq_id in held)
                or (tokens % bs and rc[table[-1]] > 1)  # a copy on write
                or not (now_s is None or now_s.__class__ is float or now_s.__class__ is int)
            ):
                one_by_one = True
            elif not one_by_one:
                if content is not None:
                    try:
                        content = check(content, n_tokens, "append")
                    except AllocatorError:
                        one_by_one = True
                checked.append(content)
                counts.append((tokens + n_tokens + bs - 1) // bs - len(table))
                starts.append(tokens)
            seen.add(seq_id)
        if not self.appends_in_bulk(seen):
            return None
        if one_by_one:
            return False
        pool = self.pool
        need = sum(counts)  # room for all at once: the index frees, in one ``make_room``,
        short = need - pool.num_free  # the blocks each item's shortfall in turn would free
        if short > 0 and not index.make_room(short):  # a miss: as one by one (nothing
            return False  # changed; the appends one by one miss at the same item)
        ids = pool.take(need) if need else []
        paused, appended = self._paused, index.appended
        at = unfilled = 0
        for (seq_id, n_tokens), content, now_s, tokens, k in zip(
            items, checked, times_s, starts, counts, strict=True
        ):
            if now_s is not None:
                self.set_time(now_s)
            table = tables[seq_id]
            end = tokens + n_tokens
            unfilled += -end % bs - -tokens % bs
            if k:
                new = ids[at : at + k]
                at += k
                table.extend(new)
                if paused is not None:
                    paused.taken(seq_id, new)
            appended(seq_id, tokens, n_tokens, content, table)
            tokens_of[seq_id] = end
        self._unfilled += unfilled
        self._count.blocks_taken += need
        self.changes += len(items)
        self._lineage.extend_each(items)
        # the allocated blocks only grow through the batch (room turns cached blocks into
        # free ones), so the appends' peaks one by one are their last
        self._note_peak(self._allocated_bytes())
        return True

    def _copy_on_write(self, seq_id: Hashable, table: list[int]) -> None:
        """Give the writer a private copy of its shared last block."""
        new = self.pool.take(1)
        self.pool.decref([table[-1]])  # stays >= 1: other tables still map it
        if self._paused is not None:
            self._paused.taken(seq_id, new)
        table[-1] = new[0]
        self._count.cow_copies += 1
        self._count.blocks_taken += 1
        self._add_copy(self.block_bytes)

    def _fork(self, parent_id: Hashable, child_id: Hashable, tokens: int) -> bool:
        self.track_block_ids()  # the child shares the parent's blocks by id
        table = list(self._tables[parent_id])
        self.pool.incref(table)
        self._tables[child_id] = table
        side = self._side.get(parent_id)
        if side:  # the child maps the parent's side blocks until it moves past them
            self.pool.incref(side)
            self._side[child_id] = list(side)
        if parent_id in self._step:  # and holds them by the parent's step until it moves
            self._step[child_id] = self._step[parent_id]
        if self._paused is not None:  # the child is active: blocks only held tables mapped are not
            self._paused.forked(parent_id, child_id, table, self._last_fill(tokens), side or ())
        if self.index is not None:
            self.index.forked(parent_id, child_id, table)
        return True

    def _free(self, seq_id: Hashable, tokens: int) -> None:
        self._release(seq_id, tokens, uncache=False)

    def _free_uncached(self, seq_id: Hashable, tokens: int) -> None:
        self._release(seq_id, tokens, uncache=True)

    def _release(self, seq_id: Hashable, tokens: int, *, uncache: bool) -> None:
        """Drop the sequence's references, last block first (vLLM's order). The sequence
        is active (``free`` ends a hold first)."""
        counted = self._count_pool
        if counted is not None:  # count mode: its blocks are all its own
            n = -(-tokens // self.block_size)
            counted.num_free += n
            self._count.blocks_returned += n
            self._unfilled -= -tokens % self.block_size
            return
        if self.index is not None:  # it still maps its blocks (``PrefixIndex.releasing``)
            self.index.releasing(seq_id)
        table = self._tables.pop(seq_id)
        self._step.pop(seq_id, None)
        side = self._side.pop(seq_id, None)
        if side:
            returned = self.pool.decref(side)
            self._count.blocks_returned += returned
            self._side_allocated -= returned
        if self.pool.refcount[table[-1]] == 1:  # its last block leaves the allocated set
            self._unfilled -= -tokens % self.block_size
        self._count.blocks_returned += self.pool.decref(table[::-1])
        if self._paused is not None:  # only the blocks it shared can change state
            self._paused.released(seq_id)
        if self.index is not None:
            self.index.released(seq_id, table, uncache)

    # ------------------------------------------------- held (paused) block counts
    def _held_changed(self, seq_id: Hashable, tokens: int, held: bool) -> None:
        """The paused slots move by the sequence's private blocks and those of its shared
        blocks that only held tables map (``PausedBlocks``, started at the first hold)."""
        paused = self._paused
        if paused is None:  # the first hold: track the live tables as they are
            self.track_block_ids()
            paused = self._paused = PausedBlocks(self.pool.refcount, self.block_size, self._held)
            paused.start(
                (s, t, self._last_fill(self._tokens[s]), self._side.get(s, ()))
                for s, t in self._tables.items()
            )
        filled = tokens + self.block_size * len(self._side.get(seq_id, ()))
        if held:
            paused.hold(seq_id, filled)
        else:
            paused.resume(seq_id, filled)

    def _last_fill(self, tokens: int) -> int:
        """Filled slots of the last block of a ``tokens``-long table."""
        return tokens - (-(-tokens // self.block_size) - 1) * self.block_size

    def kv_slots(self) -> KVSlots:
        """O(1): the pool's block counts and the counters above, in slots."""
        pool, bs = self.pool, self.block_size
        paused, unfilled = 0 if self._paused is None else self._paused.slots, self._unfilled
        if self.kv_groups is not None:  # side slots that hold no side state are unfilled
            unfilled += self._side_waste_slots(pool.num_allocated * bs - unfilled - paused)
        return _new_tuple(KVSlots, (pool.num_allocated * bs, unfilled, paused, pool.num_cached * bs,
                                    pool.num_empty * bs, pool.usable_blocks * bs))  # fmt: skip

    def _seq_side_slots(self, seq_id: Hashable) -> int:
        side = self._side.get(seq_id)
        return len(side) * self.block_size if side else 0

    # ---------------------------------------------------------------------- queries
    def blocks_needed(self, seq_id: Hashable, n_tokens: int = 1) -> int:
        """New blocks ``append(seq_id, n_tokens)`` takes, the copy-on-write block included."""
        tokens = self._live_tokens(seq_id, "blocks_needed")
        n = checked_count(n_tokens, "blocks_needed")
        bs = self.block_size
        if self._count_pool is not None:  # count mode: no copy on write, no side blocks
            return (tokens + n + bs - 1) // bs - (tokens + bs - 1) // bs
        table = self._tables[seq_id]
        n_new = (tokens + n + bs - 1) // bs - len(table)
        cow = n > 0 and tokens % bs != 0 and self.pool.refcount[table[-1]] > 1
        if self.kv_groups is None:
            return n_new + int(cow)
        side = self._side_need(seq_id, self._side_delta(seq_id, tokens + n))
        return max(0, n_new + int(cow) + side)

    def can_allocate(self, n_tokens: int, *, content: Any = None) -> bool:
        n = checked_count(n_tokens, "can_allocate", minimum=1)
        side = self._side_delta(None, n)
        if self.index is not None and content is not None:
            return self.index.can_allocate(n, content) and (
                side == 0 or -(-n // self.block_size) + side <= self.available_blocks()
            )
        return -(-n // self.block_size) + side <= self.available_blocks()

    def available_blocks(self) -> int:
        """Blocks an operation could get now: free ones, plus those the index can evict."""
        if self.index is None:
            return self.pool.num_free
        return self.pool.num_free + self.index.evictable_blocks

    def can_append(self, seq_id: Hashable, n_tokens: int = 1) -> bool:
        return self.blocks_needed(seq_id, n_tokens) <= self.available_blocks()

    def can_fork(self, parent_id: Hashable) -> bool:
        self._live_tokens(parent_id, "can_fork")
        return True

    def block_table(self, seq_id: Hashable) -> tuple[int, ...]:
        """Physical block ids of a live sequence, logical block 0 first. In count mode it
        gives the blocks ids first (``track_block_ids``, once: ids in admission order, not
        the FIFO history an allocator with ids from the start would show)."""
        self._live_tokens(seq_id, "block_table")
        self.track_block_ids()
        return tuple(self._tables[seq_id])

    def seq_capacity_tokens(self, seq_id: Hashable) -> int:
        """Slots of the blocks a live sequence maps (``len(table) * block_size``)."""
        tokens = self._live_tokens(seq_id, "seq_capacity_tokens")
        if self._count_pool is not None:
            return -(-tokens // self.block_size) * self.block_size
        return len(self._tables[seq_id]) * self.block_size

    @property
    def tracks_block_ids(self) -> bool:
        """Whether blocks have ids (False in count mode, before ``track_block_ids``)."""
        return self._count_pool is None

    def track_block_ids(self) -> None:
        """Leave count mode (once; a no-op after): give every live sequence's blocks ids,
        deterministically (the sequences in admission order, each its ``ceil(tokens / B)``
        blocks from a fresh FIFO queue, so the first ones take 0, 1, ...), in O(pool). A
        fork, a hold, side groups, an index or ``block_table`` call it; an allocator made
        with it before its first operation hands out the ids of one that always had
        them. Ids can differ from those an allocator with ids from the start would have
        handed out by now; nothing but ``block_table`` and the pool show them."""
        counted = self._count_pool
        if counted is None:
            return
        pool = BlockPool(counted.num_blocks)
        bs = self.block_size
        self._tables = {s: pool.take(-(-t // bs)) for s, t in self._tokens.items()}
        self.pool = pool
        self._count_pool = None

    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def free_blocks(self) -> int:
        return self.pool.num_free

    @property
    def cached_blocks(self) -> int:
        return self.pool.num_cached

    @property
    def max_sequence_tokens(self) -> int:
        """The longest prompt the empty pool admits (its side blocks included)."""
        usable, bs = self.pool.usable_blocks, self.block_size
        if self.kv_groups is None:
            return usable * bs
        lo, hi = 0, usable * bs  # blocks nearly rise with tokens: a window's step is one block
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if -(-mid // bs) + self._side_delta(None, mid) <= usable:
                lo = mid
            else:
                hi = mid - 1
        return lo

    # --------------------------------------------------------------- prefix cache
    def useful_tokens(self) -> int:
        """Distinct token states; a cached block mapped by unrelated sequences counts once."""
        distinct = self._lineage.distinct_tokens
        return distinct if self.index is None else distinct - self.index.excess_tokens

    def prefix_metrics(self) -> PrefixMetrics | None:
        """The index's F17 counters and cached/active bytes; None without an index."""
        return None if self.index is None else self.index.prefix_metrics(self.block_bytes)

    def subscribe_prefix(self, listener: PrefixListener) -> bool:
        """Add a ``PrefixListener`` to the index's (each subscriber is told every report,
        in subscription order: ``PrefixListeners``); False without an index."""
        if self.index is None:
            return False
        listeners = [*self._prefix_listeners, listener]
        one = listeners[0] if len(listeners) == 1 else PrefixListeners(listeners)
        if not self.index.subscribe(one):
            return False
        self._prefix_listeners = listeners
        return True

    def appends_in_bulk(self, seq_ids: Iterable[Hashable]) -> bool:
        """The index's answer (``PrefixIndex.appends_in_bulk``); False without an index, or
        while the kind ignores content or counts side groups (they change block by block)."""
        if self.index is None or self._content_off or self.kv_groups is not None:
            return False
        return self.index.appends_in_bulk(seq_ids)

    def publishes_apart(self, seq_id: Hashable) -> bool:
        """The index's answer (``PrefixIndex.publishes_apart``); False without an index or
        when the kind ignores content (then nothing is ever held back)."""
        if self.index is None or self._content_off:
            return False
        return self.index.publishes_apart(seq_id)

    @property
    def publish_rule(self) -> str | None:  # type: ignore[override]
        """The index's rule for when held-back KV becomes visible (``PrefixIndex``);
        None without an index, or when the kind ignores content (it caches nothing)."""
        if self.index is None or self._content_off:
            return None
        return self.index.publish_rule

    def publish(self, seq_id: Hashable, tokens: int) -> bool:
        n = self._live_tokens(seq_id, "publish")
        index = self.index
        if index is not None and index.publish(seq_id, min(tokens, n), n, self._tables[seq_id]):
            self.changes += 1  # a look-up may find more now
        return tokens >= n

    def _hold_back(self, seq_id: Hashable, tokens: int) -> bool:
        return self.index is not None and self.index.hold_back(seq_id, tokens)

    def _unhold(self, seq_id: Hashable) -> None:
        if self.index is not None:
            self.index.unhold(seq_id)

    def set_retain(self, seq_id: Hashable, priority: float) -> None:
        """The index's retain priority of a live sequence (no-op without an index)."""
        if self.index is not None:
            self.changes += 1
            self.index.set_retain(seq_id, priority)

    def set_time(self, now_s: float) -> None:
        """Simulation time for the index's access stamps (no-op without an index)."""
        if self.index is not None:
            self.index.set_time(now_s)

    # ---------------------------------------------------------------------- books
    def _allocated_bytes(self) -> float:
        return self.pool.num_allocated * self.block_bytes

    def _side_allocated_bytes(self) -> float:
        return self._side_allocated * self.block_bytes

    def free_bytes(self) -> float:
        return self.pool.num_empty * self.block_bytes  # ``_books`` reads it here

    def _books(self) -> Books:
        bb, pool = self.block_bytes, self.pool
        free = self.free_bytes()
        # allocated, free, cached, remainder, extents (any free block serves any request)
        return _new_tuple(Books, (pool.num_allocated * bb, free, pool.num_cached * bb,
                                  self.pool_bytes - pool.usable_blocks * bb, (free,) if free else ()))  # fmt: skip

    def _check_kind(self) -> None:
        self.pool.check()
        if self._count_pool is not None:
            self._check_counted(self._count_pool)
            return
        if set(self._tables) != set(self._tokens):
            raise InvariantError("paged: block tables and live sequences differ")
        bs, n_blocks = self.block_size, self.pool.num_blocks
        mapped = [0] * n_blocks
        fill: dict[int, int] = {}
        for seq_id, table in self._tables.items():
            tokens = self._tokens[seq_id]
            if len(table) != -(-tokens // bs):
                raise InvariantError(
                    f"paged: sequence {seq_id!r} has {tokens} tokens and {len(table)} blocks"
                )
            if len(set(table)) != len(table):
                raise InvariantError(f"paged: sequence {seq_id!r} maps a block twice")
            for logical, b in enumerate(table):
                if not 0 <= b < n_blocks:
                    raise InvariantError(f"paged: sequence {seq_id!r} maps bad block id {b}")
                mapped[b] += 1
                f = min(bs, tokens - logical * bs)
                if fill.setdefault(b, f) != f:
                    raise InvariantError(f"paged: shared block {b} holds different fills")
        if set(self._side) - set(self._tokens) or set(self._step) - set(self._tokens):
            raise InvariantError("paged: side blocks of a sequence that is not live")
        if len({b for side in self._side.values() for b in side}) != self._side_allocated:
            raise InvariantError("paged: the side block counter differs from a scan")
        for seq_id, side in self._side.items():
            if len(side) != self._side_target(seq_id, self._tokens[seq_id]):
                raise InvariantError(f"paged: sequence {seq_id!r} holds {len(side)} side blocks")
            for b in side:
                mapped[b] += 1
        refcount = self.pool.refcount
        if not isinstance(refcount, list) or mapped != refcount:  # one C-level comparison
            for b in range(n_blocks):
                if mapped[b] != refcount[b]:
                    raise InvariantError(
                        f"paged: block {b} has refcount {refcount[b]} but {mapped[b]} tables map it"
                    )
        self._check_counters(fill)
        if self.index is not None:
            self.index.check(self._tables, self._tokens)

    def _check_counted(self, pool: CountPool) -> None:
        """Count mode: the free count and ``_unfilled`` against the live sequences' tokens
        (each maps ``ceil(tokens / B)`` blocks of its own); nothing else is kept."""
        bs, tokens = self.block_size, self._tokens.values()
        if self._tables or self._side or self._step or self._paused is not None or self._held:
            raise InvariantError("paged: count mode with block ids, side blocks or holds")
        blocks = sum(-(-t // bs) for t in tokens)
        if blocks != pool.num_allocated:
            raise InvariantError(f"paged: {pool.num_allocated} blocks allocated, scan {blocks}")
        unfilled = sum(-t % bs for t in tokens)
        if unfilled != self._unfilled:
            raise InvariantError(f"paged: unfilled slots {self._unfilled}, scan {unfilled}")

    def _check_counters(self, fill: dict[int, int]) -> None:
        """``_unfilled`` and the paused slots against a scan (``fill``: table blocks)."""
        unfilled = sum(self.block_size - f for f in fill.values())
        if unfilled != self._unfilled:
            raise InvariantError(f"paged: unfilled slots {self._unfilled}, scan {unfilled}")
        refs: dict[int, int] = {}
        for seq_id in self._held:
            for b in (*self._tables[seq_id], *self._side.get(seq_id, ())):
                refs[b] = refs.get(b, 0) + 1
        rc = self.pool.refcount
        paused = sum(fill.get(b, self.block_size) for b, h in refs.items() if h == rc[b])
        counted = 0 if self._paused is None else self._paused.slots
        if paused != counted:
            raise InvariantError(f"paged: paused slots {counted}, scan {paused}")
        if self._paused is not None:
            side_fill = dict.fromkeys(
                (b for side in self._side.values() for b in side), self.block_size
            )
            self._paused.check(self._tables, self._side, {**fill, **side_fill})

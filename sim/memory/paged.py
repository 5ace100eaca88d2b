"""``paged``: PagedAttention blocks with block tables, refcounts and copy-on-write (SPEC 2.6,
2.7, 3.4, 3.5).

The pool is ``floor(pool_bytes / (block_size * kv_bytes_per_token))`` blocks (F13); what
does not make a whole block is reported as ``remainder_bytes``. A sequence of S tokens maps
``ceil(S / B)`` blocks through its block table (F14); only its last block can be partly
filled (tail waste, F15). A fork copies the parent's table and increments each block's
refcount: no tensor bytes move (F16). A write into a block whose refcount is above one
(only ever the partly filled last block) first copies it: a new block from the free queue,
``cow_copies`` += 1, ``bytes_copied`` += one block (the chapter copies the B slots), the old
block loses a reference. Freeing decrements every block of the table, last block first;
blocks that reach zero go back to the FIFO free queue (``block_pool``).

Composition with a prefix cache (``sim.memory.prefix_index``): ``compose(index)`` gives
an empty allocator a ``PrefixIndex``; the core then asks it which cached blocks a new
sequence shares (``match``), to evict for room (``make_room``), and tells it when blocks
fill, fork or are released; ``useful_tokens``, ``prefix_metrics``, ``set_time`` and
``free_uncached`` consult it. Without an index (the ``paged`` kind) none of that runs. The
prefix kinds (``radix``, ``paged_hash``) are this class composed with an index from
``sim.prefix``, where they are defined and registered; this module never imports them.

Invariants: len(table) = ceil(tokens / B) for every sequence; the refcount of every block
= the number of tables that map it; a block mapped by several tables holds the same number
of tokens in each (it is never written while shared); free + allocated + cached +
remainder = pool; with an index, also the index's own (``PrefixIndex.check``).
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any

from sim.memory.base import Allocator, Books, checked_count, positive_int
from sim.memory.block_pool import BlockPool, PagedPool
from sim.memory.errors import InvariantError
from sim.memory.metrics import ADMITTED, MISSED, AllocResult, PrefixMetrics
from sim.memory.prefix_index import PrefixIndex


class PagedAllocator(Allocator):
    """Fixed-size blocks from a FIFO free queue; forks share blocks, writes copy on write."""

    kind = "paged"

    def __init__(
        self, *, pool_bytes: float, kv_bytes_per_token: float, block_size: int = 16
    ) -> None:
        super().__init__(pool_bytes=pool_bytes, kv_bytes_per_token=kv_bytes_per_token)
        self.block_size = positive_int(block_size, "block_size")
        self.block_bytes = self.block_size * self.kv_bytes_per_token
        self.pool: PagedPool = BlockPool(math.floor(self.pool_bytes / self.block_bytes))
        self._tables: dict[Hashable, list[int]] = {}  # seq -> physical block ids, by logical
        self.index: PrefixIndex | None = None  # the prefix cache, if composed with one

    def compose(self, index: PrefixIndex) -> None:
        """Give this empty allocator a prefix cache (once); blocks come from ``index.pool``."""
        if self.index is not None or self._tables:
            raise ValueError(f"{self.kind}: compose an empty allocator with one index")
        self.index = index
        self.pool = index.pool

    # ------------------------------------------------------------------- operations
    def _allocate(self, seq_id: Hashable, n_tokens: int, content: Any) -> AllocResult:
        pool, index = self.pool, self.index
        n_new = -(-n_tokens // self.block_size)
        if index is None:
            if n_new > pool.num_free:
                return MISSED
            self._tables[seq_id] = pool.take(n_new)
            self._count.blocks_taken += n_new
            return ADMITTED
        hit = index.match(n_tokens, content)
        if hit is None:
            return MISSED
        shared = hit.block_ids
        n_new -= len(shared)
        if shared:
            pool.incref(shared)  # pin before making room, so eviction cannot take them
        if n_new > pool.num_free and not index.make_room(n_new - pool.num_free):
            if shared:
                pool.decref(shared)
            index.cancel(hit)
            return MISSED
        table = shared + pool.take(n_new)
        self._tables[seq_id] = table
        self._count.blocks_taken += n_new
        copied = index.admitted(seq_id, n_tokens, table, hit)
        if copied:  # a cached partial block copied into the private tail (radix cow_tail)
            self._count.cow_copies += 1
            self._add_copy(copied * self.kv_bytes_per_token)
        served = hit.hit_tokens + copied
        return AllocResult(True, served) if served else ADMITTED

    def _append(self, seq_id: Hashable, tokens: int, n_tokens: int, content: Any) -> bool:
        index = self.index
        if index is not None and content is not None:  # misuse raises before any change
            content = index.check_content(content, n_tokens, "append")
        table = self._tables[seq_id]
        bs = self.block_size
        n_new = (tokens + n_tokens + bs - 1) // bs - len(table)
        pool = self.pool
        cow = tokens % bs != 0 and pool.refcount[table[-1]] > 1
        need = n_new + 1 if cow else n_new
        if need > pool.num_free and (index is None or not index.make_room(need - pool.num_free)):
            return False
        if cow:
            self._copy_on_write(table)
        if n_new:
            table.extend(pool.take(n_new))
            self._count.blocks_taken += n_new
        if index is not None:
            index.appended(seq_id, tokens, n_tokens, content, table)
        return True

    def _copy_on_write(self, table: list[int]) -> None:
        """Give the writer a private copy of its shared last block."""
        (new,) = self.pool.take(1)
        self.pool.decref((table[-1],))  # stays >= 1: other tables still map it
        table[-1] = new
        self._count.cow_copies += 1
        self._count.blocks_taken += 1
        self._add_copy(self.block_bytes)

    def _fork(self, parent_id: Hashable, child_id: Hashable, tokens: int) -> bool:
        table = list(self._tables[parent_id])
        self.pool.incref(table)
        self._tables[child_id] = table
        if self.index is not None:
            self.index.forked(parent_id, child_id, table)
        return True

    def _free(self, seq_id: Hashable, tokens: int) -> None:
        self._release(seq_id, uncache=False)

    def _free_uncached(self, seq_id: Hashable, tokens: int) -> None:
        self._release(seq_id, uncache=True)

    def _release(self, seq_id: Hashable, *, uncache: bool) -> None:
        """Drop the sequence's references, last block first (vLLM's order)."""
        table = self._tables.pop(seq_id)
        self._count.blocks_returned += self.pool.decref(reversed(table))
        if self.index is not None:
            self.index.released(seq_id, table, uncache)

    # ---------------------------------------------------------------------- queries
    def blocks_needed(self, seq_id: Hashable, n_tokens: int = 1) -> int:
        """New blocks ``append(seq_id, n_tokens)`` takes, the copy-on-write block included."""
        tokens = self._live_tokens(seq_id, "blocks_needed")
        n = checked_count(n_tokens, "blocks_needed")
        table, bs = self._tables[seq_id], self.block_size
        n_new = (tokens + n + bs - 1) // bs - len(table)
        cow = n > 0 and tokens % bs != 0 and self.pool.refcount[table[-1]] > 1
        return n_new + int(cow)

    def can_allocate(self, n_tokens: int, *, content: Any = None) -> bool:
        n = checked_count(n_tokens, "can_allocate", minimum=1)
        if self.index is not None and content is not None:
            return self.index.can_allocate(n, content)
        return -(-n // self.block_size) <= self.available_blocks()

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
        """Physical block ids of a live sequence, logical block 0 first."""
        self._live_tokens(seq_id, "block_table")
        return tuple(self._tables[seq_id])

    def seq_capacity_tokens(self, seq_id: Hashable) -> int:
        """Slots of the blocks a live sequence maps (``len(table) * block_size``)."""
        self._live_tokens(seq_id, "seq_capacity_tokens")
        return len(self._tables[seq_id]) * self.block_size

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
        return self.pool.usable_blocks * self.block_size

    # --------------------------------------------------------------- prefix cache
    def useful_tokens(self) -> int:
        """Distinct token states; a cached block mapped by unrelated sequences counts once."""
        distinct = self._lineage.distinct_tokens
        return distinct if self.index is None else distinct - self.index.excess_tokens

    def prefix_metrics(self) -> PrefixMetrics | None:
        """The index's F17 counters and cached/active bytes; None without an index."""
        return None if self.index is None else self.index.prefix_metrics(self.block_bytes)

    def set_time(self, now_s: float) -> None:
        """Simulation time for the index's access stamps (no-op without an index)."""
        if self.index is not None:
            self.index.set_time(now_s)

    # ---------------------------------------------------------------------- books
    def _allocated_bytes(self) -> float:
        return self.pool.num_allocated * self.block_bytes

    def _books(self) -> Books:
        bb, pool = self.block_bytes, self.pool
        free = pool.num_empty * bb
        return Books(
            allocated_bytes=pool.num_allocated * bb,
            free_bytes=free,
            cached_bytes=pool.num_cached * bb,
            remainder_bytes=self.pool_bytes - pool.usable_blocks * bb,
            free_extents=(free,) if free else (),  # any free block serves any request
        )

    def _check_kind(self) -> None:
        self.pool.check()
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
        for b in range(n_blocks):
            if mapped[b] != self.pool.refcount[b]:
                raise InvariantError(
                    f"paged: block {b} has refcount {self.pool.refcount[b]} but "
                    f"{mapped[b]} tables map it"
                )
        if self.index is not None:
            self.index.check(self._tables, self._tokens)

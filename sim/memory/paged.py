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

Composition (how the prefix-cache kinds build on this class, without this module knowing
them): override ``_match_prefix`` (blocks a new sequence shares and the tokens they hold),
``_make_room`` (evict cached blocks until n are free), ``available_blocks``,
``_after_allocate`` / ``_after_append`` / ``_after_fork`` (index content as blocks fill) and
``_release`` (retain blocks in the cache instead of freeing them; ``BlockPool.retain``).
``useful_tokens`` counts fork lineage only; a cache that shares blocks between unrelated
sequences overrides it.

Invariants: len(table) = ceil(tokens / B) for every sequence; the refcount of every block
= the number of tables that map it; a block mapped by several tables holds the same number
of tokens in each (it is never written while shared); free + allocated + cached +
remainder = pool.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any

from sim.memory.base import Allocator, Books, checked_count, positive_int
from sim.memory.block_pool import BlockPool
from sim.memory.errors import InvariantError
from sim.memory.metrics import ADMITTED, MISSED, AllocResult


class PagedAllocator(Allocator):
    """Fixed-size blocks from a FIFO free queue; forks share blocks, writes copy on write."""

    kind = "paged"

    def __init__(
        self, *, pool_bytes: float, kv_bytes_per_token: float, block_size: int = 16
    ) -> None:
        super().__init__(pool_bytes=pool_bytes, kv_bytes_per_token=kv_bytes_per_token)
        self.block_size = positive_int(block_size, "block_size")
        self.block_bytes = self.block_size * self.kv_bytes_per_token
        self.pool = BlockPool(math.floor(self.pool_bytes / self.block_bytes))
        self._tables: dict[Hashable, list[int]] = {}  # seq -> physical block ids, by logical

    # ------------------------------------------------------------ composition hooks
    def _match_prefix(self, seq_id: Hashable, n_tokens: int, content: Any) -> tuple[list[int], int]:
        """Full blocks a new sequence can share, and the prompt tokens they serve."""
        return [], 0

    def _make_room(self, n_blocks: int) -> bool:
        """Try to have ``n_blocks`` free blocks (a cache evicts here); say if there are."""
        return n_blocks <= self.pool.num_free

    def available_blocks(self) -> int:
        """Blocks an operation could get now: free ones (plus evictable ones in a cache)."""
        return self.pool.num_free

    def _after_allocate(self, seq_id: Hashable, n_tokens: int, content: Any) -> None:
        """Called once a new sequence's table is installed."""

    def _after_append(self, seq_id: Hashable, tokens: int, n_tokens: int, content: Any) -> None:
        """Called once an append's blocks are in the table (``tokens`` = old length)."""

    def _after_fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        """Called once the child's table is installed."""

    def _release(self, seq_id: Hashable, table: list[int], tokens: int) -> None:
        """Drop the sequence's references, last block first (vLLM's order)."""
        self._count.blocks_returned += self.pool.decref(reversed(table))

    # ------------------------------------------------------------------- operations
    def _allocate(self, seq_id: Hashable, n_tokens: int, content: Any) -> AllocResult:
        pool = self.pool
        shared, matched = self._match_prefix(seq_id, n_tokens, content)
        n_new = -(-n_tokens // self.block_size) - len(shared)
        if shared:
            pool.incref(shared)  # pin before making room, so eviction cannot take them
        if n_new > pool.num_free and not self._make_room(n_new):
            if shared:
                pool.decref(shared)
            return MISSED
        table = shared + pool.take(n_new) if shared else pool.take(n_new)
        self._tables[seq_id] = table
        self._count.blocks_taken += n_new
        self._after_allocate(seq_id, n_tokens, content)
        return AllocResult(True, matched) if matched else ADMITTED

    def _append(self, seq_id: Hashable, tokens: int, n_tokens: int, content: Any) -> bool:
        table = self._tables[seq_id]
        bs = self.block_size
        n_new = (tokens + n_tokens + bs - 1) // bs - len(table)
        cow = tokens % bs != 0 and self.pool.refcount[table[-1]] > 1
        need = n_new + 1 if cow else n_new
        if need > self.pool.num_free and not self._make_room(need):
            return False
        if cow:
            self._copy_on_write(table)
        if n_new:
            table.extend(self.pool.take(n_new))
            self._count.blocks_taken += n_new
        self._after_append(seq_id, tokens, n_tokens, content)
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
        self._after_fork(parent_id, child_id)
        return True

    def _free(self, seq_id: Hashable, tokens: int) -> None:
        self._release(seq_id, self._tables.pop(seq_id), tokens)

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
        return -(-n // self.block_size) <= self.available_blocks()

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
        return self.pool.num_blocks * self.block_size

    # ---------------------------------------------------------------------- books
    def _allocated_bytes(self) -> float:
        return self.pool.num_allocated * self.block_bytes

    def _books(self) -> Books:
        bb, pool = self.block_bytes, self.pool
        free = pool.num_free * bb
        return Books(
            allocated_bytes=pool.num_allocated * bb,
            free_bytes=free,
            cached_bytes=pool.num_cached * bb,
            remainder_bytes=self.pool_bytes - pool.num_blocks * bb,
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

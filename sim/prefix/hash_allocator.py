"""``paged_hash``: the paged allocator with vLLM V1's hashed full-block prefix cache.

Responsibility: the request-level half of vLLM V1 prefix caching (``hashcache`` holds the
block pool): hash each full block of a sequence's content (chained, SPEC F19), look up
the longest run of leading cached hashes at admission, cap it so at least one prompt token
is computed (``(n - 1) // B`` blocks: a fully cached prompt recomputes its last block),
touch the hits, take new blocks from the head of the free queue (evicting their hashes),
cache blocks as they fill (the prompt's at admission, generated ones on ``append`` with
``content=``), and free a finished sequence tail first to the tail of the queue. Sharing is
whole blocks only (vLLM has no partial-tail copy). It is the ``paged`` design with
``prefix_caching: hash``; registered in the memory factory by name.

Defaults follow the V1 design document's rules (vLLM 0.8, early 2025; see ``hashcache``):
``null_block=False``, ``unhashed_to_head=False``.

Books: free (queue blocks without a hash) + allocated (refcount > 0) + cached (queue blocks
with a hash) + remainder (bytes making no block, and the null block) = pool. Note that a
cached block is also *takeable*: ``available_blocks`` = free + cached, as in vLLM.

Hashing is incremental: a sequence keeps its chain hash (its last block's) and the content
past its last full block, so each block is hashed once, in O(its segments).

Invariant: the paged invariants; the pool's (``HashBlockPool.check``); while a sequence's
content is known, it has one hash per full block, each block of its table carries its hash
in the pool, the last hash chains from the one before over the last full block's content,
and the unhashed tail is its content past that block.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from sim.memory.base import Books, checked_count, flag
from sim.memory.errors import InvariantError
from sim.memory.metrics import MISSED, AllocResult
from sim.memory.paged import PagedAllocator
from sim.prefix.hashcache import HashBlockPool
from sim.prefix.radix_allocator import checked_content
from sim.prefix.sharing import FamilyLedger
from sim.prefix.spans import (
    ROOT_HASH,
    advance,
    chain_hash,
    extend_normal,
    hash_blocks_from,
    rest,
    slice_tokens,
)
from sim.prefix.stats import PrefixCacheReport, PrefixStats


class HashPagedAllocator(PrefixCacheReport, PagedAllocator):
    """Paged blocks whose free queue is vLLM V1's LRU prefix cache (see module docstring)."""

    kind = "paged_hash"
    uses_content = True  # the engine passes token content with every allocate and append

    def __init__(
        self,
        *,
        pool_bytes: float,
        kv_bytes_per_token: float,
        block_size: int = 16,
        null_block: bool = False,
        unhashed_to_head: bool = False,
    ) -> None:
        super().__init__(
            pool_bytes=pool_bytes, kv_bytes_per_token=kv_bytes_per_token, block_size=block_size
        )
        n = self.pool.num_blocks
        if n < 1 + null_block:
            raise InvariantError(f"paged_hash: the pool holds {n} blocks")
        self.pool = HashBlockPool(
            n, flag(null_block, "null_block"), flag(unhashed_to_head, "unhashed_to_head")
        )
        self.stats = PrefixStats()
        self.ledger = FamilyLedger(self.block_size)
        self._content: dict[Hashable, list | None] = {}  # None = unknown content
        self._hashes: dict[Hashable, list[int]] = {}  # hashes of its full blocks
        self._tail: dict[Hashable, list] = {}  # its content past its last full block
        self._pending = None

    # ------------------------------------------------------------------ operations
    def _lookup(self, n_tokens: int, content: Any, op: str):
        segs = None if content is None else checked_content(content, n_tokens, op, self.kind)
        if segs is None:
            hashes, tail = [], []
        else:
            hashes, qi, qoff = hash_blocks_from(segs, 0, 0, self.block_size)
            tail = rest(segs, qi, qoff)
        found = self.pool.lookup(hashes)
        hit = found[: (n_tokens - 1) // self.block_size]
        need = -(-n_tokens // self.block_size) - len(hit)
        reclaim = sum(1 for b in hit if self.pool.refcount[b] == 0)  # touched out of the queue
        return (segs, hashes, tail), found, hit, need <= self.pool.num_free - reclaim

    def _allocate(self, seq_id: Hashable, n_tokens: int, content: Any) -> AllocResult:
        hashed, found, hit, fits = self._lookup(n_tokens, content, "allocate")
        if not fits:
            return MISSED  # checked before touching, as vLLM does: nothing moved
        self._pending = (hashed, found, hit)
        try:
            result = super()._allocate(seq_id, n_tokens, content)
        finally:
            self._pending = None
        return AllocResult(True, len(hit) * self.block_size) if hit else result

    def _match_prefix(self, seq_id, n_tokens, content) -> tuple[list[int], int]:
        hit = self._pending[2]
        return list(hit), len(hit) * self.block_size

    def _after_allocate(self, seq_id: Hashable, n_tokens: int, content: Any) -> None:
        (segs, hashes, tail), found, hit = self._pending
        table = self._tables[seq_id]
        self.pool.cache(table[len(hit) : len(hashes)], hashes[len(hit) :])
        self.ledger.new(seq_id)
        self.ledger.map(seq_id, table[: len(hashes)])
        self._content[seq_id] = None if segs is None else list(segs)
        self._hashes[seq_id] = hashes
        self._tail[seq_id] = tail
        bs = self.block_size
        self.stats.record(seq_id, n_tokens, len(found) * bs, len(hit) * bs)

    def _append(self, seq_id: Hashable, tokens: int, n_tokens: int, content: Any) -> bool:
        if content is not None:  # normalised once, for _after_append
            content = checked_content(content, n_tokens, "append", self.kind)
        return super()._append(seq_id, tokens, n_tokens, content)

    def _after_append(self, seq_id: Hashable, tokens: int, n_tokens: int, content: Any) -> None:
        cur = self._content[seq_id]
        if cur is None:
            return
        if content is None:
            self._content[seq_id] = None  # tokens of unknown content: nothing more to cache
            return
        extend_normal(cur, content)  # normalised by _append
        tail = self._tail[seq_id]
        extend_normal(tail, content)
        have = self._hashes[seq_id]
        if (tokens + n_tokens) // self.block_size <= len(have):
            return
        parent = have[-1] if have else ROOT_HASH
        new, qi, qoff = hash_blocks_from(tail, 0, 0, self.block_size, parent)
        self._tail[seq_id] = rest(tail, qi, qoff)
        blocks = self._tables[seq_id][len(have) : len(have) + len(new)]
        self.pool.cache(blocks, new)
        self.ledger.map(seq_id, blocks)
        have.extend(new)

    def _after_fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        cur = self._content[parent_id]
        self._content[child_id] = None if cur is None else list(cur)
        self._hashes[child_id] = list(self._hashes[parent_id])
        self._tail[child_id] = list(self._tail[parent_id])
        self.ledger.fork(parent_id, child_id, self._tables[child_id])

    def _release(self, seq_id: Hashable, table: list[int], tokens: int) -> None:
        del self._content[seq_id], self._hashes[seq_id], self._tail[seq_id]
        self.ledger.release(seq_id, table)
        super()._release(seq_id, table, tokens)  # tail first, to the tail of the queue

    def free_uncached(self, seq_id: Hashable) -> int:
        """Free ``seq_id`` and drop its blocks from the cache too (a pause dropped for
        recompute that must really recompute): each of its blocks that no other table maps
        loses its hash (``HashBlockPool.uncache_free``). Returns how many were uncached."""
        table = list(self._tables.get(seq_id, ()))
        self.free(seq_id)
        return self.pool.uncache_free(reversed(table))

    # ------------------------------------------------------------------ queries
    def can_allocate(self, n_tokens: int, *, content: Any = None) -> bool:
        n = checked_count(n_tokens, "can_allocate", minimum=1)
        return self._lookup(n, content, "can_allocate")[3]

    @property
    def max_sequence_tokens(self) -> int:
        return self.pool.usable_blocks * self.block_size

    def _evicted_blocks(self) -> int:
        return self.pool.evictions

    def _books(self) -> Books:
        bb, pool = self.block_bytes, self.pool
        free = pool.num_empty * bb
        return Books(
            allocated_bytes=pool.num_allocated * bb,
            free_bytes=free,
            cached_bytes=pool.num_cached * bb,
            remainder_bytes=self.pool_bytes - pool.usable_blocks * bb,
            free_extents=(free,) if free else (),
        )

    def _check_kind(self) -> None:
        super()._check_kind()
        try:
            self.ledger.check(self._tables)
        except AssertionError as exc:
            raise InvariantError(f"paged_hash: {exc}") from None
        for seq_id, hashes in self._hashes.items():
            if self._content[seq_id] is not None:
                self._check_hashes(seq_id, hashes)

    def _check_hashes(self, seq_id: Hashable, hashes: list[int]) -> None:
        """O(blocks + segments): no hash is recomputed but the last one."""
        cur, bs = tuple(self._content[seq_id]), self.block_size
        full = self._tokens[seq_id] // bs
        table, block_hash = self._tables[seq_id], self.pool.block_hash
        stale = len(hashes) != full or any(block_hash[table[i]] != h for i, h in enumerate(hashes))
        if not stale and full:
            parent = hashes[-2] if full > 1 else ROOT_HASH
            stale = hashes[-1] != chain_hash(parent, slice_tokens(cur, (full - 1) * bs, full * bs))
        if stale or self._tail[seq_id] != rest(cur, *advance(cur, 0, 0, full * bs)):
            raise InvariantError(f"paged_hash: sequence {seq_id!r} hashes are stale")

"""vLLM V1's hashed full-block prefix cache: the free queue is the LRU eviction order.

Responsibility: model ``vllm/v1/core/block_pool.py`` and the prefix-caching part of the KV
cache manager (REFERENCES.md, vLLM items 1-4), beside the radix tree, so both designs can
be compared on one workload:
- full blocks get a chained hash (F19) and enter a hash -> block map; equal hashes
  are not deduplicated (two physical copies may coexist, vLLM's append-only block tables);
- a new request takes the longest run of leading cached hashes, capped so that at least
  one prompt token is computed (``(n_tokens - 1) // B`` blocks at most): when the whole
  prompt hits, the last block is recomputed;
- hit blocks are *touched*: a block with refcount 0 leaves the free queue;
- new blocks pop the head of the free queue; a popped block that still has a hash is
  evicted from the map (that is the LRU eviction);
- a finished request's blocks are freed tail first and appended to the tail, so its last
  blocks (which hash the most tokens, least likely to be reused) are evicted first;
- kvsim's addition, an agent hint's retain priority (vLLM #51428's Retain; not in vLLM):
  ``retain(blocks, p)`` with ``p > 0`` moves free cached blocks out of the queue into a
  queue of priority ``p``, taken only when the LRU queue and every lower priority's queue
  are empty (LRU within one); without a priority the pool is vLLM's exactly.

Defaults follow current vLLM (0.33.0's ``KVCacheManager``, found exact block for block:
docs/prefix_cache.md): ``null_block`` (block 0 reserved, never allocated; usage = 1 -
free/(num_blocks - 1)) and ``unhashed_to_head`` (freed blocks without a hash go to the
head, so they are reused before any cached block is evicted). Both false give the older
rules of the V1 design document (``docs/design/v1/prefix_caching.md`` as published with
vLLM 0.8, early 2025), for which its 10-block example was written: no null block, every
freed block appended to the tail.

The request-level part (hashing content, the hit cap, caching blocks as they fill) is
``hash_index`` (the ``paged_hash`` kind's ``PrefixIndex``), which brings this pool to the
paged core.

Invariant: every block is in exactly one state: free-empty (in the queue, no hash),
free-cached (in the queue or a retained queue, with a hash: dormant, evictable), allocated
(refcount > 0), or the reserved null block; the queues hold exactly the refcount-0 blocks,
each once; retained queues hold only cached blocks; the map holds exactly the blocks with a
hash.
"""

from __future__ import annotations

from collections import OrderedDict

from sim.errors import InvariantError
from sim.memory.prefix_index import PrefixListener


class HashBlockPool:
    """vLLM V1 ``BlockPool``: refcounts, a doubly linked free queue, a hash -> block map.

    It offers the interface ``PagedAllocator`` uses of a pool (``sim.memory.PagedPool``:
    ``take``, ``incref``, ``decref``, ``refcount``, ``num_free``, ``num_empty``,
    ``num_cached``, ``num_allocated``, ``usable_blocks``, ``free_queue``, ``check``), with
    vLLM's meaning: ``num_free`` counts every block in the queue, cached ones included
    (taking one evicts its hash), and ``incref`` of a free block is vLLM's *touch*.
    """

    def __init__(self, num_blocks: int, null_block: bool = True, unhashed_to_head: bool = True):
        if num_blocks < 1 + null_block:
            raise ValueError(f"num_blocks must be >= {1 + null_block}, got {num_blocks}")
        self.num_blocks = num_blocks
        self.null_block = 0 if null_block else None  # block id of the null block
        self.unhashed_to_head = unhashed_to_head
        self.refcount = [0] * num_blocks  # tables mapping each block
        self.block_hash: list[int | None] = [None] * num_blocks
        # OrderedDict = the doubly linked list: O(1) pop head, append tail, remove middle
        self._queue: OrderedDict[int, None] = OrderedDict.fromkeys(
            range(int(null_block), num_blocks)
        )
        self._map: dict[int, dict[int, None]] = {}  # hash -> {block id: None}, oldest first
        self.num_cached = 0  # free blocks (any queue) that still have a hash (dormant)
        #: retained free cached blocks: priority (> 0) -> its LRU queue; block -> priority
        self._retained: dict[float, OrderedDict[int, None]] = {}
        self._priority_of: dict[int, float] = {}
        self.evictions = 0  # cached blocks whose hash was dropped when popped (cumulative)
        #: told when a hash leaves the map (its last block lost it); set by ``HashIndex``
        self.listener: PrefixListener | None = None

    # -------------------------------------------------------------- queries
    @property
    def num_free(self) -> int:
        """Blocks in the free queues (empty or cached): what a request may take."""
        return len(self._queue) + len(self._priority_of)

    @property
    def num_empty(self) -> int:
        """Free blocks holding nothing reusable."""
        return self.num_free - self.num_cached

    @property
    def num_allocated(self) -> int:
        """Blocks mapped by at least one table."""
        return self.usable_blocks - self.num_free

    @property
    def usable_blocks(self) -> int:
        return self.num_blocks - (self.null_block is not None)

    def usage(self) -> float:
        """vLLM's KV usage: 1 - free / usable blocks."""
        return 1.0 - self.num_free / self.usable_blocks

    def free_queue(self) -> list[int]:
        """The free queue head to tail, then the retained queues by priority (the eviction
        order)."""
        out = list(self._queue)
        for p in sorted(self._retained):
            out.extend(self._retained[p])
        return out

    def lookup(self, hashes: list[int]) -> list[int]:
        """Blocks of the longest run of leading hashes that are cached."""
        out = []
        for h in hashes:
            blocks = self._map.get(h)
            if not blocks:
                break
            out.append(next(iter(blocks)))
        return out

    # -------------------------------------------------------------- mutation
    def incref(self, block_ids) -> None:
        """vLLM's *touch*: one more table maps each block; a free one leaves the queue."""
        for b in block_ids:
            if self.refcount[b] == 0:
                if b in self._priority_of:
                    self._unretain(b)
                elif b == self.null_block or b not in self._queue:
                    raise InvariantError(f"hash pool: incref of block {b}, not in the queue")
                else:
                    del self._queue[b]
                self.num_cached -= self.block_hash[b] is not None
            self.refcount[b] += 1

    def take(self, n: int) -> list[int]:
        """Pop ``n`` blocks from the head of the queue, evicting their hashes (refcount 1)."""
        if n > self.num_free:
            raise InvariantError(f"hash pool: take({n}) with {self.num_free} free blocks")
        out = []
        for _ in range(n):
            if self._queue:
                b, _ = self._queue.popitem(last=False)
            else:  # the LRU queue is empty: the lowest retained priority's oldest block
                b = next(iter(self._retained[min(self._retained)]))
                self._unretain(b)
            h = self.block_hash[b]
            if h is not None:
                self._uncache(b, h)
                self.num_cached -= 1
                self.evictions += 1
            self.refcount[b] = 1
            out.append(b)
        return out

    def retain(self, block_ids, priority: float) -> int:
        """Move each given free cached block of the LRU queue to the queue of ``priority``
        (> 0; 0 or less: nothing moves, vLLM's order has nothing below LRU), in the order
        given; returns how many moved."""
        if priority <= 0:
            return 0
        moved = 0
        for b in block_ids:
            if self.refcount[b] or self.block_hash[b] is None or b not in self._queue:
                continue
            del self._queue[b]
            self._retained.setdefault(priority, OrderedDict())[b] = None
            self._priority_of[b] = priority
            moved += 1
        return moved

    def _unretain(self, b: int) -> None:
        p = self._priority_of.pop(b)
        q = self._retained[p]
        del q[b]
        if not q:
            del self._retained[p]

    def _uncache(self, b: int, h: int) -> None:
        blocks = self._map[h]
        del blocks[b]
        if not blocks:
            del self._map[h]
            if self.listener is not None:
                self.listener.evicted((h,))
        self.block_hash[b] = None

    def uncache_free(self, block_ids) -> int:
        """Drop the hash of each given block that is free and cached: it stays in the queue
        as a free-empty block (at the head with ``unhashed_to_head``, the first given
        first), counted as an eviction. Allocated or unhashed blocks are left alone.
        Returns how many were uncached."""
        dropped = []
        for b in block_ids:
            h = self.block_hash[b]
            if h is None or self.refcount[b] or b not in self._queue:
                if h is None or b not in self._priority_of:
                    continue
                self._unretain(b)  # back in the LRU queue (at its tail) as a free-empty block
                self._queue[b] = None
            self._uncache(b, h)
            self.num_cached -= 1
            self.evictions += 1
            dropped.append(b)
        if self.unhashed_to_head:
            for b in reversed(dropped):
                self._queue.move_to_end(b, last=False)
        return len(dropped)

    def cache(self, block_ids: list[int], hashes: list[int]) -> None:
        """Record full blocks under their hashes (a block already hashed keeps its hash)."""
        for b, h in zip(block_ids, hashes, strict=True):
            if self.block_hash[b] is None:
                self.block_hash[b] = h
                self._map.setdefault(h, {})[b] = None

    def decref(self, ordered_block_ids) -> int:
        """One table fewer maps each block, in the order given; return how many reached 0.

        vLLM frees a finished request's blocks *tail first* (the caller passes the table
        reversed); blocks reaching refcount 0 join the tail of the queue in that order (with
        ``unhashed_to_head``, those without a hash join the head instead, the first freed
        first).
        """
        head = []
        released = 0
        for b in ordered_block_ids:
            if self.refcount[b] <= 0:
                raise InvariantError(f"hash pool: decref of free block {b}")
            self.refcount[b] -= 1
            if self.refcount[b]:
                continue
            released += 1
            if self.block_hash[b] is None and self.unhashed_to_head:
                head.append(b)
                continue
            self._queue[b] = None
            self.num_cached += self.block_hash[b] is not None
        for b in reversed(head):
            self._queue[b] = None
            self._queue.move_to_end(b, last=False)
        return released

    def check(self) -> None:
        """Raise InvariantError naming the first broken invariant (module docstring)."""
        queued = set(self._queue)
        retained = [b for q in self._retained.values() for b in q]
        if len(queued) != len(self._queue) or queued & set(retained) or set(retained) != set(
            self._priority_of
        ):
            raise InvariantError("hash pool: a block is twice in the queues")
        if any(self.block_hash[b] is None for b in retained):
            raise InvariantError("hash pool: a retained block has no hash")
        queued |= set(retained)
        for b in range(self.num_blocks):
            if b == self.null_block:
                if b in queued or self.block_hash[b] is not None or self.refcount[b]:
                    raise InvariantError("hash pool: the null block was used")
            elif (self.refcount[b] == 0) != (b in queued):
                raise InvariantError(
                    f"hash pool: block {b} refcount {self.refcount[b]} but in queue={b in queued}"
                )
        hashed = {b for b, h in enumerate(self.block_hash) if h is not None}
        if hashed != {b for blocks in self._map.values() for b in blocks}:
            raise InvariantError("hash pool: hash map out of sync with block hashes")
        for h, blocks in self._map.items():
            if any(self.block_hash[b] != h for b in blocks):
                raise InvariantError(f"hash pool: hash {h:x} maps a wrong block")
        if self.num_cached != len(hashed & queued):
            raise InvariantError(
                f"hash pool: num_cached {self.num_cached} != {len(hashed & queued)}"
            )

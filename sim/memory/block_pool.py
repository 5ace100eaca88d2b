"""The physical blocks of a paged pool: ids, refcounts, the FIFO free queue, cached blocks.

Responsibility: which block is where. Every block is in exactly one of three states:
  * free      refcount 0, in the free queue, holds nothing worth keeping;
  * allocated refcount >= 1: mapped by that many block tables;
  * cached    refcount 0, not in the queue, *retained*: a prefix cache keeps its content
              for reuse (always 0 blocks without a prefix cache).

Free-queue order (a documented, tested property): the queue is FIFO. It starts in block-id
order 0, 1, ..., N-1; ``take`` pops from the head; a block whose refcount drops to zero is
appended to the tail (unless retained). So a freed block is reused only after every block
that was free before it, which is vLLM V1's order and makes the queue an LRU list when a
prefix cache leaves content in free blocks. ``unretain(..., to_front=True)`` puts evicted
blocks at the head instead (vLLM 2026 main does that for blocks without a hash).

Cost: O(1) per block touched, and whole tables at C speed: the queue is a list read from
a moving head (``take`` is one slice; the taken prefix is cut off now and then), and a
``decref`` whose blocks all reach zero, none retained (a finished request's table without
a prefix cache), checks and queues them in bulk with the block-by-block loop's result.

``CountPool`` is the pool of a ``PagedAllocator`` in count mode (no block has an id yet):
its free count only.

``PagedPool`` is what ``PagedAllocator`` uses of a pool; a prefix index may bring its own
pool with that interface (vLLM's hashed pool in ``sim.prefix.hashcache``, whose cached
blocks stay in the free queue).

Invariant: num_free + num_allocated + num_cached = num_blocks; the queue holds each free
block exactly once; ``num_cached`` = blocks with refcount 0 that are retained.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from itertools import compress
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Protocol

from sim.errors import InvariantError
from sim.lazy_numpy import numpy_on_first_use

if TYPE_CHECKING:
    import numpy as np
else:
    np = numpy_on_first_use(globals())  # the invariant check alone reads arrays


class PagedPool(Protocol):
    """The block pool as ``PagedAllocator`` uses it (``BlockPool`` and any index's own)."""

    num_blocks: int  # block ids are 0 .. num_blocks - 1

    @property
    def refcount(self) -> list[int]:
        """Tables mapping each block, by block id (``CountPool``, whose blocks have no
        ids, raises)."""

    @property
    def usable_blocks(self) -> int:
        """Blocks that can ever be handed out (``num_blocks`` less any reserved one)."""

    @property
    def num_free(self) -> int:
        """Blocks ``take`` can hand out now."""

    @property
    def num_empty(self) -> int:
        """Free blocks holding nothing reusable (the books' free bytes)."""

    @property
    def num_cached(self) -> int:
        """Blocks with refcount 0 whose content a cache keeps (the books' cached bytes)."""

    @property
    def num_allocated(self) -> int:
        """Blocks mapped by at least one table."""

    def take(self, n: int) -> list[int]:
        """``n`` free blocks, each with refcount 1."""

    def incref(self, ids: Iterable[int]) -> None:
        """One more table maps each block (a cached block is revived)."""

    def decref(self, ids: Iterable[int]) -> int:
        """One table fewer maps each block, in the order given; return how many reached 0."""

    def free_queue(self) -> list[int]:
        """Free block ids in the order ``take`` hands them out."""

    def check(self) -> None:
        """Raise ``InvariantError`` naming the first broken invariant."""


#: the taken prefix of the queue list is cut off once it is this long and at least half
#: the list, so the list stays under twice the pool plus this and a cut costs O(1) per
#: block taken, amortised
_CUT_BLOCKS = 64


class BlockPool:
    """``num_blocks`` blocks with refcounts and a FIFO free queue; O(1) per block touched,
    with a whole table taken or returned in bulk (C-level slices and look-ups)."""

    __slots__ = ("num_blocks", "refcount", "_queue", "_head", "_retained", "num_cached")

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 0:
            raise ValueError(f"num_blocks must be >= 0, got {num_blocks}")
        self.num_blocks = num_blocks
        self.refcount: list[int] = [0] * num_blocks  # tables mapping each block
        #: the free queue is ``_queue[_head:]``, head first: ``take`` slices it and moves
        #: ``_head`` instead of popping block by block; the taken prefix is cut now and then
        self._queue: list[int] = list(range(num_blocks))
        self._head = 0
        self._retained = bytearray(num_blocks)  # 1 = a cache keeps this block's content
        self.num_cached = 0

    @property
    def num_free(self) -> int:
        return len(self._queue) - self._head

    @property
    def num_empty(self) -> int:
        """Free blocks (cached ones are not in the queue here, so all of them)."""
        return len(self._queue) - self._head

    @property
    def usable_blocks(self) -> int:
        return self.num_blocks

    @property
    def num_allocated(self) -> int:
        return self.num_blocks - len(self._queue) + self._head - self.num_cached

    def free_queue(self) -> list[int]:
        """Free block ids in the order ``take`` will hand them out."""
        return self._queue[self._head :]

    def take(self, n: int) -> list[int]:
        """The ``n`` blocks at the head of the queue; each gets refcount 1."""
        queue, head = self._queue, self._head
        end = head + n
        if end > len(queue) or n < 0:  # a negative count would hand taken blocks back
            raise InvariantError(f"block pool: take({n}) with {len(queue) - head} free blocks")
        rc = self.refcount
        if n == 1:  # a decode's new block: the common case
            b = queue[head]
            rc[b] = 1
            ids = [b]
        else:
            ids = queue[head:end]
            for b in ids:
                rc[b] = 1
        if end >= _CUT_BLOCKS and 2 * end >= len(queue):
            del queue[:end]
            self._head = 0
        else:
            self._head = end
        return ids

    def incref(self, ids: Iterable[int]) -> None:
        """One more table maps each block; a cached block becomes allocated again."""
        rc = self.refcount
        for b in ids:
            r = rc[b]
            if r == 0:
                if not self._retained[b]:
                    raise InvariantError(f"block pool: incref of free block {b}")
                self.num_cached -= 1
            rc[b] = r + 1

    def decref(self, ids: Iterable[int]) -> int:
        """One table fewer maps each block; return how many reached zero.

        A block reaching zero goes to the tail of the free queue, or becomes cached if a
        prefix cache retains it. Blocks are processed in the order given. Blocks that all
        reach zero and none of which is retained (a finished request's table without a
        prefix cache) go in bulk, with the block-by-block loop's result.
        """
        blocks = ids if isinstance(ids, list) else list(ids)
        n = len(blocks)
        rc = self.refcount
        retained = self._retained
        if n > 1:
            get = itemgetter(*blocks)
            if get(rc).count(1) == n and not any(get(retained)):
                for b in blocks:
                    rc[b] -= 1
                if get(rc).count(0) != n:  # an id given twice: its second decref fails
                    b = next(b for b in blocks if rc[b] < 0)
                    raise InvariantError(f"block pool: decref of free block {b}")
                self._queue.extend(blocks)
                return n
        push = self._queue.append
        released = 0
        for b in blocks:
            r = rc[b] - 1
            if r < 0:
                raise InvariantError(f"block pool: decref of free block {b}")
            rc[b] = r
            if r == 0:
                released += 1
                if retained[b]:
                    self.num_cached += 1
                else:
                    push(b)
        return released

    def retain(self, ids: Iterable[int]) -> None:
        """A prefix cache keeps these allocated blocks' content when they are released."""
        for b in ids:
            if self.refcount[b] == 0 and not self._retained[b]:
                raise InvariantError(f"block pool: retain of free block {b}")
            self._retained[b] = 1

    def is_retained(self, block: int) -> bool:
        return bool(self._retained[block])

    def retained_blocks(self) -> list[int]:
        """The retained blocks' ids, ascending (a C-level pass over the pool)."""
        return list(compress(range(self.num_blocks), self._retained))

    def unretain(self, ids: Iterable[int], *, to_front: bool = False) -> int:
        """The cache lets go of these blocks (eviction); cached ones become free.

        Return how many became free. Allocated blocks stay allocated and will be freed
        normally. ``to_front`` puts freed blocks at the head of the queue.
        """
        freed = []
        for b in ids:
            if not self._retained[b]:
                raise InvariantError(f"block pool: unretain of block {b}, which is not retained")
            self._retained[b] = 0
            if self.refcount[b] == 0:
                self.num_cached -= 1
                freed.append(b)
        queue, head, k = self._queue, self._head, len(freed)
        if not to_front:
            queue.extend(freed)
        elif head >= k:  # written over the taken prefix
            queue[head - k : head] = freed
            self._head = head - k
        else:
            queue[head:head] = freed
        return k

    def check(self) -> None:
        """Every block in exactly one state; counts agree. The whole pool is read with
        array passes (``engine.check_invariants`` calls this after every decision, on
        pools of 10^5 blocks); only a state they find broken is walked block by block
        (``_first_broken``), which names the first broken invariant."""
        if not 0 <= self._head <= len(self._queue):
            raise InvariantError(f"block pool: queue head {self._head} outside the queue")
        free = self.free_queue()
        try:
            sound = self._sound_in_bulk(free)
        except (OverflowError, TypeError):  # not int64 tables of the pool's length
            self._first_broken(free)
            return
        if not sound:
            self._first_broken(free)
            raise InvariantError("block pool: the bulk check and the block-by-block one disagree")

    def _sound_in_bulk(self, free: list[int]) -> bool:
        """Whether ``_first_broken`` would find nothing: the free queue's ids in range and
        each once, unmapped and not retained; no refcount below 0; every other block at
        refcount 0 retained (cached), and as many of them as ``num_cached``. Raises
        ``OverflowError`` or ``TypeError`` for a value that is not a 64-bit integer."""
        n = self.num_blocks
        if len(self.refcount) != n or len(self._retained) != n:
            raise TypeError("block pool: tables of another length than the pool")
        queue = np.frombuffer(array("q", free), dtype=np.int64)
        if queue.size and (queue.min() < 0 or queue.max() >= n):
            return False
        in_queue = np.bincount(queue, minlength=n)
        refcount = np.frombuffer(array("q", self.refcount), dtype=np.int64)
        retained = np.frombuffer(bytes(self._retained), dtype=np.uint8) != 0
        zero = refcount == 0
        return bool(
            (not in_queue.size or in_queue.max() <= 1)
            and not refcount[queue].any()
            and not retained[queue].any()
            and (not refcount.size or refcount.min() >= 0)
            and not (zero & (in_queue == 0) & ~retained).any()
            and int((zero & retained).sum()) == self.num_cached
        )

    def _first_broken(self, free: list[int]) -> None:
        """``check`` block by block: raise naming the first broken invariant."""
        if len(set(free)) != len(free):
            raise InvariantError("block pool: a block is twice in the free queue")
        in_queue = bytearray(self.num_blocks)
        for b in free:
            if not 0 <= b < self.num_blocks:
                raise InvariantError(f"block pool: bad block id {b} in the free queue")
            if self.refcount[b] or self._retained[b]:
                raise InvariantError(f"block pool: block {b} is free but mapped or retained")
            in_queue[b] = 1
        cached = 0
        for b in range(self.num_blocks):
            r = self.refcount[b]
            if r < 0:
                raise InvariantError(f"block pool: block {b} has refcount {r}")
            if r == 0 and not in_queue[b]:
                if not self._retained[b]:
                    raise InvariantError(f"block pool: block {b} leaked (refcount 0, not free)")
                cached += 1
        if cached != self.num_cached:
            raise InvariantError(f"block pool: {cached} cached blocks, counter {self.num_cached}")


class CountPool:
    """A paged pool that counts its blocks and names none (``PagedAllocator``'s count
    mode: every table private, so each sequence's block count is ``ceil(tokens / B)``
    and only the free count moves). It has no ids, queue or refcounts: ``refcount``,
    ``take``, ``incref``, ``decref`` and ``free_queue`` raise; the allocator swaps it for
    a ``BlockPool`` the first time identity matters (``PagedAllocator.track_block_ids``),
    so a reference to the allocator's ``pool`` kept from before the swap goes stale:
    read ``alloc.pool`` afresh.

    Invariant: 0 <= num_free <= num_blocks; nothing is ever cached."""

    __slots__ = ("num_blocks", "num_free")
    num_cached = 0

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 0:
            raise ValueError(f"num_blocks must be >= 0, got {num_blocks}")
        self.num_blocks = num_blocks
        self.num_free = num_blocks  # blocks no table maps

    @property
    def refcount(self) -> list[int]:
        raise self._no_ids("refcount")  # no ids: nothing to count per block

    # read at every decision (the memory row): C-level getters, no Python frame
    usable_blocks = property(attrgetter("num_blocks"), doc="every block is usable")
    num_empty = property(attrgetter("num_free"), doc="nothing is cached: the free blocks")

    @property
    def num_allocated(self) -> int:
        return self.num_blocks - self.num_free

    def _no_ids(self, op: str) -> InvariantError:
        return InvariantError(f"block pool: {op} in count mode (blocks have no ids yet)")

    def take(self, n: int) -> list[int]:
        raise self._no_ids("take")

    def incref(self, ids: Iterable[int]) -> None:
        raise self._no_ids("incref")

    def decref(self, ids: Iterable[int]) -> int:
        raise self._no_ids("decref")

    def free_queue(self) -> list[int]:
        raise self._no_ids("free_queue")

    def check(self) -> None:
        if not 0 <= self.num_free <= self.num_blocks:
            raise InvariantError(
                f"block pool: {self.num_free} free blocks of {self.num_blocks} (count mode)"
            )

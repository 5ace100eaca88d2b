"""The block pool's bulk paths against the block-by-block definition.

``BlockPool`` keeps its free queue as a list with a moving head (``take`` slices it, the
taken prefix is cut now and then) and returns a table whose blocks all reach zero, none
retained, in bulk. These tests run the same operations through it and through a
reference pool written here the plain way (a deque, one block at a time) and compare
everything observable after every operation: the free queue in order, the refcounts, the
counts and the return values.
"""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import InvariantError
from sim.memory import BlockPool
from sim.memory.block_pool import _CUT_BLOCKS


class RefPool:
    """The pool's documented behaviour, one block at a time (the specification)."""

    def __init__(self, n: int) -> None:
        self.refcount = [0] * n
        self.free: deque[int] = deque(range(n))
        self.retained = [False] * n
        self.num_cached = 0

    def take(self, n: int) -> list[int]:
        ids = [self.free.popleft() for _ in range(n)]
        for b in ids:
            self.refcount[b] = 1
        return ids

    def incref(self, ids: list[int]) -> None:
        for b in ids:
            if self.refcount[b] == 0:
                self.num_cached -= 1
            self.refcount[b] += 1

    def decref_one(self, b: int) -> int:
        r = self.refcount[b] - 1
        if r < 0:
            raise InvariantError(f"block pool: decref of free block {b}")
        self.refcount[b] = r
        if r:
            return 0
        if self.retained[b]:
            self.num_cached += 1
        else:
            self.free.append(b)
        return 1

    def retain(self, ids: list[int]) -> None:
        for b in ids:
            self.retained[b] = True

    def unretain(self, ids: list[int], to_front: bool) -> int:
        freed = []
        for b in ids:
            self.retained[b] = False
            if self.refcount[b] == 0:
                self.num_cached -= 1
                freed.append(b)
        if to_front:
            self.free.extendleft(reversed(freed))
        else:
            self.free.extend(freed)
        return len(freed)


def same(pool: BlockPool, ref: RefPool) -> None:
    assert pool.free_queue() == list(ref.free)
    assert pool.refcount == ref.refcount
    assert pool.num_cached == ref.num_cached
    assert pool.num_free == len(ref.free)
    assert pool.num_allocated == sum(1 for r in ref.refcount if r)
    pool.check()


#: (verb, size or pick, flag): take n; decref / incref / retain / unretain a pick of blocks
OPS = st.lists(
    st.tuples(
        st.sampled_from(("take", "free_table", "decref", "incref", "retain", "unretain")),
        st.integers(0, 40),
        st.booleans(),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(n_blocks=st.integers(1, 3 * _CUT_BLOCKS), ops=OPS, seed=st.randoms())
def test_pool_equals_block_by_block_reference(n_blocks, ops, seed):
    """Any sequence of takes, table returns (bulk), shared decrefs, increfs, retains and
    evictions (to the tail or the head) leaves the pool exactly where the block-by-block
    reference is: same queue order, refcounts and counts, same return values."""
    pool, ref = BlockPool(n_blocks), RefPool(n_blocks)
    tables: list[list[int]] = []
    for verb, k, flag in ops:
        if verb == "take":
            k = min(k, pool.num_free)
            got = pool.take(k)
            assert got == ref.take(k)
            if got:
                tables.append(got)
        elif verb == "free_table" and tables:  # a table returned last block first
            table = tables.pop(k % len(tables))
            expect = sum(ref.decref_one(b) for b in table[::-1])
            assert pool.decref(table[::-1]) == expect
        elif verb == "decref" and tables:  # a table whose blocks others map lets go
            table = tables[k % len(tables)]
            if all(ref.refcount[b] > 1 for b in table):
                tables.remove(table)
                expect = sum(ref.decref_one(b) for b in table)
                assert pool.decref(table) == expect
        elif verb == "incref" and tables:  # a fork
            table = tables[k % len(tables)]
            pool.incref(table)
            ref.incref(table)
            tables.append(list(table))
        elif verb == "retain" and tables:
            table = tables[k % len(tables)]
            pool.retain(table)
            ref.retain(table)
        elif verb == "unretain":
            ids = [b for b in range(n_blocks) if ref.retained[b]]
            seed.shuffle(ids)
            ids = ids[: k + 1]
            assert pool.unretain(ids, to_front=flag) == ref.unretain(ids, flag)
        same(pool, ref)


@settings(max_examples=100, deadline=None)
@given(
    n_blocks=st.integers(2, 80),
    shared=st.lists(st.booleans(), min_size=2, max_size=80),
    retained=st.lists(st.booleans(), min_size=2, max_size=80),
)
def test_bulk_decref_equals_one_by_one(n_blocks, shared, retained):
    """``decref(ids)`` equals ``decref([b])`` for each b in order, whether the bulk path
    applies (every block reaches zero, none retained) or not."""
    a, b = BlockPool(n_blocks), BlockPool(n_blocks)
    for pool in (a, b):
        pool.take(n_blocks // 2)  # a moved head
        ids = pool.take(pool.num_free)
        pool.incref([x for x, s in zip(ids, shared, strict=False) if s])
        pool.retain([x for x, r in zip(ids, retained, strict=False) if r])
    released = a.decref(ids[::-1])
    assert released == sum(b.decref([x]) for x in ids[::-1])
    assert a.free_queue() == b.free_queue()
    assert a.refcount == b.refcount
    assert a.num_cached == b.num_cached
    a.check()


def test_bulk_decref_returns_a_table_in_the_order_given():
    pool = BlockPool(6)
    table = pool.take(4)
    assert pool.decref(table[::-1]) == 4
    assert pool.free_queue() == [4, 5, 3, 2, 1, 0]
    assert pool.refcount == [0] * 6


def test_bulk_decref_of_an_id_twice_raises_like_one_by_one():
    pool = BlockPool(4)
    pool.take(3)
    with pytest.raises(InvariantError, match="decref of free block 1"):
        pool.decref([0, 1, 1])
    with pytest.raises(InvariantError, match="decref of free block 2"):
        BlockPool(4).decref([2, 3])  # never taken


def test_queue_cut_keeps_order_and_bounds_the_list():
    """Taking past ``_CUT_BLOCKS`` cuts the taken prefix off: the queue reads the same and
    the list holds at most twice the pool plus the cut."""
    n = 4 * _CUT_BLOCKS
    pool = BlockPool(n)
    taken = []
    for _ in range(3 * _CUT_BLOCKS):
        taken += pool.take(1)
        if len(taken) % 3 == 0:
            pool.decref(taken[-1:])
        assert len(pool._queue) <= 2 * n + _CUT_BLOCKS
    assert taken[: 2 * _CUT_BLOCKS] == list(range(2 * _CUT_BLOCKS))
    assert pool._head < _CUT_BLOCKS or 2 * pool._head < len(pool._queue)
    pool.check()


def test_evicted_blocks_to_the_head_before_and_after_a_cut():
    """``unretain(..., to_front=True)`` writes over the taken prefix when it is long enough
    and inserts at the head otherwise; either way the evicted blocks come out first."""
    pool = BlockPool(8)
    ids = pool.take(3)
    pool.retain(ids)
    pool.decref(ids)  # cached, not free
    assert pool.num_cached == 3
    assert pool.unretain(ids[:2], to_front=True) == 2  # head 3 >= 2: over the prefix
    assert pool.free_queue() == [0, 1, 3, 4, 5, 6, 7]
    pool.check()
    cut = BlockPool(_CUT_BLOCKS + 8)
    ids = cut.take(_CUT_BLOCKS)  # the taken prefix is cut: the head is back at 0
    assert cut._head == 0
    cut.retain(ids)
    cut.decref(ids)
    assert cut.unretain(ids[:2], to_front=True) == 2  # inserted before the head
    assert cut.free_queue() == [0, 1, *range(_CUT_BLOCKS, _CUT_BLOCKS + 8)]
    assert cut.take(3) == [0, 1, _CUT_BLOCKS]
    cut.check()


def test_take_of_a_negative_count_raises_and_changes_nothing():
    pool = BlockPool(4)
    pool.take(2)
    with pytest.raises(InvariantError, match=r"take\(-1\)"):
        pool.take(-1)
    assert pool.free_queue() == [2, 3]
    pool.check()


def _check_block_by_block(pool: BlockPool) -> str | None:
    """The pool's check written the plain way (the definition ``check``'s C-level passes
    stand for): the message of the first broken invariant, or None."""
    queue = pool._queue[pool._head :]
    if not 0 <= pool._head <= len(pool._queue):
        return f"block pool: queue head {pool._head} outside the queue"
    if len(set(queue)) != len(queue):
        return "block pool: a block is twice in the free queue"
    in_queue = [False] * pool.num_blocks
    for b in queue:
        if not 0 <= b < pool.num_blocks:
            return f"block pool: bad block id {b} in the free queue"
        if pool.refcount[b] != 0 or pool._retained[b]:
            return f"block pool: block {b} is free but mapped or retained"
        in_queue[b] = True
    cached = 0
    for b in range(pool.num_blocks):
        r = pool.refcount[b]
        if r < 0:
            return f"block pool: block {b} has refcount {r}"
        if r == 0 and not in_queue[b]:
            if not pool._retained[b]:
                return f"block pool: block {b} leaked (refcount 0, not free)"
            cached += 1
    if cached != pool.num_cached:
        return f"block pool: {cached} cached blocks, counter {pool.num_cached}"
    return None


def _apply(pool: BlockPool, ops: list, seed) -> None:
    """The reference test's operations on ``pool`` alone (a sound pool afterwards)."""
    tables: list[list[int]] = []
    for verb, k, flag in ops:
        if verb == "take":
            got = pool.take(min(k, pool.num_free))
            if got:
                tables.append(got)
        elif verb == "free_table" and tables:
            pool.decref(tables.pop(k % len(tables))[::-1])
        elif verb == "decref" and tables:
            table = tables[k % len(tables)]
            if all(pool.refcount[b] > 1 for b in table):
                tables.remove(table)
                pool.decref(table)
        elif verb == "incref" and tables:
            table = tables[k % len(tables)]
            pool.incref(table)
            tables.append(list(table))
        elif verb == "retain" and tables:
            pool.retain(tables[k % len(tables)])
        elif verb == "unretain":
            ids = [b for b in range(pool.num_blocks) if pool.is_retained(b)]
            seed.shuffle(ids)
            pool.unretain(ids[: k + 1], to_front=flag)


def _check_as_defined(pool: BlockPool) -> str | None:
    """``pool.check()`` against the definition: it raises exactly when the definition
    finds a broken invariant, with that message; returns the message (None: sound)."""
    expected = _check_block_by_block(pool)
    if expected is None:
        pool.check()
    else:
        with pytest.raises(InvariantError) as got:
            pool.check()
        assert str(got.value) == expected
    return expected


CORRUPTIONS = st.lists(st.tuples(
    st.sampled_from(["refcount", "retained", "queue_add", "queue_drop", "queue_set", "cached",
                     "head"]),
    st.integers(0, 10**6), st.integers(-2, 3)), max_size=3)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(n_blocks=st.integers(1, 40), ops=OPS, seed=st.randoms(), corruptions=CORRUPTIONS)
def test_check_finds_what_the_block_by_block_check_finds(n_blocks, ops, seed, corruptions):
    """``check`` reads the pool in bulk: on a sound pool (any operations) and on one
    corrupted any way (a refcount, a retained flag, the free queue, the cached counter,
    the head), it raises exactly when the block-by-block definition finds a broken
    invariant, with that invariant's message."""
    pool = BlockPool(n_blocks)
    _apply(pool, ops, seed)
    for what, i, v in corruptions:
        b = i % n_blocks
        queue = pool._queue
        if what == "refcount":
            pool.refcount[b] = v
        elif what == "retained":
            pool._retained[b] = 1 if v > 0 else 0
        elif what == "queue_add":
            queue.append(b if v != -2 else n_blocks + i % 3)  # a block again, or a bad id
        elif what == "queue_drop" and len(queue) > pool._head:
            del queue[pool._head + i % (len(queue) - pool._head)]
        elif what == "queue_set" and len(queue) > pool._head:
            queue[pool._head + i % (len(queue) - pool._head)] = b
        elif what == "cached":
            pool.num_cached += v
        elif what == "head":
            pool._head = len(queue) + 1 if v < 0 else pool._head
    _check_as_defined(pool)


@pytest.mark.parametrize("corrupt", [
    lambda p: p._queue.append(p.num_blocks + 2),  # a bad id past the pool
    lambda p: p._queue.append(-1),  # a bad id below it
    lambda p: p._retained.__setitem__(p._queue[-1], 1),  # a free block retained
    lambda p: p.refcount.__setitem__(p._queue[-1], 2),  # a free block mapped
    lambda p: p.refcount.__setitem__(0, -1),  # a refcount below 0
    lambda p: p._queue.pop(),  # a block leaked
    lambda p: setattr(p, "num_cached", 1),  # the cached counter off
    # a free block retained, another leaked and the counter off by one: the counts agree
    lambda p: (p._retained.__setitem__(p._queue[-1], 1), p._queue.pop(p._head),
               setattr(p, "num_cached", p.num_cached + 1)),
])  # fmt: skip
def test_check_names_each_broken_invariant(corrupt):
    pool = BlockPool(8)
    pool.take(3)
    corrupt(pool)
    assert _check_as_defined(pool) is not None


def test_check_finds_a_free_block_retained_when_the_cached_count_still_agrees():
    """A free block marked retained while a cached block is mapped again: the cached
    count is what it was, so only the free blocks' own flags show it."""
    pool = BlockPool(8)
    table = pool.take(2)
    pool.retain(table)
    pool.decref(table)  # both cached now
    pool._retained[pool._queue[-1]] = 1  # a free block retained...
    pool.refcount[table[0]] = 1  # ...and a cached one mapped: 2 cached blocks, as counted
    expected = _check_as_defined(pool)
    assert expected is not None and "free but mapped or retained" in expected


@pytest.mark.parametrize("corrupt", [
    lambda p: p._queue.append(2**63),  # an id no int64 holds
    lambda p: p._queue.append(-(2**63) - 1),
    lambda p: p.refcount.__setitem__(0, -(2**64)),
    lambda p: p.refcount.__setitem__(0, 2**64),  # mapped, if oddly: the walk finds nothing
    lambda p: p.refcount.__setitem__(0, 1.0),
    lambda p: p.refcount.append(0),  # a table longer than the pool
    lambda p: p._retained.extend(b"\x01"),
])  # fmt: skip
def test_values_the_arrays_cannot_hold_are_walked_block_by_block(corrupt):
    """A pool the array passes cannot read (a value past 64 bits, a float, tables of
    another length) is checked block by block: the same outcome as the definition."""
    pool = BlockPool(8)
    pool.take(3)
    corrupt(pool)
    _check_as_defined(pool)

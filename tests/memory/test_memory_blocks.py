"""The block pool (FIFO free queue, refcounts, cached blocks) and the paged allocator."""

from __future__ import annotations

import pytest

from sim.errors import InvariantError
from sim.memory import BlockPool, PagedAllocator, make_allocator


def paged(n_blocks: int, block_size: int = 4, **kw) -> PagedAllocator:
    """A paged allocator with block ids from the start (these tests name blocks)."""
    a = make_allocator(
        "paged", pool_bytes=n_blocks * block_size, kv_bytes_per_token=1, block_size=block_size,
        **kw,
    )  # fmt: skip
    a.track_block_ids()
    return a


def test_free_queue_starts_in_id_order_and_is_fifo():
    """Documented property: blocks are handed out in id order at first; a freed block
    goes to the tail and is reused only after every block that was free before it."""
    a = paged(8)
    a.allocate("x", 8)  # blocks 0, 1
    a.allocate("y", 4)  # block 2
    assert a.block_table("x") == (0, 1) and a.block_table("y") == (2,)
    a.free("x")
    assert a.pool.free_queue() == [3, 4, 5, 6, 7, 1, 0]  # x's blocks at the tail, last first
    a.allocate("z", 20)  # 5 blocks: the never-used ones first
    assert a.block_table("z") == (3, 4, 5, 6, 7)
    a.allocate("w", 8)
    assert a.block_table("w") == (1, 0)
    a.check_invariants()


def test_release_order_is_last_block_first():
    """A freed sequence returns its blocks tail first (vLLM V1), so with a prefix cache the
    least shareable blocks are reused first."""
    a = paged(6)
    a.allocate("s", 24)
    a.free("s")
    assert a.pool.free_queue() == [5, 4, 3, 2, 1, 0]


def test_shared_blocks_return_only_when_the_last_table_lets_go():
    a = paged(8)
    a.allocate("p", 8)
    a.fork("p", "c")
    a.free("p")
    assert a.pool.num_free == 6 and a.pool.refcount[0] == a.pool.refcount[1] == 1
    act = a.take_activity()
    assert act.blocks_taken == 2 and act.blocks_returned == 0
    a.free("c")
    assert a.pool.num_free == 8
    assert a.take_activity().blocks_returned == 2


def test_pool_is_whole_blocks_and_reports_the_remainder():
    a = make_allocator("paged", pool_bytes=1000, kv_bytes_per_token=3, block_size=16)
    assert a.block_bytes == 48 and a.num_blocks == 20
    m = a.metrics()
    assert m.remainder_bytes == 1000 - 960
    assert m.free_bytes == 960 and m.free_extents == (960,)
    a.check_invariants()


def test_paged_phi_ext_is_zero_by_construction_and_fits_says_whether_it_fits():
    """SPEC F9: every free block serves any block request, so a paged pool has no external
    fragmentation; a request larger than the free blocks does not fit (a pool short of
    memory), which ``request_fits`` says, not phi_ext (the engine's memory.parquet agrees)."""
    from sim.memory import request_fits

    a = paged(10)
    a.allocate(0, 24)  # 6 blocks, 4 free = 16 bytes
    for request in (16, 17, 1_000):
        m = a.metrics(request_bytes=request)
        assert m.phi_ext == 0.0, request
        assert request_fits(m.largest_free_bytes, request) is (request <= 16)
    assert a.metrics(request_bytes=16).largest_free_bytes == 16
    assert request_fits(16, None) is None


def test_append_takes_blocks_only_at_block_boundaries():
    a = paged(10)
    a.allocate(0, 5)  # 2 blocks
    assert a.blocks_needed(0, 3) == 0 and a.blocks_needed(0, 4) == 1
    a.take_activity()
    for _ in range(3):
        a.append(0)
    assert a.take_activity().blocks_taken == 0
    a.append(0)  # token 8 opens block 3
    assert len(a.block_table(0)) == 3
    a.append(0, 100)  # bulk: 108 tokens -> 27 blocks > 10
    assert a.seq_tokens(0) == 9
    assert a.append(0, 31)  # 40 tokens = 10 blocks, the whole pool
    assert a.pool.num_free == 0
    assert a.metrics().phi_ext is None


def test_a_cow_needs_a_free_block_or_the_write_misses():
    a = paged(3)
    a.allocate("p", 6)  # 2 blocks, the second half full
    a.fork("p", "c")
    a.allocate("z", 4)  # the last free block
    assert a.blocks_needed("c", 1) == 1 and not a.can_append("c", 1)
    assert a.append("c", 1) is False
    assert a.metrics().cow_copies == 0
    a.free("z")
    assert a.append("c", 2)
    assert a.metrics().cow_copies == 1
    a.check_invariants()


def test_block_pool_cached_blocks_keep_the_books():
    """Composition hooks for a prefix cache: a retained block becomes *cached* (not free)
    when its refcount reaches zero; incref revives it; unretain frees it."""
    pool = BlockPool(6)
    ids = pool.take(3)
    pool.retain(ids[:2])
    assert pool.decref(ids) == 3
    assert (pool.num_free, pool.num_cached, pool.num_allocated) == (4, 2, 0)
    assert pool.free_queue() == [3, 4, 5, 2]
    pool.incref([ids[0]])  # a prefix hit on a dormant block
    assert (pool.num_cached, pool.num_allocated) == (1, 1)
    assert pool.unretain([ids[1]]) == 1  # eviction of the dormant one
    assert pool.free_queue() == [3, 4, 5, 2, 1]
    assert pool.unretain([ids[0]], to_front=False) == 0  # live: freed later, normally
    pool.decref([ids[0]])
    assert pool.free_queue()[-1] == 0 and pool.num_cached == 0
    pool.check()


def test_block_pool_unretain_to_front():
    pool = BlockPool(4)
    ids = pool.take(2)
    pool.retain(ids)
    pool.decref(ids)
    pool.unretain(ids, to_front=True)
    assert pool.free_queue() == [0, 1, 2, 3]


def test_block_pool_misuse_is_an_invariant_error():
    pool = BlockPool(2)
    with pytest.raises(InvariantError, match="take"):
        pool.take(3)
    with pytest.raises(InvariantError, match="incref of free block"):
        pool.incref([0])
    with pytest.raises(InvariantError, match="decref of free block"):
        pool.decref([1])
    with pytest.raises(InvariantError, match="not retained"):
        pool.unretain([0])
    with pytest.raises(InvariantError, match="retain of free block"):
        pool.retain([0])


def test_check_invariants_catches_a_corrupted_refcount():
    a = paged(4)
    a.allocate(0, 8)
    a.pool.refcount[0] = 2  # simulate a bug
    with pytest.raises(InvariantError, match="refcount 2 but 1 tables map it"):
        a.check_invariants()


def test_check_invariants_catches_a_leaked_block():
    a = paged(4)
    a.allocate(0, 8)
    a._tables[0].pop()  # a table that forgot a block
    a._tokens[0] = 4
    a._lineage._leaf[0].tokens = 4
    a._lineage.distinct_tokens = a._lineage.logical_tokens = 4
    with pytest.raises(InvariantError, match="block 1 has refcount 1 but 0 tables"):
        a.check_invariants()


def test_one_invariant_error_class_for_every_layer():
    """``sim.errors.InvariantError`` is the one invariant failure, defined there alone and
    imported from there by every module (no re-export to drift from)."""
    import sim.errors
    import sim.memory
    import sim.memory.errors

    assert sim.errors.InvariantError is InvariantError
    assert not hasattr(sim.memory.errors, "InvariantError")
    assert not hasattr(sim.memory, "InvariantError")
    assert issubclass(InvariantError, AssertionError)

"""Contiguous kinds: doubling growth, the transient 3N peak, placement, grow in place,
deep-copy forks, static reservation, buddy rounding; and the fork lineage (useful bytes)."""

from __future__ import annotations

import pytest

from sim.errors import InvariantError
from sim.memory import make_allocator
from sim.memory.lineage import TokenLineage


def contiguous(pool_tokens: int, **kw):
    return make_allocator("contiguous", pool_bytes=pool_tokens, kv_bytes_per_token=1, **kw)


def test_growth_doubles_once_to_the_smallest_doubling_that_fits():
    """A 20k-token observation grows the buffer once (not a chain of reallocations)."""
    a = contiguous(100_000)
    a.allocate(0, 1000)
    a.take_activity()
    assert a.blocks_needed(0, 20_000) == 1
    assert a.append(0, 20_000)
    assert a.seq_capacity_tokens(0) == 32_000  # 1000 * 2^5 >= 21 000
    act = a.take_activity()
    assert act.buffer_allocs == 1 and act.buffer_frees == 1
    assert act.bytes_copied == 1000  # the written tokens, once
    assert a.metrics().peak_allocated_bytes == 33_000  # old N and new buffer coexist


def test_growth_leaves_the_old_buffer_as_a_hole():
    a = contiguous(100)
    a.allocate("a", 10)  # [0, 10)
    a.allocate("b", 10)  # [10, 20)
    assert a.append("a", 1)  # moves to [20, 40); [0, 10) becomes a hole
    assert a.seq_buffer("a") == (20, 20)
    assert a.metrics().free_extents == (10, 60)
    a.check_invariants()


def test_three_n_transient_peak_can_make_growth_miss():
    """Rule 3.2: 2N must be found while N still exists; 3N does not fit in 2.5N."""
    a = contiguous(250)
    a.allocate(0, 100)
    assert not a.can_append(0, 1) and a.append(0, 1) is False
    assert a.seq_capacity_tokens(0) == 100
    b = contiguous(300)
    b.allocate(0, 100)
    assert b.append(0, 1) and b.metrics().peak_allocated_bytes == 300


def test_grow_in_place_is_off_by_default_and_avoids_the_copy_when_on():
    for in_place, copied, start in ((False, 10, 10), (True, 0, 0)):
        a = contiguous(100, grow_in_place=in_place)
        a.allocate(0, 10)
        a.append(0, 5)
        assert a.metrics().bytes_copied == copied
        assert a.seq_buffer(0) == (start, 20)
        a.check_invariants()


def test_best_fit_placement_reuses_the_tightest_hole():
    for placement, where in (("first_fit", 0), ("best_fit", 25)):
        a = contiguous(100, placement=placement)
        for seq, n in enumerate((20, 5, 8, 5)):
            a.allocate(seq, n)  # [0,20) [20,25) [25,33) [33,38)
        a.free(0)
        a.free(2)
        a.allocate("x", 8)
        assert a.seq_buffer("x") == (where, 8)  # holes: [0, 20) and [25, 33)


def test_contiguous_fork_clones_the_buffer_and_copies_the_tokens():
    a = contiguous(1000)
    a.allocate("p", 60)
    a.append("p", 10)  # capacity 120
    assert a.fork("p", "c")
    assert a.seq_capacity_tokens("c") == 120
    assert a.metrics().bytes_copied == 60 + 70  # growth copy + deep copy of 70 tokens


def test_static_reserves_max_tokens_and_never_grows():
    a = make_allocator("static", pool_bytes=1000, kv_bytes_per_token=1, max_tokens=300)
    assert not a.can_allocate(301) and not a.allocate(0, 301)
    for i in range(3):
        assert a.allocate(i, 1)
    assert not a.allocate(3, 1)
    m = a.metrics()
    assert m.allocated_bytes == 900 and m.free_extents == (100,)
    assert a.append(0, 299) and not a.append(0, 1)
    assert a.blocks_needed(0, 1) == 1 and not a.can_append(0, 1)
    assert a.max_sequence_tokens == 300


def test_static_max_sequence_tokens_is_zero_when_one_reservation_does_not_fit():
    a = make_allocator("static", pool_bytes=100, kv_bytes_per_token=1, max_tokens=300)
    assert a.max_sequence_tokens == 0 and not a.can_allocate(1)


def test_buddy_allocations_are_power_of_two_blocks_and_grow_by_order():
    a = make_allocator("buddy", pool_bytes=1024, kv_bytes_per_token=1, min_block_tokens=16)
    a.allocate(0, 100)
    assert a.seq_buffer(0) == (0, 128)
    a.append(0, 29)  # 129 tokens -> next order
    assert a.seq_buffer(0) == (256, 256)
    assert a.metrics().bytes_copied == 100
    # the old [0, 128) merged with its free buddy [128, 256): two holes around the new block
    assert a.free_blocks() == [(0, 256), (512, 512)]
    assert a.metrics().free_extents == (256, 512)
    a.check_invariants()


def test_buddy_grow_in_place_absorbs_the_upper_buddy():
    a = make_allocator(
        "buddy", pool_bytes=1024, kv_bytes_per_token=1, min_block_tokens=16, grow_in_place=True
    )
    a.allocate(0, 100)
    a.append(0, 29)
    assert a.seq_buffer(0) == (0, 256) and a.metrics().bytes_copied == 0
    a.check_invariants()


def test_lineage_counts_shared_states_once():
    lin = TokenLineage()
    lin.add("a", 10)
    lin.fork("a", "b", 10)
    lin.fork("a", "c", 10)  # a wrote nothing since the last fork: c hangs beside it
    lin.extend("b", 5)
    assert (lin.distinct_tokens, lin.logical_tokens) == (15, 35)
    lin.remove("a", 10)
    assert lin.distinct_tokens == 15  # b and c still hold the prefix
    lin.remove("b", 15)
    assert lin.distinct_tokens == 10
    lin.remove("c", 10)
    assert (lin.distinct_tokens, lin.logical_tokens) == (0, 0)
    lin.check({})


def test_lineage_check_detects_a_wrong_count():
    lin = TokenLineage()
    lin.add("a", 10)
    lin.distinct_tokens = 11
    with pytest.raises(InvariantError, match="distinct tokens 11 != 10"):
        lin.check({"a": 10})

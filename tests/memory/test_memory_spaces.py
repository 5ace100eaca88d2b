"""Address spaces of the contiguous kinds: sorted free extents and buddy blocks."""

from __future__ import annotations

import pytest

from sim.errors import InvariantError
from sim.memory.buddy import BuddySpace
from sim.memory.extents import ExtentSpace


def test_extents_first_fit_takes_the_lowest_hole_and_best_fit_the_smallest():
    for placement, expected_start in (("first_fit", 0), ("best_fit", 40)):
        s = ExtentSpace(100, placement)
        a, b, c, d = s.reserve(10), s.reserve(30), s.reserve(9), s.reserve(5)
        assert (a, b, c, d) == ((0, 10), (10, 30), (40, 9), (49, 5))
        s.release(*a)  # hole [0, 10)
        s.release(*c)  # hole [40, 49)
        assert s.extents() == [10, 9, 46]
        assert s.reserve(8) == (expected_start, 8)
        s.check([b, d, (expected_start, 8)])


def test_best_fit_picks_the_smallest_sufficient_hole_lowest_address_on_ties():
    s = ExtentSpace(100, "best_fit")
    bufs = [s.reserve(n) for n in (10, 5, 20, 5, 10, 5)]  # [0,10) [10,15) [15,35) ...
    for i in (0, 2, 4):
        s.release(*bufs[i])
    # holes: [0,10) size 10, [15,35) size 20, [40,50) size 10, tail [55,100) size 45
    assert s.extents() == [10, 20, 10, 45]
    assert s.reserve(9) == (0, 9)  # two 10-slot holes: the lower one
    assert s.reserve(12) == (15, 12)  # the 20-slot hole beats the 45-slot tail
    f = ExtentSpace(100, "first_fit")
    bufs = [f.reserve(n) for n in (10, 5, 20, 5, 10, 5)]
    f.release(*bufs[0])
    f.release(*bufs[2])
    assert f.reserve(12) == (15, 12)  # first hole that fits
    assert f.reserve(9) == (0, 9)


def test_release_merges_with_both_neighbours():
    s = ExtentSpace(30)
    a, b, c = s.reserve(10), s.reserve(10), s.reserve(10)
    s.release(*a)
    s.release(*c)
    assert s.extents() == [10, 10]
    s.release(*b)
    assert s.extents() == [30] and s.free_tokens == 30
    s.check([])


def test_double_release_and_overlap_are_invariant_errors():
    s = ExtentSpace(30)
    a = s.reserve(10)
    s.release(*a)
    with pytest.raises(InvariantError, match="overlaps"):
        s.release(*a)
    b = s.reserve(10)
    with pytest.raises(InvariantError, match="gap"):
        s.check([])  # the reserved buffer is missing from the tiling
    s.check([b])


def test_grow_in_place_uses_only_the_adjacent_hole():
    s = ExtentSpace(40)
    a, b = s.reserve(10), s.reserve(10)
    assert not s.can_grow_in_place(*a, 20)  # b sits right after a
    assert s.can_grow_in_place(*b, 30) and not s.can_grow_in_place(*b, 31)
    assert s.grow_in_place(*b, 30)
    assert s.extents() == [] and s.free_tokens == 0
    s.check([a, (10, 30)])


def test_buddy_split_and_merge():
    s = BuddySpace(64, unit=8)  # 8 units
    blk = s.reserve(1)
    assert blk == (0, 8)
    assert s.free_blocks() == [(8, 8), (16, 16), (32, 32)]  # split 8 -> 4 + 2 + 1 + 1
    s.check([blk])
    s.release(*blk)
    assert s.free_blocks() == [(0, 64)]  # merged back to the whole pool
    s.check([])


def test_buddy_rounds_to_a_power_of_two_units():
    s = BuddySpace(1024, unit=16)
    assert s.reserved_size(1) == 16
    assert s.reserved_size(17) == 32
    assert s.reserved_size(100) == 128
    assert s.reserve(100) == (0, 128)


def test_buddy_non_power_of_two_pool_is_covered_by_aligned_top_blocks():
    s = BuddySpace(10 * 4 + 3, unit=4)  # 10 units (+3 remainder slots)
    assert s.total_units == 10 and s.total_tokens == 40
    assert s.free_blocks() == [(0, 32), (32, 8)]
    assert s.largest_reservable() == 32
    assert s.extents() == [40]  # the two top blocks are one contiguous hole
    a = s.reserve(32)
    b = s.reserve(8)
    assert (a, b) == ((0, 32), (32, 8))
    assert s.reserve(4) is None
    s.release(*b)
    s.release(*a)
    assert s.free_blocks() == [(0, 32), (32, 8)]  # top blocks never merge with each other
    s.check([])


def test_buddy_takes_the_lowest_block_of_the_smallest_order():
    s = BuddySpace(16, unit=1)
    blocks = [s.reserve(1) for _ in range(4)]  # units 0..3
    s.release(*blocks[1])
    s.release(*blocks[3])
    # free: unit 1 (order 0), unit 3 (order 0), units 4-7 (order 2), 8-15 (order 3)
    assert s.reserve(1) == (1, 1)
    assert s.reserve(2) == (4, 2)


def test_buddy_grow_in_place_absorbs_free_upper_buddies_only():
    s = BuddySpace(16, unit=1)
    a = s.reserve(2)  # [0, 2)
    assert s.can_grow_in_place(*a, 8)
    assert s.grow_in_place(*a, 8)
    s.check([(0, 8)])
    b = s.reserve(4)  # [8, 12)
    s.release(*b)
    c = s.reserve(4)  # [8, 12) again; upper buddy [12, 16) free
    assert s.grow_in_place(*c, 8)
    s.check([(0, 8), (8, 8)])
    s.release(0, 8)
    d = s.reserve(2)  # [0, 2), buddy [2,4) free, [4,8) free
    e = s.reserve(2)  # [2, 4)
    assert not s.can_grow_in_place(*e, 4)  # an upper half cannot grow upwards
    assert not s.grow_in_place(*d, 4)  # its buddy is taken
    s.check([d, e, (8, 8)])


def test_buddy_release_of_a_free_block_is_an_invariant_error():
    s = BuddySpace(16, unit=1)
    a = s.reserve(4)
    b = s.reserve(4)
    s.release(*a)
    with pytest.raises(InvariantError, match="which is free"):
        s.release(*a)
    s.check([b])

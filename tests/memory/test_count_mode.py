"""The paged allocator's count mode (``PagedAllocator`` before ``track_block_ids``).

Given: a paged allocator without a prefix index, side groups, a hold or a fork keeps, per
sequence, its tokens only (its blocks are ``ceil(tokens / B)``, all its own) and the
pool's free count; block ids appear the first time identity matters.
When: the same operations run on one in count mode and on one with ids from the start.
Then: everything but the ids is the same after every operation (results, errors,
metrics, slots, activity); ids, once given, are the live sequences' blocks in admission
order from a fresh FIFO queue.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import InvariantError
from sim.memory import PagedAllocator
from sim.memory.errors import AllocatorError

B = 4  # tokens per block


def _paged(num_blocks: int, ids: bool) -> PagedAllocator:
    a = PagedAllocator(pool_bytes=num_blocks * B * 8 + 3, kv_bytes_per_token=8, block_size=B)
    if ids:
        a.track_block_ids()
    return a


def test_hot_operations_keep_count_mode_and_book_blocks_by_tokens():
    """allocate, append, append_each and free move counts only: 5 + 3 tokens in blocks of
    4 map 2 + 1 blocks; 4 more tokens into the 5-token sequence take ceil(9/4) - 2 = 1."""
    a = _paged(8, ids=False)
    assert not a.tracks_block_ids
    assert a.allocate("a", 5) and a.allocate("b", 3)
    assert a.free_blocks == 8 - 3
    assert a.append("a", 4)
    a.append_each([("b", 1), ("b", 2), ("a", 3)])  # b: 3 -> 6 tokens, 2 blocks; a: 12, 3
    assert (a.seq_tokens("a"), a.seq_tokens("b")) == (12, 6)
    assert a.free_blocks == 8 - 5 and a.seq_capacity_tokens("b") == 2 * B
    assert a.kv_slots().unfilled == (-12 % B) + (-6 % B)  # 0 + 2
    assert a.blocks_needed("a", 5) == math.ceil(17 / B) - 3
    a.free("a")
    assert a.free_blocks == 8 - 2 and not a.tracks_block_ids
    act = a.take_activity()
    # taken: a 2, b 1, a's 9th token 1, b's 5th 1 (a's 10th-12th fill its third block)
    assert (act.blocks_taken, act.blocks_returned) == (2 + 1 + 1 + 1, 3)
    a.check_invariants()


def test_a_count_pool_names_no_block_and_a_stale_handle_is_not_the_pool():
    """Count mode's pool has no refcounts to read (it raises, as ``take`` does, instead of
    an empty list that ``sum`` or an index would misread); after the switch the
    allocator's pool is a new ``BlockPool`` and a handle kept from before is not it."""
    a = _paged(8, ids=False)
    assert a.allocate("a", 5)
    before = a.pool
    with pytest.raises(InvariantError, match="refcount in count mode"):
        before.refcount  # noqa: B018
    assert a.block_table("a") == (0, 1)  # the switch: ids in admission order
    assert a.pool is not before and a.pool.refcount[:3] == [1, 1, 0]
    assert a.pool.num_free == 6 and before.num_free == 6  # equal now, stale from here on
    assert a.allocate("b", 1) and a.pool.num_free == 5 and before.num_free == 6


def test_ids_given_at_the_first_need_are_the_live_tables_in_admission_order():
    """``block_table`` gives ids: a (9 tokens, 3 blocks) then b (3 tokens, 1 block) take
    0, 1, 2 and 3 from a fresh queue; the rest stays free in id order. With ids from the
    start a took 0, 1 then 3 (b's block 2 came between), so only the ids differ."""
    count, eager = _paged(8, ids=False), _paged(8, ids=True)
    for a in (count, eager):
        assert a.allocate("a", 5) and a.allocate("b", 3) and a.append("a", 4)
    assert eager.block_table("a") == (0, 1, 3) and eager.block_table("b") == (2,)
    assert count.block_table("a") == (0, 1, 2) and count.block_table("b") == (3,)
    assert count.tracks_block_ids and count.pool.free_queue() == [4, 5, 6, 7]
    assert count.metrics() == eager.metrics() and count.kv_slots() == eager.kv_slots()
    count.check_invariants()


@pytest.mark.parametrize("op", ["fork", "hold", "block_table"])
def test_identity_gives_ids(op):
    a = _paged(8, ids=False)
    assert a.allocate("a", 5)
    if op == "fork":
        assert a.fork("a", "c")
    elif op == "hold":
        a.set_held("a", True)
    else:
        a.block_table("a")
    assert a.tracks_block_ids
    a.check_invariants()


def test_check_finds_broken_counts():
    a = _paged(8, ids=False)
    assert a.allocate("a", 5)
    a._unfilled += 1
    with pytest.raises(InvariantError, match="unfilled slots 4, scan 3"):
        a.check_invariants()
    a._unfilled -= 1
    a.pool.num_free -= 1  # a block no sequence maps
    with pytest.raises(InvariantError, match="3 blocks allocated, scan 2"):
        a.check_invariants()


def test_a_batch_that_does_not_fit_raises_and_changes_nothing():
    a = _paged(3, ids=False)
    assert a.allocate("a", 4) and a.allocate("b", 4)
    before = (dict(a._tokens), a.free_blocks, a.changes, a.kv_slots())
    with pytest.raises(InvariantError, match="append_each: 2 blocks, 1 free"):
        a.append_each([("a", 1), ("b", 1)])
    assert (dict(a._tokens), a.free_blocks, a.changes, a.kv_slots()) == before


SEQS = st.integers(0, 5)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("allocate"), SEQS, st.integers(1, 30)),
        st.tuples(st.just("append"), SEQS, st.integers(0, 12)),
        st.tuples(
            st.just("append_each"),
            st.lists(st.tuples(SEQS, st.integers(1, 9)), min_size=1, max_size=4),
        ),
        st.tuples(st.just("free"), SEQS),
        st.tuples(st.just("free_uncached"), SEQS),  # a preemption that drops its KV
        st.tuples(st.just("fork"), SEQS, SEQS),
        st.tuples(st.just("hold"), SEQS, st.booleans()),
        st.tuples(st.just("look"), SEQS),  # block_table: only an id reader
    ),
    max_size=40,
)


def _do(a: PagedAllocator, op: tuple):
    name = op[0]
    if name == "allocate":
        return a.allocate(op[1], op[2])
    if name == "append":
        return a.append(op[1], op[2])
    if name == "append_each":
        return a.append_each(op[1])
    if name == "free":
        return a.free(op[1])
    if name == "free_uncached":
        return a.free_uncached(op[1])
    if name == "fork":
        return a.fork(op[1], 10 + op[2])
    if name == "hold":
        return a.set_held(op[1], op[2])
    return len(a.block_table(op[1]))


def _outcome(a: PagedAllocator, op: tuple):
    try:
        result = _do(a, op)
    except (AllocatorError, InvariantError) as err:
        return type(err), str(err)
    return result


def _observed(a: PagedAllocator) -> tuple:
    seqs = sorted(a.sequences(), key=repr)
    return (
        a.metrics(request_bytes=8 * B * 8),
        a.kv_slots(),
        a.take_activity(),
        a.available_blocks(),
        a.free_blocks,
        a.changes,
        a.useful_tokens(),
        [(s, a.seq_tokens(s), a.seq_capacity_tokens(s), a.is_held(s)) for s in seqs],
        [(a.blocks_needed(s, 5), a.can_append(s, 9)) for s in seqs if not a.is_held(s)],
        a.can_allocate(13),
        a.max_sequence_tokens,
    )


@settings(max_examples=150, deadline=None)
@given(num_blocks=st.integers(1, 24), ops=OPS)
def test_count_mode_is_ids_mode_but_for_the_ids(num_blocks, ops):
    count, eager = _paged(num_blocks, ids=False), _paged(num_blocks, ids=True)
    for op in ops:
        assert _outcome(count, op) == _outcome(eager, op), op
        count.check_invariants()
        eager.check_invariants()
        assert _observed(count) == _observed(eager), op


def test_a_batch_with_an_unknown_sequence_raises_at_it_as_one_by_one():
    """Misuse mid-batch: the appends before it are made (as one by one), none after."""
    count, eager = _paged(8, ids=False), _paged(8, ids=True)
    for a in (count, eager):
        assert a.allocate("a", 3)
        with pytest.raises(AllocatorError, match="'x'"):
            a.append_each([("a", 2), ("x", 1), ("a", 4)])
        assert a.seq_tokens("a") == 5 and a.free_blocks == 8 - 2

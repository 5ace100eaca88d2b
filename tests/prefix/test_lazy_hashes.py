"""The ``paged_hash`` index's deferred hashing: a running sequence's appends are hashed when
something reads them (``HashIndex.join``), and leave what hashing at each append leaves.

Random runs of admissions (fresh prompts, the context of a finished or of a live sequence
plus a new observation), growth with and without content (its own, or a copy of another
live sequence's next tokens, so two sequences fill blocks of equal hash in either order),
forks, frees (cached and uncached), retain priorities, holds (pauses) and capacity probes
go through a lazy index and an eager one (``lazy_hashes = False``) in lockstep: every
result, the books, block tables, refcounts and free queues agree after every operation,
and the hashes (each block's, each sequence's, the map with each hash's blocks in order),
the tails and the family ledger agree wherever the lazy index is read (``join``) and at
the end.
"""

from __future__ import annotations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from lockstep import COMMON_OPS, B, Lockstep

from sim.errors import InvariantError
from sim.memory import make_allocator
from sim.prefix.spans import concat


def _deep(alloc) -> tuple:
    """The whole cache, read after a ``join`` (the lazy index hashes what is pending)."""
    index = alloc.index
    index.join()
    pool = index.pool
    return (
        list(pool.block_hash),
        {h: list(blocks) for h, blocks in pool._map.items()},  # each hash's blocks in order
        {s: list(h) for s, h in index._hashes.items()},
        {s: list(t) for s, t in index._tail.items()},
        {s: None if c is None else list(c) for s, c in index._content.items()},
        index.ledger._fams,
        index.ledger.excess_tokens,
        pool.evictions,
        pool.num_cached,
    )


_OPS = st.one_of(*COMMON_OPS)


class Run(Lockstep):
    """A deferred and an eager ``paged_hash`` allocator in lockstep."""

    def __init__(self, blocks: int, **options) -> None:
        allocs = []
        for lazy in (True, False):
            a = make_allocator("paged_hash", pool_bytes=blocks * B, kv_bytes_per_token=1,
                               block_size=B, **options)  # fmt: skip
            a.index.lazy_hashes = lazy
            allocs.append(a)
        super().__init__(allocs, _deep)

    def checked(self) -> None:
        if self.allocs[0].index._pending:
            event("appends pending")
        if self.allocs[0].pool.evictions:
            event("evictions")


_CASES = (
    st.integers(6, 30),
    st.sampled_from([{}, {"unhashed_to_head": False}, {"null_block": False}]),
    st.lists(_OPS, min_size=20, max_size=100),
)


def _lockstep(blocks: int, options: dict, ops: list) -> None:
    run = Run(blocks, **options)
    for op in ops:
        run.step(op)
    run.release_all()


@settings(max_examples=300, deadline=None)
@given(*_CASES)
def test_deferred_hashing_leaves_what_hashing_at_each_append_leaves(blocks, options, ops):
    _lockstep(blocks, options, ops)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None)
@given(*_CASES)
def test_deferred_hashing_leaves_what_hashing_at_each_append_leaves_long(blocks, options, ops):
    _lockstep(blocks, options, ops)


def test_equal_hashes_enter_the_map_in_the_order_their_blocks_filled():
    """``b`` copies ``a``'s prompt; ``b`` fills the first block of equal content before
    ``a`` does, ``a`` the second one first: each hash lists its blocks in fill order."""
    run = Run(40)
    p = (("p", 0, 2),)
    run.both(lambda x: x.allocate("a", 2, content=p))
    run.both(lambda x: x.allocate("b", 2, content=p))
    more = (("o", 0, 2), ("o", 2, 4))
    run.both(lambda x: x.append("b", 2, content=more[:1]))  # b's block 1 fills first
    run.both(lambda x: x.append("a", 6, content=concat(more[:1], more[1:])))  # a: 1 then 2
    run.both(lambda x: x.append("b", 4, content=more[1:]))  # b's block 2 fills after a's
    lazy = run.allocs[0].index
    assert set(lazy._pending) == {"a", "b"}
    tables = {s: run.allocs[0].block_table(s) for s in "ab"}
    run.both(_deep)
    h1, h2 = lazy._hashes["a"]
    assert lazy._hashes["b"] == [h1, h2]
    assert list(lazy.pool._map[h1]) == [tables["b"][0], tables["a"][0]]
    assert list(lazy.pool._map[h2]) == [tables["a"][1], tables["b"][1]]


def test_reads_join_and_a_listener_keeps_the_index_eager():
    run = Run(40)
    lazy = run.allocs[0]
    lazy.allocate("x", 4, content=[("p", 4)])
    lazy.append("x", 8, content=[("o", 8)])
    assert "x" in lazy.index._pending
    assert lazy.can_allocate(4, content=[("p", 4)])  # a probe reads the map: it joins
    assert not lazy.index._pending and len(lazy.index._hashes["x"]) == 3

    class Feed:
        def __init__(self):
            self.hashes: list = []

        def cached(self, parent, keys, content):
            self.hashes.append(list(keys))

        def evicted(self, keys):
            pass

    lazy.append("x", 4, content=[("o", 8, 4)])
    assert "x" in lazy.index._pending
    feed = Feed()
    assert lazy.subscribe_prefix(feed)
    assert not lazy.index._pending and len(lazy.index._hashes["x"]) == 4
    lazy.append("x", 4, content=[("o", 12, 4)])
    assert not lazy.index._pending and len(feed.hashes) == 1


def test_a_check_catches_a_stale_pending_record_and_a_release_without_releasing():
    run = Run(40)
    a = run.allocs[0]
    a.allocate("x", 4, content=[("p", 4)])
    a.append("x", 9, content=[("o", 9)])
    p = a.index._pending["x"]
    p.full_blocks += 1  # a record past the sequence's tokens
    with pytest.raises(InvariantError, match="pending appends of 'x' are stale"):
        a.check_invariants()
    p.full_blocks -= 1
    a.check_invariants()
    assert "x" in a.index._pending  # a check joins nothing
    with pytest.raises(InvariantError, match="released with appends pending"):
        a.index.released("x", a._tables["x"], False)  # the core calls releasing first

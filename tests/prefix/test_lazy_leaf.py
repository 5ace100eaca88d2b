"""The radix index's lazy leaf: a running sequence's fills wait to join its own leaf until
something reads it (``RadixIndex._waiting``), and leave what eager insertion leaves.

Random runs of admissions (fresh prompts, the context of a finished or of a live sequence
plus a new observation), growth with and without content (its own, or a copy of another
live sequence's next tokens), forks (alone, or followed by two fills of the parent that the
child then copies, so the child's insert walks into the parent's waiting leaf), frees
(cached and uncached), retain priorities, holds (pauses), capacity probes and clock ticks
(alone, or followed by a fresh prompt sharing only a system prompt and a read of the tree)
go through a lazy index and an eager one (``lazy_leaves = False``) in lockstep: every
result, the books, the block tables, refcounts and free queue agree after every operation,
and the tree (labels, block ids, stamps, locks, hit counts, serials), the retained blocks
and the family ledger agree wherever the lazy tree is read (``RadixIndex.tree`` joins every
waiting fill first) and at the end.
"""

from __future__ import annotations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from lockstep import COMMON_OPS, B, Lockstep, books

from sim.errors import InvariantError
from sim.prefix.kinds import RadixAllocator
from sim.prefix.spans import concat, n_tokens


def _tree(index) -> list:
    tree = index.tree  # joins the lazy index's waiting fills
    nodes = [tree.root, *tree.iter_nodes()]
    return sorted(
        (
            n.serial,
            n.parent.serial if n.parent else None,
            n.label,
            tuple(n.block_ids),
            n.lock_ref,
            n.last_access,
            n.created_at,
            n.hit_count,
            n.retain,
            n.waiting,
        )
        for n in nodes
    ) + [(tree.total_blocks, tree.evictable_blocks, tree.evicted_blocks, tree.n_nodes)]


def _deep(alloc) -> tuple:
    """The whole cache, read through ``tree`` first (a lazy index joins)."""
    index = alloc.index
    tree = _tree(index)
    pool = alloc.pool
    retained = [pool.is_retained(b) for b in range(pool.num_blocks)]
    return tree, retained, index.ledger._fams, index.ledger.excess_tokens, index._tail


_OPS = st.one_of(
    *COMMON_OPS,
    # fork, the parent grows a block and another, the child copies both (an insert walks
    # into the parent's waiting leaf)
    st.tuples(st.just("fork_and_follow"), st.integers(0, 60)),
    st.tuples(st.just("tick"), st.integers(0, 3)),
    # the clock ticks, a fresh prompt shares only a system prompt (its walk stops above
    # any waiting leaf and touches the shared nodes), and the tree is read
    st.tuples(st.just("tick_admit_peek"), st.integers(0, 60), st.integers(1, 14)),
)


class Run(Lockstep):
    """A lazy and an eager radix allocator in lockstep, with a clock."""

    def __init__(self, blocks: int, eviction: str, tau: int, tail_policy: str = "truncate") -> None:
        allocs = []
        for lazy in (True, False):
            a = RadixAllocator(pool_bytes=blocks * B, kv_bytes_per_token=1, block_size=B,
                               eviction=eviction, tau_low_blocks=tau,
                               target_free_blocks=2 * tau, tail_policy=tail_policy)  # fmt: skip
            a.index.lazy_leaves = lazy
            allocs.append(a)
        super().__init__(allocs, _deep)
        self.now = 0.0

    def act(self, op: tuple) -> None:
        if op[0] == "tick":
            self.now += op[1] * 0.5
            self.both(lambda a: a.set_time(self.now))

    def checked(self) -> None:
        lazy = self.allocs[0]
        if lazy.index._waiting:
            event("fills waiting")
        if lazy.prefix_metrics().evicted_blocks:
            event("evictions")

    def step(self, op: tuple) -> None:
        kind = op[0]
        if kind == "tick_admit_peek":
            self.step(("tick", 0))
            self.step(("admit", 3 * op[1], op[2]))  # 3 k: base() gives a fresh prompt
            self.step(("peek",))
        elif kind == "fork_and_follow" and (seq := self.pick(op[1])) is not None:
            self.step(("fork", op[1]))
            child = f"s{self.n}"
            if self.content[seq] is None or child not in self.content:
                return
            tokens = n_tokens(self.content[seq])
            at = list(self.content).index  # positions move as sequences come and go
            self.step(("grow", at(seq), -tokens % B + B, 1))  # fills its block and one more
            self.step(("tick", 1))
            self.step(("grow", at(seq), B, 1))  # one more: it waits at the new leaf
            if seq in self.content and child in self.content:
                grown = n_tokens(self.content[seq]) - tokens
                self.step(("copy", at(child), at(seq), grown))
        else:
            super().step(op)


_CASES = (
    st.integers(6, 30),
    st.sampled_from([("lru", 0), ("priority", 0), ("lru", 3), ("lru", 0, "cow_tail")]),
    st.lists(_OPS, min_size=20, max_size=100),
)


def _lockstep(blocks: int, strategy: tuple, ops: list) -> None:
    run = Run(blocks, *strategy)
    for op in ops:
        run.step(op)
    run.release_all()


@settings(max_examples=300, deadline=None)
@given(*_CASES)
def test_a_lazy_leaf_leaves_what_eager_insertion_leaves(blocks, strategy, ops):
    """Removing the join at a fork, at an append of unknown content or in an insert's walk
    fails here; removing the first ``set_time``'s fails here in one of two runs (the
    ``tick_admit_peek`` operation), and always its unit test below and the slow run of
    1,500 examples (measured by removing each join, 2026-12-03)."""
    _lockstep(blocks, strategy, ops)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None)
@given(*_CASES)
def test_a_lazy_leaf_leaves_what_eager_insertion_leaves_long(blocks, strategy, ops):
    _lockstep(blocks, strategy, ops)


def test_fills_wait_until_read_and_a_match_joins_them():
    a = RadixAllocator(pool_bytes=64 * B, kv_bytes_per_token=1, block_size=B)
    index = a.index
    a.set_time(1.0)
    a.allocate("x", 6, content=[("p", 6)])  # one full block, its own leaf
    a.set_time(2.0)
    a.append("x", 7, content=[("o", 7)])  # 13 tokens: blocks 2 and 3 fill
    a.set_time(3.0)
    a.append("x", 1, content=[("o", 7, 1)])  # no block fills
    assert index._tree.total_blocks == 1 and index._waiting["x"].full_blocks == 3
    assert index._waiting["x"].filled_s == 2.0
    a.check_invariants()
    hit = a.allocate("y", 13, content=[("p", 6), ("o", 7)])  # its walk reaches x's leaf
    assert hit.matched_tokens == 12 and "x" not in index._waiting
    assert index._tree.total_blocks == 3
    assert index._node["y"] is index._node["x"] and index._node["x"].end_tokens == 12
    a.check_invariants()


def test_an_insert_walking_into_a_waiting_leaf_joins_it_first():
    """``c`` forks ``p``; ``p`` grows a block (a new leaf below the shared node, inserted) and
    another (it waits at that leaf); ``c`` appends the same two blocks: its insert walks
    through ``p``'s leaf, which must hold its waiting block before the walk reads it."""
    run = Run(40, "lru", 0)
    run.both(lambda x: x.set_time(1.0))
    run.both(lambda x: x.allocate("p", 4, content=(("sys", 0, 4),)))
    run.both(lambda x: x.fork("p", "c"))
    out = (("out", 0, 4), ("out", 4, 4))
    run.both(lambda x: x.append("p", 4, content=out[:1]))
    run.both(lambda x: x.set_time(2.0))
    run.both(lambda x: x.append("p", 4, content=out[1:]))
    lazy = run.allocs[0]
    assert "p" in lazy.index._waiting and lazy.index._node["p"].end_tokens == 8
    run.both(lambda x: x.set_time(3.0))
    run.both(lambda x: x.append("c", 8, content=out))
    assert not lazy.index._waiting
    lazy.check_invariants()
    run.both(books)
    run.both(_deep)


def test_a_listener_keeps_the_index_eager_and_subscribing_joins():
    a = RadixAllocator(pool_bytes=64 * B, kv_bytes_per_token=1, block_size=B)
    index = a.index
    a.allocate("x", 4, content=[("p", 4)])
    a.append("x", 8, content=[("o", 8)])
    assert "x" in index._waiting

    class Feed:
        def __init__(self):
            self.keys: list = []

        def cached(self, parent, keys, content):
            self.keys.append(list(keys))

        def evicted(self, keys):
            pass

    feed = Feed()
    assert a.subscribe_prefix(feed)
    assert not index._waiting and index._tree.total_blocks == 3
    a.append("x", 4, content=[("o", 8, 4)])
    assert not index._waiting and index._tree.total_blocks == 4 and feed.keys == [[3]]


def test_a_release_caches_the_waiting_blocks_and_a_check_catches_stale_records():
    a = RadixAllocator(pool_bytes=64 * B, kv_bytes_per_token=1, block_size=B)
    index = a.index
    a.allocate("x", 4, content=[("p", 4)])
    a.append("x", 9, content=[("o", 9)])
    w = index._waiting["x"]
    w.full_blocks += 1  # a record past the sequence's tokens
    with pytest.raises(InvariantError, match="waiting for 'x' are stale"):
        a.check_invariants()
    w.full_blocks -= 1
    a.check_invariants()
    a.free("x")
    assert a.pool.num_cached == 3 and index._tree.total_blocks == 3
    a.check_invariants()
    with pytest.raises(InvariantError, match="no releasing"):
        a.allocate("y", 5, content=[("q", 5)])
        a.append("y", 4, content=[("r", 4)])
        assert "y" in index._waiting
        index.released("y", a._tables["y"], False)  # the core calls releasing first


def test_a_late_join_keeps_the_later_stamps_of_a_shared_path():
    """``a``'s fill at t=3 joins at its release, after ``c``'s admission touched the shared
    system prompt at t=4: that node keeps 4 (eager insertion stamped it 3, then 4)."""
    run = Run(40, "lru", 0)
    sys8 = (("sys", 0, 8),)
    for t, (seq, obs) in enumerate((("a", "oa"), ("b", "ob")), start=1):
        run.both(lambda x, t=t: x.set_time(float(t)))
        run.both(
            lambda x, seq=seq, obs=obs: x.allocate(seq, 12, content=concat(sys8, ((obs, 0, 4),)))
        )
    run.both(lambda x: x.set_time(3.0))
    run.both(lambda x: x.append("a", 4, content=(("out-a", 0, 4),)))
    lazy = run.allocs[0].index
    assert "a" in lazy._waiting
    run.both(lambda x: x.set_time(4.0))
    run.both(lambda x: x.allocate("c", 12, content=concat(sys8, (("oc", 0, 4),))))
    assert "a" in lazy._waiting  # c's walk stops at the system prompt
    run.both(lambda x: x.free("a"))
    shared = lazy._node["b"].parent
    assert shared.label == sys8 and shared.last_access == 4.0
    assert lazy._node["c"].parent is shared
    run.both(_deep)


@pytest.mark.parametrize("fill_first", [False, True])
def test_the_op_counters_stamps_then_simulation_time(fill_first):
    """Before the first ``set_time`` an op counter stamps (1, 2, ...); a simulation time
    may be below it. A fill then joins at once where its path carries a later stamp, and
    fills waiting on the counter join before the clock changes source."""
    run = Run(40, "lru", 0)
    run.both(lambda x: x.allocate("a", 4, content=(("p", 0, 4),)))  # stamped 1
    if fill_first:
        run.both(lambda x: x.append("a", 4, content=(("out-a", 0, 4),)))  # waits at 2
        assert "a" in run.allocs[0].index._waiting
    run.both(lambda x: x.set_time(0.0))
    assert not run.allocs[0].index._waiting
    run.both(lambda x: x.append("a", 4, content=(("out-a", 4, 4),)))  # 0.0 < its stamp
    assert not run.allocs[0].index._waiting
    run.both(_deep)
    run.both(lambda x: x.set_time(1.5))
    run.both(lambda x: x.append("a", 4, content=(("out-a", 8, 4),)))
    assert "a" in run.allocs[0].index._waiting  # the path now carries 0.0 at most
    run.both(lambda x: x.free("a"))
    run.both(_deep)

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

from sim.errors import InvariantError
from sim.memory import make_allocator
from sim.prefix.spans import concat, n_tokens, slice_tokens

B = 4  # tokens per block


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


def _books(alloc) -> tuple:
    """What the core and the engine read, without a join."""
    pool = alloc.pool
    return (
        alloc.metrics(),
        alloc.kv_slots(),
        alloc.prefix_metrics(),
        alloc.take_activity(),
        alloc.available_blocks(),
        pool.free_queue(),
        list(pool.refcount),
        {s: list(t) for s, t in alloc._tables.items()},
    )


_ADMIT = st.tuples(st.just("admit"), st.integers(0, 60), st.integers(1, 14))
_GROW = st.tuples(st.just("grow"), st.integers(0, 60), st.integers(1, 9), st.integers(0, 5))
_OPS = st.one_of(
    _ADMIT,
    _ADMIT,
    _GROW,
    _GROW,
    _GROW,
    # a live sequence appends the tokens another live one holds past its own length
    st.tuples(st.just("copy"), st.integers(0, 60), st.integers(0, 60), st.integers(1, 9)),
    st.tuples(st.just("fork"), st.integers(0, 60)),
    st.tuples(st.just("free"), st.integers(0, 60), st.booleans()),
    st.tuples(st.just("retain"), st.integers(0, 60), st.integers(0, 2)),
    st.tuples(st.just("held"), st.integers(0, 60), st.booleans()),
    st.tuples(st.just("probe"), st.integers(0, 60), st.integers(1, 14)),
    st.tuples(st.just("peek"), st.just(0)),
)


class Run:
    """One allocator per mode, driven in lockstep; ``content`` is each live sequence's."""

    def __init__(self, blocks: int, **options) -> None:
        self.allocs = []
        for lazy in (True, False):
            a = make_allocator("paged_hash", pool_bytes=blocks * B, kv_bytes_per_token=1,
                               block_size=B, **options)  # fmt: skip
            a.index.lazy_hashes = lazy
            self.allocs.append(a)
        self.content: dict[str, tuple | None] = {}  # live sequence -> its content (None: unknown)
        self.finished: list[tuple] = []
        self.n = 0

    def both(self, op):
        lazy, eager = (op(a) for a in self.allocs)
        assert lazy == eager
        return lazy

    def pick(self, k: int) -> str | None:
        live = list(self.content)
        return live[k % len(live)] if live else None

    def base(self, k: int) -> tuple:
        known = [c for c in self.content.values() if c is not None] + self.finished
        if known and k % 3:
            return known[k % len(known)]
        return (("sys", 0, 1 + k % 13),)

    def step(self, op: tuple) -> None:
        kind = op[0]
        if kind == "admit":
            self.n += 1
            seq = f"s{self.n}"
            content = concat(self.base(op[1]), ((f"obs-{seq}", 0, op[2]),))
            if self.both(lambda a: a.allocate(seq, n_tokens(content), content=content)):
                self.content[seq] = content
        elif kind == "grow" and (seq := self.pick(op[1])) is not None:
            cur = self.content[seq]
            if cur is None or op[3] == 0:  # unknown content from here on
                more, self.content[seq] = None, None
            else:
                done = sum(n for c, _, n in cur if c == f"out-{seq}")
                more = ((f"out-{seq}", done, op[2]),)
            if self.both(lambda a: a.append(seq, op[2], content=more)) and more is not None:
                self.content[seq] = concat(cur, more)
        elif kind == "copy" and (seq := self.pick(op[1])) is not None:
            src = self.content.get(self.pick(op[2]) or "")
            cur = self.content[seq]
            if cur is None or src is None or n_tokens(src) <= n_tokens(cur):
                self.step(("grow", op[1], op[3], 1))
                return
            n = min(op[3], n_tokens(src) - n_tokens(cur))
            more = slice_tokens(src, n_tokens(cur), n_tokens(cur) + n)
            if self.both(lambda a: a.append(seq, n, content=more)):
                self.content[seq] = concat(cur, more)
        elif kind == "fork" and (seq := self.pick(op[1])) is not None:
            self.n += 1
            child = f"s{self.n}"
            if self.both(lambda a: a.fork(seq, child)):
                self.content[child] = self.content[seq]
        elif kind == "free" and (seq := self.pick(op[1])) is not None:
            self.both(lambda a: (a.free_uncached if op[2] else a.free)(seq))
            content = self.content.pop(seq)
            if content is not None:
                self.finished.append(content)
        elif kind == "retain" and (seq := self.pick(op[1])) is not None:
            self.both(lambda a: a.set_retain(seq, op[2]))
        elif kind == "held" and (seq := self.pick(op[1])) is not None:
            self.both(lambda a: a.set_held(seq, op[2]))
        elif kind == "probe":
            content = concat(self.base(op[1]), (("probe", 0, op[2]),))
            self.both(lambda a: a.can_allocate(n_tokens(content), content=content))
        elif kind == "peek":
            self.both(_deep)
        self.both(_books)
        for a in self.allocs:
            a.check_invariants()
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
    for seq in list(run.content):  # and the releases after it
        run.step(("free", list(run.content).index(seq), False))
    run.both(_deep)


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

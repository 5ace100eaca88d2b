"""The ``radix`` allocator kind: prefix hits through the paged pool, the recompute cap, tail
policies, pinning, eviction on shortfall and at a watermark, books with cached blocks, and
a hypothesis test that the tree and the block pool agree after every operation."""

from __future__ import annotations

from typing import ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.errors import ConfigError, InvariantError, PluginError, UnknownNameError
from sim.memory import AllocatorError, make_allocator
from sim.prefix.eviction import EVICTION_STRATEGIES, Priority
from sim.prefix.kinds import RadixAllocator
from sim.prefix.spans import checked_content

KV = 10  # bytes per token


def radix(blocks=64, bs=16, **options) -> RadixAllocator:
    a = make_allocator(
        "radix", pool_bytes=blocks * bs * KV, kv_bytes_per_token=KV, block_size=bs, **options
    )
    assert isinstance(a, RadixAllocator) and a.num_blocks == blocks
    return a


def ok(a):
    a.check_invariants()
    m = a.metrics()
    assert m.free_bytes + m.allocated_bytes + m.cached_bytes + m.remainder_bytes == m.pool_bytes
    return m


def test_factory_finds_radix_by_name_and_checks_options():
    with pytest.raises(ConfigError, match="tail_policy: must be one of truncate, cow_tail"):
        radix(tail_policy="copy")
    with pytest.raises(ConfigError, match="eviction: must be one of"):
        radix(eviction="mru")
    with pytest.raises(ConfigError, match="target_free"):
        radix(tau_low_blocks=8, target_free_blocks=4)
    with pytest.raises(UnknownNameError):
        make_allocator("radixx", pool_bytes=1000, kv_bytes_per_token=1)


def test_a_shared_prefix_hits_in_whole_blocks_and_books_balance():
    a = radix()
    assert a.allocate("a", 100, content=[("sys", 96), ("u1", 4)]).matched_tokens == 0
    r = a.allocate("b", 100, content=[("sys", 96), ("u2", 4)])
    assert r and r.matched_tokens == 96
    assert a.block_table("b")[:6] == a.block_table("a")[:6]  # shared, not copied
    assert a.block_table("b")[6] != a.block_table("a")[6]
    m = ok(a)
    assert m.allocated_bytes == 8 * 16 * KV  # 6 shared + 2 private tails
    assert m.useful_bytes == (100 + 4) * KV  # the shared 96 tokens count once
    assert m.logical_bytes == 200 * KV
    a.free("a")
    m = ok(a)
    assert m.cached_bytes == 0 and m.useful_bytes == 100 * KV  # b still maps the prefix
    a.free("b")
    m = ok(a)
    assert m.cached_bytes == 6 * 16 * KV and m.allocated_bytes == 0  # dormant, reusable
    assert m.free_bytes == (64 - 6) * 16 * KV
    p = a.prefix_metrics()
    assert (p.requests, p.prompt_tokens, p.matched_tokens, p.hit_tokens) == (2, 200, 96, 96)
    assert p.cached_bytes == m.cached_bytes and p.active_bytes == 0


def test_whole_prompt_hit_recomputes_the_last_block():
    a = radix()
    a.allocate("a", 96, content=[("sys", 96)])
    a.free("a")
    r = a.allocate("b", 96, content=[("sys", 96)])
    assert r.matched_tokens == 80  # at most 95 tokens may hit: 5 whole blocks
    assert a.index.stats.records[-1].matched_tokens == 96  # the raw match
    assert a.block_table("b")[:5] == tuple(range(5)) and a.block_table("b")[5] != 5
    ok(a)  # the recomputed block duplicates the tree's block 5: it stays private
    a.free("b")
    m = ok(a)
    assert m.cached_bytes == 6 * 16 * KV  # the duplicate went back to the free queue
    r = a.allocate("c", 97, content=[("sys", 96), ("q", 1)])
    assert r.matched_tokens == 96  # one new token to compute: the whole prefix hits


@pytest.mark.parametrize("policy,served,copied", [("truncate", 96, 0), ("cow_tail", 100, 4)])
def test_e15_tail_policy(policy, served, copied):
    a = radix(tail_policy=policy)
    a.allocate("a", 128, content=[("doc", 128)])
    r = a.allocate("b", 120, content=[("doc", 100), ("question", 20)])
    assert r.matched_tokens == served
    m = ok(a)
    assert m.bytes_copied == copied * KV and m.cow_copies == (copied > 0)
    assert a.prefix_metrics().cow_tail_copies == (copied > 0)
    assert a.prefix_metrics().matched_tokens == 100
    assert a.take_activity().cow_copies == (copied > 0)


def test_generated_tokens_become_cacheable_as_blocks_fill():
    a = radix()
    a.allocate("a", 10, content=[("p", 10)])
    assert a.index.tree.total_blocks == 0  # no full block yet
    a.append("a", 6, content=[("out", 6)])
    assert a.index.tree.total_blocks == 1  # block 0 = p[0:10] out[0:6]
    for _ in range(20):
        a.append("a", 1, content=[("out", 6 + _, 1)])
    assert a.index.tree.total_blocks == 2
    assert a.index._tail["a"] == [("out", 22, 4)]  # only the uncached tokens, spans merged
    assert a.index.tree.n_nodes == 1  # the sequence's own leaf grew in place
    a.append("a", 20)  # unknown content: nothing after this is cacheable
    assert a.index.tree.total_blocks == 2
    ok(a)
    a.free("a")
    r = a.allocate("b", 40, content=[("p", 10), ("out", 26), ("x", 4)])
    assert r.matched_tokens == 32
    ok(a)


def test_running_requests_pin_their_path_and_shortfall_evicts_dormant_lru():
    a = radix(blocks=10)
    a.allocate("old", 32, content=[("A", 32)])
    a.free("old")  # 2 dormant blocks, oldest
    a.allocate("new", 32, content=[("B", 32)])
    a.free("new")  # 2 dormant blocks
    a.allocate("run", 48, content=[("C", 48)])  # 3 pinned blocks
    ok(a)
    assert a.available_blocks() == 3 + 4 and a.pool.num_free == 3
    assert a.can_allocate(96) is True and a.can_allocate(128) is False  # C is not available
    assert a.allocate("big", 64, content=[("D", 64)])  # 4 blocks: 3 free + 1 evicted
    ok(a)
    assert a.index.tree.match([("A", 32)]).matched_tokens == 16  # A trimmed by one block
    assert a.index.tree.match([("B", 32)]).matched_tokens == 32
    assert a.index.tree.match([("C", 48)]).matched_tokens == 48
    before = a.metrics()
    assert not a.allocate("huge", 16 * 7, content=[("E", 112)])  # would need pinned blocks
    assert a.metrics() == before  # a miss evicts nothing
    assert a.index.tree.evicted_blocks == 1


def test_can_allocate_counts_the_hit_and_the_pinned_path():
    a = radix(blocks=8)
    a.allocate("a", 96, content=[("S", 96)])
    a.free("a")  # 6 dormant blocks
    assert a.can_allocate(128, content=[("T", 128)]) is True  # evicts 6: 2 + 6 = 8 blocks
    # the same prefix: 6 hits pinned, 2 blocks new
    assert a.can_allocate(128, content=[("S", 96), ("x", 32)]) is True
    assert a.can_allocate(144, content=[("S", 96), ("x", 48)]) is False
    assert bool(a.allocate("b", 144, content=[("S", 96), ("x", 48)])) is False
    assert a.allocate("b", 128, content=[("S", 96), ("x", 32)]).matched_tokens == 96
    ok(a)


def test_watermark_evicts_ahead_of_need():
    a = radix(blocks=10, tau_low_blocks=3, target_free_blocks=5)
    a.allocate("a", 64, content=[("A", 64)])
    a.free("a")  # 4 dormant, 6 free: above the watermark
    assert a.pool.num_free == 6 and a.index.tree.total_blocks == 4
    a.allocate("b", 64, content=[("B", 64)])  # free drops to 2 < 3: evict to 5
    ok(a)
    assert a.pool.num_free == 5 and a.index.tree.total_blocks == 4 + 4 - 3
    assert a.index.tree.evicted_blocks == 3


@pytest.mark.parametrize("eviction,survivor", [("lru", "hist"), ("priority", "sys")])
def test_priority_eviction_keeps_the_system_prompt(eviction, survivor):
    a = radix(blocks=8, eviction=eviction, content_priority={"sys": 5, "hist": 1})
    a.set_time(1.0)
    a.allocate("s", 32, content=[("sys", 32)])
    a.free("s")
    a.set_time(2.0)
    a.allocate("h", 32, content=[("hist", 32)])
    a.free("h")  # LRU would evict the older system prompt first
    a.set_time(3.0)
    a.allocate("b", 96, content=[("other", 96)])  # needs 2 of the 4 dormant blocks
    ok(a)
    kept = {cid for cid in ("sys", "hist") if a.index.tree.match([(cid, 32)]).matched_tokens == 32}
    assert kept == {survivor}
    a.set_time(2.5)  # earlier than 3.0: stamps never go back
    assert a.index._now() == 3.0


class _PriorityAllBlocks(Priority):
    """``priority`` with the base's ``same_rank_blocks`` (all of a leaf's blocks): a
    plug-in's broken promise where a leaf's zones differ."""

    name: ClassVar[str] = "priority_all_blocks_test"

    def same_rank_blocks(self, node, tree) -> int:
        return len(node.block_ids)


@pytest.mark.parametrize("checked", [False, True])
def test_a_checked_allocator_catches_an_eviction_strategy_that_trims_past_its_rank(
    monkeypatch, checked
):
    """A leaf [sys|hist] ranked by hist (1) and a leaf [x] (3); 3 blocks short: hist's two
    go, then x's last (the leaf is ranked by sys, 5, from then on). A plug-in claiming all
    of the leaf's blocks share its rank takes a sys block instead, silently; once the
    allocator's invariants have been checked (``engine.check_invariants``), it is caught
    at that trim, naming the strategy."""
    monkeypatch.setitem(EVICTION_STRATEGIES, "priority_all_blocks_test", _PriorityAllBlocks())
    kept = {}
    for eviction in ("priority", "priority_all_blocks_test"):
        a = radix(blocks=8, eviction=eviction, content_priority={"sys": 5, "hist": 1, "x": 3})
        a.allocate("a", 64, content=[("sys", 32), ("hist", 32)])
        a.free("a")
        a.allocate("x", 32, content=[("x", 32)])
        a.free("x")
        if checked:
            ok(a)  # a checking run: from now on each multi-block trim checks its rank
        if checked and eviction != "priority":
            with pytest.raises(PluginError, match=r"^eviction strategy "
                               r"'priority_all_blocks_test': same_rank_blocks says 4 "):  # fmt: skip
                a.allocate("b", 80, content=[("other", 80)])
            continue
        a.allocate("b", 80, content=[("other", 80)])
        ok(a)
        tree = a.index.tree
        kept[eviction] = [tree.match([(c, 32)]).matched_tokens for c in ("sys", "x")]
    assert kept["priority"] == [32, 16]
    if not checked:  # unchecked, the broken promise goes unnoticed: a sys block is gone
        assert kept["priority_all_blocks_test"] == [16, 32]


def test_priority_trims_a_leaf_only_down_to_its_higher_zone():
    a = radix(blocks=8, eviction="priority", content_priority={"sys": 5, "hist": 1, "x": 3})
    a.allocate("a", 64, content=[("sys", 32), ("hist", 32)])
    a.free("a")
    a.allocate("x", 32, content=[("x", 32)])
    a.free("x")  # leaves: [sys|hist] ranked by hist (1), [x] (3)
    a.allocate("b", 64, content=[("other", 64)])  # evicts 2: hist's two blocks, not sys
    assert a.index.tree.match([("x", 32)]).matched_tokens == 32
    a.allocate("c", 16, content=[("more", 16)])  # 1 more: the leaf is now ranked by sys (5)
    assert a.index.tree.match([("x", 32)]).matched_tokens == 16
    assert a.index.tree.match([("sys", 32)]).matched_tokens == 32
    ok(a)


def test_fork_pins_the_path_and_divergent_writes_copy_on_write():
    a = radix()
    a.allocate("p", 40, content=[("P", 40)])
    a.fork("p", "c")
    ok(a)
    assert a.metrics().useful_bytes == 40 * KV
    a.append("c", 8, content=[("c", 8)])  # the shared partial block 2 is copied
    a.append("p", 8, content=[("p", 8)])  # now private to p: written in place
    m = ok(a)
    assert m.cow_copies == 1 and a.block_table("c")[2] != a.block_table("p")[2]
    assert a.index.tree.total_blocks == 4  # P[0:32] + both 16-token third blocks
    a.free("p")
    a.free("c")
    ok(a)
    assert a.allocate("q", 48, content=[("P", 40), ("c", 8)]).matched_tokens == 32
    assert a.allocate("r", 49, content=[("P", 40), ("p", 8), ("z", 1)]).matched_tokens == 48


def test_misuse_raises_and_changes_nothing():
    a = radix()
    a.allocate("a", 10, content=[("x", 10)])
    before = a.metrics()
    with pytest.raises(AllocatorError, match="content holds 9 tokens, not 10"):
        a.allocate("b", 10, content=[("x", 9)])
    with pytest.raises(AllocatorError, match="bad content"):
        a.allocate("b", 10, content=[(1.5, 10)])
    with pytest.raises(AllocatorError, match="content holds"):
        a.append("a", 2, content=[("y", 3)])
    assert a.metrics() == before and a.seq_tokens("a") == 10 and not a.is_live("b")
    ok(a)


ONE_SEGMENTS = [
    ((7, 0, 5),),  # a decode's content: an int output id
    (("o", 3, 5),),  # a str id from an offset
    ((True, 0, 5),),  # a bool is no plain id: the full check refuses it
    ((7, -1, 5),),  # a negative start
    ((7, 0, 4),),  # the wrong length
    ((7, 0, 0),),  # an empty segment
    ((7.5, 0, 5),),  # a float id
    ((7, 0),),  # a user span, not a segment
    [(7, 0, 5)],  # a list, not a tuple: normalised by the full check
    (("o", 0, 2), ("o", 2, 3)),  # two segments that one makes: normalised
]


@pytest.mark.parametrize("content", ONE_SEGMENTS)
def test_the_index_checks_a_content_as_checked_content_does(content):
    """The radix index tests a decode's one segment in line (a call saved per append):
    the same answer, or the same refusal, as ``checked_content``."""
    index = radix().index
    try:
        want = checked_content(content, 5, "append", "radix")
    except AllocatorError as exc:
        with pytest.raises(AllocatorError) as got:
            index.check_content(content, 5, "append")
        assert str(got.value) == str(exc)
    else:
        assert index.check_content(content, 5, "append") == want


# ------------------------------------------------------------------ property test
SPANS = [("s", 16), ("s", 40), ("t", 8), ("u", 20), ("s", 24), ("v", 5), ("w", 33)]
OPS = st.lists(
    st.tuples(
        st.sampled_from(["allocate"] * 3 + ["append"] * 2 + ["fork", "free", "free"]),
        st.integers(0, 1000),
        st.lists(st.sampled_from(SPANS), min_size=1, max_size=3),
        st.sampled_from([True, True, True, False]),  # content given (usually)
    ),
    min_size=4,
    max_size=40,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=OPS,
    policy=st.sampled_from(["truncate", "cow_tail"]),
    eviction=st.sampled_from(["lru", "lfu", "fifo", "priority"]),
    blocks=st.sampled_from([12, 40]),
)
def test_tree_and_pool_agree_after_every_operation(ops, policy, eviction, blocks):
    a = radix(
        blocks=blocks,
        bs=8,
        tail_policy=policy,
        eviction=eviction,
        content_priority={"s": 2, "t": 1},
    )
    live: list = []
    next_id = 0
    for name, pick, spans, with_content in ops:
        n = sum(s[1] for s in spans)
        content = spans if with_content else None
        if name == "allocate" or not live:
            predicted = a.can_allocate(n, content=content)
            r = a.allocate(next_id, n, content=content)
            assert bool(r) == predicted
            if r:
                rec = a.index.stats.records[-1]
                assert r.matched_tokens == rec.hit_tokens <= n - 1
                assert rec.hit_tokens <= rec.matched_tokens
                live.append(next_id)
            next_id += 1
        elif name == "append":
            seq = live[pick % len(live)]
            predicted = a.can_append(seq, n)
            assert a.append(seq, n, content=content) == predicted
        elif name == "fork":
            parent = live[pick % len(live)]
            assert a.fork(parent, next_id)
            live.append(next_id)
            next_id += 1
        else:
            a.free(live.pop(pick % len(live)))
        m = ok(a)  # includes: retained == owned by the tree; locks == pins; ledger
        owner = a.index.tree.block_owner()  # raises if a block is owned twice
        assert m.cached_bytes == sum(1 for b in owner if a.pool.refcount[b] == 0) * 8 * KV
        assert m.useful_bytes <= m.allocated_bytes
        mapped = {b for s in a.sequences() for b in a.block_table(s)}
        assert all(
            a.index.tree.owns(b) or b in mapped
            for b in range(a.num_blocks)
            if a.pool.refcount[b] or a.pool.is_retained(b)
        )


# -------------------------------------------- in-place leaf growth vs a child per insert
GROW_OPS = st.lists(
    st.tuples(
        st.sampled_from(["allocate"] * 2 + ["append"] * 5 + ["fork", "free"]),
        st.integers(0, 1000),
        st.lists(st.sampled_from(SPANS), min_size=1, max_size=2),
        st.sampled_from([1, 3, None]),  # append this many tokens of the spans (None: all)
    ),
    min_size=4,
    max_size=50,
)


def _apply(a, name, pick, spans, cut, live, next_id):
    """One operation; returns its observable result."""
    n = sum(s[1] for s in spans)
    if name == "allocate" or not live:
        return bool(a.allocate(next_id, n, content=spans)), a.index.stats.records[-1:]
    if name == "append":
        seq = live[pick % len(live)]
        if cut is not None:
            cid, k = spans[0]
            spans, n = [(cid, k - cut, cut)], cut
        return a.append(seq, n, content=spans)
    if name == "fork":
        return a.fork(live[pick % len(live)], next_id)
    return a.free(live.pop(pick % len(live)))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=GROW_OPS,
    eviction=st.sampled_from(["lru", "priority"]),
    blocks=st.sampled_from([10, 24]),
)
def test_growing_a_leaf_in_place_is_invisible(ops, eviction, blocks):
    """``extend`` (compressed edges) and a child per insert give the same hits, evictions
    and block tables, operation by operation; only the node count differs."""
    kw = dict(blocks=blocks, bs=4, eviction=eviction, content_priority={"s": 2, "t": 1})
    merged, chain = radix(**kw), radix(**kw)
    chain.index.tree.merge_extensions = False
    live: list = []
    next_id = 0
    for name, pick, spans, cut in ops:
        allocating = name == "allocate" or not live
        outcome = [_apply(a, name, pick, spans, cut, list(live), next_id) for a in (merged, chain)]
        assert outcome[0] == outcome[1]
        if allocating:
            if outcome[0][0]:
                live.append(next_id)
            next_id += 1
        elif name == "fork":
            live.append(next_id)
            next_id += 1
        elif name == "free":
            live.pop(pick % len(live))
        for a in (merged, chain):
            ok(a)
        assert {s: merged.block_table(s) for s in live} == {s: chain.block_table(s) for s in live}
        assert merged.pool.free_queue() == chain.pool.free_queue()
        assert merged.index.tree.block_owner().keys() == chain.index.tree.block_owner().keys()
        assert merged.index.tree.evicted_blocks == chain.index.tree.evicted_blocks
        assert merged.index.tree.n_nodes <= chain.index.tree.n_nodes


def test_check_invariants_names_a_retained_block_the_tree_does_not_hold():
    """The index's check compares the pool's retained blocks with the tree's in one pass
    and walks the pool only to name the first that differs (either way round)."""

    a = radix()
    a.allocate("a", 20, content=[("sys", 20)])  # a full block in the tree, a partial one not
    ok(a)
    table = a._tables["a"]
    pool = a.index.pool
    assert pool.refcount[table[1]] == 1 and not pool.is_retained(table[1])
    pool.retain([table[1]])  # the pool keeps it; the tree does not hold it
    with pytest.raises(InvariantError, match=rf"radix: block {table[1]} retained=True but in tree=False"):
        a.check_invariants()
    pool.unretain([table[1]])
    ok(a)
    pool.unretain([table[0]])  # the tree holds it; the pool lets it go
    with pytest.raises(InvariantError, match=rf"radix: block {table[0]} retained=False but in tree=True"):
        a.check_invariants()

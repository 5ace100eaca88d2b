"""Dropping a freed context from a prefix cache (``recompute`` with
``evict_from_prefix_cache``): ``RadixTree.evict_path`` on exact trees, and
``free_uncached`` on both prefix-cache allocators (``radix``, ``paged_hash``): afterwards
the same content matches only what other live sequences still hold; books balance."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tree_fixtures import t33_tree_unpinned

from sim.memory import make_allocator

KV = 8
BS = 4


def test_evict_path_frees_the_dormant_childless_chain_and_keeps_a_shared_parent():
    tree, pool, (n1, n2, n3, n4) = t33_tree_unpinned()
    before = tree.evicted_blocks
    assert tree.evict_path(n4) == [31, 21, 20]  # N4, then N3 (childless now); N1 has N2
    assert pool.released == [31, 21, 20]
    assert not n4.alive and not n3.alive and n1.alive and n2.alive
    assert tree.total_blocks == tree.evictable_blocks == 4 and tree.n_nodes == 2
    assert tree.evicted_blocks == before + 3
    tree.check_invariants()
    assert tree.evict_path(n2) == [11, 10, 2, 1]  # now N1 is childless: it goes too
    assert tree.total_blocks == tree.n_nodes == tree.evictable_blocks == 0
    tree.check_invariants()
    assert tree.evict_path(n2) == [] and tree.evict_path(tree.root) == []  # dead, root


def test_evict_path_keeps_pinned_nodes_and_nodes_with_children():
    tree, pool, (n1, n2, n3, n4) = t33_tree_unpinned()
    tree.lock(n4)  # another sequence maps the bash/git path
    assert tree.evict_path(n4) == [] and tree.evict_path(n3) == []
    assert tree.evict_path(n2) == [11, 10]  # N1 is pinned through N4: it stays
    assert n1.alive and n3.alive and n4.alive and not n2.alive
    tree.check_invariants()
    tree.unlock(n4)
    assert tree.evict_path(n3) == []  # dormant but it still has a child
    assert tree.evict_path(n4) == [31, 21, 20, 2, 1]
    assert pool.released == [11, 10, 31, 21, 20, 2, 1]
    tree.check_invariants()


def test_evict_path_leaves_no_stale_candidate_for_evict():
    tree, pool, (n1, n2, n3, n4) = t33_tree_unpinned()
    tree.evict_path(n4)
    assert tree.evict(100) == [11, 10, 2, 1]  # only N2 and N1 were left to evict
    assert pool.released == [31, 21, 20, 11, 10, 2, 1]
    tree.check_invariants()


def make(kind: str, blocks: int = 128):
    return make_allocator(kind, pool_bytes=blocks * BS * KV, kv_bytes_per_token=KV, block_size=BS)


def ok(a):
    a.check_invariants()
    m = a.metrics()
    assert m.free_bytes + m.allocated_bytes + m.cached_bytes + m.remainder_bytes == m.pool_bytes
    return m


KINDS = ["radix", "paged_hash"]


@pytest.mark.parametrize("kind", KINDS)
def test_free_uncached_drops_only_what_no_one_else_holds(kind):
    a = make(kind)
    own = [("sys", 16), ("task", 16), ("mine", 6)]
    a.allocate("other", 30, content=[("sys", 16), ("task", 8), ("theirs", 6)])
    a.allocate("s", 38, content=own)
    ok(a)
    a.free("s")  # plain free: its full blocks stay cached
    assert a.allocate("t", 38, content=own).matched_tokens == 36
    a.free_uncached("t")  # t held the same blocks: now they leave the cache
    m = ok(a)
    assert m.cached_bytes == 0  # what is left in the cache is mapped by "other"
    r = a.allocate("u", 38, content=own)
    assert r.matched_tokens == 24  # "sys" and the first 8 "task" tokens, held by "other"
    ok(a)
    a.free_uncached("other")
    a.free_uncached("u")
    m = ok(a)
    assert m.cached_bytes == 0 and m.allocated_bytes == 0
    assert a.allocate("v", 38, content=own).matched_tokens == 0
    assert a.prefix_metrics().evicted_blocks > 0


@pytest.mark.parametrize("doc_rules", [True, False])
def test_free_uncached_on_the_hashed_cache_keeps_queue_order_and_counts_evictions(doc_rules):
    rules = {"null_block": False, "unhashed_to_head": False} if doc_rules else {}
    a = make_allocator("paged_hash", pool_bytes=16 * BS * KV, kv_bytes_per_token=KV,
                       block_size=BS, **rules)  # fmt: skip
    a.allocate("s", 17, content=[("A", 17)])  # 4 full blocks hashed + a partial one
    table = list(a.block_table("s"))
    a.free_uncached("s")
    pool = a.pool
    assert pool.num_cached == 0 and pool.evictions == 4
    assert all(pool.block_hash[b] is None for b in table)
    if doc_rules:  # the V1 design document: freed tail first to the tail, left in place
        assert pool.free_queue()[-5:] == table[::-1]
    else:  # current vLLM: unhashed blocks go to the head (deepest first), the partial after
        assert table == [1, 2, 3, 4, 5] and pool.free_queue()[:5] == [4, 3, 2, 1, 5]
    ok(a)


def tokens(content):
    out = []
    for seg in content:
        cid, off, n = (seg[0], 0, seg[1]) if len(seg) == 2 else seg
        out.extend((cid, off + i) for i in range(n))
    return out


def common(a, b) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


SEQS = st.lists(
    st.tuples(
        st.integers(0, 12), st.sampled_from(["x", "y"]), st.integers(0, 10), st.integers(1, 9)
    ),
    min_size=2,
    max_size=5,
)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seqs=SEQS, victim=st.integers(0, 4))
def test_after_free_uncached_a_match_finds_only_what_live_sequences_hold(kind, seqs, victim):
    a = make(kind)
    contents = []
    for i, (sys_n, branch, mid_n, own_n) in enumerate(seqs):
        c = [s for s in (("sys", sys_n), (branch, mid_n), (f"own{i}", own_n)) if s[1]]
        contents.append(c)
        assert a.allocate(i, len(tokens(c)), content=c)
        ok(a)
    victim %= len(seqs)
    a.free_uncached(victim)
    ok(a)
    mine = tokens(contents[victim])
    n = len(mine)
    held = max(common(mine, tokens(c)) for i, c in enumerate(contents) if i != victim)
    expect = min(held // BS, (n - 1) // BS) * BS
    r = a.allocate("again", n, content=contents[victim])
    assert r.matched_tokens == expect
    ok(a)

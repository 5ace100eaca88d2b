"""``retain_priority`` as an eviction bias (vLLM #51428's Retain, an agent KV hint): the
radix tree evicts dormant leaves of lower priority first (the strategy's order among
equals), the KV manager drops the held KV of lower priority first under pressure (LIFO
among equals); with no priority set, both orders are the old ones."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from tree_fixtures import Pool

from sim.memory import make_allocator
from sim.memory.kv_manager import KVManager
from sim.prefix.hashcache import HashBlockPool
from sim.prefix.radix import RadixTree
from sim.prefix.spans import hash_blocks_from, segments


def _three_leaves():
    """Leaves a (t=1), c (t=2), b (t=3) under a shared block ``sys``: LRU order a, c, b."""
    tree = RadixTree(4, Pool())
    nodes = {}
    for name, block, t in (("a", 1, 1), ("c", 3, 2), ("b", 2, 3)):
        nodes[name] = tree.insert([("sys", 4), (name, 4)], [0, block], now=t).node
    return tree, nodes


def test_a_higher_retain_priority_is_evicted_later_than_lru_says():
    tree, _ = _three_leaves()
    assert [tree.evict(1)[0] for _ in range(4)] == [1, 3, 2, 0]  # plain LRU
    tree, nodes = _three_leaves()
    tree.set_retain(nodes["a"], 1.0)  # the oldest leaf (and its path, sys) kept longest
    tree.check_invariants()
    assert [tree.evict(1)[0] for _ in range(4)] == [3, 2, 1, 0]
    tree, nodes = _three_leaves()
    tree.set_retain(nodes["b"], -2.0)  # the newest leaf goes first; sys takes -2 too
    assert [tree.evict(1)[0] for _ in range(4)] == [2, 1, 3, 0]


def test_priority_zero_everywhere_changes_nothing():
    tree, nodes = _three_leaves()
    for node in nodes.values():
        tree.set_retain(node, 0.0)
    assert not tree.retain_biased
    assert [tree.evict(1)[0] for _ in range(4)] == [1, 3, 2, 0]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(1, 3), st.sampled_from([-1.0, 0.0, 0.0, 2.0])),
        min_size=1,
        max_size=12,
    )
)
def test_each_evicted_block_has_the_lowest_priority_of_the_dormant_leaves(paths):
    """Random branches (shared first block ``p<i>``, then ``k`` own blocks) with random
    priorities: every block evicted belongs to a leaf of the lowest priority left."""
    tree = RadixTree(2, Pool())
    next_id = 100
    for i, (prefix, k, prio) in enumerate(paths):
        ids = list(range(next_id, next_id + 1 + k))
        next_id += 1 + k
        node = tree.insert([(f"p{prefix}", 2), (f"own{i}", 2 * k)], ids, now=i).node
        tree.set_retain(node, prio)
    tree.check_invariants()
    while tree.evictable_blocks:
        owner = tree.block_owner()
        leaves = [n for n in tree.iter_nodes() if not n.children and n.lock_ref == 0]
        lowest = min(n.retain for n in leaves)
        (b,) = tree.evict(1)
        assert owner[b].retain == lowest
        tree.check_invariants()


def _radix_kv():
    alloc = make_allocator("radix", pool_bytes=6 * 16, kv_bytes_per_token=1, block_size=16)
    return KVManager(alloc)


def _live(kv, seq, cid):
    assert kv.alloc.allocate(seq, 48, content=[(cid, 48)])
    kv.ledger.track(seq)


def test_paused_kv_of_lower_priority_is_dropped_first_under_pressure():
    kv = _live_pair(retain_a=None)
    assert kv.drop_paused() == "B"  # no priorities: the most recent hold (LIFO)
    kv = _live_pair(retain_a=0.0)
    assert kv.drop_paused() == "B"  # priority 0 is no priority
    kv = _live_pair(retain_a=-1.0)
    assert kv.drop_paused() == "A"  # the low-priority session, though it paused first
    assert kv.drop_paused() == "B" and kv.drop_paused() is None


def _live_pair(retain_a):
    kv = _radix_kv()
    _live(kv, "A", "a")
    _live(kv, "B", "b")
    if retain_a is not None:
        kv.retain("A", retain_a)
    kv.hold("A", 0, "pA")
    kv.set_time(1.0)
    kv.hold("B", 1, "pB")
    return kv


def test_the_radix_cache_evicts_the_low_priority_session_first():
    """Two sessions dropped for recompute, their blocks cached: a newcomer that needs room
    evicts the one of lower priority first, though LRU would pick the other."""
    for retain_b, survivor in ((None, "b"), (-1.0, "a"), (0.0, "b")):
        kv = _radix_kv()
        kv.set_time(0.0)
        _live(kv, "A", "a")
        kv.set_time(1.0)
        _live(kv, "B", "b")
        if retain_b is not None:
            kv.retain("B", retain_b)
        kv.drop("A")
        kv.drop("B")  # the newer: LRU keeps it
        assert kv.alloc.allocate("C", 48, content=[("c", 48)])  # 3 of 6 cached blocks go
        kv.alloc.check_invariants()
        tree = kv.alloc.index.tree
        cached = {cid: tree.match([(cid, 48)]).matched_tokens for cid in ("a", "b")}
        assert cached == {"a": 0, "b": 0, survivor: 48}


def _hash_kv():
    alloc = make_allocator("paged_hash", pool_bytes=7 * 16, kv_bytes_per_token=1, block_size=16)
    return KVManager(alloc)  # 6 usable blocks (block 0 is the null block)


def test_the_hash_cache_takes_a_retained_sessions_blocks_last():
    """vLLM's free queue is LRU: A's blocks, freed first, go first; a retain priority above 0
    keeps A's after the LRU queue; one below 0 is the LRU queue itself."""
    for retain_a, survivor in ((None, "b"), (2.0, "a"), (-1.0, "b")):
        kv = _hash_kv()
        _live(kv, "A", "a")
        _live(kv, "B", "b")
        if retain_a is not None:
            kv.retain("A", retain_a)
        kv.drop("A")  # freed first: LRU takes its blocks first
        kv.drop("B")
        kv.alloc.check_invariants()
        assert kv.alloc.allocate("C", 48, content=[("c", 48)])  # 3 of 6 cached blocks go
        kv.alloc.check_invariants()
        pool = kv.alloc.index.pool
        hits = {
            cid: len(pool.lookup(hash_blocks_from(segments([(cid, 48)]), 0, 0, 16)[0]))
            for cid in ("a", "b")
        }
        assert hits == {"a": 0, "b": 0, survivor: 3}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["take", "free", "retain", "touch", "uncache"]),
            st.integers(0, 10),
            st.sampled_from([-1.0, 0.0, 1.0, 3.0]),
        ),
        max_size=60,
    )
)
def test_hash_pool_books_and_retained_order(ops):
    """Random takes, frees (hashed), retains, touches and uncaches keep the pool's books
    (``check``), and a take pops the LRU queue before any retained block, the lowest
    priority's oldest first."""
    pool = HashBlockPool(12, null_block=True)
    held: list[int] = []
    serial = 0
    for op, i, prio in ops:
        if op == "take" and pool.num_free:
            expect = pool.free_queue()[0]
            assert pool.take(1) == [expect]
            held.append(expect)
        elif op == "free" and held:
            b = held.pop(i % len(held))
            serial += 1
            pool.cache([b], [serial])
            pool.decref([b])
        elif op == "retain":
            pool.retain([i + 1], prio)
        elif op == "touch" and pool.refcount[i + 1] == 0 and i + 1 in pool.free_queue():
            pool.incref([i + 1])
            held.append(i + 1)
        elif op == "uncache":
            pool.uncache_free([i + 1])
        pool.check()
        assert pool.num_free == len(pool.free_queue()) == 11 - len(held)

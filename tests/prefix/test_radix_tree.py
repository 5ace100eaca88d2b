"""The radix tree: T33 eviction cascade, E15 partial match, strategies, and a hypothesis
test against a block-level reference model (every block keyed by the tokens up to its
end), with ``check_invariants`` after every operation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tree_fixtures import Pool, t33_tree_unpinned

from sim.errors import ConfigError, PluginError, UnknownNameError
from sim.prefix.eviction import (
    EVICTION_STRATEGIES,
    EvictionStrategy,
    Watermark,
    get_strategy,
)
from sim.prefix.radix import RadixTree
from sim.prefix.spans import segments, slice_tokens


def t33_tree():
    """T33: root -> N1 system (pinned) -> {N2 python (pinned), N3 bash -> N4 git}."""
    tree, pool, nodes = t33_tree_unpinned()
    tree.lock(nodes[1])  # a running Python-workspace request pins N2 and N1
    return tree, pool, nodes


def test_t33_leaf_goes_first_then_its_parent_pinned_nodes_never():
    tree, pool, (n1, n2, n3, n4) = t33_tree()
    n3.last_access = -1.0  # even when older than its child, an inner node is not a candidate
    tree.check_invariants()
    assert tree.evictable_blocks == 3 and tree.protected_blocks == 4
    assert tree.evict(1) == [31]  # N4 first, block 31 freed
    assert pool.released == [31] and not n4.alive
    tree.check_invariants()
    assert tree.evict(1) == [21]  # N3 became a leaf: it is next (trimmed from its end)
    assert tree.evict(100) == [20]  # nothing else is dormant
    assert not n3.alive and n1.alive and n2.alive
    assert tree.evictable_blocks == 0 and tree.total_blocks == 4
    assert pool.released == [31, 21, 20]
    tree.check_invariants()
    tree.unlock(n2)  # the request finishes: now the whole path is dormant
    assert tree.evict(100) == [11, 10, 2, 1]
    assert tree.total_blocks == tree.n_nodes == 0
    tree.check_invariants()


def test_e15_partial_block_match_100_tokens_b16_uses_96():
    tree = RadixTree(16, Pool())
    tree.insert([("doc", 128)], list(range(8)), now=0)
    m = tree.match([("doc", 100), ("question", 20)])
    assert m.matched_tokens == 100  # raw, token-granular
    assert m.hit_tokens == 96 and len(m.block_ids) == 6  # floor(100/16) = 6 blocks
    assert m.tail_tokens == 4 and m.tail_block_id == 6  # 100 mod 16 = 4, 12 empty slots
    tree.check_invariants()


def test_partial_match_inside_a_first_block_is_token_granular():
    tree = RadixTree(16, Pool())
    tree.insert([("a", 32)], [5, 6], now=0)
    m = tree.match([("a", 10), ("b", 30)])
    assert (m.matched_tokens, m.block_ids, m.tail_tokens, m.tail_block_id) == (10, [], 10, 5)
    assert m.node is tree.root


def test_match_cap_and_split_keep_the_tree_consistent():
    tree = RadixTree(4, Pool())
    tree.insert([("x", 16)], [1, 2, 3, 4], now=0)
    m = tree.match([("x", 16)], now=5, limit_tokens=15)
    assert (m.matched_tokens, m.block_ids, m.hit_tokens) == (16, [1, 2, 3], 12)
    assert m.node.end_tokens == 12 and m.node.last_access == 5  # split at the cap
    assert [c.last_access for c in m.node.children.values()] == [0]  # the rest untouched
    tree.check_invariants()


def test_insert_reports_duplicates_and_adopts_the_rest():
    tree = RadixTree(4, Pool())
    tree.insert([("x", 8)], [1, 2], now=0)
    r = tree.insert([("x", 12)], [7, 2, 9], now=1)
    assert r.duplicate_block_ids == [7] and r.adopted_block_ids == [9]
    assert r.node.block_ids == [9]
    with pytest.raises(ValueError, match="whole blocks"):
        tree.insert([("y", 5)], [3, 4], now=2)
    with pytest.raises(ValueError, match="already in the tree"):
        tree.insert([("y", 4)], [9], now=2)
    tree.check_invariants()


def test_lock_unlock_errors():
    tree = RadixTree(4, Pool())
    node = tree.insert([("x", 4)], [1], now=0).node
    with pytest.raises(ValueError, match="not locked"):
        tree.unlock(node)
    with pytest.raises(ValueError, match="not locked"):
        tree.unlock(tree.root)
    tree.evict(1)
    with pytest.raises(ValueError, match="no longer in the tree"):
        tree.lock(node)


def _three_leaves(eviction, **kw):
    """Leaves a (t=1, 2 hits), b (t=3), c (t=2) under a shared root block."""
    tree = RadixTree(4, Pool(), eviction=eviction, **kw)
    tree.insert([("sys", 4), ("a", 4)], [0, 1], now=1)
    tree.insert([("sys", 4), ("c", 4)], [0, 3], now=2)
    tree.insert([("sys", 4), ("b", 4)], [0, 2], now=3)
    for _ in range(2):
        m = tree.match([("sys", 4), ("a", 4)])
        tree.touch(m.node, now=1, hit=True)  # two hits at t=1 (LFU keeps a)
    tree.check_invariants()
    return tree


@pytest.mark.parametrize(
    "eviction,order",
    [("lru", [1, 3, 2, 0]), ("lfu", [3, 2, 1, 0]), ("fifo", [1, 3, 2, 0])],
)
def test_strategies_order_dormant_leaves(eviction, order):
    tree = _three_leaves(eviction)
    assert [tree.evict(1)[0] for _ in range(4)] == order


def test_priority_strategy_keeps_high_zones_ties_by_lru():
    tree = _three_leaves("priority", content_priority={"a": 2, "b": 1, "c": 1, "sys": 9})
    assert [tree.evict(1)[0] for _ in range(4)] == [3, 2, 1, 0]  # c, b tie -> older c first
    tree = _three_leaves("priority")
    tree.set_priorities({"b": 5})
    assert tree.evict(2) == [1, 3]


def test_strategy_registry_and_watermark():
    assert set(EVICTION_STRATEGIES) >= {"lru", "lfu", "fifo", "priority"}
    with pytest.raises(UnknownNameError, match="valid: fifo, lfu, lru, priority"):
        get_strategy("mru")
    w = Watermark(tau_low_blocks=10, target_free_blocks=25)
    assert (w.blocks_to_evict(10), w.blocks_to_evict(9), w.blocks_to_evict(0)) == (0, 16, 25)
    assert Watermark().blocks_to_evict(0) == 0
    with pytest.raises(ConfigError, match="target_free"):
        Watermark(tau_low_blocks=5, target_free_blocks=2)


def test_strategies_declare_their_abilities_on_the_base():
    """No probing for optional abilities: ``same_rank_blocks`` and ``merges_extensions`` are
    declared on ``EvictionStrategy`` with defaults, which a new strategy inherits."""
    merging = {n for n, s in EVICTION_STRATEGIES.items() if s.merges_extensions}
    assert merging == {"lru", "priority"}

    class MostBlocksFirst(EvictionStrategy):
        name = "most_blocks"

        def key(self, node, tree) -> tuple:
            return (-len(node.block_ids),)

    tree = RadixTree(4, Pool(), MostBlocksFirst())
    tree.insert([("a", 4)], [1], now=1)
    tree.insert([("b", 12)], [2, 3, 4], now=2)
    assert not tree.merge_extensions
    assert tree.evict(2) == [4, 3]  # the three-block leaf, trimmed from its end
    assert tree.evict(2) == [1, 2]  # now a tie (one block each, same depth): older first


def test_ties_evict_deepest_first():
    tree = RadixTree(4, Pool())
    tree.insert([("a", 12)], [1, 2, 3], now=0)
    tree.insert([("b", 8)], [4, 5], now=0)
    # same time: the deepest block anywhere goes first, then block by block
    assert tree.evict(5) == [3, 2, 5, 1, 4]


# ------------------------------------------------------------------ reference model
B = 4
VOCAB = [("s", 8), ("s", 16), ("a", 4), ("b", 8), ("c", 12), (5, 4), ("a", 6), ("s", 3)]


def toks(segs):
    return [(cid, s + i) for cid, s, n in segs for i in range(n)]


class Model:
    """Blocks keyed by the tuple of tokens from 0 to their end."""

    def __init__(self):
        self.blocks: dict[tuple, list] = {}  # key -> [block id, last access]
        self.locks: list[tuple] = []  # locked path keys (tokens up to the node end)

    def insert(self, t, ids, now):
        dup = []
        for k, b in enumerate(ids):
            key = tuple(t[: (k + 1) * B])
            if key in self.blocks:
                if self.blocks[key][0] != b:
                    dup.append(b)
                self.blocks[key][1] = now
            else:
                self.blocks[key] = [b, now]
        return dup

    def match(self, t, limit, now):
        raw = 0
        for key in self.blocks:
            n = 0
            while n < min(len(key), len(t)) and key[n] == t[n]:
                n += 1
            raw = max(raw, n)
        usable = (raw if limit is None else min(raw, limit)) // B
        keys = [tuple(t[: (k + 1) * B]) for k in range(usable)]
        if now is not None:
            for key in keys:
                self.blocks[key][1] = now
        return raw, [self.blocks[k][0] for k in keys]

    def locked(self, key):
        return any(lk[: len(key)] == key for lk in self.locks)

    def evict(self, n):
        out = []
        for _ in range(n):
            leaves = [
                k
                for k in self.blocks
                if not self.locked(k)
                and not any(len(o) == len(k) + B and o[: len(k)] == k for o in self.blocks)
            ]
            if not leaves:
                break
            victim = min(leaves, key=lambda k: (self.blocks[k][1], -len(k)))
            out.append(self.blocks.pop(victim)[0])
        return out


OPS = st.lists(
    st.tuples(
        st.sampled_from(["insert", "insert", "match", "lock", "unlock", "evict"]),
        st.lists(st.sampled_from(VOCAB), min_size=1, max_size=4),
        st.integers(0, 40),
        st.booleans(),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(ops=OPS)
def test_tree_matches_block_model_and_owns_each_block_once(ops):
    pool = Pool()
    tree = RadixTree(B, pool)
    model = Model()
    next_id = 0
    held = []  # (node, key) locks
    for now, (op, spans, num, flag) in enumerate(ops, start=1):
        segs = segments(spans)
        t = toks(segs)
        if op == "insert":
            whole = len(t) // B * B
            segs, t = slice_tokens(segs, 0, whole), t[:whole]
            have = tree.match(segs).block_ids
            fresh = list(range(next_id, next_id + whole // B - (0 if flag else len(have))))
            next_id += len(fresh)
            ids = fresh if flag else have + fresh  # flag: fresh ids for everything (dups)
            r = tree.insert(segs, ids, now)
            assert r.duplicate_block_ids == model.insert(t, ids, now)
            assert r.node.end_tokens == whole
            if num % 3 == 0 and whole:
                tree.lock(r.node)
                held.append((r.node, tuple(t)))
                model.locks.append(tuple(t))
        elif op == "match":
            limit = None if flag else num
            m = tree.match(segs, now=now, limit_tokens=limit)
            raw, ids = model.match(t, limit, now)
            assert (m.matched_tokens, m.block_ids) == (raw, ids)
            assert m.hit_tokens == len(ids) * B
        elif op == "lock" and held:
            node, key = held[num % len(held)]
            tree.lock(node)
            held.append((node, key))
            model.locks.append(key)
        elif op == "unlock" and held:
            node, key = held.pop(num % len(held))
            tree.unlock(node)
            model.locks.remove(key)
        elif op == "evict":
            want = model.evict(num % 7)
            assert tree.evict(num % 7) == want
        tree.check_invariants()
        owner = tree.block_owner()
        assert sorted(owner) == sorted(v[0] for v in model.blocks.values())
        assert tree.evictable_blocks == sum(1 for k in model.blocks if not model.locked(k))


class _MostBlocksFirst(EvictionStrategy):
    """A rank that changes with every block trimmed (its block count), so only the last
    block shares it (``same_rank_blocks``: the contract; the default, all of them, would
    let ``evict(n)`` trim past a block that ranks after another leaf's)."""

    name = "most_blocks_test"

    def key(self, node, tree) -> tuple:
        return (-len(node.block_ids),)

    def same_rank_blocks(self, node, tree) -> int:
        return 1


CONTENT_IDS = sorted({cid for cid, _ in VOCAB}, key=str)


@settings(max_examples=400, deadline=None)
@given(
    eviction=st.sampled_from(["lru", "lfu", "fifo", "priority", "most"]),
    priorities=st.dictionaries(st.sampled_from(CONTENT_IDS), st.integers(0, 3), max_size=4),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["insert", "insert", "insert", "hit", "lock", "retain"]),
            st.lists(st.sampled_from(VOCAB), min_size=1, max_size=4),
            st.integers(1, 4),  # the time: ties are common
        ),
        min_size=1, max_size=16,
    ),
    chunks=st.lists(st.integers(0, 9), min_size=1, max_size=5),
)
def test_evicting_in_chunks_frees_what_evicting_at_once_frees(eviction, priorities, ops, chunks):
    """``evict(a)`` then ``evict(b)`` frees the blocks ``evict(a + b)`` frees, in order, and
    leaves the same tree; both are ``evict(1)`` block by block. For every shipped strategy
    (with content priorities, hits, locks, retain priorities, equal times) and a plug-in
    one whose rank changes with every block trimmed: what lets an allocator make a batch's
    room in one ``make_room`` (``PagedAllocator._append_each_content``)."""
    strategy = _MostBlocksFirst() if eviction == "most" else eviction
    trees = [RadixTree(B, Pool(), strategy, content_priority=dict(priorities)) for _ in range(3)]
    next_id = 0
    for op, spans, now in ops:
        segs = segments(spans)
        whole = sum(n for _, _, n in segs) // B * B
        if not whole:
            continue
        segs = slice_tokens(segs, 0, whole)
        if op == "insert":
            have = [t.match(segs).block_ids for t in trees]
            assert have[0] == have[1] == have[2]
            fresh = list(range(next_id, next_id + whole // B - len(have[0])))
            next_id += len(fresh)
            for t in trees:
                t.insert(segs, have[0] + fresh, now=now)
        else:
            found = [t.match(segs, now=now if op == "hit" else None) for t in trees]
            if found[0].node is trees[0].root:
                continue
            for t, m in zip(trees, found, strict=True):
                if op == "hit":
                    t.touch(m.node, now, hit=True)
                elif op == "lock":
                    t.lock(m.node)
                else:
                    t.set_retain(m.node, float(now))
    for t in trees:  # and every multi-block trim checks the strategy's same_rank_blocks
        t.check_ranks = True
    total = sum(chunks)
    at_once = trees[0].evict(total)
    in_chunks = [b for n in chunks for b in trees[1].evict(n)]
    by_block = [b for _ in range(total) for b in trees[2].evict(1)]
    assert in_chunks == at_once == by_block
    assert trees[0].pool.released == trees[1].pool.released == trees[2].pool.released
    assert trees[0].evicted_nodes == trees[1].evicted_nodes == trees[2].evicted_nodes
    assert sorted(trees[0].block_owner()) == sorted(trees[1].block_owner())
    left = [b for _ in range(len(trees[2].block_owner())) for b in trees[2].evict(1)]
    assert trees[0].evict(10**6) == trees[1].evict(10**6) == left  # what is left, in order
    for t in trees:
        t.check_invariants()


class _MostBlocksUndeclared(_MostBlocksFirst):
    """``_MostBlocksFirst`` with the base's ``same_rank_blocks`` (all of a leaf's blocks):
    a plug-in's broken promise, since its rank changes with every block trimmed."""

    name = "most_blocks_undeclared_test"

    def same_rank_blocks(self, node, tree) -> int:
        return len(node.block_ids)


def _two_leaves(strategy) -> RadixTree:
    """Two dormant leaves: a (4 blocks, last access 1.0) and b (3 blocks, 2.0)."""
    tree = RadixTree(B, Pool(), strategy)
    tree.insert(segments([("a", 4 * B)]), [0, 1, 2, 3], now=1.0)
    tree.insert(segments([("b", 3 * B)]), [4, 5, 6], now=2.0)
    return tree


def test_a_checking_tree_refuses_a_same_rank_blocks_that_says_too_many():
    """``check_ranks`` (a checking run) catches a strategy whose ``same_rank_blocks`` says
    more blocks keep a leaf's rank than do, at the trim that relies on it; unchecked, the
    tree trusts it and ``evict(n)`` frees other blocks than ``evict(1)`` n times (leaf a
    ranks before b with 4 blocks and, older, with 3; after b once it has 2 left)."""
    by_block = _two_leaves(_MostBlocksFirst())
    assert [b for _ in range(3) for b in by_block.evict(1)] == [3, 2, 6]
    assert _two_leaves(_MostBlocksFirst()).evict(3) == [3, 2, 6]  # declared: the same
    assert _two_leaves(_MostBlocksUndeclared()).evict(3) == [3, 2, 1]  # trusted, wrong
    checked = _two_leaves(_MostBlocksUndeclared())
    checked.check_ranks = True
    with pytest.raises(
        PluginError,
        match=r"^eviction strategy 'most_blocks_undeclared_test': same_rank_blocks says 4 "
        r"trailing blocks of Node\(#2, .* share its rank \(-4,\), but it ranks \(-3,\) "
        r"once 1 of them are evicted",
    ):
        checked.evict(3)
    assert checked.total_blocks == 7 and checked.pool.released == []  # nothing trimmed
    checked.check_invariants()
    declared = _two_leaves(_MostBlocksFirst())
    declared.check_ranks = True
    assert declared.evict(3) == [3, 2, 6]


class _SameRank(EvictionStrategy):
    """LRU whose ``same_rank_blocks`` returns a given value."""

    name = "same_rank_test"

    def __init__(self, value):
        self.value = value

    def key(self, node, tree) -> tuple:
        return (node.last_access,)

    def same_rank_blocks(self, node, tree):
        return self.value


class _LongLeavesFirst(EvictionStrategy):
    """LRU, then leaves of more than 2 blocks first: a rank that changes as a leaf is
    trimmed to 2, with the base's ``same_rank_blocks`` (all): a broken promise."""

    name = "long_leaves_test"

    def key(self, node, tree) -> tuple:
        return (node.last_access, len(node.block_ids) <= 2)


def test_a_broken_promise_at_a_later_victim_leaves_the_tree_and_pool_whole():
    """The check raises at the second victim: the first victim's block, already trimmed,
    goes to the pool, the second victim goes back in the heap untrimmed, and the tree's
    invariants hold."""
    tree = _two_leaves(_LongLeavesFirst())
    tree.insert(segments([("c", B)]), [7], now=0.5)  # the oldest leaf, one block
    tree.check_ranks = True
    with pytest.raises(PluginError, match=r"^eviction strategy 'long_leaves_test': "
                       r"same_rank_blocks says 4 trailing blocks .* once 2 of them"):  # fmt: skip
        tree.evict(4)
    assert tree.pool.released == [7] and tree.total_blocks == 7
    assert tree.evictable_blocks == 7 and sorted(tree.block_owner()) == [0, 1, 2, 3, 4, 5, 6]
    tree.check_invariants()
    tree.check_ranks = False  # trusted, it trims a's 3 blocks: past the rank of its 2
    assert tree.evict(3) == [3, 2, 1]


@pytest.mark.parametrize("value", [0, -1, 2.0, None, True])
def test_a_same_rank_blocks_below_one_or_not_a_whole_number_is_refused_not_spun(value):
    """0 would trim nothing and ``evict`` would take the same victim forever (it hung);
    a float would fail in a slice far from its cause: both name the strategy now."""
    tree = _two_leaves(_SameRank(value))
    with pytest.raises(PluginError, match=r"^eviction strategy 'same_rank_test': "
                       r"same_rank_blocks returned .* it must be a whole number >= 1"):  # fmt: skip
        tree.evict(3)
    tree.check_invariants()  # the victim went back in the heap: the tree is whole
    assert tree.total_blocks == 7 and tree.pool.released == []
    assert _two_leaves(_SameRank(1)).evict(3) == [3, 2, 1]  # one at a time: LRU, a first


def test_a_same_rank_blocks_of_a_numpy_integer_is_taken():
    """Any integer type but a bool (a plug-in computing it with numpy)."""
    np = pytest.importorskip("numpy")
    assert _two_leaves(_SameRank(np.int64(2))).evict(3) == [3, 2, 1]
    assert _two_leaves(_SameRank(np.int64(4))).evict(3) == [3, 2, 1]


class _KeyOf(EvictionStrategy):
    """LRU, but leaf ``b``'s rank is ``value`` (a plug-in's key)."""

    name = "key_of_test"

    def __init__(self, value):
        self.value = value

    def key(self, node, tree):
        return self.value if node.label[0][0] == "b" else (node.last_access,)


@pytest.mark.parametrize(
    "value, shown",
    [((float("nan"),), r"\(nan,\)"), ((1.0, float("nan")), r"\(1\.0, nan\)"), (5, "5")],
)
def test_a_plugin_strategys_nan_rank_is_refused_where_it_enters_the_heap(value, shown):
    """NaN orders with nothing: a leaf ranked NaN sat anywhere in the heap and the tree
    evicted in another order, silently (LRU order a, b, c came out a, c, b). The rank is
    checked as it is computed, naming the strategy (a key that is not a tuple too)."""
    tree = RadixTree(B, Pool(), _KeyOf(value))
    tree.insert(segments([("a", B)]), [0], now=1.0)
    with pytest.raises(PluginError, match=rf"^eviction strategy 'key_of_test': key returned "
                       rf"{shown} for Node\(.*\); a rank is a tuple of comparable values, none "
                       r"NaN \(NaN orders with nothing: the tree would evict in another "
                       r"order\)$"):  # fmt: skip
        tree.insert(segments([("b", B)]), [1], now=2.0)


def test_a_plugin_strategys_nan_rank_is_refused_under_a_retain_bias_and_a_rebuild():
    """The retain-biased rank (retain, *key) and a heap rebuild check it too."""
    np = pytest.importorskip("numpy")
    strategy = _KeyOf((1.0,))
    tree = RadixTree(B, Pool(), strategy)
    a = tree.insert(segments([("a", B)]), [0], now=1.0).node
    b = tree.insert(segments([("b", B)]), [1], now=2.0).node
    strategy.value = (np.float64("nan"),)  # a numpy NaN, after b entered the heap
    with pytest.raises(PluginError, match=r"^eviction strategy 'key_of_test': key returned "):
        tree.set_retain(a, 1.0)  # the biased ranks: the heap rebuilt
    strategy.value = (1.0,)
    assert tree.evict(2) == [0, 1]  # a, then b: same rank, older node first
    assert b.alive is False


def test_a_valid_plugin_rank_evicts_as_before_and_shipped_keys_are_not_wrapped():
    """A plug-in's finite ranks evict in their order; the shipped strategies' keys (and a
    plug-in that inherits one) are bound as they are: no check on their pushes."""
    from sim.prefix.eviction import LRU
    from sim.prefix.replay_policies import Retain

    tree = RadixTree(B, Pool(), _KeyOf((0.5,)))  # b first: rank 0.5 before 1.0, 3.0
    for i, c in enumerate("abc"):
        tree.insert(segments([(c, B)]), [i], now=float(2 * i + 1))
    assert [tree.evict(1)[0] for _ in range(3)] == [1, 0, 2]

    class LruAgain(LRU):
        name = "lru_again_test"

    for strategy, key in (("lru", LRU.key), (LruAgain(), LRU.key), (Retain([0]), Retain.key)):
        assert RadixTree(B, Pool(), strategy)._rank.__func__ is key
    assert not hasattr(RadixTree(B, Pool(), _KeyOf((0.5,)))._rank, "__func__")  # wrapped


def _nan_after(setup):
    """A tree under ``_KeyOf`` built by ``setup(tree)`` with finite ranks, then ``b``'s
    rank turned NaN; returns (tree, what setup returned, the state to compare)."""
    strategy = _KeyOf((1.0,))
    tree = RadixTree(B, Pool(), strategy)
    made = setup(tree)
    strategy.value = (float("nan"),)
    return tree, made


def _state(tree):
    """What a refusal must leave as it was: every node's blocks, pins, stamps and rank
    inputs, the counters, and the dormant leaves the heap holds (stale entries the
    eviction discarded on its way aside)."""
    nodes = sorted(
        (tuple(n.block_ids), n.lock_ref, n.last_access, n.hit_count, n.retain, n.end_tokens)
        for n in tree.iter_nodes()
    )
    entries = tree._heap if tree._held is None else [*tree._heap, tree._held]
    live = sorted(tuple(n.block_ids) for _, v, n in entries
                  if v == n.heap_version and n.alive and n.lock_ref == 0 and not n.children)  # fmt: skip
    counters = (tree.n_nodes, tree.total_blocks, tree.evictable_blocks, tree.evicted_blocks,
                tree.evicted_nodes, tree.retain_biased, dict(tree.content_priority))  # fmt: skip
    return nodes, live, counters, list(tree.pool.released)


def _b_under_c(tree):
    tree.insert(segments([("b", B)]), [0], now=1.0)
    return tree.insert(segments([("b", B), ("c", B)]), [0, 1], now=2.0).node  # c, under b


_REFUSALS = {  # name: (setup, the call that is refused)
    "insert": (lambda t: t.insert(segments([("a", B)]), [0], now=1.0),
               lambda t, _: t.insert(segments([("b", B)]), [1], now=2.0)),
    "touch": (lambda t: t.insert(segments([("b", B)]), [0], now=1.0).node,
              lambda t, b: t.touch(b, now=5.0)),
    "unlock": (lambda t: _locked(t, t.insert(segments([("b", B)]), [0], now=1.0).node),
               lambda t, b: t.unlock(b)),
    "evict_partial": (lambda t: t.insert(segments([("b", 2 * B)]), [0, 1], now=1.0),
                      lambda t, _: t.evict(1)),
    "evict_cascade": (_b_under_c, lambda t, _: t.evict(1)),
    "evict_path": (_b_under_c, lambda t, c: t.evict_path(c)),
    "set_retain_rebuild": (lambda t: t.insert(segments([("b", B)]), [0], now=1.0).node,
                           lambda t, b: t.set_retain(b, 1.0)),
    "set_retain_push": (lambda t: _biased(t, t.insert(segments([("b", B)]), [0], now=1.0).node),
                        lambda t, b: t.set_retain(b, 3.0)),
    "set_priorities": (lambda t: t.insert(segments([("b", B)]), [0], now=1.0),
                       lambda t, _: t.set_priorities({"b": 2.0})),
}  # fmt: skip


def _locked(tree, node):
    tree.lock(node)
    return node


def _biased(tree, node):
    tree.set_retain(node, 2.0)
    return node


@pytest.mark.parametrize("call", sorted(_REFUSALS))
def test_a_refused_nan_rank_leaves_the_tree_as_it_was(call):
    """The refusal used to come after the change it ranked: a caller that caught it (a
    notebook) went on with a dormant leaf missing from the heap (``check_invariants``
    failed) or a half-made change. Now every refused push undoes its call."""
    setup, refused = _REFUSALS[call]
    tree, made = _nan_after(setup)
    before = _state(tree)
    with pytest.raises(PluginError, match=r"^eviction strategy 'key_of_test': key returned \(nan,\)"):
        refused(tree, made)
    tree.check_invariants()
    assert _state(tree) == before


def test_a_plugin_cannot_make_its_key_trusted():
    """``SHIPPED_KEYS`` was a public set: a plug-in that added its key to it skipped the
    NaN check. It is a read-only snapshot now, and the private registry refuses a key
    defined outside kvsim's own modules."""
    from sim.prefix import eviction
    from sim.prefix.eviction import FIFO, LFU, LRU, Priority
    from sim.prefix.replay_policies import Belady, Retain

    shipped = {LRU.key, LFU.key, FIFO.key, Priority.key, Belady.key, Retain.key}
    assert eviction.SHIPPED_KEYS == frozenset(shipped)
    with pytest.raises(AttributeError):
        eviction.SHIPPED_KEYS.add(_KeyOf.key)  # type: ignore[attr-defined]
    with pytest.raises(PluginError) as exc:
        eviction._trust_keys(_KeyOf.key)
    assert str(exc.value) == (
        "'_KeyOf.key' (module 'test_radix_tree'): only the shipped strategies' keys are "
        "trusted unchecked; a plug-in's ranks are checked for NaN (docs/prefix_cache.md, "
        "adding a strategy)"
    )
    assert eviction.SHIPPED_KEYS == frozenset(shipped)
    tree = RadixTree(B, Pool(), _KeyOf((float("nan"),)))
    tree.insert(segments([("a", B)]), [0], now=1.0)
    with pytest.raises(PluginError, match=r"^eviction strategy 'key_of_test': key returned"):
        tree.insert(segments([("b", B)]), [1], now=2.0)

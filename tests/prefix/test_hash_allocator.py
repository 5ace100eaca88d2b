"""vLLM V1's hashed prefix cache (``paged_hash``): the design document's 10-block example
under the rules it was written for (an option set), the default rules of current vLLM
(0.33.0), the hit cap, duplicates, LRU order, and a hypothesis test of the pool's books
with content."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.errors import InvariantError
from sim.memory import make_allocator
from sim.prefix.kinds import HashPagedAllocator
from sim.prefix.spans import block_hashes, segments

KV = 8


#: the V1 design document's rules (vLLM 0.8), for which its example was written
DOC_RULES = {"null_block": False, "unhashed_to_head": False}


def vllm(blocks=10, bs=4, **options) -> HashPagedAllocator:
    return make_allocator(
        "paged_hash", pool_bytes=blocks * bs * KV, kv_bytes_per_token=KV, block_size=bs, **options
    )


def ok(a):
    a.check_invariants()
    m = a.metrics()
    assert m.free_bytes + m.allocated_bytes + m.cached_bytes + m.remainder_bytes == m.pool_bytes
    return m


def run_design_doc_example(a):
    """vLLM docs/design/v1/prefix_caching.md, "Example": 10 blocks of 4 tokens."""
    steps = {}
    a.allocate("r0", 15, content=[("A", 15)])  # time 1: 3 full blocks cached + 1 partial
    steps[1] = a.block_table("r0")
    a.append("r0", 1, content=[("A", 15, 1)])  # block 3 full: cached
    a.append("r0", 1, content=[("A", 16, 1)])  # time 3: a new block for decoding
    steps[3] = a.block_table("r0")
    r = a.allocate("r1", 14, content=[("A", 10), ("B", 4)])  # time 4: first 10 tokens shared
    steps[4] = (r.matched_tokens, a.block_table("r1"))
    a.free("r0")  # time 5
    steps[5] = a.pool.free_queue()
    a.free("r1")  # time 6
    steps[6] = a.pool.free_queue()
    evictions = a.pool.evictions
    r = a.allocate("r2", 29, content=[("A", 12), ("C", 17)])  # time 7
    steps[7] = (
        r.matched_tokens,
        a.block_table("r2"),
        a.pool.free_queue(),
        a.pool.evictions - evictions,
    )
    ok(a)
    return steps


def test_vllm_documented_ten_block_example():
    s = run_design_doc_example(vllm(**DOC_RULES))
    assert s[1] == (0, 1, 2, 3)
    assert s[3] == (0, 1, 2, 3, 4)
    assert s[4] == (8, (0, 1, 5, 6))  # only 2 blocks hit: the 3rd matches 2 of 4 tokens
    assert s[5] == [7, 8, 9, 4, 3, 2]  # r0 freed tail first; 0, 1 still used by r1
    assert s[6] == [7, 8, 9, 4, 3, 2, 6, 5, 1, 0]
    # hits 0, 1, 2 are touched out of the queue; 7, 8, 9, 4, 3 are taken (3 evicted)
    assert s[7] == (12, (0, 1, 2, 7, 8, 9, 4, 3), [6, 5], 1)


@pytest.mark.parametrize("options", [{}, {"null_block": True, "unhashed_to_head": True}])
def test_null_block_and_unhashed_blocks_to_the_head_are_the_defaults(options):
    """Current vLLM's rules (0.33.0): what ``paged_hash`` does unless told otherwise."""
    s = run_design_doc_example(vllm(**options))
    assert s[1] == (1, 2, 3, 4)  # block 0 is reserved
    assert s[5] == [5, 8, 9, 4, 3]  # unhashed block 5 (r0's partial) goes to the head
    assert s[6] == [7, 5, 8, 9, 4, 3, 6, 2, 1]
    assert s[7] == (12, (1, 2, 3, 7, 5, 8, 9, 4), [6], 1)
    a = vllm(null_block=True, unhashed_to_head=False)
    m = ok(a)
    assert m.remainder_bytes == 4 * KV and a.max_sequence_tokens == 36  # 9 usable blocks
    assert a.pool.usage() == 0.0


def test_whole_prompt_hit_recomputes_the_last_block_and_keeps_duplicates():
    a = vllm(blocks=20, **DOC_RULES)
    a.allocate("a", 16, content=[("P", 16)])
    a.free("a")
    r = a.allocate("b", 16, content=[("P", 16)])
    assert r.matched_tokens == 12  # (16 - 1) // 4 = 3 blocks
    assert a.index.stats.records[-1].matched_tokens == 16
    last_a, last_b = 3, a.block_table("b")[3]
    assert last_b != last_a  # recomputed into a new block: both copies cached (no dedup)
    assert a.pool.block_hash[last_a] == a.pool.block_hash[last_b] is not None
    ok(a)
    a.free("b")
    assert ok(a).cached_bytes == 5 * 4 * KV


def test_lru_order_evicts_the_least_recently_used_tail_first():
    a = vllm(blocks=8, **DOC_RULES)
    a.allocate("x", 16, content=[("X", 16)])
    a.free("x")  # queue: 4..7, then x's blocks tail first: 3 2 1 0
    a.allocate("y", 16, content=[("Y", 16)])  # takes 4..7
    a.free("y")  # queue: 3 2 1 0 7 6 5 4
    assert a.pool.free_queue() == [3, 2, 1, 0, 7, 6, 5, 4]
    a.allocate("z", 8, content=[("Z", 8)])  # takes 3, 2: X's last blocks are evicted first
    assert a.block_table("z") == (3, 2) and a.pool.evictions == 2
    assert a.allocate("x2", 9, content=[("X", 8), ("q", 1)]).matched_tokens == 8
    assert a.block_table("x2") == (0, 1, 7) and a.pool.evictions == 3  # Y's tail block next
    m = ok(a)
    assert m.cached_bytes == 3 * 4 * KV  # Y's blocks 6, 5, 4


def test_a_miss_changes_nothing_not_even_the_queue_order():
    a = vllm(blocks=6)
    a.allocate("a", 8, content=[("A", 8)])
    a.free("a")
    a.allocate("b", 12, content=[("B", 12)])
    queue = a.pool.free_queue()
    assert not a.can_allocate(16, content=[("A", 8), ("n", 8)])  # 2 hits + 2 new > 3 - 2
    assert not a.allocate("c", 16, content=[("A", 8), ("n", 8)])
    assert a.pool.free_queue() == queue and not a.is_live("c")
    ok(a)


def test_useful_bytes_count_a_shared_hit_once():
    a = vllm(blocks=20)
    a.allocate("a", 16, content=[("S", 16)])
    a.allocate("b", 17, content=[("S", 16), ("x", 1)])
    m = ok(a)
    assert m.useful_bytes == 17 * KV and m.logical_bytes == 33 * KV
    a.free("a")
    assert ok(a).useful_bytes == 17 * KV


SPANS = [("s", 8), ("s", 20), ("t", 4), ("u", 10), ("s", 12), ("v", 3)]
OPS = st.lists(
    st.tuples(
        st.sampled_from(["allocate"] * 3 + ["append"] * 2 + ["fork", "free", "free"]),
        st.integers(0, 1000),
        st.lists(st.sampled_from(SPANS), min_size=1, max_size=3),
        st.sampled_from([True, True, True, False]),
    ),
    min_size=4,
    max_size=40,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, null=st.booleans(), head=st.booleans(), blocks=st.sampled_from([10, 30]))
def test_books_and_hashes_stay_consistent(ops, null, head, blocks):
    a = vllm(blocks=blocks, null_block=null, unhashed_to_head=head)
    live: list = []
    next_id = 0
    for name, pick, spans, with_content in ops:
        n = sum(s[1] for s in spans)
        content = spans if with_content else None
        if name == "allocate" or not live:
            predicted = a.can_allocate(n, content=content)
            queue = a.pool.free_queue()
            r = a.allocate(next_id, n, content=content)
            assert bool(r) == predicted
            if r:
                assert r.matched_tokens <= n - 1 and r.matched_tokens % 4 == 0
                live.append(next_id)
            else:
                assert a.pool.free_queue() == queue
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
        m = ok(a)
        assert m.useful_bytes <= m.allocated_bytes
        assert a.pool.num_free == (m.free_bytes + m.cached_bytes) / (4 * KV)
        a.index.join()  # (appends are hashed when read)
        for seq in live:  # incremental hashes == the whole chain hashed from token 0
            cur = a.index._content[seq]
            if cur is not None:
                assert a.index._hashes[seq] == block_hashes(segments(cur), 4)


def test_invariant_check_catches_a_wrong_hash_or_tail():
    a = vllm(blocks=20)
    a.allocate("a", 10, content=[("S", 10)])
    for k in range(10, 22):
        a.append("a", 1, content=[("S", k, 1)])
    a.index.join()
    assert a.index._hashes["a"] == block_hashes(segments([("S", 22)]), 4)
    assert a.index._tail["a"] == [("S", 20, 2)]
    ok(a)
    good = list(a.index._hashes["a"])
    for i in (0, len(good) - 1):  # a block's hash in the pool, or the chain's last link
        a.index._hashes["a"][i] ^= 1
        with pytest.raises(InvariantError, match="hashes are stale"):
            a.check_invariants()
        a.index._hashes["a"][:] = good
    a.pool.block_hash[a.block_table("a")[-2]] ^= 1  # the pool's map disagrees too
    with pytest.raises(InvariantError):
        a.check_invariants()
    a.pool.block_hash[a.block_table("a")[-2]] ^= 1
    a.index._tail["a"] = [("S", 19, 3)]
    with pytest.raises(InvariantError, match="hashes are stale"):
        a.check_invariants()

"""The global prefix directory (rule 3.15, F19): exact against each node's own cache, fed
by the ``PrefixListener`` seam of the radix and paged_hash indexes, delayed on a simpy
clock, bounded by what the caches hold, and cheap (chunk hashes made once per block)."""

from __future__ import annotations

from math import lcm

import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sim  # noqa: F401 (registers the prefix kinds)
import sim.prefix.spans as spans_mod
from sim.cluster.directory import PrefixDirectory
from sim.cluster.score import chunks_skipped, prefill_tokens, routing_score
from sim.memory import make_allocator
from sim.memory.kv_manager import KVManager
from sim.prefix.spans import block_hashes, segments

#: (kind, block size, options): both kinds, B a multiple of 16, B dividing 16, B = 24, and
#: strategies that grow leaves in place (lru) and that insert a child per block (lfu, fifo)
GROUPS = {
    "16": [("radix", 16, {}), ("paged_hash", 16, {})],
    "32-8": [("radix", 32, {}), ("paged_hash", 32, {}), ("radix", 8, {})],
    "24-48": [
        ("radix", 24, {"eviction": "fifo"}),
        ("radix", 16, {"eviction": "lfu"}),
        ("paged_hash", 48, {"unhashed_to_head": True}),
    ],
}
POOL_TOKENS = 384  # small: prompts reach 270 tokens, so eviction happens all the time


def kv_node(kind: str, block_size: int, blocks: int | None = None, **options) -> KVManager:
    blocks = POOL_TOKENS // block_size if blocks is None else blocks
    alloc = make_allocator(
        kind,
        pool_bytes=blocks * block_size,
        kv_bytes_per_token=1,
        block_size=block_size,
        **options,
    )
    return KVManager(alloc)


def cluster(nodes, env=None, delay_s: float = 0.0, blocks: int | None = None):
    d = PrefixDirectory(env, len(nodes), update_delay_s=delay_s)
    kvs = [kv_node(kind, bs, blocks, **opts) for kind, bs, opts in nodes]
    for j, kv in enumerate(kvs):
        assert d.attach(j, kv)
    return d, kvs


def own_match(kv: KVManager, content) -> int:
    """The node's own leading match in whole blocks, read without changing its cache."""
    index, bs = kv.alloc.index, kv.block_size
    segs = segments(content)
    if kv.alloc.kind == "radix":
        path, _, partial_m = index.tree._walk(segs)
        raw = (path[-1].end_tokens if path else 0) + partial_m
        return raw // bs * bs
    return len(index.pool.lookup(block_hashes(segs, bs))) * bs


def expected(kv: KVManager, content) -> int:
    """The directory's promise: the own match floored to lcm(16, B) (module docstring)."""
    period = lcm(16, kv.block_size)
    return own_match(kv, content) // period * period


def published(kv: KVManager) -> int:
    """Cached blocks that end on a 16-token boundary: what the directory may hold."""
    index = kv.alloc.index
    if kv.alloc.kind == "radix":
        ends = 0
        for node in index.tree.iter_nodes():
            start = node.end_tokens - node.n_tokens
            ends += sum(
                (start + (i + 1) * kv.block_size) % 16 == 0 for i in range(len(node.block_ids))
            )
        return ends
    return len(index.pool._map)  # one hash per cached prefix (B a multiple of 16 here)


# ---------------------------------------------------------------- exactness (hypothesis)
CIDS = ["a", "b", "c"]
span = st.tuples(st.sampled_from(CIDS), st.integers(1, 90))
prompt = st.lists(span, min_size=1, max_size=3)
segment = st.tuples(st.sampled_from([*CIDS, "d"]), st.integers(0, 60), st.integers(1, 40))
op = st.one_of(
    st.tuples(st.just("alloc"), st.integers(0, 2), st.integers(0, 3), prompt),
    st.tuples(st.just("append"), st.integers(0, 2), st.integers(0, 3), segment),
    st.tuples(st.just("fork"), st.integers(0, 2), st.integers(0, 3), st.integers(0, 3)),
    st.tuples(st.just("free"), st.integers(0, 2), st.integers(0, 3), st.booleans()),
)


def apply(kv: KVManager, live: dict, step) -> None:
    """One allocator operation on one node; ``live`` = its sequences' contents."""
    name, _, seq, arg = step
    a = kv.alloc
    if name == "alloc" and seq not in live:
        segs = segments(arg)
        n = sum(s[2] for s in segs)
        if a.allocate(seq, n, content=arg):
            live[seq] = list(segs)
    elif name == "append" and seq in live:
        if a.append(seq, arg[2], content=(arg,)):
            live[seq] = list(segments([*live[seq], arg]))
    elif name == "fork" and seq in live and arg not in live:
        if a.fork(seq, arg):
            live[arg] = list(live[seq])
    elif name == "free" and seq in live:
        (a.free_uncached if arg else a.free)(seq)
        del live[seq]


@pytest.mark.parametrize("group", list(GROUPS))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(op, min_size=20, max_size=60))
def test_match_equals_each_nodes_own_cache_after_every_operation(group, steps):
    """With no delay, for every node and every content seen so far, ``match_tokens`` is the
    node's own leading block match floored to lcm(16, B): equal for B = 16, 32, 48 (both
    kinds), floored to 16 for B = 8 and to 48 for B = 24 (radix); and the directory holds
    one entry per cached block ending on a chunk boundary, nothing more."""
    d, kvs = cluster(GROUPS[group])
    lives: list[dict] = [{} for _ in kvs]
    seen: list[tuple] = [(("a", 90),), (("a", 40), ("b", 50))]
    for step in steps:
        j = step[1] % len(kvs)
        apply(kvs[j], lives[j], step)
        if step[0] == "alloc":
            seen.append(tuple(step[3]))
        seen.extend(tuple(c) for live in lives for c in live.values())
        probes = list(dict.fromkeys(tuple(segments(c)) for c in seen[-12:]))
        for content in probes:
            n = sum(s[2] for s in content)
            got = d.match_tokens(content, n)
            assert got == [expected(kv, content) for kv in kvs], (step, content)
            assert d.match_tokens(content, n, line="one line") == got  # starts of each other
        assert [d.held_prefixes(j) for j in range(len(kvs))] == [published(kv) for kv in kvs]
        assert d.entries == sum(published(kv) for kv in kvs)
        for j, kv in enumerate(kvs):
            kv.check_invariants()
            if kv.alloc.kind == "radix":  # its cached blocks are prefix-closed: bisected
                assert d._closed >> j & 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=20, max_size=60))
def test_paged_hash_with_blocks_of_8_never_understates(steps):
    """B dividing 16 with paged_hash: a chunk is published by the block ending it, so the
    directory is at least the node's floored match; it may say more when the cache dropped
    an earlier block (LRU order, ``free_uncached`` of a shared trunk) but kept later ones."""
    d, kvs = cluster([("paged_hash", 8, {})])
    live: dict = {}
    seen: list[tuple] = []
    for step in steps:
        apply(kvs[0], live, step)
        if step[0] == "alloc":
            seen.append(tuple(step[3]))
        for content in seen[-8:]:
            n = sum(s[2] for s in segments(content))
            own = expected(kvs[0], content)
            got = d.match_tokens(content, n)[0]
            assert own <= got and got % 16 == 0


# ---------------------------------------------------------------- worked examples
def test_e17_through_the_directory():
    """E17 / T19: a 40 000-token prompt, 32 000 of it cached on worker 1 of four:
    Match = 32 000 there (0 elsewhere), 2 000 chunks skipped, 8 000 tokens prefilled,
    Match/S = 0.8, and F20 routes it to worker 1."""
    nodes = [("radix", 16, {})] * 4
    d, kvs = cluster(nodes, blocks=2_600)
    trunk = ("repo", 32_000)
    kvs[1].alloc.allocate("earlier", 32_000, content=[trunk])
    kvs[1].alloc.free("earlier")  # dormant: still cached
    kvs[2].alloc.allocate("other", 20_000, content=[("elsewhere", 20_000)])
    prompt = [trunk, ("question", 8_000)]
    match = d.match_tokens(prompt, 40_000)
    assert match == [0, 32_000, 0, 0]
    assert chunks_skipped(match[1]) == 2_000 and prefill_tokens(40_000, match[1]) == 8_000
    scores = [routing_score(m, 40_000, 0, 0, mu=0.5, gamma=1.0) for m in match]
    assert scores[1] == pytest.approx(0.4) and max(scores) == scores[1]
    assert d.entries == 2_000 + 1_250


def test_first_tokens_only_and_missing_content():
    d, kvs = cluster([("radix", 16, {}), ("paged_hash", 16, {})])
    for kv in kvs:
        kv.alloc.allocate("s", 100, content=[("x", 100)])
    assert d.match_tokens([("x", 100)], 100) == [96, 96]
    assert d.match_tokens([("x", 100)], 40) == [32, 32]  # only the first n_tokens count
    assert d.match_tokens([("x", 100)], 15) == [0, 0]
    assert d.match_tokens([("x", 40)], 100) == [32, 32]  # content shorter than n_tokens
    assert d.match_tokens(None, 100) == [0, 0]
    assert d.match_tokens([("y", 100)], 100) == [0, 0]


def test_a_diverging_token_inside_a_chunk_ends_the_match():
    d, (kv,) = cluster([("radix", 16, {})])
    kv.alloc.allocate("s", 64, content=[("x", 64)])
    assert d.match_tokens([("x", 40), ("z", 24)], 64) == [32]  # chunk 3 differs at token 40
    assert d.match_tokens([("x", 48), ("z", 16)], 64) == [48]


def test_eviction_withdraws_entries():
    """A small pool: a second context evicts the first (LRU); its entries leave with it."""
    for kind in ("radix", "paged_hash"):  # paged_hash: 10 usable blocks besides vLLM's null one
        d, (kv,) = cluster([(kind, 16, {})], blocks=10 + (kind == "paged_hash"))
        kv.alloc.allocate("a", 160, content=[("A", 160)])
        kv.alloc.free("a")
        assert d.match_tokens([("A", 160)], 160) == [160] and d.entries == 10
        kv.alloc.allocate("b", 96, content=[("B", 96)])  # takes 6 of the 10 cached blocks
        assert d.match_tokens([("A", 160)], 160) == [expected(kv, [("A", 160)])]
        assert d.match_tokens([("B", 96)], 96) == [96]
        assert d.entries == published(kv) == 10
        kv.alloc.free_uncached("b")
        assert d.match_tokens([("B", 96)], 96) == [0]
        assert d.entries == published(kv)
        assert d.updates == 10 + 6 + 6 + 6  # A in, 6 of A out, B in, B out


def test_growth_is_published_as_blocks_fill():
    d, kvs = cluster([("radix", 16, {}), ("paged_hash", 16, {}), ("radix", 32, {})], blocks=64)
    for kv in kvs:
        kv.alloc.allocate("s", 20, content=[("p", 20)])
    assert d.match_tokens([("p", 20), ("g", 60)], 80) == [16, 16, 0]
    for step in range(60):
        for kv in kvs:
            kv.alloc.append("s", 1, content=[("g", step, 1)])
    assert d.match_tokens([("p", 20), ("g", 60)], 80) == [80, 80, 64]


# ---------------------------------------------------------------- delay
def test_an_update_is_visible_after_the_delay_and_not_before():
    env = simpy.Environment()
    d, (kv,) = cluster([("radix", 16, {})], env=env, delay_s=0.5, blocks=64)
    kv.set_time(env.now)
    kv.alloc.allocate("s", 64, content=[("x", 64)])  # made at t = 0
    assert d.match_tokens([("x", 64)], 64) == [0] and d.entries == 0
    assert d.pending_updates == 1
    env.run(until=0.49)
    assert d.match_tokens([("x", 64)], 64) == [0]
    env.run(until=0.5)
    assert d.match_tokens([("x", 64)], 64) == [64] and d.entries == 4
    assert d.mean_staleness_s == pytest.approx(0.5) and d.pending_updates == 0
    env.run(until=1.0)
    kv.alloc.free_uncached("s")  # made at t = 1.0: still visible until 1.5
    env.run(until=1.2)
    assert d.match_tokens([("x", 64)], 64) == [64]
    env.run(until=1.5)
    assert d.match_tokens([("x", 64)], 64) == [0] and d.entries == 0
    assert d.updates == 8 and d.mean_staleness_s == pytest.approx(0.5)


def test_no_delay_schedules_nothing():
    env = simpy.Environment()
    d, (kv,) = cluster([("paged_hash", 16, {})], env=env)
    kv.alloc.allocate("s", 64, content=[("x", 64)])
    assert d.match_tokens([("x", 64)], 64) == [64]
    assert env.peek() == float("inf")  # no simpy event was made
    assert d.mean_staleness_s == 0.0 and d.pending_updates == 0


def test_a_delay_needs_a_clock():
    with pytest.raises(ValueError, match="env"):
        PrefixDirectory(None, 2, update_delay_s=1.0)
    with pytest.raises(ValueError, match="update_delay_s"):
        PrefixDirectory(None, 2, update_delay_s=float("nan"))


# ---------------------------------------------------------------- wiring
def test_attach_only_to_prefix_caches_and_only_before_the_node_runs():
    d = PrefixDirectory(None, 3)
    assert not d.attach(0, kv_node("paged", 16))
    contiguous = KVManager(make_allocator("contiguous", pool_bytes=1_000, kv_bytes_per_token=1))
    assert not d.attach(1, contiguous)
    assert d.entries == 0 and d.match_tokens([("x", 64)], 64) == [0, 0, 0]
    busy = kv_node("radix", 16)
    busy.alloc.allocate("s", 32, content=[("x", 32)])
    with pytest.raises(ValueError, match="before the node runs"):
        d.attach(2, busy)
    ok = kv_node("radix", 16)
    assert d.attach(2, ok)
    with pytest.raises(ValueError, match="attached already"):
        d.attach(2, ok)
    with pytest.raises(ValueError, match="not in 0..2"):
        d.attach(3, kv_node("radix", 16))


def test_unattached_nodes_report_zero():
    d = PrefixDirectory(None, 3)
    kv = kv_node("radix", 16)
    assert d.attach(1, kv)
    kv.alloc.allocate("s", 48, content=[("x", 48)])
    assert d.match_tokens([("x", 48)], 48) == [0, 48, 0]


# ---------------------------------------------------------------- cost
class _Counter:
    def __init__(self, monkeypatch) -> None:
        self.calls = 0
        real = spans_mod.chain_hash

        def counting(parent, block, extra=b""):
            self.calls += 1
            return real(parent, block, extra)

        monkeypatch.setattr(spans_mod, "chain_hash", counting)
        import sim.cluster.directory as directory_mod

        monkeypatch.setattr(directory_mod, "chain_hash", counting)
        monkeypatch.setattr(directory_mod, "_chunk_chain_hash", counting)


def test_match_stops_one_chunk_after_the_longest_held_prefix(monkeypatch):
    d, kvs = cluster([("radix", 16, {}), ("radix", 16, {})], blocks=200)
    kvs[0].alloc.allocate("s", 160, content=[("x", 160)])
    kvs[1].alloc.allocate("s", 320, content=[("x", 320)])
    d._chunks.clear()  # the feeds' hashes of "x": a query would take them, not hash them
    count = _Counter(monkeypatch)
    assert d.match_tokens([("x", 320), ("y", 1_600)], 1_920) == [160, 320]
    assert count.calls == 21  # 20 held chunks and the first that no node holds
    count.calls = 0
    assert d.match_tokens([("z", 1_920)], 1_920) == [0, 0] and count.calls == 1
    count.calls = 0  # the same prompt again: its first segment was hashed to its end
    d._chunks.clear()
    assert d.match_tokens([("x", 320), ("y", 1_600)], 1_920) == [160, 320]
    assert count.calls == 1  # the memo serves "x"; "y" was cut short, so it is hashed


def test_the_prompt_memo_is_bounded_and_changes_no_answer():
    d, (kv,) = cluster([("radix", 16, {})], blocks=700)
    d.memo_limit = 40
    kv.alloc.allocate("s", 2_000, content=[("a", 500), ("b", 500), ("c", 1_000)])
    prompts = [[("a", 500), ("b", 500), ("c", 1_000)], [("a", 500), ("b", 300)], [("a", 64)]]
    for _ in range(3):
        got = [d.match_tokens(p, sum(n for _, n in p)) for p in prompts]
        assert got == [[2_000], [800], [64]]  # every full block is cached
        assert d._memo_size <= 40


def test_a_growing_context_hashes_each_block_once(monkeypatch):
    d, (kv,) = cluster([("radix", 16, {})], blocks=700)
    kv.alloc.allocate("s", 10_000, content=[("ctx", 10_000)])
    count = _Counter(monkeypatch)
    for i in range(32):
        kv.alloc.append("s", 1, content=[("out", i, 1)])
    assert count.calls == 2  # two more full blocks, one chunk hash each
    assert d.match_tokens([("ctx", 10_000), ("out", 32)], 10_032) == [10_032]


def test_a_chunk_is_hashed_once_between_the_queries_and_a_block_16_feed(monkeypatch):
    """A node's output blocks, hashed by its feed, come back in the next prompt: the query
    takes their hashes; a prompt's chunks hashed by a query are taken by the feed of the
    node that caches them. Answers as each node's own cache."""
    d, kvs = cluster([("radix", 16, {}), ("radix", 16, {})], blocks=700)
    kvs[0].alloc.allocate("s", 4_000, content=[("ctx", 4_000)])
    kvs[1].alloc.allocate("w", 16, content=[("warm", 16)])  # its feed has seen a block
    count = _Counter(monkeypatch)
    for i in range(32):
        kvs[0].alloc.append("s", 1, content=[("out", i, 1)])
    assert count.calls == 2  # two more full blocks, hashed by node 0's feed
    prompt = [("ctx", 4_000), ("out", 32)]
    assert d.match_tokens(prompt, 4_032) == [4_032, 0]
    assert count.calls == 2  # every chunk taken from the feed's hashes: none made again
    d._memo.clear()  # node 1 holds nothing: the query stops after its first chunk ...
    assert d.match_tokens([("new", 480)], 480) == [0, 0] and count.calls == 3
    kvs[1].alloc.allocate("s", 480, content=[("new", 480)])
    assert count.calls == 3 + 29  # ... whose hash node 1's feed takes: 29 of 30 made
    assert d.match_tokens([("new", 480)], 480) == [0, 480]


def test_the_chunk_hand_over_is_bounded():
    d, (kv,) = cluster([("radix", 16, {})], blocks=700)
    d.chunk_memo_limit = 10
    kv.alloc.allocate("s", 2_000, content=[("a", 2_000)])
    assert len(d._chunks) <= 10
    assert d.match_tokens([("a", 2_000)], 2_000) == [2_000]


def test_the_memo_never_changes_an_answer_across_updates():
    """A memoised prompt is walked against the masks visible now: the same query before
    and after evictions and inserts answers as each node's cache does, for periods 1, 2
    and 3 (B = 16, 32, 24), identical to a directory whose memo was just emptied."""
    d, kvs = cluster([("radix", 16, {}), ("radix", 32, {}), ("radix", 24, {})])
    prompt = [("a", 150), ("b", 100), ("c", 110)]  # 360 of the 384 tokens, three segments
    for kv in kvs:
        kv.alloc.allocate("s", 360, content=prompt)
        kv.alloc.free("s")  # dormant: cached until evicted

    def check(want):
        first = d.match_tokens(prompt, 360)
        assert d._memo  # the segments are memoised
        assert d.match_tokens(prompt, 360) == first == want  # a memo hit, the same answer
        d._memo.clear()
        d._memo_size = 0
        assert d.match_tokens(prompt, 360) == want

    check([expected(kv, prompt) for kv in kvs])
    assert [expected(kv, prompt) for kv in kvs] == [352, 352, 336]
    for kv in kvs[1:]:  # evict part of the prefix on two nodes, between identical queries
        kv.alloc.allocate("t", 200, content=[("other", 200)])
    before_free = [expected(kv, prompt) for kv in kvs]
    assert before_free[0] == 352 and before_free[1] < 352 and before_free[2] < 336
    check(before_free)
    kvs[0].alloc.allocate("u", 64, content=[("a", 64)])  # a shared trunk, then dropped
    kvs[0].alloc.free_uncached("u")
    for kv in kvs[1:]:
        kv.alloc.free_uncached("t")
        kv.alloc.allocate("s", 360, content=prompt)  # cached again: the answer grows back
    check([expected(kv, prompt) for kv in kvs])
    assert [expected(kv, prompt) for kv in kvs][1:] == [352, 336]


def test_a_memoised_trunk_costs_python_steps_per_query_not_per_chunk():
    """A re-sent 20,000-token context of 40 segments (1,250 chunks) walks its chunks in C
    loops: a few dozen Python-level calls, where a chunk-by-chunk walk made >1,250."""
    import sys

    d, kvs = cluster([("radix", 16, {}), ("radix", 16, {})], blocks=1_400)
    prompt = [("t", i, 500) for i in range(40)]  # 40 distinct segments of 500 tokens
    kvs[1].alloc.allocate("s", 20_000, content=prompt)
    assert d.match_tokens(prompt, 20_000) == [0, 20_000]  # hashes and memoises it
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += event in ("call", "c_call")

    sys.setprofile(count)
    try:
        got = d.match_tokens(prompt, 20_000)
    finally:
        sys.setprofile(None)
    assert got == [0, 20_000]
    assert calls < 300  # ~5 per segment; a walk per chunk costs 1,250+


def test_a_gap_in_a_cache_ends_its_leading_run():
    """A cache that drops an earlier block but keeps later ones (paged_hash: ``free_uncached``
    of a shared trunk) is no longer prefix-closed: the directory stops bisecting for that
    node, and a memoised prompt is walked chunk by chunk, answering its leading run (0),
    not the held last chunk (which a bisection trusting closure would answer: 64)."""
    d, (kv,) = cluster([("paged_hash", 16, {})], blocks=6)
    kv.alloc.allocate("s", 64, content=[("x", 64)])
    kv.alloc.allocate("u", 32, content=[("x", 32)])
    kv.alloc.free("s")
    assert d.match_tokens([("x", 64)], 64) == [64] and d._closed == 1  # memoised, closed
    kv.alloc.free_uncached("u")  # drops the shared first block, keeps blocks 2 and 3
    assert d._closed == 0
    assert d.match_tokens([("x", 64)], 64) == [expected(kv, [("x", 64)])] == [0]


def test_a_held_trunk_is_bisected_not_walked():
    """Radix caches stay prefix-closed: a memoised 1,250-chunk prompt costs O(log chunks)
    mask look-ups per node (a node holding the last chunk holds them all), not one per
    chunk, and answers as each node's own cache does."""

    class CountingDict(dict):
        gets = 0

        def get(self, key, default=None):
            CountingDict.gets += 1
            return super().get(key, default)

    d, kvs = cluster([("radix", 16, {}), ("radix", 16, {})], blocks=1_400)
    prompt = [("t", i, 500) for i in range(40)]  # 20,000 tokens, 1,250 chunks
    kvs[0].alloc.allocate("s", 20_000, content=prompt)
    kvs[1].alloc.allocate("s", 4_000, content=prompt[:8])
    want = [expected(kv, prompt) for kv in kvs]
    assert want == [20_000, 4_000]
    assert d.match_tokens(prompt, 20_000) == want  # hashes and memoises the prompt
    d._mask = CountingDict(d._mask)
    assert d.match_tokens(prompt, 20_000) == want
    assert d._closed == 0b11
    assert CountingDict.gets < 40  # a walk per chunk makes 1,250+


def test_a_line_of_growing_prompts_answers_as_without_it():
    """Prompts of one line (each the last plus new spans, cut anywhere, spans continuing
    the one before, a prompt that diverges, one cut short by ``n_tokens``) answer exactly
    as the same prompts without a line, while the caches change between them."""
    d, kvs = cluster([("radix", 16, {}), ("paged_hash", 16, {}), ("radix", 32, {})], blocks=60)
    grow = [("a", 0, 100), ("b", 0, 37), ("b", 37, 20), ("c", 0, 9), ("out", 0, 50)]
    prompts = [tuple(grow[:i]) for i in range(1, len(grow) + 1)]
    prompts += [(("a", 0, 100), ("z", 0, 80)), tuple(grow) + (("t", 0, 300),)]
    live: list[list[str]] = [[] for _ in kvs]
    for i, p in enumerate(prompts):
        j = i % 3
        if len(live[j]) == 2:  # drop its oldest prompt from the cache
            kvs[j].alloc.free_uncached(live[j].pop(0))
        kvs[j].alloc.allocate(f"s{i}", sum(s[2] for s in p), content=p)
        live[j].append(f"s{i}")
        for q in prompts[: i + 1]:
            m = sum(s[2] for s in q)
            want = [expected(kv, q) for kv in kvs]
            assert d.match_tokens(q, m) == want
            assert d.match_tokens(q, m, line="L") == want
            assert d.match_tokens(q, m - 5, line="L") == d.match_tokens(q, m - 5)
    assert d._lines["L"][0]  # the line kept some leading spans


def test_a_re_sent_trunk_of_a_line_costs_python_steps_per_new_span():
    """A line's prompt that re-sends 200 spans plus one new span costs a few dozen
    Python-level calls: the leading spans compare equal in C; without the line ~5 calls
    per span."""
    import sys

    d, kvs = cluster([("radix", 16, {}), ("radix", 16, {})], blocks=1_400)
    trunk = tuple((f"t{i}", 0, 100) for i in range(200))  # 20,000 tokens, 200 spans
    kvs[1].alloc.allocate("s", 20_000, content=trunk)
    assert d.match_tokens(trunk, 20_000, line="s") == [0, 20_000]
    prompt = (*trunk, ("new", 0, 64))
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += event in ("call", "c_call")

    def profiled(line):
        nonlocal calls
        calls = 0
        sys.setprofile(count)
        try:
            got = d.match_tokens(prompt, 20_064, line=line)
        finally:
            sys.setprofile(None)
        assert got == [0, 20_000] == [expected(kv, prompt) for kv in kvs]
        return calls

    assert profiled(None) > 800  # every span looked up in the segment memo
    assert profiled("s") < 100


@given(
    parent=st.integers(0, 2**128 - 1),
    chunk=st.lists(
        st.tuples(st.one_of(st.text(max_size=6), st.integers(-5, 10**12)),
                  st.integers(0, 10**9), st.integers(1, 16)),
        min_size=1, max_size=3,
    ),
)  # fmt: skip
def test_the_inline_chunk_hash_is_the_chain_hash(parent, chunk):
    from sim.cluster.directory import _chunk_chain_hash
    from sim.prefix.spans import chain_hash

    assert _chunk_chain_hash(parent, tuple(chunk)) == chain_hash(parent, tuple(chunk))

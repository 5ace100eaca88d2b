"""``kvsim trace-replay``: a cache never holds more than its capacity, in every format.

The reference here is written from the rule alone (docs/prefix_cache.md, "Trace replay"),
not from the radix tree: the cache is a dict of block keys -> last use, a block's key is
the chain of block ids up to it (equal chains = equal prefix); a call hits its longest
run of cached leading blocks, then caches (and touches) its leading blocks that fit,
``min(blocks, capacity // B)``; over capacity, the least recently used leaf (a cached
block no cached block extends) that the call did not cache goes, the deeper first on
ties. A call of more blocks than the capacity counts in ``calls_not_fitting``.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.prefix.session_trace import parse_session
from sim.prefix.trace_replay import MOONCAKE_BLOCK_TOKENS, TraceRequest, replay, replay_sessions


def reference(calls, block_size: int, capacity_tokens: int | None):
    """``calls``: (chain of block keys, prompt tokens) in replay order -> (hits per call,
    evicted blocks, peak blocks, calls not fitting)."""
    cap = None if capacity_tokens is None else capacity_tokens // block_size
    last: dict[tuple, int] = {}  # cached chain -> last use
    hits, evicted, peak, not_fitting = [], 0, 0, 0
    for now, (chain, prompt) in enumerate(calls):
        prefixes = [tuple(chain[: j + 1]) for j in range(len(chain))]
        k = 0
        while k < len(prefixes) and prefixes[k] in last:
            k += 1
        hits.append(min(k * block_size, prompt))
        keep = len(prefixes) if cap is None else min(cap, len(prefixes))
        not_fitting += keep < len(prefixes)
        for p in prefixes[:keep]:
            last[p] = now
        mine = set(prefixes[:keep])
        while cap is not None and len(last) > cap:
            leaves = [p for p in last if p not in mine and not _extended(p, last)]
            victim = min(leaves, key=lambda p: (last[p], -len(p)))
            del last[victim]
            evicted += 1
        peak = max(peak, len(last))
    return hits, evicted, peak, not_fitting


def _extended(p: tuple, cached: dict) -> bool:
    return any(len(q) == len(p) + 1 and q[: len(p)] == p for q in cached)


# ------------------------------------------------------------------- claude-code
calls_st = st.lists(
    st.tuples(st.lists(st.integers(0, 4), max_size=7), st.integers(0, 3)), min_size=1, max_size=6
)


def _session(i: int, calls, scope: str, bs: int) -> dict:
    reqs = [
        {"t": j, "in": len(ids) * bs + extra, "out": 1, "hash_ids": ids}
        for j, (ids, extra) in enumerate(calls)
    ]
    if len(reqs) > 2:  # a subagent in the middle: its calls replay at its entry
        reqs = [*reqs[:1], {"t": 1, "type": "subagent", "requests": reqs[1:3]}, *reqs[3:]]
    return {"id": f"s{i}", "block_size": bs, "hash_id_scope": scope, "requests": reqs}


@settings(max_examples=150, deadline=None)
@given(
    sessions=st.lists(calls_st, min_size=1, max_size=4),
    scope=st.sampled_from(["local", "global"]),
    capacity=st.one_of(st.none(), st.integers(0, 48)),
)
def test_sessions_follow_the_rule_and_never_exceed_capacity(sessions, scope, capacity):
    bs = 4
    parsed = [parse_session(_session(i, c, scope, bs), f"s{i}") for i, c in enumerate(sessions)]
    r = replay_sessions(parsed, cache_tokens=capacity)
    flat = []
    for i, calls in enumerate(sessions):
        key = i if scope == "local" else "g"
        flat += [([(key, x) for x in ids], len(ids) * bs + extra) for ids, extra in calls]
    hits, evicted, peak, not_fitting = reference(flat, bs, capacity)
    assert r.hits == hits
    assert r.evicted_blocks == evicted
    assert r.peak_cached_tokens == peak * bs
    assert r.calls_not_fitting == not_fitting
    if capacity is not None:
        assert r.peak_cached_tokens <= capacity


# ---------------------------------------------------------------------- mooncake
@settings(max_examples=150, deadline=None)
@given(
    reqs=st.lists(
        st.tuples(st.lists(st.integers(0, 4), min_size=1, max_size=5), st.integers(1, 512)),
        min_size=1,
        max_size=8,
    ),
    block_size=st.sampled_from([128, 256, 512]),
    capacity=st.one_of(st.none(), st.integers(0, 12 * 512)),
)
def test_mooncake_lru_follows_the_rule_and_never_exceeds_capacity(reqs, block_size, capacity):
    trace = [
        TraceRequest(float(i), (len(ids) - 1) * MOONCAKE_BLOCK_TOKENS + last, 1, tuple(ids))
        for i, (ids, last) in enumerate(reqs)
    ]
    r = replay(trace, block_size=block_size, cache_tokens=capacity)
    per = MOONCAKE_BLOCK_TOKENS // block_size
    flat = [([(h, k) for h in t.hash_ids for k in range(per)], t.input_length) for t in trace]
    hits, _, peak, not_fitting = reference(flat, block_size, capacity)
    # (evictions differ by design: a mooncake request inserts all its blocks and may
    # evict its own tail; a session call never inserts what does not fit)
    assert r.hits == hits
    assert r.peak_cached_tokens == peak * block_size
    assert r.calls_not_fitting == not_fitting
    if capacity is not None:
        assert r.peak_cached_tokens <= capacity


def test_a_call_larger_than_the_cache_keeps_its_leading_blocks():
    # one session: a 5-block call under a 3-block cache, then its first 4 blocks again
    s = parse_session(
        _session(0, [([0, 1, 2, 3, 4], 0), ([0, 1, 2, 3], 1)], "local", 4), "s0"
    )
    r = replay_sessions([s], cache_tokens=12)
    assert r.hits == [0, 12]  # blocks 0-2 were kept, 3-4 never cached
    assert (r.calls_not_fitting, r.peak_cached_tokens, r.evicted_blocks) == (2, 12, 0)
    unbounded = replay_sessions([s])
    assert unbounded.hits == [0, 16] and unbounded.calls_not_fitting == 0

"""When an admitted request's KV becomes a prefix hit for others (``KVManager.scheduled`` /
``computed``), step by step on hand-built requests.

The rule, from the two designs modelled:
- ``paged_hash`` (vLLM V1): ``KVCacheManager.allocate_slots`` ends in
  ``cache_blocks(request, min(num_computed + num_new_tokens, request.num_tokens))``, inside
  the scheduling loop: the full blocks a request's *scheduled* tokens fill are cached as it
  is scheduled, so a request admitted later in the same pass may hit them, and blocks of
  later chunks are not cached until those chunks are scheduled.
- ``radix`` (SGLang): a chunk enters the tree once its forward ran (``cache_unfinished_req``
  after each chunk, ``cache_finished_req`` at the end): nothing of a request admitted in the
  same pass is shared, and a chunk is shared from the next pass on.

Block size 4 throughout; the shared system prompt is 40 tokens (10 blocks), each request
adds 8 tokens of its own (48 in all), so a hit is at most 40 tokens.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sched_helpers import Ids, end_turn, scheduler

from sim.prefix.spans import segments
from sim.sched import RUNNING, WAITING

B = 4
SYS = ("sys", 40)


def prompt(own: str, shared=SYS, own_tokens: int = 8):
    return segments([shared, (own, own_tokens)])


def step(s):
    """One decision and its commit; returns [(request id, new tokens, cached tokens), ...]
    of the step and the hits of the requests it admitted."""
    plan = s.schedule()
    s.check_invariants()
    s.kv.check_invariants()
    sched = [(r.req_id, n, r.num_computed) for r, n in plan.scheduled]
    hits = {r.req_id: r.hit_tokens for r in plan.admitted}
    res = s.commit(plan)
    for r in res.finished:
        end_turn(s.kv, r)
    s.kv.check_invariants()
    return sched, hits


def two_together(kind: str, **config):
    ids = Ids()
    s = scheduler(pool_tokens=4096, kind=kind, alloc_options={"block_size": B}, **config)
    a = ids.req(48, 2, content=prompt("a"), last_turn=True)
    b = ids.req(48, 2, content=prompt("b"), last_turn=True)
    s.add(a)
    s.add(b)
    return s, ids


def test_radix_a_request_admitted_in_the_same_pass_misses():
    s, _ = two_together("radix")
    assert step(s) == ([(1, 48, 0), (2, 48, 0)], {1: 0, 2: 0})  # a's KV is not computed


def test_paged_hash_a_request_admitted_after_in_the_same_pass_hits_what_was_scheduled():
    """vLLM caches a's blocks in a's ``allocate_slots``, before b's ``get_computed_blocks``."""
    s, _ = two_together("paged_hash")
    assert step(s) == ([(1, 48, 0), (2, 8, 40)], {1: 0, 2: 40})


def test_paged_hash_same_pass_hit_stops_at_the_scheduled_chunk():
    """A chunk of 16 tokens fills 4 blocks: b hits those, not the rest of a's prompt."""
    s, _ = two_together("paged_hash", long_prefill_token_threshold=16)
    assert step(s) == ([(1, 16, 0), (2, 16, 16)], {1: 0, 2: 16})


def test_chunked_prefill_paged_hash_shares_the_chunk_scheduled_radix_the_chunk_computed():
    """c arrives after the first pass. In the second pass the running requests are
    scheduled first: a's second chunk (16..32) and b's (32..48, its blocks of the system
    prompt up to token 40): vLLM has cached them before c looks up (40 tokens hit, the
    whole system prompt); SGLang's tree holds only what the first pass computed (16)."""
    timelines = {}
    for kind in ("paged_hash", "radix"):
        s, ids = two_together(kind, long_prefill_token_threshold=16)
        first = step(s)
        c = ids.req(48, 2, content=prompt("c"), last_turn=True)
        s.add(c)
        timelines[kind] = [first, step(s)]
    assert timelines["paged_hash"] == [
        ([(1, 16, 0), (2, 16, 16)], {1: 0, 2: 16}),
        ([(1, 16, 16), (2, 16, 32), (3, 8, 40)], {3: 40}),
    ]
    assert timelines["radix"] == [
        ([(1, 16, 0), (2, 16, 0)], {1: 0, 2: 0}),
        ([(1, 16, 16), (2, 16, 16), (3, 16, 16)], {3: 16}),
    ]


@pytest.mark.parametrize("kind", ["paged_hash", "radix"])
def test_a_request_arriving_after_the_prefill_ran_hits(kind):
    ids = Ids()
    s = scheduler(pool_tokens=4096, kind=kind, alloc_options={"block_size": B})
    a = ids.req(48, 3, content=prompt("a"), last_turn=True)
    s.add(a)
    assert step(s) == ([(1, 48, 0)], {1: 0})
    b = ids.req(48, 2, content=prompt("b"), last_turn=True)
    s.add(b)  # a is decoding: its prompt is computed (and was scheduled)
    assert step(s) == ([(1, 1, 48), (2, 8, 40)], {2: 40})


@pytest.mark.parametrize("kind", ["paged_hash", "radix"])
def test_a_finished_request_is_cached_before_its_sequence_is_released(kind):
    ids = Ids()
    s = scheduler(pool_tokens=4096, kind=kind, alloc_options={"block_size": B})
    a = ids.req(48, 1, content=prompt("a"), last_turn=True)
    s.add(a)
    assert step(s) == ([(1, 48, 0)], {1: 0})  # finished and released in the same step
    assert not s.kv.is_live(a.seq_id) and not s.kv.holds_back
    b = ids.req(48, 2, content=prompt("b"), last_turn=True)
    s.add(b)
    assert step(s) == ([(2, 8, 40)], {2: 40})


@pytest.mark.parametrize("kind", ["paged_hash", "radix"])
def test_a_held_sequence_extension_is_held_back_too(kind):
    """The next turn of a held trajectory appends its prompt at admission: a fork of the
    same content admitted in that pass does not hit the new turn's blocks under radix."""
    ids = Ids()
    s = scheduler(pool_tokens=4096, kind=kind, alloc_options={"block_size": B})
    t1 = ids.req(40, 1, seq_id="traj", content=segments([SYS]), last_turn=False)
    s.add(t1)
    step(s)  # t1 finished: held with 40 tokens (its sampled token has no KV)
    s.kv.resume("traj")
    both = segments([SYS, (t1.output_id, 1), ("obs", 15)])
    t2 = ids.req(56, 1, seq_id="traj", content=both, last_turn=True)
    other = ids.req(56, 1, content=both, last_turn=True)
    s.add(t2)
    s.add(other)
    sched, hits = step(s)
    own = 40 if kind == "radix" else 52  # paged_hash: t2's 56 tokens were scheduled first
    assert sched == [(2, 16, 40), (3, 56 - own, own)] and hits[3] == own


def test_a_preempted_prefill_keeps_what_was_published_and_frees_the_rest():
    """Preempted after its first chunk ran, a request's computed chunk stays cached (vLLM,
    SGLang alike) and its readmission hits it; nothing past it was ever cached."""
    ids = Ids()
    s = scheduler(
        pool_tokens=4096, kind="radix", alloc_options={"block_size": B},
        long_prefill_token_threshold=16,
    )
    a = ids.req(48, 2, content=prompt("a"), last_turn=True)
    s.add(a)
    step(s)
    s.running.remove(a)
    s.kv.preempt(a)
    a.status, a.preemptions = WAITING, 1
    s.waiting.appendleft(a)
    assert step(s) == ([(1, 16, 16)], {1: 0}) and a.preempted_hit_tokens == 16
    assert a.status == RUNNING


# ------------------------------------------------------------------ property
SHARED = [("sys-x", 24), ("sys-y", 37)]


@st.composite
def workloads(draw):
    n = draw(st.integers(2, 6))
    reqs = []
    for i in range(n):
        shared = SHARED[draw(st.integers(0, 1))]
        cut = draw(st.integers(1, shared[1]))  # a prefix of the shared prompt, or all of it
        own = draw(st.integers(0, 9))
        spans = [(shared[0], cut)] + ([(f"own-{i}", own)] if own else [])
        reqs.append((draw(st.integers(0, 4)), spans, draw(st.integers(1, 3))))
    kind = draw(st.sampled_from(["paged_hash", "radix"]))
    budget = draw(st.integers(8, 120))
    cap = draw(st.sampled_from([0, 4, 7, 16]))
    return kind, budget, cap, sorted(reqs, key=lambda r: r[0])


def common_tokens(a, b) -> int:
    """Tokens the two span lists have equal from token 0."""
    n = 0
    for (ca, na), (cb, nb) in zip(a, b, strict=False):
        if ca != cb:
            break
        n += min(na, nb)
        if na != nb:
            break
    return n


@settings(max_examples=120, deadline=None)
@given(workloads())
def test_no_hit_on_kv_not_yet_scheduled_or_computed(case):
    """Every admission's hit is exactly what the rule has published: for each earlier
    request, its prompt shared with the new one up to its frontier (radix: its computed
    tokens; paged_hash: its scheduled tokens, counting the requests scheduled before this
    one in the same pass), in whole blocks, the best of them, capped at ``n - 1``. The
    pool never evicts here, so nothing published is lost."""
    kind, budget, cap, arrivals = case
    ids = Ids()
    s = scheduler(
        pool_tokens=1 << 16, kind=kind, alloc_options={"block_size": B},
        max_num_batched_tokens=budget, long_prefill_token_threshold=cap,
    )
    frontier: dict[int, int] = {}  # request id -> tokens of its prompt published
    spans_of: dict[int, list] = {}
    pending = list(arrivals)
    reqs = []
    t = 0
    while pending or s.has_work:
        while pending and pending[0][0] <= t:
            _, spans, out = pending.pop(0)
            r = ids.req(sum(n for _, n in spans), out, content=segments(spans), last_turn=True)
            spans_of[r.req_id] = spans
            reqs.append(r)
            s.add(r)
        plan = s.schedule()
        seen = dict(frontier)
        for r, n in plan.scheduled:
            if r in plan.admitted:
                best = max(
                    (
                        min(common_tokens(spans_of[q], spans_of[r.req_id]), f) // B * B
                        for q, f in seen.items()
                        if q != r.req_id
                    ),
                    default=0,
                )
                assert r.hit_tokens == min(best, (r.prompt_tokens - 1) // B * B), (r, seen)
            if kind == "paged_hash":  # seen by the requests scheduled after it
                seen[r.req_id] = max(seen.get(r.req_id, 0), min(r.num_computed + n, r.prompt_tokens))
        res = s.commit(plan)
        for r, _ in plan.scheduled:
            frontier[r.req_id] = max(frontier.get(r.req_id, 0), min(r.num_computed, r.prompt_tokens))
        for r in res.finished:
            end_turn(s.kv, r)
        s.kv.check_invariants()
        t += 1
    assert all(r.num_output == r.output_limit for r in reqs)

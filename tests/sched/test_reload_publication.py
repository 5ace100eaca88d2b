"""A reloaded context becomes a prefix hit only once its copy-in ended (``KVManager.restore``
/ ``restored``), on hand-built requests and both prefix caches.

The rule, from the systems modelled: vLLM's KV connector (LMCache offload) loads a request's
KV asynchronously; the request waits (``WAITING_FOR_REMOTE_KVS``) and its blocks are cached
(``cache_blocks``) only once the scheduler sees the load finished. SGLang's HiCache
load-back makes the loaded nodes usable once the load is done. So while the bytes are on
the PCIe link another request's look-up must not hit them; a reload abandoned before its end
frees its blocks uncached, as a preempted prefill does.

Block size 4; agent ``a``'s offloaded context is a 40-token shared system prompt (10
blocks) plus 8 tokens of its own (48); another agent's prompt is the same system prompt
plus 8 tokens of its own, so it can hit at most the 40 shared tokens.
"""

from __future__ import annotations

import pytest
from sched_helpers import Ids, kv_manager

from sim.prefix.spans import segments

B = 4
SYS = ("sys", 40)
KINDS = ["paged_hash", "radix"]


def ctx(own: str, own_tokens: int = 8):
    return segments([SYS, (own, own_tokens)])


def fresh(ids: Ids, own: str):
    return ids.req(48, 2, content=ctx(own), last_turn=True)


def setup(kind: str):
    kv = kv_manager(4096, kind, block_size=B)
    kv.check_invariants()
    return kv, Ids()


@pytest.mark.parametrize("kind", KINDS)
def test_a_look_up_during_the_copy_in_misses_the_reloaded_blocks_after_it_hits(kind):
    kv, ids = setup(kind)
    assert kv.restore("a", 48, ctx("a"))  # the copy-in starts: blocks taken, bytes in flight
    kv.check_invariants()
    b = fresh(ids, "b")
    assert kv.admit(b) and b.hit_tokens == 0  # before the copy ends: nothing to hit
    kv.restored("a")  # the copy-in ended
    kv.check_invariants()
    c = fresh(ids, "c")
    assert kv.admit(c) and c.hit_tokens == 40  # the 10 shared blocks, reloaded
    assert c.num_computed == 40
    kv.check_invariants()


@pytest.mark.parametrize("kind", KINDS)
def test_an_abandoned_reload_frees_its_blocks_uncached(kind):
    kv, ids = setup(kind)
    assert kv.restore("a", 48, ctx("a"))
    kv.release("a")  # the trajectory ended (or the prefetch was dropped) mid-copy
    kv.check_invariants()
    kv.restored("a")  # the copy's end, seen after: nothing to publish (no-op)
    c = fresh(ids, "c")
    assert kv.admit(c) and c.hit_tokens == 0
    whole = ids.req(49, 2, content=segments([SYS, ("a", 8), ("x", 1)]), last_turn=True)
    assert kv.admit(whole) and whole.hit_tokens == 0  # nothing of a's context was cached
    kv.check_invariants()


@pytest.mark.parametrize("kind", KINDS)
def test_a_turn_submitted_while_its_context_streams_publishes_nothing_before_the_copy_ends(kind):
    """Pipelined resume: the turn (48 + 8 new tokens) is admitted and scheduled while the
    copy-in still runs; what its scheduling or commit would publish waits for the copy's
    end, then all of it is shown at once."""
    kv, ids = setup(kind)
    assert kv.restore("a", 48, ctx("a"))
    turn = ids.req(56, 2, seq_id="a", content=segments([SYS, ("a", 8), ("obs", 8)]))
    assert kv.admit(turn) and turn.num_computed == 48
    kv.scheduled(turn, 56)  # paged_hash would cache its 14 full blocks here
    turn.num_computed = 56
    kv.computed()  # radix would insert its computed tokens here
    kv.check_invariants()
    b = fresh(ids, "b")
    assert kv.admit(b) and b.hit_tokens == 0
    kv.restored("a")
    kv.check_invariants()
    assert not kv.is_behind(turn)  # everything it had published is shown now
    d = ids.req(60, 2, content=segments([SYS, ("a", 8), ("obs", 8), ("d", 4)]), last_turn=True)
    assert kv.admit(d) and d.hit_tokens == 56  # the reloaded context and the new turn


@pytest.mark.parametrize("kind", ["paged"])
def test_without_a_prefix_cache_nothing_is_held_back(kind):
    kv, ids = setup(kind)
    assert kv.restore("a", 48, ctx("a"))
    assert not kv._reloading
    kv.restored("a")  # no-op
    kv.check_invariants()

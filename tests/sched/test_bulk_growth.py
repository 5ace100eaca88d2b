"""The hot path's bulk forms equal their one-at-a-time originals.

``KVManager.grow_each`` (a step's decodes grown in one call) must leave the allocator and
the deferred ledger exactly as ``grow`` request by request would, and stop at the first
miss without changing anything for it; ``Request.content_slice``'s shortcut for generated
tokens must return what the general path returns.
"""

from __future__ import annotations

import pytest
from sched_helpers import Ids, kv_manager

from sim.prefix.spans import segments


def _state(kv):
    led = kv.ledger
    return (
        dict(led.total),
        dict(led.room),
        dict(led.pending),
        led.pending_tokens,
        {s: kv.alloc.seq_tokens(s) for s in led.total},
        kv.alloc.metrics().allocated_bytes,
    )


def _admitted(kind: str, pool_tokens: int, prompts: list[int]):
    kv, ids = kv_manager(pool_tokens, kind, block_size=16), Ids()
    reqs = []
    for p in prompts:
        req = ids.req(p, 100)
        assert kv.admit(req)
        req.num_computed = p  # its prompt is computed: the next token is a decode
        reqs.append(req)
    return kv, reqs


@pytest.mark.parametrize("kind", ["paged", "radix"])
def test_grow_each_equals_grow_one_by_one(kind):
    prompts = [15, 16, 17, 31, 32, 5]  # rooms 1, 0, 15, 1, 0, 11 (block 16)
    bulk_kv, bulk = _admitted(kind, 4096, prompts)
    one_kv, one = _admitted(kind, 4096, prompts)
    for _ in range(40):  # crosses block boundaries several times
        assert bulk_kv.grow_each(bulk) == len(bulk)
        for req in one:
            assert one_kv.grow(req, 1)
        for a, b in zip(bulk, one, strict=True):
            a.num_computed += 1
            b.num_computed += 1
        assert _state(bulk_kv) == _state(one_kv)
    bulk_kv.check_invariants()


def test_grow_each_stops_at_the_first_miss_and_changes_nothing_for_it():
    # 5 blocks of 16: two sequences of 32 tokens (4 blocks) fill their blocks; one more
    # block is free, so the first grows and the second misses
    kv, reqs = _admitted("paged", 5 * 16, [32, 32])
    before = _state(kv)
    assert kv.grow_each(reqs) == 1
    after = _state(kv)
    assert after[0][reqs[0].seq_id] == 33 and after[0][reqs[1].seq_id] == 32
    assert after[4][reqs[1].seq_id] == before[4][reqs[1].seq_id] == 32
    assert after[5] == before[5] + 16  # one block taken, by the first
    kv.check_invariants()


@pytest.mark.parametrize(
    ("start", "stop"), [(10, 12), (12, 30), (0, 12), (3, 9), (11, 13), (10, 11)]
)
def test_content_slice_of_generated_tokens_is_the_general_form(start, stop):
    req = Ids().req(10, 50, content=segments([("sys", 6), ("task", 4)]))
    got = req.content_slice(start, stop)
    p = req.prompt_tokens
    if start >= p:
        assert got == segments([(req.output_id, start - p, stop - start)])
    assert sum(n for _, _, n in got) == stop - start

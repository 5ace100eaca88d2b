"""The deferred ledger's clock (``DeferredAppends.clock`` / ``advance``): clocked
sequences grow by one token a tick without a pass over them, and every book and every
block id is what growing each of them one by one makes.

Two twin ledgers over twin paged pools take the same random history: single steps
(``advance(1)`` on one, ``grow_each`` on the other), runs (``plan_run`` / ``apply_run``
with ``apart``, against the same calls without a clock), sequences leaving the clock
(``settle``) and joining it, a sequence that does not grow in a step (it is settled first,
as the scheduler's cohort does), and frees. After each operation: the same block tables,
tokens, pending tokens and plans, and both ledgers' invariants (``check``).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.memory.deferred import DeferredAppends
from sim.memory.paged import PagedAllocator


class Req:
    def __init__(self, seq_id: str, order: int) -> None:
        self.seq_id = seq_id
        self.order = order

    def content_slice(self, start: int, stop: int) -> None:
        return None


def _twin(bs: int, pool_blocks: int, prompts: list[int]):
    pair = []
    for _ in range(2):
        alloc = PagedAllocator(pool_bytes=pool_blocks * bs * 8, kv_bytes_per_token=8, block_size=bs)
        ledger = DeferredAppends(alloc, uses_content=False)
        reqs = []
        for i, prompt in enumerate(prompts):
            req = Req(f"s{i}", i)
            if alloc.allocate(req.seq_id, prompt):
                ledger.track(req.seq_id)
                reqs.append(req)
        pair.append((alloc, ledger, reqs))
    return pair


def _same(a, b, ids: bool = True) -> None:
    """The twins' books agree; ``ids`` False: no block table is read, so both pools stay
    in count mode (``block_table`` gives them ids) and the clock's appends go unordered."""
    (alloc_a, led_a, reqs_a), (alloc_b, led_b, _) = a, b
    if not ids:
        assert alloc_a.appends_unordered() and alloc_b.appends_unordered()
        assert alloc_a.kv_slots() == alloc_b.kv_slots()
    led_a.check()
    led_b.check()
    assert led_a.pending_tokens == led_b.pending_tokens
    assert set(led_a.total) == set(led_b.total)
    for req in reqs_a:
        seq = req.seq_id
        if seq not in led_a.total:
            continue
        assert led_a.tokens(seq) == led_b.total[seq]
        if ids:
            assert alloc_a.block_table(seq) == alloc_b.block_table(seq)
        assert alloc_a.seq_tokens(seq) + led_a.pending.get(seq, 0) + led_a.clk - led_a._since.get(seq, led_a.clk) == (
            alloc_b.seq_tokens(seq) + led_b.pending.get(seq, 0)
        )
    assert alloc_a.free_blocks == alloc_b.free_blocks


OPS = st.lists(
    st.one_of(
        st.just(("step",)),
        st.tuples(st.just("run"), st.integers(1, 40)),
        st.tuples(st.just("leave"), st.integers(0, 7)),
        st.tuples(st.just("join"), st.integers(0, 7)),
        st.tuples(st.just("free"), st.integers(0, 7)),
    ),
    max_size=25,
)


@pytest.mark.parametrize("ids", [True, False], ids=["ids", "count_mode"])
@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([1, 4, 16]),
    st.integers(4, 120),
    st.lists(st.integers(1, 60), min_size=1, max_size=8),
    OPS,
)
def test_a_clocked_ledger_is_the_ledger_grown_one_by_one(ids, bs, pool_blocks, prompts, ops):
    """With block ids, and with both pools kept in count mode (no ids: the clock's appends
    go in the order they come, ``appends_unordered``): every book the same."""
    _history(bs, pool_blocks, prompts, ops, ids=ids)


def _history(bs, pool_blocks, prompts, ops, ids: bool) -> None:
    a, b = _twin(bs, pool_blocks, prompts)
    alloc_a, led_a, reqs_a = a
    alloc_b, led_b, reqs_b = b
    for ra in reqs_a:
        led_a.clock(ra, ra.order)
    _same(a, b, ids)
    for op in ops:
        live = [i for i, r in enumerate(reqs_a) if r.seq_id in led_a.total]
        if op[0] == "step":
            apart = [(r.order, r, led_a.total[r.seq_id] + 1) for i, r in enumerate(reqs_a)
                     if i in live and r.seq_id not in led_a._since]  # fmt: skip
            batch_b = [reqs_b[i] for i in live]
            need_b = [led_b.total[r.seq_id] + 1 for r in batch_b]
            if not led_a.advance(1, apart, len(live)):
                led_a.settle_all()  # then one by one, as the scheduler's fallback
                for i in live:
                    if not led_a.grow(reqs_a[i], led_a.total[reqs_a[i].seq_id] + 1):
                        break
            for r, target in zip(batch_b, need_b, strict=True):
                if not led_b.grow(r, target):
                    break
        elif op[0] == "run":
            batch_a = [reqs_a[i] for i in live]
            batch_b = [reqs_b[i] for i in live]
            apart = [(r.order, r) for r in batch_a if r.seq_id not in led_a._since]
            base = alloc_a.metrics().allocated_bytes
            run_a = led_a.plan_run(batch_a, op[1], base, apart=apart)
            run_b = led_b.plan_run(batch_b, op[1], base)
            assert (run_a.steps, run_a.allocated_bytes) == (run_b.steps, run_b.allocated_bytes)
            if run_a.steps:
                starts = [0.0] * (run_a.steps + 1)
                led_a.apply_run(batch_a, run_a.steps, starts, lambda t: None, apart=apart)
                led_b.apply_run(batch_b, run_b.steps, starts, lambda t: None)
        elif op[0] in ("leave", "join", "free") and live:
            i = live[op[1] % len(live)]
            ra, rb = reqs_a[i], reqs_b[i]
            if op[0] == "leave":
                led_a.settle(ra.seq_id)
            elif op[0] == "join":
                led_a.clock(ra, ra.order)
            else:
                for led, alloc, r in ((led_a, alloc_a, ra), (led_b, alloc_b, rb)):
                    led.untrack(r.seq_id)
                    alloc.free(r.seq_id)
        _same(a, b, ids)


def test_a_clocked_sequence_reads_its_ticks_and_settles_to_them():
    """B = 4, a sequence of 6 tokens (room 2): two ticks are pending only, the third
    takes a block (one append of all three), and settling leaves the books as grown."""
    (alloc, led, (req,)), _ = _twin(4, 10, [6])
    assert led.clock(req, 0)
    assert led.advance(1, [], 1) and led.advance(1, [], 1)
    assert alloc.seq_tokens("s0") == 6 and led.tokens("s0") == 8 and led.pending_tokens == 2
    assert led.advance(1, [], 1)  # room 0 before this tick: a new block, 3 tokens appended
    assert alloc.seq_tokens("s0") == 9 and len(alloc.block_table("s0")) == 3
    assert led.pending_tokens == 0 and led.tokens("s0") == 9
    assert led.advance(1, [], 1)
    led.settle("s0")
    assert (led.total["s0"], led.room["s0"], led.pending["s0"]) == (10, 2, 1)
    assert led.clocked == 0
    led.check()

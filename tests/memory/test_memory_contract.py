"""The allocator contract: the same behaviours, checked the same way, for every kind.

Each test runs over ``alloc_cases.KIND_CASES`` and calls ``check_invariants()`` after every
operation (through ``ok``), so a kind that breaks its books fails here with the precise
message.
"""

from __future__ import annotations

import pytest
from alloc_cases import CASE_IDS, KIND_CASES, KV, REMAINDER, snapshot

from sim.memory import (
    AllocatorError,
    AllocResult,
    LiveSequenceError,
    MemoryMetrics,
    UnknownSequenceError,
)

cases = pytest.mark.parametrize("case", KIND_CASES, ids=CASE_IDS)


def ok(a, result=True):
    a.check_invariants()
    m = a.metrics()
    assert m.free_bytes + m.allocated_bytes + m.cached_bytes + m.remainder_bytes == m.pool_bytes
    assert m.useful_bytes <= m.allocated_bytes <= m.peak_allocated_bytes
    return result


@cases
def test_allocate_reports_exact_tokens_and_books(case):
    a = case.make(1024)
    r = a.allocate("a", 100)
    assert isinstance(r, AllocResult) and r and r.ok and r.matched_tokens == 0
    ok(a)
    m = a.metrics()
    assert isinstance(m, MemoryMetrics)
    assert a.seq_tokens("a") == 100 and a.num_sequences == m.num_sequences == 1
    assert m.useful_bytes == m.logical_bytes == 100 * KV
    assert m.allocated_bytes == a.seq_capacity_tokens("a") * KV >= 100 * KV
    assert m.pool_bytes == 1024 * KV + REMAINDER
    assert m.remainder_bytes >= REMAINDER
    assert m.eta_alloc == pytest.approx(100 / a.seq_capacity_tokens("a"))
    assert m.eta_effective == pytest.approx(100 * KV / m.pool_bytes)
    assert m.phi_ext is None  # no request size given
    assert m.bytes_copied == 0 and m.cow_copies == 0


@cases
def test_append_grows_and_keeps_tokens(case):
    a = case.make(1024)
    a.allocate(1, 10)
    for _ in range(20):
        assert a.append(1) is True
        ok(a)
    assert a.append(1, 0) is True  # writing nothing is a no-op
    assert a.seq_tokens(1) == 30
    assert a.metrics().useful_bytes == 30 * KV
    assert a.seq_capacity_tokens(1) >= 30


@cases
def test_misuse_raises_clear_errors_and_changes_nothing(case):
    a = case.make(1024)
    a.allocate(1, 10)
    a.allocate(2, 3)
    before = snapshot(a)
    with pytest.raises(LiveSequenceError, match="already live"):
        a.allocate(1, 5)
    for call in (lambda: a.append(9), lambda: a.free(9), lambda: a.fork(9, 10),
                 lambda: a.seq_tokens(9), lambda: a.can_append(9), lambda: a.blocks_needed(9)):  # fmt: skip
        with pytest.raises(UnknownSequenceError, match="9 is not live"):
            call()
    with pytest.raises(LiveSequenceError):
        a.fork(1, 1)
    with pytest.raises(LiveSequenceError, match="child 2 is already live"):
        a.fork(1, 2)
    for bad in (0, -1, 1.5, True, "3", None):
        with pytest.raises(AllocatorError, match="token count"):
            a.allocate(3, bad)
    for bad in (-1, 2.0, False):
        with pytest.raises(AllocatorError, match="token count"):
            a.append(1, bad)
    assert snapshot(a) == before
    ok(a)


@cases
def test_double_free_raises_and_freed_id_is_reusable(case):
    a = case.make(1024)
    a.allocate("r", 40)
    a.free("r")
    ok(a)
    with pytest.raises(UnknownSequenceError, match="already freed"):
        a.free("r")
    assert a.allocate("r", 20)  # a preempted request comes back with its id
    assert a.seq_tokens("r") == 20
    ok(a)


@cases
def test_fork_shares_the_parent_state(case):
    a = case.make(2048)
    a.allocate("p", 50)
    useful = a.metrics().useful_bytes
    assert a.fork("p", "c") is True
    ok(a)
    m = a.metrics()
    assert a.seq_tokens("c") == 50
    assert m.useful_bytes == useful  # the shared prefix counts once, copy or not
    assert m.logical_bytes == 100 * KV
    a.append("c", 7)
    a.append("p", 3)
    ok(a)
    assert (a.seq_tokens("p"), a.seq_tokens("c")) == (53, 57)
    assert a.metrics().useful_bytes == (50 + 3 + 7) * KV
    a.free("p")
    ok(a)
    assert a.metrics().useful_bytes == 57 * KV  # the child's copy of the prefix is now useful


@cases
def test_free_everything_returns_one_hole(case):
    a = case.make(1024)
    for i, n in enumerate((30, 100, 7, 64, 1)):
        assert a.allocate(i, n)
    a.fork(1, 10)
    a.append(3, 40)
    for i in (3, 0, 10, 4, 1, 2):
        a.free(i)
        ok(a)
    m = a.metrics(request_bytes=KV)
    assert m.allocated_bytes == m.useful_bytes == m.logical_bytes == 0
    assert m.eta_alloc is None  # 0/0
    assert m.free_bytes + m.remainder_bytes == m.pool_bytes
    assert m.free_extents == (m.free_bytes,)  # neighbours merged back into one hole
    assert m.largest_free_bytes == m.free_bytes
    assert m.phi_ext == 0.0


@cases
def test_a_miss_changes_nothing(case):
    a = case.make(512)
    i = 0
    while a.allocate(i, 60):  # fill the pool until an admission misses
        ok(a)
        i += 1
    assert i >= 1
    before = snapshot(a)
    assert not a.allocate("x", 60)
    assert not a.allocate("x", 60).ok
    assert snapshot(a) == before
    # grow sequences until an append misses, then check that miss too
    for seq in range(i):
        while a.append(seq, 37):
            ok(a)
        before = snapshot(a)
        assert a.append(seq, 37) is False
        assert snapshot(a) == before
    ok(a)
    assert not a.is_live("x")


@cases
def test_fork_miss_changes_nothing_or_fork_succeeds(case):
    a = case.make(512)
    a.allocate(0, 200)
    while a.allocate(len(list(a.sequences())), 16):
        pass
    before = snapshot(a)
    if a.fork(0, "child"):
        ok(a)
        assert a.seq_tokens("child") == 200
    else:
        assert snapshot(a) == before
        assert not a.is_live("child")


@cases
def test_queries_predict_the_outcome(case):
    a = case.make(600)
    seq = 0
    for n in (100, 200, 150, 300, 120, 64):
        predicted = a.can_allocate(n)
        assert bool(a.allocate(seq, n)) == predicted
        seq += 1
        ok(a)
    for s in list(a.sequences()):
        for n in (1, 16, 100, 400):
            predicted = a.can_append(s, n)
            assert a.append(s, n) == predicted
            ok(a)
        predicted = a.can_fork(s)
        assert a.fork(s, ("f", s)) == predicted
        ok(a)


@cases
def test_blocks_needed_is_zero_when_the_append_fits(case):
    a = case.make(1024)
    a.allocate(1, 64)
    cap = a.seq_capacity_tokens(1)
    spare = cap - a.seq_tokens(1)
    if spare:
        assert a.blocks_needed(1, spare) == 0
    assert a.blocks_needed(1, spare + 1) >= 1


@cases
def test_max_sequence_tokens_fits_an_empty_pool(case):
    a = case.make(1000)
    n = a.max_sequence_tokens
    assert n >= 1
    assert a.can_allocate(n) and not a.can_allocate(n + 1)
    assert not a.allocate("too-big", n + 1)
    assert a.allocate("big", n)
    ok(a)


@cases
def test_take_copied_bytes_reports_each_copy_once(case):
    a = case.make(2048)
    a.allocate(1, 100)
    a.take_activity()
    assert a.take_copied_bytes() == 0
    a.fork(1, 2)
    a.append(2, 1)
    a.append(1, 200)  # may grow (contiguous kinds copy)
    first = a.take_copied_bytes()
    assert a.take_copied_bytes() == 0
    assert first == a.metrics().bytes_copied
    act = a.take_activity()
    assert act.bytes_copied == first
    assert a.take_activity().bytes_copied == 0


@cases
def test_phi_ext_uses_f9_on_the_reported_holes(case):
    a = case.make(1024)
    for i in range(6):
        a.allocate(i, 100)
    a.free(1)
    a.free(4)
    for req in (KV, 50 * KV, 150 * KV, 10_000 * KV):
        m = a.metrics(request_bytes=req)
        free = sum(m.free_extents)
        expected = 1 - sum(h for h in m.free_extents if h >= req) / free
        if a.block_size is not None:  # SPEC F9: any free block serves, 0 by construction
            expected = 0.0  # (a request beyond the free blocks does not fit: request_fits)
        assert m.phi_ext == pytest.approx(expected)
        assert m.largest_free_bytes == max(m.free_extents)


@cases
def test_content_keyword_is_accepted_and_ignored(case):
    a = case.make(1024)
    assert a.allocate(1, 10, content=[("sys", 10)])
    assert a.append(1, 2, content=[("out", 2)])
    assert a.can_allocate(10, content=None)
    ok(a)


@cases
def test_peak_is_monotone_and_at_least_allocated(case):
    a = case.make(1024)
    peaks = []
    a.allocate(1, 10)
    for n in (5, 20, 40, 80, 160):
        a.append(1, n)
        peaks.append(a.metrics().peak_allocated_bytes)
    a.free(1)
    assert a.metrics().peak_allocated_bytes == peaks[-1]
    assert peaks == sorted(peaks)


@cases
def test_metrics_snapshot_holds_every_field_by_its_formula(case):
    """``metrics()`` is made positionally (one C call): every field is where its name says,
    F8 = useful / allocated (None on an empty pool), F10 = useful / pool, F9 only for a
    request, the largest hole the largest of the free extents."""
    a = case.make(1024)
    empty = a.metrics()
    assert len(empty) == len(MemoryMetrics._fields)
    assert empty.allocated_bytes == 0 and empty.eta_alloc is None
    assert empty.useful_bytes == empty.logical_bytes == 0 and empty.num_sequences == 0
    a.allocate("a", 100)
    a.allocate("b", 40)
    m = a.metrics(request_bytes=64 * KV)
    assert len(m) == len(MemoryMetrics._fields)
    assert m.pool_bytes == 1024 * KV + REMAINDER
    assert m.useful_bytes == m.logical_bytes == 140 * KV and m.num_sequences == 2
    assert m.eta_alloc == m.useful_bytes / m.allocated_bytes
    assert m.eta_effective == m.useful_bytes / m.pool_bytes
    assert m.largest_free_bytes == max(m.free_extents, default=0)
    usable = sum(h for h in m.free_extents if h >= 64 * KV)
    assert m.phi_ext == 1.0 - usable / sum(m.free_extents)
    assert a.metrics().phi_ext is None  # no request: F9 not asked
    assert m.peak_allocated_bytes >= m.allocated_bytes and m.side_allocated_bytes == 0

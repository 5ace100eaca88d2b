"""``DeferredAppends.plan_run`` finds a decode run's block boundaries by arithmetic.

Two checks over random batches, pools and late joiners: the plan equals the one the numpy
implementation it replaced made (kept here as the reference: ``bincount`` of the rooms,
``cumsum``, ``searchsorted``), step count and every allocated figure, type included; and
the plan is true: growing the batch one token per step (the late request from its first
step) for the planned steps never misses and leaves, after each step, the allocated bytes
the plan gave for it, while one step more would take more blocks than are available.
A huge block size costs no memory of its size; a negative room raises ``InvariantError``.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import InvariantError
from sim.memory.contiguous import ContiguousAllocator
from sim.memory.deferred import DeferredAppends
from sim.memory.paged import PagedAllocator


class Req:
    """What the ledger reads of a request without content: its sequence."""

    def __init__(self, seq_id: str) -> None:
        self.seq_id = seq_id

    def content_slice(self, start: int, stop: int) -> None:
        return None


def _reference(ledger, requests, max_steps, base_allocated, late=None):
    """The numpy ``plan_run`` this replaced, verbatim but for its result's form."""
    if max_steps <= 0 or not (requests or late):
        return 0, []
    room = ledger.room
    slack = np.array([room[r.seq_id] for r in requests], dtype=np.int64)
    bs = ledger.alloc.block_size
    if bs is None:
        steps = max_steps
        if len(slack):
            steps = min(steps, int(slack.min()))
        if late is not None:
            steps = min(steps, late[1] - 1 + room[late[0].seq_id])
        steps = max(0, steps)
        return steps, np.full(steps, float(base_allocated)).tolist()
    if (len(slack) and slack.max() >= bs) or (late and room[late[0].seq_id] >= bs):
        return 0, []
    if ledger.alloc.kv_groups is not None:
        return 0, []
    r = np.arange(max_steps)
    per_step = np.bincount(slack, minlength=bs)[r % bs]
    if late is not None:
        req, first = late
        per_step[first - 1 + room[req.seq_id] :: bs] += 1
    taken = np.cumsum(per_step)
    steps = int(np.searchsorted(taken, ledger.alloc.available_blocks(), side="right"))
    block_bytes = bs * ledger.alloc.kv_bytes_per_token
    return steps, (base_allocated + taken[:steps] * block_bytes).tolist()


def _build(kind: str, block_size: int, pool_blocks: int, seqs, late_spec):
    """A ledger whose sequences hold ``prompt + grown`` tokens (grown ones pending)."""
    if kind == "paged":
        alloc = PagedAllocator(pool_bytes=pool_blocks * block_size * 8, kv_bytes_per_token=8,
                               block_size=block_size)  # fmt: skip
    else:
        alloc = ContiguousAllocator(pool_bytes=pool_blocks * block_size * 8, kv_bytes_per_token=8)
    ledger = DeferredAppends(alloc, uses_content=False)
    reqs = []
    for i, (prompt, grown) in enumerate([*seqs, *([late_spec[:2]] if late_spec else [])]):
        req = Req(f"s{i}")
        if not alloc.allocate(req.seq_id, prompt):
            continue
        ledger.track(req.seq_id)
        if ledger.grow(req, prompt + grown):
            reqs.append(req)
        else:
            ledger.untrack(req.seq_id)
            alloc.free(req.seq_id)
    late = None
    if late_spec and reqs and reqs[-1].seq_id == f"s{len(seqs)}":
        late = (reqs.pop(), late_spec[2])
    return alloc, ledger, reqs, late


_seq = st.tuples(st.integers(1, 70), st.integers(0, 20))  # prompt, tokens grown since
SPECS = st.tuples(
    st.sampled_from(["paged", "contiguous"]),
    st.sampled_from([1, 4, 16, 262144]),  # block size (the last: rooms past any run)
    st.integers(2, 80),  # pool blocks
    st.lists(_seq, max_size=8),  # the batch
    st.none() | st.tuples(st.integers(1, 70), st.integers(0, 20), st.integers(1, 12)),
    st.integers(0, 60),  # steps asked for
)


@settings(max_examples=300, deadline=None)
@given(SPECS)
def test_plan_run_equals_the_numpy_plan_and_holds_step_by_step(spec):
    kind, bs, pool_blocks, seqs, late_spec, max_steps = spec
    alloc, ledger, reqs, late = _build(kind, bs, pool_blocks, seqs, late_spec)
    base = alloc.metrics().allocated_bytes
    run = ledger.plan_run(reqs, max_steps, base, late)
    steps, allocated = _reference(ledger, reqs, max_steps, base, late)
    assert run.steps == steps
    assert run.allocated_bytes == allocated
    assert [type(x) for x in run.allocated_bytes] == [type(x) for x in allocated]
    taken_before = alloc.metrics().allocated_bytes
    for step in range(1, run.steps + 1):  # the plan holds when stepped
        growing = [*reqs, *([late[0]] if late and step >= late[1] else [])]
        for req in growing:
            assert ledger.grow(req, ledger.total[req.seq_id] + 1)
        if alloc.block_size is not None:
            assert alloc.metrics().allocated_bytes == run.allocated_bytes[step - 1]
        else:  # buffers: the run stays within the current capacity
            assert alloc.metrics().allocated_bytes == taken_before
        ledger.check()
    if kind == "paged" and run.steps < max_steps and (reqs or late):
        # the next step needs more blocks than there are (a run stops only for memory)
        step = run.steps + 1
        growing = [*reqs, *([late[0]] if late and step >= late[1] else [])]
        need = sum(1 for req in growing if ledger.room[req.seq_id] == 0)
        assert need > alloc.available_blocks()


def test_a_room_of_a_block_or_more_is_stepped_exactly():
    """A room no block table leaves (``B`` or more: a buffer-like sequence behind a block
    kind) gives no run, for a batch member or for the late request, as numpy's plan did."""
    for late_room in (False, True):
        alloc, ledger, reqs, late = _build("paged", 4, 40, [(5, 0), (9, 1)], (6, 0, 2))
        assert len(reqs) == 2 and late is not None
        big = late[0] if late_room else reqs[1]
        ledger.room[big.seq_id] = 4
        base = alloc.metrics().allocated_bytes
        run = ledger.plan_run(reqs, 10, base, late)
        assert (run.steps, run.allocated_bytes) == (0, []) == _reference(ledger, reqs, 10, base, late)
        ledger.room[big.seq_id] = 3  # within a block: a run again
        assert ledger.plan_run(reqs, 10, base, late).steps == 10


def test_a_large_block_size_costs_the_batch_and_the_steps_not_the_block():
    """At ``B = 2**20`` a short run's plan holds no list of ``B`` counts (8 MiB): its
    memory is that of the batch and the steps (tracemalloc's peak, not a time)."""
    alloc, ledger, reqs, late = _build("paged", 2**20, 40, [(5, 0), (9, 1)] * 4, (7, 1, 3))
    base = alloc.metrics().allocated_bytes
    ledger.plan_run(reqs, 8, base, late)  # once untraced: first-call costs are not the plan's
    tracemalloc.start()
    try:
        run = ledger.plan_run(reqs, 8, base, late)
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak_bytes < 64 * 1024
    assert (run.steps, run.allocated_bytes) == _reference(ledger, reqs, 8, base, late)
    assert run.steps == 8


@pytest.mark.parametrize("who", ["batch", "late"])
def test_a_negative_room_is_a_broken_book(who):
    """A room below zero (the books corrupted) is an ``InvariantError``, never a plan."""
    alloc, ledger, reqs, late = _build("paged", 16, 40, [(5, 0), (9, 1)], (6, 0, 2))
    assert len(reqs) == 2 and late is not None
    ledger.room[(late[0] if who == "late" else reqs[1]).seq_id] = -1
    base = alloc.metrics().allocated_bytes
    with pytest.raises(InvariantError, match=r"plan_run: a negative room \(-1\)"):
        ledger.plan_run(reqs, 10, base, late)

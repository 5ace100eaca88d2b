"""Hypothesis property tests over random allocate/append/fork/free sequences, every kind.

After every operation: the books balance (free + allocated + cached + remainder = pool),
``check_invariants`` passes, the query methods predicted the outcome, a miss changed
nothing, and useful/logical bytes equal a brute-force model that gives every written token
state a unique id and copies the id lists on fork. For block kinds, the refcount of every
block equals the number of block tables that map it (read through the public API).
"""

from __future__ import annotations

from collections import Counter

import pytest
from alloc_cases import CASE_IDS, KIND_CASES, KV, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

OPS = st.lists(
    st.tuples(
        st.sampled_from(["allocate", "append", "append", "append", "fork", "free"]),
        st.integers(0, 10_000),
        st.integers(1, 200),
    ),
    max_size=50,
)


class Model:
    """Reference: each sequence is the list of ids of the token states it holds."""

    def __init__(self) -> None:
        self.seqs: dict = {}
        self.next_state = 0

    def _new_states(self, n: int) -> list[int]:
        states = list(range(self.next_state, self.next_state + n))
        self.next_state += n
        return states

    def allocate(self, seq, n):
        self.seqs[seq] = self._new_states(n)

    def append(self, seq, n):
        self.seqs[seq] = self.seqs[seq] + self._new_states(n)

    def fork(self, parent, child):
        self.seqs[child] = list(self.seqs[parent])

    def free(self, seq):
        del self.seqs[seq]

    def useful(self) -> int:
        return len(set().union(*self.seqs.values())) if self.seqs else 0

    def logical(self) -> int:
        return sum(len(s) for s in self.seqs.values())


def check_state(a, model: Model) -> None:
    a.check_invariants()
    m = a.metrics(request_bytes=32 * KV)
    assert m.free_bytes + m.allocated_bytes + m.cached_bytes + m.remainder_bytes == m.pool_bytes
    if a.kind in ("static", "contiguous", "buddy", "paged"):
        assert m.cached_bytes == 0  # no prefix cache: nothing dormant
    assert m.useful_bytes == model.useful() * KV
    assert m.logical_bytes == model.logical() * KV
    assert m.num_sequences == len(model.seqs)
    assert m.allocated_bytes <= m.peak_allocated_bytes
    assert sum(m.free_extents) == m.free_bytes
    for seq, states in model.seqs.items():
        assert a.seq_tokens(seq) == len(states) <= a.seq_capacity_tokens(seq)
    if a.block_size is not None and not a.tracks_block_ids:  # count mode: own blocks only
        bs = a.block_size
        assert a.pool.num_allocated == sum(-(-a.seq_tokens(s) // bs) for s in a.sequences())
    elif a.block_size is not None:
        mapped = Counter(b for s in a.sequences() for b in a.block_table(s))
        for b in range(a.num_blocks):
            assert a.pool.refcount[b] == mapped.get(b, 0)
        assert a.pool.num_allocated == len(mapped)


def append_copy_bytes(a, seq) -> int:
    """Bytes an append that succeeds must copy: a shared partial last block (paged CoW),
    or the written tokens when a contiguous buffer moves (decided after the append)."""
    if a.block_size is None:
        return a.seq_tokens(seq) * KV
    if not a.tracks_block_ids:  # count mode: no fork yet, so nothing is shared
        return 0
    table = a.block_table(seq)
    shared_tail = a.seq_tokens(seq) % a.block_size and a.pool.refcount[table[-1]] > 1
    return a.block_bytes if shared_tail else 0


def before_start(snap: tuple, seq) -> int:
    """The buffer start of ``seq`` in a ``snapshot``."""
    return next(where[0] for s, _, _, where in snap[1] if s == seq)


def run_ops(a, ops) -> None:
    model = Model()
    freed: list = []
    next_id = 0
    for name, pick, n in ops:
        live = list(model.seqs)
        before = snapshot(a)
        if name == "allocate" or not live:
            if freed and pick % 2:
                seq = freed.pop(pick % len(freed))  # reuse a freed id
            else:
                seq, next_id = next_id, next_id + 1
            predicted = a.can_allocate(n)
            done = bool(a.allocate(seq, n))
            if done:
                model.allocate(seq, n)
            expected_copy = 0
        elif name == "append":
            seq = live[pick % len(live)]
            expected_copy = append_copy_bytes(a, seq)
            predicted = a.can_append(seq, n)
            done = a.append(seq, n)
            if done:
                model.append(seq, n)
                if a.block_size is None and a.seq_buffer(seq)[0] == before_start(before, seq):
                    expected_copy = 0  # fitted, or grew in place
        elif name == "fork":
            parent, child = live[pick % len(live)], next_id
            next_id += 1
            predicted = a.can_fork(parent)
            done = a.fork(parent, child)
            expected_copy = 0 if a.block_size else len(model.seqs[parent]) * KV
            if done:
                model.fork(parent, child)
        else:
            expected_copy = 0
            seq = live[pick % len(live)]
            predicted = done = True
            a.free(seq)
            model.free(seq)
            freed.append(seq)
        assert done == predicted
        assert a.take_copied_bytes() == (expected_copy if done else 0)
        if not done:
            assert snapshot(a) == before
        check_state(a, model)


@pytest.mark.parametrize("case", KIND_CASES, ids=CASE_IDS)
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_random_operation_sequences_keep_every_invariant(case, ops):
    run_ops(case.make(700), ops)


@pytest.mark.parametrize("case", KIND_CASES, ids=CASE_IDS)
@settings(max_examples=40, deadline=None)
@given(ops=OPS)
def test_tight_pools_miss_often_and_stay_consistent(case, ops):
    run_ops(case.make(160), ops)

"""A radix decode run's appends one per sequence (``Allocator.appends_in_bulk``) leave the
state that step-order appends (a new block, then its fill, sequence by sequence, each at its
step's time) leave: the same tree (labels, stamps, serials, locks, hit counts), books, prefix
statistics and ledger, and the same evictions after it. Only which free block ids each
sequence got may differ, so block ids are compared through the tree's shape, never as values.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.memory.deferred import DeferredAppends
from sim.prefix.kinds import RadixAllocator
from sim.prefix.spans import concat, slice_tokens

B = 4  # tokens per block


class Req:
    """What the ledger reads of a request: its sequence and its content."""

    def __init__(self, seq_id: str, content: tuple) -> None:
        self.seq_id = seq_id
        self.content = content
        self.prompt_tokens = sum(n for _, _, n in content)

    def content_slice(self, start: int, stop: int):
        p, oid = self.prompt_tokens, f"out-{self.seq_id}"
        gen = ((oid, max(0, start - p), stop - max(start, p)),) if stop > p else ()
        return concat(slice_tokens(self.content, start, min(stop, p)), gen)


def _prompt(i: int, shared: int, own: int) -> tuple:
    return concat((("sys", 0, shared),), ((f"user-{i}", 0, own),))


def _build(spec, bulk: bool):
    num_blocks, old, live, extra_s, _ = spec
    alloc = RadixAllocator(pool_bytes=num_blocks * B, kv_bytes_per_token=1, block_size=B)
    if not bulk:  # the step-order path: every new block and every fill on its own
        alloc.appends_in_bulk = lambda seq_ids: False
    ledger = DeferredAppends(alloc, uses_content=True)
    now = 0.0
    for i, (shared, own, out) in enumerate(old):  # dormant cache for make_room to evict
        now += 1.0
        alloc.set_time(now)
        req = Req(f"old-{i}", _prompt(i, shared, own))
        if alloc.allocate(req.seq_id, req.prompt_tokens, content=req.content):
            alloc.append(req.seq_id, out, content=req.content_slice(req.prompt_tokens,
                                                                    req.prompt_tokens + out))  # fmt: skip
            alloc.free(req.seq_id)
    reqs = []
    for i, (shared, own, grown) in enumerate(live):
        now += 1.0
        alloc.set_time(now)
        req = Req(f"live-{i}", _prompt(100 + i, shared, own))
        if not alloc.allocate(req.seq_id, req.prompt_tokens, content=req.content):
            continue
        ledger.track(req.seq_id)
        reqs.append(req)
        assert ledger.grow(req, req.prompt_tokens + grown)  # step 0 and what came before
    return alloc, ledger, reqs, now + extra_s


def _tree(alloc) -> list:
    tree = alloc.index.tree
    nodes = [tree.root, *tree.iter_nodes()]
    return sorted(
        (n.serial, n.parent.serial if n.parent else None, n.label, len(n.block_ids),
         n.lock_ref, n.last_access, n.created_at, n.hit_count, n.retain)  # fmt: skip
        for n in nodes
    ) + [(tree.total_blocks, tree.evictable_blocks, tree.evicted_blocks, tree.n_nodes)]


def _state(alloc, ledger) -> tuple:
    pool, index = alloc.pool, alloc.index
    return (
        _tree(alloc),
        alloc.metrics(),
        alloc.kv_slots(),
        alloc.prefix_metrics(),
        alloc.take_activity(),
        (pool.num_free, pool.num_cached, pool.num_allocated),
        {s: len(t) for s, t in alloc._tables.items()},
        index.ledger.excess_tokens,
        index._now_s,
        (ledger.total, ledger.room, ledger.pending, ledger.pending_tokens),
    )


_seq = st.tuples(st.integers(0, 13), st.integers(1, 11), st.integers(0, 9))
SPECS = st.tuples(
    st.integers(30, 90),  # pool blocks
    st.lists(_seq, max_size=6),  # finished sequences: dormant cache
    st.lists(_seq, min_size=1, max_size=5),  # the running batch
    st.floats(0.5, 3.0),  # gap before the run
    st.integers(1, 40),  # steps asked for
)


@settings(max_examples=150, deadline=None)
@given(SPECS)
def test_a_bulk_run_leaves_what_step_order_leaves(spec):
    runs = []
    for bulk in (True, False):
        alloc, ledger, reqs, t0 = _build(spec, bulk)
        seqs = [r.seq_id for r in reqs]
        assert RadixAllocator.appends_in_bulk(alloc, seqs) == alloc.index.appends_in_bulk(seqs)
        base = alloc.metrics().allocated_bytes
        run = ledger.plan_run(reqs, spec[4], base)
        starts = [t0 + 0.25 * i for i in range(run.steps + 1)]
        ledger.apply_run(reqs, run.steps, starts, alloc.set_time)
        alloc.check_invariants()
        ledger.check()
        states = [_state(alloc, ledger)]
        for seq in seqs:  # then the same releases and evictions
            ledger.untrack(seq)
            alloc.free(seq)
            states.append(_state(alloc, ledger))
        while alloc.index.tree.evictable_blocks:
            alloc.index.make_room(min(3, alloc.index.tree.evictable_blocks))
            states.append(_tree(alloc))
        runs.append(states)
    assert runs[0] == runs[1]


def test_bulk_is_offered_only_where_order_cannot_matter():
    alloc = RadixAllocator(pool_bytes=64 * B, kv_bytes_per_token=1, block_size=B)
    a, b = Req("a", _prompt(0, 8, 5)), Req("b", _prompt(1, 8, 6))
    for r in (a, b):
        alloc.allocate(r.seq_id, r.prompt_tokens, content=r.content)
    assert alloc.appends_in_bulk(["a", "b"])  # each grows a leaf it alone pins
    alloc.fork("a", "a2")  # parent and child pin one node: their fills insert, in order
    assert not alloc.appends_in_bulk(["a"]) and not alloc.appends_in_bulk(["a2"])
    assert alloc.appends_in_bulk(["b"])
    alloc.append("b", 3, content=None)  # unknown content: nothing more to cache
    assert alloc.appends_in_bulk(["b"])
    marked = RadixAllocator(pool_bytes=64 * B, kv_bytes_per_token=1, block_size=B,
                            tau_low_blocks=4, target_free_blocks=8)  # fmt: skip
    marked.allocate("c", 9, content=_prompt(2, 4, 5))
    assert not marked.appends_in_bulk(["c"])  # the watermark evicts between appends


def _run(spec, mode: str, late_first: int):
    """One decode run of ``spec``'s batch (its last request joins at step ``late_first``
    when there are two or more): ``bulk`` and ``order`` through ``apply_run`` (bulk
    offered or refused), ``steps`` as the engine's exact mode makes it, ``grow`` per step
    in scheduling order, each step at its start time."""
    alloc, ledger, reqs, t0 = _build(spec, mode == "bulk")
    late = (reqs[-1], late_first) if len(reqs) > 1 else None
    decodes = reqs[:-1] if late else reqs
    run = ledger.plan_run(decodes, spec[4], alloc.metrics().allocated_bytes, late)
    starts = [t0 + 0.25 * i for i in range(run.steps + 1)]
    if mode == "steps":
        before = {r.seq_id: ledger.total[r.seq_id] for r in reqs}
        for i in range(1, run.steps + 1):
            alloc.set_time(starts[i])
            for r in decodes:
                assert ledger.grow(r, before[r.seq_id] + i)
            if late and i >= late_first:
                assert ledger.grow(late[0], before[late[0].seq_id] + i - late_first + 1)
    else:
        ledger.apply_run(decodes, run.steps, starts, alloc.set_time, late)
    alloc.set_time(starts[-1])  # the next decision's clock (a run sets it at events only)
    alloc.check_invariants()
    ledger.check()
    tables = {s: list(t) for s, t in alloc._tables.items()}
    states = [(_state(alloc, ledger), ledger.owner)]
    for r in reqs:  # then the same flushes, releases and evictions
        ledger.flush(r.seq_id)
        ledger.untrack(r.seq_id)
        alloc.free(r.seq_id)
        states.append(_state(alloc, ledger))
    while alloc.index.tree.evictable_blocks:
        alloc.index.make_room(1)
        states.append(_tree(alloc))
    return states, tables


@settings(max_examples=150, deadline=None)
@given(SPECS, st.integers(1, 12))
def test_a_run_leaves_what_its_steps_leave(spec, late_first):
    """``apply_run`` against stepping (a late request included): the same state (the
    ledger's pending tokens and their owners; not their order, which only ``flush_all``
    reads and which changes nothing: a pending append fills no block); step order also
    hands out the very same block ids."""
    steps, steps_tables = _run(spec, "steps", late_first)
    order, order_tables = _run(spec, "order", late_first)
    assert order == steps and order_tables == steps_tables
    assert _run(spec, "bulk", late_first)[0] == steps

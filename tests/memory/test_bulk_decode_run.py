"""A radix decode run's appends one per sequence (``Allocator.appends_in_bulk``) leave the
state that step-order appends (a new block, then its fill, sequence by sequence, each at its
step's time) leave: the same tree (labels, stamps, serials, locks, hit counts), books, prefix
statistics and ledger, and the same evictions after it. Only which free block ids each
sequence got may differ, so block ids are compared through the tree's shape, never as values.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import InvariantError
from sim.memory.deferred import DeferredAppends
from sim.memory.errors import AllocatorError, UnknownSequenceError
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


def _build(spec, bulk: bool, eviction: str = "lru", clock: bool = True):
    """``spec``'s cache and batch; ``clock`` False: no time is set before the run (the
    index stamps with its operation counter, and its first time joins waiting fills)."""
    num_blocks, old, live, extra_s, _ = spec
    alloc = RadixAllocator(pool_bytes=num_blocks * B, kv_bytes_per_token=1, block_size=B,
                           eviction=eviction, content_priority={"sys": 2.0})  # fmt: skip
    if not bulk:  # the step-order path: every new block and every fill on its own
        alloc.appends_in_bulk = lambda seq_ids: False
    ledger = DeferredAppends(alloc, uses_content=True)
    now = 0.0
    for i, (shared, own, out) in enumerate(old):  # dormant cache for make_room to evict
        now += 1.0
        if clock:
            alloc.set_time(now)
        req = Req(f"old-{i}", _prompt(i, shared, own))
        if alloc.allocate(req.seq_id, req.prompt_tokens, content=req.content):
            alloc.append(req.seq_id, out, content=req.content_slice(req.prompt_tokens,
                                                                    req.prompt_tokens + out))  # fmt: skip
            alloc.free(req.seq_id)
    reqs = []
    for i, (shared, own, grown) in enumerate(live):
        now += 1.0
        if clock:
            alloc.set_time(now)
        req = Req(f"live-{i}", _prompt(100 + i, shared, own))
        if not alloc.allocate(req.seq_id, req.prompt_tokens, content=req.content):
            continue
        ledger.track(req.seq_id)
        if not ledger.grow(req, req.prompt_tokens + grown):  # step 0 and what came before
            ledger.untrack(req.seq_id)  # (a tight pool: this one does not run)
            alloc.free(req.seq_id)
            continue
        reqs.append(req)
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


def _a_and_long():
    """A radix pool and its ledger with "a" (6 tokens: room 2 in its last block of 4) and
    "long" (17 tokens: room 3) tracked, at time 1.0: (allocator, ledger, requests)."""
    alloc = RadixAllocator(pool_bytes=64 * B, kv_bytes_per_token=1, block_size=B)
    ledger = DeferredAppends(alloc, uses_content=True)
    alloc.set_time(1.0)
    reqs = {}
    for name, tokens in (("a", 6), ("long", 17)):  # room 2 and room 3
        req = Req(name, ((f"p-{name}", 0, tokens),))
        assert alloc.allocate(name, tokens, content=req.content)
        ledger.track(name)
        reqs[name] = req
    return alloc, ledger, reqs


@pytest.mark.parametrize("twice", ["long", "a", "late"])
def test_a_sequence_twice_in_one_run_is_a_broken_plan(twice):
    """Each sequence once per run, whether it has an event in the run ("a" fills its block
    at step 2) or not ("long": its room outlasts the run, so it is only counted, and a
    second entry would count its tokens twice), and the late prefill not among the
    decodes: an ``InvariantError`` before anything changes."""
    alloc, ledger, reqs = _a_and_long()
    decodes, late = [reqs["a"], reqs["long"]], None
    if twice == "late":
        late = (reqs["a"], 1)
    else:
        decodes.append(reqs[twice])
    with pytest.raises(InvariantError, match="a sequence twice in one run"):
        ledger.apply_run(decodes, 2, [1.0, 1.25, 1.5], alloc.set_time, late)
    assert ledger.pending == {} and (ledger.total["long"], ledger.room["long"]) == (17, 3)
    assert alloc.seq_tokens("a") == 6
    ledger.check()
    alloc.check_invariants()


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


def test_a_sequence_whose_room_outlasts_the_run_only_counts_its_tokens():
    """A run of 2 steps: "a" (6 tokens, room 2 in its last block of 4) fills that block
    at step 2, so the allocator sees it; "long" (17 tokens, room 3) fills nothing before
    step 3: it has no event in the run, no append, and its 2 tokens are only counted
    (pending, its room 2 fewer), as stepping leaves them."""
    alloc, ledger, reqs = _a_and_long()
    assert (ledger.room["a"], ledger.room["long"]) == (2, 3)
    appends: list = []
    inner = alloc.append_in_bulk

    def recorded(items, contents, times_s):
        appends.extend(seq for seq, _ in items)
        return inner(items, contents, times_s)

    alloc.append_in_bulk = recorded
    ledger.apply_run([reqs["a"], reqs["long"]], 2, [1.0, 1.25, 1.5], alloc.set_time)
    # "a": room 2, fills its block at step 2 (8 tokens); "long": room 3 > 2 steps, none
    assert appends == ["a"]
    assert alloc.seq_tokens("a") == 8 and alloc.seq_tokens("long") == 17
    assert ledger.pending == {"long": 2} and ledger.pending_tokens == 2
    assert ledger.owner == {"long": reqs["long"]}
    assert (ledger.total["long"], ledger.room["long"]) == (19, 1)
    assert (ledger.total["a"], ledger.room["a"]) == (8, 0)
    ledger.check()
    alloc.check_invariants()


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
    clock: list[float] = []  # the engine's clock as the run leaves it (KVManager.now)
    if mode == "steps":
        before = {r.seq_id: ledger.total[r.seq_id] for r in reqs}
        for i in range(1, run.steps + 1):
            alloc.set_time(starts[i])
            for r in decodes:
                assert ledger.grow(r, before[r.seq_id] + i)
            if late and i >= late_first:
                assert ledger.grow(late[0], before[late[0].seq_id] + i - late_first + 1)
    else:

        def set_time(now_s: float) -> None:
            clock.append(now_s)
            alloc.set_time(now_s)

        ledger.apply_run(decodes, run.steps, starts, set_time, late)
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
    return states, tables, clock[-1:]


@settings(max_examples=150, deadline=None)
@given(SPECS, st.integers(1, 12))
def test_a_run_leaves_what_its_steps_leave(spec, late_first):
    """``apply_run`` against stepping (a late request included): the same state (the
    ledger's pending tokens and their owners; not their order, which only ``flush_all``
    reads and which changes nothing: a pending append fills no block); step order also
    hands out the very same block ids."""
    steps, steps_tables, _ = _run(spec, "steps", late_first)
    order, order_tables, order_clock = _run(spec, "order", late_first)
    assert order == steps and order_tables == steps_tables
    bulk, _, bulk_clock = _run(spec, "bulk", late_first)
    assert bulk == steps
    assert bulk_clock == order_clock  # where the run leaves the engine's clock


def _one_by_one(alloc) -> None:
    """The reference: the allocator makes a run's appends one by one
    (``Allocator.append_in_bulk``'s loop), not in its one pass."""
    alloc._append_each_content = lambda items, contents, times_s: (
        None if not alloc.appends_in_bulk([s for s, _ in items]) else False
    )


def _record_passes(alloc) -> list:
    """What each call of the allocator's one pass answered (True: it made the appends)."""
    calls: list = []
    inner = alloc._append_each_content

    def recorded(*args):
        calls.append(inner(*args))
        return calls[-1]

    alloc._append_each_content = recorded
    return calls


#: a small pool under a dormant cache: the run's appends must make room
TIGHT = st.tuples(
    st.integers(12, 40),
    st.lists(_seq, min_size=2, max_size=8),
    st.lists(_seq, min_size=1, max_size=5),
    st.floats(0.5, 3.0),
    st.integers(1, 40),
)


@settings(max_examples=150, deadline=None)
@given(
    st.one_of(SPECS, TIGHT),
    st.integers(1, 12),
    st.sampled_from(["lru", "priority", "fifo"]),
    st.booleans(),
)
def test_a_bulk_runs_batch_is_its_appends_one_by_one(spec, late_first, eviction, clock):
    """The allocator's one pass over a bulk run's appends (``append_in_bulk``) against
    the same appends one by one: the same state, the very same block ids in every table
    and the same free queue (the run's room made in one ``make_room`` before any block is
    taken), and the pass
    made wherever the reference appended one by one in bulk."""
    out = []
    for batch in (True, False):
        alloc, ledger, reqs, t0 = _build(spec, True, eviction, clock)
        if not batch:
            _one_by_one(alloc)
        calls = _record_passes(alloc)
        late = (reqs[-1], late_first) if len(reqs) > 1 else None
        decodes = reqs[:-1] if late else reqs
        run = ledger.plan_run(decodes, spec[4], alloc.metrics().allocated_bytes, late)
        starts = [t0 + 0.25 * i for i in range(run.steps + 1)]
        ledger.apply_run(decodes, run.steps, starts, alloc.set_time, late)
        alloc.check_invariants()
        ledger.check()
        state = (
            _state(alloc, ledger),
            {s: list(t) for s, t in alloc._tables.items()},
            alloc.pool.free_queue(),
            list(alloc.pool.refcount),
            alloc._peak_allocated_bytes,
            alloc.changes,
            (alloc._lineage.distinct_tokens, alloc._lineage.logical_tokens),
        )
        out.append((state, calls))
    assert out[0][0] == out[1][0]
    # the reference went one by one (False) or to step order (None); the pass made the
    # former itself (True) and refused the latter alike
    assert out[0][1] == [True if c is False else c for c in out[1][1]]


def _live(n_blocks: int = 12):
    alloc = RadixAllocator(pool_bytes=n_blocks * B, kv_bytes_per_token=1, block_size=B)
    reqs = [Req("a", _prompt(0, 0, 7)), Req("b", _prompt(1, 0, 6))]  # a leaf each
    for r in reqs:
        assert alloc.allocate(r.seq_id, r.prompt_tokens, content=r.content)
    return alloc, reqs


def _items(reqs, n: int):
    items = [(r.seq_id, n) for r in reqs]
    contents = [r.content_slice(r.prompt_tokens, r.prompt_tokens + n) for r in reqs]
    return items, contents


def _books(alloc) -> tuple:
    return ({s: list(t) for s, t in alloc._tables.items()}, dict(alloc._tokens),
            alloc.pool.free_queue(), alloc.changes, _tree(alloc))  # fmt: skip


@pytest.mark.parametrize("hold_other", [False, True])
def test_the_batch_takes_each_appends_ids_and_stamps_each_at_its_time(hold_other):
    alloc, reqs = _live()
    ref, _ = _live()
    _one_by_one(ref)
    for a in (alloc, ref):
        if hold_other:  # paused slots tracked: the batch's new blocks are told to them
            assert a.allocate("c", 5, content=_prompt(2, 0, 5))
            a.set_held("c", True)
    items, contents = _items(reqs, 6)  # a: 7 -> 13 tokens (+2 blocks), b: 6 -> 12 (+1)
    queue = alloc.pool.free_queue()
    assert alloc._append_each_content(items, contents, [3.0, None]) is True
    assert ref.append_in_bulk(items, contents, [3.0, None])
    assert _books(alloc) == _books(ref)
    assert alloc.kv_slots() == ref.kv_slots() and alloc.metrics() == ref.metrics()
    alloc.check_invariants()
    assert alloc._tables["a"][2:] == queue[:2] and alloc._tables["b"][2:] == queue[2:3]
    assert alloc.index._now_s == 3.0


def test_a_batch_short_of_free_blocks_evicts_once_what_one_by_one_evicts():
    def make(batch: bool):
        alloc = RadixAllocator(pool_bytes=14 * B, kv_bytes_per_token=1, block_size=B)
        for i in range(3):  # dormant cache: 3 x 2 blocks
            alloc.set_time(float(i))
            old = Req(f"old-{i}", _prompt(10 + i, 0, 8))
            assert alloc.allocate(old.seq_id, 8, content=old.content)
            alloc.free(old.seq_id)
        reqs = [Req("a", _prompt(0, 0, 6)), Req("b", _prompt(1, 0, 7))]
        for r in reqs:
            assert alloc.allocate(r.seq_id, r.prompt_tokens, content=r.content)
        if not batch:
            _one_by_one(alloc)
        return alloc, reqs

    alloc, reqs = make(True)
    ref, _ = make(False)
    items, contents = _items(reqs, 10)  # 2 + 3 new blocks, 4 free: one evicted
    assert alloc.pool.num_free == 4 and alloc.index.tree.evictable_blocks == 6
    assert alloc._append_each_content(items, contents, [5.0, 6.0]) is True
    assert ref.append_in_bulk(items, contents, [5.0, 6.0])
    assert alloc.index.tree.evicted_blocks == 1
    assert _books(alloc) == _books(ref)


def _shared_leaf(alloc, reqs) -> None:
    """``d`` and its fork ``e`` pin one leaf (no partial block: nothing to copy)."""
    d = Req("d", _prompt(3, 0, 8))
    reqs.append(d)
    assert alloc.allocate("d", 8, content=d.content)
    alloc.fork("d", "e")


def _fork_a(alloc, reqs) -> None:
    """``c`` maps ``a``'s partial last block and pins its leaf (a fork)."""
    alloc.fork("a", "c")


def _shared_tail(alloc, reqs) -> None:
    """``c`` maps ``a``'s partial last block (a fork), and the index is told to take bulk
    anyway: the copy on write still goes one by one."""
    alloc.fork("a", "c")
    alloc.index.appends_in_bulk = lambda seq_ids: True


def _plug_in(alloc, reqs) -> None:
    """A plug-in's ``_append`` sees every append."""

    def _append(self, *args):
        return RadixAllocator._append(self, *args)

    alloc.__class__ = type("Watching", (RadixAllocator,), {"_append": _append})


@pytest.mark.parametrize(
    "name, setup, items, verdict",
    [
        ("a sequence twice", None, [("a", 2, 7), ("a", 2, 9)], False),
        ("an odd count", None, [("a", 0, 7)], False),
        ("a held sequence", lambda alloc, reqs: alloc.set_held("b", True), [("b", 2, 6)], False),
        ("a shared leaf", _shared_leaf, [("b", 2, 6), ("d", 2, 8)], None),
        ("a fork's shared last block", _fork_a, [("b", 2, 6), ("a", 2, 7)], None),
        ("a shared last block in bulk", _shared_tail, [("b", 2, 6), ("a", 2, 7)], False),
        ("a plug-in's appends", _plug_in, [("a", 2, 7)], False),
        ("no room", None, [("a", 40, 7)], False),
    ],
)
def test_what_the_batch_cannot_take_goes_one_by_one_or_in_step_order(name, setup, items, verdict):
    """Each case is refused by the pass with nothing changed: None where the index does
    not take the run in bulk (``append_in_bulk`` says False: step order), False where it
    does (the appends go one by one, with the reference's outcome, an error included)."""
    out = []
    for batch in (True, False):
        alloc, reqs = _live()
        if setup is not None:
            setup(alloc, reqs)
        if not batch:
            _one_by_one(alloc)
        by_id = {r.seq_id: r for r in reqs}
        pairs = [(s, n) for s, n, _ in items]
        contents = [by_id[s].content_slice(at, at + n) if n else None for s, n, at in items]
        times = [None] * len(items)
        before = _books(alloc)
        if batch:
            assert alloc._append_each_content(pairs, contents, times) is verdict, name
            assert _books(alloc) == before, name
        try:
            taken = alloc.append_in_bulk(pairs, contents, times)
            err = None
        except InvariantError as exc:
            taken, err = None, str(exc)
        out.append((_books(alloc), alloc.kv_slots(), taken, err))
    assert out[0] == out[1], name
    assert out[0][2] is (None if verdict is False and out[0][3] else verdict is False), name


def test_bad_content_and_no_room_fail_as_one_by_one():
    """A batch with bad content raises at that item, and one that cannot fit misses at
    its first short item (a broken book), with the earlier items made, exactly as one by
    one; the batch's own pass changed nothing before it handed over."""
    for n, bad, err in ((2, True, AllocatorError), (40, False, InvariantError)):
        seen = []
        for batch in (True, False):
            alloc, reqs = _live()
            if not batch:
                _one_by_one(alloc)
            items, contents = _items(reqs, n)
            if bad:
                contents[1] = (("x", 0, n + 1),)  # one token too many
            with pytest.raises(err):
                alloc.append_in_bulk(items, contents, [None, None])
            seen.append(_books(alloc))
        assert seen[0] == seen[1]


@pytest.mark.parametrize("kind", ["radix", "paged_hash"])
def test_misuse_raises_before_anything_changes(kind):
    """Lists of unequal lengths and an unknown sequence raise before any append, whether
    or not the index takes the run in bulk."""
    from sim.memory import make_allocator

    alloc = make_allocator(kind, pool_bytes=12 * B, kv_bytes_per_token=1, block_size=B)
    reqs = [Req("a", _prompt(0, 0, 7)), Req("b", _prompt(1, 0, 6))]
    for r in reqs:
        assert alloc.allocate(r.seq_id, r.prompt_tokens, content=r.content)
    items, contents = _items(reqs, 6)
    before = ({s: list(t) for s, t in alloc._tables.items()}, dict(alloc._tokens), alloc.changes)
    with pytest.raises(ValueError, match="2 items, 1 contents"):
        alloc.append_in_bulk(items, contents[:1], [None, None])
    with pytest.raises(UnknownSequenceError, match="'ghost'"):
        alloc.append_in_bulk([*items, ("ghost", 2)], [*contents, None], [None] * 3)
    after = ({s: list(t) for s, t in alloc._tables.items()}, dict(alloc._tokens), alloc.changes)
    assert after == before


def test_a_bad_time_goes_one_by_one_and_raises_where_they_do():
    seen = []
    for batch in (True, False):
        alloc, reqs = _live()
        if not batch:
            _one_by_one(alloc)
        items, contents = _items(reqs, 6)
        if batch:
            assert alloc._append_each_content(items, contents, [1.0, "soon"]) is False
        with pytest.raises((TypeError, ValueError)):
            alloc.append_in_bulk(items, contents, [1.0, "soon"])
        alloc.check_invariants()
        seen.append(_books(alloc))
    assert seen[0] == seen[1]

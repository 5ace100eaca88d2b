"""``Allocator.appends_unordered`` (a batch of appends whose order cannot matter) and the
paged kind's ``metrics`` in count mode.

A paged pool in count mode hands out no block ids, so the ledger's clock gives it a
tick's appends as they come; with ids (or a plug-in's own appends) the order is kept. The
default (a plug-in that does not override the query) is False: always safe.
"""

from __future__ import annotations

import pytest

from sim.memory.base import Allocator
from sim.memory.buffers import BufferAllocator
from sim.memory.deferred import DeferredAppends
from sim.memory.paged import PagedAllocator


class Req:
    def __init__(self, seq_id: str) -> None:
        self.seq_id = seq_id

    def content_slice(self, start: int, stop: int) -> None:
        return None


class Recording(PagedAllocator):
    """Records each batch ``append_each`` is given (its appends stay the kind's own)."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.batches: list[list[tuple[str, int]]] = []

    def append_each(self, items) -> None:
        items = list(items)
        self.batches.append(items)
        super().append_each(items)


class OwnAppend(PagedAllocator):
    """A plug-in with its own ``append`` (it sees every append)."""

    def append(self, seq_id, n_tokens=1, *, content=None):
        return super().append(seq_id, n_tokens, content=content)


class PlugInBuffers(BufferAllocator):
    """A plug-in that does not override ``appends_unordered``."""


def _paged(kind=PagedAllocator, blocks: int = 10, bs: int = 4):
    return kind(pool_bytes=blocks * bs * 8, kv_bytes_per_token=8, block_size=bs)


def test_the_default_keeps_the_order():
    assert Allocator.appends_unordered is not PagedAllocator.appends_unordered
    assert PlugInBuffers(pool_bytes=1024, kv_bytes_per_token=8).appends_unordered() is False
    assert BufferAllocator(pool_bytes=1024, kv_bytes_per_token=8).appends_unordered() is False


def test_a_paged_pool_is_unordered_only_in_count_mode_with_its_own_appends():
    alloc = _paged()
    assert alloc.appends_unordered() is True
    assert _paged(OwnAppend).appends_unordered() is False  # a plug-in's appends: in order
    alloc.allocate("a", 3)
    alloc.track_block_ids()  # ids from now on: which sequence takes which id depends on order
    assert alloc.appends_unordered() is False


@pytest.mark.parametrize("ids", [False, True])
def test_a_tick_s_appends_go_as_they_come_in_count_mode_else_in_order(ids):
    """B = 4, two full blocks (room 0), clocked as s0 (order 1) then s1 (order 0): the
    first tick takes a block for each, one token each; count mode gives them in the order
    they were filed, ids mode in ``order`` (s1 first, so s1 gets the first free id)."""
    alloc = _paged(Recording)
    led = DeferredAppends(alloc, uses_content=False)
    for seq in ("s0", "s1"):
        assert alloc.allocate(seq, 4)
        led.track(seq)
    if ids:
        alloc.track_block_ids()
    assert led.clock(Req("s0"), 1) and led.clock(Req("s1"), 0)
    assert led.advance(1, [], 2)
    expect = [("s1", 1), ("s0", 1)] if ids else [("s0", 1), ("s1", 1)]
    assert alloc.batches == [expect]
    assert alloc.seq_tokens("s0") == alloc.seq_tokens("s1") == 5
    assert alloc.free_blocks == 10 - 4
    if ids:
        assert alloc.block_table("s1")[1] < alloc.block_table("s0")[1]
    led.check()
    alloc.check_invariants()


@pytest.mark.parametrize("request_tokens", [None, 1, 4, 12, 40, 10_000])
def test_count_mode_metrics_are_the_general_snapshot(request_tokens):
    """The paged kind's ``metrics`` against ``Allocator.metrics`` (the general snapshot,
    over a ``CountPool``'s counters) in count mode, with ids, with nothing free and after
    a free."""
    alloc = _paged(blocks=6)
    request = None if request_tokens is None else request_tokens * 8.0
    states = []
    alloc.allocate("a", 5)  # 2 blocks
    alloc.allocate("b", 9)  # 3 blocks
    states.append(alloc.metrics(request))
    assert states[-1] == Allocator.metrics(alloc, request)
    assert alloc.allocate("c", 4)  # the last block: nothing free
    m = alloc.metrics(request)
    assert m == Allocator.metrics(alloc, request)
    assert m.free_bytes == 0 and m.free_extents == () and m.phi_ext is None
    alloc.free("c")
    m = alloc.metrics(request)
    assert m == Allocator.metrics(alloc, request)
    assert m.free_extents == (4 * 8 * 1.0,) and m.allocated_bytes == 5 * 4 * 8
    assert m.useful_bytes == 14 * 8 and m.eta_alloc == 14 / 20
    if request is not None:  # F9: a block pool has none, whether the request fits or not
        assert m.phi_ext == 0.0
    alloc.track_block_ids()
    assert alloc.metrics(request) == Allocator.metrics(alloc, request)

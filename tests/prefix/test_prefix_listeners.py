"""Several ``PrefixListener``s on one prefix cache (``PagedAllocator.subscribe_prefix``,
``sim.memory.prefix_index.PrefixListeners``): an index holds one listener, and a second
subscriber (the prefix-churn count beside a cluster's directory) used to replace the first
silently. Each subscriber is now told every report, in subscription order."""

from __future__ import annotations

import pytest

from sim.memory.paged import PagedAllocator
from sim.prefix.kinds import HashPagedAllocator, RadixAllocator

B = 4  # tokens per block


class Feed:
    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    def cached(self, parent, keys, content):
        self.log.append((self.name, "cached", parent, tuple(keys)))

    def evicted(self, keys):
        self.log.append((self.name, "evicted", tuple(keys)))


def _churn(alloc) -> None:
    """Two prompts of 3 full blocks each in a pool of 4 blocks: the second evicts."""
    alloc.allocate("x", 3 * B, content=[("p", 3 * B)])
    alloc.free("x")
    alloc.allocate("y", 3 * B, content=[("q", 3 * B)])
    alloc.free("y")


@pytest.mark.parametrize("kind", [RadixAllocator, HashPagedAllocator])
def test_every_subscriber_is_told_every_report_in_order(kind):
    log: list = []
    alloc = kind(pool_bytes=4 * B, kv_bytes_per_token=1, block_size=B)
    assert alloc.subscribe_prefix(Feed("first", log))
    assert alloc.subscribe_prefix(Feed("second", log))
    _churn(alloc)
    firsts = [e[1:] for e in log if e[0] == "first"]
    seconds = [e[1:] for e in log if e[0] == "second"]
    assert firsts == seconds
    assert [e[0] for e in log] == ["first", "second"] * len(firsts)
    # x's 3 blocks are cached; y's 3 blocks need some of them back (evicted), then cached
    cached = [k for e in firsts if e[0] == "cached" for k in e[2]]
    evicted = [k for e in firsts if e[0] == "evicted" for k in e[1]]
    assert len(cached) == 6 and evicted and set(evicted) <= set(cached[:3])


@pytest.mark.parametrize("kind", [RadixAllocator, HashPagedAllocator])
def test_one_subscriber_sees_what_it_saw_alone(kind):
    """The first subscriber's reports do not change when a second one joins."""
    alone: list = []
    a = kind(pool_bytes=4 * B, kv_bytes_per_token=1, block_size=B)
    a.subscribe_prefix(Feed("first", alone))
    _churn(a)
    both: list = []
    b = kind(pool_bytes=4 * B, kv_bytes_per_token=1, block_size=B)
    b.subscribe_prefix(Feed("first", both))
    b.subscribe_prefix(Feed("second", []))
    _churn(b)
    assert alone == both and alone


def test_without_a_prefix_cache_nothing_subscribes():
    plain = PagedAllocator(pool_bytes=4 * B, kv_bytes_per_token=1, block_size=B)
    assert plain.subscribe_prefix(Feed("first", [])) is False
    assert plain.subscribe_prefix(Feed("second", [])) is False

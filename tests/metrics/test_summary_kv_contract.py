"""h113: what ``summarize`` reads of the KV memory is a declared contract
(``sim.metrics.summary.SummaryKV``), met by a node's ``KVManager`` and a cluster's
``KVSum``, so a reader short of a figure (the prefix-churn warning's ``pool_blocks``, once
read with ``getattr`` and a silent None) is a type error, not a default. The run layer
holds the cluster's sum as a ``SummaryKV`` (mypy checks it there; the call's own arguments
are not checked, its recorder being a ``RecorderSum``)."""

from __future__ import annotations

import inspect
from typing import get_type_hints

from sim.cluster.aggregate import KVSum
from sim.memory import make_allocator
from sim.memory.kv_manager import KVManager
from sim.metrics import summary
from sim.metrics.summary import SummaryKV, summarize
from sim.run import cluster


def kv_manager(pool_tokens: int, block_size: int) -> KVManager:
    """A paged pool of ``pool_tokens`` tokens at 1 B a token."""
    return KVManager(make_allocator("paged", pool_bytes=pool_tokens, kv_bytes_per_token=1,
                                    block_size=block_size))  # fmt: skip


def test_summarize_reads_the_kv_through_the_contract():
    assert get_type_hints(summarize)["kv"] is SummaryKV
    assert "getattr" not in inspect.getsource(summary.summarize)
    assert "kv_all: SummaryKV = KVSum(" in inspect.getsource(cluster)


def test_a_node_and_a_cluster_meet_it_and_the_cluster_sums_its_pools():
    """Paged pools of 4,096 and 1,024 tokens at 1 B a token, 16-token blocks: 256 and 64
    blocks, 320 summed; the block size is node 0's."""
    a, b = kv_manager(4096, block_size=16), kv_manager(1024, block_size=16)
    assert (a.pool_blocks, b.pool_blocks) == (256, 64)
    both = KVSum([a, b])
    assert isinstance(a, SummaryKV) and isinstance(both, SummaryKV)
    assert both.pool_blocks == 320 and both.block_size == 16


def test_an_object_short_of_a_figure_is_not_one():
    class NoPool:
        kv_bytes_per_token = 1.0
        block_size = 16

        def metrics(self): ...
        def held_token_seconds(self, now): ...
        def prefix_metrics(self): ...

    assert not isinstance(NoPool(), SummaryKV)

"""The prefix-cache allocator kinds, ``radix`` and ``paged_hash``, and their registration.

Responsibility: name each kind, declare its options (the memory factory reads them from
``__init__``) and build it: the paged core (``sim.memory.PagedAllocator``: block tables,
refcounts, copy-on-write, books) composed with a prefix index of this package
(``RadixIndex``, ``HashIndex``) through ``PagedAllocator.compose``. The classes hold
nothing else: every behaviour is the core's or the index's (a test checks that they
override no method). Importing ``sim.prefix`` imports this module, which registers both
kinds with ``sim.memory.register_allocator``, so ``make_allocator("radix", ...)`` works once
``sim`` is imported; memory never imports this layer.

Invariant: the registered class of each kind is the one defined here, and an instance's
``index`` is its kind's index.
"""

from __future__ import annotations

from sim.memory.paged import PagedAllocator
from sim.memory.registry import register_allocator
from sim.prefix.hash_index import HashIndex
from sim.prefix.radix_index import RadixIndex


class RadixAllocator(PagedAllocator):
    """``radix``: paged blocks plus a radix tree of reusable full blocks (``radix_index``)."""

    kind = "radix"
    uses_content = True  # the engine passes token content with every allocate and append

    def __init__(
        self,
        *,
        pool_bytes: float,
        kv_bytes_per_token: float,
        block_size: int = 16,
        tail_policy: str = "truncate",
        eviction: str = "lru",
        tau_low_blocks: int = 0,
        target_free_blocks: int = 0,
        content_priority: dict | None = None,
    ) -> None:
        super().__init__(
            pool_bytes=pool_bytes, kv_bytes_per_token=kv_bytes_per_token, block_size=block_size
        )
        self.compose(
            RadixIndex(
                self.pool.num_blocks,
                self.block_size,
                tail_policy=tail_policy,
                eviction=eviction,
                tau_low_blocks=tau_low_blocks,
                target_free_blocks=target_free_blocks,
                content_priority=content_priority,
            )
        )


class HashPagedAllocator(PagedAllocator):
    """``paged_hash``: paged blocks whose free queue is vLLM V1's LRU prefix cache
    (``hash_index``); also ``paged`` with ``prefix_caching: hash``."""

    kind = "paged_hash"
    uses_content = True  # the engine passes token content with every allocate and append

    def __init__(
        self,
        *,
        pool_bytes: float,
        kv_bytes_per_token: float,
        block_size: int = 16,
        null_block: bool = False,
        unhashed_to_head: bool = False,
    ) -> None:
        super().__init__(
            pool_bytes=pool_bytes, kv_bytes_per_token=kv_bytes_per_token, block_size=block_size
        )
        self.compose(
            HashIndex(
                self.pool.num_blocks,
                self.block_size,
                null_block=null_block,
                unhashed_to_head=unhashed_to_head,
            )
        )


register_allocator("radix", RadixAllocator)
register_allocator("paged_hash", HashPagedAllocator)

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
from sim.prefix.hybrid_hit import kv_groups_limiting_group
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
        self.hit_rule = kv_groups_limiting_group  # the hybrid prefix-hit rule
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
        null_block: bool = True,
        unhashed_to_head: bool = True,
    ) -> None:
        super().__init__(
            pool_bytes=pool_bytes, kv_bytes_per_token=kv_bytes_per_token, block_size=block_size
        )
        self.hit_rule = kv_groups_limiting_group  # the hybrid prefix-hit rule
        self.compose(
            HashIndex(
                self.pool.num_blocks,
                self.block_size,
                null_block=null_block,
                unhashed_to_head=unhashed_to_head,
            )
        )


#: the engine whose rules each prefix-cache kind follows, for ``summary.json``'s
#: ``engine_rules`` (docs/prefix_cache.md, "Version modelled")
VLLM_RULES = "vLLM 0.33.0 KVCacheManager (null block reserved, unhashed blocks freed to the head)"
VLLM_V1_DOC_RULES = (
    "vLLM V1 prefix-caching design document, vLLM 0.8 (no null block, freed to the tail)"
)
RADIX_RULES = (
    "SGLang-like radix cache (rules 3.6-3.7; block-granular eviction; no one SGLang version)"
)


def engine_rules(kind: str, options: dict) -> str | None:
    """The engine rules an allocator ``kind`` with ``options`` follows (None: a design of
    the chapter's, no engine's)."""
    if kind == "radix":
        return RADIX_RULES
    if kind != "paged_hash":
        return None
    null, head = options.get("null_block", True), options.get("unhashed_to_head", True)
    if null and head:
        return VLLM_RULES
    if not null and not head:
        return VLLM_V1_DOC_RULES
    return f"vLLM V1 hashed blocks, mixed rules (null_block: {bool(null)}, unhashed_to_head: {bool(head)})"


register_allocator("radix", RadixAllocator)
register_allocator("paged_hash", HashPagedAllocator)

"""Prefix cache: token content identity and reuse (spans, block hashes, radix tree, eviction).

Layer: token content -> matched length (DESIGN.md). ``spans`` (content as spans, F19
hashes), ``prompt`` and ``harness`` (agent prompts by zones, SPEC 3.8 perturbations, hit
rates), ``radix`` and ``eviction`` (the tree, SPEC 3.6-3.7), ``hashcache`` (vLLM V1's
hashed block pool), ``provider`` (SPEC 3.9), ``trace_replay`` (``kvsim trace-replay``).
The allocator kinds ``radix`` (``radix_allocator``) and ``paged_hash``
(``hash_allocator``) compose ``sim.memory.PagedAllocator`` and are found by the memory
factory by name. See docs/prefix_cache.md.

Invariant: this package imports only lower layers (``sim.units``, ``sim.errors``,
``sim.memory``) and itself; nothing here imports torch, and importing it loads nothing.
"""

"""Prefix cache: token content identity and reuse (spans, block hashes, radix tree, eviction).

Layer: token content -> matched length (DESIGN.md). ``spans`` (content as spans, F19
hashes), ``prompt`` and ``harness`` (agent prompts by zones, rule 3.8 perturbations, hit
rates), ``radix`` and ``eviction`` (the tree, rules 3.6-3.7), ``hashcache`` (vLLM V1's
hashed block pool), ``provider`` (rule 3.9), ``trace_replay`` (``kvsim trace-replay``).
The two ``sim.memory.PrefixIndex`` implementations are ``radix_index`` (the tree) and
``hash_index`` (hashed blocks); ``kinds`` composes each with ``sim.memory.PagedAllocator``
into the allocator kinds ``radix`` and ``paged_hash`` and registers them. See
docs/prefix_cache.md.

Invariant: this package imports only lower layers (``sim.units``, ``sim.errors``,
``sim.memory``) and itself; nothing here imports torch. Importing it registers the two
allocator kinds (``sim`` imports it, so they exist whenever ``sim`` is imported).
"""

from sim.prefix import kinds as kinds  # registers "radix" and "paged_hash"

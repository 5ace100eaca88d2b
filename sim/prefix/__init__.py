"""Prefix cache: token content identity and reuse (spans, block hashes, radix tree, eviction).

Invariant: this layer imports only ``sim.units``, ``sim.errors`` and itself (the ``radix``
allocator adapter imports ``sim.memory``, a lower layer); nothing here imports torch.
"""

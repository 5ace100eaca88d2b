"""Where KV bytes live: allocators, block tables, refcounts, copy-on-write, fragmentation.

Layer: token counts in -> ok/miss + ``MemoryMetrics`` out (DESIGN.md). One protocol
(``Allocator``), kinds registered by name (``static``, ``contiguous``, ``buddy``, ``paged``),
F8-F10 in ``fragmentation``. The seam to a prefix cache is ``PrefixIndex``: the prefix
kinds ``radix`` and ``paged_hash`` are ``PagedAllocator`` composed with an index of
``sim.prefix``, which defines and registers them (``import sim`` does that).

    from sim.memory import make_allocator
    a = make_allocator("paged", pool_bytes=60 * GiB, kv_bytes_per_token=40 * KiB)
    a.allocate("r1", 2048)          # truthy AllocResult, or falsy on a miss
    a.append("r1", 16); a.fork("r1", "r2"); a.free("r1")
    a.metrics(request_bytes=2 * GiB)

Invariant: this package imports nothing above ``sim.memory`` (no prefix, engine or CLI).
"""

from sim.memory.base import Allocator, Books
from sim.memory.block_pool import BlockPool, PagedPool
from sim.memory.buddy import BuddyAllocator
from sim.memory.buffers import BufferAllocator
from sim.memory.contiguous import ContiguousAllocator
from sim.memory.errors import (
    AllocatorError,
    LiveSequenceError,
    UnknownSequenceError,
)
from sim.memory.fragmentation import eta_alloc, eta_effective, phi_ext, request_fits
from sim.memory.metrics import Activity, AllocResult, MemoryMetrics, PrefixMetrics
from sim.memory.paged import PagedAllocator
from sim.memory.prefix_index import PrefixHit, PrefixIndex
from sim.memory.registry import (
    allocator_class,
    allocator_kinds,
    allocator_options,
    make_allocator,
    register_allocator,
)
from sim.memory.static import StaticAllocator

__all__ = [
    "Activity",
    "AllocResult",
    "Allocator",
    "AllocatorError",
    "BlockPool",
    "Books",
    "BuddyAllocator",
    "BufferAllocator",
    "ContiguousAllocator",
    "LiveSequenceError",
    "MemoryMetrics",
    "PagedAllocator",
    "PagedPool",
    "PrefixHit",
    "PrefixIndex",
    "PrefixMetrics",
    "StaticAllocator",
    "UnknownSequenceError",
    "allocator_class",
    "allocator_kinds",
    "allocator_options",
    "eta_alloc",
    "eta_effective",
    "make_allocator",
    "phi_ext",
    "register_allocator",
    "request_fits",
]

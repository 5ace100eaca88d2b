"""``contiguous``: std::vector-style buffers that double (SPEC 2.5 F12, 3.2).

A sequence is admitted with a buffer of exactly its prompt; an append past capacity grows
once to the smallest doubling that fits, by reserving the new buffer while the old one
exists (transient N + 2N), copying, and leaving the old buffer as a hole (``buffers``).
``placement`` picks the hole (``first_fit`` lowest address, ``best_fit`` smallest hole,
ties to the lowest address); ``grow_in_place`` (default off, as std::vector) first tries
the adjacent hole.

Invariant: as ``buffers``; capacity = prompt * 2^k for the number k of growths.
"""

from __future__ import annotations

from sim.memory.base import choice, flag
from sim.memory.buffers import GROWTH, BufferAllocator, pool_slots
from sim.memory.extents import PLACEMENTS, ExtentSpace


class ContiguousAllocator(BufferAllocator):
    """One growable contiguous buffer per sequence, with real holes."""

    kind = "contiguous"

    def __init__(
        self,
        *,
        pool_bytes: float,
        kv_bytes_per_token: float,
        growth: str = "double",
        placement: str = "first_fit",
        grow_in_place: bool = False,
    ) -> None:
        super().__init__(pool_bytes=pool_bytes, kv_bytes_per_token=kv_bytes_per_token)
        self.growth = choice(growth, "growth", GROWTH)
        self.placement = choice(placement, "placement", PLACEMENTS)
        self.grow_in_place = flag(grow_in_place, "grow_in_place")
        self._space = ExtentSpace(
            pool_slots(self.pool_bytes, self.kv_bytes_per_token), self.placement
        )

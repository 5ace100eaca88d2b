"""``static``: worst-case reservation (F6, rule 3.1).

Every admitted sequence gets one contiguous buffer of ``max_tokens`` slots (S_max) at
admission and never grows: an admitted sequence can never run out of memory, and an
append past ``max_tokens`` is a miss. Waste = ``max_tokens - s`` slots per sequence (F6).
A fork is a deep copy into another ``max_tokens`` buffer.

Invariant: every buffer has exactly ``max_tokens`` slots.
"""

from __future__ import annotations

from sim.errors import InvariantError
from sim.memory.base import positive_int
from sim.memory.buffers import BufferAllocator, pool_slots
from sim.memory.extents import ExtentSpace


class StaticAllocator(BufferAllocator):
    """S_max reservation per sequence, first fit in the address space."""

    kind = "static"

    def __init__(self, *, pool_bytes: float, kv_bytes_per_token: float, max_tokens: int) -> None:
        super().__init__(pool_bytes=pool_bytes, kv_bytes_per_token=kv_bytes_per_token)
        self.max_tokens = positive_int(max_tokens, "max_tokens")
        self._space = ExtentSpace(pool_slots(self.pool_bytes, self.kv_bytes_per_token))

    def _initial_tokens(self, n_tokens: int) -> int | None:
        return self.max_tokens if n_tokens <= self.max_tokens else None

    def _grown_tokens(self, capacity: int, needed: int) -> int | None:
        return None  # a static buffer never grows

    @property
    def max_sequence_tokens(self) -> int:
        return self.max_tokens if self._space.largest_reservable() >= self.max_tokens else 0

    def _check_kind(self) -> None:
        super()._check_kind()
        if any(size != self.max_tokens for _, size in self._buffers.values()):
            raise InvariantError("static: a buffer is not max_tokens slots")

"""Block-id sources for the radix tree outside the allocator (trace replay, prompt studies).

Responsibility: hand out block ids and take back the ids the tree evicts. The real paged
pool plays this role inside the ``radix`` allocator; this counting pool has no capacity of
its own (the caller bounds the cache by evicting), so it suits hit-rate studies.

Invariant: an id is never handed out twice while it is live; evicted ids are recycled.
"""

from __future__ import annotations


class CountingPool:
    """An unbounded id source that recycles ids the tree gives back."""

    def __init__(self) -> None:
        self._next = 0
        self._free: list[int] = []
        self.released = 0  # blocks handed back by eviction (cumulative)

    @property
    def live(self) -> int:
        """Ids handed out and not given back."""
        return self._next - len(self._free)

    def take(self, n: int) -> list[int]:
        """``n`` block ids (recycled ids first)."""
        reuse = min(n, len(self._free))
        ids = self._free[len(self._free) - reuse :]
        del self._free[len(self._free) - reuse :]
        if n > reuse:
            ids.extend(range(self._next, self._next + n - reuse))
            self._next += n - reuse
        return ids

    def release_cached(self, block_ids: list[int]) -> None:
        """Take back ids the tree evicted."""
        self._free.extend(block_ids)
        self.released += len(block_ids)

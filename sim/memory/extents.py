"""A contiguous address space of token slots with sorted free extents (first/best fit).

Responsibility: where contiguous buffers sit. Addresses and sizes are in token slots;
the allocator multiplies by ``kv_bytes_per_token``. A reservation is carved from the low
end of the chosen hole; a release merges with free neighbours on both sides, so two free
extents are never adjacent.

Invariant: free extents are sorted by start, disjoint, non-adjacent and non-empty; free
extents plus reserved buffers tile [0, total_tokens) exactly.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable

from sim.errors import InvariantError

PLACEMENTS = ("first_fit", "best_fit")


class ExtentSpace:
    """Free extents over ``total_tokens`` slots; ``placement`` picks the hole."""

    def __init__(self, total_tokens: int, placement: str = "first_fit") -> None:
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
        self.total_tokens = total_tokens
        self.placement = placement
        self._starts: list[int] = [0] if total_tokens > 0 else []
        self._sizes: list[int] = [total_tokens] if total_tokens > 0 else []
        self.free_tokens = total_tokens

    def reserved_size(self, n_tokens: int) -> int:
        """Slots a reservation of ``n_tokens`` takes (exactly n here)."""
        return n_tokens

    def largest_reservable(self) -> int:
        return self.total_tokens

    def _pick(self, size: int) -> int | None:
        sizes = self._sizes
        if self.placement == "first_fit":
            for i, s in enumerate(sizes):
                if s >= size:
                    return i
            return None
        best = None
        for i, s in enumerate(sizes):
            if s >= size and (best is None or s < sizes[best]):
                best = i  # strict '<' keeps the lowest address among equal holes
        return best

    def can_reserve(self, n_tokens: int) -> bool:
        return self._pick(n_tokens) is not None

    def reserve(self, n_tokens: int) -> tuple[int, int] | None:
        """(start, size) of a new buffer of ``n_tokens`` slots, or None if no hole fits."""
        i = self._pick(n_tokens)
        if i is None:
            return None
        start = self._starts[i]
        if self._sizes[i] == n_tokens:
            del self._starts[i], self._sizes[i]
        else:
            self._starts[i] += n_tokens
            self._sizes[i] -= n_tokens
        self.free_tokens -= n_tokens
        return start, n_tokens

    def release(self, start: int, size: int) -> None:
        """Return [start, start+size) and merge it with adjacent free extents."""
        starts, sizes = self._starts, self._sizes
        i = bisect_right(starts, start)
        prev_end = starts[i - 1] + sizes[i - 1] if i > 0 else None
        if (prev_end is not None and prev_end > start) or (
            i < len(starts) and starts[i] < start + size
        ):
            raise InvariantError(f"release of [{start}, {start + size}) overlaps a free extent")
        merge_prev = prev_end == start
        merge_next = i < len(starts) and starts[i] == start + size
        if merge_prev and merge_next:
            sizes[i - 1] += size + sizes[i]
            del starts[i], sizes[i]
        elif merge_prev:
            sizes[i - 1] += size
        elif merge_next:
            starts[i] = start
            sizes[i] += size
        else:
            starts.insert(i, start)
            sizes.insert(i, size)
        self.free_tokens += size

    def grow_in_place(self, start: int, size: int, new_size: int) -> bool:
        """Extend the buffer at ``start`` into the hole right after it, if large enough."""
        extra = new_size - size
        end = start + size
        i = bisect_left(self._starts, end)
        if i == len(self._starts) or self._starts[i] != end or self._sizes[i] < extra:
            return False
        if self._sizes[i] == extra:
            del self._starts[i], self._sizes[i]
        else:
            self._starts[i] += extra
            self._sizes[i] -= extra
        self.free_tokens -= extra
        return True

    def can_grow_in_place(self, start: int, size: int, new_size: int) -> bool:
        end = start + size
        i = bisect_left(self._starts, end)
        return (
            i < len(self._starts) and self._starts[i] == end and self._sizes[i] >= new_size - size
        )

    def extents(self) -> list[int]:
        """Sizes of the free holes in address order."""
        return list(self._sizes)

    def check(self, reserved: Iterable[tuple[int, int]]) -> None:
        """Free extents and ``reserved`` (start, size) pairs must tile the space exactly."""
        if sum(self._sizes) != self.free_tokens:
            raise InvariantError("extents: free_tokens != sum of extents")
        for k, (s, n) in enumerate(zip(self._starts, self._sizes, strict=True)):
            if n <= 0:
                raise InvariantError(f"extents: empty extent at {s}")
            if k and self._starts[k - 1] + self._sizes[k - 1] >= s:
                raise InvariantError(f"extents: extent at {s} overlaps or touches its left one")
        _check_tiling(
            [*zip(self._starts, self._sizes, strict=True), *reserved], self.total_tokens, "extents"
        )


def _check_tiling(pieces: list[tuple[int, int]], total: int, who: str) -> None:
    """``pieces`` (start, size) must cover [0, total) with no gap and no overlap."""
    at = 0
    for start, size in sorted(pieces):
        if start != at:
            kind = "overlap" if start < at else "gap"
            raise InvariantError(f"{who}: {kind} at slot {min(start, at)}")
        at = start + size
    if at != total:
        raise InvariantError(f"{who}: pieces end at {at}, space has {total} slots")

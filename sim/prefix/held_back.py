"""The publication seam's bookkeeping both prefix indexes share (docs/prefix_cache.md,
"When KV becomes a hit"): which sequences' KV look-ups may not see yet.

Invariant: a sequence is in at most one of ``marks`` (a live sequence: how much of it
look-ups may see, in its index's own unit: whole blocks for ``hash_index``, tokens for
``radix_index``) and ``next`` (a sequence not in the index yet whose coming admission is
held back); ``hold`` never moves a mark already set.
"""

from __future__ import annotations

from collections.abc import Hashable


class HeldBack:
    """``marks`` and ``next`` of one prefix index (module docstring)."""

    __slots__ = ("marks", "next")

    def __init__(self) -> None:
        self.marks: dict[Hashable, int] = {}
        self.next: set[Hashable] = set()

    def hold(self, seq_id: Hashable, live: bool, mark: int) -> bool:
        """Keep ``seq_id``'s KV past ``mark`` from look-ups (``live``: it is in the index;
        else its admission to come); False if it is held back already (nothing changes)."""
        if live:
            if seq_id in self.marks:
                return False
            self.marks[seq_id] = mark
            return True
        if seq_id in self.next:
            return False
        self.next.add(seq_id)
        return True

    def drop(self, seq_id: Hashable) -> None:
        """Forget ``seq_id`` (freed, or all of it published)."""
        self.next.discard(seq_id)
        self.marks.pop(seq_id, None)

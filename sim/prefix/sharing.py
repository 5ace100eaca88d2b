"""Useful bytes under a prefix cache: states shared by unrelated sequences count once.

Responsibility: the allocator's fork lineage counts each *fork family* (a request and the
branches forked from it) separately, so a cached block mapped by two unrelated requests
(a prefix hit while its first user is still live) would count twice. This ledger tracks,
for every cacheable block, which families map it, and keeps ``excess_tokens`` = the
tokens counted more than once: ``useful = lineage distinct - excess``.

Invariant: ``excess_tokens = block_size * sum over blocks of (families mapping it - 1)``;
only blocks registered through ``map`` are tracked (blocks the cache can hand to another
request); a family's count on a block is the number of its members mapping it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping

from sim.errors import InvariantError


class FamilyLedger:
    """Which fork families map each shareable block."""

    def __init__(self, block_size: int):
        self.block_size = block_size
        self.family: dict[Hashable, int] = {}  # live sequence -> family id
        self._fams: dict[int, dict[int, int]] = {}  # block -> {family: members mapping it}
        self._next = 0
        self.excess_tokens = 0

    def new(self, seq_id: Hashable) -> None:
        """A newly admitted sequence starts its own family."""
        self.family[seq_id] = self._next
        self._next += 1

    def fork(self, parent_id: Hashable, child_id: Hashable, table: Iterable[int]) -> None:
        """The child joins the parent's family and maps the parent's tracked blocks."""
        f = self.family[parent_id]
        self.family[child_id] = f
        for b in table:
            fams = self._fams.get(b)
            if fams is not None and f in fams:
                fams[f] += 1

    def map(self, seq_id: Hashable, blocks: Iterable[int]) -> None:
        """``seq_id`` maps these shareable blocks (a hit, or its own blocks being cached)."""
        f = self.family[seq_id]
        for b in blocks:
            fams = self._fams.setdefault(b, {})
            if f in fams:
                fams[f] += 1
            else:
                if fams:
                    self.excess_tokens += self.block_size
                fams[f] = 1

    def release(self, seq_id: Hashable, table: Iterable[int]) -> None:
        """``seq_id`` is freed: it stops mapping its tracked blocks."""
        f = self.family.pop(seq_id)
        for b in table:
            fams = self._fams.get(b)
            if fams is None or f not in fams:
                continue
            fams[f] -= 1
            if fams[f] == 0:
                del fams[f]
                if fams:
                    self.excess_tokens -= self.block_size
                else:
                    del self._fams[b]

    def check(self, tables: Mapping[Hashable, list[int]]) -> None:
        """Recount from the live tables (tracked blocks only); raise InvariantError."""
        if set(tables) != set(self.family):
            raise InvariantError("ledger: live sequences differ")
        counts: dict[int, dict[int, int]] = {}
        for seq_id, table in tables.items():
            f = self.family[seq_id]
            for b in table:
                if f in self._fams.get(b, ()):
                    fams = counts.setdefault(b, {})
                    fams[f] = fams.get(f, 0) + 1
        if counts != self._fams:
            raise InvariantError("ledger: family counts differ from the tables")
        excess = sum(len(f) - 1 for f in counts.values()) * self.block_size
        if excess != self.excess_tokens:
            raise InvariantError(f"ledger: excess {self.excess_tokens} != {excess}")

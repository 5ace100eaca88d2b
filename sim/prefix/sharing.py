"""Useful bytes under a prefix cache: states shared by unrelated sequences count once.

Responsibility: the allocator's fork lineage counts each *fork family* (a request and the
branches forked from it) separately, so a cached block mapped by two unrelated requests
(a prefix hit while its first user is still live) would count twice. This ledger tracks,
for every cacheable block, which families map it, and keeps ``excess_tokens`` = the
tokens counted more than once: ``useful = lineage distinct - excess``.

Invariant: ``excess_tokens = block_size * sum over blocks of (families mapping it - 1)``;
only blocks registered through ``map`` are tracked (blocks the cache can hand to another
request); a family's count on a block is the number of its members mapping it, also for a
block its members shared before it was tracked (a fork of a sequence whose KV is held back
from the cache, ``hold_back``: the fork copies blocks the cache takes later).
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
        #: live sequence -> its block table (the allocator's list, read when it is mapped)
        self._tables: dict[Hashable, list[int]] = {}
        #: untracked block -> the sequences a fork left mapping it (counted when it is mapped)
        self._untracked: dict[int, set[Hashable]] = {}
        #: tracked block -> sharers ``map`` counted with it that have not mapped it themselves
        #: (their own publication of it maps nothing new)
        self._counted: dict[int, set[Hashable]] = {}
        self._next = 0
        self.excess_tokens = 0

    def new(self, seq_id: Hashable, table: list[int] | None = None) -> None:
        """A newly admitted sequence starts its own family (``table``: its block table, the
        allocator's list as it grows; None: it is never forked)."""
        self.family[seq_id] = self._next
        self._next += 1
        if table is not None:
            self._tables[seq_id] = table

    def fork(self, parent_id: Hashable, child_id: Hashable, table: list[int]) -> None:
        """The child (``table``: its copy of the parent's table) joins the parent's family
        and maps the parent's tracked blocks; the untracked ones, which a held-back parent's
        publication may cache later, are noted for ``map`` to count each member's share."""
        f = self.family[parent_id]
        self.family[child_id] = f
        self._tables[child_id] = table
        untracked, counted = self._untracked, self._counted
        for b in table:
            fams = self._fams.get(b)
            if fams is not None and f in fams:
                fams[f] += 1
                if counted and parent_id in counted.get(b, ()):
                    counted[b].add(child_id)  # like its parent, counted, not mapped itself
            else:
                sharers = untracked.get(b)
                if sharers is None:
                    untracked[b] = {parent_id, child_id}
                else:
                    sharers.add(parent_id)
                    sharers.add(child_id)

    @property
    def has_untracked(self) -> bool:
        """Whether some untracked block is mapped by fork members (``fork`` of a sequence
        whose KV is held back): a block not yet cached may then be another member's too."""
        return bool(self._untracked)

    def map(self, seq_id: Hashable, blocks: Iterable[int]) -> set[Hashable] | None:
        """``seq_id`` maps these shareable blocks (a hit, or its own blocks being cached);
        returns the other members counted with them (sharing them since a fork, ``fork``),
        None when there are none."""
        f = self.family[seq_id]
        untracked, counted = self._untracked, self._counted
        sharers = None
        for b in blocks:
            fams = self._fams.setdefault(b, {})
            if f in fams:
                if counted and seq_id in counted.get(b, ()):
                    self._uncount(b, seq_id)  # counted when a sharer mapped it first
                else:
                    fams[f] += 1
            else:
                if fams:
                    self.excess_tokens += self.block_size
                if untracked and b in untracked:
                    others = self._sharers(b, seq_id, f)
                    fams[f] = 1 + len(others)
                    if others:
                        sharers = others if sharers is None else sharers | others
                else:
                    fams[f] = 1
        return sharers

    def _sharers(self, block: int, seq_id: Hashable, f: int) -> set[Hashable]:
        """The other members of family ``f`` mapping untracked ``block`` as ``seq_id`` maps
        it: those a fork left mapping it (and still do: a copy-on-write moves a writer off
        its shared partial last block); noted as counted."""
        sharers = self._untracked.pop(block)
        family, tables = self.family, self._tables
        others = {
            s
            for s in sharers
            if s != seq_id and family.get(s) == f and block in tables.get(s, ())
        }
        if others:
            self._counted[block] = others
        return others

    def release(self, seq_id: Hashable, table: Iterable[int]) -> None:
        """``seq_id`` is freed: it stops mapping its tracked blocks."""
        f = self.family.pop(seq_id)
        self._tables.pop(seq_id, None)
        untracked = self._untracked
        for i, b in enumerate(table):
            fams = self._fams.get(b)
            if fams is None or f not in fams:
                if untracked:
                    self._unshare(b, i, seq_id)
                continue
            if self._counted:
                self._uncount(b, seq_id)
            fams[f] -= 1
            if fams[f] == 0:
                del fams[f]
                if fams:
                    self.excess_tokens -= self.block_size
                else:
                    del self._fams[b]

    def _unshare(self, block: int, at: int, seq_id: Hashable) -> None:
        """``seq_id`` (released) no longer maps untracked ``block`` (at index ``at`` of
        its table): fewer than two sharers still mapping it need no count, so the entry
        goes, at the latest with the block's last mapper (a freed block that the pool hands
        to a new prompt starts with no entry)."""
        sharers = self._untracked.get(block)
        if sharers is not None:
            sharers.discard(seq_id)
            if not self._two_map(block, at, sharers):
                del self._untracked[block]

    def _two_map(self, block: int, at: int, sharers: set[Hashable]) -> bool:
        """Whether two of ``sharers`` still map untracked ``block``; those met on the way
        that no longer do (moved off it by a copy on write, or released) are dropped. A
        shared block is at the same index ``at`` in every table that maps it (a fork copies
        its parent's table; a table only grows or has its last block replaced), so each
        test is one look-up, and the scan stops at the second mapper."""
        tables = self._tables
        found = 0
        gone = []
        for s in sharers:
            if _maps_at(tables.get(s), at, block):
                found += 1
                if found == 2:
                    break
            else:
                gone.append(s)
        if gone:
            sharers.difference_update(gone)
        return found == 2

    def _uncount(self, block: int, seq_id: Hashable) -> None:
        """``seq_id``, counted with tracked ``block``, maps it itself now (or is released)."""
        counted = self._counted.get(block)
        if counted is not None:
            counted.discard(seq_id)
            if not counted:
                del self._counted[block]

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
        self._check_sharers(tables)

    def _check_sharers(self, tables: Mapping[Hashable, list[int]]) -> None:
        """The fork books name live sequences only: ``_tables`` holds each one's own table,
        an untracked block's sharers include at least one that maps it (the entry goes with
        its last mapper), are of one family and name every live sequence that maps it (what
        a publication counts), and a counted sharer maps its block."""
        for seq_id, table in self._tables.items():
            if tables.get(seq_id) is not table:
                raise InvariantError(f"ledger: the table kept for {seq_id!r} is not its own")
        family, untracked = self.family, self._untracked
        if untracked:
            for seq_id, table in tables.items():
                for b in table:
                    if b in untracked and seq_id not in untracked[b]:
                        raise InvariantError(f"ledger: {seq_id!r} maps noted block {b}, unnamed")
        for b, sharers in self._untracked.items():
            if b in self._fams:
                raise InvariantError(f"ledger: block {b} is tracked and noted untracked")
            live = [s for s in sharers if s in family and b in tables[s]]
            if not live:
                raise InvariantError(f"ledger: untracked block {b} noted, mapped by none")
            if len({family[s] for s in live}) > 1:
                raise InvariantError(f"ledger: untracked block {b} noted for two families")
        for b, counted in self._counted.items():
            for s in counted:
                if s not in family or b not in tables[s]:
                    raise InvariantError(f"ledger: {s!r} counted on block {b} it does not map")


def _maps_at(table: list[int] | None, at: int, block: int) -> bool:
    """Whether ``table`` (None: a released sequence) maps ``block`` at index ``at``."""
    return table is not None and len(table) > at and table[at] == block

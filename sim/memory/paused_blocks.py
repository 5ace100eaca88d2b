"""The paused slots of a paged pool, kept per change: the filled slots of the blocks that
only held (paused) sequences map (``KVSlots.paused`` of ``PagedAllocator``).

Responsibility: keep that one figure as sequences are held, resumed, freed and forked, and
as new sequences map cached blocks, at a cost that grows with the blocks whose sharing
changes (issue 25 item 3), never with a whole block table.

How. A block mapped by one table (refcount 1) is *private*: it is paused exactly while its
one mapper is held, so a sequence's private blocks move as one figure, its filled slots
less those of its tracked blocks. A block that two or more tables map is *tracked*: it
keeps the number of held tables that map it and its filled slots, every sequence that maps
it lists it among its tracked blocks, and it is paused while that number equals its
refcount. A hold or resume touches the sequence's tracked blocks only; a free, a copy on
write or a side block leaving a window touches the tracked blocks it drops; a fork or a
prefix hit tracks the blocks it shares. A block stays tracked when tables leave it, until
it returns to the pool or its last mapper is held or resumed and finds it private again:
so each block's tracking is paid once, by the change that shared it. Tracking a block
needs its private owner (``_owner``, written where a sequence takes or first maps a block).

Fill: only a table's last block is partial, and a block is never written while shared; a
block that became private again may be written by its mapper before it is found private,
so a tracked block's fill is refreshed whenever it is shared again (a fork or a hit).

Invariants (``check``): a block of refcount >= 2 is tracked; a tracked block is listed by
as many live sequences as map it (all of them), and its held count is how many of those
are held; an untracked mapped block has refcount 1 and ``_owner`` names its mapper; a
tracked block's fill is its filled slots wherever two tables or a held one map it;
``slots`` = the filled slots of the blocks all of whose tables are held.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence, Set

from sim.errors import InvariantError


class PausedBlocks:
    """Paused slots of a paged pool's blocks, per change (module docstring)."""

    __slots__ = ("slots", "_rc", "_bs", "_held", "_owner", "_held_refs", "_fill", "_tracked")

    def __init__(self, refcount: list[int], block_size: int, held: Set[Hashable]) -> None:
        self.slots = 0  # filled slots of the blocks that only held tables map
        self._rc = refcount  # the pool's refcounts, read (the allocator writes them)
        self._bs = block_size
        self._held = held  # the allocator's held sequences, read
        #: the sequence mapping each untracked block of refcount 1 (stale elsewhere)
        self._owner: list[Hashable | None] = [None] * len(refcount)
        self._held_refs: dict[int, int] = {}  # tracked block -> held tables mapping it
        self._fill: dict[int, int] = {}  # tracked block -> its filled slots
        self._tracked: dict[Hashable, set[int]] = {}  # sequence -> its tracked blocks

    def start(self, tables: Iterable[tuple[Hashable, Sequence[int], int, Sequence[int]]]) -> None:
        """Take the live sequences as they are, none held: for each, its block table, the
        filled slots of that table's last block, and its side blocks (all full)."""
        rc, owner = self._rc, self._owner
        for seq, table, last_fill, side in tables:
            for blocks, last in ((table, last_fill), (side, self._bs)):
                for i, b in enumerate(blocks):
                    if rc[b] == 1:
                        owner[b] = seq
                    else:
                        self._fill[b] = last if i == len(blocks) - 1 else self._bs
                        self._held_refs[b] = 0
                        self._tracked.setdefault(seq, set()).add(b)

    # ------------------------------------------------------------ a sequence's own
    def taken(self, seq: Hashable, blocks: Iterable[int]) -> None:
        """``seq`` took these blocks from the pool (refcount 1: private)."""
        owner = self._owner
        for b in blocks:
            owner[b] = seq

    def hold(self, seq: Hashable, filled: int) -> None:
        """``seq`` is held now; ``filled`` = its filled slots (tokens, side blocks whole)."""
        tracked = self._tracked.get(seq)
        if tracked:
            rc, refs, fill = self._rc, self._held_refs, self._fill
            alone = []
            for b in tracked:
                r = rc[b]
                if r == 1:  # the other tables left: private again (its fill stays in filled)
                    alone.append(b)
                    continue
                f = fill[b]
                filled -= f
                h = refs[b] + 1
                refs[b] = h
                if h == r:
                    self.slots += f
            if alone:
                self._untrack(seq, tracked, alone)
        self.slots += filled  # its private blocks

    def resume(self, seq: Hashable, filled: int) -> None:
        """``seq`` is active again (``filled`` as at its hold: a held sequence is not written)."""
        tracked = self._tracked.get(seq)
        if tracked:
            rc, refs, fill = self._rc, self._held_refs, self._fill
            alone = []
            for b in tracked:
                f = fill[b]
                filled -= f
                h, r = refs[b], rc[b]
                if h == r:
                    self.slots -= f
                refs[b] = h - 1
                if r == 1:  # the other tables left: private from now on
                    alone.append(b)
            if alone:
                self._untrack(seq, tracked, alone)
        self.slots -= filled

    def _untrack(self, seq: Hashable, tracked: set[int], alone: list[int]) -> None:
        """Blocks of ``tracked`` that only ``seq`` maps now (held count 0) become private."""
        refs, fill, owner = self._held_refs, self._fill, self._owner
        for b in alone:
            del refs[b], fill[b]
            owner[b] = seq
        tracked.difference_update(alone)
        if not tracked:
            del self._tracked[seq]

    # ---------------------------------------------------------- sharing changes
    def mapped(self, seq: Hashable, blocks: Sequence[int], last_fill: int) -> None:
        """New active ``seq`` maps these blocks too (a prefix hit; references taken): all
        full but the last, which holds ``last_fill``."""
        rc, refs, fill, owner = self._rc, self._held_refs, self._fill, self._owner
        mine: list[int] = []
        last = len(blocks) - 1
        for i, b in enumerate(blocks):
            f = last_fill if i == last else self._bs
            r = rc[b]
            if r == 1:  # it was cached, mapped by nobody: private to seq
                owner[b] = seq
                continue
            if b in fill:  # tracked: one more active table
                if refs[b] == r - 1:
                    self.slots -= f
            else:  # private to its owner until now
                o = owner[b]
                h = 1 if o in self._held else 0
                refs[b] = h
                if h:
                    self.slots -= f
                self._tracked.setdefault(o, set()).add(b)
            fill[b] = f
            mine.append(b)
        if mine:
            self._tracked.setdefault(seq, set()).update(mine)

    def forked(
        self, parent: Hashable, child: Hashable, table: Sequence[int], last_fill: int,
        side: Sequence[int],
    ) -> None:  # fmt: skip
        """Active ``child`` maps every block of ``parent`` (its ``table``, whose last block
        holds ``last_fill``, and its ``side`` blocks; references taken). The blocks new to
        sharing are tracked in bulk (C-level set and dict operations)."""
        rc, refs, fill, bs = self._rc, self._held_refs, self._fill, self._bs
        last = table[-1] if table else None
        tracked = self._tracked.setdefault(parent, set())
        for b in tracked:  # shared already: one more active table
            f = last_fill if b == last else bs
            if refs[b] == rc[b] - 1:
                self.slots -= f
            fill[b] = f
        new = set(table)
        new.update(side)
        new.difference_update(tracked)  # private to parent until now
        h = 1 if parent in self._held else 0
        refs.update(dict.fromkeys(new, h))
        fill.update(dict.fromkeys(new, bs))
        if last in new:
            fill[last] = last_fill
        if h:  # they were paused with their held parent; the child is active
            self.slots -= len(new) * bs - (bs - last_fill if last in new else 0)
        tracked |= new
        if tracked:
            self._tracked[child] = set(tracked)
        else:
            del self._tracked[parent]

    def unmapped(self, seq: Hashable, blocks: Iterable[int]) -> None:
        """Active ``seq`` dropped its reference to each of ``blocks`` (refcounts lowered):
        a copy on write's old block, side blocks that left a window."""
        tracked = self._tracked.get(seq)
        if not tracked:
            return
        for b in blocks:
            if b in tracked:
                tracked.discard(b)
                self._left(b)
        if not tracked:
            del self._tracked[seq]

    def released(self, seq: Hashable) -> None:
        """Active ``seq`` was freed (every reference dropped): only its tracked blocks can
        change state; its private ones went back to the pool."""
        for b in self._tracked.pop(seq, ()):
            self._left(b)

    def _left(self, b: int) -> None:
        """An active table stopped mapping tracked block ``b``."""
        r = self._rc[b]
        if r == 0:  # back in the pool (free or cached): nothing maps it
            del self._held_refs[b], self._fill[b]
        elif self._held_refs[b] == r:  # every table left is held
            self.slots += self._fill[b]

    # ------------------------------------------------------------------- check
    def check(
        self,
        tables: Mapping[Hashable, Sequence[int]],
        sides: Mapping[Hashable, Sequence[int]],
        fills: Mapping[int, int],
    ) -> None:
        """Raise ``InvariantError`` if the tracking differs from a scan of the live
        ``tables`` and ``sides`` (``fills``: each mapped block's filled slots)."""
        rc, held = self._rc, self._held
        listed: dict[int, int] = {}
        held_listed: dict[int, int] = {}
        if not self._tracked.keys() <= tables.keys():
            raise InvariantError("paused blocks: tracked blocks of a sequence that is not live")
        for seq, table in tables.items():
            tracked = self._tracked.get(seq, set())
            blocks = (*table, *sides.get(seq, ()))
            if not tracked <= set(blocks):
                raise InvariantError(f"paused blocks: {seq!r} tracks blocks it does not map")
            for b in blocks:
                if b in tracked:
                    listed[b] = listed.get(b, 0) + 1
                    held_listed[b] = held_listed.get(b, 0) + (seq in held)
                elif rc[b] != 1 or self._owner[b] != seq:
                    raise InvariantError(
                        f"paused blocks: untracked block {b} of {seq!r} has refcount {rc[b]}, "
                        f"owner {self._owner[b]!r}"
                    )
        if listed.keys() != self._fill.keys() or listed.keys() != self._held_refs.keys():
            raise InvariantError("paused blocks: tracked blocks differ from the sequences' lists")
        for b, n in listed.items():
            if n != rc[b] or held_listed[b] != self._held_refs[b]:
                raise InvariantError(
                    f"paused blocks: block {b} listed {n} times, held {self._held_refs[b]}; "
                    f"refcount {rc[b]}, held by a scan {held_listed[b]}"
                )
            if (n > 1 or held_listed[b]) and self._fill[b] != fills[b]:
                raise InvariantError(
                    f"paused blocks: block {b} fill {self._fill[b]}, scan {fills[b]}"
                )

"""Contiguous kinds: one buffer per sequence in an address space with holes.

Responsibility: the behaviour static, contiguous and buddy allocators share. A sequence
owns one contiguous buffer (``start``, ``size`` in token slots; capacity = size). An append
past capacity grows the buffer once to the smallest doubling that fits; growth follows the
chapter's three steps (rule 3.2): reserve the new buffer while the old one still exists
(the transient N + 2N peak is recorded), copy the written tokens (``bytes_copied``), release
the old buffer as a hole. With ``grow_in_place`` a buffer first tries to extend into the
hole right after it (no copy). A fork is a deep copy: the child gets a buffer of the
parent's capacity and the parent's tokens are copied.

Nothing is shared (a fork copies), so ``kv_slots`` is counters alone: a buffer's slots
past its tokens are unfilled, a held sequence's tokens are paused.

Hybrid models (``use_kv_groups``): a buffer holds the layers that keep every token; each
sequence also reserves a *side* extent in the same space for its sliding-window,
chunked-local and state-space groups, sized for the peak those groups reach within the
buffer's capacity (``side_slots``: a window's ``min(capacity, w)`` tokens, a chunk's, one
state), grown (moved) with the buffer; its slots count as filled: paused while its
sequence is held, else active.

Invariant: each live sequence has exactly one buffer with tokens <= size (and, on a hybrid
model, one side extent of ``side_slots(size)``); buffers, side extents and the space's free
extents tile the addressable slots; ``_allocated_tokens`` = sum of their sizes.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any, Protocol

from sim.errors import InvariantError
from sim.memory.base import Allocator, Books, checked_count
from sim.memory.metrics import ADMITTED, MISSED, AllocResult, KVSlots

GROWTH = ("double",)


class AddressSpace(Protocol):
    """What a buffer allocator needs from its space (``ExtentSpace``, ``BuddySpace``)."""

    total_tokens: int
    free_tokens: int

    def reserved_size(self, n_tokens: int) -> int: ...
    def largest_reservable(self) -> int: ...
    def can_reserve(self, n_tokens: int) -> bool: ...
    def reserve(self, n_tokens: int) -> tuple[int, int] | None: ...
    def release(self, start: int, size: int) -> None: ...
    def can_grow_in_place(self, start: int, size: int, new_size: int) -> bool: ...
    def grow_in_place(self, start: int, size: int, new_size: int) -> bool: ...
    def extents(self) -> list[int]: ...
    def check(self, reserved: Any) -> None: ...


def pool_slots(pool_bytes: float, kv_bytes_per_token: float) -> int:
    """Whole token slots in the pool; the rest is the remainder."""
    return math.floor(pool_bytes / kv_bytes_per_token)


class BufferAllocator(Allocator):
    """Base of the contiguous kinds; subclasses set ``_space`` and the capacity policy."""

    _space: AddressSpace
    grow_in_place: bool = False

    def __init__(self, *, pool_bytes: float, kv_bytes_per_token: float) -> None:
        super().__init__(pool_bytes=pool_bytes, kv_bytes_per_token=kv_bytes_per_token)
        self._buffers: dict[Hashable, tuple[int, int]] = {}  # seq -> (start, size) in slots
        self._allocated_tokens = 0
        self._side: dict[Hashable, tuple[int, int]] = {}  # seq -> its side extent (hybrid)
        self._side_tokens = 0  # slots of every side extent
        self._held_side_tokens = 0  # of which held (paused) sequences' (fixed while held)

    counts_kv_groups = True

    def use_kv_groups(self, groups) -> None:
        """Reserve a hybrid model's side groups per sequence (``KVGroups``) in this empty
        allocator; a dense model's groups change nothing."""
        if groups is None or not groups.hybrid:
            return
        if self._buffers or self.kv_groups is not None:
            raise ValueError(f"{self.kind}: set the KV groups of an empty allocator once")
        self.kv_groups = groups

    def side_slots(self, capacity: int) -> int:
        """Slots a buffer of ``capacity`` tokens reserves for the side groups' peak."""
        groups = self.kv_groups
        if groups is None:
            return 0
        peak = sum(g.state_bytes or min(capacity, g.window_tokens) * g.bytes_per_token
                   for g in groups.side)  # fmt: skip
        return math.ceil(peak / self.kv_bytes_per_token)

    def _reserve_side(self, seq_id: Hashable, capacity: int) -> tuple[int, int] | None | bool:
        """The side extent a ``capacity``-token buffer of ``seq_id`` needs beyond the one it
        has: True when it has enough, the new extent reserved (not yet booked), or None
        when the space has no room."""
        want = self.side_slots(capacity)
        old = self._side.get(seq_id)
        if want == 0 or (old is not None and old[1] >= want):
            return True
        return self._space.reserve(want)

    def _book_side(self, seq_id: Hashable, placed: tuple[int, int] | None | bool) -> None:
        """Book a side extent ``_reserve_side`` returned (moving from the old one)."""
        if not isinstance(placed, tuple):
            return
        self._release_side(seq_id)
        self._side[seq_id] = placed
        self._side_tokens += placed[1]
        self._allocated_tokens += placed[1]

    def _release_side(self, seq_id: Hashable) -> None:
        old = self._side.pop(seq_id, None)
        if old is not None:
            self._space.release(*old)
            self._side_tokens -= old[1]
            self._allocated_tokens -= old[1]

    def _held_changed(self, seq_id: Hashable, tokens: int, held: bool) -> None:
        """A held sequence's side extent is paused too (it does not change while held)."""
        side = self._side.get(seq_id)
        if side is not None:
            self._held_side_tokens += side[1] if held else -side[1]

    # --------------------------------------------------------- capacity policy hooks
    def _initial_tokens(self, n_tokens: int) -> int | None:
        """Slots to request for a prompt of ``n_tokens``; None = can never fit."""
        return n_tokens

    def _grown_tokens(self, capacity: int, needed: int) -> int | None:
        """Capacity after growth: the smallest doubling of ``capacity`` >= ``needed``."""
        new = capacity
        while new < needed:
            new *= 2
        return new

    # ------------------------------------------------------------------- operations
    def _allocate(self, seq_id: Hashable, n_tokens: int, content: Any) -> AllocResult:
        want = self._initial_tokens(n_tokens)
        placed = None if want is None else self._space.reserve(want)
        if placed is None:
            return MISSED
        return self._placed(seq_id, placed)

    def _placed(self, seq_id: Hashable, placed: tuple[int, int]) -> AllocResult:
        """Book a new sequence's buffer, and its side extent (a miss releases both)."""
        side = True if self.kv_groups is None else self._reserve_side(seq_id, placed[1])
        if side is None:
            self._space.release(*placed)
            return MISSED
        self._book_side(seq_id, side)
        self._buffers[seq_id] = placed
        self._allocated_tokens += placed[1]
        self._count.buffer_allocs += 1
        return ADMITTED

    def _append(self, seq_id: Hashable, tokens: int, n_tokens: int, content: Any) -> bool:
        start, size = self._buffers[seq_id]
        needed = tokens + n_tokens
        if needed <= size:
            return True
        new = self._grown_tokens(size, needed)
        if new is None:
            return False
        new_size = self._space.reserved_size(new)
        side = True if self.kv_groups is None else self._reserve_side(seq_id, new_size)
        if side is None:
            return False
        if self.grow_in_place and self._space.grow_in_place(start, size, new_size):
            self._buffers[seq_id] = (start, new_size)
            self._allocated_tokens += new_size - size
            self._book_side(seq_id, side)
            return True
        placed = self._space.reserve(new)  # step 1: the old buffer still exists
        if placed is None:
            if isinstance(side, tuple):  # a miss changes nothing
                self._space.release(*side)
            return False
        self._book_side(seq_id, side)
        m = self.kv_bytes_per_token
        self._note_peak((self._allocated_tokens + placed[1]) * m)  # transient N + 2N
        self._add_copy(tokens * m)  # step 2: copy the written tokens
        self._space.release(start, size)  # step 3: the old buffer becomes a hole
        self._buffers[seq_id] = placed
        self._allocated_tokens += placed[1] - size
        self._count.buffer_allocs += 1
        self._count.buffer_frees += 1
        return True

    def _fork(self, parent_id: Hashable, child_id: Hashable, tokens: int) -> bool:
        placed = self._space.reserve(self._buffers[parent_id][1])
        if placed is None or not self._placed(child_id, placed):
            return False
        self._add_copy(tokens * self.kv_bytes_per_token)  # deep copy of the parent's tokens
        return True

    def _free(self, seq_id: Hashable, tokens: int) -> None:
        start, size = self._buffers.pop(seq_id)
        self._space.release(start, size)
        self._allocated_tokens -= size
        self._count.buffer_frees += 1
        if self._side:
            self._release_side(seq_id)

    # ---------------------------------------------------------------------- queries
    def can_allocate(self, n_tokens: int, *, content: Any = None) -> bool:
        want = self._initial_tokens(checked_count(n_tokens, "can_allocate", minimum=1))
        return want is not None and self._can_place(want)

    def _can_place(self, want: int) -> bool:
        """Whether a new buffer of ``want`` slots and its side extent both fit now (as
        ``_placed`` books them: the buffer first). A hybrid model's answer reserves the
        buffer and gives it back: reserve then release restores the space exactly."""
        if self.kv_groups is None:
            return self._space.can_reserve(want)
        placed = self._space.reserve(want)
        if placed is None:
            return False
        side = self.side_slots(placed[1])
        ok = side == 0 or self._space.can_reserve(side)
        self._space.release(*placed)
        return ok

    def can_append(self, seq_id: Hashable, n_tokens: int = 1) -> bool:
        tokens = self._live_tokens(seq_id, "can_append")
        start, size = self._buffers[seq_id]
        needed = tokens + checked_count(n_tokens, "can_append")
        if needed <= size:
            return True
        new = self._grown_tokens(size, needed)
        if new is None:
            return False
        new_size = self._space.reserved_size(new)
        # as ``_append``: a larger side extent is reserved first (the old one still held)
        side = True if self.kv_groups is None else self._reserve_side(seq_id, new_size)
        if side is None:
            return False
        ok = (
            self.grow_in_place and self._space.can_grow_in_place(start, size, new_size)
        ) or self._space.can_reserve(new)
        if isinstance(side, tuple):
            self._space.release(*side)
        return ok

    def can_fork(self, parent_id: Hashable) -> bool:
        self._live_tokens(parent_id, "can_fork")
        return self._can_place(self._buffers[parent_id][1])

    def blocks_needed(self, seq_id: Hashable, n_tokens: int = 1) -> int:
        """1 when the append needs a new (larger) buffer, else 0."""
        tokens = self._live_tokens(seq_id, "blocks_needed")
        return int(tokens + checked_count(n_tokens, "blocks_needed") > self._buffers[seq_id][1])

    def seq_capacity_tokens(self, seq_id: Hashable) -> int:
        """Slots reserved for a live sequence (its buffer size)."""
        self._live_tokens(seq_id, "seq_capacity_tokens")
        return self._buffers[seq_id][1]

    def seq_buffer(self, seq_id: Hashable) -> tuple[int, int]:
        """(start slot, size in slots) of a live sequence's buffer."""
        self._live_tokens(seq_id, "seq_buffer")
        return self._buffers[seq_id]

    @property
    def max_sequence_tokens(self) -> int:
        return self._space.largest_reservable()

    # ---------------------------------------------------------------------- books
    def _allocated_bytes(self) -> float:
        return self._allocated_tokens * self.kv_bytes_per_token

    def kv_slots(self) -> KVSlots:
        """O(1): buffers less the tokens written are unfilled; held tokens are paused."""
        allocated, space = self._allocated_tokens, self._space
        unfilled = allocated - self._side_tokens - self._lineage.logical_tokens
        paused = self._held_tokens + self._held_side_tokens
        if self.kv_groups is not None:  # side slots that hold no side state are unfilled
            unfilled += self._side_waste_slots(allocated - unfilled - paused)
        return KVSlots(allocated, unfilled, paused, 0, space.free_tokens, space.total_tokens)

    def _seq_side_slots(self, seq_id: Hashable) -> int:
        side = self._side.get(seq_id)
        return side[1] if side else 0

    def free_bytes(self) -> float:
        return self._space.free_tokens * self.kv_bytes_per_token  # ``_books`` reads it here

    def _books(self) -> Books:
        m = self.kv_bytes_per_token
        return Books(
            allocated_bytes=self._allocated_tokens * m,
            free_bytes=self.free_bytes(),
            cached_bytes=0,
            remainder_bytes=self.pool_bytes - self._space.total_tokens * m,
            free_extents=tuple(h * m for h in self._space.extents()),
        )

    def _side_allocated_bytes(self) -> float:
        return self._side_tokens * self.kv_bytes_per_token

    def _check_kind(self) -> None:
        self._space.check([*self._buffers.values(), *self._side.values()])
        sides = sum(size for _, size in self._side.values())
        if sum(size for _, size in self._buffers.values()) + sides != self._allocated_tokens:
            raise InvariantError(f"{self.kind}: allocated slots != sum of buffer sizes")
        if sides != self._side_tokens or not set(self._side) <= set(self._buffers):
            raise InvariantError(f"{self.kind}: side extents out of step with the buffers")
        if sum(self._side[s][1] for s in self._held if s in self._side) != self._held_side_tokens:
            raise InvariantError(f"{self.kind}: held side slots differ from a scan")
        for seq_id, (_, size) in self._buffers.items():
            if self._side.get(seq_id, (0, 0))[1] < self.side_slots(size):
                raise InvariantError(f"{self.kind}: sequence {seq_id!r}'s side extent is short")
        if set(self._buffers) != set(self._tokens):
            raise InvariantError(f"{self.kind}: buffers and live sequences differ")
        for seq_id, (_, size) in self._buffers.items():
            if self._tokens[seq_id] > size:
                raise InvariantError(f"{self.kind}: sequence {seq_id!r} overflows its buffer")

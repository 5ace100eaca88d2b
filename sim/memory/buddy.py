"""``buddy``: power-of-two blocks with split and merge (rule 3.3).

The addressable pool is ``floor(pool_slots / min_block_tokens)`` units of
``min_block_tokens`` slots; it is covered by the largest aligned power-of-two blocks (a
10-unit pool is an 8-unit and a 2-unit block), so a pool that is not a power of two loses
nothing. A reservation is rounded up to ``min_block_tokens * 2^k`` slots and taken from the
lowest-addressed free block of the smallest sufficient order, splitting it in halves; a
release merges a block with its buddy while the buddy is free at the same order. Growth
and forks follow ``buffers`` (doubling = the next order); ``grow_in_place`` absorbs free
upper buddies instead of moving.

Free memory is reported as contiguous holes (adjacent free blocks form one hole, as
E9's 768 MiB hole does); a request also needs alignment, so a hole can be larger than any
block the allocator can hand out: Phi_ext (F9) is then a lower bound of buddy's refusals.

``reservation`` (``contiguous.Reserving``) sizes a sequence's first block for its future
(window, prompt + the next power of two of the output, or exact true length), rounded up
to a buddy block: the rounding (``reserve_rounding_tokens``) is the allocator's, not the
policy's (the vLLM paper's Orca baselines place reservations this way).

Invariant: free blocks are aligned to their size, never have a free buddy of the same order
(they would have merged), and with the live blocks tile the addressable units exactly.
"""

from __future__ import annotations

from bisect import bisect_left, insort

from sim.errors import InvariantError
from sim.memory.base import flag, positive_int
from sim.memory.buffers import pool_slots
from sim.memory.contiguous import Reserving
from sim.memory.extents import _check_tiling


class BuddySpace:
    """Buddy blocks over ``total_tokens`` slots, addressed in units of ``unit`` slots."""

    def __init__(self, total_tokens: int, unit: int) -> None:
        self.unit = unit
        self.total_units = total_tokens // unit
        self.total_tokens = self.total_units * unit  # the rest is remainder
        top = max(self.total_units.bit_length(), 1)
        self._free: list[list[int]] = [[] for _ in range(top)]  # order -> sorted addresses
        self._order_of: dict[int, int] = {}  # free block address -> order
        self.free_tokens = 0
        addr = 0
        for order in range(top - 1, -1, -1):  # largest first keeps every block aligned
            if self.total_units >> order & 1:
                self._push(addr, order)
                addr += 1 << order

    # -------------------------------------------------------------------- free lists
    def _push(self, addr: int, order: int) -> None:
        insort(self._free[order], addr)
        self._order_of[addr] = order
        self.free_tokens += (1 << order) * self.unit

    def _remove(self, addr: int, order: int) -> None:
        lst = self._free[order]
        del lst[bisect_left(lst, addr)]
        del self._order_of[addr]
        self.free_tokens -= (1 << order) * self.unit

    def _order(self, n_tokens: int) -> int:
        units = -(-n_tokens // self.unit)
        return (units - 1).bit_length()

    def _smallest_free_order(self, order: int) -> int | None:
        for j in range(order, len(self._free)):
            if self._free[j]:
                return j
        return None

    # ------------------------------------------------------------------ space protocol
    def reserved_size(self, n_tokens: int) -> int:
        return (1 << self._order(n_tokens)) * self.unit

    def largest_reservable(self) -> int:
        return (1 << (self.total_units.bit_length() - 1)) * self.unit if self.total_units else 0

    def can_reserve(self, n_tokens: int) -> bool:
        return self._smallest_free_order(self._order(n_tokens)) is not None

    def reserve(self, n_tokens: int) -> tuple[int, int] | None:
        order = self._order(n_tokens)
        j = self._smallest_free_order(order)
        if j is None:
            return None
        addr = self._free[j][0]
        self._remove(addr, j)
        while j > order:  # split, keeping the lower half, freeing the upper
            j -= 1
            self._push(addr + (1 << j), j)
        return addr * self.unit, (1 << order) * self.unit

    def release(self, start: int, size: int) -> None:
        addr, order = start // self.unit, (size // self.unit).bit_length() - 1
        if addr in self._order_of:
            raise InvariantError(f"buddy: release of block at unit {addr}, which is free")
        while True:
            buddy = addr ^ (1 << order)
            if self._order_of.get(buddy) != order:
                break
            self._remove(buddy, order)
            addr = min(addr, buddy)
            order += 1
        self._push(addr, order)

    def _upper_buddies(self, addr: int, order: int, new_order: int) -> list[int] | None:
        found = []
        for j in range(order, new_order):
            if addr >> j & 1:  # the block is an upper half: it cannot grow upwards
                return None
            buddy = addr + (1 << j)
            if self._order_of.get(buddy) != j:
                return None
            found.append(buddy)
        return found

    def can_grow_in_place(self, start: int, size: int, new_size: int) -> bool:
        addr, order = start // self.unit, (size // self.unit).bit_length() - 1
        new_order = (new_size // self.unit).bit_length() - 1
        return self._upper_buddies(addr, order, new_order) is not None

    def grow_in_place(self, start: int, size: int, new_size: int) -> bool:
        addr, order = start // self.unit, (size // self.unit).bit_length() - 1
        new_order = (new_size // self.unit).bit_length() - 1
        buddies = self._upper_buddies(addr, order, new_order)
        if buddies is None:
            return False
        for j, buddy in enumerate(buddies, start=order):
            self._remove(buddy, j)
        return True

    def free_blocks(self) -> list[tuple[int, int]]:
        """(start slot, size in slots) of every free buddy block, address order."""
        return [(a * self.unit, (1 << o) * self.unit) for a, o in sorted(self._order_of.items())]

    def extents(self) -> list[int]:
        """Holes: runs of adjacent free blocks, in slots, address order."""
        holes: list[int] = []
        end = None
        for addr, order in sorted(self._order_of.items()):
            n = 1 << order
            if addr == end:
                holes[-1] += n * self.unit
            else:
                holes.append(n * self.unit)
            end = addr + n
        return holes

    def check(self, reserved) -> None:
        u = self.unit
        pieces = []
        for addr, order in self._order_of.items():
            if addr % (1 << order):
                raise InvariantError(f"buddy: free block at unit {addr} not aligned")
            if self._order_of.get(addr ^ (1 << order)) == order:
                raise InvariantError(f"buddy: free buddies at units {addr} unmerged")
            if addr not in self._free[order]:
                raise InvariantError(f"buddy: free block {addr} missing from its list")
            pieces.append((addr, 1 << order))
        if sum(len(lst) for lst in self._free) != len(self._order_of):
            raise InvariantError("buddy: free lists and free map differ")
        if sum(n for _, n in pieces) * u != self.free_tokens:
            raise InvariantError("buddy: free_tokens != sum of free blocks")
        for start, size in reserved:
            n = size // u
            if start % u or size % u or n & (n - 1) or (start // u) % n:
                raise InvariantError(f"buddy: live block ({start}, {size}) is not a buddy block")
            pieces.append((start // u, n))
        _check_tiling(pieces, self.total_units, "buddy")


class BuddyAllocator(Reserving):
    """Power-of-two contiguous blocks per sequence, doubling growth; ``reservation`` as
    ``contiguous`` (the reserve is then rounded up to a buddy block)."""

    kind = "buddy"

    def __init__(
        self,
        *,
        pool_bytes: float,
        kv_bytes_per_token: float,
        min_block_tokens: int = 16,
        grow_in_place: bool = False,
        reservation: str = "none",
        window_tokens: int | None = None,
    ) -> None:
        super().__init__(pool_bytes=pool_bytes, kv_bytes_per_token=kv_bytes_per_token)
        self.min_block_tokens = positive_int(min_block_tokens, "min_block_tokens")
        self.grow_in_place = flag(grow_in_place, "grow_in_place")
        self._set_reservation(reservation, window_tokens)
        slots = pool_slots(self.pool_bytes, self.kv_bytes_per_token)
        self._space = BuddySpace(slots, self.min_block_tokens)

    def free_blocks(self) -> list[tuple[int, int]]:
        """(start slot, size in slots) of every free buddy block (for tests and pictures)."""
        return self._space.free_blocks()

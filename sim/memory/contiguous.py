"""``contiguous``: std::vector-style buffers that double (F12, rule 3.2), optionally
with an Orca-style reservation (Kwon et al. 2023, Fig. 2).

A sequence is admitted with a buffer of exactly its prompt; an append past capacity grows
once to the smallest doubling that fits, by reserving the new buffer while the old one
exists (transient N + 2N), copying, and leaving the old buffer as a hole (``buffers``).
``placement`` picks the hole (``first_fit`` lowest address, ``best_fit`` smallest hole,
ties to the lowest address); ``grow_in_place`` (default off, as std::vector) first tries
the adjacent hole.

``reservation`` (``Reserving``, shared with ``buddy``) sizes the first buffer for the
future instead of the prompt alone (the vLLM paper's Orca baselines, Kwon et al. 2023,
section 6.1): ``window`` reserves ``window_tokens`` (the longest sequence; Orca-Max),
``pow2`` the prompt plus the next power of two of the sequence's true output length
(Orca-Pow2: "over-reserves the space for outputs by at most 2x", an output of 25 tokens
gets 32 slots), never past ``window_tokens`` when that is set (no sequence grows beyond
it), ``oracle`` exactly the true final length (Orca-Oracle); the final length reaches
``allocate`` as its declared ``final_tokens`` argument (the KV manager passes prompt +
output limit). ``none`` (the default) is the plain behaviour above. Without
``final_tokens``, ``pow2`` and ``oracle`` reserve the prompt; ``window`` always reserves
the window. The address space may round a reserve up (``buddy``: to a power-of-two block;
``reserve_rounding_tokens``); the allocator study counts that rounding as the allocator's
external fragmentation, not as the policy's over-reservation (``sim.report.pool``).

Invariant: as ``buffers``; without a reservation, capacity = prompt * 2^k for the number
k of growths; with one, a buffer starts at least as large as its reservation.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from sim.errors import ConfigError
from sim.memory.base import choice, flag, positive_int
from sim.memory.buffers import GROWTH, BufferAllocator, pool_slots
from sim.memory.extents import PLACEMENTS, ExtentSpace
from sim.memory.metrics import MISSED, AllocResult

#: the reservation policies of the contiguous kinds (see the module docstring)
RESERVATIONS = ("none", "window", "pow2", "oracle")


class Reserving(BufferAllocator):
    """The ``reservation`` option of a buffer kind (``contiguous``, ``buddy``)."""

    reservation: str = "none"
    window_tokens: int | None = None

    def _set_reservation(self, reservation: str, window_tokens: int | None) -> None:
        self.reservation = choice(reservation, "reservation", RESERVATIONS)
        if window_tokens is not None:
            window_tokens = positive_int(window_tokens, "window_tokens")
        if self.reservation == "window" and window_tokens is None:
            raise ConfigError(
                "reservation: window needs window_tokens (the longest sequence, e.g. the "
                "model's maximum length)",
                field="window_tokens",
            )
        self.window_tokens = window_tokens

    def reserve_tokens(self, n_tokens: int, final_tokens: int | None) -> int:
        """Slots the policy asks for a prompt of ``n_tokens`` expected to reach
        ``final_tokens`` (before the address space rounds it)."""
        r = self.reservation
        if r == "window":
            return max(self.window_tokens, n_tokens)
        if final_tokens is None or r == "none":
            return n_tokens
        final = max(final_tokens, n_tokens)
        if r == "oracle":
            return final
        output = final - n_tokens  # pow2 rounds the output, not prompt + output
        reserve = n_tokens + (1 << (output - 1).bit_length() if output else 0)
        if self.window_tokens is not None:  # slots past the longest sequence never fill
            reserve = min(reserve, max(self.window_tokens, final))
        return reserve

    def reserve_rounding_tokens(self, n_tokens: int, final_tokens: int | None) -> int:
        """Slots the address space adds to the policy's reserve for a new sequence (a
        ``buddy`` block beyond it; 0 on ``contiguous``): held by the sequence, asked for by
        no policy."""
        reserve = self.reserve_tokens(n_tokens, final_tokens)
        return self._space.reserved_size(reserve) - reserve

    def _initial_tokens(self, n_tokens: int) -> int | None:
        return self.reserve_tokens(n_tokens, None)

    def _allocate_reserved(
        self, seq_id: Hashable, n_tokens: int, content: Any, final_tokens: int
    ) -> AllocResult:
        placed = self._space.reserve(self.reserve_tokens(n_tokens, final_tokens))
        if placed is None:
            return MISSED
        return self._placed(seq_id, placed)


class ContiguousAllocator(Reserving):
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
        reservation: str = "none",
        window_tokens: int | None = None,
    ) -> None:
        super().__init__(pool_bytes=pool_bytes, kv_bytes_per_token=kv_bytes_per_token)
        self.growth = choice(growth, "growth", GROWTH)
        self.placement = choice(placement, "placement", PLACEMENTS)
        self.grow_in_place = flag(grow_in_place, "grow_in_place")
        self._set_reservation(reservation, window_tokens)
        self._space = ExtentSpace(
            pool_slots(self.pool_bytes, self.kv_bytes_per_token), self.placement
        )

"""Result objects of the allocator layer: allocation results, metrics, per-step activity,
and the prefix-cache view of a paged allocator composed with a prefix index.

Invariant: every byte figure is in bytes (``tokens * kv_bytes_per_token``), every ratio is
a plain fraction in [0, 1] or ``None`` when undefined; these objects are immutable
snapshots, so a caller can keep them in a time series without copying.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True, slots=True)
class AllocResult:
    """Outcome of ``allocate``: truthy when the sequence was admitted, falsy on a miss."""

    ok: bool  # admitted; False = does not fit, nothing changed
    matched_tokens: int = 0  # prompt tokens served from a prefix cache (0 without one)

    def __bool__(self) -> bool:
        return self.ok


#: shared results of kinds without a prefix cache (no allocation per call)
ADMITTED = AllocResult(True)
MISSED = AllocResult(False)


class MemoryMetrics(NamedTuple):
    """State of one allocator at one instant (F7-F10). A named tuple: one is made at every
    engine decision for the memory table, and a tuple is built at once where a frozen
    dataclass sets its 17 fields one ``object.__setattr__`` at a time."""

    pool_bytes: float  # the pool the allocator was given (M_pool)
    useful_bytes: float  # distinct token states resident (a CoW-shared prefix counts once)
    logical_bytes: float  # F7: sum of every live sequence's tokens + side states (logical/useful = sharing gain)
    allocated_bytes: float  # reserved: whole buffers or whole blocks of live sequences
    free_bytes: float  # reusable now (free extents or free blocks)
    cached_bytes: float  # dormant blocks a prefix cache keeps for reuse (0 without one)
    remainder_bytes: float  # what does not make a whole slot or block; never usable
    free_extents: tuple[float, ...]  # sizes of contiguous free holes, address order
    largest_free_bytes: float  # largest free hole (paged: all free bytes)
    eta_alloc: float | None  # F8 useful/allocated; None when nothing is allocated
    eta_effective: float  # F10 useful/pool
    phi_ext: float | None  # F9 for request_bytes; None without a request or with nothing free
    peak_allocated_bytes: float  # max allocated so far, transient growth peaks included
    bytes_copied: float  # cumulative: growth copies, deep-copy forks, CoW blocks
    cow_copies: int  # cumulative copy-on-write block copies
    num_sequences: int  # live sequences
    #: allocated bytes of a hybrid model's sliding-window, chunked-local and state-space
    #: groups (their blocks beside the block table; 0 for a dense model or a kind that
    #: does not count groups)
    side_allocated_bytes: float = 0

    def as_dict(self) -> dict:
        """Plain dict (free_extents as a list) for JSON and DataFrames."""
        d = self._asdict()
        d["free_extents"] = list(self.free_extents)
        return d


class KVSlots(NamedTuple):
    """Where the pool's usable token slots are, physically (``Allocator.kv_slots``): the
    same count on every GPU of the instance (a slot is one token's KV, split over them).

    ``allocated + cached + free = usable``; of ``allocated``, ``unfilled`` slots hold no
    token (the rest of partly filled blocks, reserved but unused buffer slots), ``paused``
    filled slots belong to blocks or buffers only held (paused) sequences map, and the rest
    are filled slots an active sequence maps (a block shared by an active and a paused
    sequence is active). A block mapped by several tables counts once.
    """

    allocated: int  # slots of live sequences' blocks or buffers
    unfilled: int  # of which hold no token (internal waste)
    paused: int  # of which are filled and mapped only by held (paused) sequences
    cached: int  # slots of dormant blocks a prefix cache keeps (refcount 0)
    free: int  # slots free for reuse now
    usable: int  # slots of whole blocks or slots the pool holds (pool less its remainder)


@dataclass(frozen=True, slots=True)
class PrefixMetrics:
    """Prefix-cache view of an allocator at one instant (bytes unless stated); what
    ``Allocator.prefix_metrics()`` returns for a kind with a prefix index (F17)."""

    requests: int  # admitted requests recorded
    prompt_tokens: int
    matched_tokens: int
    hit_tokens: int
    match_rate: float  # matched / prompt (before the cap and truncation)
    hit_rate: float  # F17: served / prompt
    cached_bytes: float  # dormant blocks holding reusable content
    active_bytes: float  # blocks mapped by live sequences
    evicted_blocks: int  # cumulative
    cow_tail_copies: int  # cumulative partial-tail copies (radix ``cow_tail``)


class Activity(NamedTuple):
    """What the allocator did since the previous ``take_activity()``: for the cost model.
    A tuple in field order, so that it is the difference of two counter snapshots, taken
    every step, made in one pass (``Allocator.take_activity``)."""

    bytes_copied: float = 0  # device-to-device bytes copied (growth, deep fork, CoW)
    cow_copies: int = 0  # copy-on-write block copies
    buffer_allocs: int = 0  # contiguous buffers reserved (a cudaMalloc each)
    buffer_frees: int = 0  # contiguous buffers released (a cudaFree each)
    blocks_taken: int = 0  # blocks taken from the free queue
    blocks_returned: int = 0  # blocks whose refcount reached zero

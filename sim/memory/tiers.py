"""Memory tiers below HBM: a pinned host-DRAM frame pool and an NVMe tier (rules 3.12-3.14).

Responsibility: where an offloaded block lives. ``FramePool`` is a finite pool of
fixed-size frames in one tier (host DRAM or NVMe), owned by sequences; ``TieredBlockTable``
maps each sequence's logical blocks to ``BlockFrame``s tagged with their tier, so the
engine can tell which blocks a step may read (only HBM ones) and remap entries when a
copy completes.

Sizes: a frame holds one KV block of the replica (block tokens x KV bytes per token, all
TP ranks): every rank offloads its own pages, so an MLA latent or a replicated KV head,
identical on several ranks, is stored once per rank, as vLLM's OffloadingConnector sizes
its host blocks (docs/pause_policies.md, "What host DRAM and NVMe store"). The host pool is a
pre-allocated pinned buffer (``host_dram_bytes x pinned_host_fraction``), never pageable
memory: a DMA from pageable memory would fault and collapse the link (rule 3.12).

Invariants (``check_invariants``):
  * free + used = capacity frames in every pool; capacity is never exceeded;
  * every frame is free exactly once or owned by exactly one sequence;
  * an allocation is all-or-nothing: a miss returns False and changes nothing; misuse (a
    negative count, freeing an owner that holds nothing) raises ``AllocatorError``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable
from enum import IntEnum
from typing import NamedTuple

from sim.errors import InvariantError
from sim.memory.errors import AllocatorError
from sim.profiles.schema import NodeProfile


class Tier(IntEnum):
    """Where a block's bytes are. Only HBM blocks can be read by a step's kernels."""

    HBM = 0
    HOST = 1
    NVME = 2


TIER_GPU = Tier.HBM  # the chapter's code name for the same tier (rule 3.14)


class BlockFrame(NamedTuple):
    """One block-table entry: the tier and the frame (block id) inside that tier."""

    tier: Tier
    frame: int


class FramePool:
    """``num_frames`` frames of ``frame_bytes`` in one tier; FIFO reuse of freed frames."""

    def __init__(self, tier: Tier, num_frames: int, frame_bytes: float) -> None:
        if tier == Tier.HBM:
            raise ValueError("HBM blocks belong to the allocator, not to a frame pool")
        if num_frames < 0 or frame_bytes <= 0:
            raise ValueError(
                f"need num_frames >= 0 and frame_bytes > 0 ({num_frames}, {frame_bytes})"
            )
        self.tier = tier
        self.num_frames = int(num_frames)
        self.frame_bytes = frame_bytes
        self._free: deque[int] = deque(range(self.num_frames))
        self._owned: dict[Hashable, list[int]] = {}
        self.peak_used_frames = 0

    @classmethod
    def from_bytes(cls, tier: Tier, capacity_bytes: float, frame_bytes: float) -> FramePool:
        """As many whole frames as ``capacity_bytes`` holds."""
        return cls(tier, int(capacity_bytes // frame_bytes), frame_bytes)

    # ----------------------------------------------------------------------- queries
    @property
    def free_frames(self) -> int:
        return len(self._free)

    @property
    def used_frames(self) -> int:
        return self.num_frames - len(self._free)

    @property
    def capacity_bytes(self) -> float:
        return self.num_frames * self.frame_bytes

    @property
    def free_bytes(self) -> float:
        return len(self._free) * self.frame_bytes

    @property
    def used_bytes(self) -> float:
        return self.used_frames * self.frame_bytes

    def frames_of(self, owner: Hashable) -> list[BlockFrame]:
        return [BlockFrame(self.tier, f) for f in self._owned.get(owner, ())]

    def holds(self, owner: Hashable) -> bool:
        return owner in self._owned

    # -------------------------------------------------------------------- operations
    def allocate(self, owner: Hashable, n_frames: int) -> bool:
        """Give ``owner`` ``n_frames`` more frames; False (nothing changed) when short."""
        if isinstance(n_frames, bool) or not isinstance(n_frames, int) or n_frames < 0:
            raise AllocatorError(f"{self.tier.name}: allocate: bad frame count {n_frames!r}")
        if n_frames > len(self._free):
            return False
        popleft = self._free.popleft
        self._owned.setdefault(owner, []).extend(popleft() for _ in range(n_frames))
        self.peak_used_frames = max(self.peak_used_frames, self.used_frames)
        return True

    def free(self, owner: Hashable) -> int:
        """Return every frame ``owner`` holds to the tail of the free queue; how many."""
        try:
            frames = self._owned.pop(owner)
        except KeyError:
            raise AllocatorError(f"{self.tier.name}: free: {owner!r} holds no frames") from None
        self._free.extend(frames)
        return len(frames)

    def check_invariants(self) -> None:
        owned = [f for fs in self._owned.values() for f in fs]
        every = sorted([*self._free, *owned])
        if every != list(range(self.num_frames)):
            raise InvariantError(f"{self.tier.name}: frames lost or duplicated")
        if self.used_frames > self.num_frames or self.used_frames != len(owned):
            raise InvariantError(f"{self.tier.name}: used frames do not balance")


class NvmeTier(FramePool):
    """NVMe frames striped over ``drives`` drives that share their bandwidth."""

    def __init__(
        self, num_frames: int, frame_bytes: float, *, drives: int, bw_bytes_per_s_per_drive: float
    ) -> None:
        if drives < 1 or bw_bytes_per_s_per_drive <= 0:
            raise ValueError("an NVMe tier needs >= 1 drive and a positive bandwidth")
        super().__init__(Tier.NVME, num_frames, frame_bytes)
        self.drives = drives
        self.bw_bytes_per_s_per_drive = bw_bytes_per_s_per_drive

    @property
    def bw_bytes_per_s(self) -> float:
        """All drives together (blocks are striped over them)."""
        return self.drives * self.bw_bytes_per_s_per_drive


def host_tier_for_node(node: NodeProfile, frame_bytes: float) -> FramePool:
    """The node's pinned host pool: ``host_dram_bytes x pinned_host_fraction``."""
    return FramePool.from_bytes(
        Tier.HOST, node.host_dram_bytes * node.pinned_host_fraction, frame_bytes
    )


def nvme_tier_for_node(node: NodeProfile, frame_bytes: float) -> NvmeTier | None:
    """The node's NVMe drives as one striped tier, or None when it has none."""
    per_drive = node.nvme_capacity_bytes_per_drive
    if not node.nvme_drives or not per_drive or not node.nvme_bw_bytes_per_s_per_drive:
        return None
    return NvmeTier(
        int(node.nvme_drives * per_drive // frame_bytes),
        frame_bytes,
        drives=node.nvme_drives,
        bw_bytes_per_s_per_drive=node.nvme_bw_bytes_per_s_per_drive,
    )


class TieredBlockTable:
    """Each sequence's logical blocks -> ``BlockFrame`` (tier, frame), in logical order.

    A sequence may be partly resident while a pipelined reload runs; ``readable_blocks``
    is the HBM prefix a step may attend to, and ``check_readable`` raises if a step would
    read a block that is not in HBM.
    """

    def __init__(self) -> None:
        self._table: dict[Hashable, list[BlockFrame]] = {}

    def __contains__(self, seq: Hashable) -> bool:
        return seq in self._table

    def set(self, seq: Hashable, frames: Iterable[BlockFrame]) -> None:
        self._table[seq] = list(frames)

    def get(self, seq: Hashable) -> list[BlockFrame]:
        try:
            return list(self._table[seq])
        except KeyError:
            raise AllocatorError(f"block table: unknown sequence {seq!r}") from None

    def drop(self, seq: Hashable) -> list[BlockFrame]:
        try:
            return self._table.pop(seq)
        except KeyError:
            raise AllocatorError(f"block table: unknown sequence {seq!r}") from None

    def remap(self, seq: Hashable, start: int, frames: Iterable[BlockFrame]) -> list[BlockFrame]:
        """Replace entries ``start, start+1, ...`` (a completed copy); return the old ones."""
        row = self._table.get(seq)
        if row is None:
            raise AllocatorError(f"block table: unknown sequence {seq!r}")
        new = list(frames)
        if start < 0 or start + len(new) > len(row):
            raise AllocatorError(f"block table: remap [{start}, {start + len(new)}) out of range")
        old = row[start : start + len(new)]
        row[start : start + len(new)] = new
        return old

    def tier_counts(self, seq: Hashable) -> dict[Tier, int]:
        counts = dict.fromkeys(Tier, 0)
        for entry in self._table.get(seq, ()):
            counts[entry.tier] += 1
        return counts

    def readable_blocks(self, seq: Hashable) -> int:
        """Leading blocks in HBM: what a step may attend to."""
        n = 0
        for entry in self._table.get(seq, ()):
            if entry.tier != Tier.HBM:
                break
            n += 1
        return n

    def is_resident(self, seq: Hashable) -> bool:
        return all(e.tier == Tier.HBM for e in self._table.get(seq, ()))

    def check_readable(self, seq: Hashable, n_blocks: int | None = None) -> None:
        """Raise unless the first ``n_blocks`` (default all) blocks are in HBM."""
        row = self._table.get(seq, [])
        n = len(row) if n_blocks is None else n_blocks
        if self.readable_blocks(seq) < n:
            bad = next(e for e in row[:n] if e.tier != Tier.HBM)
            raise InvariantError(f"step reads {seq!r} block in {bad.tier.name} (frame {bad.frame})")

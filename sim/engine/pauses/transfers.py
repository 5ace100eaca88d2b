"""The transfer job of a pause: frames in host DRAM and on NVMe, copies over the links.

Responsibility: the node's host-DRAM and NVMe frame pools (sized from the scenario's
tiers), taking and freeing a pause's frames, the tier-tagged block table (kept only when
invariants are checked: it is what they read), and the copy events of one pause's state
out of HBM and back (``sim.engine.copy_engine``).

Invariant: a pool never holds more frames than it has; a pause holds frames in at most
one pool, from the start of its copy-out until its copy-in ends or it is released; no
running request reads a sequence whose blocks are not all in HBM (``check``).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable

import simpy

from sim.engine.copy_engine import CopyEngines
from sim.engine.pauses.state import Pause
from sim.errors import InvariantError
from sim.memory.tiers import BlockFrame, FramePool, Tier, TieredBlockTable
from sim.sched import Scheduler

#: frame pools are capped at this many frames (a frame is then several blocks)
MAX_FRAMES = 1 << 16


class Transfers:
    """Frame pools, the tier table and the copies of paused states."""

    def __init__(
        self,
        copies: CopyEngines,
        host_pool_bytes: float,
        nvme_pool_bytes: float,
        block_bytes: float,
        track_blocks: bool,
    ) -> None:
        self.copies = copies
        self.host = _pool(Tier.HOST, host_pool_bytes, block_bytes)
        self.nvme = _pool(Tier.NVME, nvme_pool_bytes, block_bytes)
        self.table = TieredBlockTable()
        self.track_blocks = track_blocks

    def pool_for(self, action: str) -> FramePool | None:
        """The pool an offload action writes to (None = no such tier)."""
        return self.host if action == "offload_host" else self.nvme

    def take_frames(self, p: Pause, pool: FramePool | None) -> bool:
        """Frames for ``p``'s whole state in ``pool``; False = no tier or no room."""
        if pool is None or not pool.allocate(p.pause_id, self.frames(pool, p)):
            return False
        p.pool = pool
        return True

    @staticmethod
    def frames(pool: FramePool, p: Pause) -> int:
        return max(1, math.ceil(p.bytes_total / pool.frame_bytes))

    def free_frames(self, p: Pause) -> None:
        if p.pool is not None and p.pool.holds(p.pause_id):
            p.pool.free(p.pause_id)

    # ------------------------------------------------------------ copies
    def copy_out(self, p: Pause) -> simpy.Event:
        """The copy of ``p``'s state out of HBM into its pool's tier."""
        if p.pool.tier == Tier.HOST:
            return self.copies.copy_out(p.bytes_per_gpu)
        return self.copies.to_nvme(p.bytes_per_gpu, p.bytes_total)

    def copy_in(self, p: Pause) -> simpy.Event:
        """The copy of ``p``'s state back into HBM."""
        if p.pool.tier == Tier.HOST:
            return self.copies.copy_in(p.bytes_per_gpu)
        return self.copies.from_nvme(p.bytes_per_gpu, p.bytes_total)

    # ------------------------------------------------------------ block table
    def track(self, p: Pause) -> None:
        """``p``'s blocks now live in its pool's frames (after the copy-out)."""
        if self.track_blocks:
            self.table.set(p.seq, p.pool.frames_of(p.pause_id))

    def overlap_resident(self, seq: Hashable) -> None:
        """A pipelined reload: the rest of the copy counts as resident from now on."""
        if seq in self.table:
            n = len(self.table.get(seq))
            self.table.remap(seq, 0, [BlockFrame(Tier.HBM, i) for i in range(n)])

    def untrack(self, seq: Hashable) -> None:
        if seq in self.table:
            self.table.drop(seq)

    # ------------------------------------------------------------ checks
    def check(self, pauses: Iterable[Pause], sched: Scheduler) -> None:
        """Steps read only HBM blocks; tiers within capacity and frames owned."""
        for req in sched.running:
            self.table.check_readable(req.seq_id)
        pauses = list(pauses)
        for pool in (self.host, self.nvme):
            if pool is None:
                continue
            owned = sum(
                self.frames(pool, p) for p in pauses if p.pool is pool and pool.holds(p.pause_id)
            )
            if not 0 <= pool.used_frames == owned <= pool.num_frames:
                raise InvariantError(
                    f"{pool.tier.name}: {pool.used_frames} frames used, {owned} owned, "
                    f"capacity {pool.num_frames}"
                )


def _pool(tier: Tier, capacity_bytes: float, block_bytes: float) -> FramePool | None:
    if capacity_bytes <= 0:
        return None
    per_frame = max(1, math.ceil(capacity_bytes / (block_bytes * MAX_FRAMES)))
    return FramePool.from_bytes(tier, capacity_bytes, block_bytes * per_frame)

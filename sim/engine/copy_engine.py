"""Copy engines: SimPy resources that move KV between HBM, pinned host DRAM and NVMe.

Responsibility: how long a transfer takes when others compete for the same wire. Each GPU
has two DMA channels, host-to-device (``h2d``) and device-to-host (``d2h``), which run
concurrently (rule 3.12: copy engines run beside compute and beside each other); the NVMe
drives of the node form one more channel that every GPU shares. A channel serves its
transfers in arrival order (``link_sharing: fifo``, default: one DMA queue) or shares its
bandwidth equally among those in flight (``fair``: processor sharing).

Under tensor parallelism every rank moves its own share over its own link at the same
time, so an operation takes ``bytes_per_gpu`` on each GPU of the group (an MLA latent is
whole on every rank: the caller passes all of it as the per-GPU bytes). NVMe traffic is
staged through host memory by default (the link leg, then the drive leg, one after the
other; the staging buffer is not the pinned KV pool) or, with GPUDirect Storage, runs both
legs at once (the slower one sets the time).

Costs: a transfer of b bytes takes ``overhead_s + b / bw``, with each direction's own
figures when they differ (a calibration fits h2d and d2h apart; a run takes them from
``resolve``'s ``Tiers``: the scenario's explicit link, else the calibration's pinned copy
fits, else the accelerator profile). In ``fifo`` mode the overhead
occupies the channel (DMA setup is serialised); in ``fair`` mode it is a latency before the
transfer joins the sharing and uses no bandwidth. ``fair`` schedules one wake-up per change
of the set in flight; a superseded wake-up stays in SimPy's queue and fires with no effect,
so run the environment ``until`` an event rather than to exhaustion when timing the end.

Invariant: every operation returns a SimPy event that the caller yields; its value is a
``Transfer`` (start, end, bytes). Bytes are conserved per channel (``bytes_moved`` is the
sum of completed transfers) and a fifo channel never serves two transfers at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import simpy

from sim.cost.calibration import Calibration
from sim.cost.host_link import host_link_fits
from sim.errors import UnknownNameError
from sim.profiles.schema import AcceleratorProfile, NodeProfile

LinkSharing = Literal["fifo", "fair"]
LINK_SHARING: tuple[str, ...] = ("fifo", "fair")


@dataclass(frozen=True, slots=True)
class Transfer:
    """One completed operation: when its bytes started and finished moving."""

    start_s: float
    end_s: float
    nbytes: float  # per leg (per GPU for link legs; the replica's bytes for a drive leg)


class Channel:
    """One direction of one wire (or the drive array) with a bandwidth and a sharing rule."""

    def __init__(
        self,
        env: simpy.Environment,
        bw_bytes_per_s: float,
        *,
        overhead_s: float = 0.0,
        sharing: str = "fifo",
        name: str = "",
    ) -> None:
        if sharing not in LINK_SHARING:
            raise UnknownNameError("link_sharing", sharing, list(LINK_SHARING))
        if not bw_bytes_per_s > 0 or not overhead_s >= 0:
            raise ValueError(f"{name}: need bandwidth > 0 and overhead >= 0")
        self.env = env
        self.bw_bytes_per_s = bw_bytes_per_s
        self.overhead_s = overhead_s
        self.sharing = sharing
        self.name = name
        self.bytes_moved = 0.0
        self.transfers = 0
        self._fifo = simpy.Resource(env, capacity=1)
        self._active: dict[int, list] = {}  # fair: id -> [remaining bytes, event, start, total]
        self._last_s = 0.0
        self._next_id = 0
        self._wake_gen = 0

    def transfer(self, nbytes: float) -> simpy.Event:
        """Move ``nbytes``; the returned event fires with a ``Transfer`` when they are done."""
        if not nbytes >= 0:
            raise ValueError(f"{self.name}: cannot move {nbytes} bytes")
        if self.sharing == "fifo":
            return self.env.process(self._fifo_transfer(nbytes))
        return self.env.process(self._fair_transfer(nbytes))

    @property
    def in_flight(self) -> int:
        return len(self._active) + self._fifo.count + len(self._fifo.queue)

    # ------------------------------------------------------------------------ fifo
    def _fifo_transfer(self, nbytes: float):
        with self._fifo.request() as req:
            yield req
            start = self.env.now
            yield self.env.timeout(self.overhead_s + nbytes / self.bw_bytes_per_s)
        return self._done(start, nbytes)

    def _done(self, start: float, nbytes: float) -> Transfer:
        self.bytes_moved += nbytes
        self.transfers += 1
        return Transfer(start, self.env.now, nbytes)

    # ------------------------------------------------------------------------ fair
    def _fair_transfer(self, nbytes: float):
        if self.overhead_s:
            yield self.env.timeout(self.overhead_s)
        start = self.env.now
        if nbytes == 0:
            return self._done(start, 0.0)
        self._advance()
        done = self.env.event()
        self._active[self._next_id] = [float(nbytes), done, start, nbytes]
        self._next_id += 1
        self._reschedule()
        yield done
        return self._done(start, nbytes)

    def _advance(self) -> None:
        """Drain every active transfer by its share of the time since the last change."""
        now = self.env.now
        if self._active:
            share = self.bw_bytes_per_s * (now - self._last_s) / len(self._active)
            for entry in self._active.values():
                entry[0] -= share
        self._last_s = now

    def _reschedule(self) -> None:
        self._wake_gen += 1
        if not self._active:
            return
        gen = self._wake_gen
        shortest = min(entry[0] for entry in self._active.values())
        delay = max(0.0, shortest) * len(self._active) / self.bw_bytes_per_s
        self.env.timeout(delay).callbacks.append(lambda _ev: self._wake(gen))

    def _wake(self, gen: int) -> None:
        if gen != self._wake_gen:
            return  # superseded by a later arrival or completion
        self._advance()
        # the timer was set for the shortest transfer, so it is done whatever rounding left
        # in it; others finish with it when they are within rounding of it (ties)
        least = min(e[0] for e in self._active.values())
        finished = [k for k, e in self._active.items() if e[0] - least <= 1e-9 * max(1.0, e[3])]
        for k in finished:
            self._active.pop(k)[1].succeed()
        self._reschedule()


class CopyEngines:
    """Per GPU an ``h2d`` and a ``d2h`` channel, plus the node's NVMe drives (if any)."""

    def __init__(
        self,
        env: simpy.Environment,
        num_gpus: int,
        link_bw_bytes_per_s: float,
        *,
        overhead_s: float = 0.0,
        sharing: str = "fifo",
        nvme_bw_bytes_per_s: float = 0.0,
        nvme_overhead_s: float = 0.0,
        gds: bool = False,
        d2h_bw_bytes_per_s: float | None = None,
        d2h_overhead_s: float | None = None,
    ) -> None:
        """``link_bw_bytes_per_s`` and ``overhead_s`` set both directions unless the
        ``d2h_*`` figures (copy-out) are given."""
        if num_gpus < 1:
            raise ValueError(f"num_gpus must be >= 1, got {num_gpus}")
        self.env = env
        self.num_gpus = num_gpus
        self.gds = gds
        d2h_bw = link_bw_bytes_per_s if d2h_bw_bytes_per_s is None else d2h_bw_bytes_per_s
        d2h_over = overhead_s if d2h_overhead_s is None else d2h_overhead_s

        def chan(name: str, bw: float, over: float) -> Channel:
            return Channel(env, bw, overhead_s=over, sharing=sharing, name=name)

        self.h2d = [chan(f"gpu{g}.h2d", link_bw_bytes_per_s, overhead_s) for g in range(num_gpus)]
        self.d2h = [chan(f"gpu{g}.d2h", d2h_bw, d2h_over) for g in range(num_gpus)]
        self.drives: Channel | None = None
        if nvme_bw_bytes_per_s > 0:
            self.drives = Channel(
                env,
                nvme_bw_bytes_per_s,
                overhead_s=nvme_overhead_s,
                sharing=sharing,
                name="nvme",
            )

    @classmethod
    def from_profiles(
        cls,
        env: simpy.Environment,
        accelerator: AcceleratorProfile,
        num_gpus: int,
        node: NodeProfile | None = None,
        *,
        link_bw_bytes_per_s: float | None = None,
        calibration: Calibration | None = None,
        **options,
    ) -> CopyEngines:
        """Bandwidths from the profiles (``host_link.usable_bw_bytes_per_s``; the node's
        drives), or a calibration's copy fits per direction; ``link_bw_bytes_per_s`` and
        ``overhead_s`` override both (``host_link_fits``: a study's explicit figures)."""
        links = host_link_fits(
            calibration,
            accelerator.host_link.usable_bw_bytes_per_s,
            bw_bytes_per_s=link_bw_bytes_per_s,
            overhead_s=options.pop("overhead_s", None),
        )
        h2d, d2h = links["h2d"], links["d2h"]
        if node is not None and node.nvme_drives and node.nvme_bw_bytes_per_s_per_drive:
            options.setdefault(
                "nvme_bw_bytes_per_s", node.nvme_drives * node.nvme_bw_bytes_per_s_per_drive
            )
        return cls(
            env, num_gpus, h2d.bw_bytes_per_s, overhead_s=h2d.overhead_s,
            d2h_bw_bytes_per_s=d2h.bw_bytes_per_s, d2h_overhead_s=d2h.overhead_s, **options,
        )  # fmt: skip

    # ---------------------------------------------------------------- operations
    def copy_out(self, bytes_per_gpu: float, gpus: Sequence[int] | None = None) -> simpy.Event:
        """HBM -> pinned host DRAM, every GPU of the group its share at once."""
        return self._legs([self.d2h[g] for g in self._group(gpus)], bytes_per_gpu)

    def copy_in(self, bytes_per_gpu: float, gpus: Sequence[int] | None = None) -> simpy.Event:
        """Pinned host DRAM -> HBM."""
        return self._legs([self.h2d[g] for g in self._group(gpus)], bytes_per_gpu)

    def host_to_nvme(self, total_bytes: float) -> simpy.Event:
        """Demote a host copy to the drives (``total_bytes`` of the replica)."""
        return self._drive_leg(total_bytes)

    def nvme_to_host(self, total_bytes: float) -> simpy.Event:
        return self._drive_leg(total_bytes)

    def to_nvme(
        self, bytes_per_gpu: float, total_bytes: float, gpus: Sequence[int] | None = None
    ) -> simpy.Event:
        """HBM -> NVMe: link then drives (staged in host memory), or both at once (GDS)."""
        links = [self.d2h[g] for g in self._group(gpus)]
        self._need_drives()
        return self.env.process(self._nvme(links, bytes_per_gpu, total_bytes, link_first=True))

    def from_nvme(
        self, bytes_per_gpu: float, total_bytes: float, gpus: Sequence[int] | None = None
    ) -> simpy.Event:
        """NVMe -> HBM: drives then link (staged), or both at once (GDS)."""
        links = [self.h2d[g] for g in self._group(gpus)]
        self._need_drives()
        return self.env.process(self._nvme(links, bytes_per_gpu, total_bytes, link_first=False))

    def bytes_moved(self) -> dict[str, float]:
        """Bytes moved so far per route (link bytes summed over GPUs)."""
        return {
            "d2h": sum(c.bytes_moved for c in self.d2h),
            "h2d": sum(c.bytes_moved for c in self.h2d),
            "nvme": self.drives.bytes_moved if self.drives else 0.0,
        }

    # ---------------------------------------------------------------- internals
    def _group(self, gpus: Sequence[int] | None) -> Sequence[int]:
        group = range(self.num_gpus) if gpus is None else gpus
        if not group or any(not 0 <= g < self.num_gpus for g in group):
            raise ValueError(f"gpus must be a non-empty subset of 0..{self.num_gpus - 1}")
        return group

    def _legs(self, channels: list[Channel], nbytes: float) -> simpy.Event:
        return self.env.process(self._all(channels, nbytes))

    def _all(self, channels: list[Channel], nbytes: float):
        start = self.env.now
        yield self.env.all_of([c.transfer(nbytes) for c in channels])
        return Transfer(start, self.env.now, nbytes)

    def _need_drives(self) -> Channel:
        if self.drives is None:
            raise ValueError("this node has no NVMe tier")
        return self.drives

    def _drive_leg(self, total_bytes: float) -> simpy.Event:
        return self._need_drives().transfer(total_bytes)

    def _nvme(self, links: list[Channel], bytes_per_gpu: float, total: float, link_first: bool):
        start = self.env.now
        if self.gds:
            legs = [c.transfer(bytes_per_gpu) for c in links] + [self._drive_leg(total)]
            yield self.env.all_of(legs)
        elif link_first:
            yield self.env.process(self._all(links, bytes_per_gpu))
            yield self._drive_leg(total)
        else:
            yield self._drive_leg(total)
            yield self.env.process(self._all(links, bytes_per_gpu))
        return Transfer(start, self.env.now, total)

"""A run's memory, projected to its end, against what the machine has left: a run that
would run out stops early with one line instead of being killed hours in.

A run's tables grow with its work (measured on this project's 2-core machine, peak RSS
with the tables collected: ~2.7 KB a request on chat_azure_5000, ~440 KB a trajectory on
agents_500, whose trajectories make ~80 requests each), and a scenario may ask for up to
ten million trajectories, so a plausible file can need tens of GB. ``MemoryGuard`` is
``kvsim run``'s progress callback (``Simulation.run(progress)``): once a run is
``MIN_FRACTION`` done, or has grown ``MIN_GROWTH_BYTES``, it extrapolates the resident
memory the run gained so far to the whole run, linearly in
``sim.run.progress.progress_fraction`` of the trajectories *started* (or of simulated time
against ``duration_s``), and raises ``RunTooLarge`` when what is still to come exceeds the
machine's available memory. Counting started trajectories, not finished ones, makes the
projection a floor: the growth so far was made by every started trajectory, those still
running will grow further, and each one not started yet is taken to cost what a started
one has cost so far (finished ones would count the running ones' rows against too few
trajectories: a batch of agents all in flight would project many times its need). The
end's collection of the tables into data frames is left out too.

Invariant: the guard reads the process's resident memory and the machine's available
memory (Linux ``/proc``; elsewhere it never stops a run) and the run's progress counters,
never the simulation's state; a run it does not stop ends exactly as without it (it
changes no result); it adds one ``/proc`` read per progress call (every
``Node.progress_every`` decisions).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sim.errors import KvsimError
from sim.run.progress import progress_fraction

#: the fraction of a run done before its growth is extrapolated (a run's start holds its
#: first trajectories' state without their end; earlier projections swing widely)
MIN_FRACTION = 0.02
#: ... or the resident memory a run has gained, whichever comes first
MIN_GROWTH_BYTES = 512 * 2**20

_PROC = Path("/proc")


class RunTooLarge(KvsimError):
    """A run projected to need more memory than the machine has available."""


def resident_bytes(proc: Path = _PROC) -> int | None:
    """This process's resident set in bytes (``/proc/self/statm``); None where unknown."""
    try:
        pages = int((proc / "self" / "statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def available_bytes(proc: Path = _PROC) -> int | None:
    """The machine's available memory in bytes (``MemAvailable`` of ``/proc/meminfo``:
    free memory plus what the kernel can reclaim); None where unknown."""
    try:
        for line in (proc / "meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def _gb(n_bytes: float) -> str:
    return f"{n_bytes / 1e9:,.1f} GB"


@dataclass
class MemoryGuard:
    """The progress callback ``(sim_time_s, trajectories_completed, total)`` that stops a
    run projected past the machine's memory. ``then`` is called after each check (a
    progress bar's own callback); ``count_field`` names the scenario's field the message
    points at (``workload.num_trajectories``, with its ``file:line``)."""

    horizon_s: float | None
    count_field: str
    then: Callable[[float, int, int], None] | None = None
    #: trajectories started so far (``WorkloadContext.started``); None: the finished count
    started: Callable[[], int] | None = None
    resident: Callable[[], int | None] = resident_bytes
    available: Callable[[], int | None] = available_bytes
    start_bytes: int | None = None  # the resident memory at the start (read if None)

    def __post_init__(self) -> None:
        if self.start_bytes is None:
            self.start_bytes = self.resident()

    def __call__(self, now_s: float, completed: int, total: int) -> None:
        self.check(now_s, completed, total)
        if self.then is not None:
            self.then(now_s, completed, total)

    def check(self, now_s: float, completed: int, total: int) -> None:
        """Raise ``RunTooLarge`` when the rest of the run, at its growth so far, needs
        more than the machine's available memory."""
        start, now_bytes = self.start_bytes, self.resident()
        if start is None or now_bytes is None:
            return
        grown = now_bytes - start
        started = max(completed, self.started()) if self.started is not None else completed
        frac = progress_fraction(now_s, started, total, self.horizon_s)
        if frac <= 0.0 or frac >= 1.0 or grown <= 0:
            return
        if frac < MIN_FRACTION and grown < MIN_GROWTH_BYTES:
            return
        still = grown * (1.0 - frac) / frac
        free = self.available()
        if free is None or still <= free:
            return
        raise RunTooLarge(
            f"{self.count_field}: stopped at {frac:.1%} of the run ({started:,} of "
            f"{total:,} trajectories started, {completed:,} finished, {now_s:,.1f} s "
            "simulated): it has grown "
            f"{_gb(grown)} and at that rate needs at least {_gb(still)} more, but the machine "
            f"has {_gb(free)} available; run fewer, or set duration_s, or "
            "--no-memory-guard to run anyway"
        )


def count_field(sim) -> str:
    """``file:line: workload.<field>`` of the scenario's trajectory count, for the message
    (the workload's ``num_trajectories`` or ``num_requests``, else the section)."""
    resolved = getattr(sim, "resolved", None)
    loaded = getattr(resolved, "loaded", None)
    workload = getattr(getattr(loaded, "scenario", None), "workload", None)
    name = next((n for n in ("num_trajectories", "num_requests")
                 if getattr(workload, n, None) is not None), None)  # fmt: skip
    loc = ("workload", name) if name else ("workload",)
    dotted = ".".join(loc)
    where = loaded.where(*loc) if loaded is not None else ""
    return f"{where}: {dotted}" if where else dotted

"""How far a run is: the one figure the progress bar draws and the memory guard
extrapolates by (``sim.report.text``, ``sim.cli.memory_guard``).

Invariant: a pure function of the run's counters, in [0, 1]; imports nothing.
"""

from __future__ import annotations


def progress_fraction(sim_s: float, completed: int, total: int, horizon_s: float | None) -> float:
    """How far the run is, in [0, 1]: the larger of simulated time over the horizon and
    finished over all trajectories (a run ends at whichever comes first)."""
    parts = [completed / total if total else 0.0]
    if horizon_s:
        parts.append(sim_s / horizon_s)
    return min(max(parts), 1.0)

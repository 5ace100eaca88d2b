"""Which host link a run's copy engines use, per direction (``h2d``, ``d2h``).

Responsibility: ``host_link_fits`` decides, figure by figure: the scenario's explicit
value, else the calibration's pinned copy fit of that direction, else the accelerator
profile's bandwidth with no per-transfer overhead. It lives apart from
``sim.cost.calibration`` so that a scenario naming no calibration resolves its tiers
without importing the calibration file's models (``kvsim validate``'s start-up,
docs/performance.md).

Invariant: every direction of ``COPY_DIRECTIONS`` gets one ``CopyFit`` with a positive
bandwidth when its inputs are positive; nothing here reads a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

COPY_DIRECTIONS = ("h2d", "d2h")


@dataclass(frozen=True)
class CopyFit:
    """``t = overhead_s + bytes / bw_bytes_per_s`` for one direction, pinned memory."""

    overhead_s: float
    bw_bytes_per_s: float


class MeasuredLinks(Protocol):
    """What ``host_link_fits`` reads of a calibration (``sim.cost.calibration.Calibration``)."""

    @property
    def copy_fits(self) -> tuple[tuple[str, CopyFit], ...]:
        """(direction, fit) pairs; () when the copies were not measured."""
        ...

    def copy_fit(self, direction: str = "h2d") -> CopyFit:
        """The fit of one direction."""
        ...


def host_link_fits(
    calibration: MeasuredLinks | None,
    profile_bw_bytes_per_s: float,
    *,
    bw_bytes_per_s: float | None = None,
    overhead_s: float | None = None,
) -> dict[str, CopyFit]:
    """The host link of each direction (``h2d``, ``d2h``) for a run's copy engines.

    Precedence, figure by figure: the scenario's explicit ``bw_bytes_per_s`` /
    ``overhead_s`` (one value for both directions) win; else the calibration's pinned copy
    fit of that direction (a measurement of this device); else the accelerator profile's
    bandwidth and no per-transfer overhead.
    """
    fits: dict[str, CopyFit] = {}
    measured = calibration is not None and bool(calibration.copy_fits)
    for direction in COPY_DIRECTIONS:
        fit = calibration.copy_fit(direction) if measured and calibration is not None else None
        bw = bw_bytes_per_s or (fit.bw_bytes_per_s if fit else profile_bw_bytes_per_s)
        over = (fit.overhead_s if fit else 0.0) if overhead_s is None else overhead_s
        fits[direction] = CopyFit(over, bw)
    return fits

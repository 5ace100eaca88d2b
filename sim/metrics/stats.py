"""Small statistics helpers: percentiles of plain and weighted samples, time-weighted means.

Invariant: ``weighted_percentile(values, weights, q)`` equals ``numpy.percentile`` (linear
interpolation) of the sample in which each value is repeated ``weight`` times, without
building that sample; empty samples give ``None``, never NaN. A latency summary
(``describe``, ``describe_weighted``) has exactly the keys ``SUMMARY_KEYS``, in that order;
percentiles are only ever added (``p95`` was), never renamed or removed.
"""

from __future__ import annotations

import math

import numpy as np

PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0))
#: the keys of every summary ``describe`` / ``describe_weighted`` return, in order
SUMMARY_KEYS = ("mean", *(k for k, _ in PERCENTILES))


def describe(values: np.ndarray) -> dict[str, float | None]:
    """``{mean, p50, p90, p95, p99}`` of a plain sample (None when empty)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return {"mean": None, **{k: None for k, _ in PERCENTILES}}
    out = {"mean": float(v.mean())}
    for key, q in PERCENTILES:
        out[key] = float(np.percentile(v, q))
    return out


def _sorted_weighted(values: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted values with positive weight, cumulative weights in that order)."""
    w = np.asarray(weights, dtype=np.int64)
    keep = w > 0
    v = np.asarray(values, dtype=np.float64)[keep]
    w = w[keep]
    order = np.argsort(v, kind="stable")
    v = v[order]
    cum = np.cumsum(w[order])
    return v, cum


def _percentile_sorted(v: np.ndarray, cum: np.ndarray, q: float) -> float | None:
    n = int(cum[-1]) if len(cum) else 0
    if n == 0:
        return None
    pos = q / 100.0 * (n - 1)  # position in the expanded sorted sample
    lo, hi = math.floor(pos), math.ceil(pos)
    v_lo = v[np.searchsorted(cum, lo, side="right")]  # expanded index i: first cum > i
    v_hi = v[np.searchsorted(cum, hi, side="right")]
    return float(v_lo + (v_hi - v_lo) * (pos - lo))


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float | None:
    """Percentile ``q`` (0-100) of ``values`` repeated ``weights`` times (integer weights)."""
    return _percentile_sorted(*_sorted_weighted(values, weights), q)


def describe_weighted(values: np.ndarray, weights: np.ndarray) -> dict[str, float | None]:
    """``{mean, p50, p90, p95, p99}`` of a weighted sample (None when empty)."""
    w = np.asarray(weights)
    total = float(w.sum())
    if total <= 0:
        return {"mean": None, **{k: None for k, _ in PERCENTILES}}
    out = {"mean": float(np.dot(np.asarray(values, dtype=np.float64), w) / total)}
    v, cum = _sorted_weighted(values, weights)
    for key, q in PERCENTILES:
        out[key] = _percentile_sorted(v, cum, q)
    return out


class TimeWeighted:
    """Integral over time of a piecewise-constant quantity, sampled when it changes (a
    sample of the value it has is no change: one interval, one term)."""

    __slots__ = ("last_t", "last_v", "area", "span")

    def __init__(self, t0: float = 0.0, v0: float | None = None) -> None:
        self.last_t = t0
        self.last_v = v0  # None = undefined (that time is excluded from the mean)
        self.area = 0.0
        self.span = 0.0

    def observe(self, t: float, value: float | None) -> None:
        """The quantity is ``value`` from ``t`` on. A value equal to the one it already
        has adds nothing (its interval goes on as one term), so the integral does not
        depend on how often an unchanged quantity is sampled."""
        last_v = self.last_v
        if value == last_v:
            return
        last_t = self.last_t
        if last_v is not None and t > last_t:  # ``_close``, inlined (several per decision)
            self.area += last_v * (t - last_t)
            self.span += t - last_t
        self.last_t, self.last_v = t, value

    def observe_steps(self, starts, values) -> None:
        """Value ``values[i]`` from ``starts[i]`` on (NaN = undefined), for a run of steps
        (sequences of floats; a run is mostly a few steps, where Python beats numpy): the
        same terms as ``observe`` at each start, so a run adds what its steps observed one
        at a time would (a value equal to the one before adds no term)."""
        last_t, last_v, area, span = self.last_t, self.last_v, self.area, self.span
        for t, v in zip(starts, values, strict=True):
            if v != v:  # NaN: undefined from t on
                v = None
            if v == last_v:
                continue
            if last_v is not None and t > last_t:
                d = t - last_t
                area += last_v * d
                span += d
            last_t, last_v = t, v
        self.area, self.span = float(area), float(span)
        self.last_t, self.last_v = float(last_t), None if last_v is None else float(last_v)

    def _close(self, t: float) -> None:
        if self.last_v is not None and t > self.last_t:
            self.area += self.last_v * (t - self.last_t)
            self.span += t - self.last_t

    def mean(self, t_end: float) -> float | None:
        """Time-weighted mean over the defined time up to ``t_end``."""
        self._close(t_end)
        self.last_t = max(self.last_t, t_end)
        return self.area / self.span if self.span > 0 else None

"""Replication statistics: means, 95 % confidence intervals, paired differences, flattening.

Responsibility: the small statistics every multi-run answer needs. A confidence interval
of K replications is Student's t interval ``mean +- t(0.975, K-1) x sd / sqrt(K)`` (the
sample standard deviation, ``ddof=1``); two configurations run with the same seeds are
compared *paired* (the interval of the per-seed differences), and are "not
distinguishable at 95 %" when that interval contains 0. Nested summaries are flattened
with dots (``{"ttft_s": {"p99": x}}`` -> ``{"ttft_s.p99": x}``).

Invariant: no interval from fewer than 2 values (None instead); a constant sample gives a
zero-width interval; None values are left out of a mean (all None -> None); never NaN in
what is returned.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

#: t(0.975, df) for df = 1..30 (two-sided 95 %); beyond 30 the normal 1.96 is within 2 %
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t975(df: int) -> float:
    """Student's t quantile 0.975 with ``df`` degrees of freedom (df >= 1)."""
    if df < 1:
        raise ValueError("a t interval needs at least 2 values")
    return _T975[df - 1] if df <= len(_T975) else 1.96


def _numbers(values: Iterable[Any]) -> list[float]:
    out = []
    for v in values:
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, int | float) and math.isfinite(v):
            out.append(float(v))
    return out


def mean(values: Iterable[Any]) -> float | None:
    """The mean of the finite numbers among ``values`` (None when there are none)."""
    xs = _numbers(values)
    return sum(xs) / len(xs) if xs else None


def ci95(values: Iterable[Any]) -> tuple[float, float] | None:
    """Student's t 95 % interval of the mean (None with fewer than 2 numbers)."""
    xs = _numbers(values)
    if len(xs) < 2:
        return None
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    half = t975(len(xs) - 1) * sd / math.sqrt(len(xs))
    return (m - half, m + half)


def paired_difference(a: list[Any], b: list[Any]) -> dict[str, Any]:
    """``b - a`` seed by seed: its mean, 95 % interval and whether it excludes 0.

    ``a[i]`` and ``b[i]`` come from the same seed; pairs with a missing value are left out.
    ``distinguishable`` is None with fewer than 2 pairs (no interval)."""
    diffs = [y - x for x, y in zip(_nullable(a), _nullable(b), strict=True) if None not in (x, y)]
    interval = ci95(diffs)
    return {
        "mean": mean(diffs),
        "ci95": list(interval) if interval else None,
        "pairs": len(diffs),
        "distinguishable": None if interval is None else not interval[0] <= 0.0 <= interval[1],
    }


def _nullable(values: list[Any]) -> list[float | None]:
    return [None if not _numbers([v]) else float(v) for v in values]


def flatten(summary: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys; lists as JSON text (one Parquet cell each)."""
    out: dict[str, Any] = {}
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        elif isinstance(value, list | tuple):
            out[name] = json.dumps(value, default=str)
        else:
            out[name] = value
    return out


def mean_summary(summaries: list[dict]) -> tuple[dict, dict[str, list[float]]]:
    """(the first summary with every numeric leaf replaced by the mean over all of them,
    ``{dotted metric: [lo, hi]}`` for every numeric leaf)."""

    def merge(nodes: list[Any], path: str, intervals: dict) -> Any:
        first = nodes[0]
        if isinstance(first, dict):
            return {
                k: merge([n.get(k) if isinstance(n, dict) else None for n in nodes],
                         f"{path}{k}.", intervals)
                for k in first
            }  # fmt: skip
        if isinstance(first, bool) or not (_numbers(nodes) or first is None):
            return first
        m = mean(nodes)
        interval = ci95(nodes)
        if interval is not None:
            intervals[path[:-1]] = [interval[0], interval[1]]
        return m

    intervals: dict[str, list[float]] = {}
    merged = merge(summaries, "", intervals)
    return merged, intervals

"""Empirical building blocks shared by the fitted generators and their fits.

Responsibility: quantile tables that keep a sample's whole tail (``quantile_table``), rank
correlation through a Gaussian copula (``copula_uniforms``), discrete count tables, a
categorical draw by shares (``chooser``, ``choose``) and a categorical walk (a first-order
Markov chain over tool categories).

Invariant: pure functions of their inputs and of the numpy generator passed in; each draws
a fixed number of variates per call (so adding one draw never shifts another stream).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from sim.lazy_numpy import numpy_on_first_use

if TYPE_CHECKING:
    import numpy as np
else:  # the fitted parameters' schema imports ``check_shares``: no numpy for validate
    np = numpy_on_first_use(globals())

#: knots of a fitted quantile table: dense in both tails so p1, p99, p99.9 and the
#: extremes (the minimum and the maximum themselves) are kept, not smoothed away
QUANTILE_KNOTS: tuple[float, ...] = (
    0.0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45,
    0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.925, 0.95, 0.96, 0.97, 0.98, 0.99,
    0.995, 0.999, 1.0,
)  # fmt: skip


def quantile_table(x: Sequence[float], digits: int = 4) -> dict:
    """A ``{kind: quantiles, p, values}`` distribution of the sample ``x`` (at least 1 value)."""
    arr = np.sort(np.asarray(x, dtype=np.float64))
    if arr.size == 0:
        raise ValueError("a quantile table needs at least one value")
    values = np.quantile(arr, QUANTILE_KNOTS)
    values = np.maximum.accumulate(np.round(values, digits))
    return {"kind": "quantiles", "p": list(QUANTILE_KNOTS), "values": values.tolist()}


def count_table(x: Sequence[int]) -> dict:
    """An ``{kind: empirical, values, weights}`` distribution of whole counts (exact shares)."""
    values, counts = np.unique(np.asarray(x, dtype=np.int64), return_counts=True)
    return {"kind": "empirical", "values": values.tolist(), "weights": counts.tolist()}


def shares(names: Sequence[str], top: int | None = None, other: str = "other") -> dict:
    """Share of each name (the ``top`` most common; the rest pooled as ``other``)."""
    uniq, counts = np.unique(np.asarray(names, dtype=object), return_counts=True)
    order = np.argsort(-counts, kind="stable")
    total = counts.sum()
    out: dict[str, float] = {}
    for i, j in enumerate(order):
        key = str(uniq[j]) if top is None or i < top else other
        out[key] = out.get(key, 0.0) + float(counts[j]) / total
    return {k: round(v, 6) for k, v in out.items()}


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (0 when either side is constant or too short)."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if a.size < 3:
        return 0.0
    ra, rb = _ranks(a), _ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return 0.0
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(a: np.ndarray) -> np.ndarray:
    """Average ranks (ties share their mean rank)."""
    order = np.argsort(a, kind="stable")
    ranks = np.empty(a.size)
    ranks[order] = np.arange(a.size, dtype=np.float64)
    uniq, inverse = np.unique(a, return_inverse=True)
    sums = np.bincount(inverse, weights=ranks)
    counts = np.bincount(inverse)
    return (sums / counts)[inverse]


def copula_uniforms(z: np.ndarray, rank_correlation: float) -> np.ndarray:
    """Pairs of uniforms (shape ``(n, 2)``) from independent standard normal pairs ``z``,
    coupled by a Gaussian copula whose Spearman correlation is ``rank_correlation``
    (Pearson ``2 sin(pi rho / 6)``). The caller draws ``z``, so the stream use is fixed."""
    r = 2.0 * math.sin(math.pi * max(-1.0, min(1.0, rank_correlation)) / 6.0)
    z = np.array(z, dtype=np.float64).reshape(-1, 2)
    z[:, 1] = r * z[:, 0] + math.sqrt(max(0.0, 1.0 - r * r)) * z[:, 1]
    return _phi(z)


def shared_factor_uniforms(z: np.ndarray, correlation: float) -> np.ndarray:
    """``len(z) - 1`` uniforms whose normal scores share one factor: ``z[0]`` is the group's
    factor, ``z[1:]`` each draw's own part, and any two draws' normal scores have Pearson
    correlation ``correlation`` (in [0, 1)). Each draw alone stays uniform, so a marginal
    drawn through its quantile function keeps its fitted shares. The caller draws ``z``."""
    r = max(0.0, min(1.0, correlation))
    z = np.asarray(z, dtype=np.float64)
    return _phi(math.sqrt(r) * z[0] + math.sqrt(1.0 - r) * z[1:])


def intraclass_correlation(groups: Sequence[Sequence[float]]) -> float:
    """The one-way ANOVA intraclass correlation of values grouped (e.g. a session's turns),
    over groups of two or more values; 0 when there are too few or it comes out negative."""
    g = [np.asarray(v, dtype=np.float64) for v in groups if len(v) >= 2]
    n_total = sum(v.size for v in g)
    if len(g) < 2 or n_total <= len(g):
        return 0.0
    grand = np.concatenate(g).mean()
    ms_between = sum(v.size * (v.mean() - grand) ** 2 for v in g) / (len(g) - 1)
    ms_within = sum(((v - v.mean()) ** 2).sum() for v in g) / (n_total - len(g))
    n0 = (n_total - sum(v.size**2 for v in g) / n_total) / (len(g) - 1)
    denom = ms_between + (n0 - 1.0) * ms_within
    return max(0.0, float((ms_between - ms_within) / denom)) if denom > 0 else 0.0


def normal_scores(pool: Sequence[float], x: Sequence[float]) -> np.ndarray:
    """The normal scores of ``x`` within ``pool``: the inverse normal CDF of each value's
    mid-rank share of the pool (ties share the middle of their step)."""
    from statistics import NormalDist

    p = np.sort(np.asarray(pool, dtype=np.float64))
    xs = np.asarray(x, dtype=np.float64)
    mid = (np.searchsorted(p, xs, "left") + np.searchsorted(p, xs, "right")) / (2.0 * p.size)
    inv = NormalDist().inv_cdf
    return np.array([inv(min(max(u, 1e-9), 1 - 1e-9)) for u in mid.tolist()])


def _phi(z: np.ndarray) -> np.ndarray:
    """The standard normal CDF: ``math.erf`` on each element (through a list: a trajectory
    draws a few values, where ``np.vectorize``'s per-call cost was most of the time)."""
    x = np.asarray(z, dtype=np.float64) / math.sqrt(2.0)
    erf = np.array(list(map(math.erf, x.ravel().tolist())), dtype=np.float64).reshape(x.shape)
    return 0.5 * (1.0 + erf)


def chooser(probs: Mapping[str, float]) -> Callable[[float], str]:
    """``choose`` for one mapping of shares, its cumulative table made once (a caller
    drawing many names from the same shares makes one). Shares that can draw nothing are a
    ``ValueError`` (``check_shares``); the uniforms are Python floats in [0, 1)
    (``Generator.random(n).tolist()``)."""
    names, cum = _cum(probs)
    last = len(names) - 1

    def pick(u: float) -> str:
        i = bisect_right(cum, u)
        return names[i if i < last else last]

    return pick


def choose(probs: Mapping[str, float], u: float) -> str:
    """The name whose cumulative share first passes ``u`` (in [0, 1))."""
    return chooser(probs)(u)


def markov_walk(
    rng: np.random.Generator,
    start: Mapping[str, float],
    transitions: Mapping[str, Mapping[str, float]],
    n: int,
) -> list[str]:
    """``n`` states of a first-order chain: the first from ``start``, each next one from the
    previous state's row (``start`` where a state has no row). One uniform per state."""
    u = rng.random(n).tolist()
    first = chooser(start)
    rows: dict[str, Callable[[float], str]] = {}  # each state's row, made when first left
    out: list[str] = []
    state = None
    pick = first
    for x in u:
        if state is not None:
            known = rows.get(state)
            if known is None:
                row = transitions.get(state)
                known = rows[state] = first if row is None else chooser(row)
            pick = known
        state = pick(x)
        out.append(state)
    return out


def check_shares(probs: Mapping[str, float]) -> None:
    """``ValueError`` unless a name can be drawn by these shares: at least one name, no
    negative or NaN share, a positive finite total (shares are normalised). The fitted
    parameters' schema (``sim.workload.params.Shares``) refuses a file by this rule."""
    if not probs:
        raise ValueError("needs at least one name with a share")
    for name, share in probs.items():
        if not share >= 0:
            raise ValueError(f"the share of {name!r} is negative or NaN ({share})")
    if not 0 < math.fsum(probs.values()) < math.inf:
        raise ValueError("the shares sum to 0 (or not to a finite number): nothing can be drawn")


def _cum(probs: Mapping[str, float]) -> tuple[list[str], list[float]]:
    """The names and their cumulative shares, normalised (float64, as Python floats);
    ``check_shares``'s ``ValueError`` for shares that can draw nothing."""
    check_shares(probs)
    names = list(probs)
    cum = np.cumsum([probs[k] for k in names], dtype=np.float64)
    return names, (cum / cum[-1]).tolist()

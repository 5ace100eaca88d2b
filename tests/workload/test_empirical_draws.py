"""The categorical draws and the copula's normal CDF of ``sim.workload.empirical``, against
their rules written out here: a name is the first whose cumulative share (shares
normalised) is above the uniform, the last when none is; a Markov walk draws one uniform
per state, its first state from ``start`` and each next from the previous state's row
(``start`` where a state has none); ``_phi`` is the standard normal CDF."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.workload.empirical import _phi, choose, chooser, copula_uniforms, markov_walk

NAMES = ("read", "edit", "bash", "search", "test")


def by_rule(shares: dict[str, float], u: float) -> str:
    """The first name whose normalised cumulative share passes ``u``; the last if none."""
    total = math.fsum(shares.values())
    acc = 0.0
    names = list(shares)
    for name in names:
        acc += shares[name]
        if acc / total > u:
            return name
    return names[-1]


shares_st = st.lists(
    st.floats(0.0, 10.0, allow_nan=False), min_size=1, max_size=len(NAMES)
).filter(lambda xs: sum(xs) > 0).map(lambda xs: dict(zip(NAMES, xs, strict=False)))


@settings(max_examples=300, deadline=None)
@given(shares=shares_st, us=st.lists(st.floats(0.0, 1.0, exclude_max=True), max_size=20))
def test_choose_is_the_first_name_past_u(shares: dict[str, float], us: list[float]) -> None:
    pick = chooser(shares)
    for u in us:
        # the rule sums in a different order only where floats round differently: the
        # shares drawn here are exact in binary often enough, and any rounding gap is
        # below 1e-12 of the total
        total = math.fsum(shares.values())
        cums = np.cumsum(list(shares.values())) / total
        if np.min(np.abs(cums - u)) < 1e-12:
            continue  # u on a boundary up to rounding: either side is the rule
        assert pick(u) == choose(shares, u) == by_rule(shares, u)


def test_choose_boundaries() -> None:
    shares = {"a": 0.0, "b": 0.25, "c": 0.0, "d": 0.75}
    assert choose(shares, 0.0) == "b"  # a zero share never passes
    assert choose(shares, 0.25) == "d"  # a uniform on a boundary goes past it
    assert choose(shares, 0.2499) == "b"
    assert choose(shares, 0.9999999) == "d"
    assert choose({"x": 2.0, "y": 2.0}, 0.5) == "y"  # normalised: 0.5 of 1
    assert choose({"x": 2.0, "y": 2.0}, 0.49) == "x"
    assert choose({"only": 3.0}, 0.0) == "only"


def test_markov_walk_follows_its_rows() -> None:
    start = {"read": 0.5, "edit": 0.5}
    rows = {"read": {"edit": 1.0}, "edit": {"bash": 0.3, "read": 0.7}}  # "bash" has no row
    for seed in range(20):
        rng = np.random.default_rng(seed)
        walk = markov_walk(rng, start, rows, 50)
        u = np.random.default_rng(seed).random(50).tolist()  # one uniform per state
        state = None
        for x, got in zip(u, walk, strict=True):
            row = start if state is None else rows.get(state, start)
            state = by_rule(row, x)
            assert got == state
        assert rng.random() == np.random.default_rng(seed).random(51)[50]  # n used, no more


def test_markov_walk_empty() -> None:
    rng = np.random.default_rng(1)
    assert markov_walk(rng, {"a": 1.0}, {}, 0) == []


@pytest.mark.parametrize("shape", [(7,), (5, 2), (0, 2)])
def test_phi_is_the_normal_cdf(shape: tuple[int, ...]) -> None:
    z = np.random.default_rng(3).standard_normal(shape) * 3
    got = _phi(z)
    assert got.shape == z.shape and got.dtype == np.float64
    cdf = NormalDist().cdf
    want = np.array([cdf(x) for x in z.ravel().tolist()]).reshape(shape)
    assert np.array_equal(got, want)  # the same erf of the same quotient


def test_copula_uniforms_marginals_and_rank_correlation() -> None:
    z = np.random.default_rng(5).standard_normal((20000, 2))
    u = copula_uniforms(z, 0.6)
    assert u.shape == (20000, 2) and 0 < u.min() and u.max() < 1
    assert abs(float(np.mean(u[:, 0])) - 0.5) < 0.01 and abs(float(np.mean(u[:, 1])) - 0.5) < 0.01
    ranks = np.argsort(np.argsort(u, axis=0), axis=0)
    rho = float(np.corrcoef(ranks[:, 0], ranks[:, 1])[0, 1])  # Spearman: Pearson of ranks
    assert abs(rho - 0.6) < 0.02
    assert np.array_equal(copula_uniforms(z, 0.0)[:, 1], _phi(z[:, 1]))  # independent

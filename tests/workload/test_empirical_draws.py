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

from sim.errors import ConfigError
from sim.workload.coding_agent import _tokens, _tool_names
from sim.workload.distributions import Quantiles
from sim.workload.empirical import _phi, choose, chooser, copula_uniforms, markov_walk
from sim.workload.params import load_params, validate_params

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


@pytest.mark.parametrize(
    "shares",
    [{}, {"a": 0.0}, {"a": 0.0, "b": 0.0}, {"a": -1.0, "b": 2.0}, {"a": math.nan, "b": 1.0},
     {"a": math.inf}],
)  # fmt: skip
def test_choose_refuses_shares_nothing_can_be_drawn_by(shares: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="needs at least one name|negative or NaN|sum to 0"):
        chooser(shares)


def test_each_call_draws_its_own_categorys_tool() -> None:
    fit = load_params("coding_agent")
    data = fit.model_dump(mode="json")
    for name, cat in data["categories"].items():  # disjoint tool names per category
        cat["tools"] = {f"{name}-{tool}": share for tool, share in cat["tools"].items()}
    fit = validate_params("coding_agent", data)
    cats = [c for c in fit.categories for _ in range(30)]
    names = _tool_names(fit, cats, np.random.default_rng(2))
    u = np.random.default_rng(2).random(len(cats)).tolist()
    for cat, name, x in zip(cats, names, u, strict=True):
        assert name == by_rule(fit.categories[cat].tools, x)  # its own category's shares


def test_tokens_round_and_floor_at_one() -> None:
    dist = Quantiles(kind="quantiles", p=[0.0, 0.5, 1.0], values=[0.0, 2.5, 10.0])
    got = _tokens(dist, np.array([0.0, 0.05, 0.1, 0.5, 0.55, 1.0]))
    # ppf: 0, 0.25, 0.5, 2.5, 3.25, 10 -> rint (half to even): 0, 0, 0, 2, 3, 10 -> at least 1
    assert got.tolist() == [1, 1, 1, 2, 3, 10] and got.dtype == np.int64


def _coding_fit(**change) -> dict:
    data = load_params("coding_agent").model_dump(mode="json")
    first = next(iter(data["categories"]))
    data["categories"][first].update(change)
    return data


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tools": {}}, "needs at least one name"),
        ({"tools": {"ls": 0.0, "cat": 0.0}}, "the shares sum to 0"),
        ({"tools": {"ls": -0.5, "cat": 1.0}}, "the share of 'ls' is negative or NaN"),
        ({"next": {"no_such_category": 1.0}}, "'no_such_category' is not a category"),
    ],
)
def test_fitted_shares_that_draw_nothing_are_refused(change: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_params("coding_agent", _coding_fit(**change), "fit.yaml")


def test_fitted_first_action_needs_a_share() -> None:
    data = load_params("coding_agent").model_dump(mode="json")
    for cat in data["categories"].values():
        cat["start"] = cat["share"] = 0.0
    with pytest.raises(ConfigError, match="no first action"):
        validate_params("coding_agent", data, "fit.yaml")
    data = load_params("human_in_loop").model_dump(mode="json")
    for tool in data["tools"].values():
        tool["share"] = 0.0
    with pytest.raises(ConfigError, match="the shares sum to 0"):
        validate_params("human_in_loop", data, "fit.yaml")
    data = load_params("function_calling").model_dump(mode="json")
    data["tools"] = {name: 0.0 for name in data["tools"]}
    with pytest.raises(ConfigError, match="tools.*the shares sum to 0"):
        validate_params("function_calling", data, "fit.yaml")


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
    assert np.allclose(got, want, rtol=0, atol=1e-15)


def test_copula_uniforms_marginals_and_rank_correlation() -> None:
    z = np.random.default_rng(5).standard_normal((20000, 2))
    u = copula_uniforms(z, 0.6)
    assert u.shape == (20000, 2) and 0 < u.min() and u.max() < 1
    assert abs(float(np.mean(u[:, 0])) - 0.5) < 0.01 and abs(float(np.mean(u[:, 1])) - 0.5) < 0.01
    ranks = np.argsort(np.argsort(u, axis=0), axis=0)
    rho = float(np.corrcoef(ranks[:, 0], ranks[:, 1])[0, 1])  # Spearman: Pearson of ranks
    assert abs(rho - 0.6) < 0.02
    assert np.array_equal(copula_uniforms(z, 0.0)[:, 1], _phi(z[:, 1]))  # independent

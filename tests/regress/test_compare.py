"""The verdict rules of ``sim.regress.compare``: tolerance, direction, two-sided, strict."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.regress.compare import (
    CHANGED,
    IMPROVEMENT,
    MISSING,
    NO_BASELINE,
    OK,
    REGRESSION,
    compare_metric,
)
from sim.regress.suite import MetricCheck


def check(better="lower", abs_tol=0.0, rel_tol=0.0, two_sided=False):
    return MetricCheck(better=better, abs=abs_tol, rel=rel_tol, two_sided=two_sided)


def verdict(b, n, strict=False, **kw):
    out = compare_metric("m", check(**kw), {"m": b}, {"m": n}, strict=strict)
    return out.verdict, out.fails


def test_zero_tolerance_is_exact():
    assert verdict(14, 14) == (OK, False)
    assert verdict(0.1 + 0.2, 0.1 + 0.2) == (OK, False)
    assert verdict(14, 15) == (REGRESSION, True)
    assert verdict(0.3, 0.30000000000000004) == (REGRESSION, True)  # one ulp is a change
    assert verdict(14, 13) == (IMPROVEMENT, False)


def test_tolerance_is_the_larger_of_abs_and_rel():
    # rel 10% of 100 = 10 > abs 1: a move of 10 passes, 10.5 does not
    assert verdict(100, 110, abs_tol=1, rel_tol=0.1) == (OK, False)
    assert verdict(100, 110.5, abs_tol=1, rel_tol=0.1) == (REGRESSION, True)
    # near zero the absolute floor decides
    assert verdict(0.0, 0.5, abs_tol=1, rel_tol=0.1) == (OK, False)
    assert verdict(0.0, 1.5, abs_tol=1, rel_tol=0.1) == (REGRESSION, True)
    out = compare_metric("m", check(abs_tol=1, rel_tol=0.1), {"m": 100}, {"m": 110.5})
    assert out.allowed == 10 and out.delta == 10.5 and out.rel_delta == pytest.approx(0.105)


def test_direction_decides_regression_or_improvement():
    assert verdict(0.9, 0.8, better="higher") == (REGRESSION, True)
    assert verdict(0.9, 0.95, better="higher") == (IMPROVEMENT, False)
    assert verdict(0.9, 0.95, better="lower") == (REGRESSION, True)
    assert verdict(0.9, 0.8, better="lower") == (IMPROVEMENT, False)


def test_improvement_fails_when_two_sided_or_strict():
    assert verdict(10, 8, two_sided=True) == (IMPROVEMENT, True)
    assert verdict(10, 8, strict=True) == (IMPROVEMENT, True)
    assert verdict(10, 8) == (IMPROVEMENT, False)
    # strict changes nothing inside the tolerance
    assert verdict(10, 9.5, strict=True, abs_tol=1) == (OK, False)
    assert verdict(10, 9.5, two_sided=True, abs_tol=1) == (OK, False)


def test_missing_metric_fails_on_either_side():
    out = compare_metric("m", check(), {"m": 1}, {})
    assert (out.verdict, out.fails, out.has_now) == (MISSING, True, False)
    out = compare_metric("m", check(), {}, {"m": 1})
    assert (out.verdict, out.fails, out.has_baseline) == (NO_BASELINE, True, False)
    out = compare_metric("m", check(), None, {"m": 1})
    assert (out.verdict, out.fails) == (NO_BASELINE, True)


def test_undefined_values():
    assert verdict(None, None) == (OK, False)
    assert verdict(None, 0.5) == (CHANGED, True)
    assert verdict(0.5, None) == (CHANGED, True)
    assert verdict(math.nan, math.nan) == (OK, False)
    assert verdict(math.nan, 1.0) == (CHANGED, True)
    assert verdict(math.inf, math.inf) == (OK, False)
    assert verdict(1.0, math.inf) == (REGRESSION, True)


finite = st.floats(-1e12, 1e12, allow_nan=False)
tol = st.floats(0, 1e6, allow_nan=False)


@settings(max_examples=150, deadline=None)
@given(b=finite, n=finite, a=tol, r=st.floats(0, 2), better=st.sampled_from(["lower", "higher"]),
       two=st.booleans(), strict=st.booleans())  # fmt: skip
def test_verdict_properties(b, n, a, r, better, two, strict):
    out = compare_metric("m", check(better, a, r, two), {"m": b}, {"m": n}, strict=strict)
    within = abs(n - b) <= max(a, r * abs(b))
    assert (out.verdict == OK) == within
    worse = (n > b) if better == "lower" else (n < b)
    if not within:
        assert out.verdict == (REGRESSION if worse else IMPROVEMENT)
    expected_fail = not within and (worse or two or strict)
    assert out.fails == expected_fail
    # the rule is symmetric: swapping the direction swaps regression and improvement
    other = "higher" if better == "lower" else "lower"
    flipped = compare_metric("m", check(other, a, r, False), {"m": b}, {"m": n})
    if not within:
        assert {out.verdict, flipped.verdict} == {REGRESSION, IMPROVEMENT}

"""The calibration look-ups priced on every step, in their cheap forms, against the numpy
forms they replace (bit for bit): a GEMM table's next measured count
(``GemmTable.time_at``: a bisection on the tuples, was ``np.searchsorted`` on one value)
and the attention efficiency without its argument check (``attention_bw_at``, for the
pricers' contexts, already at least 1), whose checked form still refuses a context <= 0.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cost.calibration import load_calibration
from sim.cost.linear import GemmTable, KernelFit


def _numpy_time_at(table: GemmTable, m: float) -> float:
    """The form ``time_at`` had: the tables as float64 arrays, ``searchsorted`` (left)."""
    x = np.asarray(table.tokens, dtype=np.float64)
    t = np.asarray(table.time_s, dtype=np.float64)
    if m > x[-1]:
        return float(t[-1] * (m / x[-1]))
    return float(t[int(np.searchsorted(x, m, side="left"))])


_tables = st.lists(st.integers(1, 1 << 20), min_size=1, max_size=12, unique=True).flatmap(
    lambda xs: st.tuples(
        st.just(tuple(sorted(xs))),
        st.lists(st.floats(1e-7, 9.9), min_size=len(xs), max_size=len(xs)).map(tuple),
    )
)


@settings(max_examples=300, deadline=None)
@given(_tables, st.one_of(st.integers(0, 1 << 22), st.floats(0.0, 4e6)))
def test_time_at_is_the_searchsorted_form(table, m):
    tokens, times = table
    t = GemmTable(4096, 4096, tokens, times)
    assert t.time_at(m) == _numpy_time_at(t, m)


def test_time_at_at_and_between_and_past_the_measured_counts():
    t = GemmTable(4096, 4096, (1, 64, 128), (10e-6, 12e-6, 20e-6))
    assert [t.time_at(m) for m in (0, 1, 2, 64, 64.5, 128)] == [
        10e-6,
        10e-6,
        12e-6,
        12e-6,
        20e-6,
        20e-6,
    ]
    assert t.time_at(384) == 20e-6 * 3.0  # linear past the last count


def test_the_unchecked_efficiency_is_the_checked_one_and_the_check_stays():
    cal = load_calibration("a100-80gb-vidur")
    ctx = np.array([1.0, 17.0, 1000.0, 4096.0, 2.0e6])
    for bs in (16, 32):
        assert np.array_equal(cal.attention_bw_at(bs, ctx), cal.attention_bw_efficiencies(bs, ctx))
    assert cal.attention_bw_efficiency(16, 1000) == float(
        cal.attention_bw_at(16, np.array([1000.0]))[0]
    )
    for bad in ([0.0], [5.0, -1.0], [np.nan, -3.0]):
        with pytest.raises(ValueError, match="context <= 0"):
            cal.attention_bw_efficiencies(16, np.array(bad))


@settings(max_examples=300, deadline=None)
@given(
    st.floats(0.0, 1e-4),
    st.floats(1e-3, 1.0),
    st.floats(1e-3, 1.0),
    st.one_of(st.integers(0, 1 << 40), st.floats(0.0, 1e12)),
    st.floats(0.0, 1e15),
)
def test_a_kernel_fit_on_floats_is_its_numpy_form(floor, bw_eff, fl_eff, n_bytes, flops):
    """``KernelFit.time_s`` on scalars picks the larger term as ``np.maximum`` does (the
    first on a tie), without the call; arrays still go through numpy."""
    fit = KernelFit(floor, bw_eff, fl_eff)
    hbm, peak = 2.0e12, 3.1e14
    ref = floor + np.maximum(n_bytes / (hbm * bw_eff), flops / (peak * fl_eff))
    assert fit.time_s(n_bytes, flops, hbm, peak) == float(ref)
    both = fit.time_s(np.array([n_bytes, 0.0]), np.array([flops, flops]), hbm, peak)
    assert both[0] == float(ref)

"""The calibration look-ups priced on every step, in their cheap forms, against the numpy
forms they replace (bit for bit): a GEMM table's next measured count
(``GemmTable.time_at``: a bisection on the tuples, was ``np.searchsorted`` on one value)
and the attention efficiency without its argument check (``attention_bw_at``, for the
pricers' contexts, already at least 1), whose checked form still refuses a context <= 0,
and of one context from a table of chunks (``attention_bw_one``: every context a chunk
holds against the one-element array call).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cost.calibration import EFF_CHUNK_BITS, EFF_CHUNKS_MAX, load_calibration
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


def _one_element(cal, bs: int, ctx: float) -> float:
    return float(cal.attention_bw_at(bs, np.array([ctx], dtype=np.float64))[0])


@pytest.mark.filterwarnings("error")  # chunk 0 does not take log2(0)
@pytest.mark.parametrize("name", ["synthetic-example", "a100-80gb-vidur"])
def test_one_context_from_the_chunks_is_the_one_element_call(name):
    """Every context of the first three chunks (every one a run under 12,288 tokens of mean
    context reads), and contexts spread to 2**24, at a measured block size and one between
    two measured ones: the chunk's value is the one-element call's, bit for bit. The
    synthetic file's efficiency varies with the context (1,024 to 65,536 measured); the
    public ones measured one context (flat)."""
    cal = load_calibration(name)
    cal.__dict__.pop("_eff_chunks", None)  # the loaded file is shared: start with no chunk
    rng = np.random.default_rng(7)
    spread = [float(x) for x in rng.integers(1, 1 << 24, size=400)]
    for bs in (16, 24):
        for k in range(1, 3 << EFF_CHUNK_BITS):
            assert cal.attention_bw_one(bs, float(k)) == _one_element(cal, bs, float(k)), (bs, k)
        for ctx in spread:
            assert cal.attention_bw_one(bs, ctx) == _one_element(cal, bs, ctx), (bs, ctx)
        chunks = cal.__dict__["_eff_chunks"][bs]
        assert len(chunks) == EFF_CHUNKS_MAX  # 3 + the spread's, up to the cap
        for index, chunk in chunks.items():
            assert len(chunk) == 1 << EFF_CHUNK_BITS
            k = (index << EFF_CHUNK_BITS) + (1 << EFF_CHUNK_BITS) - 1  # each chunk's last
            assert chunk[-1] == _one_element(cal, bs, float(k))


def test_a_fraction_or_a_context_past_the_kept_chunks_takes_the_array_call():
    cal = load_calibration("synthetic-example")
    cal.__dict__.pop("_eff_chunks", None)
    bs = 16
    assert cal.attention_bw_one(bs, 2000.0) == _one_element(cal, bs, 2000.0)
    # a fraction never reads the chunk of its whole part (their values differ)
    assert cal.attention_bw_one(bs, 2000.5) == _one_element(cal, bs, 2000.5)
    assert _one_element(cal, bs, 2000.5) != _one_element(cal, bs, 2000.0)
    chunks = cal.__dict__["_eff_chunks"][bs]
    assert list(chunks) == [0]
    with np.errstate(divide="ignore", invalid="ignore"):  # log2 of 0 and of a negative
        for ctx in (0.0, -1.0, -5000.0, 0.5):  # below 1 (no pricer asks): no chunk is made
            np.testing.assert_equal(cal.attention_bw_one(bs, ctx), _one_element(cal, bs, ctx))
    assert list(chunks) == [0]
    for index in range(1, 2 * EFF_CHUNKS_MAX):  # a chunk each, until the cap
        ctx = float((index << EFF_CHUNK_BITS) + 5)
        assert cal.attention_bw_one(bs, ctx) == _one_element(cal, bs, ctx)
    assert sorted(chunks) == list(range(EFF_CHUNKS_MAX))
    # chunks are per block size: another starts its own
    assert cal.attention_bw_one(32, 2000.0) == _one_element(cal, 32, 2000.0)
    assert cal.attention_bw_one(32, 2000.0) != cal.attention_bw_one(bs, 2000.0)
    assert list(cal.__dict__["_eff_chunks"][32]) == [0]
    assert isinstance(cal.attention_bw_one(bs, 5.0), float)

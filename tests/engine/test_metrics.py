"""Metrics: pooled ITL from per-step records equals per-token bookkeeping; statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from engine_helpers import WORKLOADS
from hypothesis import given, settings
from hypothesis import strategies as st
from test_modes import AGENTS

from sim.metrics import TimeWeighted, describe, weighted_percentile
from sim.metrics.table import ChunkedTable
from sim.run import build


def _with_token_log(name: str, **overrides):
    """Run a scenario while logging every sampled token's time, per request."""
    sim = build(str(WORKLOADS / name), **overrides)
    times: dict[int, list[float]] = {}
    emit = sim.recorder.emit

    def logging_emit(requests, s0, k):
        ends = sim.recorder.step_ends
        for r in requests:
            times.setdefault(r.req_id, []).extend(ends[s0 + i] for i in range(k))
        emit(requests, s0, k)

    sim.recorder.emit = logging_emit
    return sim.run(), times


@pytest.mark.parametrize("exact", [True, False])
def test_pooled_itl_equals_every_token_gap(exact):
    over = {
        **AGENTS,
        "workload.num_trajectories": 8,
        "hardware.kv_pool_bytes_per_gpu": 0.5e9,
        "engine.exact": exact,
    }
    res, times = _with_token_log("agent_swarm.yaml", **over)
    gaps = np.concatenate([np.diff(t) for t in times.values()])
    assert res.summary["preemptions"] + res.summary["held_kv_drops"] > 0  # irregular gaps too
    s = res.summary["itl_s"]
    ref = describe(gaps)
    for key in ("mean", "p50", "p90", "p99"):
        assert s[key] == pytest.approx(ref[key], rel=1e-9)
    # a gap is a difference of two token times, inside a run as between steps: bit for bit
    assert res.summary["max_itl_s"] == gaps.max()
    req = res.requests.set_index("req_id")
    for rid, t in times.items():
        if len(t) > 1:
            assert req.loc[rid, "itl_max_s"] == np.diff(t).max()
            assert req.loc[rid, "first_token_s"] == t[0]
    assert sum(len(t) for t in times.values()) == res.summary["output_tokens"]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.floats(-1e3, 1e3), st.integers(0, 5)), min_size=1, max_size=40),
    st.floats(0, 100),
)
def test_weighted_percentile_is_the_percentile_of_the_repeated_sample(pairs, q):
    v = np.array([p[0] for p in pairs])
    w = np.array([p[1] for p in pairs])
    got = weighted_percentile(v, w, q)
    if w.sum() == 0:
        assert got is None
    else:
        assert got == pytest.approx(np.percentile(np.repeat(v, w), q), rel=1e-12, abs=1e-9)


def test_time_weighted_mean_skips_undefined_time():
    tw = TimeWeighted()
    tw.observe(0.0, 1.0)
    tw.observe(2.0, None)  # nothing allocated: eta_alloc undefined
    tw.observe(3.0, 0.5)
    tw.observe_steps(np.array([4.0, 5.0, 7.0]), np.array([0.0, np.nan, 1.0]))
    assert tw.mean(8.0) == pytest.approx((2 * 1.0 + 1 * 0.5 + 1 * 0.0 + 1 * 1.0) / 5)


def test_chunked_table_keeps_rows_in_order():
    t = ChunkedTable([("a", "i4"), ("b", "f8"), ("c", "U3")], chunk_rows=3)
    for i in range(8):
        t.append((i, None if i == 2 else i / 2, "xy"))
    df = t.frame(release=True)
    assert df.a.tolist() == list(range(8)) and np.isnan(df.b[2]) and df.b[3] == 1.5
    assert df.c.tolist() == ["xy"] * 8 and len(t) == 0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0.0, 10.0), st.sampled_from([None, 0.1, 0.3, 7.0])), min_size=1, max_size=30),
    st.lists(st.integers(0, 29), max_size=10),
    st.lists(st.integers(1, 29), max_size=4),
)
def test_time_weighted_mean_does_not_depend_on_repeated_samples(changes, repeats, cuts):
    """Sampling an unchanged value again (a decision that changed nothing, or a step of a run
    whose value did not move) adds no term, whether through ``observe`` or a run's
    ``observe_steps``: the mean is bit for bit that of the changes alone."""
    times = sorted(t for t, _ in changes)
    samples = [(t, v) for t, (_, v) in zip(times, changes, strict=True)]
    dense = []
    for i, (t, v) in enumerate(samples):
        dense.append((t, v))
        if i in repeats and i + 1 < len(samples):  # the same value again, later on
            dense.append(((t + samples[i + 1][0]) / 2, v))
    a, b = TimeWeighted(), TimeWeighted()
    for t, v in samples:
        a.observe(t, v)
    # the dense samples in pieces: single observes and runs (NaN = undefined in a run)
    edges = sorted({0, len(dense), *(c for c in cuts if c < len(dense))})
    for j, (lo, hi) in enumerate(zip(edges, edges[1:], strict=False)):
        piece = dense[lo:hi]
        if j % 2:
            b.observe_steps([t for t, _ in piece], [math.nan if v is None else v for _, v in piece])
        else:
            for t, v in piece:
                b.observe(t, v)
    assert a.mean(11.0) == b.mean(11.0)

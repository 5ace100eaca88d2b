"""F20 (the routing score), its argmax, and the chunk arithmetic of E17 / check T19."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.cluster.score import (
    CHUNK_TOKENS,
    best_node,
    chunks_skipped,
    prefill_tokens,
    routing_score,
)


def test_e17_t19_worked_example():
    """S = 40 000, 32 000 cached on worker 1: 2 500 chunks, 2 000 skipped, 8 000 prefilled,
    Match/S = 0.8 (rule 3.15.4, E17, T19)."""
    s, cached = 40_000, 32_000
    assert CHUNK_TOKENS == 16
    assert chunks_skipped(s) == 2_500
    assert chunks_skipped(cached) == 2_000
    assert prefill_tokens(s, cached) == 8_000
    assert routing_score(cached, s, 0, 0, mu=1.0, gamma=1.0) == pytest.approx(0.8)
    # worker 1 wins against an empty, idle worker 0 under pure affinity
    scores = [routing_score(m, s, 0, 0, mu=1.0, gamma=1.0) for m in (0, cached)]
    assert best_node(scores) == 1


def test_f20_by_hand():
    """mu = 0.5, gamma = 1: 0.5 * 0.8 - 0.5 * (4 / 8) = 0.15; an idle empty node scores 0."""
    s = 40_000
    assert routing_score(32_000, s, 4, 8, mu=0.5, gamma=1.0) == pytest.approx(0.15)
    assert routing_score(0, s, 0, 8, mu=0.5, gamma=1.0) == 0.0
    # the loaded node with the cache wins at load 4 ...
    assert best_node([routing_score(0, s, 0, 8, mu=0.5, gamma=1), 0.15]) == 1
    # ... and loses at load 8: 0.4 - 0.5 = -0.1
    assert routing_score(32_000, s, 8, 8, mu=0.5, gamma=1.0) == pytest.approx(-0.1)
    # gamma = 2 softens a half load: 0.4 - 0.5 * 0.25 = 0.275
    assert routing_score(32_000, s, 4, 8, mu=0.5, gamma=2.0) == pytest.approx(0.275)
    # mu = 0: load only; mu = 1: affinity only
    assert routing_score(32_000, s, 2, 8, mu=0.0, gamma=1.0) == pytest.approx(-0.25)
    assert routing_score(8_000, s, 8, 8, mu=1.0, gamma=3.0) == pytest.approx(0.2)


def test_degenerate_cases_are_defined():
    """S = 0 -> affinity 0; L_max = 0 -> load term 0; a match past the prompt counts as it."""
    assert routing_score(0, 0, 3, 5, mu=0.5, gamma=1.0) == pytest.approx(-0.3)
    assert routing_score(100, 200, 7, 0, mu=0.5, gamma=1.0) == pytest.approx(0.25)
    assert routing_score(500, 200, 0, 0, mu=0.5, gamma=1.0) == pytest.approx(0.5)
    assert chunks_skipped(15) == 0 and chunks_skipped(16) == 1 and chunks_skipped(-3) == 0
    assert chunks_skipped(64, chunk_tokens=32) == 2
    assert prefill_tokens(100, 150) == 0 and prefill_tokens(100, 0) == 100
    with pytest.raises(ValueError, match="chunk_tokens"):
        chunks_skipped(10, chunk_tokens=0)


def test_best_node_ties_go_to_the_lowest_id():
    assert best_node([0.1, 0.3, 0.3, 0.2]) == 1
    assert best_node([-1.0, -1.0]) == 0
    assert best_node([0.0]) == 0
    assert best_node([0.2, 0.1, 0.25]) == 2
    with pytest.raises(ValueError, match="no nodes"):
        best_node([])


@given(st.lists(st.integers(-3, 3), min_size=1, max_size=8))
def test_best_node_is_the_first_maximum(scores):
    got = best_node([float(s) for s in scores])
    assert scores[got] == max(scores) and got == scores.index(max(scores))


unit = st.floats(0.0, 1.0)
pos = st.floats(0.05, 4.0)


@given(
    st.integers(0, 100_000),
    st.integers(0, 100_000),
    st.integers(1, 100_000),
    st.floats(0, 64),
    st.floats(0, 64),
    unit,
    pos,
)
def test_score_is_monotone_in_match_and_antitone_in_load(m1, m2, s, l1, load_max, mu, gamma):
    lo, hi = sorted((m1, m2))
    load = min(l1, load_max)
    assert routing_score(lo, s, load, load_max, mu=mu, gamma=gamma) <= routing_score(
        hi, s, load, load_max, mu=mu, gamma=gamma
    )
    less, more = sorted((l1, load_max))  # loads up to L_max, and L_max itself
    a = routing_score(lo, s, less, 64, mu=mu, gamma=gamma)
    b = routing_score(lo, s, more, 64, mu=mu, gamma=gamma)
    assert b <= a + 1e-12
    assert math.isfinite(a) and -1.0 - 1e-12 <= b <= 1.0 + 1e-12

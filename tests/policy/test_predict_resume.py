"""Wait prediction (running statistics, oracle), resume timelines (rule 3.13), the registry."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import ConfigError, UnknownNameError
from sim.policy import (
    PrefetchPlan,
    ToolWaitStats,
    WaitPredictor,
    make_policy,
    policy_names,
    resume_timeline,
    speculative_fire_s,
)


# ------------------------------------------------------------------- prediction
def test_running_statistics_per_tool():
    p = WaitPredictor("mean")
    assert p.predict("pytest") is None
    for w in (4.0, 2.0, 9.0):
        p.observe("pytest", w)
    p.observe("ls", 0.1)
    assert p.predict("pytest") == pytest.approx(5.0)
    assert p.min_wait_s("pytest") == 2.0 and p.min_wait_s("grep") is None
    s = p.stats("pytest")
    assert (s.count, s.min_s, s.max_s) == (3, 2.0, 9.0)
    assert WaitPredictor("min").predict("x") is None
    mn = WaitPredictor("min")
    for w in (4.0, 2.0, 9.0):
        mn.observe("t", w)
    assert mn.predict("t") == 2.0
    q = WaitPredictor("quantile", quantile=0.5)
    for w in (4.0, 2.0, 9.0, 1.0):
        q.observe("t", w)
    assert q.predict("t") == 3.0  # median of 1, 2, 4, 9


def test_prior_and_oracle():
    assert WaitPredictor(prior_wait_s=7.0).predict("new") == 7.0
    o = WaitPredictor("oracle")
    o.observe("t", 1.0)
    assert o.predict("t", true_wait_s=45.0) == 45.0
    with pytest.raises(ValueError, match="true wait"):
        o.predict("t")
    with pytest.raises(ValueError, match="unknown mode"):
        WaitPredictor("median")
    with pytest.raises(ValueError):
        ToolWaitStats().observe(-1.0)


def test_window_drops_the_oldest_but_mean_and_min_stay_exact():
    s = ToolWaitStats(window=3)
    for w in (1.0, 100.0, 5.0, 6.0, 7.0):
        s.observe(w)
    assert s.window_size == 3
    assert s.quantile(0.0) == 5.0 and s.quantile(1.0) == 7.0
    assert s.min_s == 1.0 and s.max_s == 100.0 and s.mean_s == pytest.approx(23.8)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=60),
    st.integers(1, 20),
    st.floats(0, 1),
)
def test_quantile_matches_numpy_over_the_window(waits, window, q):
    s = ToolWaitStats(window=window)
    for w in waits:
        s.observe(w)
    recent = waits[-window:]
    assert s.quantile(q) == pytest.approx(float(np.quantile(recent, q)), rel=1e-9, abs=1e-9)
    assert s.mean_s == pytest.approx(float(np.mean(waits)), rel=1e-9, abs=1e-9)
    assert s.min_s == min(waits) and s.count == len(waits)


# ------------------------------------------------------------------- resume timelines
def test_naive_reload_is_a_bubble_after_the_tool():
    t = resume_timeline(None, wait_s=45.0, reload_s=0.021, egress_s=0.021)
    assert (t.reload_start_s, t.reload_done_s, t.early_hbm_s) == (45.0, 45.021, 0.0)
    assert t.stall_s == pytest.approx(0.021)
    # the tool returned before the copy-out finished: wait for it, then reload
    t = resume_timeline(PrefetchPlan("naive"), wait_s=0.01, reload_s=0.021, egress_s=0.021)
    assert t.reload_start_s == 0.021 and t.stall_s == pytest.approx(0.032)


def test_e25_speculative_prefetch():
    fire = speculative_fire_s(2.0, 0.0, 0.2)
    assert fire == pytest.approx(1.8)  # the chapter's timer
    plan = PrefetchPlan("speculative", fire)
    on_time = resume_timeline(plan, wait_s=3.0, reload_s=0.0)
    assert on_time.stall_s == 0.0 and on_time.early_hbm_s == pytest.approx(1.2)
    # E24's 21 ms reload with 0.2 s of lead before a 2 s minimum: resident in time
    fire = speculative_fire_s(2.0, 0.021, 0.2, egress_s=0.021)
    t = resume_timeline(
        PrefetchPlan("speculative", fire), wait_s=2.0, reload_s=0.021, egress_s=0.021
    )
    assert t.stall_s == 0.0 and t.reload_done_s == pytest.approx(1.8)
    # returns while the copy runs: waits for the rest of it
    t = resume_timeline(PrefetchPlan("speculative", 1.0), wait_s=1.5, reload_s=1.0)
    assert t.stall_s == pytest.approx(0.5) and t.early_hbm_s == pytest.approx(0.5)
    # returns before the timer: reload starts at the return, like naive
    t = resume_timeline(PrefetchPlan("speculative", 1.0), wait_s=0.5, reload_s=1.0)
    assert (t.reload_start_s, t.stall_s, t.early_hbm_s) == (0.5, 1.0, 0.0)
    assert speculative_fire_s(0.1, 0.021, 0.2, egress_s=0.021) == 0.021


def test_pipelined_stall_is_what_prefill_cannot_hide():
    plan = PrefetchPlan("pipelined")
    t = resume_timeline(plan, wait_s=10.0, reload_s=0.5, overlappable_prefill_s=0.2)
    assert t.stall_s == pytest.approx(0.3) and t.reload_start_s == 10.0
    assert resume_timeline(plan, wait_s=10.0, reload_s=0.5, overlappable_prefill_s=0.7).stall_s == 0
    late = resume_timeline(plan, wait_s=0.1, reload_s=0.5, egress_s=0.5, overlappable_prefill_s=1.0)
    assert late.stall_s == pytest.approx(0.4)  # only the copy-out still running


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["naive", "speculative", "pipelined"]),
    st.floats(0, 100),
    st.floats(0, 10),
    st.floats(0, 10),
    st.floats(0, 100),
    st.floats(0, 10),
)
def test_timeline_invariants(strategy, wait, reload, egress, fire, overlap):
    plan = PrefetchPlan(strategy, fire if strategy == "speculative" else None)
    t = resume_timeline(
        plan, wait_s=wait, reload_s=reload, egress_s=egress, overlappable_prefill_s=overlap
    )
    assert t.stall_s >= 0 and t.early_hbm_s >= 0
    assert t.reload_start_s >= egress
    assert t.reload_done_s == pytest.approx(t.reload_start_s + reload)
    naive = resume_timeline(None, wait_s=wait, reload_s=reload, egress_s=egress)
    assert t.stall_s <= naive.stall_s + 1e-9  # prefetching never makes the stall worse


# ------------------------------------------------------------------- registry
def test_registry_names_and_errors():
    assert policy_names() == [
        "break_even",
        "hints",
        "hold",
        "min_waste",
        "offload_host",
        "offload_nvme",
        "recompute",
        "ttl_pin",
    ]
    with pytest.raises(UnknownNameError, match="valid: break_even, hints, hold"):
        make_policy("swap")
    with pytest.raises(ConfigError, match=r"pause_policy.horizon: unknown option.*horizon_s"):
        make_policy("break_even", horizon=5)
    with pytest.raises(ConfigError, match="pause_policy.ttl_s"):
        make_policy("ttl_pin", ttl_s=-1)
    with pytest.raises(ConfigError, match="mu_dram must be below mu_hbm"):
        make_policy("break_even", mu_hbm=1, mu_dram=1)
    with pytest.raises(ConfigError, match="pause_policy.resume"):
        make_policy("hold", resume="eager")
    with pytest.raises(ConfigError, match="pause_policy.predictor.mode"):
        make_policy("hold", predictor={"mode": "median"})
    p = make_policy("ttl_pin", ttl_s=3)
    assert make_policy(p.options).options == p.options

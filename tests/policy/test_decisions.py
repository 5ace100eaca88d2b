"""Pause-policy decisions at the boundaries of E21-E26 (exact thresholds from F29-F33)."""

from __future__ import annotations

import math

import pytest

from sim.policy import Decision, PauseFacts, PrefetchPlan, make_policy
from sim.policy.facts import facts_for_context
from sim.policy.min_waste import (
    discard_waste_byte_s,
    preserve_waste_byte_s,
    swap_waste_byte_s,
)
from sim.profiles.registry import load_accelerator, load_model
from sim.units import GB, GiB

H100 = load_accelerator("h100-sxm-80gb")
LLAMA70 = load_model("llama-3-70b")
R_E24 = 0.45 * 8 * H100.peak_bf16_flops_per_s  # 45 % MFU on 8 x H100


def e24(wait_s=45.0, **kw) -> PauseFacts:
    """E24: 32,768 tokens of Llama-3-70B (70.6e9 params) on 8 x H100, 64 GB/s per link."""
    kw.setdefault("host_free_bytes", 1e12)
    return facts_for_context(
        LLAMA70,
        32768,
        tp=8,
        params=70.6e9,
        link_bw_bytes_per_s=64e9,
        prefill_flops_per_s=R_E24,
        predicted_wait_s=wait_s,
        **kw,
    )


def e22(wait_s, link=50e9, **kw) -> PauseFacts:
    """E22: 16,384 tokens (5 GiB) on one GPU, 50 GB/s, 400 TFLOP/s."""
    kw.setdefault("host_free_bytes", 1e12)
    return facts_for_context(
        LLAMA70,
        16384,
        params=70e9,
        link_bw_bytes_per_s=link,
        prefill_flops_per_s=400e12,
        predicted_wait_s=wait_s,
        **kw,
    )


# ------------------------------------------------------------------- facts (F29-F32)
def test_e21_hold_cost_360_gb_s():
    f = PauseFacts(1, 6e9, 6e9, 60.0, 0.5, 1e9, 1e12, 0.0)
    assert f.hold_byte_s(60.0) == 360 * GB


def test_e24_facts_match_the_chapter():
    f = e24()
    assert f.state_bytes_total == 32768 * 327680 == pytest.approx(10.737e9, rel=1e-4)
    assert f.state_bytes_per_gpu == 32768 * 40960
    assert f.reload_s == pytest.approx(0.02097152, rel=1e-12)
    assert f.round_trip_s == pytest.approx(0.04194304, rel=1e-12)
    assert f.recompute_s == pytest.approx(2 * 70.6e9 * 32768 / R_E24, rel=1e-12)
    assert f.recompute_s == pytest.approx(1.2990, abs=5e-4)
    assert f.hold_byte_s(45) / GB == pytest.approx(483.18, abs=0.01)
    assert f.recompute_s / f.reload_s == pytest.approx(61.94, abs=0.01)


def test_e22_round_trip_and_recompute():
    f = e22(1.0)
    assert f.state_bytes_total == 5 * GiB
    assert f.round_trip_s == pytest.approx(0.214748, rel=1e-5)
    assert f.recompute_s == pytest.approx(5.7344, rel=1e-4)


def test_e26_nvme_reload_357_to_714_ms_and_gds():
    base = dict(
        tokens=1,
        state_bytes_per_gpu=5e9,
        state_bytes_total=5e9,
        predicted_wait_s=1,
        hbm_free_fraction=0,
        link_bw_bytes_per_s=1e18,
        prefill_flops_per_s=1,
        recompute_flops=0,
    )
    assert PauseFacts(**base, nvme_bw_bytes_per_s=14e9).nvme_reload_s == pytest.approx(
        0.357142857, rel=1e-6
    )
    assert PauseFacts(**base, nvme_bw_bytes_per_s=7e9).nvme_reload_s == pytest.approx(
        0.714285714, rel=1e-6
    )
    # a real link: staged through host memory the legs add up; GPUDirect Storage overlaps them
    staged = PauseFacts(**{**base, "link_bw_bytes_per_s": 50e9}, nvme_bw_bytes_per_s=10e9)
    gds = PauseFacts(
        **{**base, "link_bw_bytes_per_s": 50e9}, nvme_bw_bytes_per_s=10e9, nvme_gds=True
    )
    assert staged.nvme_reload_s == pytest.approx(0.5 + 0.1)
    assert gds.nvme_reload_s == pytest.approx(0.5)
    assert PauseFacts(**base).nvme_reload_s == math.inf


@pytest.mark.parametrize(
    "field,value",
    [
        ("tokens", -1),
        ("state_bytes_total", -1.0),
        ("link_bw_bytes_per_s", 0.0),
        ("prefill_flops_per_s", 0.0),
        ("hbm_free_fraction", 1.5),
        ("predicted_wait_s", -0.1),
        ("host_free_bytes", math.nan),
    ],
)
def test_facts_reject_nonsense(field, value):
    base = dict(
        tokens=1,
        state_bytes_per_gpu=1,
        state_bytes_total=1,
        predicted_wait_s=1,
        hbm_free_fraction=0.5,
        link_bw_bytes_per_s=1,
        prefill_flops_per_s=1,
        recompute_flops=1,
    )
    with pytest.raises(ValueError, match=field):
        PauseFacts(**{**base, field: value})


def test_decision_validation():
    with pytest.raises(ValueError, match="unknown action"):
        Decision("swap")
    with pytest.raises(ValueError, match="prefetch"):
        Decision("hold", prefetch=PrefetchPlan("naive"))
    with pytest.raises(ValueError, match="together"):
        Decision("hold", ttl_s=2.0)
    with pytest.raises(ValueError, match="non-hold"):
        Decision("hold", ttl_s=2.0, release="hold")
    with pytest.raises(ValueError, match="TTL"):
        Decision("recompute", ttl_s=2.0, release="offload_host")
    with pytest.raises(ValueError, match="recompute only"):
        Decision("hold", evict_from_prefix_cache=True)
    with pytest.raises(ValueError, match="fire time"):
        PrefetchPlan("speculative")
    with pytest.raises(ValueError, match="fire time"):
        PrefetchPlan("naive", 1.0)
    d = Decision("hold", ttl_s=2.0, release="offload_host", prefetch=PrefetchPlan("pipelined"))
    assert d.moves_to == "offload_host" and d.prefetch.pipelined


# ------------------------------------------------------------------- fixed policies
def test_fixed_policies_answer_their_action():
    f = e24(nvme_free_bytes=1e13, nvme_bw_bytes_per_s=56e9)
    assert make_policy("hold").decide(f).action == "hold"
    rec = make_policy("recompute", evict_from_prefix_cache=True).decide(f)
    assert rec.action == "recompute" and rec.evict_from_prefix_cache
    assert not make_policy("recompute").decide(f).evict_from_prefix_cache
    host = make_policy("offload_host").decide(f)
    assert host.action == "offload_host" and host.prefetch == PrefetchPlan("naive")
    assert make_policy("offload_nvme").decide(f).action == "offload_nvme"


def test_offload_host_full_falls_back_exactly_at_capacity():
    need = e24().state_bytes_total
    assert make_policy("offload_host").decide(e24(host_free_bytes=need)).action == "offload_host"
    short = e24(host_free_bytes=need - 1)
    assert make_policy("offload_host").decide(short).action == "hold"
    assert make_policy("offload_host", when_full="recompute").decide(short).action == "recompute"
    to_nvme = make_policy("offload_host", when_full="offload_nvme")
    assert to_nvme.decide(short).action == "hold"  # no NVMe either
    nv = e24(host_free_bytes=0, nvme_free_bytes=need, nvme_bw_bytes_per_s=7e9)
    assert to_nvme.decide(nv).action == "offload_nvme"


def test_offload_nvme_without_drives_holds():
    assert make_policy("offload_nvme").decide(e24()).action == "hold"
    f = e24(host_free_bytes=1e12, nvme_free_bytes=0, nvme_bw_bytes_per_s=7e9)
    assert make_policy("offload_nvme", when_full="offload_host").decide(f).action == "offload_host"


# ------------------------------------------------------------------- break_even (F33)
def test_e22_break_even_is_the_round_trip():
    p = make_policy("break_even")
    rt = e22(0.0).round_trip_s
    assert p.host_threshold_s(e22(0.0)) == rt
    assert p.decide(e22(rt)).action == "hold"  # at T* exactly: holding costs no more
    assert p.decide(e22(math.nextafter(rt, 1))).action == "offload_host"
    assert p.decide(e22(0.2)).action == "hold"
    assert p.decide(e22(0.22)).action == "offload_host"


def test_e23_c2c_threshold_below_20_ms():
    p = make_policy("break_even")
    f = e22(0.020, link=900e9)
    assert f.round_trip_s == pytest.approx(0.01193, abs=1e-5)
    assert p.decide(f).action == "offload_host"
    assert p.decide(e22(0.020)).action == "hold"  # the same wait over PCIe at 50 GB/s


def test_shadow_prices_and_stall_move_the_threshold():
    rt = e22(0.0).round_trip_s
    p = make_policy("break_even", mu_hbm=2.0, mu_dram=1.0, stall_s=0.1)
    assert p.host_threshold_s(e22(0.0)) == pytest.approx(2 * rt + 0.1)
    assert p.decide(e22(2 * rt + 0.0999)).action == "hold"
    assert p.decide(e22(2 * rt + 0.1001)).action == "offload_host"


def test_e24_offloads_to_host_within_the_horizon():
    d = make_policy("break_even").decide(e24(45.0))
    assert d.action == "offload_host" and d.reason == "wait within the host horizon"
    assert make_policy("break_even").decide(e24(0.04)).action == "hold"  # < 41.9 ms round trip


def test_escalates_to_nvme_beyond_horizon_or_when_host_short():
    p = make_policy("break_even")
    need = e24().state_bytes_total
    nv = dict(nvme_free_bytes=1e13, nvme_bw_bytes_per_s=56e9)
    assert p.decide(e24(60.0, **nv)).action == "offload_host"  # horizon inclusive
    beyond = p.decide(e24(60.001, **nv))
    assert beyond.action == "offload_nvme" and "horizon" in beyond.reason
    short = p.decide(e24(45.0, host_free_bytes=need - 1, **nv))
    assert short.action == "offload_nvme" and "short" in short.reason
    reserve = make_policy("break_even", host_reserve_bytes=1.0)
    assert reserve.decide(e24(45.0, host_free_bytes=need, **nv)).action == "offload_nvme"
    # beyond the horizon with no NVMe: host DRAM is still better than HBM
    assert p.decide(e24(600.0)).action == "offload_host"
    # a wait above the host T* but under the NVMe round trip never goes to NVMe
    slow = dict(nvme_free_bytes=1e13, nvme_bw_bytes_per_s=1e9)  # 10.7 s per way
    f = e24(15.0, host_free_bytes=0, **slow)
    assert f.nvme_round_trip_s > 15.0 and p.decide(f).action == "recompute"


def test_nowhere_to_park_recomputes_only_when_the_wait_exceeds_the_recompute():
    p = make_policy("break_even")
    rc = e24().recompute_s
    assert p.decide(e24(rc, host_free_bytes=0)).action == "hold"
    assert p.decide(e24(math.nextafter(rc, 2), host_free_bytes=0)).action == "recompute"


def test_reload_not_faster_than_recompute_drops():
    """Rule 3.11.2: recompute is appropriate "when reload is not faster (F31)". E22's
    5 GiB over 50 GB/s reloads in 107.4 ms (round trip 214.7 ms): a recompute priced at
    exactly that (not faster to reload) drops the state; one a hair slower offloads as
    before. With no tier faster than the recompute, a wait past the recompute time drops
    even under the round trip (no copy will be made: holding only keeps HBM), and a wait
    under it holds. Beyond the horizon the NVMe path (drives then link) is the reload that
    counts; a slow NVMe is passed over for host DRAM with room, never dropped to."""
    p = make_policy("break_even")
    rl = 5 * GiB / 50e9
    assert e22(0.0).reload_s == rl
    tie = p.decide(e22(5.0, recompute_priced_s=rl))
    assert tie.action == "recompute" and "F31" in tie.reason
    assert p.decide(e22(5.0, recompute_priced_s=math.nextafter(rl, 1))).action == "offload_host"
    short = p.decide(e22(0.2, recompute_priced_s=rl))  # under the round trip, over rl
    assert short.action == "recompute" and "F31" in short.reason
    assert p.decide(e22(0.1, recompute_priced_s=rl)).action == "hold"  # under the recompute
    assert p.decide(e22(0.2, recompute_priced_s=math.nextafter(rl, 1))).action == "hold"
    nv = dict(nvme_free_bytes=1e13, nvme_bw_bytes_per_s=10 * GiB)  # 0.5 s + 107.4 ms a way
    between = 0.5 + rl - 0.001  # slower than the host reload, faster than NVMe's
    assert p.decide(e22(30.0, recompute_priced_s=between, **nv)).action == "offload_host"
    far = p.decide(e22(3600.0, recompute_priced_s=between, **nv))
    assert far.action == "offload_host" and far.reason == "beyond the horizon, no usable NVMe"
    assert p.decide(e22(3600.0, recompute_priced_s=0.5 + rl + 0.001, **nv)).action == "offload_nvme"
    # NVMe's path includes the host link: a host reload no faster than the recompute
    # makes NVMe's no faster either, so nothing parks the state
    slow = p.decide(e22(3600.0, recompute_priced_s=rl, **nv))
    assert slow.action == "recompute" and "F31" in slow.reason


def test_unknown_wait_holds():
    for kind in ("break_even", "min_waste"):
        assert make_policy(kind).decide(e24(None)).action == "hold"


# ------------------------------------------------------------------- min_waste (InferCept)
def test_min_waste_e24_discards_without_budget_and_swaps_within_it():
    f = e24(swap_budget_bytes_per_gpu=0.0)
    assert preserve_waste_byte_s(f) / GB == pytest.approx(483.18, abs=0.01)
    assert discard_waste_byte_s(f) / GB == pytest.approx(1.29899 * 10.73742, rel=1e-4)
    assert swap_waste_byte_s(f) / GB == pytest.approx(0.04194304 * 10.73741824, rel=1e-9)
    p = make_policy("min_waste")
    assert p.decide(f).action == "recompute"
    exact = e24(swap_budget_bytes_per_gpu=f.state_bytes_per_gpu)
    assert p.decide(exact).action == "offload_host"
    assert p.decide(e24(swap_budget_bytes_per_gpu=f.state_bytes_per_gpu - 1)).action == (
        "recompute"
    )
    assert p.decide(e24(host_free_bytes=0)).action == "recompute"  # budget but no host room


def test_min_waste_preserve_discard_tie_preserves():
    rc = e24().recompute_s
    p = make_policy("min_waste")
    assert p.decide(e24(rc, swap_budget_bytes_per_gpu=0)).action == "hold"
    assert p.decide(e24(rc * 1.001, swap_budget_bytes_per_gpu=0)).action == "recompute"
    # the running batch makes discarding dearer: preserve wins the same wait
    busy = e24(rc * 1.001, swap_budget_bytes_per_gpu=0, running_batch_bytes=1e9)
    assert p.decide(busy).action == "hold"


def test_min_waste_short_wait_preserves_even_with_budget():
    f = e24(0.03)  # preserve 0.32 GB*s < swap 0.45 GB*s
    assert make_policy("min_waste").decide(f).action == "hold"


def test_min_waste_spends_the_budget_on_the_most_wasteful_first():
    p = make_policy("min_waste")
    per_gpu = e24().state_bytes_per_gpu
    short, long_ = e24(10.0), e24(45.0)
    out = p.decide_many([short, long_], budget_bytes_per_gpu=per_gpu * 1.5)
    assert [d.action for d in out] == ["recompute", "offload_host"]
    both = p.decide_many([short, long_], budget_bytes_per_gpu=per_gpu * 2)
    assert [d.action for d in both] == ["offload_host", "offload_host"]
    # host DRAM for one only: the longer wait gets it
    need = e24().state_bytes_total
    tight = [e24(10.0, host_free_bytes=need), e24(45.0, host_free_bytes=need)]
    assert [d.action for d in p.decide_many(tight, per_gpu * 2)] == ["recompute", "offload_host"]


# ------------------------------------------------------------------- ttl_pin (Continuum)
def test_ttl_pin_pins_short_and_unknown_tools_at_the_boundary():
    p = make_policy("ttl_pin")
    for wait in (None, 0.0, 2.0):
        d = p.decide(e24(wait))
        assert (d.action, d.ttl_s, d.release) == ("hold", 2.0, "recompute")
    d = p.decide(e24(math.nextafter(2.0, 3)))
    assert (d.action, d.ttl_s) == ("recompute", None)
    last = p.decide(e24(1.0, is_last_turn=True))
    assert (last.action, last.reason) == ("recompute", "last step: never pinned")


def test_ttl_pin_fallbacks():
    p = make_policy("ttl_pin", ttl_s=5.0, short_wait_s=1.0, fallback="offload_host")
    d = p.decide(e24(0.5))
    assert (d.action, d.ttl_s, d.release, d.prefetch) == (
        "hold",
        5.0,
        "offload_host",
        PrefetchPlan("naive"),
    )
    assert p.decide(e24(45.0)).action == "offload_host"
    assert p.decide(e24(45.0, host_free_bytes=0)).action == "recompute"
    nv = make_policy("ttl_pin", fallback="offload_nvme")
    assert nv.decide(e24(45.0)).action == "recompute"  # no NVMe
    f = e24(45.0, nvme_free_bytes=1e13, nvme_bw_bytes_per_s=7e9)
    assert nv.decide(f).action == "offload_nvme"


# ------------------------------------------------------------------- prefetch and preemption
def test_e25_speculative_plan_fires_before_the_minimum():
    p = make_policy("offload_host", resume="speculative", prefetch_margin_s=0.2)
    f = e24(3.0, tool_min_wait_s=2.0)
    d = p.decide(f)
    assert d.prefetch.strategy == "speculative"
    assert d.prefetch.fire_after_s == pytest.approx(2.0 - 0.02097152 - 0.2, rel=1e-12)
    # never before the copy-out completes
    early = p.decide(e24(3.0, tool_min_wait_s=0.1))
    assert early.prefetch.fire_after_s == pytest.approx(f.reload_s)
    # no samples of this tool yet: naive
    assert p.decide(e24(3.0)).prefetch == PrefetchPlan("naive")
    pipe = make_policy("break_even", resume="pipelined").decide(f)
    assert pipe.prefetch == PrefetchPlan("pipelined") and pipe.prefetch.pipelined


def test_decisions_are_pure():
    p = make_policy("break_even")
    f = e24()
    assert p.decide(f) == p.decide(f) == make_policy("break_even").decide(f)

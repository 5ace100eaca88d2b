"""The ``hints`` pause policy and its ``KVHint`` (the agent-hint RFCs' fields)."""

from __future__ import annotations

import pytest

from sim.errors import ConfigError
from sim.policy import KVHint, PauseFacts, PrefetchPlan, make_policy

M, LINK = 1e9, 1e10  # one way 0.1 s


def facts(hint=None, free=0.5, host_free=1e12, nvme_free=0.0) -> PauseFacts:
    return PauseFacts(
        tokens=1000, state_bytes_per_gpu=M, state_bytes_total=M, predicted_wait_s=None,
        hbm_free_fraction=free, link_bw_bytes_per_s=LINK, prefill_flops_per_s=1e12,
        recompute_flops=5e11, host_free_bytes=host_free, nvme_free_bytes=nvme_free,
        nvme_bw_bytes_per_s=1e9 if nvme_free else 0.0, hint=hint, pool_bytes=1e10,
    )  # fmt: skip


def decide(hint, **kw):
    options = {k: kw.pop(k) for k in list(kw) if k not in ("free", "host_free", "nvme_free")}
    return make_policy("hints", **options).decide(facts(hint, **kw))


def test_no_hint_takes_no_hint_action():
    assert decide(None).action == "hold"
    assert decide(None, no_hint="recompute").action == "recompute"
    assert decide(None, no_hint="offload_host", host_free=0.0).action == "recompute"


def test_release_drops_the_context_and_its_cache():
    d = decide(KVHint(release=True))
    assert d.action == "recompute" and d.evict_from_prefix_cache and d.hint_refused == ""


def test_pin_holds_for_the_lease_then_demotes():
    d = decide(KVHint(pin_for_s=1.5, demote="host", prefetch_at_s=1.2))
    assert (d.action, d.ttl_s, d.release) == ("hold", 1.5, "offload_host")
    # the reload is timed to end prefetch_margin_s (0.2) before the expected return,
    # never before the copy-out (0.1 s) has ended
    assert d.prefetch == PrefetchPlan("speculative", 1.2 - 0.1 - 0.2)
    assert decide(KVHint(pin_for_s=1.5, prefetch_at_s=0.2)).prefetch is None  # no tier
    assert decide(KVHint(pin_for_s=1.5)).release == "recompute"  # the fallback


def test_pin_refused_under_hbm_pressure_unless_retained():
    d = decide(KVHint(pin_for_s=1.5), free=0.05)  # below min_free_fraction 0.1
    assert d.action == "recompute" and d.hint_refused == "pin: HBM short"
    kept = decide(KVHint(pin_for_s=1.5, retain_priority=2.0), free=0.05)
    assert kept.action == "hold" and kept.hint_refused == ""
    # refused pin, then its demote tier is honoured
    d = decide(KVHint(pin_for_s=1.5, demote="host"), free=0.05)
    assert d.action == "offload_host" and d.hint_refused == "pin: HBM short"


def test_demote_to_a_full_tier_is_refused():
    d = decide(KVHint(demote="nvme", prefetch_at_s=30.0))  # no NVMe at all
    assert d.action == "recompute" and d.hint_refused == "demote: nvme full"
    d = decide(KVHint(demote="host", prefetch_at_s=30.0))
    assert d.action == "offload_host" and d.prefetch == PrefetchPlan("speculative", 29.7)
    lease_end = decide(KVHint(pin_for_s=1.0, demote="host"), host_free=0.0)
    assert lease_end.release == "recompute" and "host full" in lease_end.hint_refused


def test_a_hint_without_pin_or_demote_moves_nothing():
    assert decide(KVHint(retain_priority=3.0)).action == "hold"


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"pin_for_s": -1.0}, "pin_for_s"),
        ({"prefetch_at_s": float("inf")}, "prefetch_at_s"),
        ({"demote": "tape"}, "demote tier"),
        ({"release": True, "pin_for_s": 1.0}, "release"),
        ({"retain_priority": float("nan")}, "retain_priority"),
    ],
)
def test_bad_hints_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        KVHint(**kw)


def test_describe_and_options():
    h = KVHint(pin_for_s=1.5, retain_priority=2, demote="host", prefetch_at_s=1.2)
    assert h.describe() == "pin=1.5s retain=2 demote=host prefetch=1.2s"
    assert KVHint(release=True).describe() == "release"
    with pytest.raises(ConfigError, match="pause_policy.min_free_fraction"):
        make_policy("hints", min_free_fraction=2.0)

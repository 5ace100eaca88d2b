"""Provider prompt caching (rule 3.9): TTL expiry with refresh, breakpoints with look-back,
automatic granularity, minimum cacheable prefix and the bill, on the 4-call harness of
``test_harness`` (calls of 2304, 2688, 3072, 3456 tokens)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.errors import UnknownNameError
from sim.prefix.prompt import AgentPromptSpec, build_trajectory
from sim.prefix.provider import PRESETS, ProviderCache, bill_trajectory, preset

SPEC = AgentPromptSpec(
    system_tokens=1024,
    tool_tokens=(256,) * 4,
    task_tokens=256,
    output_tokens=128,
    observation_tokens=256,
    recent_turns=1,
    summary_tokens=256,
)
CALLS = build_trajectory(SPEC, 4)


def split(bill):
    return [(c.cached_tokens, c.written_tokens, c.uncached_tokens) for c in bill.calls]


def test_breakpoints_hit_the_previous_call_and_bill_the_write_surcharge():
    bill = bill_trajectory(CALLS, [0, 10, 20, 30], preset("explicit-5m"))
    # each call finds the previous call's end breakpoint by looking back over span ends
    assert split(bill) == [(0, 2304, 0), (2304, 384, 0), (2688, 384, 0), (3072, 384, 0)]
    assert [c.cost for c in bill.calls] == pytest.approx(
        [2304 * 1.25, 2304 * 0.1 + 384 * 1.25, 2688 * 0.1 + 480, 3072 * 0.1 + 480]
    )
    r = bill.total("cached_tokens") / (bill.total("prompt_tokens") - bill.total("cached_tokens"))
    assert bill.hit_rate == pytest.approx(8064 / 11520) == pytest.approx(r / (1 + r))


def test_a_tool_longer_than_the_ttl_returns_to_a_cold_cache():
    bill = bill_trajectory(CALLS, [0, 400, 800, 1200], preset("explicit-5m"))
    assert split(bill) == [(0, n, 0) for n in (2304, 2688, 3072, 3456)]
    assert bill.cost == pytest.approx(11520 * 1.25)  # worse than no cache at all (11520)
    longer = bill_trajectory(CALLS, [0, 400, 800, 1200], preset("explicit-1h"))
    assert longer.hit_rate == pytest.approx(8064 / 11520)


def test_a_hit_refreshes_the_ttl():
    bill = bill_trajectory(CALLS[:3], [0, 250, 500], preset("explicit-5m"))
    assert [c.cached_tokens for c in bill.calls] == [0, 2304, 2688]  # 500 s after call 0
    cache = ProviderCache(preset("explicit-5m"))
    cache.call(CALLS[0].segments, 0, [2048])
    for t in (299, 598, 897):  # each hit restarts the 300 s clock
        assert cache.call(CALLS[0].segments, t, [2048]).cached_tokens == 2048
    assert cache.call(CALLS[0].segments, 897 + 300, [2048]).cached_tokens == 0  # expired


def test_automatic_mode_caches_in_granularity_steps_without_surcharge():
    bill = bill_trajectory(CALLS, [0, 10, 20, 30], preset("automatic-5m"))
    assert split(bill) == [(0, 2304, 0), (2304, 384, 0), (2688, 384, 0), (3072, 384, 0)]
    assert bill.calls[1].cost == pytest.approx(2304 * 0.5 + 384)
    coarse = bill_trajectory(
        CALLS, [0, 10, 20, 30], preset("automatic-5m", granularity_tokens=1000)
    )
    assert [c.cached_tokens for c in coarse.calls] == [0, 2000, 2000, 3000]


def test_minimum_cacheable_prefix_and_breakpoint_limit():
    short = [("sys", 800)]
    cache = ProviderCache(preset("explicit-5m"))
    for t in (0, 1):
        assert (cache.call(short, t, [800]).cached_tokens, cache.call(short, t, [800]).cost) == (
            0,
            800,
        )
    cache = ProviderCache(preset("explicit-5m", max_breakpoints=2, lookback_boundaries=0))
    spans = [("a", 1024), ("b", 1024), ("c", 1024), ("d", 1024)]
    assert cache.call(spans, 0, [1024, 2048, 3072, 4096]).written_tokens == 4096
    # only the last two breakpoints were written: a call ending at 2048 finds nothing
    assert cache.call(spans[:2], 1, [1024, 2048]).cached_tokens == 0
    assert cache.call(spans, 2, [3072, 4096]).cached_tokens == 4096


def test_fleet_shares_one_cache():
    spec = replace(SPEC)
    a, b = build_trajectory(spec, 1, name="a"), build_trajectory(spec, 1, name="b")
    cache = ProviderCache(preset("explicit-5m"))
    bill_trajectory(a, [0], cache.spec, cache=cache)
    assert bill_trajectory(b, [5], cache.spec, cache=cache).calls[0].cached_tokens == 2048


def test_presets_are_editable_examples():
    assert set(PRESETS) == {"explicit-5m", "explicit-1h", "automatic-5m", "automatic-disk"}
    p = preset("explicit-5m", ttl_s=600, input_price=3e-6)
    assert p.ttl_s == 600 and PRESETS["explicit-5m"].ttl_s == 300
    with pytest.raises(UnknownNameError, match="valid: automatic-5m"):
        preset("anthropic")
    with pytest.raises(UnknownNameError, match="provider cache mode"):
        replace(p, mode="magic")

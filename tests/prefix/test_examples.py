"""Worked examples (docs/model.md) of the prefix cache through the radix allocator: E15 (partial block
match) and E16 (TTFT saving, F23 through ``sim.sizing``). T33 is in ``test_radix_tree``."""

from __future__ import annotations

import pytest

from sim.memory import make_allocator
from sim.sizing import prefill_flops, prefill_time_s
from sim.units import GiB, KiB

M_TOKEN = 320 * KiB  # Llama-3-70B, bf16: 80 layers x 2 x 8 heads x 128 x 2 B (T1)


def test_e15_s_match_100_b16_serves_96():
    a = make_allocator("radix", pool_bytes=64 * 16 * M_TOKEN, kv_bytes_per_token=M_TOKEN)
    a.allocate("first", 112, content=[("ctx", 112)])
    r = a.allocate("second", 110, content=[("ctx", 100), ("new", 10)])
    assert r.matched_tokens == 96  # floor(100/16) x 16; 4 tail tokens recomputed
    rec = a.index.stats.records[-1]
    assert (rec.matched_tokens, rec.hit_tokens) == (100, 96)
    assert a.block_table("second")[:6] == a.block_table("first")[:6]


def test_e16_radix_hit_saves_167_ms_of_prefill():
    a = make_allocator("radix", pool_bytes=2 * GiB, kv_bytes_per_token=M_TOKEN)
    a.allocate("agent-1", 4096, content=[("shared-prefix", 4096)])
    a.free("agent-1")
    assert a.metrics().cached_bytes == 4096 * M_TOKEN == 1.25 * GiB  # M_KV of the prefix
    r = a.allocate("agent-2", 4096 + 32, content=[("shared-prefix", 4096), ("turn", 32)])
    assert r.matched_tokens == 4096
    computed = 4096 + 32 - r.matched_tokens
    assert computed == 32

    peak = 8 * 989e12  # 8 x H100 dense BF16
    full = prefill_flops(70e9, 80, 8192, 4096)
    assert full == pytest.approx(617.42e12, rel=5e-3)  # 573.44 linear + 43.98 attention
    t_full = prefill_time_s(full, 0.45, peak)
    assert t_full == pytest.approx(0.17341, rel=5e-3)
    saved = full - prefill_flops(70e9, 80, 8192, computed)
    assert saved > 600e12
    # the 32-token prefill is weight-read bound: 140 GB over 8 x 3.35 TB/s = 5.2 ms < 6 ms
    t_hit = max(
        prefill_time_s(prefill_flops(70e9, 80, 8192, computed), 0.45, peak), 140e9 / (8 * 3.35e12)
    )
    assert t_hit == pytest.approx(5.224e-3, rel=5e-3) and t_hit < 6e-3
    assert (t_full - 6e-3) * 1e3 == pytest.approx(167.4, rel=5e-3)  # saving vs the 6 ms bound
    assert t_full / 6e-3 == pytest.approx(28.9, rel=5e-3)  # the chapter's "28x" is a floor

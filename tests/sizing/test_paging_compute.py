"""F6, F12-F16, F21, F23, F29-F33 through the public functions (E4-E5, E10-E13, E16,
E18, E21-E26)."""

import math

import pytest

from sim.errors import KvsimError
from sim.sizing import (
    blocks_for_tokens,
    break_even_wait_s,
    deep_copy_bytes,
    expected_tail_waste_tokens,
    geometric_slack_tokens,
    hbm_free_window_s,
    hold_cost_byte_s,
    logical_block,
    node_tail_waste_bytes,
    offload_feasible,
    offload_round_trip_s,
    pool_blocks,
    prefill_flops,
    prefill_time_s,
    recompute_time_s,
    reload_over_recompute,
    reload_time_s,
    ridge_point,
    static_efficiency,
    static_efficiency_from_pmf,
    tail_waste_tokens,
)
from sim.units import GB, GiB, KiB, MiB

M = 327_680


def test_e4_static_efficiency_is_exactly_6_25_percent():
    """E4: the chapter says 'less than 6.25 %'; 2048/32768 is exactly 6.25 %."""
    assert static_efficiency(2048, 32768) == 0.0625


def test_f6_from_distribution():
    assert static_efficiency_from_pmf({1: 0.5, 3: 0.5}, 4) == 0.5
    with pytest.raises(KvsimError):
        static_efficiency_from_pmf({1: 0.5}, 4)


def test_e5_geometric_slack():
    assert geometric_slack_tokens(2048, 1025) == 1023


def test_f13_f14_f15_blocks_and_tail():
    assert blocks_for_tokens(100, 16) == 7
    assert blocks_for_tokens(96, 16) == 6
    assert logical_block(100, 16) == (6, 4)
    assert tail_waste_tokens(100, 16) == 12
    assert tail_waste_tokens(96, 16) == 0
    assert expected_tail_waste_tokens(16) == 7.5


def test_e10_tail_waste_share_and_16x_concurrency():
    """E10: 7.5/2048 = 0.37 % (B=16), 31.5/2048 = 1.54 % (B=64); 48 -> 780 trajectories."""
    assert expected_tail_waste_tokens(16) / 2048 == pytest.approx(0.00366, abs=1e-5)
    assert expected_tail_waste_tokens(64) / 2048 == pytest.approx(0.01538, abs=1e-5)
    worst = math.floor(526e9 / (32768 * M))
    paged = math.floor(526e9 / ((2048 + 7.5) * M))
    assert (worst, paged) == (48, 780)
    assert paged / worst == pytest.approx(16.25)


def test_e11_block_counts_and_tail_fragmentation():
    """E11 with the stated 60 GiB pool (its derivation mixes GB and GiB; docs/model.md)."""
    m_gpu = 40 * KiB
    pool = 60 * GiB
    assert pool_blocks(pool, 16 * m_gpu) == 98_304
    assert pool_blocks(pool, 16 * m_gpu) * 16 == 1_572_864
    w16 = node_tail_waste_bytes(256, 16, m_gpu)
    w64 = node_tail_waste_bytes(256, 64, m_gpu)
    assert (w16, w64) == (75 * MiB, 315 * MiB)
    assert w16 / pool == pytest.approx(0.00122, abs=1e-5)
    assert w64 / pool == pytest.approx(0.00513, abs=1e-5)


def test_e12_block_table_entries_at_b4():
    assert blocks_for_tokens(32768, 4) == 8192


def test_e13_deep_copy_is_10_gib_not_10_24():
    """E13: 4 x 8192 tokens x 320 KiB = 10.00 GiB (the chapter's 10.24 divides MiB by 1000)."""
    assert deep_copy_bytes(4, 8192, 320 * KiB) == 10 * GiB


def test_e16_prefill_flops_and_time():
    """E16: 573.44 + 43.98 = 617.42 TFLOP at 0.45 x 8 x 989 TFLOPS -> 173.4 ms."""
    lin = prefill_flops(70e9, 80, 8192, 4096, attention=False)
    full = prefill_flops(70e9, 80, 8192, 4096)
    assert lin == pytest.approx(573.44e12)
    assert full - lin == pytest.approx(43.98e12, rel=1e-4)
    t = prefill_time_s(full, 0.45, 8 * 989e12)
    assert t == pytest.approx(0.17341, abs=1e-5)
    t32 = prefill_time_s(prefill_flops(70e9, 80, 8192, 32), 0.45, 8 * 989e12)
    assert t32 < 0.006 and t / 0.006 > 28


def test_e18_ridge_point():
    assert ridge_point(1000e12, 3.35e12) == pytest.approx(298.51, abs=0.01)


def test_e21_hold_cost():
    assert hold_cost_byte_s(6 * GB, 60) == 360 * GB


def test_e22_break_even_215_ms_and_53x():
    """E22: 16,384 tokens (5 GiB) over 50 GB/s at 400 TFLOP/s; exact ratio 53.4x
    (the chapter's 53.6x divides rounded figures)."""
    kv = 16384 * M
    assert kv == 5 * GiB
    one_way = reload_time_s(kv, 50e9)
    assert offload_round_trip_s(kv, 50e9) == pytest.approx(0.2147, abs=1e-4)
    rec = recompute_time_s(70e9, 16384, 400e12)
    assert rec == pytest.approx(5.7344, abs=1e-4)
    assert rec / one_way == pytest.approx(53.4, abs=0.05)
    assert break_even_wait_s(kv, 50e9) == pytest.approx(0.2147, abs=1e-4)


def test_e23_nvlink_c2c_threshold_under_20_ms():
    assert offload_round_trip_s(5 * GiB, 900e9) == pytest.approx(0.01193, abs=1e-5)


def test_e24_45_second_wait():
    """E24: 32,768 tokens, 8 x 64 GB/s, 3560 TFLOP/s, 70.6e9 params."""
    kv = 32768 * M
    reload = reload_time_s(kv, 512e9)
    rec = recompute_time_s(70.6e9, 32768, 3.56e15)
    assert reload == pytest.approx(0.02097, abs=1e-5)
    assert rec == pytest.approx(1.2997, abs=1e-4)
    assert rec / reload == pytest.approx(61.97, abs=0.01)
    assert hold_cost_byte_s(kv, 45) / GB == pytest.approx(483.2, abs=0.05)
    assert reload_over_recompute(M, 70.6e9, 3.56e15, 512e9) == pytest.approx(0.01614, abs=1e-5)
    assert offload_feasible(45, kv, 512e9)
    assert hbm_free_window_s(45, kv, 512e9) == pytest.approx(45 - 0.04194, abs=1e-5)


def test_e26_nvme_reload_range():
    assert reload_time_s(5e9, 14e9) == pytest.approx(0.357, abs=1e-3)
    assert reload_time_s(5e9, 7e9) == pytest.approx(0.714, abs=1e-3)


def test_f33_shadow_prices_and_stall():
    rt = offload_round_trip_s(5 * GiB, 50e9)
    assert break_even_wait_s(5 * GiB, 50e9, mu_ratio=2) == pytest.approx(2 * rt)
    assert break_even_wait_s(5 * GiB, 50e9, mu_ratio=11, stall_s=0.5) == pytest.approx(
        rt * 1.1 + 0.5
    )
    with pytest.raises(KvsimError):
        break_even_wait_s(1, 1, mu_ratio=1)

"""Per-group step pricing (``cost.step_pricing``), measured all-reduce, vectorised calibrated
decode runs, and the kernel time laws behind them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cost import CostConfig, CostModel, StepWork
from sim.cost.calibration import load_calibration
from sim.cost.groups import GroupPricer, gemm_shapes
from sim.cost.linear import AllReduceFit, GemmTable, KernelFit
from sim.profiles import load_accelerator, load_model

H100, A100 = load_accelerator("h100-sxm-80gb"), load_accelerator("a100-80gb")
L8B = load_model("llama-3-8b")


def cm(model=L8B, accel=H100, tp=1, **cfg) -> CostModel:
    return CostModel(model, accel, tp, 1, CostConfig(**cfg))


# -- which pricing ------------------------------------------------------------------------


def test_auto_is_roofline_max_without_a_v2_calibration_and_per_group_with_one():
    assert cm().pricing == "roofline_max"
    assert cm(calibration="synthetic-example").pricing == "roofline_max"  # version 1
    assert cm(calibration="h100-sxm-80gb-vidur").pricing == "per_group"
    assert cm(calibration="h100-sxm-80gb-vidur", step_pricing="roofline_max").pricing == "roofline_max"
    assert cm(step_pricing="per_group").pricing == "per_group"


def test_auto_without_calibration_prices_exactly_as_roofline_max():
    work = StepWork(n_decode=8, decode_history_tokens=8 * 3000, prefill_chunks=((512, 128),))
    for tp in (1, 8):
        a = cm(L8B, H100, tp).iteration_time(work)
        b = cm(L8B, H100, tp, step_pricing="roofline_max").iteration_time(work)
        assert a == b
        assert a.total_s == a.overhead_s + a.alloc_s + max(a.mem_s, a.comp_s) + a.allreduce_s + a.copy_s


# -- the groups, by hand --------------------------------------------------------------------


def test_per_group_datasheet_step_is_the_sum_of_its_groups_by_hand():
    """Llama-3-8B on an H100, TP 1, no calibration, floor 2 us: every group recomputed here."""
    floor, mfu, bw_eff = 2e-6, 0.6, 0.9
    m = cm(step_pricing="per_group", kernel_floor_s=floor, mfu_prefill=mfu, bw_efficiency=bw_eff)
    work = StepWork(n_decode=4, decode_history_tokens=4 * 1000, prefill_chunks=((256, 0),))
    c = m.iteration_time(work)
    bw, peak, L, n = H100.hbm_bw_bytes_per_s * bw_eff, H100.peak_bf16_flops_per_s * mfu, 32, 260
    shapes = [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096)]

    def gemm(k, nn, rows):
        return floor + max((2 * k * nn + 2 * rows * (k + nn)) / bw, 2 * rows * k * nn / peak)

    linear = L * sum(gemm(k, nn, n) for k, nn in shapes)
    lm_head = gemm(4096, 128256, 5)  # 4 decodes + 1 prefill chunk: 5 logits
    embedding = floor + 2 * n * 4096 * 2 / bw
    per_tok = [2 * 4096, 2 * (32 + 8) * 128, 2 * 4096, 3 * 14336, 3 * 4096]
    elementwise = L * sum(floor + n * e * 2 / bw for e in per_tok)
    kv_tokens = 4 * 1001 + 256
    pairs = 4 * 1001 + 256 * 257 // 2
    kv_bytes = kv_tokens * 2 * 32 * 8 * 128 * 2
    attention = L * floor + max(kv_bytes / bw, pairs * 4 * L * 4096 / peak)
    assert c.extra["linear_s"] == pytest.approx(linear, rel=1e-12)
    assert c.extra["lm_head_s"] == pytest.approx(lm_head, rel=1e-12)
    assert c.extra["embedding_s"] == pytest.approx(embedding, rel=1e-12)
    assert c.extra["elementwise_s"] == pytest.approx(elementwise, rel=1e-12)
    assert c.extra["attention_group_s"] == pytest.approx(attention, rel=1e-12)
    assert c.total_s == pytest.approx(linear + lm_head + embedding + elementwise + attention, rel=1e-12)
    assert c.allreduce_s == 0.0  # TP 1


def test_decode_reads_no_longer_hide_under_prefill_gemms():
    """roofline_max takes one max over the batch; per_group adds attention's own time."""
    work = StepWork(n_decode=64, decode_history_tokens=64 * 8000, prefill_chunks=((1024, 0),))
    rm = cm(elementwise=False).iteration_time(work)
    pg = cm(step_pricing="per_group", elementwise=False, mfu_decode=0.6).iteration_time(work)
    assert rm.bound == "compute"
    assert pg.extra["attention_group_s"] > 0.5 * pg.kv_read_s
    assert pg.total_s > 1.05 * rm.total_s


def test_lm_head_counts_one_logit_per_sequence_not_per_token():
    m = cm(step_pricing="per_group")
    one = m.iteration_time(StepWork(prefill_chunks=((2048, 0),))).extra["lm_head_s"]
    also_one = m.iteration_time(StepWork(prefill_chunks=((64, 0),))).extra["lm_head_s"]
    three = m.iteration_time(StepWork(n_decode=2, decode_history_tokens=20,
                                      prefill_chunks=((64, 0),))).extra["lm_head_s"]  # fmt: skip
    assert one == also_one < three


def test_a_profile_without_mlp_width_is_one_whole_model_group():
    chapter = load_model("chapter-70b")  # no intermediate_size / vocab_size
    assert gemm_shapes(chapter, 1) is None
    m = CostModel(chapter, load_accelerator("e20-accelerator"), 1, 1,
                  CostConfig(step_pricing="per_group", weights_bytes=140e9, kv_read=False,
                             attention_flops=False, elementwise=False, mfu_decode=0.5))  # fmt: skip
    c = m.iteration_time(StepWork(n_decode=32, decode_history_tokens=32 * 4000))
    assert c.total_s == pytest.approx(140e9 / 3.0e12, rel=1e-12)  # E20's 46.7 ms decode step
    assert c.extra["lm_head_s"] == 0.0 and c.extra["embedding_s"] == 0.0


# -- all-reduce ---------------------------------------------------------------------------


def test_allreduce_precedence_scenario_then_calibration_then_profile_then_chapter():
    L70 = load_model("llama-3-70b")
    work = StepWork(prefill_chunks=((1024, 0),))
    msg = 1024 * 8192 * 2
    calls = 2 * 80 + 1

    def ar(**cfg):
        return cm(L70, H100, 8, step_pricing="per_group", **cfg).iteration_time(work).allreduce_s

    cal = load_calibration("h100-sxm-80gb-vidur")
    assert ar(calibration="h100-sxm-80gb-vidur") == pytest.approx(calls * cal.allreduce_fit(8).call_s(msg, 8))
    line = H100.allreduce.by_tp[8]
    assert ar() == pytest.approx(calls * (line.latency_s + 1.75 * msg / line.bus_bw_bytes_per_s))
    assert ar(allreduce_bw_bytes_per_s=450e9) == pytest.approx(
        calls * (line.latency_s + 1.75 * msg / 450e9))
    # roofline_max keeps the chapter's figures (worked examples stay exact)
    legacy = cm(L70, H100, 8).iteration_time(work).allreduce_s
    assert legacy == pytest.approx(160 * (5e-6 + 1.75 * msg / 450e9))
    # an accelerator nobody measured: the chapter's figures
    b200 = cm(L70, load_accelerator("b200-192gb"), 8, step_pricing="per_group")
    assert b200.groups.allreduce_fit == AllReduceFit(5e-6, 450e9)


def test_allreduce_fit_curve_then_line_beyond_it():
    fit = AllReduceFit(40e-6, 200e9, (1e3, 1e6), (30e-6, 50e-6))
    assert fit.call_s(1e3, 8) == 30e-6
    assert fit.call_s(5.005e5, 8) == pytest.approx(40e-6)
    assert fit.call_s(4e6, 8) == pytest.approx(40e-6 + 1.75 * 4e6 / 200e9)


# -- kernel laws ----------------------------------------------------------------------------


def test_gemm_table_takes_the_next_measured_count_and_grows_linearly_beyond():
    t = GemmTable(4096, 4096, (1, 64, 128), (10e-6, 12e-6, 20e-6))
    assert t.time_at(1) == 10e-6 and t.time_at(2) == 12e-6 and t.time_at(64) == 12e-6
    assert t.time_at(65) == 20e-6  # a tile step lies past 64: 65 pays the next tile
    assert t.time_at(256) == pytest.approx(40e-6)


def test_kernel_fit_is_floor_plus_roofline():
    f = KernelFit(5e-6, 0.5, 0.25)
    assert f.time_s(1e9, 0.0, 2e12, 1e15) == pytest.approx(5e-6 + 1e-3)
    assert f.time_s(0.0, 1e12, 2e12, 1e15) == pytest.approx(5e-6 + 4e-3)


def test_calibrated_tables_price_measured_shapes_and_fallback_the_rest():
    cal = load_calibration("h100-sxm-80gb-vidur")
    g = GroupPricer(L8B, H100, 1, CostConfig(), cal)
    # Llama-3-8B's QKV (4096 x 6144) is Llama-2-7B's at TP 2: measured; its MLP up is not
    measured = cal.gemm_table(4096, 6144)
    assert measured is not None and cal.gemm_table(4096, 28672) is None
    t, _, _ = g._gemm(4096, 6144, 100, cal.linear_fallback)
    assert t == measured.time_at(100)
    t, mem, comp = g._gemm(4096, 28672, 100, cal.linear_fallback)
    assert t == cal.linear_fallback.kernel_floor_s + max(mem, comp)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 600), st.integers(0, 40), st.booleans()), min_size=1, max_size=12),
       st.sampled_from([1, 2, 4]), st.booleans())  # fmt: skip
def test_fixed_terms_do_not_depend_on_what_was_priced_before(shapes, tp, calibrated):
    """The token-count part is memoised apart from the LM head's (many logit counts share
    one token count): a fresh pricer gives every batch shape the terms a pricer that has
    priced other shapes first gives it, field for field (uncalibrated, prefill and decode
    GEMMs run at their own MFU)."""
    cal = load_calibration("h100-sxm-80gb-vidur") if calibrated else None
    warm = GroupPricer(L8B, H100, tp, CostConfig(), cal)
    for n_tok, n_logits, prefill in shapes:
        warm.fixed(n_tok, n_logits + 1, prefill)  # the same tokens, other logits first
        warm.fixed(n_tok, n_logits, not prefill)  # and the other kernel fit
        fresh = GroupPricer(L8B, H100, tp, CostConfig(), cal)
        assert warm.fixed(n_tok, n_logits, prefill) == fresh.fixed(n_tok, n_logits, prefill)
    lm = GroupPricer(L8B, H100, tp, CostConfig(), cal)
    a, b = lm.fixed(64, 1, False), lm.fixed(64, 64, False)
    assert (a.linear_s, a.linear_flops, a.allreduce_s) == (b.linear_s, b.linear_flops, b.allreduce_s)
    assert a.lm_head_s < b.lm_head_s and a.linear_mem_s < b.linear_mem_s


# -- fast == exact ----------------------------------------------------------------------------

MODES = [
    {},
    {"calibration": "synthetic-example"},
    {"step_pricing": "per_group"},
    {"step_pricing": "per_group", "kernel_floor_s": 3e-6},
    {"calibration": "h100-sxm-80gb-vidur"},
    {"calibration": "a100-80gb-vidur"},
]


@settings(max_examples=40, deadline=None)
@given(
    mode=st.sampled_from(MODES),
    n=st.integers(1, 300),
    hist=st.integers(0, 3_000_000),
    steps=st.integers(1, 30),
    tp=st.sampled_from([1, 2, 8]),
    overhead=st.sampled_from([0.0, 2e-3]),
)
def test_decode_runs_equal_step_by_step_exactly(mode, n, hist, steps, tp, overhead):
    m = CostModel(load_model("llama-3-70b"), H100, tp, 1, CostConfig(step_overhead_s=overhead, **mode))
    fast = m.decode_run_times(n, hist, steps)
    slow = np.array([m.iteration_time(StepWork(n, hist + i * n)).total_s for i in range(steps)])
    assert np.array_equal(fast, slow)


@pytest.mark.parametrize("mode", MODES[1:], ids=str)
def test_calibrated_decode_runs_stay_vectorised(mode, monkeypatch):
    """A run of decode steps never prices step by step (it did with a calibration: 3.6x
    slower runs)."""
    m = cm(**mode)

    def refuse(*_a, **_k):
        raise AssertionError("decode_run_times priced a step with iteration_time")

    monkeypatch.setattr(m, "iteration_time", refuse)
    assert len(m.decode_run_times(16, 16 * 2000, 5000)) == 5000


# -- step overhead --------------------------------------------------------------------------


def test_step_overhead_v1_calibration_fits_it_v2_leaves_the_scenarios():
    w = StepWork(n_decode=1, decode_history_tokens=10)
    assert cm(calibration="synthetic-example", step_overhead_s=1.0).iteration_time(w).overhead_s == 0.00025
    assert cm(calibration="h100-sxm-80gb-vidur", step_overhead_s=0.002).iteration_time(w).overhead_s == 0.002

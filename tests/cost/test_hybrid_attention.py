"""Hybrid models' attention by layer group (``sim.sizing.attention_work``): worked examples
computed by hand from the profiles' config figures (docs/model.md, "Attention work by layer
group"), never from the code's output, and a decode run on gemma-3-27b whose TPOT falls by
the factor the formula gives."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cost import CostConfig, CostModel, StepWork
from sim.profiles import load_accelerator, load_model
from sim.sizing.attention_work import attention_work

H200 = load_accelerator("h200-141gb")


def kv_bytes_read(name: str, context: int) -> float:
    """KV (and state) bytes one decode at ``context`` tokens attended reads per step, one GPU."""
    cm = CostModel(load_model(name), H200, 1, 1, CostConfig())
    cost = cm.price(StepWork(1, context - 1))
    return cost.hbm_bytes_per_gpu - cm.weight_bytes_per_gpu


def test_a_dense_model_has_no_group_work():
    assert attention_work(load_model("llama-3-8b")) is None
    assert attention_work(load_model("qwen3-32b")) is None


def test_gpt_oss_20b_decode_at_32k_reads_half_the_all_full_figure():
    # 24 layers, 12 full + 12 sliding over 128; 8 KV heads x 64 x bf16: 2 x 8 x 64 x 2 = 2,048 B
    full = 12 * 2048 * 32768  # 805,306,368 B
    sliding = 12 * 2048 * 128  # 3,145,728 B
    assert kv_bytes_read("gpt-oss-20b", 32768) == full + sliding == 808_452_096
    all_full = 24 * 2048 * 32768  # 1,610,612,736 B: what every layer over the context read
    assert all_full / (full + sliding) == pytest.approx(1.99222, abs=1e-5)


def test_gemma_3_27b_decode_at_32k_reads_a_fifth_of_the_all_full_figure():
    # 62 layers, pattern 5 sliding (1,024) + 1 full: 10 full, 52 sliding; 16 KV heads x 128 x bf16
    per = 2 * 16 * 128 * 2  # 8,192 B per token per layer
    got = kv_bytes_read("gemma-3-27b", 32768)
    assert got == 10 * per * 32768 + 52 * per * 1024 == 3_120_562_176
    assert 62 * per * 32768 / got == pytest.approx(5.3333, abs=1e-4)


def test_llama_4_scout_chunked_layers_read_their_chunk_only():
    # 48 layers, 12 full + 36 chunked local over 8,192; 8 KV heads x 128 x bf16: 4,096 B
    per = 2 * 8 * 128 * 2
    # at 32,768 tokens the new token is position 32,767, the last of its chunk: 8,192 read
    assert kv_bytes_read("llama-4-scout-17b-16e", 32768) == 12 * per * 32768 + 36 * per * 8192
    # one token later it opens a chunk: 1 token read by the chunked layers
    assert kv_bytes_read("llama-4-scout-17b-16e", 32769) == 12 * per * 32769 + 36 * per * 1


def test_nemotron_h_8b_reads_and_writes_its_mamba_states_every_step():
    # 4 attention layers (8 KV heads x 128 x bf16: 4,096 B per token), 24 Mamba2 layers of
    # (4 - 1) x 10,240 conv + 128 x 64 x 128 recurrent bf16 elements = 2,158,592 B each
    state = 24 * ((3 * 10240 + 128 * 64 * 128) * 2)  # 51,806,208 B
    assert kv_bytes_read("nemotron-h-8b", 8192) == 4 * 4096 * 8192 + 2 * state
    # FLOPs: 4 d_attn per pair on the 4 attention layers, 4 H P N + 2 k C per token on the 24
    aw = attention_work(load_model("nemotron-h-8b"))
    _, pairs = aw.equivalent(1, 8192, ())
    flops = pairs * aw.flops_per_pair_per_gpu
    assert flops == pytest.approx(4 * 4 * 4096 * 8192 + 24 * (4 * 128 * 64 * 128 + 2 * 4 * 10240), rel=1e-12)


@pytest.mark.parametrize("h,c", [(0, 300), (100, 20), (1000, 500), (5000, 64)])
def test_sliding_prefill_chunk_pairs_count_each_query_over_its_window(h, c):
    # gpt-oss-20b's sliding layers (w = 128): query at position p attends min(p + 1, 128)
    aw = attention_work(load_model("gpt-oss-20b"))
    g = next(g for g in aw.token_groups if g.kind == "sliding_window")
    read, pairs = aw.chunk_terms(g, c, h, causal=True)
    assert pairs == sum(min(p + 1, 128) for p in range(h, h + c))
    assert read == min(h, 128) + c


@settings(max_examples=40, deadline=None)
@given(h=st.integers(0, 20000), c=st.integers(1, 9000))
def test_chunked_prefill_pairs_count_each_query_over_its_chunk(h, c):
    aw = attention_work(load_model("llama-4-scout-17b-16e"))
    g = next(g for g in aw.token_groups if g.kind == "chunked_local")
    _, pairs = aw.chunk_terms(g, c, h, causal=True)
    assert pairs == sum(p % 8192 + 1 for p in range(h, h + c))


def test_gemma_3_27b_tpot_drops_by_the_formulas_factor():
    """A 256-step decode run at 32k on one H200 (roofline, memory bound): each step
    streams the weights W and the KV; before, every layer read the whole context."""
    model = load_model("gemma-3-27b")
    cm = CostModel(model, H200, 1, 1, CostConfig())
    before = CostModel(model, H200, 1, 1, CostConfig())
    before.attention_work = None  # the all-full pricing this change replaces
    s0, k, per = 32768, 256, 8192
    tpot_after = cm.price_run(StepWork(1, s0 - 1), k).mean()
    tpot_before = before.price_run(StepWork(1, s0 - 1), k).mean()
    w, bw = cm.weight_bytes_per_gpu, H200.hbm_bw_bytes_per_s
    mean_ctx = s0 + (k - 1) / 2
    expected_after = (w + 10 * per * mean_ctx + 52 * per * 1024) / bw
    expected_before = (w + 62 * per * mean_ctx) / bw
    assert tpot_after == pytest.approx(expected_after, rel=1e-9)
    assert tpot_before / tpot_after == pytest.approx(expected_before / expected_after, rel=1e-9)
    assert tpot_before / tpot_after > 1.2  # 27 B of bf16 weights dilute the 5.3x KV saving


def test_a_run_of_steps_crosses_the_window_as_its_steps_do():
    cm = CostModel(load_model("gpt-oss-20b"), H200, 1, 1, CostConfig())
    run = cm.price_run(StepWork(3, 3 * 100), 60)  # three decodes crossing 128 at once
    assert run.tolist() == [cm.price(StepWork(3, 3 * (100 + i))).total_s for i in range(60)]
    assert np.all(np.diff(run[30:]) > 0)  # the full layers still grow

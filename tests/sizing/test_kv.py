"""F1-F3 with GQA, MLA, TP, PP and sliding windows (E3, E31)."""

import pytest

from sim.errors import KvsimError
from sim.profiles import load_model
from sim.sizing import (
    block_bytes,
    kv_bytes_for_context,
    kv_bytes_per_token,
    kv_bytes_per_token_f1,
    kv_bytes_per_token_per_gpu,
    kv_heads_per_rank,
    layers_per_stage,
    trajectory_kv_bytes,
)
from sim.units import GiB, KiB


@pytest.fixture(scope="module")
def llama70():
    return load_model("llama-3-70b")


def test_f1_llama_70b_is_320_kib(llama70):
    assert kv_bytes_per_token_f1(80, 8, 128, 2) == 327_680
    assert kv_bytes_per_token(llama70) == 327_680 == 320 * KiB


def test_f1_fp8_halves(llama70):
    assert kv_bytes_per_token(llama70, "fp8") == 163_840


def test_tp_splits_gqa_heads(llama70):
    """T2: 160 KiB/GPU at TP=2 and 40 KiB/GPU at TP=8."""
    assert kv_bytes_per_token_per_gpu(llama70, tp=2) == 160 * KiB
    assert kv_bytes_per_token_per_gpu(llama70, tp=8) == 40 * KiB


def test_tp_beyond_kv_heads_replicates(llama70):
    """TP=16 > 8 KV heads: each rank still holds one whole head (vLLM replicates)."""
    assert kv_heads_per_rank(llama70, 16) == 1
    assert kv_bytes_per_token_per_gpu(llama70, tp=16) == 40 * KiB


def test_tp_must_divide_query_heads(llama70):
    with pytest.raises(KvsimError, match="query heads"):
        kv_heads_per_rank(llama70, 3)


def test_mla_latent_no_factor_two_and_not_split_by_tp():
    """DeepSeek-V3: (512 + 64) elements per layer, 61 layers, BF16; whole on every rank."""
    m = load_model("deepseek-v3")
    assert kv_bytes_per_token(m) == 61 * 576 * 2 == 70_272
    assert kv_bytes_per_token_per_gpu(m, tp=8) == 70_272


def test_pp_uneven_layers_go_to_first_stages(llama70):
    assert layers_per_stage(80, 3) == [27, 27, 26]
    assert kv_bytes_per_token_per_gpu(llama70, tp=8, pp=3) == 27 * 2 * 1 * 128 * 2


def test_sliding_window_caps_trajectory_kv():
    """gpt-oss-120b: half of the 36 layers keep only 128 tokens, so F1 alone overstates."""
    m = load_model("gpt-oss-120b")
    per_layer = 2 * 8 * 64 * 2
    s = 131_072
    assert kv_bytes_for_context(m, s) == 18 * s * per_layer + 18 * 128 * per_layer
    assert kv_bytes_for_context(m, s) < trajectory_kv_bytes(s, kv_bytes_per_token(m))
    assert kv_bytes_for_context(m, 100) == 100 * kv_bytes_per_token(m)  # inside the window


def test_gemma_pattern_five_local_one_global():
    m = load_model("gemma-3-27b")
    kinds = m.layer_kinds()
    assert kinds[:6] == ["sliding"] * 5 + ["full"] and kinds.count("full") == 10


def test_e3_memory_wall_in_gib(llama70):
    """E3: '128K' = 131,072 tokens -> exactly 40 GiB; '1M' = 2^20 -> 320 GiB."""
    m = kv_bytes_per_token(llama70)
    assert trajectory_kv_bytes(131_072, m) == 40 * GiB
    assert trajectory_kv_bytes(2**20, m) == 320 * GiB


def test_e31_gqa_is_eight_times_smaller_than_mha(llama70):
    mha = kv_bytes_per_token_f1(80, 64, 128, 2)
    assert mha / kv_bytes_per_token(llama70) == 8


def test_f3_block_bytes():
    """E11: 16-token block at 40 KiB/token = 640 KiB; 64 tokens = 2.5 MiB."""
    assert block_bytes(16, 40 * KiB) == 640 * KiB
    assert block_bytes(64, 40 * KiB) == 2.5 * 2**20

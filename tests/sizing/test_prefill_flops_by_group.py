"""F23 / F30 by layer group (``sim.sizing.compute.model_prefill_flops``): hand-computed
worked examples from the formula and the profiles' config.json figures, never from the code.

Per layer, in F23's square convention (4 d_model FLOPs per query-key pair): full 4 d S^2;
sliding window w: 4 d S min(S, w); chunked local c: 4 d (q c^2 + r^2) with S = q c + r;
a Mamba / linear-attention layer S (4 H P N + 2 k C). The linear term 2 N S is F23's.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.policy.facts import facts_for_context
from sim.profiles import load_model
from sim.sizing import model_prefill_flops, prefill_flops


def test_gpt_oss_20b_windows_attend_128_tokens():
    """24 layers, d_model 2,880, 3.6e9 active parameters; S = 1,024: 12 full layers
    4 x 2,880 x 1,024^2 each, 12 sliding layers 4 x 2,880 x 1,024 x 128 each."""
    m = load_model("gpt-oss-20b")
    full = 12 * 4 * 2880 * 1024 * 1024  # 144,955,146,240
    sliding = 12 * 4 * 2880 * 1024 * 128  # 18,119,393,280
    assert full + sliding == 163_074_539_520
    linear = 2 * 3.6e9 * 1024
    assert model_prefill_flops(m, 1024) == linear + 163_074_539_520
    # every layer as full attention (F23 as written) is 1.78x the attention term
    assert prefill_flops(3.6e9, 24, 2880, 1024) == linear + 24 * 4 * 2880 * 1024**2


def test_nemotron_h_8b_mamba_layers_are_linear_in_tokens():
    """52 blocks: 4 attention layers (d_model 4,096), 24 Mamba2 layers (128 heads x 64 x
    state 128; conv kernel 4 over 10,240 channels), 24 MLP blocks with no cache; S = 4,096,
    8e9 parameters."""
    m = load_model("nemotron-h-8b")
    attention = 4 * 4 * 4096 * 4096**2  # 1,099,511,627,776
    mamba = 24 * 4096 * (4 * 128 * 64 * 128 + 2 * 4 * 10240)  # 420,369,924,096
    assert attention + mamba == 1_519_881_551_872
    assert model_prefill_flops(m, 4096) == 2 * 8.0e9 * 4096 + 1_519_881_551_872
    # F23 with all 52 layers as full attention: 9.4x the per-group attention term
    assert 4 * 52 * 4096 * 4096**2 == 14_293_651_161_088


def test_llama_4_scout_chunks_attend_within_their_chunk():
    """48 layers, d_model 5,120: 12 full, 36 chunked (8,192); S = 10,000 = 8,192 + 1,808."""
    m = load_model("llama-4-scout-17b-16e")
    chunked = 36 * 4 * 5120 * (8192**2 + 1808**2)  # 51,888,091,299,840
    full = 12 * 4 * 5120 * 10_000**2  # 24,576,000,000,000
    assert chunked == 51_888_091_299_840
    assert model_prefill_flops(m, 10_000) == 2 * 17.0e9 * 10_000 + chunked + full


def test_without_attention_only_the_linear_term():
    m = load_model("gemma-3-27b")
    assert model_prefill_flops(m, 5000, attention=False) == 2 * m.active_params * 5000


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 200_000), st.sampled_from(["llama-3.1-8b", "deepseek-v3", "qwen3-32b"]))
def test_models_of_full_layers_get_f23_exactly(tokens, name):
    m = load_model(name)
    want = prefill_flops(m.active_params, m.num_layers, m.d_model, tokens)
    assert model_prefill_flops(m, tokens) == want


def test_pause_facts_price_the_recompute_by_group():
    """The facts a pause policy sees (``facts_for_context``) use the per-group figure."""
    m = load_model("gpt-oss-20b")
    f = facts_for_context(m, 1024, link_bw_bytes_per_s=50e9, prefill_flops_per_s=1e15,
                        predicted_wait_s=1.0, attention=True)  # fmt: skip
    assert f.recompute_flops == pytest.approx(2 * 3.6e9 * 1024 + 163_074_539_520, rel=0)


@settings(max_examples=30, deadline=None)
@given(
    tokens=st.integers(0, 300_000),
    name=st.sampled_from(
        ["gpt-oss-20b", "nemotron-h-8b", "llama-4-scout-17b-16e", "llama-3.1-70b", "deepseek-v3",
         "qwen3-next-80b-a3b", "gemma-3-27b"]
    ),
)
def test_kept_layer_counts_give_the_same_flops(tokens, name):
    """A caller that keeps ``layer_group_counts`` (the pause decision) gets the same
    figure, bit for bit, as one that lets the model's groups be read again."""
    from sim.sizing import layer_group_counts

    m = load_model(name)
    counts = layer_group_counts(m)
    assert model_prefill_flops(m, tokens, counts=counts) == model_prefill_flops(m, tokens)
    assert counts and sum(layers for layers, _ in counts) <= m.num_layers  # MLP-only: none


# -- the causal mask (what the engine's step pricers count, cost.attention_mask: causal) --
# query x (1-based) attends keys 1..x: a full layer 4 d S (S + 1) / 2; a window w sums
# min(x, w) (w (w + 1) / 2 + (S - w) w past the window); a chunk c is a triangle per chunk,
# q c (c + 1) / 2 + r (r + 1) / 2. State layers are linear under either mask.


def test_causal_gpt_oss_20b():
    """S = 1,024: 12 full layers 4 x 2,880 x 1,024 x 1,025 / 2; 12 windows of 128:
    4 x 2,880 x (128 x 129 / 2 + 896 x 128)."""
    m = load_model("gpt-oss-20b")
    full = 12 * 4 * 2880 * 524_800  # 1,024 x 1,025 / 2 = 524,800
    sliding = 12 * 4 * 2880 * (8256 + 114_688)  # 128 x 129 / 2 + 896 x 128 = 122,944
    assert full + sliding == 89_544_130_560
    assert model_prefill_flops(m, 1024, mask="causal") == 2 * 3.6e9 * 1024 + 89_544_130_560


def test_causal_llama_4_scout_chunks():
    """S = 10,000 = 8,192 + 1,808: 36 chunked layers 4 x 5,120 x (8,192 x 8,193 / 2 +
    1,808 x 1,809 / 2); 12 full layers 4 x 5,120 x 10,000 x 10,001 / 2."""
    m = load_model("llama-4-scout-17b-16e")
    chunked = 36 * 4 * 5120 * (33_558_528 + 1_635_336)
    full = 12 * 4 * 5120 * 50_005_000
    assert (chunked, full) == (25_947_732_049_920, 12_289_228_800_000)
    assert model_prefill_flops(m, 10_000, mask="causal") == 2 * 17.0e9 * 10_000 + chunked + full


def test_causal_mamba_layers_unchanged():
    """nemotron-h-8b, S = 4,096: the 4 attention layers halve (plus the diagonal), the
    24 Mamba layers stay 420,369,924,096."""
    m = load_model("nemotron-h-8b")
    attention = 4 * 4 * 4096 * (4096 * 4097 // 2)
    assert model_prefill_flops(m, 4096, mask="causal") == 2 * 8.0e9 * 4096 + attention + 420_369_924_096


def test_unknown_mask_is_one_line():
    from sim.errors import KvsimError

    with pytest.raises(KvsimError, match="attention mask must be one of causal, square, got 'diag'"):
        model_prefill_flops(load_model("llama-3.1-8b"), 10, mask="diag")

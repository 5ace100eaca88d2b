"""`kvsim breakeven`'s engine side (sim.policy.analytic): the engine's count of a recompute
and the break_even policy's decision, checked against figures worked out by hand.

Llama-3.1-8B: L = 32 layers, d_model = 4,096, 32 query heads x 128, 8 KV heads, MLP 14,336
(gated), vocabulary 128,256, 8.03e9 parameters; 131,072 B of KV per token (2 x 8 x 128 x
2 B x 32). On an H100 profile the host link is 54 GB/s and the default rate is 0.45 x
989.4 TFLOP/s.
"""

from __future__ import annotations

import math

import pytest

from sim.policy.analytic import ParkingTiers, engine_view, policy_decision
from sim.profiles.registry import load_accelerator, load_model, load_node
from sim.sizing.breakeven import BreakEvenInputs, break_even

LLAMA8 = load_model("llama-3.1-8b")
H100 = load_accelerator("h100-sxm-80gb")
DGX = load_node("dgx-h100")

L, D, V = 32, 4096, 128256
# one layer's GEMM weights: fused QKV (4,096 x (4,096 + 2 x 1,024)), output (4,096 x
# 4,096), gate + up (4,096 x 2 x 14,336), down (14,336 x 4,096)
LAYER_PARAMS = D * (D + 2 * 1024) + D * D + D * 2 * 14336 + 14336 * D  # 218,103,808
LM_HEAD_FLOPS = 2 * D * V  # one logit row: the last token of a chunk
RATE = 0.45 * 989.4e12  # the default MFU x the profile's dense BF16 peak
LINK = 54e9


def inputs(tokens: int = 8192, wait: float | None = None, **kw) -> BreakEvenInputs:
    kw.setdefault("prefill_flops_per_s", RATE)
    return BreakEvenInputs(LLAMA8, tokens, LINK, wait_s=wait, **kw)


def causal_pairs(chunks: list[int]) -> int:
    """Pairs of a lone prefill in chunks: each chunk of c after h tokens, c h + c (c+1)/2."""
    h = pairs = 0
    for c in chunks:
        pairs += c * h + c * (c + 1) // 2
        h += c
    return pairs


# ----------------------------------------------------------------- the engine's count
def test_engine_count_is_layer_gemms_lm_head_per_chunk_and_causal_attention():
    """8,192 tokens, one chunk of the default 8,192-token budget: 2 x 32 x 218,103,808 x
    8,192 (the layers' GEMMs) + 2 x 4,096 x 128,256 (the LM head on the chunk's last
    token) + 4 x 32 x 4,096 x 8,192 x 8,193 / 2 (causal attention) = 131,944,593,489,920."""
    inp = inputs()
    view = engine_view(inp, break_even(inp), H100)
    linear = 2 * L * LAYER_PARAMS * 8192
    attention = 4 * L * D * 8192 * 8193 // 2
    assert view.engine_recompute_chunks == [8192]
    assert view.engine_recompute_flops == linear + LM_HEAD_FLOPS + attention == 131_944_593_489_920
    # the layer GEMMs are the parameters less the embedding and the LM head (to the
    # profile's three significant figures: the norms' 266,240 weights are not GEMMs)
    assert L * LAYER_PARAMS == pytest.approx(8.03e9 - 2 * V * D, rel=1e-6)


def test_f30_figure_stays_and_the_difference_is_reported():
    """SPEC's F30 (2 P S) plus F23's causal term under --attention: 2 x 8.03e9 x 8,192 +
    the attention above = 149,157,853,528,064 (the 149.16 TFLOP the trial read), 13.0 %
    above the engine's count (the engine's is 11.5 % below it): no embedding FLOPs, the LM
    head on one token only. Without --attention F30 is 131,563,520,000,000: the engine's
    count (which always has attention) is 0.29 % above it."""
    attention = 4 * L * D * 8192 * 8193 // 2
    engine = 131_944_593_489_920
    with_att = inputs(attention=True)
    r = break_even(with_att)
    assert r.recompute_flops == 2 * 8.03e9 * 8192 + attention
    view = engine_view(with_att, r, H100)
    assert view.engine_minus_f30_flops == engine - r.recompute_flops
    assert view.engine_over_f30 == pytest.approx(engine / 149_157_853_528_064)
    assert round(view.engine_over_f30 - 1, 3) == -0.115
    plain = inputs()
    r = break_even(plain)
    assert r.recompute_flops == 2 * 8.03e9 * 8192 == 131_563_520_000_000
    assert engine_view(plain, r, H100).engine_over_f30 == pytest.approx(engine / 131_563_520_000_000)


def test_engine_count_follows_the_default_scheduler_chunks():
    """20,000 tokens: chunks of 8,192, 8,192 and 3,616; three LM-head rows; attention sums
    each chunk's pairs over the chunks before it, 20,000 x 20,001 / 2 in all (the causal
    mask makes chunking change no pair); under the full mask each chunk counts c (h + c)."""
    chunks = [8192, 8192, 3616]
    assert causal_pairs(chunks) == 20000 * 20001 // 2
    inp = inputs(20000)
    view = engine_view(inp, break_even(inp), H100)
    assert view.engine_recompute_chunks == chunks
    want = 2 * L * LAYER_PARAMS * 20000 + 3 * LM_HEAD_FLOPS + 4 * L * D * (20000 * 20001 // 2)
    assert view.engine_recompute_flops == want
    full = inputs(20000, attention_mask="full")
    square = 8192 * 8192 + 8192 * (8192 + 8192) + 3616 * 20000
    want_full = 2 * L * LAYER_PARAMS * 20000 + 3 * LM_HEAD_FLOPS + 4 * L * D * square
    assert engine_view(full, break_even(full), H100).engine_recompute_flops == want_full


def test_no_accelerator_or_an_endless_context_no_engine_count():
    inp = inputs()
    view = engine_view(inp, break_even(inp), None)
    assert view.engine_recompute_flops is None and view.engine_over_f30 is None
    assert "--gpu" in view.engine_recompute_note
    huge = inputs(10**12)  # --context's ceiling: 122 million chunks are not priced
    view = engine_view(huge, break_even(huge), H100)
    assert view.engine_recompute_flops is None and "67,108,864" in view.engine_recompute_note
    assert engine_view(inputs(2**26), break_even(inputs(2**26)), H100).engine_recompute_chunks == [8192] * 8192


# ----------------------------------------------------------------- the decision
def decide(tokens=8192, wait=5.0, node=None, horizon_s=None, **kw) -> tuple[str, str]:
    inp = inputs(tokens, wait, **kw)
    d = policy_decision(inp, break_even(inp), ParkingTiers.of_node(node), horizon_s)
    assert d is not None
    return d.action, d.reason


def test_regimes_hold_host_nvme():
    """SPEC 3.11 "Decision regimes": 8,192 tokens = 1,073,741,824 B; round trip 2 x that /
    54 GB/s = 39.77 ms -> hold below it; up to the 60 s horizon host DRAM; an hour on a
    DGX H100 (8 drives x 7 GB/s) goes to NVMe, without a node profile to host DRAM (no
    NVMe tier to escalate to)."""
    rt = 2 * 8192 * 131072 / LINK
    assert rt == pytest.approx(0.039768, abs=1e-6)
    assert decide(wait=0.039)[0] == "hold"
    assert decide(wait=0.040) == ("offload_host", "wait within the host horizon")
    assert decide(wait=3600.0, node=DGX) == ("offload_nvme", "wait beyond the host horizon: NVMe")
    assert decide(wait=3600.0) == ("offload_host", "beyond the horizon, no usable NVMe")
    assert decide(wait=30.0, node=DGX, horizon_s=10.0)[0] == "offload_nvme"
    assert decide(wait=30.0, node=DGX)[0] == "offload_host"


def test_recompute_when_the_reload_is_not_faster():
    """F31 / rule 3.11.2 (the trial's case 1): at 10,000 TFLOP/s the recompute is 2 x
    8.03e9 x 8,192 / 1e16 = 13.16 ms, the reload 1,073,741,824 / 54e9 = 19.88 ms: drop.
    An hour on the DGX: the NVMe reload (1,073,741,824 / 56e9 + 19.88 ms = 39.06 ms) is
    slower still, so it drops too. At the default rate (295.5 ms) it offloads."""
    recompute = 2 * 8.03e9 * 8192 / 1e16
    reload = 8192 * 131072 / LINK
    assert recompute == pytest.approx(0.013156, abs=1e-6) and reload > recompute
    action, reason = decide(wait=5.0, prefill_flops_per_s=1e16)
    assert action == "recompute" and "F31" in reason
    assert decide(wait=3600.0, node=DGX, prefill_flops_per_s=1e16)[0] == "recompute"
    # the tie: a rate that makes the recompute exactly the reload is not faster to reload
    tie = 2 * 8.03e9 * 8192 / reload
    assert break_even(inputs(8192, 5.0, prefill_flops_per_s=tie)).recompute_s == reload
    assert decide(wait=5.0, prefill_flops_per_s=tie)[0] == "recompute"
    assert decide(wait=5.0, prefill_flops_per_s=tie * 0.999)[0] == "offload_host"


def test_shadow_prices_and_stall_reach_the_policy():
    """--mu-ratio 2 doubles the threshold (round trip x 2 / (2 - 1)); --stall-s adds."""
    rt = 2 * 8192 * 131072 / LINK
    assert decide(wait=2 * rt - 1e-6, mu_ratio=2.0)[0] == "hold"
    assert decide(wait=2 * rt + 1e-6, mu_ratio=2.0)[0] == "offload_host"
    assert decide(wait=rt + 0.5, stall_s=0.5)[0] == "hold"


def test_node_tiers_and_no_wait():
    """The DGX H100 profile: 2 TB DRAM, half pinned; 8 x 3.84 TB NVMe at 8 x 7 GB/s."""
    t = ParkingTiers.of_node(DGX)
    assert t == ParkingTiers(1e12, 8 * 3.84e12, 56e9)
    assert ParkingTiers.of_node(None).host_free_bytes == math.inf
    inp = inputs()
    assert policy_decision(inp, break_even(inp)) is None
    view = engine_view(inp, break_even(inp), H100, DGX)
    assert view.policy_decision is None and view.horizon_s == 60.0
    assert view.nvme_reload_s == pytest.approx(8192 * 131072 / 56e9 + 8192 * 131072 / LINK)

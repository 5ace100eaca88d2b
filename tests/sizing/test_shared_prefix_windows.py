"""F37 with a shared prefix on models whose layers do not all keep every token.

A sliding window or a chunk holds a context's last tokens, so a trajectory whose window has
moved past the shared prefix shares none of them: each trajectory pays its own window, and
the prefix is stored once only in the layers that keep it. A state-space layer's running
state is each sequence's own. Utilization 0.9, as ``kvsim plan`` without memory figures. ``plan`` used to take a trajectory's private KV as
``bytes(S) - bytes(P)``, which cancels the capped window (and the state) on both sides:
llama-4-scout at 32k with a 24k prefix said 2,148 trajectories where 537 fit (a reviewer's
probe, 2026-12-04). Every expected figure below is the model geometry
(``hardware_profiles/models``) worked by hand; the pool per GPU is the plan's (F34, tested
in test_capacity.py)."""

from __future__ import annotations

import math

from sim.profiles import load_accelerator, load_model
from sim.sizing.plan import PlanInputs, plan_capacity

BF16 = 2  # bytes


def _plan(model: str, gpu: str, gpus: int, context: int, prefix: int, **kw):
    r = plan_capacity(PlanInputs(model=load_model(model), accelerator=load_accelerator(gpu),
                                 num_gpus=gpus, contexts=[context], shared_prefix_tokens=prefix,
                                 gpu_memory_utilization=0.9, **kw))  # fmt: skip
    return r, r.contexts[0], r.kv_pool_bytes_per_gpu


def _fit(pool: float, shared: float, private: float) -> int:
    return math.floor((pool - shared) / private)


def test_chunked_local_layers_share_nothing_once_the_chunk_is_past_the_prefix():
    """llama-4-scout, TP 8: 12 full and 36 chunked-local layers (chunk 8,192), 8 KV heads of
    128 (one per rank). At 32,768 tokens the current chunk is [24,576, 32,768): past the
    24,576-token prefix, so the prefix is stored once in the full layers only."""
    r, c, pool = _plan("llama-4-scout-17b-16e", "h200-141gb", 8, 32768, 24576)
    per_layer_token = 2 * 1 * 128 * BF16  # K and V, one head per rank
    full, chunk = 12 * per_layer_token, 36 * per_layer_token * 8192
    assert full == 6144 and chunk == 150_994_944
    shared, private = 24576 * full, 8192 * full + chunk
    assert r.replicas == 1  # TP 8
    assert c.max_concurrent_shared == _fit(pool, shared, private) == 537
    assert c.shared_prefix_bytes == 24576 * 12 * 2 * 8 * 128 * BF16  # whole model, one copy


def test_a_sliding_window_past_the_prefix_is_each_trajectory_s_own():
    """gemma-3-27b, TP 8: 10 full and 52 sliding layers (window 1,024) that vLLM pads to 60
    (groups of 10); 16 KV heads of 128 (two per rank)."""
    r, c, pool = _plan("gemma-3-27b", "h200-141gb", 8, 32768, 24576)
    per_layer_token = 2 * 2 * 128 * BF16
    full, window = 10 * per_layer_token, 60 * per_layer_token * 1024
    assert c.max_concurrent_shared == _fit(pool, 24576 * full, 8192 * full + window) == 875


def test_a_window_that_reaches_into_the_prefix_shares_that_part():
    """gpt-oss-120b, one GPU: 18 full and 18 sliding layers (window 128), 8 KV heads of 64.
    At a context of 24,600 with a 24,576-token prefix and 10 output tokens (24,610 in all),
    each window holds the last 128 tokens, [24,482, 24,610): the 94 of them in the prefix
    are the same in every trajectory and stored once; 34 are each trajectory's own.
    The pool: 0.9 x 150,754,820,096 B - 65,190,502,400 B of weights (114,661,785,600
    MXFP4 expert parameters x 4.25 / 8 + 2,138,214,400 bf16 ones x 2) = 70,488,835,686 B;
    at 32,768 tokens (24,576 shared): floor((70,488,835,686 - 24,576 x 36,864) /
    ((8,192 + 128) x 36,864)) = floor(226.9) = 226."""
    r, c, pool = _plan("gpt-oss-120b", "h200-141gb", 1, 24600, 24576, output_tokens=10)
    per_layer_token = 2 * 8 * 64 * BF16
    full, sliding = 18 * per_layer_token, 18 * per_layer_token
    shared = 24576 * full + 94 * sliding
    private = 34 * full + 34 * sliding
    assert c.max_concurrent_shared == _fit(pool, shared, private)
    assert c.shared_prefix_bytes == shared  # one GPU: the whole model
    # past the prefix by more than a window: nothing of the sliding layers is shared
    r, c, pool = _plan("gpt-oss-120b", "h200-141gb", 1, 32768, 24576)
    assert round(pool) == 70_488_835_686
    assert c.max_concurrent_shared == _fit(pool, 24576 * full, 8192 * full + 128 * sliding) == 226


def test_state_layers_share_no_prefix_without_saved_states():
    """nemotron-h-8b, one GPU: 4 attention layers and 24 Mamba-2 layers. Under
    ``--mamba-cache-mode none`` (plan's default) vLLM saves no state at block boundaries,
    so no prefix of the model ever hits (``kvsim run``: ``prefix_hit_limited_by: mamba``):
    the shared column is the unshared one, with a warning (a probe: it said 1,473 where
    643 fit on an H200 at 8,000 + 192 tokens, a 6,400-token prefix; 628 since plan charges
    what a run does: 16 blocks of 528 tokens x 16,384 B + 24 state pages padded to
    2,162,688 B = 190,316,544 B, in the 119.68e9 B pool)."""
    r, c, pool = _plan("nemotron-h-8b", "h200-141gb", 1, 8000, 6400, output_tokens=192)
    assert c.kv_bytes_per_trajectory_charged_per_gpu == 190_316_544
    assert c.max_concurrent == math.floor(pool / 190_316_544) == 628
    assert c.max_concurrent_shared == c.max_concurrent and c.shared_prefix_bytes == 0
    assert any("--shared-prefix-tokens shares nothing on nemotron-h-8b" in w for w in r.warnings)


def test_saved_states_share_the_prefix_s_attention_and_states():
    """The same under ``--mamba-cache-mode all``: the block size is 640 tokens (aligned to
    the state kernel's chunk), a page 640 x 4,096 = 2,621,440 B, and each of the 24 state
    layers keeps a state page at every block boundary plus its running one; attention is
    4 x 2 x 8 x 128 x 2 = 16,384 B a token. A trajectory of 8,192 tokens: 12 boundaries +
    1 running = 13 state pages a layer, 13 x 24 x 2,621,440 + 8,192 x 16,384 =
    952,107,008 B (125 in the 119.68e9 B pool). The 6,400-token prefix (10 blocks):
    10 x 24 x 2,621,440 + 6,400 x 16,384 = 734,003,200 B once; each trajectory's own 3 x 24
    x 2,621,440 + 1,792 x 16,384 = 218,103,808 B: (pool - 734,003,200) / 218,103,808 ->
    545 (the probe's hand derivation)."""
    assert 13 * 24 * 2_621_440 + 8192 * 16_384 == 952_107_008
    shared, own = 10 * 24 * 2_621_440 + 6400 * 16_384, 3 * 24 * 2_621_440 + 1792 * 16_384
    assert (shared, own) == (734_003_200, 218_103_808)
    r, c, pool = _plan("nemotron-h-8b", "h200-141gb", 1, 8000, 6400, output_tokens=192,
                       mamba_cache_mode="all")  # fmt: skip
    assert c.max_concurrent == math.floor(pool / 952_107_008) == 125
    assert c.max_concurrent_shared == _fit(pool, shared, own) == 545
    assert c.shared_prefix_bytes == shared
    assert not any("shares nothing" in w for w in r.warnings)


def test_dense_models_are_as_before():
    """Every layer keeps every token: the prefix once, then S - P tokens each (F37), as
    before this change."""
    r, c, pool = _plan("llama-3.1-70b", "h100-sxm-80gb", 8, 32768, 24576)
    per_token = 80 * 2 * 1 * 128 * BF16  # 80 layers, 8 KV heads over TP 8
    assert c.max_concurrent_shared == _fit(pool, 24576 * per_token, 8192 * per_token) == 174

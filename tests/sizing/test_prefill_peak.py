"""A trajectory's peak KV with its prompt's prefill chunks (vLLM V1's rule), in ``plan``.

During a step that computes ``[computed, end)`` vLLM V1 keeps, in a sliding-window layer,
every token from ``computed - w + 1`` (``SlidingWindowManager.get_num_skipped_tokens``) to
``end``, and in a chunked-local layer the chunk of ``computed`` to ``end``
(``ChunkedLocalAttentionManager``): ``w - 1`` tokens plus the chunk, more than the window
a decoding trajectory keeps. ``peak_kv_bytes_per_trajectory`` is the largest step;
``kv_bytes_per_trajectory`` (what each of many concurrent trajectories holds, and so
``max_concurrent``) is unchanged.
"""

from __future__ import annotations

import pytest

from sim.errors import KvsimError
from sim.profiles import load_accelerator, load_model
from sim.sizing.groups import group_bytes
from sim.sizing.kv import kv_bytes_for_context, kv_peak_for_trajectory, prefill_steps
from sim.sizing.plan import PlanInputs, plan_capacity

#: gpt-oss-20b: 12 full + 12 sliding (window 128) layers, 8 KV heads x 64 x K,V x bf16
GPT_OSS_LAYER = 2 * 8 * 64 * 2


def test_prefill_steps():
    assert prefill_steps(1000, 256) == [(0, 256), (256, 512), (512, 768), (768, 1000)]
    assert prefill_steps(100, 256) == [(0, 100)]
    with pytest.raises(KvsimError):
        prefill_steps(10, 0)


def test_step_held_tokens_by_kind():
    g = {x.kind: x for x in group_bytes(load_model("llama-4-scout-17b-16e"))}
    # chunked local, chunk 8,192: the chunk of the computed tokens on
    assert g["chunked_local"].step_held_tokens(8192, 16384) == 8192
    assert g["chunked_local"].step_held_tokens(8000, 9000) == 9000
    assert g["full"].step_held_tokens(8000, 9000) == 9000
    (s,) = [x for x in group_bytes(load_model("gpt-oss-20b")) if x.kind == "sliding_window"]
    assert s.step_held_tokens(256, 512) == 512 - (256 - 128 + 1)  # 383
    assert s.step_held_tokens(999, 1000) == s.held_tokens(1000) == 128  # a decode step


def test_gpt_oss_prompt_1000_in_chunks_of_256():
    """Steps (full tokens + sliding tokens): [0,256) 256 + 256; [256,512) 512 + 383;
    [512,768) 768 + 383; [768,1000) 1000 + (1000 - 641) = 1359: the peak, 12 layers of
    each x 2,048 B; decoding at 1,000 tokens holds 1000 + 128."""
    model = load_model("gpt-oss-20b")
    peak, by_group = kv_peak_for_trajectory(model, 1000, 1000, 256)
    assert peak == 12 * GPT_OSS_LAYER * 1359
    assert by_group == {"full": 12 * GPT_OSS_LAYER * 1000, "sliding": 12 * GPT_OSS_LAYER * 359}
    assert kv_bytes_for_context(model, 1000) == 12 * GPT_OSS_LAYER * 1128
    # 500 more tokens generated: the trajectory's end (1500 + 128) tops every prefill step
    assert kv_peak_for_trajectory(model, 1000, 1500, 256)[0] == kv_bytes_for_context(model, 1500)


def _plan(model: str, context: int, **kw):
    return plan_capacity(PlanInputs(model=load_model(model), accelerator=load_accelerator(
        "h200-141gb"), num_gpus=1, contexts=[context], **kw))  # fmt: skip


def test_plan_reports_the_prefill_peak_beside_the_steady_figure():
    """gemma-3-27b at 16,384 tokens, chunks of 8,192: the second chunk keeps tokens from
    8192 - 1023 = 7169 on in its 60 (padded) sliding layers: 9,215 tokens x 60 x 8,192 B,
    beside 16,384 x 10 x 8,192 B of full attention."""
    layer = 2 * 16 * 128 * 2
    r = _plan("gemma-3-27b", 16384)
    (c,) = r.contexts
    assert c.kv_bytes_per_trajectory == 16384 * 10 * layer + 1024 * 60 * layer
    assert c.peak_kv_bytes_per_trajectory == 16384 * 10 * layer + 9215 * 60 * layer
    assert c.prefill_chunk_tokens == 8192
    peaks = {g.name: g.peak_bytes for g in c.groups}
    assert peaks == {"full": 16384 * 10 * layer, "sliding": 9215 * 60 * layer}
    # concurrency stays the steady figure: few trajectories are in a prefill chunk at once
    assert c.max_concurrent == _plan("gemma-3-27b", 16384, prefill_chunk_tokens=1).contexts[0].max_concurrent
    # a smaller chunk, a smaller transient: 1,023 + 2,048 tokens
    c2 = _plan("gemma-3-27b", 16384, prefill_chunk_tokens=2048).contexts[0]
    assert c2.peak_kv_bytes_per_trajectory == 16384 * 10 * layer + 3071 * 60 * layer


@pytest.mark.parametrize("model", ["llama-3.1-8b", "nemotron-h-8b", "deepseek-v3.2"])
def test_models_without_windows_peak_at_their_length(model):
    (c,) = _plan(model, 8192).contexts
    assert c.peak_kv_bytes_per_trajectory == c.kv_bytes_per_trajectory
    assert all(g.peak_bytes == g.bytes for g in c.groups)


def test_prefill_chunk_out_of_range_is_one_line():
    with pytest.raises(KvsimError, match="--prefill-chunk-tokens"):
        _plan("gemma-3-27b", 100, prefill_chunk_tokens=0)

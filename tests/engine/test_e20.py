"""E20 through the engine: 46.7 ms decode, 1,194.7 ms prefill, 158.7 ms hybrid step."""

from __future__ import annotations

import math

import pytest
from engine_helpers import run

P, PEAK = 70e9, 800e12
DECODE_S = 140e9 / 3.0e12  # t_mem of a decode step (t_comp 11.2 ms is below it)
HYBRID_S = 2 * P * (512 + 32) / (0.6 * PEAK)  # 158.67 ms, compute bound
PREFILL_S = 2 * P * 4096 / (0.6 * PEAK)  # 1,194.67 ms alone
MONO_S = 2 * P * (4096 + 32) / (0.6 * PEAK)  # the 32 decode tokens ride in the same step
FIRST_S = 2 * P * (32 * 16) / (0.6 * PEAK)  # the 32 short prompts' prefill step
POOL = {"hardware.kv_pool_bytes_per_gpu": 8e9}  # small pool: fast invariant checks


def _e20(chunked: bool, **kw):
    res = run("seed_chunked_prefill.yaml", **{"scheduler.chunked_prefill": chunked}, **POOL, **kw)
    req = res.requests
    return res, req[req.prompt_tokens == 4096].iloc[0], req[req.prompt_tokens == 16]


def test_the_chapter_numbers():
    assert DECODE_S == pytest.approx(0.046667, abs=1e-6)
    assert HYBRID_S == pytest.approx(0.15867, abs=1e-5)
    assert PREFILL_S == pytest.approx(1.19467, abs=1e-5)


@pytest.mark.parametrize("exact", [False, True])
def test_chunked_prefill_bounds_the_decoders_itl(exact):
    res, big, small = _e20(True, **{"engine.exact": exact})
    assert small.itl_max_s.max() == pytest.approx(HYBRID_S, rel=1e-12)  # ~0.1587 s
    assert res.summary["max_itl_s"] == pytest.approx(HYBRID_S, rel=1e-12)
    assert res.summary["itl_s"]["p50"] == pytest.approx(DECODE_S, rel=1e-12)  # 46.7 ms
    # the prompt waits for the decode step in progress and, under vLLM's async scheduling
    # (the scheduler's default), the one planned while that step ran; then 8 hybrid steps
    wait = FIRST_S + (math.ceil((2.0 - FIRST_S) / DECODE_S) + 1) * DECODE_S - 2.0
    assert big.queue_s == pytest.approx(wait, rel=1e-9)
    assert big.ttft_s == pytest.approx(wait + 8 * HYBRID_S, rel=1e-9)  # 1,269.3 ms + wait
    steps = res.steps
    hybrid = steps[(steps.n_prefill == 1) & (steps.n_decode == 32)]
    assert (hybrid.prefill_tokens == 512).all()
    if exact:  # one row per step
        assert len(hybrid) == 8 and hybrid.duration_s.tolist() == pytest.approx([HYBRID_S] * 8)
    else:  # one row per run: the 8 hybrid steps and the decodes after them
        assert len(hybrid) == 1 and hybrid.n_steps.iloc[0] > 8


def test_monolithic_prefill_spikes_the_itl():
    res, big, small = _e20(False)
    # about 1.195 s, a little more because the 32 decode tokens ride in the same step
    assert small.itl_max_s.max() == pytest.approx(MONO_S, rel=1e-12)
    assert PREFILL_S < MONO_S < PREFILL_S * 1.01
    assert res.summary["max_itl_s"] / DECODE_S == pytest.approx(25.8, abs=0.01)  # E20: 25.6x


def test_chunking_raises_the_long_prompts_ttft_by_a_few_percent():
    _, chunked, _ = _e20(True)
    _, mono, _ = _e20(False)
    assert chunked.queue_s == mono.queue_s
    growth = chunked.ttft_s / mono.ttft_s - 1
    assert 0.05 < growth < 0.15  # rule 3.10.5: +5-15 %
    prefill_only = (chunked.ttft_s - chunked.queue_s) / PREFILL_S - 1
    assert prefill_only == pytest.approx(0.0625, abs=1e-9)  # E20: 8 x 158.67 = +6.25 %


def test_exact_timeline_of_one_request():
    """One 512-token prompt generating 3 tokens, alone on the E20 accelerator."""
    one = [{"count": 1, "at_s": 0.25, "prompt_tokens": 512, "output_tokens": 3}]
    res = run(
        "seed_chunked_prefill.yaml", **POOL, **{"workload.requests": one, "engine.exact": True}
    )
    r = res.requests.iloc[0]
    prefill = 2 * P * 512 / (0.6 * PEAK)
    assert (r.arrival_s, r.admitted_s) == (0.25, 0.25)
    assert r.first_token_s == pytest.approx(0.25 + prefill, rel=1e-12)
    assert r.finish_s == pytest.approx(0.25 + prefill + 2 * DECODE_S, rel=1e-12)
    assert r.itl_mean_s == pytest.approx(DECODE_S, rel=1e-12)
    steps = res.steps
    assert list(steps.start_s.round(9)) == [
        0.25,
        round(0.25 + prefill, 9),
        round(0.25 + prefill + DECODE_S, 9),
    ]
    assert list(steps.bound) == ["compute", "memory", "memory"]
    assert res.summary["sim_time_s"] == pytest.approx(r.finish_s, rel=1e-12)


@pytest.mark.parametrize("mask", ["causal", "square"])
def test_the_attention_mask_leaves_e20_exact(mask):
    """E20 counts only weights and GEMM FLOPs (no attention term), so neither the causal
    default nor F23's square moves its numbers."""
    res, big, _ = _e20(True, **{"cost.attention_mask": mask})
    assert res.summary["max_itl_s"] == pytest.approx(HYBRID_S, rel=1e-12)
    assert res.summary["itl_s"]["p50"] == pytest.approx(DECODE_S, rel=1e-12)
    assert big.ttft_s - big.queue_s == pytest.approx(8 * HYBRID_S, rel=1e-9)

"""``kvsim plan`` on DeepSeek-V3.2 with fp8 KV: vLLM stores the MLA latent as
``fp8_ds_mla`` (656 B per token per layer: 512 fp8 values, 4 fp32 scales, the 64-value
rope part in bf16), where the plan's fp8 counts the 576-value latent at 1 B. The plan says
so with vLLM's figures (the user trial's case, derived by hand)."""

from __future__ import annotations

import math

from sim.profiles import load_accelerator, load_model
from sim.sizing.plan import FP8_DS_MLA_BYTES_PER_TOKEN_PER_LAYER, PlanInputs, plan_capacity


def _plan(model: str, kv_dtype: str | None, pp: int = 1):
    return plan_capacity(PlanInputs(model=load_model(model),
                                    accelerator=load_accelerator("h200-141gb"), num_gpus=8,
                                    pp=pp, contexts=[8192], kv_dtype=kv_dtype,
                                    gpu_memory_utilization=0.9))  # fmt: skip


def test_v32_fp8_states_vllm_s_bytes_and_concurrency():
    assert FP8_DS_MLA_BYTES_PER_TOKEN_PER_LAYER == 512 + 16 + 128 == 656
    r = _plan("deepseek-v3.2", "fp8")
    (c,) = r.contexts
    # counted: 61 x 576 (fp8 latent) + 61 x 132 (the indexer's fp8 key and scale)
    assert r.kv_bytes_per_token == 61 * 576 + 61 * 132 == 43_188
    assert c.max_concurrent == 146
    vllm = 61 * 656 + 61 * 132
    assert vllm == 48_068
    fits = math.floor(r.kv_pool_bytes_per_gpu / (vllm * 8192))  # the latent on every rank
    assert fits == 131
    (w,) = [w for w in r.warnings if "fp8_ds_mla" in w]
    assert "48,068 B per token, not 43,188" in w and "8,192: 131 (not 146)" in w


def test_pp_counts_the_most_loaded_stage():
    """PP 2: 31 of the 61 layers on the larger stage, 31 x (656 + 132) B a token per GPU."""
    r = _plan("deepseek-v3.2", "fp8", pp=2)
    fits = r.replicas * math.floor(r.kv_pool_bytes_per_gpu / (31 * (656 + 132) * 8192))
    (w,) = [w for w in r.warnings if "fp8_ds_mla" in w]
    assert f"8,192: {fits:,} (not {r.contexts[0].max_concurrent:,})" in w


def test_no_caveat_off_that_format():
    assert not [w for w in _plan("deepseek-v3.2", None).warnings if "fp8_ds_mla" in w]  # bf16
    assert not [w for w in _plan("deepseek-v3", "fp8").warnings if "fp8_ds_mla" in w]  # no indexer

"""F4, F5, F34-F37 through the public functions (E1, E2, E27, E28)."""

import math

import pytest

from sim.errors import KvsimError
from sim.profiles import load_accelerator, load_model
from sim.sizing import (
    capacity_shared,
    capacity_unshared,
    kv_demand_bytes,
    kv_demand_shared_bytes,
    kv_pool_bytes,
    max_concurrent,
    weights_bytes_per_gpu,
)
from sim.sizing.plan import PlanInputs, plan_capacity
from sim.units import GB, GiB

M = 327_680


def test_e1_195_48_12():
    """E1: 8 x 80 GiB = 687.2 GB, 141.2 GB of weights, 20 GB runtime -> 526 GB pool."""
    pool = kv_pool_bytes(8 * 80 * GiB, 70.6e9 * 2, 20 * GB)
    assert pool / GB == pytest.approx(526.0, abs=0.01)
    assert [max_concurrent(pool, s, M) for s in (8192, 32768, 131072)] == [195, 48, 12]


def test_e2_corrected_195_and_12():
    """E2: the chapter's 192 used '140 GiB' of weights; 70e9 x 2 B = 130.39 GiB, so 195.

    The 131,072-token figure (12) is unchanged.
    """
    weights = weights_bytes_per_gpu(70e9, 2, tp=8) * 8
    assert weights / GiB == pytest.approx(130.385, abs=1e-3)
    pool = kv_pool_bytes(640 * GiB, weights, 20 * GiB)
    assert pool / GiB == pytest.approx(489.6, abs=0.05)
    assert max_concurrent(pool, 8192, M) == 195
    assert max_concurrent(pool, 131072, M) == 12
    assert max_concurrent(480 * GiB, 8192, M) == 192  # the chapter's premise, reproduced


def test_pool_must_be_positive():
    with pytest.raises(KvsimError, match="no memory left"):
        kv_pool_bytes(80e9, 141.2e9, 0)


def test_e27_41_vs_138():
    """E27: 526 GB pool, 10% headroom, M_avg 32768 + K_avg 2048, 24,576 shared."""
    pool = 526e9
    assert capacity_unshared(pool, M, 32768, 2048, headroom=0.10) == 41
    assert capacity_shared(pool, M, 32768 - 24576, 2048, 24576, headroom=0.10) == 138


def test_e28_36_vs_122():
    """E28: H100 taken as 80e9 B, 70e9 params, 4.5 GB/GPU runtime -> 464 GB pool."""
    w = weights_bytes_per_gpu(70e9, 2, tp=8)
    assert w == 17.5e9
    pool = 8 * kv_pool_bytes(80e9, w, 4.5e9)
    assert pool == 464e9
    assert math.floor(pool / M) == 1_416_015
    b = capacity_unshared(pool, M, 32768, 2048, 0.10)
    bs = capacity_shared(pool, M, 8192, 2048, 24576, 0.10)
    assert (b, bs) == (36, 122)
    assert bs / b == pytest.approx(3.389, abs=1e-3)  # the chapter truncates to 3.38


def test_e28_with_80_gib_gpus_gives_40_and_134():
    """E28 cross-note: with H100 = 80 GiB the same method gives 40 and 134."""
    pool = 8 * (80 * GiB - 22e9)
    assert capacity_unshared(pool, M, 32768, 2048, 0.10) == 40
    assert capacity_shared(pool, M, 8192, 2048, 24576, 0.10) == 134


def test_f35_f36_demand():
    assert kv_demand_bytes(10, 32768, 2048, M) == 10 * 34816 * M
    # sigma = 0.75 of 32768 shared: per trajectory (8192 + 2048) tokens
    d = kv_demand_shared_bytes(
        10, 32768, 2048, M, sigma=0.75, shared_tokens=24576, headroom_bytes=5
    )
    assert d == (24576 + 10 * 10240) * M + 5
    with pytest.raises(KvsimError):
        kv_demand_shared_bytes(1, 1, 1, M, sigma=1.0, shared_tokens=0)


def test_plan_replicas_and_per_gpu_capacity():
    """8 GPUs as 2 replicas of TP=4: each replica holds its own weights."""
    r = plan_capacity(
        PlanInputs(
            model=load_model("llama-3-70b"),
            accelerator=load_accelerator("h100-sxm-80gb"),
            num_gpus=8,
            tp=4,
            contexts=[8192],
        )
    )
    assert r.replicas == 2
    assert r.weights_bytes == 2 * 70.6e9 * 2
    per_gpu_pool = 80 * GiB - 70.6e9 * 2 / 4
    assert r.contexts[0].max_concurrent == 2 * math.floor(
        per_gpu_pool / (8192 * 2 * 80 * 2 * 128 * 2)
    )


def test_plan_mla_latent_whole_on_every_rank():
    r = plan_capacity(
        PlanInputs(
            model=load_model("deepseek-v3"),
            accelerator=load_accelerator("h200-141gb"),
            num_gpus=8,
            contexts=[32768],
        )
    )
    assert r.kv_bytes_per_token_per_gpu == r.kv_bytes_per_token == 70_272
    pool = 150754820096 - 671e9 * 1 / 8
    assert r.contexts[0].max_concurrent == math.floor(pool / (32768 * 70_272))


def test_plan_rejects_bad_layouts():
    base = dict(
        model=load_model("llama-3-70b"),
        accelerator=load_accelerator("h100-sxm-80gb"),
        contexts=[8192],
    )
    with pytest.raises(KvsimError, match="multiple of tp x pp"):
        plan_capacity(PlanInputs(num_gpus=8, tp=3, **base))
    with pytest.raises(KvsimError, match="shared-prefix"):
        plan_capacity(PlanInputs(num_gpus=8, shared_prefix_tokens=9000, **base))
    # weights beyond memory: a plan of 0 with the reason, not an error (issue: exit 0)
    r = plan_capacity(PlanInputs(num_gpus=1, **base))
    assert r.kv_pool_bytes == 0 and r.contexts[0].max_concurrent == 0
    assert r.warnings == [
        "weights exceed memory x utilization: 141.200 GB of weights per GPU > 85.899 GB x "
        "utilization 1 = 85.899 GB, so the KV pool is 0 and no trajectory fits (raise "
        "--num-gpus or --tp, or lower --params)"
    ]

"""h101 (user trial h99, finding 8): with pipeline parallelism, ``kvsim plan`` sized the
pool of the most KV-loaded stage against the *average* weights per GPU. vLLM sizes each
stage's pool from its own memory and runs with the smallest; the first stage holds the
extra layers and the token embedding, so its pool is the smallest. Worked example by hand."""

from __future__ import annotations

import pytest
import yaml

from sim.profiles import load_accelerator, load_model
from sim.scenario.load import load_scenario
from sim.scenario.resolve import resolve
from sim.sizing.capacity import stage_weight_bytes
from sim.sizing.kv import layers_per_stage
from sim.sizing.plan import PlanInputs, plan_capacity

GIB = 2**30


def _plan(model: str, num_gpus: int, tp: int, pp: int, **kw):
    return plan_capacity(PlanInputs(
        model=load_model(model), accelerator=load_accelerator("h100-sxm-80gb"),
        num_gpus=num_gpus, tp=tp, pp=pp, contexts=[8192, 32768],
        gpu_memory_utilization=0.9, **kw))  # fmt: skip


def test_llama_70b_tp2_pp3_by_hand():
    """llama-3.1-70b: N = 70.55e9, L = 80, V = 128,256, d = 8,192, bf16 (2 B).
    Embedding = LM head = V x d = 1,050,673,152. Per layer (N - 2 V d) / L =
    (70.55e9 - 2,101,346,304) / 80 = 855,608,171.2. PP 3: 80 layers as 27 / 27 / 26 (the
    extra to the first). Stage params: 27 x 855,608,171.2 + V d = 24,152,093,774.4;
    27 x 855,608,171.2 = 23,101,420,622.4; 26 x 855,608,171.2 + V d = 23,296,485,603.2.
    Per GPU at TP 2: x 2 B / 2 = the same numbers in bytes; the most loaded, 24.152 GB
    (the average was 70.55e9 x 2 / 6 = 23.517 GB). Pool: 80 GiB x 0.9 = 77,309,411,328 B
    less 24,152,093,774.4 = 53,157,317,553.6 B (was 53,792,744,661.3). KV per token per
    GPU on a 27-layer stage: 27 x 2 x (8 / 2 heads) x 128 x 2 B = 55,296 B; at 8,192
    tokens 452,984,832 B: floor(53,157,317,553.6 / 452,984,832) = floor(117.35) = 117
    (was floor(118.75) = 118); at 32,768 tokens 1,811,939,328 B: floor(29.34) = 29 (as
    before)."""
    want_stages = [24_152_093_774.4, 23_101_420_622.4, 23_296_485_603.2]
    assert layers_per_stage(80, 3) == [27, 27, 26]
    got = stage_weight_bytes(70.55e9 * 2, [27, 27, 26], 128_256, 8_192, 2.0)
    assert got == pytest.approx([2 * w for w in want_stages], rel=1e-12)  # bytes at bf16
    r = _plan("llama-3.1-70b", 6, 2, 3)
    assert r.weights_bytes_per_gpu_by_stage == pytest.approx(want_stages, rel=1e-12)
    assert r.weights_bytes_per_gpu == pytest.approx(24_152_093_774.4, rel=1e-12)
    assert r.weights_bytes == pytest.approx(70.55e9 * 2, rel=1e-12)  # the node's total, kept
    assert 80 * GIB * 0.9 == 77_309_411_328
    assert r.kv_pool_bytes_per_gpu == pytest.approx(53_157_317_553.6, rel=1e-12)
    assert r.kv_bytes_per_token_per_gpu == 55_296
    assert [c.max_concurrent for c in r.contexts] == [117, 29]
    # the average (``per_stage_weights=False``): the old figures
    old = _plan("llama-3.1-70b", 6, 2, 3, per_stage_weights=False)
    assert old.weights_bytes_per_gpu == pytest.approx(70.55e9 * 2 / 6, rel=1e-12)
    assert old.kv_pool_bytes_per_gpu == pytest.approx(77_309_411_328 - 70.55e9 / 3, rel=1e-12)
    assert [c.max_concurrent for c in old.contexts] == [118, 29]
    assert old.weights_bytes_per_gpu_by_stage == []


def test_one_stage_or_no_vocabulary_keeps_the_average():
    r = _plan("llama-3.1-70b", 8, 8, 1)  # PP 1: every GPU holds N x b / TP, bit for bit
    assert r.weights_bytes_per_gpu == 70.55e9 * 2 / 8 and r.weights_bytes_per_gpu_by_stage == []
    assert stage_weight_bytes(70.55e9 * 2, [80], 128_256, 8_192, 2.0) is None
    g = load_model("gemma-3-27b")  # no vocab_size stated: the average
    assert g.vocab_size is None
    r = _plan("gemma-3-27b", 2, 1, 2)
    assert r.weights_bytes_per_gpu_by_stage == []
    assert stage_weight_bytes(2e9, [2, 2], 1_000_000, 1_000, 2.0) is None  # W <= 2 V d b: no split


def test_a_run_sizes_its_pool_on_the_most_loaded_stage_as_plan(tmp_path):
    """``kvsim run`` subtracts the same stage's weights (``sim.scenario.resolve``): the
    worked example above, 53,157,317,553.6 B per GPU (main subtracted the average and
    got 53,792,744,661.3 B); a draft-free dense model, so nothing else is loaded."""
    path = tmp_path / "pp.yaml"
    path.write_text(yaml.safe_dump({
        "schema_version": 1, "name": "pp", "seed": 1, "model": "llama-3.1-70b",
        "hardware": {"accelerator": "h100-sxm-80gb", "tp": 2, "pp": 3,
                     "gpu_memory_utilization": 0.9},
        "allocator": {"kind": "paged", "block_size": 16},
        "scheduler": {"kind": "vllm_v1"},
        "workload": {"kind": "chat", "num_requests": 2, "arrival": {"kind": "poisson", "rate_per_s": 1.0},
                     "lengths": {"kind": "parametric",
                                 "prompt_tokens": {"kind": "lognormal", "median": 100.0, "sigma": 1.0},
                                 "output_tokens": {"kind": "lognormal", "median": 100.0, "sigma": 1.0}}},
    }))  # fmt: skip
    r = resolve(load_scenario(path))
    assert r.kv_pool_bytes_per_gpu == pytest.approx(53_157_317_553.6, rel=1e-12)
    assert r.kv_pool_bytes_per_gpu == pytest.approx(
        _plan("llama-3.1-70b", 6, 2, 3).kv_pool_bytes_per_gpu, rel=1e-12
    )
    text = path.read_text().replace("tp: 2", "tp: 1").replace("pp: 3", "pp: 6")
    path.write_text(text)  # vLLM's split at PP 6 (the test below)
    assert resolve(load_scenario(path)).kv_pool_bytes_per_gpu == pytest.approx(
        52_962_252_572.8, rel=1e-12
    )


def test_vllms_layer_split_puts_the_extra_layers_before_the_last_stage():
    """vLLM's ``get_pp_indices``: the remainder one layer a stage from the second-to-last
    back, so at PP 6 the embedding's stage holds no extra layer. llama-3.1-70b on 6 GPUs,
    TP 1: 80 = 6 x 13 + 2 -> 13 / 13 / 13 / 14 / 14 / 13. Bytes (bf16): embedding
    2 x 1,050,673,152 = 2,101,346,304; per layer (141.1e9 - 2 x 2,101,346,304) / 80 =
    1,711,216,342.4; first and last stages 13 x that + 2,101,346,304 =
    24,347,158,755.2, the 14-layer ones 23,957,028,793.6. The first-stages split gave
    14 + the embedding: 26,058,375,097.6 (1.71 GB a GPU too much). Pool: 80 GiB x 0.9 -
    24,347,158,755.2 = 52,962,252,572.8; the run's too."""
    assert layers_per_stage(80, 6) == [13, 13, 13, 14, 14, 13]
    assert layers_per_stage(61, 2) == [31, 30] and layers_per_stage(22, 4) == [5, 6, 6, 5]
    r = _plan("llama-3.1-70b", 6, 1, 6)
    assert r.weights_bytes_per_gpu == pytest.approx(24_347_158_755.2, rel=1e-12)
    assert r.kv_pool_bytes_per_gpu == pytest.approx(52_962_252_572.8, rel=1e-12)


def test_the_embedding_is_priced_at_the_dense_dtype():
    """Experts in a smaller format lower the layers' bytes, not the embedding's: 100 B of
    weights, two one-layer stages, V x d = 10 parameters at 2 B: embedding and LM head 20
    B each, layers (100 - 40) / 2 = 30 B: 50 / 50 (the mean price, 100 B over a count that
    does not know the dtypes, cannot say this)."""
    assert stage_weight_bytes(100.0, [1, 1], 10, 1, 2.0) == [50.0, 50.0]
    assert stage_weight_bytes(100.0, [2, 1], 10, 1, 2.0) == [60.0, 40.0]

"""h113: ``kvsim capacity``'s analytic estimate (F37) and the plan and run it stands beside
agree. (1) Under pipeline parallelism with a shared prefix, the stage whose figures the
estimate reports is the one ``kvsim plan`` says decides (``sim.sizing.plan.deciding_stage``:
the stage that fits the fewest trajectories, the first of them on a tie), not a second rule
of its own (it took the stage with the least room, a different stage on a tie). (2) The
estimate sizes the KV pool the run sizes (``Resolved.kv_pool_bytes_per_gpu``), also with
``cost.weights_bytes`` and pipeline stages (it once re-derived the weights as a parameter
count: gpt-oss-20b, whose experts are MXFP4, with 16 GB of weights on 3 stages, got
75.17 GB per GPU where the run has 71.59)."""

from __future__ import annotations

import math
from pathlib import Path

from sim.profiles import load_accelerator
from sim.scenario import load_scenario, resolve
from sim.sizing.kv import layers_per_stage
from sim.sweep.analytic import analytic_estimate

ROOT = Path(__file__).resolve().parents[2]
AGENTS = str(ROOT / "workloads" / "dense_vs_hybrid_h200.yaml")
CAPACITY = str(ROOT / "workloads" / "coding_agents_capacity.yaml")
#: Llama-3.1-70B, one layer on one GPU (TP 1): 2 (K, V) x 8 KV heads x 128 x 2 B
LLAMA_LAYER_BYTES_PER_TOKEN = 2 * 8 * 128 * 2  # 4,096
PREFIX = 2048 + 1536  # the scenario's system prompt and tool definitions


def _estimate(path: str, **sets):
    loaded = load_scenario(path, sets)
    resolved = resolve(loaded)
    return resolved, analytic_estimate(resolved, "concurrency", loaded.scenario.seed)


def test_the_deciding_stage_is_the_plans_on_a_tie():
    """Llama-3.1-70B on 6 pipeline stages (TP 1) of 13, 13, 13, 14, 14, 13 layers, radix
    cache, the 3,584-token prefix shared. A stage of n layers holds the prefix
    (n x 3,584 x 4,096 B) once and n x (T - 3,584) x 4,096 B per trajectory. The pool is
    set so that both sizes fit the same whole number of trajectories, 5: the first
    13-layer stage (index 0) decides, so the estimate reports a 13-layer stage's bytes
    (the stage with the least room left, a 14-layer one, was the old pick)."""
    base = {"allocator.kind": "radix", "hardware.tp": 1, "hardware.pp": 6}
    _, first = _estimate(AGENTS, **base, **{"hardware.kv_pool_bytes_per_gpu": 40e9})
    inp = first["inputs"]
    tokens = round(inp["M_avg_tokens"]) + round(inp["K_avg_tokens"])
    layers = layers_per_stage(80, 6)
    assert layers == [13, 13, 13, 14, 14, 13]
    private_tokens = tokens - PREFIX
    # usable / (n x P x c) - S / P = fits + fraction: 14 layers at 5.05, so 13 at
    # 5.05 + x / 182 with x = usable / (P x c) under 173 stays below 6
    x = 14 * (5.05 + PREFIX / private_tokens)
    assert x / 13 - x / 14 < 0.95
    pool = x * private_tokens * LLAMA_LAYER_BYTES_PER_TOKEN / 0.9
    _, est = _estimate(AGENTS, **base, **{"hardware.kv_pool_bytes_per_gpu": pool})
    inp = est["inputs"]
    usable = 0.9 * pool
    c = LLAMA_LAYER_BYTES_PER_TOKEN
    fits = [math.floor((usable - n * PREFIX * c) / (n * private_tokens * c)) for n in layers]
    assert fits == [5, 5, 5, 5, 5, 5]  # a tie between the 13- and 14-layer stages
    assert est["value"] == 5
    gpus = 6
    assert inp["shared_prefix_bytes"] == 13 * PREFIX * c * gpus
    assert inp["kv_bytes_per_trajectory"] == 13 * private_tokens * c * gpus


def test_the_estimate_sizes_the_runs_pool_with_a_weights_override_and_stages():
    """gpt-oss-20b (24 layers, vocabulary 201,088 x d_model 2,880, bf16 embedding) with
    ``cost.weights_bytes`` 16 GB on 3 pipeline stages of 8 layers, one H100 each: the
    first and last stages hold the embedding and the LM head (E = 201,088 x 2,880 x 2 B)
    beside 8 layers of (16 GB - 2E) / 24, so the most loaded GPU holds 16 GB / 3 + E / 3
    and the pool per GPU is 0.9 x memory minus that (the run's, reserve 0). The estimate
    divides 90 % of that same pool by the KV per trajectory."""
    resolved, est = _estimate(CAPACITY, **{
        "model.profile": "gpt-oss-20b", "model.overrides": {}, "hardware.tp": 1,
        "hardware.pp": 3, "cost.weights_bytes": 16e9})  # fmt: skip
    embed = 201_088 * 2_880 * 2
    memory = load_accelerator("h100-sxm-80gb").memory_bytes
    pool_gpu = 0.9 * memory - (16e9 / 3 + embed / 3)
    assert math.isclose(resolved.kv_pool_bytes_per_gpu, pool_gpu, rel_tol=1e-12)
    inp = est["inputs"]
    assert inp["kv_pool_bytes"] == resolved.kv_pool_bytes_per_gpu * 3
    assert inp["prefix_cache"] and inp["S_shared_tokens"] > 0
    free = 0.9 * inp["kv_pool_bytes"] - inp["shared_prefix_bytes"]
    assert est["value"] == math.floor(free / inp["kv_bytes_per_trajectory"])


def test_saved_states_count_in_the_figures_the_estimate_divides_by():
    """Nemotron-H 8B, radix cache, ``mamba_cache_mode: all``: each state layer saves a
    state (one padded page) at every block boundary, the prefix's shared and the rest each
    trajectory's. The plan counts them in its concurrency; the estimate's reported prefix
    and private bytes now are the plan's too (they left the saved states out: 58.7 MB and
    87.4 MB beside a concurrency that had counted them), so F37 from its own inputs gives
    its answer."""
    _, est = _estimate(AGENTS, **{
        "model.profile": "nemotron-h-8b", "allocator.kind": "radix",
        "scheduler.max_model_len": 8192, "model.mamba_cache_mode": "all"})  # fmt: skip
    inp = est["inputs"]
    assert inp["S_shared_tokens"] == PREFIX and inp["shared_prefix_bytes"] > 0
    free = 0.9 * inp["kv_pool_bytes"] - inp["shared_prefix_bytes"]
    assert est["value"] == math.floor(free / inp["kv_bytes_per_trajectory"]) == 510

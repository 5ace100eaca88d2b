"""``kvsim capacity``'s analytic estimate of a scenario with a speculative section sizes
the drafter by the run's rule (``sim.sizing.speculative``, through ``kvsim plan``'s
``PlanInputs``; h114): its KV per token, its weights out of the pool, k lookahead slots."""

from __future__ import annotations

import math
from pathlib import Path

from sim.scenario import load_scenario, resolve
from sim.sweep.analytic import analytic_estimate

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = str(ROOT / "workloads" / "dense_vs_hybrid_h200.yaml")  # Llama-3.1-70B, one H200
EAGLE = {"speculative.method": "eagle", "speculative.num_speculative_tokens": 3,
         "speculative.acceptance_rate": 0.8}  # fmt: skip


def test_the_estimate_charges_the_drafter():
    """Llama-3.1-70B + EAGLE k 3 on one H200: 80 + 1 layers x 4,096 B = 331,776 B per
    token; the pool 0.9 x 150,754,820,096 - 70.55e9 - 70.55e9 / 80 = 64,247,463,086.4 B
    (the run's, tests/sched/test_speculative.py); each trajectory holds M_avg + K_avg + 3
    tokens, 90 % of the pool over it."""
    loaded = load_scenario(SCENARIO, EAGLE)
    est = analytic_estimate(resolve(loaded), "concurrency", loaded.scenario.seed)
    inp = est["inputs"]
    assert inp["kv_bytes_per_token"] == 81 * 4096
    assert abs(inp["kv_pool_bytes"] - 64_247_463_086.4) < 1
    per = (round(inp["M_avg_tokens"]) + round(inp["K_avg_tokens"]) + 3) * 81 * 4096
    assert inp["kv_bytes_per_trajectory"] == per
    assert est["value"] == math.floor(0.9 * inp["kv_pool_bytes"] / per)
    plain = load_scenario(SCENARIO)
    assert analytic_estimate(resolve(plain), "concurrency", plain.scenario.seed)["value"] > est["value"]

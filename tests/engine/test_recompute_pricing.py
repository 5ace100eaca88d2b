"""A dropped context's recompute is priced by the run's own step pricer (the engine's
``CostModel``, calibration included), as that prefill run alone in the scheduler's chunks:
the pauses table's ``recompute_flops`` / ``recompute_s``, the policy's realised cost and the
oracle's recompute option (``PauseFacts.recompute_s``).

The worked example is E24 (SPEC section 4: Llama-3.1-70B with E24's 70.6e9 parameters,
32,768 tokens on 8 x H100, 45 % prefill MFU, 8,192-token chunks) with the attention FLOPs
switched on, computed by hand from the SPEC's formulas, never from the code:

* F23's linear term ``2 P S`` and, per (query, key) pair, ``4 L d`` attention FLOPs
  (d = 64 query heads x 128 = 8,192 = d_model);
* F26's mask: chunk k sees every cached position and is causal within itself, so a chunk of
  c tokens after h computes ``c h + c (c + 1) / 2`` pairs; over the chunks of a prefill of
  s tokens after a cached prefix of h that is ``s h + s (s + 1) / 2`` (h = 0: S (S + 1) / 2,
  about half F23's square ``S^2``, which the recompute used to count);
* F24 / F23: each chunk is compute-bound here, so its time is its FLOPs / (MFU x peak x 8).
"""

from __future__ import annotations

import math

from sim.cost import CostModel, StepWork
from sim.policy import action_costs
from sim.run import build

E24 = "workloads/seed_tool_wait_45s.yaml"
P, L, D = 70.6e9, 80, 64 * 128  # parameters, layers, query heads x head size (= d_model)
S = 32768  # the paused context
RATE = 0.45 * 989.4e12 * 8  # MFU x the H100 profile's dense BF16 peak x 8 GPUs


def flops(new: int, cached: int = 0) -> int:
    """F23 under F26's causal mask: a prefill of ``new`` tokens over ``cached`` ones."""
    return int(2 * P * new) + 4 * L * D * (new * cached + new * (new + 1) // 2)


def e24_recompute(**more):
    sim = build(E24, **{"pause_policy.kind": "recompute", "cost.attention_flops": True, **more})
    result = sim.run(None)
    assert len(result.pauses) == 1
    return sim, result.pauses.iloc[0]


def test_e24_recompute_is_the_causal_prefill_the_engine_ran():
    # by hand: 2 x 70.6e9 x 32,768 = 4,626,841,600,000,000 and 4 x 80 x 8,192 x
    # (32,768 x 32,769 / 2) = 2,621,440 x 536,887,296 = 1,407,417,833,226,240
    assert flops(S) == 4_626_841_600_000_000 + 1_407_417_833_226_240 == 6_034_259_433_226_240
    sim, p = e24_recompute()
    assert p.moved_to == "recompute" and p.recompute_tokens == S
    assert p.recompute_flops == 6_034_259_433_226_240  # F23's square said 7.44e15
    assert math.isclose(p.recompute_s, flops(S) / RATE, rel_tol=1e-12)  # 1.6941 s
    assert 1.6941 < p.recompute_s < 1.6942  # F23's square at this rate said 2.0893 s
    # alone on the node, the engine's own steps took exactly that long
    assert math.isclose(p.resume_stall_s, p.recompute_s, rel_tol=1e-12)
    # the policy's realised cost is that recompute (nothing held, nothing reloaded)
    assert p.policy_cost_s == p.recompute_s
    # the oracle prices the same prefill as its recompute option
    facts = sim.pauses.pauses[0].facts
    assert facts.recompute_flops == flops(S) and facts.recompute_s == p.recompute_s
    assert action_costs(facts, 45.0)["recompute"].total_s == p.recompute_s


def test_a_suffix_is_priced_over_the_prefix_still_cached():
    """9,216 tokens after 16,384 cached: one 8,192-token chunk over 16,384, then 1,024
    over 24,576 (the scheduler's chunks), each attending the whole prefix."""
    sim, _ = e24_recompute()
    seconds, total = sim.pauses.decider.recompute_price(sim.scheduler, 16384, 9216)
    # 2 x 70.6e9 x 9,216 + 2,621,440 x (9,216 x 16,384 + 9,216 x 9,217 / 2)
    assert flops(9216, 16384) == 1_301_299_200_000_000 + 2_621_440 * 193_466_880
    assert total == flops(9216, 16384)
    # each chunk compute-bound: its F23 FLOPs at MFU x peak x GPUs
    by_chunk = flops(8192, 16384) / RATE + flops(1024, 24576) / RATE
    assert math.isclose(seconds, by_chunk, rel_tol=1e-12)
    assert sim.pauses.decider.recompute_price(sim.scheduler, 5, 0) == (0.0, 0.0)


def test_a_calibrated_run_prices_the_recompute_with_its_calibration():
    """The vidur calibration (per_group): the pauses table's recompute_s is the calibrated
    pricer's price of the 4 chunks, not the causal FLOPs at the scenario's flat 45 % MFU
    (1.6941 s, as uncalibrated)."""
    sim, p = e24_recompute(**{"cost.calibration": "h100-sxm-80gb-vidur"})
    sc, resolved = sim.resolved.scenario, sim.resolved
    pricer = CostModel(resolved.model, resolved.accelerator, sc.hardware.tp, sc.hardware.pp, sc.cost)
    assert pricer.pricing == "per_group"
    chunks = [pricer.price(StepWork(0, 0, ((8192, 8192 * k),))) for k in range(4)]
    assert p.recompute_s == sum(c.total_s for c in chunks)
    assert p.recompute_flops == sum(c.flops_per_gpu * 8 for c in chunks)
    assert math.isclose(p.resume_stall_s, p.recompute_s, rel_tol=1e-12)  # what the engine ran
    flat = flops(S) / RATE  # the scenario's MFU, which the calibration replaces
    assert math.isclose(flat, 1.6941, abs_tol=5e-5) and abs(p.recompute_s - flat) > 0.1
    assert sim.pauses.pauses[0].facts.recompute_s == p.recompute_s == p.policy_cost_s


def test_swarm_rows_price_the_suffix_each_turn_recomputed():
    """On the radix swarm, a dropped context mostly hits the prefix cache: each recomputed
    row's FLOPs are its suffix s over the prefix h = tokens - s (Llama-3.1-8B: 8.03e9
    parameters, 32 layers, d = 4,096), its seconds the pricer's for those chunks."""
    sim = build("tests/golden/scenarios/agent_swarm_pressure.yaml", **{
        "workload.num_trajectories": 4, "workload.arrival.concurrency": 4,
        "workload.turns.max": 4, "pause_policy.kind": "recompute"})  # fmt: skip
    pauses = sim.run(None).pauses
    rows = pauses[pauses.recompute_tokens > 0]
    assert len(rows) >= 5
    for row in rows.itertuples():
        s, h = int(row.recompute_tokens), int(row.tokens - row.recompute_tokens)
        want = 2 * 8.03e9 * s + 4 * 32 * 4096 * (s * h + s * (s + 1) // 2)
        assert math.isclose(row.recompute_flops, want, rel_tol=1e-12)
        seconds, _ = sim.pauses.decider.recompute_price(sim.scheduler, h, s)
        assert row.recompute_s == seconds and row.policy_cost_s >= seconds
        # the turn's stall also holds its wait for admission and the steps it shared
        assert row.resume_stall_s >= seconds * (1 - 1e-12)

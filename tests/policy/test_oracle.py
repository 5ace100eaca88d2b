"""The pause oracle (sim.policy.oracle): hand-computed costs of a 3-pause trajectory, the
oracle as the minimum of the action costs, and a policy's realised cost in the same unit."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.policy import PauseFacts, action_costs, oracle_cost, realised_cost

# one trajectory's state: 1 GB (one GPU), a 10 GB KV pool (M/P = 0.1), a 10 GB/s link
# (one way 0.1 s), 1 TFLOP/s of prefill and 0.5 TFLOP to rebuild (recompute 0.5 s)
M, POOL, LINK, RATE, FLOPS = 1e9, 1e10, 1e10, 1e12, 5e11


def facts(host_free=1e12, nvme_free=0.0, nvme_bw=0.0) -> PauseFacts:
    return PauseFacts(
        tokens=1000, state_bytes_per_gpu=M, state_bytes_total=M, predicted_wait_s=None,
        hbm_free_fraction=0.5, link_bw_bytes_per_s=LINK, prefill_flops_per_s=RATE,
        recompute_flops=FLOPS, host_free_bytes=host_free, nvme_free_bytes=nvme_free,
        nvme_bw_bytes_per_s=nvme_bw, pool_bytes=POOL,
    )  # fmt: skip


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)


def test_three_pause_trajectory_by_hand():
    f = facts()
    # pause 1, 0.05 s: hold 0.1 x 0.05 = 0.005; an offload cannot finish its 0.1 s copy-out,
    # so it holds the same 0.005 (ties go to hold); recompute 0.5
    c1 = action_costs(f, 0.05)
    assert close(c1["hold"].total_s, 0.005) and close(c1["offload_host"].total_s, 0.005)
    assert close(c1["recompute"].total_s, 0.5) and c1["recompute"].recompute_s == 0.5
    assert oracle_cost(f, 0.05)[0] == "hold"
    # pause 2, 3 s: hold 0.3; offload: copy-out 0.1 s held, reload from 2.9 s held 0.1 s:
    # 0.1 x 0.2 = 0.02 and no stall
    c2 = action_costs(f, 3.0)
    assert close(c2["hold"].total_s, 0.3)
    assert close(c2["offload_host"].hbm_s, 0.02) and c2["offload_host"].transfer_s == 0.0
    assert oracle_cost(f, 3.0)[0] == "offload_host"
    # pause 3, 0.15 s: the reload cannot start before the copy-out ends (0.1 s): held
    # 0.1 + 0.05 = 0.15 s (0.015) plus a stall of 0.1 + 0.1 - 0.15 = 0.05: 0.065 > hold 0.015
    c3 = action_costs(f, 0.15)
    assert close(c3["offload_host"].hbm_s, 0.015) and close(c3["offload_host"].transfer_s, 0.05)
    action, best = oracle_cost(f, 0.15)
    assert action == "hold" and close(best.total_s, 0.015)
    oracle = sum(oracle_cost(f, w)[1].total_s for w in (0.05, 3.0, 0.15))
    assert close(oracle, 0.005 + 0.02 + 0.015)
    # a `hold` policy's realised cost: each state held its whole wait, nothing else
    held = sum(realised_cost(f, M * w, 0.0, 0.0).total_s for w in (0.05, 3.0, 0.15))
    assert close(held, 0.32) and close(held / oracle, 8.0)
    # a `recompute` policy: 3 x 0.5 s of prefill, no HBM
    assert close(sum(realised_cost(f, 0.0, FLOPS, 0.0).total_s for _ in range(3)), 1.5)
    # a naive `offload_host` on pause 2: copy-out held 0.1 s, then a 0.1 s reload stall
    naive = realised_cost(f, M * 0.1, 0.0, 0.1)
    assert close(naive.hbm_s, 0.01) and close(naive.total_s, 0.11)


def test_a_pause_that_never_resumes_is_free_to_drop():
    action, best = oracle_cost(facts(), 10.0, resumed=False)
    assert action == "recompute" and best.total_s == 0.0


def test_tiers_without_room_are_not_offered():
    assert set(action_costs(facts(host_free=0.0), 3.0)) == {"hold", "recompute"}
    nv = facts(host_free=0.0, nvme_free=1e12, nvme_bw=2e9)  # drives 0.5 s then link 0.1 s
    c = action_costs(nv, 10.0)["offload_nvme"]
    assert close(c.hbm_s, 0.1 * 1.2) and c.transfer_s == 0.0


def test_refuses_a_negative_wait():
    with pytest.raises(ValueError, match="wait_s"):
        action_costs(facts(), -1.0)


@given(st.floats(0, 1e5), st.booleans(), st.floats(0, 1e12))
def test_the_oracle_is_the_cheapest_action(wait, resumed, host_free):
    f = facts(host_free=host_free)
    costs = action_costs(f, wait, resumed)
    _, best = oracle_cost(f, wait, resumed)
    assert all(best.total_s <= c.total_s for c in costs.values())
    assert all(c.total_s >= 0 and math.isfinite(c.total_s) for c in costs.values())
    # holding is always allowed, so the oracle never costs more than the hold
    assert best.total_s <= realised_cost(f, M * wait, 0.0, 0.0).total_s * (1 + 1e-12)

"""steps.parquet's event columns add up to summary.json's counts, zero-time decisions and
requests refused on submission included (they are rows with ``n_steps`` 0)."""

from __future__ import annotations

import pytest
from engine_helpers import run

# the pressured swarm on a 3 GB pool: preemptions in decisions that run no step, held
# drops, and requests refused when submitted (a prompt that fills the model's window,
# leaving no room for one output token, or one that can never fit the KV pool)
PRESSURE = {"hardware.kv_pool_bytes_per_gpu": 3e9, "engine.check_invariants": False}


@pytest.mark.parametrize("exact", [False, True])
# 16 of the 48 trajectories (a third of the exact mode's steps) still preempt, refuse and
# drop held KV (18, 5 and 189 of each); the full swarm is the slow variant
@pytest.mark.parametrize("trajectories", [16, pytest.param(48, marks=pytest.mark.slow)])
def test_step_rows_add_up_to_the_summary(exact, trajectories):
    size = {"workload.num_trajectories": trajectories}
    res = run("agent_swarm_pressure.yaml", **PRESSURE, **size, **{"engine.exact": exact})
    s, steps = res.summary, res.steps
    assert s["preemptions"] > 0 and s["rejected"] > 0 and s["held_kv_drops"] > 0
    assert int(steps.preempted.sum()) == s["preemptions"]
    assert int(steps.rejected.sum()) == s["rejected"]
    assert int(steps.held_drops.sum()) == s["held_kv_drops"]
    # the event rows took no time, ran nothing and do not count as steps or decisions
    events = steps[steps.n_steps == 0]
    assert len(events) > 0
    assert (events.duration_s == 0).all() and (events.start_s == events.end_s).all()
    assert (events.batch_tokens == 0).all() and (events.bound == "none").all()
    assert (events.preempted + events.rejected + events.held_drops > 0).all()
    assert int(steps.n_steps.sum()) == s["steps"]
    assert len(steps) - len(events) == s["engine_decisions"]
    assert steps.start_s.is_monotonic_increasing  # each row in time order
    # a zero-time row carries the index of the next step, which starts at or after it
    real = steps[steps.n_steps > 0].set_index("step").start_s
    nxt = events.step[events.step.isin(real.index)]
    assert (real.loc[nxt].to_numpy() >= events.loc[nxt.index].start_s.to_numpy()).all()


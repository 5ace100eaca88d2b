"""The pause decision reads what it needs: the free bytes without a whole metrics
snapshot (``Allocator.free_bytes``, equal to ``metrics().free_bytes`` on every kind), and
the running batch's bytes only for a policy that ``reads_running_batch``."""

from __future__ import annotations

import pytest
from engine_helpers import WORKLOADS
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.memory.registry import make_allocator
from sim.run.runner import build


@settings(max_examples=30, deadline=None)
@given(
    kind=st.sampled_from(["paged", "radix", "paged_hash", "contiguous", "buddy", "static"]),
    ops=st.lists(st.tuples(st.booleans(), st.integers(1, 300)), min_size=1, max_size=25),
)
def test_free_bytes_is_the_metrics_free_bytes(kind, ops):
    options = {"block_size": 16} if kind in ("paged", "radix", "paged_hash") else {}
    if kind == "static":
        options = {"max_tokens": 512}
    a = make_allocator(kind, pool_bytes=4096 * 8.0, kv_bytes_per_token=8.0, **options)
    live: list[int] = []
    assert a.free_bytes() == a.metrics().free_bytes
    for i, (grow, n) in enumerate(ops):
        if grow or not live:
            content = [(f"c{n % 3}", n)] if a.uses_content else None
            if a.allocate(i, n, content=content):
                live.append(i)
        else:
            a.free(live.pop(n % len(live)))
        assert a.free_bytes() == a.metrics().free_bytes


def _facts(policy: str):
    """Every pause's facts in a small agent run under ``policy``."""
    sim = build(
        str(WORKLOADS / "agent_swarm.yaml"),
        **{"pause_policy.kind": policy, "workload.num_trajectories": 6},
        **{"workload.turns": {"kind": "uniform", "low": 2, "high": 4}},
    )
    decider, seen = sim.node.pauses.decider, []
    real = decider.facts

    def facts(req, tokens, kv, sched, *rest):
        f = real(req, tokens, kv, sched, *rest)
        others = sum(r.num_computed for r in sched.running if r is not req)
        seen.append((f.running_batch_bytes, others * decider.table_bpt))
        return f

    decider.facts = facts
    sim.run()
    return seen


@pytest.mark.parametrize("policy", ["min_waste", "hold"])
def test_running_batch_bytes_only_for_a_policy_that_reads_them(policy):
    seen = _facts(policy)
    assert any(want > 0 for _, want in seen)  # pauses came while others ran
    if policy == "min_waste":
        assert all(got == want for got, want in seen)
    else:
        assert all(got == 0.0 for got, _ in seen)


def test_a_policy_that_does_not_say_gets_the_running_batch(monkeypatch):
    """The flag defaults to True: a plug-in policy written before it (here ``hold`` without
    its own declaration) still gets the real figure."""
    from sim.policy.base import PausePolicy
    from sim.policy.fixed import Hold

    assert PausePolicy.reads_running_batch is True
    monkeypatch.delattr(Hold, "reads_running_batch")
    assert Hold.reads_running_batch is True
    seen = _facts("hold")
    assert any(want > 0 for _, want in seen)
    assert all(got == want for got, want in seen)

"""The pause decision reads what it needs: the free bytes without a whole metrics
snapshot (``Allocator.free_bytes``, equal to ``metrics().free_bytes`` on every kind), and
the running batch's bytes only for a policy that ``reads_running_batch``."""

from __future__ import annotations

import math

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


def test_hybrid_running_batch_counts_a_prefill_chunk_by_its_step():
    """On a sliding-window model a running request whose last step was a prefill chunk
    ``[c, e)`` holds, per sliding layer, every block from the one holding token
    ``max(0, c - w + 1)`` to token ``e - 1`` (vLLM V1 allocates the chunk's blocks and
    frees only those wholly before the window of token ``c``), not the decode rule of its
    ``e`` tokens; the pause decision's running-batch bytes (``min_waste`` reads them) say so.
    The expected figure is written from that rule and the model's group sizes."""
    from sim.profiles import load_model
    from sim.sizing.group_demand import kv_groups

    sim = build(
        str(WORKLOADS / "agent_swarm.yaml"),
        **{"pause_policy.kind": "min_waste", "workload.num_trajectories": 24},
        **{"model.profile": "gemma-3-27b", "scheduler.long_prefill_token_threshold": 128},
        **{"workload.turns": {"kind": "uniform", "low": 2, "high": 4}},
    )
    groups = kv_groups(load_model("gemma-3-27b"), tp=1)  # agent_swarm.yaml: tp 1, one GPU
    assert groups.hybrid and all(g.kind == "sliding_window" for g in groups.side)
    bs = sim.node.kv.block_size
    last: dict[int, tuple[int, int]] = {}  # req_id -> (tokens computed before, scheduled)
    sched = sim.node.sched
    real_schedule = sched.schedule

    def schedule():
        plan = real_schedule()
        for r, n in plan.scheduled:
            last[r.req_id] = (r.num_computed, n)
        return plan

    sched.schedule = schedule
    decider, seen = sim.node.pauses.decider, []
    real = decider.facts

    def held(r) -> float:
        before, n = last[r.req_id]
        end = before + n
        side = 0.0
        for g in groups.side:
            if n > 1 or end < r.prompt_tokens + (r.num_output > 0):  # a prefill chunk
                first = max(0, before - g.window_tokens + 1)
            else:  # a decode: the window of its last token
                first = max(0, end - 1 - g.window_tokens + 1)
            blocks = -(-end // bs) - first // bs
            side += blocks * bs * g.bytes_per_token
        return r.num_computed * groups.table_bytes_per_token + side

    def facts(req, tokens, kv, sched_, *rest):
        f = real(req, tokens, kv, sched_, *rest)
        others = [r for r in sched_.running if r is not req]
        chunks = sum(1 for r in others if last[r.req_id][1] > 1)
        seen.append((f.running_batch_bytes, sum(held(r) for r in others), chunks))
        return f

    decider.facts = facts
    sim.run()
    assert any(c for _, _, c in seen), "no pause came while a prefill chunk ran"
    for got, want, _ in seen:
        assert math.isclose(got, want, rel_tol=1e-12), (got, want)

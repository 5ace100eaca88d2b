"""Node behaviour: determinism, the livelock guard, rejections, forks, pauses, ids."""

from __future__ import annotations

import pytest
from engine_helpers import assert_same_frame, assert_same_summary, flat, run
from test_modes import AGENTS

from sim.engine import EngineStuckError
from sim.run import build
from sim.sched import BatchPlan, Request, Scheduler, VllmV1Config

SMALL = {**AGENTS, "workload.num_trajectories": 10, "hardware.kv_pool_bytes_per_gpu": 0.6e9}


def test_same_seed_same_results_other_seed_other_results():
    a = run("agent_swarm.yaml", **SMALL)
    b = run("agent_swarm.yaml", **SMALL)
    assert_same_summary(a.summary, b.summary, rel=0.0)
    assert_same_frame(a.requests, b.requests, rel=0.0)
    assert_same_frame(a.memory, b.memory, rel=0.0)
    c = run("agent_swarm.yaml", **SMALL, seed=8)
    assert flat(c.summary)["ttft_s.mean"] != flat(a.summary)["ttft_s.mean"]


class _StuckScheduler(Scheduler):
    """Holds work but never schedules it (what a scheduler bug would look like)."""

    name = "stuck"

    def add(self, req):
        self.waiting.append(req)
        return True

    def cancel(self, req):
        return False

    def schedule(self):
        return BatchPlan()

    def commit(self, plan, steps=1):
        raise AssertionError("never called: nothing is scheduled")

    def prefill_chunks(self, cached_tokens, new_tokens):
        return [new_tokens]


SCENARIO = {
    "schema_version": 1,
    "model": "llama-3-8b",
    "hardware": {"accelerator": "h100-sxm-80gb", "kv_pool_bytes_per_gpu": 1 << 24},
    "workload": {"kind": "requests", "requests": [{"prompt_tokens": 1, "output_tokens": 1}]},
}


def _node(make_scheduler=None):
    """A node over a real (but idle) built simulation, with its scheduler swapped."""
    sim = build(SCENARIO)
    if make_scheduler is not None:
        sim.node.sched = make_scheduler(sim.kv)
        sim.pauses.sched = sim.node.sched
    return sim.env, sim.node, sim.kv


def test_livelock_guard_names_the_stuck_requests():
    env, node, _ = _node(lambda kv: _StuckScheduler(VllmV1Config(), kv))
    node.submit(Request(7, "s7", 10, 2))
    with pytest.raises(EngineStuckError, match=r"empty batch with runnable work.*#7"):
        env.run(until=node.process)


def test_engine_stops_when_the_workload_has_ended_and_queues_are_empty():
    env, node, kv = _node()
    done = []
    req = Request(100, "a", 100, 4, on_done=done.append)
    node.submit(req)
    node.workload_finished()
    env.run(until=node.process)
    assert done == [req] and req.finish_s == node.end_s > 0
    assert kv.num_sequences == 0  # the last turn's sequence is released


def test_requests_that_can_never_fit_are_rejected_not_stuck():
    big = [
        {"count": 2, "at_s": 0.0, "prompt_tokens": 30000, "output_tokens": 4},
        {"count": 1, "at_s": 0.1, "prompt_tokens": 100, "output_tokens": 4},
    ]
    res = run(
        "seed_chunked_prefill.yaml",
        **{"workload.requests": big, "hardware.kv_pool_bytes_per_gpu": 8e9},
    )
    s = res.summary
    assert s["rejected"] == 2 and s["requests_completed"] == 1
    assert list(res.requests.status) == ["rejected", "rejected", "finished"]


def test_paged_forks_copy_nothing_contiguous_forks_deep_copy():
    fork = {
        **SMALL,
        "workload.fork.probability": 1.0,
        "workload.num_trajectories": 3,
        "hardware.kv_pool_bytes_per_gpu": 4e9,
    }
    paged = run("agent_swarm.yaml", **fork, **{"allocator.kind": "paged"}).summary
    contiguous = run("agent_swarm.yaml", **fork, **{"allocator.kind": "contiguous"})
    traj = contiguous.trajectories
    assert (traj.branches > 0).all()
    assert paged["bytes_copied"] == paged["cow_copies"] * 16 * paged["kv_bytes_per_token"]
    assert contiguous.summary["bytes_copied"] > paged["bytes_copied"]


def test_hold_keeps_kv_over_pauses_and_recompute_does_not():
    roomy = {**SMALL, "hardware.kv_pool_bytes_per_gpu": 4e9}
    hold = run("agent_swarm.yaml", **roomy)
    drop = run("agent_swarm.yaml", **roomy, **{"pause_policy.kind": "recompute"})
    assert hold.summary["hold_gb_s"] > 0 and drop.summary["hold_gb_s"] == 0
    assert hold.summary["paused_kv_bytes_mean"] > 0 == drop.summary["paused_kv_bytes_mean"]
    # held turns start computed up to what they hold; dropped ones look the prefix up again
    assert hold.requests.held_tokens.sum() > 0 == drop.requests.held_tokens.sum()
    assert drop.summary["prefix_hit_rate"] > hold.summary["prefix_hit_rate"]
    assert (hold.trajectories.hold_byte_s > 0).any()
    assert hold.summary["hold_gb_s"] == pytest.approx(hold.trajectories.hold_byte_s.sum() / 1e9)


def test_memory_records_are_consistent():
    res = run("agent_swarm.yaml", **SMALL)
    mem = res.memory
    assert (mem.t_s.diff().dropna() >= 0).all()
    assert (mem.useful_bytes <= mem.allocated_bytes + 1e-6).all()
    total = mem.allocated_bytes + mem.free_bytes + mem.cached_bytes
    assert (total <= res.summary["kv_pool_bytes"] + 1e-3).all()
    assert res.summary["peak_allocated_bytes"] >= mem.allocated_bytes.max()
    assert 0 < res.summary["eta_alloc_mean"] <= 1

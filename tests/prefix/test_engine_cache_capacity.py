"""The engine's prefix caches (``radix``, ``paged_hash``) never hold more than the KV
pool: in every memory sample of a run under pressure, blocks allocated plus dormant
cached blocks fit the pool, and the cache did evict (so the bound was binding)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.run import run_scenario

SCENARIO = Path(__file__).resolve().parents[2] / "workloads/agent_swarm_pressure.yaml"


@pytest.mark.parametrize("kind", ["radix", "paged_hash"])
def test_cached_plus_allocated_never_exceed_the_pool(kind):
    r = run_scenario(
        str(SCENARIO),
        **{
            "allocator.kind": kind,
            "hardware.kv_pool_bytes_per_gpu": 1.5e9,  # ~11k tokens: the cache must evict
            "workload.num_trajectories": 8,
            "workload.arrival.concurrency": 4,
            "workload.fork": None,
            "engine.check_invariants": True,
        },
    )
    pool = r.summary["kv_pool_bytes"]
    mem = r.memory
    assert len(mem) > 10 and mem.cached_bytes.max() > 0
    held = mem.allocated_bytes + mem.cached_bytes
    assert (held <= pool * (1 + 1e-12)).all(), float(held.max() - pool)
    assert r.summary["prefix_evicted_blocks"] > 0

"""The shipped dense-vs-hybrid scenario (issue 27 item 7) at reduced size: one file, two
runs that differ only in ``model.profile``, the comparison ``kvsim compare`` reads."""

from __future__ import annotations

from pathlib import Path

from sim.run import run_scenario

SCENARIO = Path(__file__).resolve().parents[2] / "workloads" / "dense_vs_hybrid_h200.yaml"
SMALL = {"workload.num_trajectories": 4, "workload.arrival.concurrency": 4}


def run(profile: str) -> dict:
    return run_scenario(str(SCENARIO), **SMALL, **{"model.profile": profile}).summary


def test_the_same_swarm_runs_on_the_dense_and_the_hybrid_model():
    dense, hybrid = run("llama-3.1-70b"), run("qwen3-next-80b-a3b")
    assert (dense["model"], hybrid["model"]) == ("llama-3.1-70b", "qwen3-next-80b-a3b")
    for s in (dense, hybrid):
        assert s["trajectories_completed"] == 4 and s["rejected"] == 0 and not s["warnings"]
    # F1: 2 x 80 layers x 8 KV heads x 128 x 2 B; the hybrid's 12 full layers: 2 x 12 x 2 x 256 x 2 B
    assert dense["kv_bytes_per_token"] == 327_680
    assert hybrid["kv_bytes_per_token"] == 24_576
    # the same workload (same seed, same requests): only the model differs
    assert dense["requests_submitted"] == hybrid["requests_submitted"]
    assert dense["output_tokens"] == hybrid["output_tokens"]
    # FP8 weights: both fit one H200 with a KV pool left (F34)
    assert dense["kv_pool_bytes"] > 0 and hybrid["kv_pool_bytes"] > 0

"""``prompt_reuse_rate``: the headline reuse figure counts every prompt token not
computed (prefix-cache hits and a held sequence's own KV); ``prefix_hit_rate`` stays
vLLM's cache-lookup rate; ``kv_reuse_rate`` is the older name of the headline."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.report.text import summary_rows
from sim.run import run_scenario

AGENTS = {
    "model": "llama-3.1-8b",
    "seed": 3,
    "hardware": {"accelerator": "h100-sxm-80gb", "kv_pool_bytes_per_gpu": 4e9},
    "workload": {
        "kind": "agent", "num_trajectories": 6, "arrival": {"kind": "closed_loop", "concurrency": 3},
        "turns": 4, "system_prompt_tokens": 256, "tool_tokens": 0, "task_tokens": 200,
        "output_tokens": 40, "observation_tokens": 300, "pause_s": 0.5,
    },
}  # fmt: skip


def _rates(r):
    req = r.requests[r.requests.admitted_s.notna()]
    reused = float((req.hit_tokens + req.held_tokens).sum())
    return reused / float(req.prompt_tokens.sum()), req.hit_tokens.sum() / r.requests.lookup_tokens.sum()


@pytest.mark.parametrize("kind", ["paged", "radix"])
def test_reuse_counts_hits_and_held_kv_the_lookup_rate_only_hits(kind):
    r = run_scenario({**AGENTS, "allocator": {"kind": kind, "block_size": 16},
                      "pause_policy": {"kind": "hold"}})  # fmt: skip
    s = r.summary
    reuse, lookup = _rates(r)
    assert s["prompt_reuse_rate"] == pytest.approx(reuse, rel=1e-12)
    assert s["kv_reuse_rate"] == s["prompt_reuse_rate"]  # the older name
    assert r.requests.held_tokens.sum() > 0  # the paused agents kept their KV
    # held KV is reuse the lookup rate never sees: with no cache it reads 0
    if kind == "paged":
        assert s["prefix_hit_rate"] == 0 and s["prompt_reuse_rate"] > 0.5
    else:
        assert s["prefix_hit_rate"] == pytest.approx(lookup, rel=1e-12)
        assert s["prompt_reuse_rate"] > 0.5


def test_the_run_table_leads_with_the_reuse_rate_and_reads_old_folders():
    rows = [r[0] for r in summary_rows({"prompt_reuse_rate": 0.9, "prefix_hit_rate": 0.2})]
    i = rows.index("prompt reuse rate (cache hits + held KV)")
    assert rows[i + 1] == "prefix hit rate"
    old = dict((r[0], r[1]) for r in summary_rows({"kv_reuse_rate": 0.5}))
    assert old["prompt reuse rate (cache hits + held KV)"] == "50.0"


def test_a_preempted_request_s_lookups_again_are_counted_apart_as_vllm_does():
    """Before: every admission added to ``lookup_tokens`` / ``hit_tokens``, so a request
    preempted after decoding looked up its prompt plus output again and re-hit its own
    cached blocks: ``hit_tokens`` exceeded ``prompt_tokens`` and ``prompt_reuse_rate`` went
    above 1 (tree_search_h100 at 8 trajectories on a 4 GB pool: 1.000186). vLLM's
    ``PrefixCacheStats.record`` counts a lookup of a request with ``num_preemptions > 0``
    in ``preempted_queries`` / ``preempted_hits``, apart from the hit rate. Here: the
    regress case ``sched-agents-16-pressure`` (13 preemptions, radix)."""
    r = run_scenario(str(Path(__file__).resolve().parents[1] / "golden/scenarios/agent_swarm.yaml"),
                     **{"workload.num_trajectories": 16, "hardware.gpu_memory_utilization": 0.3})  # fmt: skip
    q, s = r.requests, r.summary
    assert s["preemptions"] > 0
    looked = q[q.lookup_tokens > 0]
    # a first admission looks up the prompt alone, and serves at most all but one token
    assert (looked.lookup_tokens == looked.prompt_tokens).all()
    assert (q.hit_tokens <= q.prompt_tokens - 1).all()
    assert 0 <= s["prompt_reuse_rate"] <= 1
    again = q[q.preempted_lookup_tokens > 0]
    assert len(again) > 0 and (again.preemptions > 0).all()
    assert (q.preempted_hit_tokens[q.preemptions == 0] == 0).all()
    # a preempted request looks up its prompt and the output it had: more than the prompt
    assert (again.preempted_lookup_tokens > again.prompt_tokens).all()
    assert s["prefix_hit_rate"] == pytest.approx(q.hit_tokens.sum() / q.lookup_tokens.sum(), rel=1e-12)

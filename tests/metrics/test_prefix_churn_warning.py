"""The prefix cache's lost reuse (``prefix_recomputed_tokens``) and the run warning of a
cache past its capacity (``prefix_churn_warning``), on a Mooncake-format trace small
enough to count by hand: Llama-3.1-8B (131,072 B/token), 16-token blocks, prompts of 1,024
tokens (two 512-token hash blocks: 64 KV blocks), one output token, one request at a time.

Requests (hash ids): R1 [0, 1], R2 [2, 3], R3 [4, 5], R4 [0, 1], R5 [2, 3], 10 s apart.
A pool of 268,435,456 B holds 2,048 tokens: 128 blocks (radix), 127 usable for
paged_hash (vLLM's null block). Each request needs 64 blocks, so from R3 on (radix; R2
on, one block, for paged_hash) each one evicts the least recently used request's blocks:
R4 and R5 find all of R1's and R2's blocks evicted and compute their 1,024 tokens again
(2,048 in all) where an unbounded cache would have served 1,008 of each (at least one
token is computed: 63 blocks). Evicted blocks: radix 64 x 3 = 192 (R3, R4, R5);
paged_hash 1 + 64 x 3 = 193. Both exceed the pool, and 2,048 of the 5,120 prefill tokens
(40 %) were recomputed: the run warns, with the hit rate "up to 40.0%" (no preemption:
2,048 of the 5,120 tokens looked up).
"""

from __future__ import annotations

import json

import pytest

from sim.metrics.summary import PREFIX_RECOMPUTE_WARN_SHARE, prefix_churn_warning
from sim.run import run_scenario

SMALL_POOL = 268_435_456.0  # 2,048 tokens of 131,072 B
TRACE = [[0, 1], [2, 3], [4, 5], [0, 1], [2, 3]]


def scenario(tmp_path, kind: str, pool: float, trace=TRACE) -> dict:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(
        json.dumps({"timestamp": 10_000 * i, "input_length": 1024, "output_length": 1,
                    "hash_ids": ids}) + "\n" for i, ids in enumerate(trace)
    ))  # fmt: skip
    return {
        "schema_version": 1, "name": "churn", "seed": 0, "model": "llama-3.1-8b",
        "hardware": {"accelerator": "h100-sxm-80gb", "tp": 1, "kv_pool_bytes_per_gpu": pool},
        "allocator": {"kind": kind, "block_size": 16}, "scheduler": {"kind": "vllm_v1"},
        "workload": {"kind": "mooncake", "path": str(path)},
        "metrics": {"count_prefix_churn": True},
    }  # fmt: skip


@pytest.mark.parametrize(("kind", "evicted"), [("radix", 192), ("paged_hash", 193)])
def test_reuse_lost_to_evictions_is_counted_and_warned(tmp_path, kind, evicted):
    s = run_scenario(scenario(tmp_path, kind, SMALL_POOL)).summary
    assert s["prefix_evicted_blocks"] == evicted
    assert s["prefix_recomputed_tokens"] == 2 * 1024
    assert s["prefix_hit_rate"] == 0.0
    (w,) = [w for w in s["warnings"] if w.startswith("prefix cache past its capacity")]
    assert f"evicted {evicted} cached blocks" in w
    assert "computed again 2,048 tokens" in w and "(40.0% of the 5,120 prefill tokens)" in w
    assert "up to 40.0%" in w
    # an unbounded cache: 1,008 of R4's and of R5's tokens served, nothing recomputed
    big = run_scenario(scenario(tmp_path, kind, 1e10)).summary
    assert big["prefix_evicted_blocks"] == 0 and big["prefix_recomputed_tokens"] == 0
    assert big["prefix_hit_rate"] == 2 * 1008 / 5120
    assert not big["warnings"]
    assert big["prefix_hit_rate"] <= s["prefix_hit_rate"] + 2048 / 5120  # "up to" bounds it


@pytest.mark.parametrize("kind", ["radix", "paged_hash"])
def test_churn_without_reuse_does_not_warn(tmp_path, kind):
    """Five distinct prompts: the cache evicts 192 (193) blocks, past the pool, but no
    evicted content is asked for again: nothing lost, no warning."""
    trace = [[2 * i, 2 * i + 1] for i in range(5)]
    s = run_scenario(scenario(tmp_path, kind, SMALL_POOL, trace)).summary
    assert s["prefix_evicted_blocks"] > 128
    assert s["prefix_recomputed_tokens"] == 0
    assert not s["warnings"]


def test_the_rule_needs_both_evictions_past_the_pool_and_lost_reuse():
    s = {"prefix_evicted_blocks": 101, "prefix_recomputed_tokens": 11, "prefix_hit_rate": 0.5,
         "prefill_tokens": 1000, "preemptions": 0}
    assert "up to 51.1%" in prefix_churn_warning(s, 100, 16, 1000)  # 1.1 % of the prefill
    # preempted requests recompute without a look-up: no hit-rate bound
    assert "no bound" in prefix_churn_warning({**s, "preemptions": 1}, 100, 16, 1000)
    assert not prefix_churn_warning({**s, "prefix_evicted_blocks": 100}, 100, 16, 1000)
    assert PREFIX_RECOMPUTE_WARN_SHARE == 0.01
    assert not prefix_churn_warning({**s, "prefix_recomputed_tokens": 10}, 100, 16, 1000)
    assert not prefix_churn_warning({**s, "prefix_recomputed_tokens": None}, 100, 16, 1000)
    assert not prefix_churn_warning(s, None, 16, 1000)  # no block pool


def test_a_policy_that_reloads_kv_is_not_counted(tmp_path):
    """Offloaded KV copied back is cached again without a prefill: under such a policy
    the count (and the warning) is left out."""
    sc = scenario(tmp_path, "radix", SMALL_POOL)
    sc["hardware"]["host_kv_pool_bytes"] = 1e10
    s = run_scenario({**sc, "pause_policy": {"kind": "offload_host"}}).summary
    assert s["prefix_evicted_blocks"] == 192
    assert "prefix_recomputed_tokens" not in s
    assert s["warnings"] == [
        "metrics.count_prefix_churn: not counted: pause policy 'offload_host' reloads KV "
        "(only hold and recompute are counted)"
    ]


def test_the_count_is_off_unless_asked(tmp_path):
    """Counting turns the index's lazy fills off (a slower loop), so a run counts only
    when ``metrics.count_prefix_churn`` asks: the same churning run says nothing."""
    sc = scenario(tmp_path, "radix", SMALL_POOL)
    s = run_scenario({**sc, "metrics": {}}).summary
    assert s["prefix_evicted_blocks"] == 192
    assert "prefix_recomputed_tokens" not in s
    assert not s["warnings"]


def test_a_recompute_that_evicts_on_purpose_is_not_counted(tmp_path):
    """``evict_from_prefix_cache`` removes a paused context's blocks on purpose: that is
    not churn from the pool's size, so it is not counted (a review found it warned)."""
    sc = scenario(tmp_path, "radix", SMALL_POOL)
    pol = {"kind": "recompute", "evict_from_prefix_cache": True}
    s = run_scenario({**sc, "pause_policy": pol}).summary
    assert "prefix_recomputed_tokens" not in s
    assert s["warnings"] == [
        "metrics.count_prefix_churn: not counted: pause_policy.evict_from_prefix_cache "
        "evicts on purpose"
    ]

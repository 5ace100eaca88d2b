"""Issue 25: a run must equal its steps. ``accuracy.not_measured`` (the share of step time a
calibration does not measure) sums every step's own attention terms (the steps table's
``attention_max_s``, sim.cost.accuracy.unmeasured_shares), so it is the same whether the
engine coalesced steps into runs or stepped one by one (``engine.exact``), on one node and
in clusters (disaggregated, data-parallel lockstep)."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
from engine_helpers import run

from sim.cost.accuracy import unmeasured_shares
from sim.run import run_scenario

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
from test_data_parallel import sc as dp_scenario  # noqa: E402

H100_VIDUR = {"hardware.accelerator": "h100-sxm-80gb", "cost.calibration": "h100-sxm-80gb-vidur"}


def _both(name, **overrides):
    fast = run(name, **overrides, **{"engine.exact": False})
    exact = run(name, **overrides, **{"engine.exact": True})
    return fast, exact


def _assert_same_shares(fast, exact) -> dict:
    a, b = fast.summary["accuracy"]["not_measured"], exact.summary["accuracy"]["not_measured"]
    assert a.keys() == b.keys() and "attention" in a
    for key in a:
        assert a[key] == pytest.approx(b[key], rel=1e-9, abs=1e-15), key
    assert fast.steps.attention_max_s.sum() == pytest.approx(exact.steps.attention_max_s.sum(), rel=1e-9)
    # the fast path coalesced steps (else the comparison shows nothing)
    assert (fast.steps.n_steps > 1).any() and (exact.steps.n_steps <= 1).all()
    return a


def _old_estimate(steps) -> float:
    """The estimate before issue 25 (a steps table without ``attention_max_s``)."""
    return unmeasured_shares(steps.drop(columns="attention_max_s"), ("attention",))["attention"]


def test_chat_runs_that_open_with_a_prompt_chunk_keep_their_share():
    """Chunked prompts riding with decodes (A100 Vidur calibration): rows of several steps
    whose first step computes a prompt chunk, priced each, then decode. Charging the first
    step's attention to every step of such a row overstated it; a decode run's first step's
    to every step understated it."""
    fast, exact = _both("chat_azure.yaml", **{"workload.num_requests": 60})
    shares = _assert_same_shares(fast, exact)
    mixed = fast.steps[(fast.steps.n_steps > 1) & (fast.steps.prefill_tokens > 0)]
    assert len(mixed) > 0
    # exact mode: one row per step, so the old estimate was exact there and is the share
    assert _old_estimate(exact.steps) == pytest.approx(shares["attention"], rel=1e-9)
    # the fast path's rows: the old estimate was off (here low: long decode runs read
    # more KV a step than their first)
    assert abs(_old_estimate(fast.steps) - shares["attention"]) > shares["attention"] * 1e-3


def test_agents_keep_their_share():
    """Coding agents (H100 Vidur calibration, TP 8, long contexts): decode runs read more
    KV a step, and prompts chunk while others decode."""
    fast, exact = _both("coding_agent_swarm.yaml", **{
        "workload.num_trajectories": 6, "workload.arrival.concurrency": 6,
        "workload.turns": {"kind": "uniform", "low": 2, "high": 3},
    })  # fmt: skip
    _assert_same_shares(fast, exact)


def test_a_disaggregated_cluster_keeps_its_share():
    """Prefill and decode instances on the same calibration: the share pools their steps."""
    fast, exact = _both("pd_coding_agents.yaml", **{
        "workload.num_trajectories": 4, "workload.arrival.concurrency": 4,
        "workload.turns": {"kind": "uniform", "low": 2, "high": 3},
        "cluster.transfer.remote_prefill_min_tokens": 0,
    })  # fmt: skip
    _assert_same_shares(fast, exact)


def test_data_parallel_ranks_in_lockstep_keep_their_share():
    """A MoE engine's two ranks step together (group runs of decodes): each rank's row
    holds its own decodes' attention, a token longer a step."""
    runs = []
    for exact in (False, True):
        s = dp_scenario(**{k: v for k, v in H100_VIDUR.items()}, **{"engine.exact": exact})
        runs.append(run_scenario(s))
    _assert_same_shares(*runs)


# -------------------------------------------------------------- a hand-computed run
PROMPT = 1000
#: one request on Llama-3.1-8B, H100, TP 1, roofline: its prompt in one step, then two
#: decode steps; nothing changes the batch, so the fast path takes all three as one row
ONE = {
    "name": "attention_run",
    "seed": 0,
    "model": "llama-3.1-8b",
    "hardware": {"accelerator": "h100-sxm-80gb", "kv_pool_bytes_per_gpu": 4e9},
    "cost": {"step_overhead_s": 0.0, "bw_efficiency": 1.0, "mfu_prefill": 0.6, "mfu_decode": 0.5},
    "allocator": {"kind": "paged", "block_size": 16},
    "scheduler": {"kind": "vllm_v1", "max_num_batched_tokens": 2048},
    "workload": {"kind": "requests", "requests": [
        {"count": 1, "at_s": 0.0, "prompt_tokens": PROMPT, "output_tokens": 3}]},
}  # fmt: skip


def test_a_three_step_run_sums_its_steps_attention():
    """Llama-3.1-8B: 32 layers, 8 KV heads of 128 (bf16), 32 query heads. A token in KV is
    2 x 32 x 8 x 128 x 2 = 131,072 bytes, read at 3.35 TB/s; a (query, key) pair is
    4 x 32 x 4,096 = 524,288 FLOPs, at MFU x 989.4 TFLOP/s. The prompt's step reads its
    1,000 tokens and computes 1,000 x 1,001 / 2 causal pairs at MFU 0.6: the FLOPs are the
    larger (4.42e-4 s against 3.9e-5 s). Then decode steps i = 0, 1 read 1,001 + i tokens
    and compute as many pairs at MFU 0.5: the KV read is the larger. The row's attention is
    the sum of the three; its first step's alone, three times (the estimate before issue
    25), would be 2.5 times as much."""
    r = run_scenario(copy.deepcopy(ONE))
    assert len(r.steps) == 1
    row = r.steps.iloc[0]
    assert (row.n_steps, row.prefill_tokens, row.n_decode) == (3, PROMPT, 0)
    kv_bytes, pair_flops, peak = 131_072, 524_288, 989.4e12
    steps = [(kv_bytes * PROMPT / 3.35e12, pair_flops * (PROMPT * (PROMPT + 1) // 2) / (0.6 * peak))]
    steps += [(kv_bytes * (PROMPT + 1 + i) / 3.35e12, pair_flops * (PROMPT + 1 + i) / (0.5 * peak))
              for i in range(2)]  # fmt: skip
    assert steps[0][1] > steps[0][0] and all(kv > flops for kv, flops in steps[1:])
    expected = sum(max(kv, flops) for kv, flops in steps)
    assert row.attention_max_s == pytest.approx(expected, rel=1e-12)
    # the row's cost terms are its first step's
    assert (row.kv_read_s, row.attention_s) == pytest.approx(steps[0], rel=1e-12)
    assert 3 * steps[0][1] / expected > 2.5

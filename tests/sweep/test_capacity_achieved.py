"""A capacity answer says how many trajectories its runs kept in flight (h105 finding 1),
its gap compares F37's own per-trajectory bytes (1b), and F37 shares the workload's
prefix only when the allocator keeps a prefix cache (1c). Expected values are worked out
by hand from the rules, never copied from the code."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from sim.sweep import answer, find_capacity
from sim.sweep.gap import explain_gap
from sim.sweep.task import active_peak, memory_figures

ROOT = Path(__file__).resolve().parents[2]
HYBRID = str(ROOT / "workloads" / "dense_vs_hybrid_h200.yaml")


def _staggered(n: int, every_s: float, length_s: float) -> pd.DataFrame:
    """n trajectories, one starting every ``every_s`` seconds, each ``length_s`` long."""
    start = [i * every_s for i in range(n)]
    return pd.DataFrame({"start_s": start, "end_s": [s + length_s for s in start]})


def _figures(traj: pd.DataFrame, lo: float, hi: float) -> dict:
    result = SimpleNamespace(summary={}, memory=None, trajectories=traj)
    return memory_figures(result, {"window_s": {"start": lo, "end": hi}, "queue_s": {"p99": None}})


def test_the_peak_in_flight_is_ceil_of_length_over_spacing():
    # starts 1 s apart, 2.5 s long: at t in [2, 2.5) trajectories 0, 1, 2 hold at once
    assert active_peak(_staggered(10, 1.0, 2.5)) == math.ceil(2.5 / 1.0) == 3
    # 2 s long: the one ending at t = 2 is not counted with the one starting then
    assert active_peak(_staggered(10, 1.0, 2.0)) == 2
    # never above ceil(L/s) + 1 whatever the tie rule
    assert active_peak(_staggered(7, 0.3, 1.0)) <= math.ceil(1.0 / 0.3) + 1


def test_the_mean_in_flight_over_a_window_by_hand():
    # starts 1 s apart, 2.5 s long, window [3, 8]: overlaps 0, 0.5, 1.5, 2.5 x 3, 2, 1, 0, 0
    figs = _figures(_staggered(10, 1.0, 2.5), 3.0, 8.0)
    assert figs["trajectories_active_mean"] == pytest.approx((0.5 + 1.5 + 7.5 + 2 + 1) / 5)
    assert figs["trajectories_active_peak"] == 3
    assert figs["trajectory_s_mean_finished"] == pytest.approx(2.5)


def _probe(load: int, figs: dict) -> dict:
    return {"replication": 0, "load": load, "seed": 1, "memory": figs, "error": None}


def test_a_load_that_never_binds_is_flagged_with_how_much_and_why():
    # A closed loop of 40 agents starting 0.5 s apart, 40 trajectories of 5.2 s each, no
    # think time. Agent k starts at 0.5 k; an agent that finishes takes the next
    # trajectory at once, so the starts are 0.5 k (k = 0..23) merged with each of the
    # first 16 starts + 5.2 s (5.2, 5.7, ..., 10.2, then 10.4, 10.7, 10.9, 11.2, 11.4):
    # the 40th starts at 11.5 s, by which agents 0..23 have started; 16 never run.
    first = [0.5 * k for k in range(24)]
    again = [t + 5.2 for t in first[:11] + [5.2, 5.5, 5.7, 6.0, 6.2]]
    traj = pd.DataFrame({"start_s": first + again})
    traj["end_s"] = traj.start_s + 5.2
    assert len(traj) == 40 and traj.start_s.max() == pytest.approx(11.5)
    # Window [0.2 x 11.5, 11.5] = [2.3, 11.5]: every agent started is busy, so k + 1 in
    # flight on [0.5 k, 0.5 k + 0.5): 5 x 0.2 + 0.5 x (6 + ... + 23) = 131.5 over 9.2 s
    figs = _figures(traj, 2.3, 11.5)
    mean_by_hand = (5 * 0.2 + 0.5 * sum(range(6, 24))) / 9.2
    assert figs["trajectories_active_mean"] == pytest.approx(mean_by_hand)
    assert figs["trajectories_active_peak"] == 24  # agents 0..23, all busy at 11.5 s
    assert figs["trajectory_s_mean_finished"] == pytest.approx(5.2)
    probe = {**_probe(40, figs), "window_s": {"start": 2.3, "end": 11.5}}
    got = answer.achieved([SimpleNamespace(at=40)], [probe])
    assert got["mean"] == pytest.approx(mean_by_hand) and got["peak"] == 24
    assert got["share_of_load"] == pytest.approx(mean_by_hand / 40)
    lines = answer.unbound_warning(got, 0.5, lambda load: 40, "workload.num_trajectories", (40, 40))
    assert len(lines) == 1
    line = lines[0]
    assert line.startswith("WARNING: the load setting did not bind: at capacity the runs kept 14.29 ")
    assert "36% of the 40 agents set (peak 24 at once" in line
    assert ("the last of 40 would start 19.5 s in, later than a trajectory lasts (5.2 s mean): "
            "the first agents finish and take the next trajectories, and all 40 had started "
            "by 11.5 s, when 24 agents had (16 never ran)") in line  # fmt: skip
    # a ramp-up within one trajectory: 5.2 s / 40 agents
    assert "--set workload.arrival.stagger_s=0.13 " in line
    assert "--set workload.num_trajectories=120" in line


def test_a_load_that_binds_is_not_flagged():
    # 4 agents, each running 10 back-to-back 3 s trajectories from t = 0: 4 in flight throughout
    start = [3.0 * k for k in range(10)] * 4
    traj = pd.DataFrame({"start_s": start, "end_s": [s + 3.0 for s in start]})
    figs = _figures(traj, 6.0, 27.0)
    assert figs["trajectories_active_mean"] == pytest.approx(4.0)
    assert figs["trajectories_active_peak"] == 4
    got = answer.achieved([SimpleNamespace(at=4)], [_probe(4, figs)])
    assert answer.unbound_warning(got, 0.0, lambda load: 40, "workload.num_trajectories", (4, 40)) == []


def test_a_capacity_answer_carries_what_its_runs_kept_in_flight(tiny):
    res = find_capacity(tiny, ["ttft_p99_s=0.5"], replications=1, executor="inline", max_points=3)
    got = res.capacity["achieved"]
    run = next(p for p in res.points if p["load"] == res.capacity["per_replication"][0])
    assert got["per_replication"][0]["mean"] == run["memory"]["trajectories_active_mean"]
    assert 0 < got["mean"] <= got["peak"] + 1e-9  # a time mean never exceeds the peak
    assert got["peak"] <= run["load"]  # a closed loop never runs more than its agents


# ------------------------------------------------------------------ F37 (1b, 1c)
#: Qwen3-Next-80B-A3B: 12 full-attention layers x 2 (K, V) x 2 KV heads x 256 x 2 B
QWEN_BYTES_PER_TOKEN = 12 * 2 * 2 * 256 * 2  # 24,576
#: its 36 Gated DeltaNet layers' running state, each: 32 heads x 128 x 128 x 2 B (SSM)
#: + (kernel 4 - 1) x (2 x 16 x 128 + 32 x 128) x 2 B (conv)
QWEN_STATE_BYTES = 36 * (32 * 128 * 128 * 2 + 3 * (2 * 16 * 128 + 32 * 128) * 2)  # 39,518,208
#: Llama-3.1-70B: 80 layers x 2 x 8 KV heads x 128 x 2 B
LLAMA_BYTES_PER_TOKEN = 80 * 2 * 8 * 128 * 2  # 327,680


def _estimate(**sets):
    from sim.scenario import load_scenario, resolve
    from sim.sweep.analytic import analytic_estimate

    loaded = load_scenario(HYBRID, sets)
    return analytic_estimate(resolve(loaded), "concurrency", loaded.scenario.seed)


def test_f37_divides_by_the_hybrid_trajectory_with_its_state_and_the_gap_uses_it():
    est = _estimate(**{"model.profile": "qwen3-next-80b-a3b"})
    inp = est["inputs"]
    tokens = round(inp["M_avg_tokens"]) + round(inp["K_avg_tokens"])
    assert QWEN_STATE_BYTES == 39_518_208
    # as a run (and vLLM) charges it: whole blocks of the raised block size, 544 tokens
    # (the attention page, 544 x 2 x 2 x 256 x 2 B = 1,114,112 B a layer, is the smallest
    # multiple of 16 tokens holding a layer's state, 1,097,728 B), and each DeltaNet
    # layer's state padded to that page
    assert QWEN_STATE_BYTES // 36 == 1_097_728 <= 544 * 2 * 2 * 256 * 2 == 1_114_112
    per = math.ceil(tokens / 544) * 544 * QWEN_BYTES_PER_TOKEN + 36 * 1_114_112
    assert inp["kv_bytes_per_trajectory"] == per and inp["shared_prefix_bytes"] == 0
    assert est["value"] == math.floor(0.9 * inp["kv_pool_bytes"] / per)
    # the gap line compares the simulated KV per trajectory with that same figure
    probe = {"replication": 0, "load": 402, "error": None, "reasons": [],
             "memory": {"allocated_bytes_mean": 151.7 * 0.217e9, "trajectories_active_mean": 151.7,
                        "trajectories_active_peak": 253, "kv_pool_bytes": inp["kv_pool_bytes"]}}  # fmt: skip
    search = SimpleNamespace(at=402, beyond=None, fewest=False, integer=True)
    gap = explain_gap(402, est, [search], [probe])
    assert gap["at_capacity"]["kv_bytes_per_trajectory_f37"] == per
    line = next(x for x in gap["explanation"] if x.startswith("KV per active trajectory"))
    assert f"{0.217e9 / per:.2f}x" in line and "0.90x" in line
    assert f"vs {per / 1e9:.2f} GB in F37" in line and "nothing shared" in line
    flight = next(x for x in gap["explanation"] if x.startswith("trajectories in flight"))
    assert f"mean 151.7 over the window, peak 253; {151.7 / est['value']:.2f}x F37's" in flight


def test_f37_stores_the_prefix_per_trajectory_without_a_prefix_cache():
    # allocator paged, no prefix cache: the 2,048 + 1,536 prefix is each trajectory's own
    est = _estimate()
    inp = est["inputs"]
    assert inp["prefix_cache"] is False and inp["workload_prefix_tokens"] == 2048 + 1536
    assert inp["S_shared_tokens"] == 0
    tokens = round(inp["M_avg_tokens"]) + round(inp["K_avg_tokens"])
    want = math.floor(0.9 * inp["kv_pool_bytes"] / (tokens * LLAMA_BYTES_PER_TOKEN))
    assert est["value"] == want == 22  # h105's hand count
    assert inp["kv_bytes_per_trajectory"] == tokens * LLAMA_BYTES_PER_TOKEN
    # the shared form F37 used before would have said 39
    shared = (0.9 * inp["kv_pool_bytes"] - 3584 * LLAMA_BYTES_PER_TOKEN) / (
        (tokens - 3584) * LLAMA_BYTES_PER_TOKEN)  # fmt: skip
    assert math.floor(shared) == 39


def test_f37_shares_the_prefix_once_with_a_prefix_cache():
    est = _estimate(**{"allocator.kind": "radix"})
    inp = est["inputs"]
    assert inp["prefix_cache"] is True and inp["S_shared_tokens"] == 3584
    tokens = round(inp["M_avg_tokens"]) + round(inp["K_avg_tokens"])
    private = (tokens - 3584) * LLAMA_BYTES_PER_TOKEN
    assert inp["kv_bytes_per_trajectory"] == private
    assert inp["shared_prefix_bytes"] == 3584 * LLAMA_BYTES_PER_TOKEN
    free = 0.9 * inp["kv_pool_bytes"] - 3584 * LLAMA_BYTES_PER_TOKEN
    assert est["value"] == math.floor(free / private) == 39


def test_f37_shares_the_prefix_of_a_state_model_only_when_its_states_are_saved():
    """With a prefix cache, a state-space hybrid shares the workload's prefix only under
    ``mamba_cache_mode: all`` (states saved at block ends: vLLM's rule, ``kvsim plan``'s);
    under ``none`` nothing is shared (a review found the estimate ignored the mode)."""
    base = {"model.profile": "nemotron-h-8b", "allocator.kind": "radix",
            "scheduler.max_model_len": 8192}
    none = _estimate(**base, **{"model.mamba_cache_mode": "none"})["inputs"]
    saved = _estimate(**base, **{"model.mamba_cache_mode": "all"})["inputs"]
    assert none["prefix_cache"] and saved["prefix_cache"]
    assert none["S_shared_tokens"] == 0 and none["shared_prefix_bytes"] == 0
    assert saved["S_shared_tokens"] == saved["workload_prefix_tokens"] > 0
    assert saved["shared_prefix_bytes"] > 0

"""Data-parallel ranks of one engine (``cluster.data_parallel``; sim/engine/lockstep.py,
sim/cost/expert_parallel.py) through the real engine: a MoE model's ranks step in
lockstep (the same start and end on every rank, a rank that gets work mid-step starts at
the group's next boundary, dummy batches counted), the step durations are the lockstep
pricer's, vLLM's DP load balancer places the requests, each rank's pool gains its share
of the expert weights, a dense model's ranks step alone, bad sections are one line, and
the same seed gives the same run."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.cost import StepWork
from sim.errors import ConfigError
from sim.metrics.schema import check_summary
from sim.run import run_scenario
from sim.run.runner import build
from sim.scenario import load_scenario
from sim.units import dtype_bytes

#: Qwen3-30B-A3B on RTX PRO 6000s priced from the shipped kernel tables (DP 2 + EP 2)
MOE = {
    "name": "dp_ep",
    "seed": 0,
    "model": "qwen3-30b-a3b",
    "hardware": {"accelerator": "rtx-pro-6000-server-96gb", "reserve_bytes_per_gpu": 4e9},
    "cost": {"calibration": "rtx-pro-6000-server-96gb-llmservingsim"},
    "allocator": {"kind": "paged_hash", "block_size": 16},
    "scheduler": {"kind": "vllm_v1", "max_num_batched_tokens": 2048, "max_num_seqs": 128},
    "engine": {"check_invariants": True},
    "workload": {"kind": "requests", "requests": [
        {"count": 1, "at_s": 0.0, "prompt_tokens": 512, "output_tokens": 40},
        {"count": 1, "at_s": 0.05, "prompt_tokens": 300, "output_tokens": 20},
    ]},
    "cluster": {"nodes": [{"count": 2}], "data_parallel": {"expert_parallel": True}},
}  # fmt: skip


def sc(**changes) -> dict:
    out = copy.deepcopy(MOE)
    for key, value in changes.items():
        node = out
        *path, last = key.split(".")
        for p in path:
            node = node.setdefault(p, {})
        node[last] = value
    return out


@pytest.fixture(scope="module")
def moe_run():
    return run_scenario(sc())


def test_the_ranks_step_together_and_a_late_rank_joins_at_the_boundary(moe_run):
    req, steps = moe_run.requests, moe_run.steps
    assert req.node.tolist() == [0, 1]  # vLLM's balancer: rank 0 busy (1 running): rank 1
    assert (steps.n_steps > 1).any()  # group runs of decode steps (the fast path)
    s0, s1 = steps[steps.node == 0], steps[steps.node == 1]
    # the request of rank 1 arrives at 0.05 s, inside a step of rank 0: it starts at the
    # end of that step, the first group boundary after its arrival (the rank ran dummies)
    inside = s0[(s0.start_s < 0.05) & (s0.end_s > 0.05)]
    assert len(inside) == 1
    first1 = s1.start_s.iloc[0]
    assert first1 == inside.end_s.iloc[0]
    # while both have work every step starts and ends at the same instants on both ranks
    both = s0[s0.start_s >= first1].head(len(s1))
    assert both.start_s.tolist() == s1.start_s.tolist()
    assert both.end_s.tolist() == s1.end_s.tolist()
    # every rank-1 step is a group step: it starts where a rank-0 step starts
    assert set(s1.start_s) <= set(s0.start_s)
    # no step overlaps another on either rank
    for s in (s0, s1):
        assert (s.start_s.iloc[1:].to_numpy() >= s.end_s.iloc[:-1].to_numpy()).all()


def test_the_step_durations_are_the_lockstep_prices():
    """The first step: rank 0 prefills its 512 tokens, rank 1 runs the dummy batch."""
    sim = build(sc())
    pricer = sim.lockstep.pricer
    res = sim.run()
    s0 = res.steps[res.steps.node == 0]
    first = pricer.price([StepWork(prefill_chunks=((512, 0),)), None])
    assert s0.duration_s.iloc[0] == pytest.approx(first.total_s, rel=1e-12)
    assert first.dummy == (False, True) and first.global_tokens == 2 * 512
    # rank 0's own GPU time is less than the step: experts at the global tokens + collectives
    assert first.moe_s > 0 and first.comm_s > 0
    assert first.total_s >= first.rank_gpu_s[0] + first.moe_s + first.comm_s


def test_the_summary_counts_the_group_steps_and_dummies(moe_run):
    s, steps = moe_run.summary, moe_run.steps
    assert check_summary(json.loads(json.dumps(s))) == []
    assert s["dp_ranks"] == 2 and s["expert_parallel"] is True and s["router"] == "vllm_dp"
    _group_counts(steps, s, 2)
    assert 0 < s["lockstep_moe_s"] < s["lockstep_busy_s"]
    assert 0 < s["lockstep_comm_s"] < s["lockstep_busy_s"]
    assert s["lockstep_wait_s"] >= 0 and s["dp_padded_tokens"] > 0
    for n in s["nodes"]:  # the run's figures stay out of the ranks' summaries
        assert "lockstep_steps" not in n and "dp_ranks" not in n


def test_each_rank_holds_half_the_routed_experts():
    """Qwen3-30B-A3B: 48 x 128 x 3 x 2048 x 768 expert parameters (bf16); a rank of two
    holds half of them, so its weights are that much lighter and its pool that much
    larger than one engine's (F34)."""
    sim = build(sc())
    single = build({k: v for k, v in sc().items() if k != "cluster"})
    experts = 48 * 128 * 3 * 2048 * 768
    assert single.resolved.model.routed_expert_params == experts
    half = experts * dtype_bytes("bf16") / 2
    for p in sim.parts:
        assert p.resolved.scenario.hardware.expert_shards == 2
        assert p.resolved.pool_bytes - single.resolved.pool_bytes == pytest.approx(half, rel=1e-12)
        assert single.resolved.weights_bytes_per_gpu - p.resolved.weights_bytes_per_gpu == \
            pytest.approx(half, rel=1e-12)  # fmt: skip


def test_a_dense_models_ranks_step_alone():
    res = run_scenario(sc(model="llama-3.1-8b"))
    s = res.summary
    assert s["dp_ranks"] == 2 and s["lockstep_steps"] is None and s["dummy_rank_steps"] is None
    s1 = res.steps[res.steps.node == 1]
    assert s1.start_s.iloc[0] == 0.05  # no boundary to wait for: it starts on arrival
    # rank 0 serves its request exactly as one engine given that request alone
    first = MOE["workload"]["requests"][:1]
    one = sc(model="llama-3.1-8b", workload={"kind": "requests", "requests": first})
    alone = run_scenario({k: v for k, v in one.items() if k != "cluster"}).requests
    mine = res.requests[res.requests.node == 0]
    for col in ("first_token_s", "finish_s"):
        assert mine[col].tolist() == alone[col].tolist()


def test_tp_sharded_experts_give_the_expert_parallel_timeline(moe_run):
    res = run_scenario(sc(**{"cluster.data_parallel": {"expert_parallel": False}}))
    assert res.summary["expert_parallel"] is False
    assert res.steps.end_s.tolist() == moe_run.steps.end_s.tolist()


@pytest.mark.parametrize("cluster,words", [
    ({"nodes": [{"count": 1}, {"count": 1}], "data_parallel": {}}, "one nodes group"),
    ({"nodes": [{"count": 2, "hardware": {"tp": 2}}], "data_parallel": {}}, "identical"),
    ({"nodes": [{"count": 2}], "data_parallel": {"ep": True}}, "ep"),
])  # fmt: skip
def test_bad_data_parallel_sections_are_one_line(cluster, words):
    with pytest.raises(ConfigError) as exc:
        load_scenario(sc(cluster=cluster))
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_data_parallel_true_is_the_defaults_and_false_is_none():
    on = load_scenario(sc(cluster={"nodes": [{"count": 2}], "data_parallel": True})).scenario.cluster
    assert on.data_parallel.expert_parallel and on.data_parallel.cudagraph_max_tokens == 512
    assert on.router.kind == "vllm_dp"
    off = load_scenario(sc(cluster={"nodes": [{"count": 2}], "data_parallel": False})).scenario.cluster
    assert off.data_parallel is None and off.router.kind == "round_robin"
    with pytest.raises(ConfigError) as exc:
        load_scenario(sc(cluster={"nodes": [{"count": 2}], "data_parallel": 3}))
    assert "true, false or a mapping" in str(exc.value) and "\n" not in str(exc.value)


def test_a_named_router_is_kept():
    loaded = load_scenario(sc(cluster={"nodes": [{"count": 2}], "data_parallel": {},
                                       "router": {"kind": "round_robin"}}))  # fmt: skip
    assert loaded.scenario.cluster.router.kind == "round_robin"
    assert load_scenario(sc()).scenario.cluster.router.kind == "vllm_dp"


def test_same_seed_same_run(moe_run):
    again = run_scenario(sc())
    a, b = dict(moe_run.summary), dict(again.summary)
    for k in ("wall_time_s",):
        a.pop(k), b.pop(k)
    assert a == b
    assert again.steps.equals(moe_run.steps)


# ------------------------------------------------------------------ group invariants
def _group_counts(steps, s: dict, ranks: int) -> None:
    """The summary's group figures from the steps table (a row: one step or a run; rows
    of no step, a refusal at submission, left out)."""
    steps = steps[steps.n_steps > 0]
    group = steps.groupby("start_s").agg(k=("n_steps", "first"), ranks=("node", "nunique"),
                                          d=("duration_s", "first"))  # fmt: skip
    assert s["lockstep_steps"] == int(group.k.sum())
    assert s["dummy_rank_steps"] == int(((ranks - group.ranks) * group.k).sum())
    assert s["lockstep_busy_s"] == pytest.approx(group.d.sum(), rel=1e-12)


def _group_invariants(steps) -> None:
    """Every step of every rank is a group step: steps (or runs) that start together end
    together after as many steps, and no step starts while another rank's is in progress."""
    steps = steps[steps.n_steps > 0]
    by_start = steps.groupby("start_s").agg(ends=("end_s", "nunique"), k=("n_steps", "nunique"))
    assert (by_start.ends == 1).all() and (by_start.k == 1).all()
    spans = steps.groupby("start_s").end_s.first().sort_index()
    starts, ends = spans.index.to_numpy(), spans.to_numpy()
    assert (starts[1:] >= ends[:-1]).all()  # group steps never overlap


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    arrivals=st.lists(st.floats(0.0, 0.6, allow_nan=False), min_size=1, max_size=7),
    ranks=st.integers(2, 3),
    horizon=st.sampled_from([None, 0.4]),
)
def test_any_arrivals_keep_the_group_in_lockstep(arrivals, ranks, horizon):
    reqs = [{"count": 1, "at_s": round(t, 3), "prompt_tokens": 64 + 97 * i, "output_tokens": 3 + 5 * i}
            for i, t in enumerate(sorted(arrivals))]  # fmt: skip
    data = sc(workload={"kind": "requests", "requests": reqs},
              cluster={"nodes": [{"count": ranks}], "data_parallel": {}})  # fmt: skip
    if horizon is not None:
        data["duration_s"] = horizon
    res = run_scenario(data)
    _group_invariants(res.steps)
    s = res.summary
    _group_counts(res.steps, s, ranks)
    done = res.requests[res.requests.finish_s.notna()]
    if horizon is None:
        assert len(done) == len(reqs)  # every request ends
    assert (res.steps.start_s < (horizon or float("inf"))).all()


def test_deepseek_v3_fits_an_h200_only_as_one_of_eight_expert_parallel_ranks():
    """671 GB of FP8 weights: one H200 cannot hold them, a rank of eight holds the dense
    part and 1/8 of the experts (~99 GB); a one-rank engine is refused in one line that
    names the way out. No kernel tables: each rank's roofline price plus the collectives."""
    ds = {
        "name": "ds", "seed": 0, "model": "deepseek-v3", "hardware": {"accelerator": "h200-141gb"},
        "scheduler": {"kind": "vllm_v1", "max_num_batched_tokens": 8192},
        "workload": {"kind": "requests", "requests": [
            {"count": 12, "at_s": 0.0, "interval_s": 0.05, "prompt_tokens": 3000, "output_tokens": 20}]},
        "cluster": {"nodes": [{"count": 8}], "data_parallel": {}},
    }  # fmt: skip
    res = run_scenario(ds)
    s = res.summary
    assert s["dp_ranks"] == 8 and s["lockstep_moe_s"] is None and s["lockstep_comm_s"] > 0
    assert sorted(res.requests.node.unique().tolist()) == list(range(8))
    _group_invariants(res.steps)
    from sim.report.text import summary_rows

    rows = {label: value for label, value, _ in summary_rows(s)}
    assert rows["experts share of busy"] == "-"  # inside each rank's price: not apart
    one = copy.deepcopy(ds)
    one["cluster"]["nodes"][0]["count"] = 1
    with pytest.raises(ConfigError, match="spread the routed experts over data-parallel ranks"):
        build(one)


def test_the_run_table_shows_the_lockstep_rows(moe_run):
    from sim.report.text import summary_rows

    rows = {label: (value, unit) for label, value, unit in summary_rows(moe_run.summary)}
    s = moe_run.summary
    steps = rows["lockstep steps / dummy rank-steps"][0]
    assert steps == f"{s['lockstep_steps']:,d} / {s['dummy_rank_steps']:,d}"
    assert rows["busy / experts / comm / rank wait"][0].startswith(f"{s['lockstep_busy_s']:,.2f} / ")
    dense = run_scenario(sc(model="llama-3.1-8b")).summary
    assert not [r for r in summary_rows(dense) if r[0].startswith("lockstep")]


@pytest.mark.parametrize("prompt", [137, 211, 285])
def test_a_late_rank_starts_exactly_at_the_boundary_whatever_the_rounding(prompt):
    """An arrival early in a step: waiting ``busy_until - now`` seconds could land one
    rounding step after the boundary and cost a whole step (found in review); the rank
    waits on the step's end event instead."""
    reqs = [{"count": 1, "at_s": 0.0, "prompt_tokens": prompt, "output_tokens": 30},
            {"count": 1, "at_s": 0.0003542989342488045, "prompt_tokens": 64, "output_tokens": 5}]  # fmt: skip
    res = run_scenario(sc(workload={"kind": "requests", "requests": reqs}))
    s0, s1 = (res.steps[res.steps.node == j] for j in (0, 1))
    first = s0.end_s.iloc[0]
    assert s0.start_s.iloc[0] == 0.0 and first > 0.0003542989342488045
    assert s1.start_s.iloc[0] == first
    _group_invariants(res.steps)


def test_expert_shards_belongs_to_data_parallel_ranks():
    alone = {k: v for k, v in sc(**{"hardware.expert_shards": 2}).items() if k != "cluster"}
    with pytest.raises(ConfigError) as exc:
        build(alone)
    assert exc.value.field == "hardware.expert_shards" and "cluster.data_parallel" in str(exc.value)
    with pytest.raises(ConfigError, match="expert_shards is set for each rank"):
        build(sc(**{"hardware.expert_shards": 2}))  # not by hand on the ranks either


def test_more_gpus_than_experts_is_refused():
    with pytest.raises(ConfigError) as exc:
        build(sc(cluster={"nodes": [{"count": 129}], "data_parallel": {}}))
    assert exc.value.field == "cluster.nodes.0.count"
    assert "129 data-parallel ranks x tp 1 = 129 GPUs for 128 routed experts" in str(exc.value)


def test_deepseek_collectives_run_on_its_moe_layers_only():
    from sim.profiles import load_model

    ds = load_model("deepseek-v3")
    assert ds.moe_layers == 58 and load_model("qwen3-30b-a3b").moe_layers == 48
    assert load_model("llama-3.1-8b").moe_layers == 0


# ------------------------------------------------------------ group runs = stepping
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    arrivals=st.lists(st.floats(0.0, 1.5, allow_nan=False), min_size=1, max_size=8),
    ranks=st.integers(2, 3),
    pricing=st.sampled_from(["kernel_tables", "roofline_max"]),
    horizon=st.sampled_from([None, 1.2]),
    small_pool=st.booleans(),
)
def test_group_runs_give_the_stepping_results(arrivals, ranks, pricing, horizon, small_pool):
    """The fast path (group runs of decode steps, cut by any rank's post) against one step
    at a time (engine.exact): the same requests' times and group figures, bit for bit."""
    reqs = [{"count": 1, "at_s": round(t, 3), "prompt_tokens": 100 + 131 * i, "output_tokens": 9 + 23 * i}
            for i, t in enumerate(sorted(arrivals))]  # fmt: skip
    data = sc(workload={"kind": "requests", "requests": reqs},
              cluster={"nodes": [{"count": ranks}], "data_parallel": {}},
              **{"cost.step_pricing": pricing})  # fmt: skip
    if small_pool:  # memory ends runs early (and may preempt)
        data["hardware"]["kv_pool_bytes_per_gpu"] = 64 * 16 * 98304
    if horizon is not None:
        data["duration_s"] = horizon
    fast = run_scenario(data)
    data["engine"] = {"exact": True, "check_invariants": True}
    step = run_scenario(data)
    a, b = fast.requests, step.requests
    assert a.node.tolist() == b.node.tolist()
    for col in ("arrival_s", "admitted_s", "first_token_s", "finish_s"):
        assert a[col].fillna(-1.0).tolist() == b[col].fillna(-1.0).tolist(), col
    fs, ss = fast.summary, step.summary
    for k in ("lockstep_steps", "dummy_rank_steps", "dp_padded_tokens", "preemptions",
              "lockstep_busy_s", "lockstep_comm_s", "lockstep_wait_s", "lockstep_moe_s",
              "sim_time_s", "ttft_s", "e2e_s"):  # fmt: skip
        assert fs[k] == ss[k], k
    _group_invariants(fast.steps)
    _group_counts(fast.steps, fs, ranks)


@pytest.mark.parametrize("n_agents,ranks,pause_s", [(5, 2, 0.0), (5, 3, 0.0), (3, 2, 0.01)])
def test_group_runs_with_agents_posting_at_step_ends(n_agents, ranks, pause_s):
    """Agents whose next call comes the instant the last one finishes: a rank's commit
    posts to another rank that has already joined the next step (found when building the
    group runs: that step must stay a single one, as stepping lets the post act at its
    end; (5, 2, 0) fails without it)."""
    data = sc(workload={"kind": "agent", "num_trajectories": n_agents,
                        "turns": {"kind": "constant", "value": 6},
                        "output_tokens": {"kind": "uniform", "low": 5, "high": 20},
                        "observation_tokens": {"kind": "constant", "value": 64},
                        "pause_s": {"kind": "constant", "value": pause_s},
                        "arrival": {"kind": "closed_loop", "concurrency": n_agents}},
              cluster={"nodes": [{"count": ranks}], "data_parallel": {}}, seed=2)  # fmt: skip
    data["engine"] = {}
    fast = run_scenario(data)
    data["engine"] = {"exact": True}
    step = run_scenario(data)
    assert fast.summary["sim_time_s"] == step.summary["sim_time_s"]
    for col in ("admitted_s", "first_token_s", "finish_s"):
        assert fast.requests[col].tolist() == step.requests[col].tolist(), col
    assert fast.summary["lockstep_steps"] == step.summary["lockstep_steps"]
    assert fast.summary["engine_decisions"] < step.summary["engine_decisions"]  # runs happened


def test_a_ranks_run_offer_keeps_its_decode_clock(monkeypatch):
    """A rank whose decodes are all on the KV ledger's clock (``paged``: its scheduler's
    decode cohort, ``BatchPlan.apart``) offers a run planned as a rank alone plans one
    (``plan_decode_run`` told ``apart``): no offer settles the whole clock, and the run
    is the one exact stepping gives."""
    from sim.memory.deferred import DeferredAppends

    settled: list[int] = []
    plan_run = DeferredAppends.plan_run

    def spy(self, requests, max_steps, *args, **kwargs):
        before = self.clocked
        out = plan_run(self, requests, max_steps, *args, **kwargs)
        if before and not self.clocked:
            settled.append(before)
        return out

    monkeypatch.setattr(DeferredAppends, "plan_run", spy)
    many = [{"count": 6, "at_s": 0.0, "interval_s": 0.01, "prompt_tokens": 200, "output_tokens": 60}]
    fast = run_scenario(sc(**{"allocator.kind": "paged", "workload.requests": many}))
    assert (fast.steps.n_steps > 1).any()  # the group ran runs
    assert settled == []
    exact = run_scenario(sc(**{"allocator.kind": "paged", "workload.requests": many,
                               "engine.exact": True}))  # fmt: skip
    a, b = dict(fast.summary), dict(exact.summary)
    for k in ("wall_time_s",):
        a.pop(k), b.pop(k)
    assert a["lockstep_steps"] == b["lockstep_steps"]
    assert fast.requests.equals(exact.requests)

"""vLLM's async scheduling through the engine: an exact timeline from a hand-made cost, the
exact and fast modes agreeing with it on, and the plan made a step ahead (a post during step
N reaches step N + 2; nothing to plan ahead of when the engine is idle)."""

from __future__ import annotations

import pytest
from engine_helpers import assert_same_frame, assert_same_summary, run
from test_modes import CASES as MODE_CASES

#: every step is 60 GB of weights at 3.0 TB/s = 20 ms of GPU (no FLOPs, no KV read), plus
#: 5 ms of host work per step; one request: a 16-token prefill step and 9 decode steps
ONE_REQUEST = {
    "workload.requests": [{"count": 1, "at_s": 0.0, "prompt_tokens": 16, "output_tokens": 10}],
    "cost.weights_bytes": 60e9,
    "cost.gemm_flops": False,
    "cost.step_overhead_s": 0.005,
}


@pytest.mark.parametrize(("setting", "step_s"), [(False, 0.025), (True, 0.020), ("auto", 0.020)])
def test_host_work_overlaps_the_gpu_step_with_async_scheduling(setting, step_s):
    r = run("seed_chunked_prefill.yaml", **ONE_REQUEST, **{"scheduler.async_scheduling": setting,
                                                          "engine.exact": True})  # fmt: skip
    assert r.summary["steps"] == 10
    assert list(r.steps.duration_s) == pytest.approx([step_s] * 10, rel=1e-12)
    assert list(r.steps.overhead_s) == pytest.approx([0.005] * 10, rel=1e-12)
    req = r.requests.iloc[0]
    assert req.ttft_s == pytest.approx(step_s, rel=1e-12)
    assert req.e2e_s == pytest.approx(10 * step_s, rel=1e-12)


CASES = {
    "pressure": ("seed_chunked_prefill.yaml", {"hardware.kv_pool_bytes_per_gpu": 2e9,
                                               "cost.step_overhead_s": 0.05}),  # fmt: skip
    # host 3 ms against steps of a few ms: some steps are host-bound, some GPU-bound
    "chat": ("chat_azure.yaml", {"workload.num_requests": 80, "hardware.kv_pool_bytes_per_gpu": 3e9,
                                 "cost.step_overhead_s": 0.003}),  # fmt: skip
}


@pytest.mark.parametrize("case", list(CASES))
def test_exact_and_fast_modes_agree_with_async_scheduling(case):
    name, overrides = CASES[case]
    on = {"scheduler.async_scheduling": True}
    fast = run(name, **overrides, **on, **{"engine.exact": False})
    exact = run(name, **overrides, **on, **{"engine.exact": True})
    assert_same_summary(fast.summary, exact.summary)
    assert_same_frame(fast.requests, exact.requests)
    assert fast.summary["engine_decisions"] < exact.summary["engine_decisions"]
    sync = run(name, **overrides, **{"scheduler.async_scheduling": False})
    assert fast.summary["sim_time_s"] < sync.summary["sim_time_s"]  # the overlap saved time


#: steps of exactly 20 ms (GPU only): A arrives at 0 with 10 tokens to generate, B at 30 ms,
#: while step 2 (20-40 ms) runs
TWO_REQUESTS = {
    **ONE_REQUEST,
    "cost.step_overhead_s": 0.0,
    "workload.requests": [
        {"count": 1, "at_s": 0.0, "prompt_tokens": 16, "output_tokens": 10},
        {"count": 1, "at_s": 0.030, "prompt_tokens": 16, "output_tokens": 10},
    ],
}


def _times(r, i):
    req = r.requests.sort_values("req_id").iloc[i]
    return [req.arrival_s, req.queued_s, req.scheduled_s, req.admitted_s, req.first_token_s]


@pytest.mark.parametrize("exact", [True, False])
def test_a_post_during_step_n_is_planned_into_step_n_plus_2(exact):
    """vLLM's engine core plans step N + 1 while step N runs: B, posted during step 2, is
    received at its end (queued 40 ms), planned then (scheduled 40 ms) into step 4, which
    starts at 60 ms (admitted) and gives its first token at 80 ms; synchronous, step 3."""
    mode = {"engine.exact": exact}
    on = run("seed_chunked_prefill.yaml", **TWO_REQUESTS, **mode, **{"scheduler.async_scheduling": True})
    off = run("seed_chunked_prefill.yaml", **TWO_REQUESTS, **mode, **{"scheduler.async_scheduling": False})
    for r in (on, off):  # A found the engine idle: nothing to plan ahead of
        assert _times(r, 0) == pytest.approx([0.0, 0.0, 0.0, 0.0, 0.020], abs=1e-12)
    assert _times(on, 1) == pytest.approx([0.030, 0.040, 0.040, 0.060, 0.080], abs=1e-12)
    assert _times(off, 1) == pytest.approx([0.030, 0.040, 0.040, 0.040, 0.060], abs=1e-12)
    assert on.summary["sim_time_s"] == pytest.approx(off.summary["sim_time_s"] + 0.020, abs=1e-12)
    if not exact:  # A's run (0-40 ms) goes on through step 3 (40-60 ms), which B cannot change
        assert on.steps.start_s.tolist()[:2] == pytest.approx([0.0, 0.060], abs=1e-12)
        assert on.steps.n_steps.tolist()[:2] == [3, 7]


def test_with_nothing_else_to_plan_a_received_post_applies_at_once():
    """A ends in step 2 (two tokens), so the plan made while it ran is empty: B, posted
    during step 2, starts at its end, as on an idle engine."""
    two = {**TWO_REQUESTS, "scheduler.async_scheduling": True, "engine.exact": True}
    two["workload.requests"] = [{**TWO_REQUESTS["workload.requests"][0], "output_tokens": 2},
                                TWO_REQUESTS["workload.requests"][1]]  # fmt: skip
    r = run("seed_chunked_prefill.yaml", **two)
    assert _times(r, 1) == pytest.approx([0.030, 0.040, 0.040, 0.040, 0.060], abs=1e-12)


@pytest.mark.parametrize("setting", [True, False])
def test_request_instants_are_ordered(setting):
    """arrival <= queued <= scheduled <= admitted <= first token for every request of a
    loaded run; synchronous, a request is scheduled when admitted; async, some are planned
    a step before the step that admits them."""
    name, overrides = CASES["chat"]
    r = run(name, **overrides, **{"scheduler.async_scheduling": setting})
    q = r.requests.dropna(subset=["first_token_s"])
    cols = ["arrival_s", "queued_s", "scheduled_s", "admitted_s", "first_token_s"]
    for a, b in zip(cols, cols[1:], strict=False):
        assert (q[a] <= q[b] + 1e-12).all(), (a, b)
    early = (q.scheduled_s < q.admitted_s).sum()
    assert early > 0 if setting else early == 0


#: single-node scenarios whose runs are cut by posts: chat arrivals, agent turns after tool
#: pauses (radix cache, held KV dropped under pressure, forks and prunes, recompute, offload to
#: host), a horizon, memory pressure
PAST_RECEIPT = {
    "chat": CASES["chat"],
    "pressure": CASES["pressure"],
    "agents-radix": MODE_CASES["agents-radix"],
    "agents-hash-prune": MODE_CASES["agents-hash-prune"],
    "agents-buddy-recompute": MODE_CASES["agents-buddy-recompute"],
    "horizon": ("chat_azure.yaml", {"workload.num_requests": 80, "duration_s": 6.0}),
    # a long prompt prefilled alone (memory samples constant over the run) and a short one
    # arriving during it: the time-weighted means must not depend on where the run is cut
    "prefill-alone": ("seed_chunked_prefill.yaml", {"workload.requests": [
        {"count": 1, "at_s": 0.0, "prompt_tokens": 5000, "output_tokens": 4},
        {"count": 1, "at_s": 0.2, "prompt_tokens": 16, "output_tokens": 4}]}),  # fmt: skip
    "agents-pressure": ("agent_swarm_pressure.yaml", {"workload.num_trajectories": 16, "seed": 1,
                                                      "engine.check_invariants": False}),  # fmt: skip
    # offloads to host at tool pauses: copies completing post at boundaries (invariants off:
    # their per-decision check of this large pool costs ~40 ms a decision)
    "coding-agent-offload": ("coding_agent_swarm.yaml", {"workload.num_trajectories": 4,
                                                         "pause_policy.kind": "break_even",
                                                         "engine.check_invariants": False}),  # fmt: skip
}


def _run_past_receipt(name: str, on: bool, **overrides):
    from engine_helpers import WORKLOADS

    from sim.run.runner import build

    sim = build(str(WORKLOADS / name), **{"engine.check_invariants": True, **overrides})
    sim.node.runs_past_receipt = on
    return sim.run()


@pytest.mark.parametrize("case", list(PAST_RECEIPT))
def test_a_run_goes_on_through_the_step_a_received_post_cannot_change(case):
    """A post during step i of a run is received at its end and first planned into step
    i + 2, so step i + 1 is the run's own next step: the run goes on through it (one
    decision fewer) and every result is bit for bit that of cutting the run at step i;
    only the decision-level rows (one per decision) are fewer."""
    name, overrides = PAST_RECEIPT[case]
    on = _run_past_receipt(name, True, **overrides)
    off = _run_past_receipt(name, False, **overrides)
    skip = {"engine_decisions", "wall_time_s"}
    assert {k: v for k, v in on.summary.items() if k not in skip} == {
        k: v for k, v in off.summary.items() if k not in skip
    } | {"accuracy": {**off.summary["accuracy"], "not_measured": on.summary["accuracy"]["not_measured"]}}
    # the unmeasured share sums every step's own terms, grouped in other rows: equal to
    # float rounding (sim.cost.accuracy.unmeasured_shares)
    a, b = on.summary["accuracy"]["not_measured"], off.summary["accuracy"]["not_measured"]
    assert a.keys() == b.keys()
    for key in a:
        assert a[key] == pytest.approx(b[key], rel=1e-12, abs=1e-15), key
    for table in ("requests", "trajectories", "pauses"):
        a, b = getattr(on, table), getattr(off, table)
        assert (a is None and b is None) or a.equals(b), table
    assert on.summary["engine_decisions"] < off.summary["engine_decisions"]
    assert on.steps.n_steps.sum() == off.steps.n_steps.sum() == on.summary["steps"]
    # the memory rows left are rows of the run cut at every receipt, unchanged
    both = on.memory.merge(off.memory, how="left", indicator=True)
    assert (both["_merge"] == "both").all() and len(on.memory) < len(off.memory)


def test_a_run_that_would_end_past_max_sim_time_is_cut_at_the_receipt():
    """The loop stops at the first boundary past ``engine.max_sim_time_s``, before taking
    posts: a run that would end there is cut at the receipt, so the posts received are
    stamped and held as without the change."""
    reqs = [{"count": 8, "at_s": 0.0, "prompt_tokens": 16, "output_tokens": 60},
            {"count": 1, "at_s": 0.44, "prompt_tokens": 16, "output_tokens": 5}]  # fmt: skip
    over = {"workload.requests": reqs, "duration_s": 0.5, "engine.max_sim_time_s": 0.51}
    held = {}
    for on in (True, False):
        from engine_helpers import WORKLOADS

        from sim.run.runner import build

        sim = build(str(WORKLOADS / "seed_chunked_prefill.yaml"), **over)
        sim.node.runs_past_receipt = on
        sim.run()
        held[on] = [(op[0], op[1].queued_s) for op in (*sim.node._held, *sim.node.inbox)]
    assert held[True] == held[False] and held[True][0][1] is not None


def test_a_cluster_cuts_its_runs_at_the_receipt():
    """A cluster's router reads its nodes between their steps (a run commits at its end),
    so their runs stop where the post is received, as before."""
    from engine_helpers import WORKLOADS

    from sim.run.runner import build

    sim = build(str(WORKLOADS / "cluster_coding_agents.yaml"))
    assert [p.node.runs_past_receipt for p in sim.parts] == [False] * len(sim.parts)

"""A capacity answer on a cluster and its cost: F37 counts every node that holds the
agents' KV (a disaggregated cluster: its decode instances), the cost at capacity prices
the measurement window (not the start-up burst and the drain), and a node's GPU time is
split between prefill and decode by that node's own steps (a dedicated prefill instance's
dollars go to the input tokens)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from sim.run.pricing import emitted_tokens, token_costs

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "workloads" / "cluster_coding_agents.yaml"
PD = ROOT / "workloads" / "pd_coding_agents.yaml"


# --------------------------------------------------------------------- F37 of a cluster
def test_a_clusters_f37_is_its_node_count_times_one_nodes():
    """cluster_coding_agents: 4 nodes, each one H100 with Llama-3.1-8B. m_token = 32
    layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 131,072 B; one node's pool 61,249,411,328
    B; S_shared 320, M_avg 22,734 (rounded), K_avg 231 (rounded):
    floor((0.9 x 61,249,411,328 - 320 x 131,072) / ((22,734 - 320 + 231) x 131,072))
    = floor(55,082,527,155 / 2,968,125,440) = floor(18.56) = 18 per node, 4 x 18 = 72 for
    the cluster (on main: 18, one node's figure against the four nodes' capacity). Peak
    context (M_peak 39,466): floor(55,082,527,155 / ((39,466 - 320 + 231) x 131,072)) =
    floor(10.67) = 10 per node, 40."""
    from sim.scenario import load_scenario
    from sim.sweep.capacity import _estimate, _start

    est = _estimate(load_scenario(str(CLUSTER)), "concurrency", 3)
    inp = est["inputs"]
    assert inp["kv_bytes_per_token"] == 131_072 and inp["kv_pool_bytes"] == 61_249_411_328
    assert (round(inp["M_avg_tokens"]), round(inp["K_avg_tokens"]), inp["S_shared_tokens"]) == (22_734, 231, 320)
    assert round(inp["M_peak_tokens"]) == 39_466
    assert est["value"] == 72 and est["peak_value"] == 40
    assert inp["nodes_counted"] == 4
    assert inp["per_node"] == [{"group": 0, "role": "both", "count": 4, "value": 18, "peak_value": 10}]
    assert _start(est["value"], 48, "concurrency") == 72  # the search starts there
    # --search nodes keeps its own reading: the load over one node's figure
    nodes = _estimate(load_scenario(str(CLUSTER)), "nodes", 3)
    assert nodes["value"] == math.ceil(48 / 18) == 3 and nodes["inputs"]["load_per_node"] == 18


def test_a_disaggregated_clusters_f37_counts_its_decode_instances():
    """pd_coding_agents: 1 prefill + 3 decode instances of Llama-3.1-70B at TP 4. The
    agents' KV lives on the decode instances between turns (a prefill instance holds a
    prompt only until it is shipped), so F37 is 3 x one decode instance's: m_token = 80
    layers x 8 x 128 x 2 x 2 B = 327,680 B, pool 168,137,645,312 B,
    floor((0.9 x pool - S x m) / ((M_avg - S + K_avg) x m)) with the sampled averages = 20
    per instance, 60 (and 3 x 11 = 33 at the peak context)."""
    from sim.scenario import load_scenario
    from sim.sweep.capacity import _estimate

    est = _estimate(load_scenario(str(PD)), "concurrency", 3)
    inp = est["inputs"]
    m, pool = inp["kv_bytes_per_token"], inp["kv_pool_bytes"]
    assert (m, pool) == (327_680, 168_137_645_312)
    s = inp["S_shared_tokens"]

    def f37(context: float) -> int:
        return math.floor((0.9 * pool - s * m) / ((round(context) - s + round(inp["K_avg_tokens"])) * m))

    assert f37(inp["M_avg_tokens"]) == 20 and f37(inp["M_peak_tokens"]) == 11
    assert est["value"] == 60 and est["peak_value"] == 33
    assert inp["per_node"] == [{"group": 1, "role": "decode", "count": 3, "value": 20, "peak_value": 11}]


def test_the_estimate_line_shows_the_clusters_sum(capsys):
    from sim.cli.capacity import _print_estimate

    inp = {"M_avg_tokens": 22_733.7, "K_avg_tokens": 230.7, "S_shared_tokens": 320, "M_peak_tokens": 39_466.4,
           "per_node": [{"group": 1, "role": "decode", "count": 3, "value": 20, "peak_value": 11}]}  # fmt: skip
    _print_estimate({"value": 60, "peak_value": 33}, inp)
    assert capsys.readouterr().out == (
        "  analytic (F37, 10% headroom): 60 (3 decode nodes x 20) with the time-averaged context "
        "(M_avg 22,734 + K_avg 231 tokens, S_shared 320); 33 (3 decode nodes x 11) with the peak "
        "context (39,466 tokens)\n"
    )


# ------------------------------------------------------------- the price, node by node
def _two_nodes():
    """A prefill node and a decode node, $10 each over a 100 s run (4 GPUs each).

    Node 0 (prefill): one step 10-20 s, all prefill (10 s), 1,000 prompt tokens.
    Node 1 (decode): a run of decode steps 20-60 s (40 s, no prefill), then a step 60-70 s
    of which 2 s are prefill, 100 prompt tokens. Output: r1 emits 41 tokens from 20 s to
    60 s, r2 21 tokens from 60 s to 80 s, r0 10 tokens from 9 s to 12 s (72 in all)."""
    summary = {
        "sim_time_s": 100.0, "usd_total": 20.0, "usd_per_gpu_hour": 18.0, "price_source": "test",
        "prefill_tokens": 1100, "output_tokens": 72, "usd_per_trajectory": 10.0,
        "paused_hbm_usd": 2.0, "paused_hbm_gb_s": 100.0,
        "nodes": [{"node_id": 0, "usd_total": 10.0, "num_gpus": 4, "role": "prefill"},
                  {"node_id": 1, "usd_total": 10.0, "num_gpus": 4, "role": "decode"}],
    }  # fmt: skip
    steps = pd.DataFrame({
        "start_s": [10.0, 20.0, 60.0], "end_s": [20.0, 60.0, 70.0],
        "duration_s": [10.0, 40.0, 10.0], "prefill_s": [10.0, 0.0, 2.0],
        "prefill_tokens": [1000, 0, 100], "node": [0, 1, 1],
    })  # fmt: skip
    requests = pd.DataFrame({
        "admitted_s": [5.0, 19.0, 58.0], "first_token_s": [9.0, 20.0, 60.0],
        "finish_s": [12.0, 60.0, 80.0], "output_tokens": [10, 41, 21],
        "hit_tokens": [999, 100, 0], "held_tokens": [0, 400, 1000],
    })  # fmt: skip
    trajectories = pd.DataFrame({"start_s": [0.0, 40.0], "end_s": [80.0, 90.0],
                                 "status": ["completed", "completed"]})  # fmt: skip
    pauses = pd.DataFrame({"start_s": [30.0, 60.0], "ended_s": [40.0, 80.0],
                           "paused_hbm_gb_s": [50.0, 50.0]})  # fmt: skip
    return summary, steps, requests, trajectories, pauses


def test_each_nodes_dollars_follow_its_own_steps():
    """Whole run. Node 0's share of prefill is 10/10 = 1, node 1's 2/50 = 0.04, so the
    prefill dollars are 10 x 1 + 10 x 0.04 = $10.40: at least the prefill node's $10 (on
    main one cluster-wide ratio, 12/60 = 0.2 of $20 = $4, charged the prefill node's GPUs
    mostly to output tokens). Input: 10.40 / 1,100 x 1e6 = $9,454.55 per million; output:
    9.60 / 72 x 1e6 = $133,333.33; prefill_time_share by GPUs: (4 x 1 + 4 x 0.04) / 8 = 0.52."""
    summary, steps, requests, _, _ = _two_nodes()
    c = token_costs(summary, steps, requests)
    assert c["usd_per_million_input_tokens"] == pytest.approx(10.4 / 1100 * 1e6, rel=1e-12)
    assert c["usd_per_million_output_tokens"] == pytest.approx(9.6 / 72 * 1e6, rel=1e-12)
    assert c["prefill_time_share"] == pytest.approx(0.52, rel=1e-12)
    assert c["usd_per_million_input_tokens"] * 1100 / 1e6 >= summary["nodes"][0]["usd_total"]
    assert c["usd"] == 20.0 and c["window_s"] is None and c["usd_per_trajectory"] == 10.0
    # reused prompt tokens of every admitted request: 999 + 500 + 1,000; hold $2
    assert c["usd_per_million_cached_input_tokens"] == pytest.approx(2.0 / 2499 * 1e6, rel=1e-12)


def test_the_window_prices_its_own_span():
    """Window 15-65 s of the 100 s run: each node's $10 x 50/100 = $5, $10 in all.
    Steps clipped: node 0's 10-20 s step half inside (5 s prefill, 500 tokens): share 1;
    node 1's 20-60 s decodes whole (40 s) and half of its 60-70 s step (5 s, 1 s prefill,
    50 tokens): share 1/45. Prefill dollars 5 + 5/45 = $5.1111 over 550 prompt tokens.
    Output emitted in the window: r1's 41 (20-60 s), r2's first token at 60 s and 20 x
    5/20 = 5 of the rest: 47 (r0's ended at 12 s). Decode dollars 10 - 5.1111 over 47.
    Per trajectory: t1 is inside for 50 of its 80 s (0.625), t2 for 25 of 50 (0.5):
    $10 / 1.125. Hold: $2 / 100 GB-s = $0.02 per GB-s; pause 1 (30-40 s) whole, 50 GB-s,
    pause 2 (60-80 s) a quarter, 12.5 GB-s: $1.25 over the prompt tokens reused by the
    requests admitted in the window (r1 500, r2 1,000): 1,500."""
    summary, steps, requests, traj, pauses = _two_nodes()
    c = token_costs(summary, steps, requests, window_s=(15.0, 65.0), trajectories=traj, pauses=pauses)
    usd_prefill = 5.0 + 5.0 / 45
    assert c["window_s"] == {"start": 15.0, "end": 65.0} and c["usd"] == pytest.approx(10.0, rel=1e-12)
    assert c["usd_per_million_input_tokens"] == pytest.approx(usd_prefill / 550 * 1e6, rel=1e-12)
    assert c["usd_per_million_output_tokens"] == pytest.approx((10.0 - usd_prefill) / 47 * 1e6, rel=1e-12)
    assert c["usd_per_trajectory"] == pytest.approx(10.0 / 1.125, rel=1e-12)
    assert c["usd_per_million_cached_input_tokens"] == pytest.approx(1.25 / 1500 * 1e6, rel=1e-12)
    assert c["prefill_time_share"] == pytest.approx((1.0 + 1.0 / 45) / 2, rel=1e-12)
    assert emitted_tokens(requests, 15.0, 65.0) == pytest.approx(47.0, rel=1e-12)
    # the whole run as a window: the whole run's figures (trajectories: 2 completed)
    whole = token_costs(summary, steps, requests, window_s=(0.0, None), trajectories=traj, pauses=pauses)
    plain = token_costs(summary, steps, requests)
    for key in ("usd_per_million_input_tokens", "usd_per_million_output_tokens", "prefill_time_share"):
        assert whole[key] == pytest.approx(plain[key], rel=1e-12)
    assert whole["usd_per_trajectory"] == pytest.approx(10.0, rel=1e-12)
    # an empty window prices nothing
    empty = token_costs(summary, steps, requests, window_s=(50.0, 50.0), trajectories=traj, pauses=pauses)
    assert empty["usd"] is None and empty["usd_per_million_output_tokens"] is None


# ----------------------------------------------------- the answer's cost, a real run
def test_the_answer_is_priced_over_its_measurement_window(tiny):
    """A closed loop of 8 agents running 24 trajectories: after the last trajectory starts
    the loop drains with fewer agents than the load. The probe's cost is price x GPUs x
    window / tokens in the window, the tokens counted here request by request."""
    from sim.run import run_scenario
    from sim.sweep.slo import SLO
    from sim.sweep.task import run_probe

    task = {"scenario": str(tiny), "overrides": {}, "seed": 3, "load": 8, "replication": 0,
            "slos": [SLO("ttft_p99_s", "ttft", "p99", 100.0)], "warmup_fraction": 0.2}  # fmt: skip
    probe = run_probe(task)
    r = run_scenario(str(tiny), seed=3)
    s = r.summary
    lo, hi = probe["window_s"]["start"], probe["window_s"]["end"]
    assert 0 < lo < hi < s["sim_time_s"]
    cost = probe["cost"]
    usd = s["usd_per_gpu_hour"] * s["num_gpus"] * (hi - lo) / 3600.0
    assert cost["usd"] == pytest.approx(usd, rel=1e-12)
    tokens = 0.0  # first token at first_token_s, the rest evenly until finish_s
    for q in r.requests.itertuples():
        if q.output_tokens <= 0 or not math.isfinite(q.first_token_s):
            continue
        tokens += 1.0 if lo <= q.first_token_s <= hi else 0.0
        if q.finish_s > q.first_token_s:
            inside = max(0.0, min(q.finish_s, hi) - max(q.first_token_s, lo))
            tokens += (q.output_tokens - 1) * inside / (q.finish_s - q.first_token_s)
    st = r.steps
    inside = ((st.end_s.clip(upper=hi) - st.start_s.clip(lower=lo)).clip(lower=0)
              / (st.end_s - st.start_s))  # fmt: skip
    share = float((st.prefill_s * inside).sum() / (st.duration_s * inside).sum())
    assert cost["prefill_time_share"] == pytest.approx(share, rel=1e-9)
    assert cost["usd_per_million_output_tokens"] == pytest.approx(usd * (1 - share) / tokens * 1e6, rel=1e-9)
    whole = token_costs(s, r.steps, r.requests)
    assert cost["usd_per_million_output_tokens"] != pytest.approx(whole["usd_per_million_output_tokens"], rel=1e-3)


@pytest.fixture(scope="module")
def pd_run():
    from sim.run import run_scenario

    return run_scenario(str(PD), **{"workload.num_trajectories": 4, "workload.arrival.concurrency": 4,
                                    "cluster.transfer.remote_prefill_min_tokens": 0})  # fmt: skip


def test_a_prefill_instances_dollars_go_to_the_input_tokens(pd_run):
    """1 prefill + 3 decode instances, every prompt prefilled remotely: the prefill
    instance runs prefill only (its steps' prefill_s equal their durations), so all its
    dollars, a quarter of the cluster's, are prefill dollars, and the input tokens pay at
    least that (on main: 2.4 % of the cluster's dollars, one cluster-wide ratio)."""
    s, st = pd_run.summary, pd_run.steps
    node0 = st[st.node == 0]
    assert len(node0) and node0.prefill_s.to_numpy() == pytest.approx(node0.duration_s.to_numpy(), rel=1e-12)
    c = token_costs(s, st, pd_run.requests)
    usd_input = c["usd_per_million_input_tokens"] * s["prefill_tokens"] / 1e6
    usd_output = c["usd_per_million_output_tokens"] * s["output_tokens"] / 1e6
    assert usd_input >= s["nodes"][0]["usd_total"] == pytest.approx(s["usd_total"] / 4, rel=1e-12)
    assert usd_input + usd_output == pytest.approx(s["usd_total"], rel=1e-12)
    want = sum(n["usd_total"] * float(g.prefill_s.sum() / g.duration_s.sum())
               for n, (_, g) in zip(s["nodes"], st.groupby("node"), strict=True))  # fmt: skip
    assert usd_input == pytest.approx(want, rel=1e-12)


def test_the_report_counts_a_prefill_instances_prefills(pd_run):
    """The prefill instance is placed no request (routing_decisions 0): it is sent every
    prompt's prefill half, so its cell says how many (every prompt here: remote_prefills)."""
    from sim.report.text import cluster_rows

    s = pd_run.summary
    n = s["nodes"]
    assert n[0]["routing_decisions"] == 0 and n[0]["requests_submitted"] == s["remote_prefills"] > 0
    cells = [f"{s['remote_prefills']:,} prefills"] + [f"{x['routing_decisions']:,}" for x in n[1:]]
    assert ("routing decisions per node", " / ".join(cells), "count") in cluster_rows(s)


def test_progress_lines_leave_out_the_shared_sets(capsys):
    """``--set workload.num_trajectories=300`` without --vary: no prefix; the --vary key
    and the error band's scale, which tell configurations apart, stay."""
    from sim.cli.capacity import _progress

    sets = {"workload.num_trajectories": 300}
    _progress("concurrency", {"load": 11, "seed": 1, "passed": True, "config": dict(sets)}, sets=sets)
    _progress("concurrency", {"load": 11, "seed": 1, "passed": True,
                              "config": {**sets, "hardware.accelerator": "h200-141gb"}}, sets=sets)  # fmt: skip
    assert capsys.readouterr().err.splitlines() == [
        "  load 11 seed 1: meets the SLOs",
        "  hardware.accelerator=h200-141gb load 11 seed 1: meets the SLOs",
    ]

"""Cluster runs through the real engine (sim/run/cluster.py, sim/cluster/front.py): exact
timelines per router, the 1-node cluster equal to the plain run, E17 / check T19
through the API, the run folder and its per-node summaries, the scenario section through
``--set``, ``kvsim schema`` and ``kvsim validate``, bad input as one line, determinism."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml

from sim.errors import ConfigError
from sim.metrics.schema import check_run_folder
from sim.run import run_scenario
from sim.run.runner import build
from sim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
H100, H200 = "h100-sxm-80gb", "h200-141gb"

#: 2..6 one-turn requests with private prompts on an 8B model: exact timelines
REQUESTS = {
    "name": "cluster_timeline",
    "seed": 0,
    "model": "llama-3.1-8b",
    "hardware": {"accelerator": H100, "kv_pool_bytes_per_gpu": 4e9},
    "allocator": {"kind": "radix"},
    "engine": {"exact": True},
    "workload": {
        "kind": "requests",
        "requests": [
            {"count": 6, "at_s": 0.0, "interval_s": 5.0, "prompt_tokens": 512, "output_tokens": 3}
        ],
    },
}

#: the lead's manual /tmp/cl4.yaml, reduced: 2 x H100 + 2 x H200 behind prefix_affinity
CL4 = {
    "name": "cl4",
    "seed": 1,
    "model": "llama-3.1-8b",
    "hardware": {"accelerator": H100},
    "allocator": {"kind": "radix"},
    "workload": {
        "kind": "coding_agent",
        "num_trajectories": 4,
        "arrival": {"kind": "closed_loop", "concurrency": 4},
    },
    "cluster": {
        "nodes": [{"count": 2}, {"count": 2, "hardware": {"accelerator": H200}}],
        "router": {"kind": "prefix_affinity", "mu": 0.8},
    },
}

TIMES = ["arrival_s", "admitted_s", "first_token_s", "finish_s"]
#: summary keys a cluster adds to the single-node ones
CLUSTER_KEYS = {
    "nodes", "n_nodes", "router", "routing_decisions", "rejected_by_router",
    "sequence_moves", "directory_entries", "directory_staleness_s", "routed_match_rate",
    "global_match_rate",
}  # fmt: skip
#: where a run came from or how long it took, not what it did
PROVENANCE = {"wall_time_s", "versions", "command", "scenario_path", "config_sha256"}
#: summary keys only a single-node run has (a cluster's nodes report their prefix caches
#: to the router's directory: their reuse lost to evictions is not counted)
SINGLE_NODE_KEYS = {"prefix_recomputed_tokens"}


def scenario(base: dict, cluster: dict | None = None, **sections) -> dict:
    out = copy.deepcopy(base)
    out.update(copy.deepcopy(sections))
    if cluster is None:
        out.pop("cluster", None)
    else:
        out["cluster"] = copy.deepcopy(cluster)
    return out


def requests_at(*groups: dict) -> dict:
    return {"kind": "requests", "requests": list(groups)}


# ------------------------------------------------------------------ exact timelines
def test_round_robin_alternates_and_idle_nodes_match_a_single_node():
    one = run_scenario(scenario(REQUESTS))
    two = run_scenario(scenario(REQUESTS, {"nodes": [{"count": 2}]}))
    r1, r2 = one.requests, two.requests
    assert r2.req_id.tolist() == list(range(6))
    assert r2.node.tolist() == [0, 1, 0, 1, 0, 1]  # requests 0, 2, 4 on node 0
    assert (r1.node == 0).all()
    for col in TIMES:  # each node is idle when its request arrives: the same timeline
        assert r2[col].tolist() == r1[col].tolist(), col
    assert r2.arrival_s.tolist() == [0.0, 5.0, 10.0, 15.0, 20.0, 25.0]
    assert two.summary["routing_decisions"] == 6
    assert [n["routing_decisions"] for n in two.summary["nodes"]] == [3, 3]
    assert [n["requests_completed"] for n in two.summary["nodes"]] == [3, 3]
    # every step row belongs to the node that served the request in it
    steps = two.steps
    assert sorted(steps.node.unique().tolist()) == [0, 1]
    assert steps.prefill_tokens.sum() == 6 * 512
    assert steps.groupby("node").prefill_tokens.sum().tolist() == [3 * 512, 3 * 512]


def test_network_delay_shifts_every_time_by_exactly_the_delay():
    delay = 0.01
    base = run_scenario(scenario(REQUESTS, {"nodes": [{"count": 2}]}))
    late = run_scenario(scenario(REQUESTS, {"nodes": [{"count": 2}], "network_delay_s": delay}))
    a, b = base.requests, late.requests
    assert b.node.tolist() == a.node.tolist()
    assert b.arrival_s.tolist() == a.arrival_s.tolist()  # arrival at the router
    for col in ("admitted_s", "first_token_s", "finish_s"):
        assert b[col].tolist() == pytest.approx((a[col] + delay).tolist(), abs=1e-12), col
    assert b.ttft_s.tolist() == pytest.approx((a.ttft_s + delay).tolist(), abs=1e-12)
    assert b.queue_s.tolist() == pytest.approx((a.queue_s + delay).tolist(), abs=1e-12)


def test_simultaneous_requests_batch_per_node_like_half_the_load_on_one_node():
    """4 requests at t = 0 on 2 round-robin nodes: each node batches 2, exactly as one
    node given 2 requests at t = 0."""
    wl4 = requests_at({"count": 4, "prompt_tokens": 512, "output_tokens": 3})
    wl2 = requests_at({"count": 2, "prompt_tokens": 512, "output_tokens": 3})
    two = run_scenario(scenario(REQUESTS, {"nodes": [{"count": 2}]}, workload=wl4)).requests
    one = run_scenario(scenario(REQUESTS, workload=wl2)).requests
    assert two.node.tolist() == [0, 1, 0, 1]
    for j in (0, 1):
        mine = two[two.node == j].reset_index(drop=True)
        for col in TIMES:
            assert mine[col].tolist() == one[col].tolist(), (j, col)


def test_heterogeneous_nodes_each_run_at_their_own_accelerator():
    cluster = {"nodes": [{"count": 1}, {"count": 1, "hardware": {"accelerator": H200}}]}
    wl = requests_at(
        {"count": 2, "at_s": 0.0, "interval_s": 1.0, "prompt_tokens": 512, "output_tokens": 3}
    )
    two = run_scenario(scenario(REQUESTS, cluster, workload=wl)).requests
    h100 = run_scenario(scenario(REQUESTS, workload=wl)).requests
    hw200 = {"accelerator": H200, "kv_pool_bytes_per_gpu": 4e9}
    h200 = run_scenario(scenario(REQUESTS, workload=wl, hardware=hw200)).requests
    assert two.node.tolist() == [0, 1]
    for col in TIMES:
        assert two[col].iloc[0] == h100[col].iloc[0], col
        assert two[col].iloc[1] == h200[col].iloc[1], col
    assert two.ttft_s.iloc[1] < two.ttft_s.iloc[0]  # the H200 is faster


def test_least_load_by_queue_then_kv_and_by_kv():
    """A (2,048-token prompt) at 0 -> node 0; B at 0.01 -> idle node 1; C at 0.02: one
    request each, node 1 holds less KV (512 vs 2,048 tokens) -> node 1; D at 0.5 and E at
    0.6 (short; D ends before E): node 0 has 1 outstanding, node 1 has 2 -> node 0 both
    times. By KV use first, D and E go to node 1 (about 1,100 tokens vs about 2,100)."""
    wl = requests_at(
        {"at_s": 0.0, "prompt_tokens": 2048, "output_tokens": 400},
        {"count": 2, "at_s": 0.01, "interval_s": 0.01, "prompt_tokens": 512, "output_tokens": 400},
        {"at_s": 0.5, "prompt_tokens": 512, "output_tokens": 3},
        {"at_s": 0.6, "prompt_tokens": 512, "output_tokens": 3},
    )
    cluster = {"nodes": [{"count": 2}], "router": {"kind": "least_load"}}
    r = run_scenario(scenario(REQUESTS, cluster, workload=wl)).requests
    assert r.node.tolist() == [0, 1, 1, 0, 0]
    assert r.finish_s.iloc[3] < r.arrival_s.iloc[4] < r.finish_s.iloc[:3].min()
    cluster["router"]["by"] = "kv"
    r = run_scenario(scenario(REQUESTS, cluster, workload=wl)).requests
    assert r.node.tolist() == [0, 1, 1, 1, 1]


def test_session_affinity_keeps_a_trajectory_on_its_node():
    res = run_scenario(
        scenario(CL4, {"nodes": [{"count": 3}], "router": {"kind": "session_affinity"}})
    )
    r = res.requests
    per_traj = r[r.traj_id >= 0].groupby("traj_id").node.nunique()
    assert (per_traj == 1).all()  # never overloaded at depth 64: no trajectory moves
    assert res.summary["sequence_moves"] == 0
    # the trajectories' first calls spread over the idle nodes (least loaded, lowest id)
    firsts = r[r.turn == 0].drop_duplicates("traj_id").sort_values("arrival_s", kind="stable")
    assert firsts.node.tolist()[:3] == [0, 1, 2]


def test_ttft_estimate_refuses_everything_above_a_tiny_slo():
    cluster = {"nodes": [{"count": 2}], "router": {"kind": "ttft_estimate", "ttft_slo_s": 1e-6}}
    res = run_scenario(scenario(REQUESTS, cluster))
    r = res.requests
    assert len(r) == 6 and (r.node == -1).all()
    assert set(r.finish_reason) == {"rejected_by_router"}
    assert (res.trajectories.node == -1).all()  # never on a node (crashed before the fix)
    assert res.summary["rejected_by_router"] == 6
    assert res.summary["requests_completed"] == 0
    assert res.summary["routing_decisions"] == 0


def test_ttft_estimate_counts_the_prompts_already_routed():
    """6 prompts of 8,192 tokens at t = 0 on 2 idle nodes, rate r s/token, SLO 2.5 x 8,192 r:
    predictions (pending + 8,192) r: R0 (1, 1) x 8,192 r -> node 0; R1 (2, 1) -> node 1;
    R2 (2, 2) -> node 0; R3 -> node 1; R4, R5 (3, 3) > 2.5: refused. The requests routed in
    the same instant sit in the nodes' inboxes and count (they did not, before the fix)."""
    wl = requests_at({"count": 6, "prompt_tokens": 8192, "output_tokens": 2})
    hw = {"accelerator": H100, "kv_pool_bytes_per_gpu": 16e9}
    cluster = {"nodes": [{"count": 2}], "router": {"kind": "ttft_estimate"}}
    rate = build(scenario(REQUESTS, cluster, workload=wl, hardware=hw)).front.predicted_ttft_s(
        0, SimpleNamespace(prompt_tokens=1), 0
    )
    assert rate == pytest.approx(0.2512597761742201 / 8192, rel=1e-9)  # H100, 8B, 8,192 chunk
    cluster["router"]["ttft_slo_s"] = 2.5 * 8192 * rate
    res = run_scenario(scenario(REQUESTS, cluster, workload=wl, hardware=hw))
    r = res.requests
    assert r.node.tolist() == [0, 1, 0, 1, -1, -1]
    assert r.finish_reason.tolist()[4:] == ["rejected_by_router"] * 2
    assert res.trajectories.node.tolist() == [0, 1, 0, 1, -1, -1]
    assert (res.summary["rejected_by_router"], res.summary["routing_decisions"]) == (2, 4)
    assert r.ttft_s.iloc[0] == r.ttft_s.iloc[1] == pytest.approx(8192 * rate, rel=1e-9)


# --------------------------------------------------- one node: identical to no cluster
def _cut_at_receipt(source, **overrides):
    """The plain run with its runs cut where a post is received, as a cluster's nodes cut
    theirs (their router reads them between steps; ``Node.runs_past_receipt``); that it
    changes nothing but the decisions is tested in tests/engine/test_async_scheduling_engine.py."""
    sim = build(source, **overrides)
    sim.node.runs_past_receipt = False
    return sim.run()


def _identical(plain, clustered) -> None:
    for name in ("requests", "steps", "memory", "trajectories", "pauses"):
        a, b = getattr(plain, name), getattr(clustered, name)
        assert list(a.columns) == list(b.columns), name
        assert a.equals(b), name
    sa, sb = plain.summary, clustered.summary
    assert set(sb) - set(sa) == CLUSTER_KEYS
    assert set(sa) - set(sb) <= SINGLE_NODE_KEYS
    for key in set(sa) - PROVENANCE - SINGLE_NODE_KEYS:
        assert sa[key] == sb[key] or (
            isinstance(sa[key], float) and math.isnan(sa[key]) and math.isnan(sb[key])
        ), key
    assert clustered.summary["n_nodes"] == 1
    node = clustered.summary["nodes"][0]
    assert node["node_id"] == 0
    for key in set(node) - {"node_id", "routing_decisions"}:
        assert node[key] == sa[key] or (
            isinstance(node[key], float) and math.isnan(node[key]) and math.isnan(sa[key])
        ), key


@pytest.mark.parametrize(
    "router", [{"kind": "round_robin"}, {"kind": "prefix_affinity", "mu": 0.7}]
)
def test_a_one_node_cluster_is_the_plain_run(router):
    plain = _cut_at_receipt(scenario(CL4))
    clustered = run_scenario(scenario(CL4, {"nodes": [{"count": 1}], "router": router}))
    assert plain.summary["requests_completed"] > 50  # it ran something
    _identical(plain, clustered)
    assert clustered.summary["router"] == router["kind"]
    assert clustered.summary["routing_decisions"] == len(plain.requests)


@pytest.mark.parametrize("kind", ["round_robin", "prefix_affinity"])
def test_the_shipped_swarm_as_a_one_node_cluster(kind):
    """The lead's manual check, kept: coding_agent_swarm with 8 trajectories."""
    path = str(ROOT / "workloads" / "coding_agent_swarm.yaml")
    plain = _cut_at_receipt(path, **{"workload.num_trajectories": 8})
    one = {"nodes": [{"count": 1}], "router": {"kind": kind}}
    clustered = run_scenario(path, **{"workload.num_trajectories": 8, "cluster": one})
    _identical(plain, clustered)


# ------------------------------------------------------------- E17 / check T19
E17 = {
    "name": "e17",
    "seed": 0,
    "model": "llama-3.1-8b",
    "hardware": {"accelerator": H100, "kv_pool_bytes_per_gpu": 16e9},
    "allocator": {"kind": "radix"},
    "engine": {"exact": True},
    "workload": requests_at(  # the 32,000-token prefix, then the 40,000-token prompt
        {"at_s": 0.0, "prompt_tokens": 32_000, "shared_prefix_tokens": 32_000, "output_tokens": 1},
        {"at_s": 10.0, "prompt_tokens": 40_000, "shared_prefix_tokens": 32_000, "output_tokens": 1},
    ),
    "cluster": {"nodes": [{"count": 2}], "router": {"kind": "prefix_affinity", "mu": 1.0}},
}


def _check_e17(res) -> None:
    r = res.requests
    assert r.node.tolist() == [1, 1]  # the 40,000-token prompt follows its prefix
    big = r.iloc[1]
    assert (big.prompt_tokens, big.lookup_tokens, big.hit_tokens) == (40_000, 40_000, 32_000)
    assert big.hit_tokens // 16 == 2_000  # chunks skipped
    steps = res.steps
    assert (steps.node == 1).all()
    mine = steps[steps.start_s >= 10.0]
    assert mine.prefill_tokens.sum() == 8_000  # the suffix, and nothing else, is prefilled
    assert len(mine) == 1 and mine.n_prefill.iloc[0] == 1
    assert res.summary["prefill_tokens"] == 32_000 + 8_000
    assert res.summary["directory_entries"] == 2_500  # 2,000 prefix + 500 suffix chunks
    nodes = res.summary["nodes"]
    assert [n["routing_decisions"] for n in nodes] == [0, 2]
    assert nodes[0]["prefill_tokens"] == 0


def test_e17_t19_forty_thousand_token_prompt_goes_to_the_worker_holding_32000():
    """E17 (check T19): node 1 holds the first 32,000 tokens of a 40,000-token prompt;
    under pure affinity (mu = 1) the prompt goes to node 1, 2,000 chunks of 16 are skipped
    and 8,000 tokens are prefilled. The first request is placed on node 1 by hand (mu = 1
    with nothing cached anywhere would tie to node 0)."""
    sim = build(copy.deepcopy(E17))
    route = sim.front.router.route
    placed: list[int] = []

    def first_on_node_1(req, view):
        if not placed:
            placed.append(req.req_id)
            return 1
        return route(req, view)

    sim.front.router.route = first_on_node_1
    res = sim.run()
    assert placed == [0]
    _check_e17(res)
    # only the 40,000-token request was routed by reading the matches: Match/S = 0.8 (T19)
    assert res.summary["routed_match_rate"] == res.summary["global_match_rate"] == 0.8


def test_e17_t19_with_the_router_alone():
    """The same numbers with no hand placement: a long private request keeps node 0 busy,
    so F20 (mu = 0.5, L_max auto) sends the 32,000-token request to the idle node 1 (score 0
    against -0.5) and then the 40,000-token one too (0.5 * 0.8 = 0.4 against -0.5)."""
    wl = copy.deepcopy(E17["workload"])
    wl["requests"].insert(0, {"at_s": 0.0, "prompt_tokens": 16, "output_tokens": 4_000})
    for g in wl["requests"][1:]:
        g["at_s"] += 0.001
    res = run_scenario(
        scenario(
            E17,
            {"nodes": [{"count": 2}], "router": {"kind": "prefix_affinity", "mu": 0.5}},
            workload=wl,
        )
    )
    r = res.requests
    assert r.node.tolist() == [0, 1, 1]
    assert r.finish_s.iloc[0] > r.arrival_s.iloc[2]  # node 0 still busy at the big prompt
    big = r.iloc[2]
    assert (big.prompt_tokens, big.hit_tokens) == (40_000, 32_000)
    late = res.steps[(res.steps.node == 1) & (res.steps.start_s >= 10.0)]
    assert late.prefill_tokens.sum() == 8_000


def test_e17_under_round_robin_misses_the_cache():
    """Round robin sends the 40,000-token prompt to node 1 while the prefix sits on node 0:
    nothing is hit and all 40,000 tokens are prefilled."""
    sc = scenario(E17, {"nodes": [{"count": 2}], "router": {"kind": "round_robin"}})
    res = run_scenario(sc)
    r = res.requests
    assert r.node.tolist() == [0, 1]
    assert r.hit_tokens.tolist() == [0, 0]
    assert res.summary["routed_match_rate"] is None  # round robin reads no matches


# ------------------------------------------------------------- outputs of a cluster run
@pytest.fixture(scope="module")
def cl4_run():
    return run_scenario(scenario(CL4, CL4["cluster"]))


def test_the_run_folder_passes_the_schema(cl4_run, tmp_path):
    folder = cl4_run.write(tmp_path / "run")
    assert check_run_folder(folder) == []
    summary = json.loads((folder / "summary.json").read_text())
    assert [n["node_id"] for n in summary["nodes"]] == [0, 1, 2, 3]
    for name in ("requests", "steps", "memory", "trajectories", "pauses"):
        frame = pd.read_parquet(folder / f"{name}.parquet")
        assert "node" in frame.columns, name
        assert str(frame.node.dtype) == "int64", name


def test_the_cluster_summary_sums_its_nodes(cl4_run):
    s = cl4_run.summary
    nodes = s["nodes"]
    assert s["n_nodes"] == len(nodes) == 4
    assert s["router"] == "prefix_affinity"
    for key in ("requests_completed", "prefill_tokens", "output_tokens", "routing_decisions"):
        assert s[key] == sum(n[key] for n in nodes), key
    r = cl4_run.requests
    routed = r[r.node >= 0]
    assert s["routing_decisions"] == len(routed) == len(r)  # nothing refused
    assert [n["routing_decisions"] for n in nodes] == [
        int((routed.node == j).sum()) for j in range(4)
    ]
    assert all(n["routing_decisions"] > 0 for n in nodes)  # the router spread the load
    # heterogeneous pools: the H200 nodes hold more; the cluster's pool is the sum
    pools = [n["kv_pool_bytes"] for n in nodes]
    assert pools[0] == pools[1] and pools[2] == pools[3] and pools[2] > pools[0]
    assert s["kv_pool_bytes"] == sum(pools)
    assert [n["accelerator"] for n in nodes] == [H100, H100, H200, H200]
    assert s["accelerator"] == f"{H100}+{H200}"
    assert s["num_gpus"] == 4
    assert s["directory_entries"] > 0


def test_routed_match_never_exceeds_the_global_cache(cl4_run):
    s = cl4_run.summary
    assert 0.0 < s["routed_match_rate"] <= s["global_match_rate"] <= 1.0


def test_the_cluster_pool_equals_single_node_pools():
    one = {}
    for acc in (H100, H200):
        sim = build(scenario(CL4, hardware={"accelerator": acc}))
        one[acc] = round(sim.resolved.pool_bytes)
    sim = build(scenario(CL4, CL4["cluster"]))
    assert [round(p.resolved.pool_bytes) for p in sim.parts] == [
        one[H100], one[H100], one[H200], one[H200]
    ]  # fmt: skip


# ------------------------------------------------------------ scenario, schema, validate
def test_set_router_kind_drops_the_old_kinds_options():
    loaded = load_scenario(scenario(CL4, CL4["cluster"]), {"cluster.router.kind": "least_load"})
    router = loaded.scenario.cluster.router
    assert router.kind == "least_load"
    assert router.model_dump() == {"kind": "least_load", "by": "queue"}
    assert [g.count for g in loaded.scenario.cluster.nodes] == [2, 2]
    again = load_scenario(
        scenario(CL4, CL4["cluster"]), {"cluster.router.mu": 0.3, "cluster.router.gamma": 2}
    )
    assert (again.scenario.cluster.router.mu, again.scenario.cluster.router.gamma) == (0.3, 2)


def test_kvsim_schema_declares_the_cluster(run_cli):
    code, out, _ = run_cli("kvsim schema")
    assert code == 0
    schema = json.loads(out)
    assert "cluster" in schema["properties"]
    assert "ClusterSection" in schema["$defs"]
    text = json.dumps(schema["$defs"])
    for kind in ("round_robin", "least_load", "prefix_affinity", "session_affinity",
                 "ttft_estimate"):  # fmt: skip
        assert kind in text


def _write(tmp_path, data: dict, name: str = "cluster.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_kvsim_validate_names_the_cluster(run_cli, tmp_path):
    path = _write(tmp_path, scenario(CL4, CL4["cluster"]))
    code, out, err = run_cli(["validate", str(path)])
    assert code == 0, err
    assert out.strip().startswith(f"{path}: ok: cl4: cluster of 4 nodes ")
    assert "cluster of 4 nodes (2 x h100-sxm-80gb, 2 x h200-141gb), router prefix_affinity" in out
    code, out, _ = run_cli(["validate", str(path), "--set", "cluster.router.kind=least_load"])
    assert code == 0 and "router least_load" in out
    plain = _write(tmp_path, scenario(CL4), "plain.yaml")
    code, out, _ = run_cli(["validate", str(plain)])
    assert code == 0 and "cluster" not in out and "on 1 x h100-sxm-80gb" in out
    mixed = copy.deepcopy(CL4["cluster"])
    mixed["nodes"][1]["allocator"] = {"kind": "paged"}  # every group's allocator is named
    code, out, _ = run_cli(["validate", str(_write(tmp_path, scenario(CL4, mixed), "m.yaml"))])
    assert code == 0 and "allocator radix+paged," in out


# ------------------------------------------------------------------------- bad input
#: the cluster section of CL4 as written to the file (line numbers below count from 1)
BAD_CASES = [
    # (what to change, expected line, field, words the message must have)
    (lambda c: c["router"].update(kind="random"), 19, "cluster.router.kind",
     ["'random'", "round_robin", "least_load", "prefix_affinity", "session_affinity",
      "ttft_estimate"]),
    (lambda c: c["nodes"][1]["hardware"].update(gpus=2), 17, "cluster.nodes.1.hardware.gpus",
     ["unknown field", "valid:", "accelerator", "tp", "pp", "kv_pool_bytes_per_gpu"]),
    (lambda c: c["nodes"][1]["hardware"].update(tp=3), 17, "cluster.nodes.1.hardware.tp",
     ["tp=3", "32 query heads"]),
    (lambda c: c["nodes"][0].update(count=0), 16, "cluster.nodes.0.count", ["greater than or equal to 1"]),
    (lambda c: c["nodes"][0].update(count=255), 15, "cluster.nodes", ["257 nodes", "256"]),
    (lambda c: c["router"].update(mu=2), 19, "cluster.router.mu", ["less than or equal to 1"]),
    (lambda c: c["nodes"][0].update(tiers={"hbm": 1}), 16, "cluster.nodes.0.tiers",
     ["'hbm'", "host_kv_pool_bytes", "nvme_kv_pool_bytes"]),
    (lambda c: c["router"].update(kind="least_load"), 19, "cluster.router.mu",
     ["unknown field", "by", "kind"]),
]  # fmt: skip


def _bad_file(tmp_path, change) -> str:
    data = scenario(CL4, CL4["cluster"])
    change(data["cluster"])
    lines = ["name: cl4", "seed: 1", "model: llama-3.1-8b",
             "hardware: {accelerator: h100-sxm-80gb}", "allocator: {kind: radix}",
             "workload:", "  kind: coding_agent", "  num_trajectories: 4",
             "  arrival: {kind: closed_loop, concurrency: 4}", "", "", "",
             "", "cluster:", "  nodes:"]  # fmt: skip
    for g in data["cluster"]["nodes"]:
        lines.append("    - " + json.dumps(g))
    lines += ["", "  router: " + json.dumps(data["cluster"]["router"])]
    path = tmp_path / "bad.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("change,line,field,words", BAD_CASES)
def test_bad_cluster_input_is_one_located_line(run_cli, tmp_path, change, line, field, words):
    path = _bad_file(tmp_path, change)
    code, out, err = run_cli(["validate", path])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"kvsim: error: {path}:{line}: {field}: "), err
    for w in words:
        assert w in err, (w, err)


def test_bad_cluster_input_through_the_api_is_a_config_error(tmp_path):
    path = _bad_file(tmp_path, lambda c: c["nodes"][1]["hardware"].update(tp=3))
    with pytest.raises(ConfigError) as exc:
        build(path)
    assert exc.value.field == "cluster.nodes.1.hardware.tp"
    assert str(exc.value).startswith(f"{path}:17: ")


def test_more_than_256_nodes_in_one_group():
    with pytest.raises(ConfigError) as exc:
        load_scenario(scenario(CL4, {"nodes": [{"count": 257}]}))
    assert "cluster.nodes.0.count" in str(exc.value) and "256" in str(exc.value)


# ------------------------------------------------------------------------ determinism
def test_same_seed_same_summary():
    cluster = {
        "nodes": [{"count": 3}],
        "router": {"kind": "prefix_affinity", "mu": 0.6, "directory_update_delay_s": 0.5},
    }
    a = run_scenario(scenario(CL4, cluster))
    b = run_scenario(scenario(CL4, cluster))
    sa, sb = dict(a.summary), dict(b.summary)
    sa.pop("wall_time_s"), sb.pop("wall_time_s")
    assert json.dumps(sa, sort_keys=True, default=str) == json.dumps(sb, sort_keys=True, default=str)
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps)
    assert sa["directory_staleness_s"] > 0  # the delay took effect
    assert sa["routing_decisions"] == len(a.requests)


# ------------------------------------------------------------- the review's findings
def test_requests_on_the_network_at_the_horizon_are_recorded_unfinished():
    """With a network delay and a horizon, requests routed but not yet arrived at a node
    when the run ends are rows of requests.parquet (unfinished), never lost."""
    sc = scenario(
        REQUESTS,
        {"nodes": [{"count": 2}], "router": {"kind": "round_robin"}, "network_delay_s": 0.05},
        workload=requests_at(
            {"count": 400, "at_s": 0.0, "interval_s": 0.0125, "prompt_tokens": 64,
             "output_tokens": 4}
        ),
        duration_s=5.0,
        engine={"exact": False},
    )
    res = run_scenario(sc)
    s = res.summary
    assert s["routing_decisions"] == 400
    assert s["requests_submitted"] == len(res.requests) == 400
    assert s["requests_completed"] + s["unfinished"] == 400
    late = res.requests[res.requests.arrival_s > 5.0 - 0.05]
    assert len(late) > 0 and (late.status == "waiting").all()


def test_the_front_forgets_sequences_the_nodes_released():
    """A last turn (or a refusal) releases its sequence on the node: the front's map of
    sequence homes is empty at the end of an agent run."""
    sim = build(scenario(CL4, CL4["cluster"]))
    sim.run()
    assert sim.front.home == {}
    assert all(sim.front.outstanding(j) == 0 for j in range(4))


def test_kvsim_validate_names_a_disaggregated_cluster_as_the_run_does(run_cli):
    """A prefill/decode cluster places requests itself (a router is refused there), and its
    run's summary says ``router: disaggregated``; validate used to print the unused default
    ``router round_robin``. It now names the roles' node counts."""
    path = ROOT / "workloads" / "pd_coding_agents.yaml"  # 1 prefill + 3 decode nodes
    code, out, err = run_cli(["validate", str(path)])
    assert code == 0, err
    assert "cluster of 4 nodes (4 x h100-sxm-80gb (tp 4)), router disaggregated (1 prefill + 3 decode)," in out
    assert "round_robin" not in out

"""Reports of cluster runs (issue 17): per-node panels and the cluster's sum that plot the
tables, the per-node table and text rows, pool shares of the whole cluster, ``kvsim
compare`` of two routers, one trace process per node, ``node=`` in the notebook helpers."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from report_helpers import external_urls

from sim.errors import KvsimError
from sim.report import (
    plot_batch,
    plot_efficiency,
    plot_latency_cdf,
    plot_memory,
    plot_prefix,
    series,
)
from sim.report import plots as P
from sim.report.data import load_run, node_ids, select_node
from sim.report.pool import SHARES, pool_shares
from sim.report.text import summary_rows, summary_table
from sim.report.trace import trace_events

#: 2 heterogeneous nodes, 3 short coding-agent trajectories (about a second to run)
CLUSTER_YAML = """\
name: cl2
seed: 3
model: llama-3.1-8b
hardware: {accelerator: h100-sxm-80gb}
allocator: {kind: radix}
workload:
  kind: coding_agent
  num_trajectories: 3
  arrival: {kind: closed_loop, concurrency: 3}
cluster:
  nodes:
    - {count: 1}
    - {count: 1, hardware: {accelerator: h200-141gb}}
  router: {kind: least_load}
"""
HBM_GB = {0: 85_899_345_920 / 1e9, 1: 150_754_820_096 / 1e9}  # one H100, one H200


@pytest.fixture(scope="module")
def cluster_yaml(tmp_path_factory):
    path = tmp_path_factory.mktemp("cluster") / "cl2.yaml"
    path.write_text(CLUSTER_YAML, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def cluster_run(cluster_yaml):
    from sim.run import run_scenario

    run = run_scenario(str(cluster_yaml))
    assert node_ids(load_run(run)) == [0, 1]
    assert set(run.memory.node) == {0, 1}  # both nodes recorded memory
    return run


def _node_rows(frame: pd.DataFrame, node: int) -> pd.DataFrame:
    return frame[frame.node == node].reset_index(drop=True)


def test_node_sum_is_each_nodes_step_function_summed_on_the_union_of_times():
    frame = pd.DataFrame({"t_s": [0.0, 2.0, 1.0, 3.0, 3.0], "node": [0, 0, 1, 1, 1],
                          "x": [10.0, 20.0, 5.0, 7.0, 9.0]})  # fmt: skip
    s = series.node_sum(frame, ["x"])
    assert s.t_s.tolist() == [0.0, 1.0, 2.0, 3.0]
    # node 1 has nothing before t=1; at t=3 its last row (9) counts, not the first (7)
    assert s.x.tolist() == [10.0, 15.0, 25.0, 29.0]
    assert series.node_sum(frame, ["x"], {1: 2.0}).x.tolist() == [10.0, 20.0, 30.0, 38.0]


def test_summed_memory_equals_a_hand_computation_from_the_table(cluster_run):
    mem = cluster_run.memory
    s = series.node_sum(mem, ["useful_bytes", "gpu_free_bytes"])
    for t, useful, free in zip(s.t_s, s.useful_bytes, s.gpu_free_bytes, strict=True):
        want_useful = want_free = 0.0
        for node in (0, 1):
            rows = mem[(mem.node == node) & (mem.t_s <= t)]
            if len(rows):
                want_useful += float(rows.useful_bytes.iloc[-1])
                want_free += float(rows.gpu_free_bytes.iloc[-1])
        assert (useful, free) == (want_useful, want_free)
    assert len(s) == mem.t_s.nunique()


def test_memory_and_efficiency_have_a_panel_per_node_that_plots_its_rows(cluster_run):
    mem = cluster_run.memory
    assert len(mem) <= series.MAX_POINTS
    fig = plot_memory(cluster_run)
    assert [ax.get_title() for ax in fig.axes] == [
        "node 0 (h100-sxm-80gb): HBM per GPU by use", "node 1 (h200-141gb): HBM per GPU by use"]
    for node in (0, 1):
        rows = _node_rows(mem, node)
        stack = series.memory_stack(rows)
        for col, label in series.PHYSICAL_PARTS.items():
            assert np.array_equal(stack.layers[label], rows[col].to_numpy() / 1e9), col
        assert np.allclose(sum(stack.layers.values()), HBM_GB[node], rtol=1e-12)
    eff = plot_efficiency(cluster_run)
    assert len(eff.axes) == 2
    for node, ax in enumerate(eff.axes):
        rows = _node_rows(mem, node)
        # the raw series (light under a time-binned mean when the node has many rows)
        lines = {ln.get_label().removesuffix(" (raw)"): ln for ln in ax.lines if ln.get_alpha()}
        assert np.array_equal(lines["eta_alloc"].get_xdata(), rows.t_s.to_numpy())
        assert np.array_equal(lines["eta_effective"].get_ydata(), rows.eta_effective.to_numpy())
    assert len(plot_batch(cluster_run).axes) == 2


def test_beyond_the_panel_limit_the_plots_draw_the_clusters_sum(cluster_run, monkeypatch):
    monkeypatch.setattr(P, "MAX_NODE_PANELS", 1)
    mem = cluster_run.memory
    fig = plot_memory(cluster_run)
    assert len(fig.axes) == 1 and fig.axes[0].get_title().startswith("cluster HBM by use (2 nodes")
    stack = series.cluster_memory_stack(mem, {0: 1.0, 1: 1.0})
    summed = series.node_sum(mem, list(series.PHYSICAL_PARTS))
    assert np.array_equal(stack.layers["free"], summed.gpu_free_bytes.to_numpy() / 1e9)
    # once both nodes record, the stack's top is both GPUs' HBM
    both = stack.t_s >= mem.groupby("node").t_s.min().max()
    assert both.any()
    assert np.allclose(sum(stack.layers.values())[both], HBM_GB[0] + HBM_GB[1], rtol=1e-12)
    pools = {n["node_id"]: n["kv_pool_bytes"] for n in cluster_run.summary["nodes"]}
    lines = {ln.get_label(): ln for ln in plot_efficiency(cluster_run).axes[0].lines}
    lines = {k.removesuffix(" (raw)"): v for k, v in lines.items() if k.endswith(" (raw)")} or lines
    s = series.node_sum(mem, ["useful_bytes"])
    assert np.allclose(lines["eta_effective"].get_ydata()[both],
                       (s.useful_bytes / sum(pools.values())).to_numpy()[both])  # fmt: skip


def test_latency_pools_every_request_and_adds_each_nodes_ttft(cluster_run):
    lat = {ln.get_label(): ln for ln in plot_latency_cdf(cluster_run).axes[0].lines}
    req = cluster_run.requests
    assert np.array_equal(lat["TTFT"].get_xdata(), np.sort(req.ttft_s.dropna().to_numpy()))
    for node in (0, 1):
        ttft = np.sort(req.ttft_s[req.node == node].dropna().to_numpy())
        assert np.array_equal(lat[f"TTFT node {node}"].get_xdata(), ttft)
    dots = {ln.get_label(): ln for ln in plot_prefix(cluster_run).axes[0].lines}
    assert set(dots) <= {"node 0", "node 1"} and dots


def test_helpers_draw_one_node_and_name_a_missing_one(cluster_run):
    fig = plot_memory(cluster_run, node=1)
    assert len(fig.axes) == 1 and fig.axes[0].get_title() == "HBM per GPU by use"
    one = select_node(cluster_run, 1)
    assert one.summary["node_id"] == 1 and set(one.requests.node) == {1}
    assert len(one.memory) == int((cluster_run.memory.node == 1).sum())
    with pytest.raises(KvsimError, match=r"^cl2: no node 5 \(nodes: 0, 1\)$"):
        plot_memory(cluster_run, node=5)


def test_pool_shares_are_of_the_whole_clusters_pool(cluster_run):
    shares = pool_shares(cluster_run)
    assert all(0.0 <= shares[k] <= 1.0 for k in SHARES) and abs(sum(shares.values()) - 1) < 1e-12
    # = each node's shares weighted by its pool x time
    weights = {}
    for n in cluster_run.summary["nodes"]:
        rows = _node_rows(cluster_run.memory, n["node_id"])
        span = max(n["sim_time_s"], rows.t_s.iloc[-1]) - rows.t_s.iloc[0]
        weights[n["node_id"]] = n["kv_pool_bytes"] * span
    per = {i: pool_shares(select_node(cluster_run, i)) for i in weights}
    for k in ("token_states", "reserved", "internal", "cached"):
        want = sum(per[i][k] * w for i, w in weights.items()) / sum(weights.values())
        assert shares[k] == pytest.approx(want, rel=1e-9), k


def test_text_table_names_the_router_and_each_nodes_decisions(cluster_run):
    s = cluster_run.summary
    decisions = [n["routing_decisions"] for n in s["nodes"]]
    rows = summary_rows(s)
    assert ("router", "least_load, 2 nodes", "") in rows
    assert ("routing decisions per node", f"{decisions[0]:,} / {decisions[1]:,}", "count") in rows
    single = {k: v for k, v in s.items() if k not in ("nodes", "router")}
    assert not [r for r in summary_rows(single) if r[0].startswith("rout")]
    assert "least_load, 2 nodes" in summary_table(s)


def test_kvsim_run_of_a_cluster_writes_a_report_with_a_node_table(cluster_yaml, tmp_path, run_cli):
    out = tmp_path / "c"
    code, stdout, stderr = run_cli(["run", str(cluster_yaml), "--out", str(out), "--trace"])
    assert code == 0, stderr
    assert "routing decisions per node" in stdout
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "<h2>Nodes</h2>" in html and "<td>h200-141gb</td>" in html
    assert "<th>routing decisions</th>" in html and external_urls(html) == []
    summary = json.loads((out / "summary.json").read_text())
    for n in summary["nodes"]:
        assert f"<tr><td>{n['node_id']}</td><td>{n['accelerator']}</td>" in html


def test_trace_puts_each_node_in_its_own_process(cluster_run):
    events = trace_events(cluster_run)["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {1: "node 0", 2: "node 1"}  # pid = node + 1 (pid 0 is special)
    assert {e["pid"] for e in events} == {1, 2}
    steps = cluster_run.steps
    for node in (0, 1):
        mine = [e for e in events if e["ph"] == "X" and e.get("cat") == "step" and e["pid"] == node + 1]
        rows = steps[(steps.node == node) & (steps.n_steps > 0)]
        assert len(mine) == len(rows)
        assert sum(e["args"]["n_steps"] for e in mine) == int(rows.n_steps.sum())
        pauses = [e for e in events if e["ph"] == "b" and e["name"].startswith("pause ")
                  and e["pid"] == node + 1]  # fmt: skip
        assert len(pauses) == int((cluster_run.pauses.node == node).sum())
    opened: dict = {}
    for e in events:  # nodes number pauses alike: ids stay distinct, every begin ends
        if e["ph"] == "b":
            opened.setdefault((e["cat"], e["id"]), []).append((e["pid"], e["name"]))
        elif e["ph"] == "e":
            assert opened[(e["cat"], e["id"])].pop() == (e["pid"], e["name"])
    assert all(not v for v in opened.values())
    begins = [e["id"] for e in events if e["ph"] == "b" and e["name"].startswith("pause ")]
    assert len(begins) == len(set(begins)) == len(cluster_run.pauses)


def test_compare_two_routers_on_a_cluster(cluster_yaml, tmp_path, run_cli):
    out = tmp_path / "cmp"
    argv = ["compare", str(cluster_yaml), "--vary", "cluster.router.kind=least_load,prefix_affinity",
            "--out", str(out), "--workers", "1", "--no-report", "--quiet"]  # fmt: skip
    code, _, stderr = run_cli(argv)
    assert code == 0, stderr
    frame = pd.read_parquet(out / "compare.parquet")
    assert list(frame.variant) == ["cluster.router.kind=least_load",
                                   "cluster.router.kind=prefix_affinity"]  # fmt: skip
    assert frame.error.isna().all()
    pool = frame[[f"pool_{k}" for k in SHARES]].to_numpy()
    assert (pool >= 0).all() and np.allclose(pool.sum(axis=1), 1.0)
    for row in frame.itertuples():
        summary = json.loads((out / row.variant / "summary.json").read_text())
        assert summary["router"] == row.variant.split("=")[1]
        assert row.requests_completed == summary["requests_completed"]
        assert row.routing_decisions == summary["routing_decisions"]
    # the same runs read back as run folders give the same rows
    again = tmp_path / "again"
    dirs = [str(out / v) for v in frame.variant]
    assert run_cli(["compare", *dirs, "--out", str(again), "--quiet"])[0] == 0
    back = pd.read_parquet(again / "compare.parquet")
    assert np.allclose(back["ttft_s.p99"], frame["ttft_s.p99"])
    assert np.allclose(back[[f"pool_{k}" for k in SHARES]].to_numpy(), pool)

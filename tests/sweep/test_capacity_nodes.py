"""``kvsim capacity --search nodes``: the smallest node count meeting the SLOs.

The tiny closed loop of ``conftest.TINY`` (8 agents on a ~1.9 GB pool) misses a 0.5 s
TTFT p99 on one node (preemptions, queueing: ~1.0-1.3 s over seeds 3-5) and meets it on
two behind ``least_load`` (~0.13-0.23 s), so the answer is exactly 2, from a scenario without ``cluster:``
(one node of its hardware) and from a one-group cluster alike.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from sim.errors import KvsimError
from sim.run import run_scenario
from sim.sweep import find_capacity
from sim.sweep.capacity import NODES_KEY, _Search, load_overrides
from sim.sweep.slo import measure
from sim.sweep.task import memory_figures

SLO = "ttft_p99_s=0.5"


def test_fewest_search_brackets_up_then_bisects_down():
    s, tried = _Search(integer=True, fewest=True, next=1, limit=256), []
    while not s.done:
        tried.append(int(s.next))
        s.record(s.next, s.next >= 5, 10)  # 5 nodes or more pass
    assert tried == [1, 2, 3, 5, 4] and s.capacity == 5 and s.converged
    assert (s.at, s.beyond) == (5, 4)  # the answer's run and the failing one below it
    s = _Search(integer=True, fewest=True, next=8, limit=256)
    tried = []
    while not s.done:
        tried.append(int(s.next))
        s.record(s.next, s.next >= 5, 10)
    assert tried == [8, 5, 3, 4] and s.capacity == 5  # /1.5 down while it passes
    never = _Search(integer=True, fewest=True, next=2, limit=4)
    while not never.done:
        never.record(never.next, False, 10)
    assert never.capacity is None and not never.converged  # no count up to the limit


def test_node_overrides_for_a_plain_and_a_cluster_scenario():
    assert load_overrides("nodes", 3, (1.0, 1, "cluster.nodes")) == {
        "cluster.nodes": [{"count": 3}]
    }
    assert load_overrides("nodes", 3, (2.0, 2, NODES_KEY)) == {NODES_KEY: 3}


def _answer(res) -> list:
    fails = {p["replication"] for p in res.points if p["load"] == 1 and not p["passed"]}
    passes = {p["replication"] for p in res.points if p["load"] == 2 and p["passed"]}
    assert fails == passes == set(range(len(res.seeds)))  # 1 fails, 2 meets, per seed
    return res.capacity["per_replication"]


def test_plain_scenario_needs_two_nodes(tiny):
    sets = {"cluster.router.kind": "least_load"}  # the nodes the search adds get a router
    res = find_capacity(tiny, [SLO], search="nodes", sets=sets, replications=2, workers=1)
    assert _answer(res) == [2, 2] and res.capacity["value"] == 2
    assert res.capacity["converged"] and res.capacity["unit"] == "nodes"
    assert res.load_key == NODES_KEY


def test_one_group_cluster_needs_two_nodes(tiny):
    text = tiny.read_text() + "cluster:\n  nodes: [{count: 4}]\n  router: {kind: least_load}\n"
    tiny.write_text(text)
    res = find_capacity(tiny, [SLO], search="nodes", replications=1, workers=1)
    assert _answer(res) == [2] and res.capacity["value"] == 2
    assert all(p["load"] <= 4 for p in res.points)


def test_several_groups_are_refused_in_one_line(tiny):
    sets = {"cluster.nodes": [{"count": 1}, {"count": 2}]}
    with pytest.raises(KvsimError) as exc:
        find_capacity(tiny, [SLO], search="nodes", sets=sets, replications=1, workers=1)
    msg = str(exc.value)
    assert "scales one node group" in msg and "2 groups (1 + 2 nodes)" in msg
    assert "\n" not in msg


def test_cli_prints_the_smallest_count(run_cli, tiny):
    args = ["capacity", str(tiny), "--slo", SLO, "--search", "nodes", "--replications", "1",
            "--set", "cluster.router.kind=least_load"]  # fmt: skip
    code, out, err = run_cli([*args, "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["capacity"]["per_replication"] == [2] and doc["capacity"]["unit"] == "nodes"
    code, out, err = run_cli(args)
    assert code == 0, err
    assert "the smallest node count meeting ttft_p99_s<=0.5" in out
    assert "capacity:  2 nodes" in out


def _cluster_mean(mem, column: str, lo: float, hi: float) -> float:
    """The cluster total (the nodes' step functions added) averaged over [lo, hi], on the
    union of every node's sample times: an implementation independent of the task's."""
    nodes = [g.sort_values("t_s", kind="stable") for _, g in mem.groupby("node")]
    grid = np.unique(np.concatenate([[lo, hi], mem.t_s.to_numpy()]))
    grid = grid[(grid >= lo) & (grid <= hi)]
    area = 0.0
    for a, b in zip(grid[:-1], grid[1:], strict=True):
        total = 0.0
        for g in nodes:
            before = g[g.t_s <= a]
            total += float(before[column].iloc[-1]) if len(before) else float(g[column].iloc[0])
        area += total * (b - a)
    return area / (hi - lo)


def test_a_cluster_probe_sums_the_nodes_memory(tiny):
    """The gap's memory figures of a cluster run are the cluster's: each node's samples
    are its own step function (before, the concatenated frame was read as one, right only
    when every node but the last ended empty; a run cut by duration_s does not)."""
    sets = {"cluster.nodes": [{"count": 2}], "cluster.router.kind": "least_load",
            "duration_s": 8}  # fmt: skip
    res = run_scenario(str(tiny), **sets)
    assert res.memory.groupby("node").allocated_bytes.last().iloc[0] > 0  # node 0 not empty
    measured = measure(res, 0.2)
    lo, hi = 1.0, 7.0  # a window inside the run (a cut run's own has no end)
    measured["window_s"] = {"start": lo, "end": hi}
    got = memory_figures(res, measured)["allocated_bytes_mean"]
    assert got == pytest.approx(_cluster_mean(res.memory, "allocated_bytes", lo, hi), rel=1e-9)
    assert 0 < got <= res.summary["kv_pool_bytes"]

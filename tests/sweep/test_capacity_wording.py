"""What ``kvsim capacity`` and ``kvsim validate`` say: loud about a measurement window that
describes little of the runs, node counts in words, no Python ``None`` in the gap, and a
sweep over a cluster described as the cluster it is.

The tiny closed loop of ``conftest.TINY`` with as many trajectories as agents (8) starts
every agent at once: with ``stagger_s`` 0.05 the last start is (c - 1) x 0.05 s into a ~7-20 s run,
so the window is a few % of it (before, nothing said so); without a stagger every start is
at t = 0 and each run is measured whole.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.cli.capacity import _progress
from sim.sweep import find_capacity
from sim.sweep.capacity import _Search
from sim.sweep.gap import explain_gap
from sim.sweep.slo import MIN_WINDOW_REQUESTS, window_warnings

AS_MANY = {"workload.num_trajectories": 8, "workload.arrival.stagger_s": 0.05}
FIX = "--set workload.num_trajectories=24 (now 8 for concurrency 8; the search keeps the ratio"


def _label(load: float) -> str:
    return f"at load {load:g}"


def _point(load, start, end, sim_s, n, **extra) -> dict:
    return {"load": load, "window_s": {"start": start, "end": end}, "window_requests": n,
            "memory": {"sim_time_s": sim_s}, "error": None, **extra}  # fmt: skip


def test_window_warnings_name_each_shortfall_and_its_worst_run():
    points = [
        _point(4, 1.15, 5.75, 1000.0, 400),  # 0.46 % of the run
        _point(6, 2.0, 12.0, 500.0, 60),  # 2 %, and 60 requests
        _point(9, 10.0, 800.0, 1000.0, 5000),  # fine
        _point(12, 0.0, None, 900.0, 5000),  # every start at t = 0: measured whole
        {"load": 15, "error": "boom", "window_s": None},  # a failed run is not judged
    ]
    (line,) = window_warnings(points, "FIX", _label)
    assert line.startswith("WARNING: the SLO window covers under 10% of the simulated time in 2 of 4 runs")
    assert "(narrowest: 1.15 - 5.75 s of 1,000 s, 0.5%, at load 4)" in line
    assert "every trajectory starts at t = 0 in 1 of 4 runs" in line
    assert f"fewer than {MIN_WINDOW_REQUESTS} requests arrived in the SLO window in 1 of 4 runs" in line
    assert "(fewest: 60, at load 6)" in line and line.endswith("Fix: FIX")
    assert window_warnings([_point(9, 10.0, 800.0, 1000.0, 5000)], "FIX", _label) == []


def test_a_search_with_as_many_trajectories_as_agents_warns(tiny, run_cli, tmp_path):
    res = find_capacity(tiny, ["ttft_p99_s=0.5"], sets=AS_MANY, replications=1,
                        executor="inline", max_points=2)  # fmt: skip
    line, unbound = res.warnings
    assert "the SLO window covers under 10% of the simulated time in 2 of 2 runs" in line
    # the window ends at the last agent's start: it measures the ramp-up, fewer than c agents
    assert unbound.startswith("WARNING: the load setting did not bind: at capacity the runs kept ")
    assert "lies in the agents' ramp-up (one starts every 0.05 s" in unbound
    assert FIX in unbound
    assert FIX in line and "no window option" in line
    lo, hi = (f(p["load"] for p in res.points) for f in (min, max))  # as many as agents
    assert f"the ratio: its runs had {lo:g} - {hi:g} trajectories for concurrency {lo:g} - {hi:g}) (" in line
    for p in res.points:  # the window ends at the last agent's start, (c - 1) x 0.05 s
        assert p["window_s"]["end"] == pytest.approx((p["load"] - 1) * 0.05)
    out_dir = tmp_path / "cap"
    args = ["capacity", str(tiny), "--slo", "ttft_p99_s=0.5", "--replications", "1",
            "--max-points", "2", "--workers", "1",
            "--set", "workload.num_trajectories=8", "--set", "workload.arrival.stagger_s=0"]  # fmt: skip
    code, out, err = run_cli([*args, "--out", str(out_dir)])
    assert code == 0, err
    (printed,) = [x for x in out.splitlines() if "WARNING" in x]
    assert printed.startswith("  WARNING: every trajectory starts at t = 0 in 2 of 2 runs")
    doc = json.loads((out_dir / "capacity.json").read_text())
    assert doc["warnings"] == [printed.strip()]
    assert all(p["window_s"]["end"] is None for p in doc["points"])


def test_enough_trajectories_give_no_window_warning(tiny):
    sets = {"workload.num_trajectories": 48}  # 6 x the agents: ~100-190 requests per window
    res = find_capacity(tiny, ["ttft_p99_s=0.5"], sets=sets, replications=1,
                        executor="inline", max_points=2)  # fmt: skip
    assert res.warnings == []
    assert all(p["window_requests"] >= MIN_WINDOW_REQUESTS for p in res.points)


def test_progress_names_node_counts(capsys):
    _progress("nodes", {"load": 2, "seed": 3, "passed": True})
    _progress("nodes", {"load": 1, "seed": 3, "passed": False, "reasons": ["r"]})
    _progress("concurrency", {"load": 12, "seed": 4, "passed": True})
    assert capsys.readouterr().err.splitlines() == [
        "  2 nodes seed 3: meets the SLOs",
        "  1 node seed 3: fails the SLOs: r",
        "  load 12 seed 4: meets the SLOs",
    ]


def _probe(load, queue_p99_s, preemptions, reasons=()) -> dict:
    return {"replication": 0, "load": load, "reasons": list(reasons), "error": None,
            "memory": {"queue_p99_s": queue_p99_s, "preemptions": preemptions}}  # fmt: skip


EST = {"value": None, "peak_value": None, "inputs": {}}


def test_node_gap_at_the_bottom_of_the_range_prints_no_none():
    s = _Search(integer=True, fewest=True, hi=1)  # one node passed: nothing smaller to try
    gap = explain_gap(1, EST, [s], [_probe(1, 0.0192, 0)])
    assert gap["explanation"] == [
        "preemptions: 0 at capacity, n/a (no smaller count failed)",
        "prefill queueing: queue p99 0.0192 s at capacity, n/a (no smaller count failed)",
    ]


def test_node_gap_names_the_failing_side_fewer_nodes():
    s = _Search(integer=True, fewest=True, lo=3, hi=4)
    points = [_probe(3, 6.6451, 5, ["ttft_p99_s = 6.805 s > 1 s"]), _probe(4, 0.0202, 0)]
    assert explain_gap(4, EST, [s], points)["explanation"] == [
        "preemptions: 0 at capacity, 5 with fewer nodes",
        "prefill queueing: queue p99 0.0202 s at capacity, 6.645 s below",
        "with fewer nodes: ttft_p99_s = 6.805 s > 1 s",
    ]
    load = _Search(integer=True, lo=4, hi=5)  # a load search keeps its words
    points = [_probe(4, 0.0202, 0), _probe(5, 6.6451, 5, ["ttft_p99_s = 6.805 s > 1 s"])]
    assert explain_gap(4, EST, [load], points)["explanation"] == [
        "preemptions: 0 at capacity, 5 at the next load tried",
        "prefill queueing: queue p99 0.0202 s at capacity, 6.645 s above",
        "above capacity: ttft_p99_s = 6.805 s > 1 s",
    ]


def test_one_node_answer_is_singular_and_has_no_none(run_cli, tiny):
    code, out, err = run_cli(["capacity", str(tiny), "--slo", "ttft_p99_s=100", "--search",
                              "nodes", "--replications", "1"])  # fmt: skip
    assert code == 0, err
    assert "  capacity:  1 node; per replication 1" in out
    assert "None" not in out and "n/a (no smaller count failed)" in out
    assert "  1 node seed 3: meets the SLOs" in err.splitlines()


@pytest.fixture
def cluster_sweep(tiny):
    tiny.write_text(tiny.read_text() + "cluster:\n  nodes: [{count: 4}]\n  router: {kind: least_load}\n")
    path = tiny.with_name("cluster_sweep.yaml")
    path.write_text("schema_version: 1\nname: cs\nsweep:\n  base: tiny.yaml\n"
                    "  grid: {cluster.router.kind: [least_load, round_robin]}\n")  # fmt: skip
    return path


def test_validate_describes_a_cluster_sweeps_base_as_the_cluster(run_cli, cluster_sweep):
    code, out, err = run_cli(["validate", str(cluster_sweep)])
    assert code == 0, err
    assert "= 2 runs of tiny.yaml (tiny_agents: cluster of 4 nodes (4 x h100-sxm-80gb), router least_load, llama-3.1-8b" in out
    assert "on 1 x" not in out


def test_the_fix_states_the_counts_the_search_ran():
    """With an H200 the search ran 53 and 80 agents (80 and 120 trajectories), yet the fix
    said only "now 12 for concurrency 8" (the scenario's own numbers)."""
    from sim.scenario import load_scenario
    from sim.sweep.capacity import window_fix

    root = Path(__file__).resolve().parents[2]
    loaded = load_scenario(str(root / "workloads" / "coding_agents_capacity.yaml"), {})
    fix = window_fix(loaded, "concurrency", [53.0, 80.0, 66.0])
    assert fix.startswith(
        "give more trajectories than agents, num_trajectories >= ~3 x concurrency: --set "
        "workload.num_trajectories=24 (now 12 for concurrency 8; the search keeps the ratio: "
        "its runs had 80 - 120 trajectories for concurrency 53 - 80) (capacity has no window "
        "option"
    )
    assert "(now 12 for concurrency 8) (" in window_fix(loaded, "nodes", [1.0, 2.0])  # kept

"""``kvsim capacity``: SLO names, the search, paired seeds, more HBM, the JSON answer."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from sim.errors import KvsimError
from sim.run import run_scenario
from sim.sweep import find_capacities, find_capacity, parse_slo
from sim.sweep.capacity import _Search
from sim.sweep.slo import measure, verdict
from sim.sweep.stats import ci95, paired_difference

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "workloads" / "coding_agents_capacity.yaml"
MEM = "hardware.accelerator_overrides.memory_bytes"


@pytest.mark.parametrize(
    "text, key",
    [
        ("ttft_p99_s=2", "ttft_s.p99"),
        ("itl_p50_s=0.05", "itl_s.p50"),
        ("e2e_mean_s=30", "e2e_s.mean"),
        ("queue_p90_s=1", "queue_s.p90"),
        ("ttft_p95_s=2", "ttft_s.p95"),
        ("resume_latency_p99_s=1.5", "resume_latency_s.p99"),
    ],
)
def test_slo_names_map_to_summary_keys(text, key):
    assert parse_slo(text).summary_key == key


@pytest.mark.parametrize(
    "text, needle",
    [
        ("ttft_p999_s=2", "ttft_<mean|p50|p90|p95|p99>_s"),
        ("tpot_p99_s=2", "resume_latency_<mean|p50|p90|p95|p99>_s"),
        ("ttft_p99_s", "expected METRIC=SECONDS"),
        ("ttft_p99_s=-1", "positive, finite"),
        ("ttft_p99_s=nan", "positive, finite"),
        ("ttft_p99_s=fast", "not a number"),
    ],
)
def test_bad_slo_is_one_line(text, needle):
    with pytest.raises(KvsimError) as exc:
        parse_slo(text)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_search_brackets_then_bisects_to_the_boundary():
    capacity = 37  # a replication whose runs pass up to 37 agents

    def search(start: int, max_points: int = 20) -> tuple[_Search, list[int]]:
        s, tried = _Search(integer=True, next=start), []
        while not s.done:
            tried.append(int(s.next))
            s.record(s.next, s.next <= capacity, max_points)
        return s, tried

    s, tried = search(10)
    assert tried[:4] == [10, 15, 23, 35] and tried[4] == 53  # x1.5 up while it passes
    assert s.capacity == 37 and s.converged and s.lo == 37 and s.hi == 38
    s, tried = search(100)
    assert tried[:3] == [100, 66, 44] and s.capacity == 37  # /1.5 down while it fails
    s, tried = search(10, max_points=4)
    assert len(tried) == 4 and not s.converged and s.capacity == 35  # the budget ends it
    never = _Search(integer=True, next=3)
    while not never.done:
        never.record(never.next, False, 10)
    assert never.capacity == 0 and never.converged


def test_measurement_window_excludes_warm_up_and_drain(tiny):
    res = run_scenario(str(tiny))
    whole = measure(res, warmup_fraction=0.0)
    last_start = float(res.trajectories.start_s.max())
    assert whole["window_s"] == {"start": 0.0, "end": last_start}
    req = res.requests
    inside = req[req.arrival_s <= last_start]
    assert whole["ttft_s"]["mean"] == pytest.approx(inside.ttft_s.mean())
    later = measure(res, warmup_fraction=0.5)
    assert later["window_s"]["start"] == pytest.approx(0.5 * last_start)
    inside = req[(req.arrival_s >= 0.5 * last_start) & (req.arrival_s <= last_start)]
    assert later["ttft_s"]["p99"] == pytest.approx(inside.ttft_s.quantile(0.99))
    ok, reasons = verdict(res.summary, later, [parse_slo("ttft_p99_s=1e6")])
    assert ok and reasons == []
    ok, reasons = verdict({**res.summary, "rejected": 2}, later, [parse_slo("ttft_p99_s=1e-9")])
    assert not ok and reasons[0] == "2 requests rejected" and reasons[1].startswith("ttft_p99_s = ")


def test_more_hbm_never_lowers_the_answer_seed_by_seed(tiny):
    comp = find_capacities(
        tiny, ["ttft_p99_s=0.5"], (MEM, [18e9, 20e9]), replications=2, executor="inline"
    )
    small, large = (r.capacity["per_replication"] for r in comp.results)
    assert all(b >= a for a, b in zip(small, large, strict=True)) and sum(large) > sum(small)
    assert small[0] > 0
    est_small, est_large = (r.analytic_estimate["value"] for r in comp.results)
    assert est_large > est_small  # F37 with the larger pool
    c = comp.comparisons[0]
    assert c["pairs"] == 2 and c["mean"] == pytest.approx(sum(large) / 2 - sum(small) / 2)
    for r in comp.results:  # replication i ran with seed 3 + i in every configuration
        assert {(p["replication"], p["seed"]) for p in r.points} == {(0, 3), (1, 4)}


def test_the_answer_is_the_mean_of_the_replications_with_its_interval(tiny):
    res = find_capacity(tiny, ["ttft_p99_s=0.5"], replications=3, executor="inline")
    caps = res.capacity["per_replication"]
    assert res.capacity["value"] == pytest.approx(sum(caps) / 3)
    lo, hi = ci95(caps)
    assert (res.capacity["ci95_low"], res.capacity["ci95_high"]) == pytest.approx((lo, hi))
    assert lo <= res.capacity["value"] <= hi and res.capacity["converged"]
    for i, cap in enumerate(caps):  # each capacity passed; the next load up failed
        mine = {p["load"]: p["passed"] for p in res.points if p["replication"] == i}
        assert mine[cap] and not mine[cap + 1]
        assert len(mine) <= 10
    inputs = res.analytic_estimate["inputs"]
    # allocator paged, no prefix cache: the 256-token system prompt is each trajectory's own
    assert inputs["workload_prefix_tokens"] == 256 and inputs["S_shared_tokens"] == 0
    assert 0 < inputs["M_avg_tokens"] < inputs["M_peak_tokens"]
    assert res.analytic_estimate["peak_value"] <= res.analytic_estimate["value"]
    assert res.gap["ratio"] == pytest.approx(res.capacity["value"] / res.analytic_estimate["value"])


def test_paired_difference_says_when_configurations_are_not_distinguishable():
    assert paired_difference([10, 11, 12], [12, 13, 14])["distinguishable"] is True
    same = paired_difference([10, 11, 12], [11, 10, 12])
    assert same["distinguishable"] is False and same["mean"] == 0
    assert paired_difference([10], [12])["distinguishable"] is None  # one pair: no interval
    lo, hi = ci95([1.0, 2.0, 3.0])
    assert hi - 2.0 == pytest.approx(4.303 * 1.0 / math.sqrt(3))


def test_cli_json_is_one_object_and_nothing_is_written(run_cli, tiny, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(
        ["capacity", str(tiny), "--slo", "ttft_p99_s=0.5", "--replications", "2", "--json",
         "--workers", "1"]
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc["capacity"]) >= {"value", "ci95_low", "ci95_high"}
    assert set(doc["analytic_estimate"]) >= {"value", "inputs"} and doc["gap"]["explanation"]
    assert doc["points"] and all("passed" in p for p in doc["points"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]  # no run folders


def test_cli_refusals_are_one_line(run_cli, tiny):
    code, _, err = run_cli(["capacity", str(tiny), "--slo", "ttft_p99_s=1", "--search", "nodes",
                            "--set", "cluster.nodes=[{count: 1}, {count: 2}]"])  # fmt: skip
    assert code == 2 and "scales one node group" in err and len(err.splitlines()) == 1
    code, _, err = run_cli(
        ["capacity", str(tiny), "--slo", "ttft_p99_s=1", "--search", "arrival_rate"]
    )
    assert code == 2 and "needs workload.arrival.rate_per_s" in err
    code, _, err = run_cli(["capacity", str(tiny), "--slo", "ttft_p99_s=1", "--vary", "seed"])
    assert code == 2 and "KEY=V1,V2" in err


@pytest.mark.slow
def test_shipped_scenario_h200_holds_more_agents_than_h100():
    comp = find_capacities(
        SHIPPED, ["ttft_p99_s=2"], ("hardware.accelerator", ["h100-sxm-80gb", "h200-141gb"]),
        replications=2, workers=2,
    )  # fmt: skip
    h100, h200 = (r.capacity["per_replication"] for r in comp.results)
    assert all(b > a for a, b in zip(h100, h200, strict=True))


def test_arrival_rate_search_bisects_to_two_percent(tiny):
    res = find_capacity(
        tiny, ["ttft_p99_s=0.5"], search="arrival_rate", replications=2, executor="inline",
        sets={"workload.arrival": {"kind": "poisson", "rate_per_s": 1.0}},
    )  # fmt: skip
    assert res.capacity["converged"] and res.capacity["unit"] == "arrivals per second"
    for i, cap in enumerate(res.capacity["per_replication"]):
        mine = sorted((p["load"], p["passed"]) for p in res.points if p["replication"] == i)
        failed_above = min(load for load, ok in mine if not ok and load > cap)
        assert cap > 0 and (cap, True) in mine and failed_above - cap <= 0.02 * failed_above
    est = res.analytic_estimate
    assert est["value"] == pytest.approx(
        est["inputs"]["concurrency_time_averaged"] / est["inputs"]["trajectory_s_mean"]
    )


def test_cli_vary_writes_table_figure_and_runs(run_cli, tiny, tmp_path):
    out = tmp_path / "cap"
    code, stdout, err = run_cli(
        ["capacity", str(tiny), "--slo", "ttft_p99_s=0.5", "--replications", "2", "--workers",
         "1", "--vary", f"{MEM}=18000000000,20000000000", "--out", str(out)]
    )  # fmt: skip
    assert code == 0, err
    assert "capacity by hardware.accelerator_overrides.memory_bytes" in stdout
    assert "distinguishable at 95%" in stdout
    assert sorted(p.name for p in out.iterdir()) == [
        "capacity.json", "capacity.png", "config-0", "config-1", "points.parquet",
    ]  # fmt: skip
    doc = json.loads((out / "capacity.json").read_text())
    assert doc["values"] == [18_000_000_000, 20_000_000_000] and len(doc["configurations"]) == 2
    runs = {p["run_dir"] for c in doc["configurations"] for p in c["points"]}
    for i, c in enumerate(doc["configurations"]):
        assert all((out / f"config-{i}" / p["run_dir"] / "summary.json").is_file() for p in c["points"])
    assert len(runs) == sum(len(c["points"]) for c in doc["configurations"])


def test_dask_executor_without_distributed_is_one_line(monkeypatch):
    import sys

    from sim.sweep import make_executor

    monkeypatch.setitem(sys.modules, "distributed", None)  # as if not installed
    with pytest.raises(KvsimError) as exc:
        make_executor("dask", 2)
    assert "needs dask[distributed]" in str(exc.value) and "\n" not in str(exc.value)


def test_a_chat_workload_is_searched_without_an_analytic_estimate(tiny):
    text = tiny.read_text().split("workload:")[0] + (
        "workload:\n  kind: chat\n  num_requests: 40\n"
        "  arrival: {kind: poisson, rate_per_s: 2.0}\n"
        "  lengths: {kind: parametric, prompt_tokens: 2000, output_tokens: 100}\n"
    )
    tiny.write_text(text)
    res = find_capacity(tiny, ["ttft_p99_s=0.3"], search="arrival_rate", replications=1,
                        executor="inline", max_points=6)  # fmt: skip
    assert res.analytic_estimate["value"] is None and "agent workload" in res.analytic_estimate["unavailable"]
    assert res.capacity["value"] > 0 and res.gap["ratio"] is None

"""p95 in every latency summary (``describe``, ``describe_weighted``, summary.json, SLOs).

Before: summaries had mean/p50/p90/p99 only, and ``ttft_p95_s`` was refused as an SLO.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.errors import KvsimError
from sim.metrics.schema import DIST_KEYS, check_summary
from sim.metrics.schema import SUMMARY_KEYS as SCHEMA_KEYS
from sim.metrics.stats import SUMMARY_KEYS, describe, describe_weighted
from sim.run import run_scenario
from sim.sweep.slo import measure, parse_slo, verdict

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = str(ROOT / "workloads" / "chat_azure.yaml")  # 60 requests: TTFTs spread out
LATENCIES = ("ttft_s", "itl_s", "e2e_s", "queue_s")


def test_describe_has_p95_between_p90_and_p99():
    d = describe(np.arange(101, dtype=float))  # value i is the i-th percentile
    assert tuple(d) == ("mean", "p50", "p90", "p95", "p99") == SUMMARY_KEYS
    assert d == {"mean": 50.0, "p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0}
    assert describe(np.array([1.0, 3.0]))["p95"] == pytest.approx(1.0 + 2.0 * 0.95)
    assert describe(np.empty(0)) == dict.fromkeys(SUMMARY_KEYS)


def test_weighted_p95_equals_the_expanded_sample():
    values = np.array([0.5, 0.1, 2.0, 0.7, 9.0])
    weights = np.array([3, 10, 1, 0, 6])
    d = describe_weighted(values, weights)
    expanded = np.repeat(values, weights)
    assert tuple(d) == SUMMARY_KEYS
    assert d["p95"] == pytest.approx(float(np.percentile(expanded, 95)))
    assert d["p99"] == pytest.approx(float(np.percentile(expanded, 99)))
    assert describe_weighted(values, np.zeros(5, dtype=int)) == dict.fromkeys(SUMMARY_KEYS)


def test_schema_dist_keys_are_the_summary_keys():
    assert DIST_KEYS == SUMMARY_KEYS
    old = {"mean": 1.0, "p50": 1.0, "p90": 1.0, "p99": 1.0}  # a summary without p95
    dists = [k.name for k in SCHEMA_KEYS if k.kind == "dist"]
    assert set(LATENCIES) <= set(dists)
    s = {k.name: None for k in SCHEMA_KEYS}
    problems = check_summary({**s, "ttft_s": old})
    assert any(p.startswith("summary.json: ttft_s: is ") for p in problems)


@pytest.fixture(scope="module")
def run():
    return run_scenario(SCENARIO, **{"workload.num_requests": 60})


def test_run_summary_reports_p95_of_its_rows(run):
    s = run.summary
    assert check_summary(s) == []
    for key in (*LATENCIES, "resume_latency_s", "resume_stall_s"):
        assert tuple(s[key]) == ("mean", "p50", "p90", "p95", "p99"), key
    ttft = run.requests.ttft_s.dropna().to_numpy()
    assert s["ttft_s"]["p95"] == pytest.approx(float(np.percentile(ttft, 95)), rel=1e-12)
    e2e = run.requests[run.requests.status == "finished"].e2e_s.to_numpy()
    assert s["e2e_s"]["p95"] == pytest.approx(float(np.percentile(e2e, 95)), rel=1e-12)
    assert s["ttft_s"]["p90"] <= s["ttft_s"]["p95"] <= s["ttft_s"]["p99"]


def test_p95_slo_parses_measures_and_judges(run):
    slo = parse_slo("ttft_p95_s=2")
    assert (slo.metric, slo.stat, slo.summary_key) == ("ttft", "p95", "ttft_s.p95")
    measured = measure(run)
    lo, hi = measured["window_s"]["start"], measured["window_s"]["end"]
    req = run.requests
    inside = req[(req.arrival_s >= lo) & (req.arrival_s <= hi)].ttft_s.dropna().to_numpy()
    m = measured["ttft_s"]
    assert m["p95"] == pytest.approx(float(np.percentile(inside, 95)), rel=1e-12)
    assert m["p90"] < m["p95"] < m["p99"]  # a distinct statistic on this run
    assert run.summary["rejected"] == 0 and run.summary["unfinished"] == 0
    between_p90_p95 = (m["p90"] + m["p95"]) / 2
    ok, reasons = verdict(run.summary, measured, [parse_slo(f"ttft_p95_s={between_p90_p95}")])
    assert not ok and reasons == [f"ttft_p95_s = {m['p95']:.4g} s > {between_p90_p95:g} s"]
    between_p95_p99 = (m["p95"] + m["p99"]) / 2
    ok, reasons = verdict(run.summary, measured, [parse_slo(f"ttft_p95_s={between_p95_p99}")])
    assert ok and reasons == []
    ok, _ = verdict(run.summary, measured, [parse_slo(f"ttft_p99_s={between_p95_p99}")])
    assert not ok


def test_bad_stat_names_every_valid_choice_in_one_line():
    with pytest.raises(KvsimError) as exc:
        parse_slo("ttft_p95.5_s=2")
    msg = str(exc.value)
    assert "\n" not in msg and "ttft_<mean|p50|p90|p95|p99>_s" in msg

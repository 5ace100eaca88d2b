"""The tables tell routers apart (docs/cluster.md: compare ``kv_reuse_rate``,
``prefill_tokens``, ``sequence_moves`` and ``routed_match_rate``, not ``prefix_hit_rate``
alone): the end-of-run table, report.html's Summary and Nodes tables and ``kvsim
compare``'s table show them, with the summary's values."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from test_cluster_report import CLUSTER_YAML

from sim.report.compare import compare_text
from sim.report.plots import PLOTS
from sim.report.render import report_html
from sim.report.text import NODE_COLUMNS, node_table_rows, summary_rows

#: the end-of-run table's labels of a single-node run with every figure (in order)
SINGLE_NODE_LABELS = [
    "TTFT mean / p50 / p90 / p99", "ITL mean / p50 / p90 / p99",
    "end-to-end mean / p50 / p90 / p99", "queue mean / p50 / p90 / p99",
    "resume latency mean / p50 / p90 / p99", "max ITL", "output throughput",
    "prompt reuse rate (cache hits + held KV)", "prefix hit rate",
    "prefill tokens", "eta_alloc (mean)",
    "eta_effective (mean)", "peak allocated", "paused KV, logical (mean)",
    "paused KV, physical HBM (mean)", "held KV", "preemptions", "rejected", "pauses", "cost",
]  # fmt: skip
CLUSTER_LABELS = ["router", "routing decisions per node", "sequence moves",
                  "routed / global match rate"]  # fmt: skip


@pytest.fixture(scope="module")
def cluster_yaml(tmp_path_factory):
    path = tmp_path_factory.mktemp("tables") / "cl2.yaml"
    path.write_text(CLUSTER_YAML, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def runs(cluster_yaml):
    """The 2-node cluster under a router that reads no matches and one that does."""
    from sim.run import run_scenario

    return {kind: run_scenario(str(cluster_yaml), **{"cluster.router.kind": kind})
            for kind in ("least_load", "prefix_affinity")}  # fmt: skip


def test_end_of_run_table_gives_the_clusters_reuse_and_routing_figures(runs):
    s = runs["least_load"].summary
    assert s["sequence_moves"] > 0 and s["routed_match_rate"] is None  # moves, reads no matches
    rows = {label: (value, unit) for label, value, unit in summary_rows(s)}
    # a cluster's peak is the sum of its nodes' own peaks, and its label says so
    cluster_labels = [label + " (sum of the nodes' peaks)" if label == "peak allocated" else label
                      for label in SINGLE_NODE_LABELS]  # fmt: skip
    assert [r[0] for r in summary_rows(s)] == cluster_labels + CLUSTER_LABELS
    assert rows["prefill tokens"] == (f"{s['prefill_tokens']:,}", "tokens")
    # kv_reuse_rate is the prompt reuse rate's older name (the same value): one row
    assert s["kv_reuse_rate"] == s["prompt_reuse_rate"]
    assert rows["prompt reuse rate (cache hits + held KV)"] == (
        f"{100 * s['prompt_reuse_rate']:.1f}", "%")
    assert "KV reuse rate" not in rows
    assert rows["sequence moves"] == (f"{s['sequence_moves']:,}", "count")
    assert rows["routed / global match rate"] == ("- / -", "%")
    p = runs["prefix_affinity"].summary
    assert 0 < p["routed_match_rate"] <= p["global_match_rate"]
    rows = {label: value for label, value, _ in summary_rows(p)}
    assert rows["routed / global match rate"] == (
        f"{100 * p['routed_match_rate']:.1f} / {100 * p['global_match_rate']:.1f}")
    assert rows["sequence moves"] == f"{p['sequence_moves']:,}"


def test_a_single_node_table_adds_only_prefill_tokens_and_kv_reuse(runs):
    node = runs["least_load"].summary["nodes"][1]  # a node's summary is a single-node one
    rows = summary_rows(node)
    assert [r[0] for r in rows] == SINGLE_NODE_LABELS
    assert ("prefill tokens", f"{node['prefill_tokens']:,}", "tokens") in rows
    # keys missing from an older summary print as "-"
    assert ("prefill tokens", "-", "tokens") in summary_rows({})
    assert ("prompt reuse rate (cache hits + held KV)", "-", "%") in summary_rows({})


def test_report_summary_and_nodes_tables_show_them(runs):
    from sim.report.data import load_run

    run = load_run(runs["least_load"])
    s = run.summary
    html = report_html(run, {p.file: b"" for p in PLOTS})  # empty plots: the tables alone
    for label, value, unit in summary_rows(s)[-6:]:
        assert f"<tr><td>{label}</td><td>{value}</td><td>{unit}</td></tr>" in html
    assert f"<td>sequence moves</td><td>{s['sequence_moves']:,}</td>" in html
    head = "".join(f"<th>{c}</th>" for c in NODE_COLUMNS)
    assert "<th>KV reuse (%)</th><th>prefill tokens</th>" in head and head in html
    rows = node_table_rows(s)
    reuse, prefill = NODE_COLUMNS.index("KV reuse (%)"), NODE_COLUMNS.index("prefill tokens")
    for row, n in zip(rows, s["nodes"], strict=True):
        assert row[reuse] == f"{100 * n['kv_reuse_rate']:.1f}"
        assert row[prefill] == f"{n['prefill_tokens']:,}"
        assert "<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" in html
    # the nodes' prefill tokens add up to the cluster's
    assert sum(int(r[prefill].replace(",", "")) for r in rows) == s["prefill_tokens"]


def _line(text: str, label: str) -> list[str]:
    """The cells after ``label`` of its row in a compare table (unit first)."""
    line = next(ln for ln in text.splitlines() if ln.startswith(label + "  "))
    return re.split(r"\s{2,}", line[len(label):].strip())


def test_compare_of_two_routers_shows_sequence_moves_per_variant(cluster_yaml, tmp_path, run_cli):
    out = tmp_path / "cmp"
    argv = ["compare", str(cluster_yaml), "--vary", "cluster.router.kind=least_load,prefix_affinity",
            "--out", str(out), "--workers", "1", "--no-report"]  # fmt: skip
    code, stdout, stderr = run_cli(argv)
    assert code == 0, stderr
    variants = ["cluster.router.kind=least_load", "cluster.router.kind=prefix_affinity"]
    ll, pa = (json.loads((out / v / "summary.json").read_text()) for v in variants)
    moves = _line(stdout, "sequence moves")
    assert moves[0] == "count" and moves[1] == f"{ll['sequence_moves']:,}"
    change = (pa["sequence_moves"] - ll["sequence_moves"]) / ll["sequence_moves"]
    assert moves[2] == f"{pa['sequence_moves']:,} ({change:+.1%})"
    prefill = _line(stdout, "prefill tokens")
    assert prefill[1] == f"{ll['prefill_tokens']:,}"  # whole tokens, not 1.5e+05
    assert prefill[2].startswith(f"{pa['prefill_tokens']:,} (")
    assert _line(stdout, "prompt reuse rate")[1] == f"{100 * ll['prompt_reuse_rate']:,.4g}"
    assert "KV reuse rate" not in stdout  # the same value's older name: not a row of its own
    routed = _line(stdout, "routed match rate")  # least_load reads no matches
    assert routed[1] == "-" and routed[2] == f"{100 * pa['routed_match_rate']:,.4g}"
    assert _line(stdout, "prefix hit rate")  # the existing row stays
    assert "sequence moves" in (out / "compare.html").read_text(encoding="utf-8")


def test_compare_table_formats_large_counts_whole_and_skips_cluster_rows_for_single_nodes():
    frame = pd.DataFrame({"variant": ["a", "b"], "sequence_moves": [535.0, 0.0],
                          "prefill_tokens": [1_320_417.0, 210_000.0],
                          "prefix_hit_rate": [0.87, 0.14]})  # fmt: skip
    text = compare_text(frame)
    assert _line(text, "sequence moves") == ["count", "535", "0 (-100.0%)"]
    assert _line(text, "prefill tokens") == ["tokens", "1,320,417", "210,000 (-84.1%)"]
    assert _line(text, "prefix hit rate") == ["%", "87", "14 (-83.9%)"]
    single = compare_text(frame.drop(columns=["sequence_moves"]))
    assert "sequence moves" not in single and "routed match rate" not in single


def test_a_disaggregated_run_s_queue_row_says_where_it_ends():
    """In a disaggregated run a request is admitted on its decode instance, after the
    remote prefill and the KV transfer, so ``queue_s`` holds them (docs/cluster.md); its
    row says so (a reviewer read it as queueing alone: 67.5 ms against ttft_queue_s 1 ms)."""
    dist = {"mean": 0.0675, "p50": 0.06, "p90": 0.09, "p99": 0.1}
    plain = [r[0] for r in summary_rows({"queue_s": dist})]
    disagg = [r[0] for r in summary_rows({"queue_s": dist, "kv_pool_bytes_by_role": {"decode": 1}})]
    assert "queue mean / p50 / p90 / p99" in plain
    assert ("queue (to decode admission: remote prefill and KV transfer in) mean / p50 / p90 / "
            "p99") in disagg  # fmt: skip


def test_a_disaggregated_clusters_nodes_say_their_role():
    """A prefill instance is placed no request (routing decisions 0, a couple of requests,
    the prefill halves' TTFT): the Nodes table names each node's role so it does not read
    as a node the router starved; a node of an aggregated cluster (role ``both``, or an
    older summary without roles) keeps its bare id."""
    s = {"nodes": [{"node_id": 0, "role": "prefill", "requests_completed": 2, "routing_decisions": 0},
                   {"node_id": 1, "role": "decode", "requests_completed": 428, "routing_decisions": 428},
                   {"node_id": 2, "role": "both"}, {"node_id": 3}]}  # fmt: skip
    rows = node_table_rows(s)
    assert [r[0] for r in rows] == ["0 (prefill)", "1 (decode)", "2", "3"]
    assert rows[0][NODE_COLUMNS.index("routing decisions")] == "0"
    assert rows[1][NODE_COLUMNS.index("requests")] == "428"

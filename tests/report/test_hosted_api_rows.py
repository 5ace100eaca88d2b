"""The hosted-API view (``workload.provider_cache``) in the human-readable outputs (h111
finding 7): the run table, report.html and the compare table show the provider's
prompt-cache hit rate, its bill and the compactions when a run has them; the prompt reuse
rate is printed once (``kv_reuse_rate`` is its older name, the same value)."""

from __future__ import annotations

import pytest
from report_helpers import ROOT

from sim.report.compare import compare_text
from sim.report.data import load_run
from sim.report.plots import PLOTS
from sim.report.render import report_html
from sim.report.text import summary_rows
from sim.report.variant_rows import compare_frame, variant_row
from sim.run import run_scenario

SWARM = str(ROOT / "workloads/agent_swarm.yaml")
#: one trajectory of two calls: 2,048 system + 256 task tokens, then 512 observation +
#: 128 output more (tests/workload/test_harness_layout.py's by-hand bill)
AGENT = {"kind": "agent", "arrival": {"kind": "fixed"}, "system_prompt_tokens": 2048,
         "tool_tokens": 0, "task_tokens": 256, "output_tokens": 128,
         "observation_tokens": 512, "pause_s": 1.0, "num_trajectories": 1, "turns": 2}  # fmt: skip
PROVIDER = {"preset": "explicit-5m", "input_usd_per_mtok": 1.0, "output_usd_per_mtok": 2.0}
#: call 1 writes 2,304 tokens; call 2 (2,944 tokens) reads 2,304 and writes 640; reads at
#: 0.10 and writes at 1.25 of the input price, 2 x 128 output tokens at $2 / M
HIT = 2304 / (2304 + 2944)
BILL = (2304 * 1.25 + 2304 * 0.10 + 640 * 1.25) * 1e-6 + 2 * 128 * 2e-6


@pytest.fixture(scope="module")
def runs():
    with_view = run_scenario(SWARM, workload={**AGENT, "provider_cache": PROVIDER})
    without = run_scenario(SWARM, workload=AGENT)
    return load_run(with_view), load_run(without)


def test_run_table_and_report_show_the_hosted_api_view(runs):
    run, plain = runs
    rows = {label: (value, unit) for label, value, unit in summary_rows(run.summary)}
    assert rows["hosted API: prompt-cache hit rate"] == (f"{100 * HIT:.1f}", "%")  # 43.9
    assert rows["hosted API: bill"] == (f"{BILL:,.4f}", "USD")
    assert rows["compactions"] == ("0", "count")
    html = report_html(run, {p.file: b"" for p in PLOTS})
    assert f"<tr><td>hosted API: bill</td><td>{BILL:,.4f}</td><td>USD</td></tr>" in html
    assert "<td>hosted API: prompt-cache hit rate</td>" in html
    # no provider view, no compaction: no rows
    labels = [r[0] for r in summary_rows(plain.summary)]
    assert not [x for x in labels if x.startswith("hosted API") or x == "compactions"]
    # compactions alone (a context limit without a provider view)
    assert ("compactions", "9", "count") in summary_rows({"compactions": 9})


def test_the_reuse_rate_is_one_row(runs):
    run, _ = runs
    labels = [r[0] for r in summary_rows(run.summary)]
    assert run.summary["kv_reuse_rate"] == run.summary["prompt_reuse_rate"]
    assert "KV reuse rate" not in labels
    assert labels.count("prompt reuse rate (cache hits + held KV)") == 1


def test_compare_table_shows_the_hosted_api_view(runs):
    run, plain = runs
    frame = compare_frame([variant_row("provider", [run]), variant_row("none", [plain])])
    assert frame.provider_bill_usd[0] == pytest.approx(BILL, rel=1e-12)
    lines = compare_text(frame).splitlines()
    hit = next(ln for ln in lines if ln.startswith("hosted API: prompt-cache hit rate  "))
    assert hit.split()[-3:] == ["%", f"{100 * HIT:,.4g}", "-"]
    bill = next(ln for ln in lines if ln.startswith("hosted API: bill  "))
    assert bill.split()[-3:] == ["USD", f"{BILL:,.4g}", "-"]
    assert not any(ln.startswith("compactions  ") for ln in lines)  # none compacted
    assert not any(ln.startswith("KV reuse rate") for ln in lines)
    frame.loc[1, "compactions"] = 9.0
    row = next(ln for ln in compare_text(frame).splitlines() if ln.startswith("compactions  "))
    assert row.split()[-2:] == ["0", "9"]

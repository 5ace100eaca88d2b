"""h121: a run's ``cost`` row says where its price comes from. ``kvsim run`` printed
``cost 8.1203 USD`` with nothing beside it, while the price behind it (summary.json
``usd_per_gpu_hour``, ``price_source``) is by default the accelerator profile's example
figure, "not a quote": the text now ends with ``price_line`` (``kvsim compare`` prints it
once, or per variant when the variants' prices differ). Summary keys are unchanged."""

from __future__ import annotations

from pathlib import Path

from sim.report.text import PRICE_LABEL, price_line, summary_table

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = str(ROOT / "workloads/seed_tool_wait_45s.yaml")
EXAMPLE = "h100-sxm-80gb profile: example on-demand cloud price per GPU-hour for documentation, not a quote"


def _summary(**extra) -> dict:
    return {"scenario": "x", "requests_completed": 1, "trajectories_completed": 1,
            "sim_time_s": 3600.0, "accuracy": {"basis": "roofline, unvalidated"}, **extra}  # fmt: skip


def test_the_line_names_the_price_and_its_source():
    s = _summary(usd_total=24.0, usd_per_gpu_hour=3.0, price_source="my contract (2026-11)")
    assert price_line(s) == f"{PRICE_LABEL}: $3/GPU-hour x GPUs x simulated time (my contract (2026-11))"
    lines = summary_table(s).splitlines()
    assert lines[-1] == f"  {price_line(s)}" and "accuracy of the latencies" in lines[-2]


def test_no_cost_no_line():
    s = _summary(usd_total=None, usd_per_gpu_hour=None, price_source=None)
    assert price_line(s) is None
    assert PRICE_LABEL not in summary_table(s)


def test_a_cluster_priced_node_by_node_gives_its_sources():
    s = _summary(usd_total=5.0, usd_per_gpu_hour=None, price_source="a+b")
    assert price_line(s) == f"{PRICE_LABEL}: per node's price x GPUs x simulated time (a+b)"


def test_run_and_compare_print_the_profile_example_and_a_scenario_price(tmp_path, run_cli):
    a, b = tmp_path / "a", tmp_path / "b"
    code, text, _ = run_cli(["run", SCENARIO, "--out", str(a), "--no-report"])
    assert code == 0
    want = f"  {PRICE_LABEL}: $3/GPU-hour x GPUs x simulated time ({EXAMPLE}"
    assert [ln for ln in text.splitlines() if ln.startswith(want)]
    code, text, _ = run_cli(["run", SCENARIO, "--out", str(b), "--no-report",
                             "--set", "pricing.usd_per_gpu_hour=2.5"])  # fmt: skip
    assert code == 0
    own = f"{PRICE_LABEL}: $2.5/GPU-hour x GPUs x simulated time (scenario pricing.usd_per_gpu_hour)"
    assert f"  {own}" in text.splitlines()
    code, text, _ = run_cli(["compare", str(a), str(a), "--out", str(tmp_path / "same")])
    assert code == 0 and sum(ln.startswith(want.strip()) for ln in text.splitlines()) == 1
    code, text, _ = run_cli(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")])
    assert code == 0 and f"b: {own}" in text.splitlines()
    assert [ln for ln in text.splitlines() if ln.startswith(f"a: {want.strip()}")]


def test_report_html_says_it_under_its_table(tmp_path, run_cli):
    out = tmp_path / "run"
    assert run_cli(["run", SCENARIO, "--out", str(out), "--no-report", "--quiet"])[0] == 0
    assert run_cli(["report", str(out)])[0] == 0
    page = (out / "report.html").read_text()
    assert f"{PRICE_LABEL}: $3/GPU-hour x GPUs x simulated time ({EXAMPLE}" in page
    assert page.index(PRICE_LABEL) < page.index("<h2>Accuracy</h2>")


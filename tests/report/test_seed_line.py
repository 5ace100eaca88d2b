"""A single run's end-of-run table (and report.html) says it is one seed's sample and
which flag gives the spread (``sim.report.text.seed_line``): a user trial read a p99 TTFT
with no interval where three seeds of the same scenario spread it by +-22 %."""

from __future__ import annotations

from sim.report.text import SEED_LABEL, seed_line, summary_table


def test_a_single_runs_table_says_it_is_one_seeds_sample_and_how_to_get_the_spread():
    s = {"scenario": "x", "seed": 7, "ttft_s": {"p99": 0.1}}
    line = seed_line(s)
    assert line is not None and line.startswith(f"{SEED_LABEL} (7): ")
    assert "--replications K" in line and "95 % interval" in line
    assert f"\n  {line}\n" in summary_table(s)
    assert seed_line({"scenario": "x"}) is None  # an old folder without a seed
    assert SEED_LABEL not in summary_table({"scenario": "x"})


def test_the_run_prints_it_and_report_html_says_it_under_its_table(tmp_path, run_cli):
    out = tmp_path / "run"
    code, text, _ = run_cli(["run", "workloads/seed_tool_wait_45s.yaml", "--out", str(out),
                             "--no-report", "--set", "seed=5"])  # fmt: skip
    assert code == 0
    want = f"  {SEED_LABEL} (5): where the workload draws at random"
    assert [ln for ln in text.splitlines() if ln.startswith(want)]
    assert run_cli(["report", str(out)])[0] == 0
    page = (out / "report.html").read_text()
    assert f"{SEED_LABEL} (5): where the workload draws at random" in page
    assert page.index(SEED_LABEL) < page.index("<h2>Accuracy</h2>")

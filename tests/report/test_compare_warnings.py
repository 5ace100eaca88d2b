"""h101 (user trial h99, finding 4): ``kvsim compare`` says each pathological variant's
warnings (its runs' summary ``warnings``) after the table, in compare.html and in
compare.parquet's ``warnings`` column; a healthy variant says none. ``kvsim sweep`` says
its pathological runs' warnings after its end line."""

from __future__ import annotations

import html
import json

import pandas as pd
from report_helpers import E20, ROOT

from sim.sweep.results import SWEEP_WARNING_LINES, warnings_text

STUDY = str(ROOT / "workloads" / "allocator_study.yaml")


def test_the_user_trial_compare_says_the_warnings(run_cli, tmp_path):
    """The repro: static and contiguous at 200 requests. contiguous thrashes (its
    summary.json says so); the table and compare.html said nothing."""
    out = tmp_path / "alloc"
    argv = ["compare", STUDY, "--out", str(out), "--set", "workload.num_requests=200",
            "--vary", "allocator={kind: static},{kind: contiguous}", "--workers", "1",
            "--no-report"]  # fmt: skip
    code, stdout, stderr = run_cli(argv)
    assert code == 0, stderr
    frame = pd.read_parquet(out / "compare.parquet")
    names = list(frame.variant)
    assert names == ["allocator=static", "allocator=contiguous"]
    said = {n: json.loads((out / n / "summary.json").read_text())["warnings"] for n in names}
    assert any(w.startswith("thrashing: ") for w in said["allocator=contiguous"])
    assert [json.loads(c) for c in frame.warnings] == [said[n] for n in names]
    lines = stdout.splitlines()
    head = lines.index("WARNING: 2 of 2 variants look pathological (each run's summary.json: "
                       "warnings):")  # fmt: skip
    assert head > lines.index(next(ln for ln in lines if ln.startswith("pool: cached")))  # after
    want = [f"WARNING:   {n}: {w}" for n in names for w in said[n]]
    assert lines[head + 1 : head + 1 + len(want)] == want
    page = (out / "compare.html").read_text()
    assert "2 of 2 variants look pathological" in page
    for n in names:
        for w in said[n]:
            assert f"<li><b>{html.escape(n)}</b>: {html.escape(w)}</li>" in page
    # --quiet: the table is not printed, the warnings still are (stderr, as kvsim run)
    code, stdout, stderr = run_cli([*argv, "--force", "--quiet"])
    assert code == 0 and stdout == "" and stderr.splitlines()[1:] == want


def test_a_healthy_comparison_says_no_warning(run_cli, tmp_path):
    out = tmp_path / "e20"
    code, stdout, _ = run_cli(["compare", E20, "--vary", "scheduler.chunked_prefill=true,false",
                               "--out", str(out), "--workers", "1", "--no-report"])  # fmt: skip
    assert code == 0
    assert "WARNING" not in stdout and "look pathological" not in (out / "compare.html").read_text()
    assert pd.read_parquet(out / "compare.parquet").warnings.tolist() == ["[]", "[]"]


def test_sweep_warning_lines():
    table = pd.DataFrame({
        "point": [0, 0, 1], "seed": [1, 2, 1],
        "warnings": ['["thrashing: x"]', "[]", '["a", "b"]'],
    })  # fmt: skip
    assert warnings_text(table) == (
        "WARNING: 2 of 3 runs look pathological (results.parquet's warnings column; each "
        "run's summary.json):\n"
        "WARNING:   point 0, seed 1: thrashing: x\n"
        "WARNING:   point 1, seed 1: a\n"
        "WARNING:   point 1, seed 1: b\n"
    )
    assert warnings_text(table.assign(warnings=["[]"] * 3)) == ""
    many = pd.DataFrame({"point": range(25), "seed": [1] * 25, "warnings": ['["w"]'] * 25})
    lines = warnings_text(many).splitlines()
    assert len(lines) == 1 + SWEEP_WARNING_LINES + 1 and lines[-1] == "WARNING:   ... and 5 more"


def test_sweep_says_its_pathological_runs(run_cli, tmp_path):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(
        "schema_version: 1\nname: s\nsweep:\n"
        f"  base: {STUDY}\n"
        "  grid:\n    workload.num_requests: [40, 200]\n"
        "    allocator: [{kind: contiguous}]\n"
    )  # fmt: skip
    code, stdout, stderr = run_cli(["sweep", str(sweep), "--out", str(tmp_path / "o"),
                                    "--workers", "1", "--quiet"])  # fmt: skip
    assert code == 0, stderr
    table = pd.read_parquet(tmp_path / "o" / "results.parquet")
    assert stderr == warnings_text(table) and stderr.startswith("WARNING: 1 of 2 runs")

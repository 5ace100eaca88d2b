"""h53: every command that prints a run's latencies says, in one line, how far to trust
them, from the run's ``accuracy`` section (``sim.report.text.accuracy_line``, the text of
``sim.cost.accuracy.accuracy_text`` that ``kvsim capacity`` prints too): ``kvsim run``
(one seed or several) and ``kvsim compare``; the summary's keys are unchanged."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import yaml

from sim.cost.calibration import CrossValidationSpec, as_mapping, load_calibration

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = str(ROOT / "workloads/function_calling_h200.yaml")
SMALL = ["--set", "workload.num_trajectories=4", "--no-report"]
UNVALIDATED = "  accuracy of the latencies (step times): roofline, unvalidated (no measured error)"
CV = {
    "quantity": "operator time",
    "leave_one_model_out": {"median_rel_error": 0.05, "worst_rel_error": -0.4, "points": 10,
                            "held_out": ["a", "b"]},
    "leave_one_token_range_out": {"median_rel_error": 0.08, "worst_rel_error": 0.3,
                                  "points": 12, "held_out": ["<= 64 tokens"]},
    "domain": {"accelerator": "h100-sxm-80gb", "models": ["llama-2-7b"], "max_tokens": 4096,
               "tp": [1, 2]},
}  # fmt: skip


def test_an_unvalidated_run_says_so_under_its_table(tmp_path, run_cli):
    out = tmp_path / "run"
    code, text, _ = run_cli(["run", SCENARIO, "--out", str(out), *SMALL])
    assert code == 0
    lines = text.splitlines()
    assert UNVALIDATED in lines
    assert lines.index(UNVALIDATED) > [i for i, x in enumerate(lines) if "TTFT mean" in x][0]
    acc = json.loads((out / "summary.json").read_text())["accuracy"]
    assert acc["basis"] == "roofline, unvalidated"  # the line is the summary's


def test_a_calibrated_run_quotes_its_calibration_and_held_out_error(tmp_path, run_cli):
    cal = tmp_path / "cv.yaml"
    spec = CrossValidationSpec.model_validate(CV)
    doc = as_mapping(replace(load_calibration("h100-sxm-80gb-vidur"), cross_validation=spec))
    cal.write_text(yaml.safe_dump(dict(doc), sort_keys=False))
    out = tmp_path / "run"
    code, text, _ = run_cli(["run", str(ROOT / "workloads/seed_chunked_prefill.yaml"), "--out",
                             str(out), "--set", f"cost.calibration={cal}", "--no-report"])  # fmt: skip
    assert code == 0
    # the larger split median (8.0 %) and the worst in magnitude (-40.0 %), of calibration cv
    want = ("  accuracy of the latencies (step times): calibration, cross-validated (cv): "
            "median 8.0%, worst -40.0%")  # fmt: skip
    assert want in text.splitlines()


def test_compare_and_replications_print_the_line(tmp_path, run_cli):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        assert run_cli(["run", SCENARIO, "--out", str(d), *SMALL, "--quiet"])[0] == 0
    code, text, _ = run_cli(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")])
    assert code == 0
    assert text.splitlines().count(UNVALIDATED.strip()) == 1  # the same basis: said once
    code, text, _ = run_cli(["run", SCENARIO, "--out", str(tmp_path / "rep"), *SMALL,
                             "--replications", "2"])  # fmt: skip
    assert code == 0 and UNVALIDATED in text.splitlines()

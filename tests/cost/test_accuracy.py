"""Every answer says how far to trust it: ``summary.json``'s ``accuracy`` (sim.cost.accuracy),
the out-of-domain warning, ``cost.step_time_scale`` and the capacity error band."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sim.cost import CostConfig, CostModel, StepWork
from sim.cost.accuracy import (
    BASES,
    BASIS_CALIBRATION,
    BASIS_ROOFLINE,
    BASIS_VALIDATION,
    KEYS,
    accuracy_section,
    accuracy_warning,
    validation_tables,
)
from sim.cost.calibration import CrossValidationSpec, load_calibration
from sim.metrics.schema import ACCURACY_BASES, ACCURACY_KEYS, check_summary
from sim.profiles import load_accelerator, load_model
from sim.run.runner import scenario_accuracy

ROOT = Path(__file__).resolve().parents[2]
RTX4090 = ROOT / "workloads/validation/rtx4090_llama31_8b.yaml"
CV = CrossValidationSpec.model_validate({
    "quantity": "operator time",
    "leave_one_model_out": {"median_rel_error": 0.05, "worst_rel_error": -0.4, "points": 10,
                            "held_out": ["a", "b"]},
    "leave_one_token_range_out": {"median_rel_error": 0.08, "worst_rel_error": 0.3,
                                  "points": 12, "held_out": ["<= 64 tokens"]},
    "domain": {"accelerator": "h100-sxm-80gb", "models": ["llama-2-7b"], "max_tokens": 4096,
               "tp": [1, 2]},
})  # fmt: skip


def _cal(cv=CV):
    """The shipped H100 Vidur calibration with a stated held-out error."""
    return replace(load_calibration("h100-sxm-80gb-vidur"), cross_validation=cv)


def test_schema_declares_the_same_fields_and_bases():
    assert ACCURACY_KEYS == KEYS and ACCURACY_BASES == BASES


def test_roofline_run_is_unvalidated_and_a_valid_summary_value():
    acc = accuracy_section(None, accelerator="h100-sxm-80gb", model=load_model("llama-3.1-8b"),
                           tp=1, max_step_tokens=8192)  # fmt: skip
    assert acc["basis"] == BASIS_ROOFLINE and acc["source"] is None
    assert acc["median_rel_error"] is None and acc["worst_rel_error"] is None
    assert accuracy_warning(acc) is None
    assert not [p for p in check_summary({"accuracy": acc}) if "accuracy" in p]
    bad = {**acc, "basis": "trust me"}
    assert any("accuracy" in p for p in check_summary({"accuracy": bad}))


def test_the_dev_run_quotes_its_validation_table():
    acc = scenario_accuracy(RTX4090)
    (table,) = [t for t in validation_tables() if t.accelerator == "rtx-4090-24gb"]
    diffs = [v for vals in table.diff_percent.values() for v in vals]
    assert acc["basis"] == BASIS_VALIDATION and acc["source"] == "rtx-4090-24gb-llmservingsim"
    # median |difference| 1.3 %, worst +4.6 % (latency median): docs/validation.md
    assert acc["median_rel_error"] == pytest.approx(np.median(np.abs(diffs)) / 100) == pytest.approx(0.013)
    assert acc["worst_rel_error"] == pytest.approx(0.046)
    assert acc["outside_domain"] == []
    # the same accelerator priced by the roofline is not what the table validated
    roof = scenario_accuracy(RTX4090, **{"cost.calibration": None, "cost.step_pricing": "auto"})
    assert roof["basis"] == BASIS_ROOFLINE


def test_cross_validated_calibration_inside_and_outside_its_domain():
    kw = {"accelerator": "h100-sxm-80gb", "tp": 1, "max_step_tokens": 2048}
    acc = accuracy_section(_cal(), model=load_model("llama-2-7b"), **kw)
    assert acc["basis"] == BASIS_CALIBRATION and acc["source"] == "h100-sxm-80gb-vidur"
    # the larger median of the two splits, the worst in magnitude (signed)
    assert acc["median_rel_error"] == 0.08 and acc["worst_rel_error"] == -0.4
    assert acc["outside_domain"] == [] and accuracy_warning(acc) is None
    # Llama-3.1-70B is not named, but every GEMM shape of its layer was measured (the
    # H100 profiles' Llama-2-70B has its layer geometry); Llama-3.1-8B's were not
    assert accuracy_section(_cal(), model=load_model("llama-3.1-70b"), **kw)["outside_domain"] == []
    (why,) = accuracy_section(_cal(), model=load_model("llama-3.1-8b"), **kw)["outside_domain"]
    assert why == "model llama-3.1-8b (fitted on llama-2-7b)"
    out = accuracy_section(_cal(), model=load_model("qwen3-32b"), accelerator="a100-80gb", tp=8,
                           max_step_tokens=16384)  # fmt: skip
    assert [s.split(" ")[0] for s in out["outside_domain"]] == ["accelerator", "TP", "model", "steps"]
    warning = accuracy_warning(out)
    assert "outside its fitted domain" in warning and "8.0%" in warning and "-40.0%" in warning


def test_an_out_of_domain_run_warns_with_the_expected_error(tmp_path, run_cli):
    import json

    import yaml

    from sim.cost.calibration import as_mapping

    cal = tmp_path / "cv.yaml"
    small = CV.model_copy(update={"domain": CV.domain.model_copy(update={"max_tokens": 64})})
    cal.write_text(yaml.safe_dump(dict(as_mapping(_cal(small))), sort_keys=False))
    out = tmp_path / "run"
    code, _, err = run_cli(["run", str(ROOT / "workloads/seed_chunked_prefill.yaml"), "--out",
                            str(out), "--set", f"cost.calibration={cal}", "--quiet",
                            "--no-report"])  # fmt: skip
    assert code == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["accuracy"]["basis"] == BASIS_CALIBRATION and not check_summary(s)
    # its largest step (a 512-token chunk and 32 decodes) against the 64 tokens measured
    (why,) = [o for o in s["accuracy"]["outside_domain"] if o.startswith("steps")]
    assert why == "steps up to 544 tokens (measured up to 64)"
    (line,) = [x for x in err.splitlines() if "outside its fitted domain" in x]
    assert line.startswith("WARNING: calibration cv is used") and "8.0%" in line
    assert s["warnings"] == []  # the list of what makes a run pathological: unchanged
    from sim.report.html import accuracy_block

    html = accuracy_block(s["accuracy"])  # the report's section
    assert "<h2>Accuracy</h2>" in html and "calibration, cross-validated" in html
    assert "steps up to 544 tokens" in html and "-40.0%" in html and "8.0%" in html
    assert "not recorded" in accuracy_block(None)  # a run folder from before


def _model(scale: float, cal=None) -> CostModel:
    cfg = CostConfig(step_time_scale=scale, calibration=cal)
    return CostModel(load_model("llama-3.1-8b"), load_accelerator("h100-sxm-80gb"), 1, 1, cfg)


@pytest.mark.parametrize("cal", [None, "h100-sxm-80gb-vidur"])
def test_step_time_scale_scales_every_step_and_runs_equal_stepping(cal):
    base, slow = _model(1.0, cal), _model(1.25, cal)
    work = StepWork(n_decode=7, decode_history_tokens=7000, prefill_chunks=((512, 100),))
    assert slow.iteration_time(work).total_s == base.iteration_time(work).total_s * 1.25
    run = slow.decode_run_times(5, 3000, 4)
    steps = [slow.iteration_time(StepWork(n_decode=5, decode_history_tokens=3000 + 5 * i)).total_s
             for i in range(4)]  # fmt: skip
    assert run.tolist() == steps
    assert np.allclose(run, base.decode_run_times(5, 3000, 4) * 1.25, rtol=1e-12)


def test_regress_ignores_the_accuracy_keys():
    from sim.regress import flatten_metrics
    from sim.regress.compare import compare_case
    from sim.regress.suite import load_suite

    suite = load_suite(ROOT / "tests/golden/suite.yaml")
    assert not [m for c in suite.cases for m in c.metrics if m.startswith("accuracy")]
    case = suite.cases[0]
    acc = accuracy_section(None, accelerator="h100-sxm-80gb", model=load_model("llama-3.1-8b"),
                           tp=1, max_step_tokens=None)  # fmt: skip
    flat = flatten_metrics({"accuracy": {**acc, "median_rel_error": 0.1}})
    assert flat == {"accuracy.source": None, "accuracy.median_rel_error": 0.1,
                    "accuracy.worst_rel_error": None}  # fmt: skip
    outcome = compare_case(case, None, flat)
    assert not outcome.now and not outcome.not_checked

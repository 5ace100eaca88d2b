"""``crossval.py``: the held-out error of a Vidur-fitted calibration, and the shipped files'
``cross_validation`` sections (docs/kernels_validation.md, "Cross-validated error")."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def tp1(repo_root):
    """The shipped held-back A100 rows at TP 1 (every row fitted on when trained on)."""
    import vidur_data

    d = vidur_data.read_vidur(repo_root / "workloads/data/vidur_profiling")
    ops = d.operators[(d.operators["tp"] == 1) & (d.operators["gpu"] == "a100")]
    return vidur_data.VidurData(ops.reset_index(drop=True), d.allreduce, d.geometry)


def test_a_model_left_out_is_predicted_worse_than_in_sample(tp1):
    import crossval
    import vidur_compare
    import vidur_fit

    from sim.cost.calibration import calibration_from_spec, validate_mapping

    ops = tp1.operators
    left = ops["model"] == "Meta-Llama-3-8B"
    out = crossval.held_out_errors(tp1, "a100", ~left, "2026-12-01")
    # three operator groups per measured token count of the model left out
    assert out.size == 3 * ops.loc[left, "tokens"].nunique() and np.isfinite(out).all()
    full = calibration_from_spec(validate_mapping(
        vidur_fit.build_mapping(crossval._subset(tp1, "a100", ops["gpu"] == "a100"), "a100",
                                "2026-12-01")))  # fmt: skip
    inside = vidur_compare.operator_table(crossval._subset(tp1, "a100", left), "a100", full)
    in_sample = (inside["calibrated_s"] / inside["measured_s"] - 1).abs()
    assert np.median(np.abs(out)) > np.median(in_sample)


def test_split_keeps_the_sign_of_the_worst_error():
    import crossval

    s = crossval._split({"a": np.array([0.01, -0.5]), "b": np.array([0.2, 0.03])})
    assert s == {"median_rel_error": pytest.approx(0.115), "worst_rel_error": -0.5,
                 "points": 4, "held_out": ["a", "b"]}  # fmt: skip


@pytest.mark.parametrize("name,tokens", [("a100-80gb-vidur", 32768), ("h100-sxm-80gb-vidur", 4096)])
def test_shipped_vidur_calibrations_state_their_held_out_error(name, tokens):
    from sim.cost.calibration import as_mapping, load_calibration

    cal = load_calibration(name)
    cv = cal.cross_validation
    assert set(cv.splits()) == {"leave_one_model_out", "leave_one_token_range_out"}
    lomo = cv.leave_one_model_out
    # out of sample is worse than the held-back check (median <= 2 % in sample) ...
    assert 0.04 < lomo.median_rel_error < 0.10 and abs(lomo.worst_rel_error) > 0.3
    # ... and extrapolating to an unmeasured token range is worse still
    assert cv.leave_one_token_range_out.median_rel_error > lomo.median_rel_error
    assert cv.domain.max_tokens == tokens and cv.domain.tp == [1, 2, 4, 8]
    assert as_mapping(cal)["cross_validation"]["domain"]["accelerator"] == cv.domain.accelerator

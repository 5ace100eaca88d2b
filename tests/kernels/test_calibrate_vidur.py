"""``kvsim calibrate --vidur``: the Vidur fit and its cross-validation, from the package.

The fixture is small and made here from the project's shipped subset
(workloads/data/vidur_profiling): the A100 rows at TP 1 of three models, split again into
fitted / held-back alternate token counts and written in Vidur's layout. The stored
``cross_validation`` numbers are checked against a recomputation written from the rule
(refit without one model, price its rows, relative errors), not through crossval's code.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.cost import vidur_fit
from sim.cost.calibration import calibration_from_spec, load_calibration, validate_mapping
from sim.cost.vidur_crossval import operator_table
from sim.cost.vidur_data import (
    VidurData,
    read_vidur,
    split_allreduce,
    split_operators,
    write_subset,
)

MODELS = ("Llama-2-7b-hf", "Meta-Llama-3-8B", "Meta-Llama-3-70B")
DATE = "2026-12-01"


@pytest.fixture(scope="module")
def small(repo_root, tmp_path_factory):
    """A Vidur-layout folder: A100, TP 1, three models, alternate rows fitted."""
    full = read_vidur(repo_root / "workloads/data/vidur_profiling")
    ops = full.operators
    keep = (ops["gpu"] == "a100") & (ops["tp"] == 1) & ops["model"].isin(MODELS)
    ops = ops[keep].reset_index(drop=True)
    ops["held"] = split_operators(ops)
    ar = full.allreduce[full.allreduce["gpu"] == "a100"].reset_index(drop=True)
    ar["held"] = split_allreduce(ar)
    folder = tmp_path_factory.mktemp("vidur-small")
    data = VidurData(ops, ar, full.geometry)
    write_subset(data, folder, np.ones(len(ops), bool), np.ones(len(ar), bool))
    return folder


def _leave_one_model_out(folder) -> np.ndarray:
    """From the rule: for each model, fit on every row of the others, price its rows."""
    data = read_vidur(folder)
    ops = data.operators.assign(held=False)
    ar = data.allreduce.assign(held=False)
    errors = []
    for model in sorted(ops["model"].unique()):
        train = VidurData(ops[ops["model"] != model], ar, data.geometry)
        spec = validate_mapping(vidur_fit.build_mapping(train, "a100", DATE), "<test>")
        test = VidurData(ops[ops["model"] == model], ar, data.geometry)
        table = operator_table(test, "a100", calibration_from_spec(spec))
        err = (table["calibrated_s"] / table["measured_s"] - 1.0).to_numpy(float)
        errors.append(err[np.isfinite(err)])
    return np.concatenate(errors)


def test_cli_writes_a_cross_validated_calibration_that_loads(run_cli, small, tmp_path):
    out = tmp_path / "a100.yaml"
    args = ["calibrate", str(small), "--vidur", "a100", "--cross-validate",
            "--date", DATE, "--out", str(out)]  # fmt: skip
    code, stdout, err = run_cli(args)
    assert code == 0, err
    assert f"wrote {out}" in stdout and "leave_one_model_out: median" in stdout
    cal = load_calibration(str(out))
    assert cal.source == "public-measurement" and cal.device == "NVIDIA A100-SXM4-80GB"
    cv = cal.cross_validation
    err = _leave_one_model_out(small)
    lomo = cv.leave_one_model_out
    assert lomo.points == err.size and lomo.held_out == sorted(MODELS)
    assert lomo.median_rel_error == pytest.approx(np.median(np.abs(err)), rel=1e-5)
    assert lomo.worst_rel_error == pytest.approx(err[np.argmax(np.abs(err))], rel=1e-5)
    # three operator groups per (model, token count) measured at TP 1
    data = read_vidur(small)
    assert err.size == 3 * len(data.operators.groupby(["model", "tokens"]))
    assert cv.domain.tp == [1] and cv.domain.accelerator == "a100-80gb"
    assert cv.domain.max_tokens == int(data.operators["tokens"].max())
    assert cv.domain.models == ["llama-2-7b", "llama-3-70b", "llama-3-8b"]
    # extrapolating to an unmeasured token range is worse than leaving a model out
    assert cv.leave_one_token_range_out.median_rel_error > lomo.median_rel_error
    assert [p.name for p in tmp_path.iterdir()] == ["a100.yaml"]  # no partial file left


def test_vidur_dir_form_and_the_script_wrapper_write_the_same_file(run_cli, small, tmp_path):
    import calibrate

    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    assert run_cli(["calibrate", "--vidur", str(small), "--date", DATE, "--out", str(a)])[0] == 0
    assert calibrate.main([str(small), "--vidur", "a100", "--date", DATE, "--out", str(b)]) == 0
    assert a.read_text() == b.read_text()
    assert load_calibration(str(a)).cross_validation is None


def test_shipped_subset_is_split_again_and_says_so(run_cli, tmp_path):
    out = tmp_path / "h.yaml"
    code, _, err = run_cli(["calibrate", "--vidur", "h100", "--date", DATE, "--out", str(out)])
    assert code == 0, err
    assert "FITTED ON THE PROJECT'S SUBSET" in load_calibration(str(out)).notes


@pytest.mark.parametrize("args,needle", [
    (["--vidur", "tpu"], "valid: a100, h100"),
    (["--vidur", "a100", "--source", "gpu"], "--vidur takes no"),
    (["--cross-validate"], "name a results folder"),  # a results folder cross-validates too
    ([], "name a results folder"),
    (["--vidur", "a100", "--date", "yesterday"], "YYYY-MM-DD"),
])  # fmt: skip
def test_bad_input_is_one_line(run_cli, tmp_path, args, needle):
    out = tmp_path / "x.yaml"
    code, _, err = run_cli(["calibrate", *args, "--out", str(out)])
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_not_vidur_data_is_one_line(run_cli, small, tmp_path):
    out = tmp_path / "x.yaml"
    code, _, err = run_cli(["calibrate", str(tmp_path), "--vidur", "a100", "--out", str(out)])
    assert code == 2 and "no compute/ or network/" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(["calibrate", str(small), "--vidur", "h100", "--out", str(out)])
    assert code == 2 and "operator profiles of a100" in err and not out.exists()

"""``kvsim calibrate RESULTS --cross-validate``: the held-out error of a results folder's
step times (``sim.cost.calibrate.layer_cross_validation``), checked by hand on a synthetic
run whose steps carry a known extra time per token range, and what a run then reports.

No torch here: the tools run off the device, on CSVs.
"""

from __future__ import annotations

import shutil

import calibrate
import numpy as np
import pandas as pd
import pytest
import synthetic_run

from sim.cost.accuracy import BASIS_CALIBRATION, accuracy_section
from sim.cost.calibration import load_calibration
from sim.profiles import load_model

#: the extra seconds each range's steps carry over the calibrated prediction (synthetic_run's
#: steps: 1 and 32 tokens, 128, then 512, 2048, 544 and 2048)
EXTRA_S = {"<= 64 tokens": 1e-3, "65-511 tokens": 2e-3, ">= 512 tokens": 4e-3}


def _range(tokens: int) -> str:
    return "<= 64 tokens" if tokens <= 64 else ("65-511 tokens" if tokens < 512 else ">= 512 tokens")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A synthetic run whose step ``i`` measures its calibrated prediction without the
    overhead plus ``EXTRA_S`` of its token range."""
    out = tmp_path_factory.mktemp("synthetic-cv")
    truth = synthetic_run.write_run(out)
    layer = pd.read_csv(out / "layer.csv")
    extra = layer["tokens_in_step"].map(lambda t: EXTRA_S[_range(int(t))])
    layer["time_s_median"] = layer["time_s_median"] - truth.step_overhead_s + extra
    layer.to_csv(out / "layer.csv", index=False)
    return out


def test_held_out_error_by_hand(folder, tmp_path):
    out = tmp_path / "cal.yaml"
    assert calibrate.main([str(folder), "--out", str(out), "--accelerator", "h200-141gb",
                           "--cross-validate"]) == 0  # fmt: skip
    cal = load_calibration(str(out))
    layer = pd.read_csv(folder / "layer.csv")
    ranges = [_range(int(t)) for t in layer["tokens_in_step"]]
    assert sorted(ranges) == sorted(["<= 64 tokens"] * 2 + ["65-511 tokens"] + [">= 512 tokens"] * 4)
    # the overhead refitted without each range: the median extra of the other steps
    # (without <= 64: [2, 4, 4, 4, 4] ms -> 4; without 65-511: [1, 1, 4, 4, 4, 4] -> 4;
    # without >= 512: [1, 1, 2] -> 1), so a held-out step's error is (refit - extra) / time
    refit = {"<= 64 tokens": 4e-3, "65-511 tokens": 4e-3, ">= 512 tokens": 1e-3}
    t = layer["time_s_median"].to_numpy()
    want = np.array([(refit[r] - EXTRA_S[r]) / ti for r, ti in zip(ranges, t, strict=True)])
    split = cal.cross_validation.leave_one_token_range_out
    assert split.points == 7
    assert split.held_out == list(EXTRA_S)
    assert split.median_rel_error == pytest.approx(float(np.median(np.abs(want))), rel=1e-5)
    assert split.worst_rel_error == pytest.approx(float(want[np.argmax(np.abs(want))]), rel=1e-5)
    assert cal.cross_validation.leave_one_model_out is None
    dom = cal.cross_validation.domain
    assert (dom.accelerator, dom.models, dom.max_tokens, dom.tp) == ("h200-141gb", ["llama-3-8b"], 2048, [1])
    assert "bench_layer" in cal.cross_validation.quantity
    # the whole-folder overhead is still the median over every step: [1, 1, 2, 4, 4, 4, 4] ms
    assert cal.step_overhead_s == pytest.approx(4e-3, rel=1e-5)
    # a run priced with it quotes that error, and says when it leaves the fitted domain
    inside = accuracy_section(cal, accelerator="h200-141gb", model=load_model("llama-3-8b"),
                              tp=1, max_step_tokens=2048)  # fmt: skip
    assert inside["basis"] == BASIS_CALIBRATION and inside["outside_domain"] == []
    assert inside["median_rel_error"] == pytest.approx(split.median_rel_error)
    outside = accuracy_section(cal, accelerator="h100-sxm-80gb", model=load_model("qwen3-32b"),
                               tp=2, max_step_tokens=8192)  # fmt: skip
    assert len(outside["outside_domain"]) == 4
    # without the flag the file states no held-out error (as before)
    plain = tmp_path / "plain.yaml"
    assert calibrate.main([str(folder), "--out", str(plain), "--accelerator", "h200-141gb"]) == 0
    assert load_calibration(str(plain)).cross_validation is None


def test_cross_validate_needs_layer_steps_in_two_ranges(folder, tmp_path, run_cli):
    bare = tmp_path / "no-layer"
    shutil.copytree(folder, bare)
    (bare / "layer.csv").unlink()
    out = tmp_path / "x.yaml"
    code, _, err = run_cli(["calibrate", str(bare), "--out", str(out), "--accelerator",
                            "h200-141gb", "--cross-validate"])  # fmt: skip
    assert code == 2 and "needs layer.csv" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    layer = pd.read_csv(folder / "layer.csv")
    layer[layer["tokens_in_step"] >= 512].to_csv(bare / "layer.csv", index=False)
    code, _, err = run_cli(["calibrate", str(bare), "--out", str(out), "--accelerator",
                            "h200-141gb", "--cross-validate"])  # fmt: skip
    assert code == 2 and "at least two token ranges" in err and not out.exists()


def test_shipped_h200_calibration_states_its_held_out_error():
    """The file from our own H200 run (kernels_validation/results/nvidia-h200-2026-12-04)
    loads, is a GPU measurement, and carries the held-out error a run quotes."""
    cal = load_calibration("nvidia-h200")
    assert cal.source == "gpu" and cal.device == "NVIDIA H200"
    cv = cal.cross_validation
    assert cv is not None and cv.leave_one_token_range_out.points == 15
    assert cv.domain.accelerator == "h200-141gb" and cv.domain.models == ["llama-3-8b"]

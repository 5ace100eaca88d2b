"""calibrate.py, compare_steps.py and synthetic_run.py: CSV -> calibration YAML -> cost model.

No torch here: these tools run off the device, on CSVs.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import calibrate
import compare_steps
import numpy as np
import pandas as pd
import pytest
import synthetic_run
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cost.calibration import load_calibration
from sim.errors import KvsimError

RECORDED = Path(__file__).resolve().parents[2] / "kernels_validation" / "results"
CPU_RUN = RECORDED / "cpu-quick-2026-11-29"
SIZES = np.array([4096 * 4**i for i in range(11)] + [2**31], dtype=float)


def test_fit_copy_recovers_exact_overhead_and_bandwidth():
    t = 7e-6 + SIZES / 51e9
    overhead, bw, err = calibrate.fit_copy(SIZES, t)
    assert overhead == pytest.approx(7e-6, rel=1e-9)
    assert bw == pytest.approx(51e9, rel=1e-9)
    assert err < 1e-9


@settings(max_examples=100, deadline=None)
@given(
    overhead=st.floats(1e-6, 1e-4),
    bw=st.floats(5e9, 900e9),
    seed=st.integers(0, 2**31),
)
def test_fit_copy_with_two_percent_noise_stays_close(overhead, bw, seed):
    rng = np.random.default_rng(seed)
    t = (overhead + SIZES / bw) * np.exp(rng.normal(0, 0.02, SIZES.size))
    got_o, got_bw, err = calibrate.fit_copy(SIZES, t)
    assert got_bw == pytest.approx(bw, rel=0.05)
    assert got_o == pytest.approx(overhead, rel=0.25)
    assert err < 0.1


def test_fit_copy_negative_intercept_refits_with_zero_overhead():
    t = SIZES / 40e9 - 2e-8  # a straight fit has intercept -2e-8 s
    overhead, bw, _ = calibrate.fit_copy(SIZES, t)
    assert overhead == 0.0
    per_point = SIZES / t
    assert per_point.min() <= bw <= per_point.max()
    assert bw == pytest.approx(40e9, rel=0.2)


def test_fit_copy_rejects_nonsense():
    with pytest.raises(KvsimError, match="at least two sizes"):
        calibrate.fit_copy([4096], [1e-6])
    with pytest.raises(KvsimError, match="do not grow"):
        calibrate.fit_copy([4096, 8192, 16384], [3e-6, 2e-6, 1e-6])


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    folder = tmp_path_factory.mktemp("synthetic-run")
    truth = synthetic_run.write_run(folder)
    out = folder / "cal.yaml"
    assert calibrate.main([str(folder), "--out", str(out), "--accelerator", "h200-141gb"]) == 0
    return folder, truth, load_calibration(str(out))


def test_synthetic_end_to_end_recovers_the_truth(synthetic):
    _, truth, cal = synthetic
    tr = synthetic_run.Truth()
    assert cal.source == "synthetic"
    assert cal.reference_hbm_bw_bytes_per_s == 4.8e12
    assert cal.attention_block_sizes == tr.block_sizes
    assert cal.attention_context_tokens == tr.contexts
    for bi, b in enumerate(tr.block_sizes):
        for ci, c in enumerate(tr.contexts):
            assert cal.attention_bw_efficiency(b, c) == pytest.approx(
                tr.attention_eff(bi, ci), rel=1e-5
            )
    assert cal.decode_bw_efficiency(1) == pytest.approx(tr.weight_stream_eff, rel=1e-5)
    assert cal.decode_batches == tuple(2**i for i in range(11))  # tokens <= 1024
    for t in (1, 64, 4096, 16384):
        assert cal.gemm_efficiency(t) == pytest.approx(truth.gemm_efficiency(t), rel=1e-5)
    for d in ("h2d", "d2h"):
        over, bw = tr.copy[d]
        assert cal.copy_fit(d).overhead_s == pytest.approx(over, rel=1e-5)
        assert cal.copy_bw_bytes_per_s(d) == pytest.approx(bw, rel=1e-5)
    assert cal.step_overhead_s == pytest.approx(tr.step_overhead_s, rel=1e-4)


def test_calibrated_predictor_matches_synthetic_steps_and_roofline_does_not(synthetic):
    folder, _, cal = synthetic
    shapes, measured = compare_steps.read_steps(folder / "layer.csv")
    preds = compare_steps.build_predictors(cal, ["roofline", "calibrated"])
    table = compare_steps.compare(shapes, measured, preds)
    cal_sum = compare_steps.summarize(table, "calibrated")
    roof_sum = compare_steps.summarize(table, "roofline")
    assert cal_sum["worst_abs_rel_err"] < 1e-4
    assert roof_sum["median_abs_rel_err"] > 0.2  # datasheet roofline is optimistic
    assert (table["roofline_s"] < table["measured_s"]).all()
    md = compare_steps.to_markdown(table, ["roofline", "calibrated"], "t")
    assert "| calibrated | 0.0% | 0.0% |" in md


def test_roofline_predictor_exact_value():
    cal = load_calibration("synthetic-example")
    s = compare_steps.StepShape(
        geometry="g", n_layers=1, d_model=8, n_heads=1, n_kv_heads=1, head_dim=8, d_ff=8,
        dtype="bfloat16", dtype_bytes=2, phase="decode", prefill_chunk_tokens=0,
        prefill_history_tokens=0, decode_seqs=1, decode_context_tokens=10, block_size=16,
        tokens_in_step=1, weight_bytes=4.0e9, kv_bytes_read=0.8e9, kv_bytes_written=0.0,
        linear_flops=1.0e9, attention_flops=0.0,
    )  # fmt: skip
    assert compare_steps.roofline_predictor(cal)(s) == pytest.approx(4.8e9 / 4.8e12)


def test_cost_model_follows_the_calibration(synthetic):
    """sim.cost with a calibration charges weights at decode_bw_efficiency(batch), etc."""
    folder, _, cal = synthetic
    pred = compare_steps.sim_cost_predictor(cal, calibrated=True)
    plain = compare_steps.sim_cost_predictor(cal, calibrated=False)
    shapes, _ = compare_steps.read_steps(folder / "layer.csv")
    dec = next(s for s in shapes if s.phase == "decode" and s.decode_seqs == 32)
    hbm = cal.reference_hbm_bw_bytes_per_s
    expect = (dec.weight_bytes / (hbm * cal.decode_bw_efficiency(32))
              + dec.kv_bytes_read / (hbm * cal.attention_bw_efficiency(16, 4096))
              + cal.step_overhead_s)  # fmt: skip
    assert pred(dec) == pytest.approx(expect, rel=1e-9)
    assert plain(dec) == pytest.approx((dec.weight_bytes + dec.kv_bytes_read) / hbm, rel=1e-9)


def test_calibrate_on_recorded_cpu_quick_run(tmp_path):
    out = tmp_path / "cpu.yaml"
    assert calibrate.main([str(CPU_RUN), "--out", str(out)]) == 0
    cal = load_calibration(str(out))
    assert cal.source == "cpu" and cal.device == "cpu"
    assert "NOT GPU numbers" in cal.notes
    assert cal.attention_block_sizes == (1, 2, 4, 8, 16, 32, 64, 128)
    recorded = pd.read_csv(CPU_RUN / "copies.csv")
    single = recorded[recorded["test"] == "single"]
    assert set(single["memory"]) == {"pageable"} and "pageable" in cal.notes
    assert cal.copy_bw_bytes_per_s("h2d") > 0 and cal.step_overhead_s >= 0


def test_non_gpu_run_needs_explicit_out_and_missing_files_are_one_line(tmp_path, capsys):
    assert calibrate.main([str(CPU_RUN)]) == 2
    assert "explicit --out" in capsys.readouterr().err
    assert calibrate.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "env.json is missing" in err
    (tmp_path / "env.json").write_text('{"device": "Mystery GPU", "device_kind": "gpu"}')
    assert calibrate.main([str(tmp_path), "--out", str(tmp_path / "x.yaml")]) == 2
    assert "--accelerator" in capsys.readouterr().err


def test_device_names_map_to_profiles():
    assert calibrate.profile_for_device("NVIDIA H200") == "h200-141gb"
    assert calibrate.profile_for_device("NVIDIA GH200 480GB") == "gh200-96gb"
    assert calibrate.profile_for_device("NVIDIA H100 80GB HBM3") == "h100-sxm-80gb"
    assert calibrate.profile_for_device("cpu") is None


def test_compare_cli_and_bad_predictor(tmp_path, synthetic, capsys):
    folder, _, cal = synthetic
    out = tmp_path / "r.md"
    rc = compare_steps.main([str(folder / "layer.csv"), "--calibration", cal.path,
                             "--out", str(out)])  # fmt: skip
    assert rc == 0 and "median abs error" in out.read_text()
    capsys.readouterr()
    rc = compare_steps.main([str(folder / "layer.csv"), "--calibration", cal.path,
                             "--predictor", "oracle"])  # fmt: skip
    assert rc == 2 and "valid: roofline" in capsys.readouterr().err


def test_here_side_tools_do_not_import_torch(kv_dir):
    code = (f"import sys; sys.path.insert(0, {str(kv_dir)!r}); "
            "import calibrate, compare_steps, synthetic_run; print('torch' in sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_kvsim_calibrate_writes_what_the_script_writes(run_cli, synthetic, tmp_path):
    folder, _, script_cal = synthetic
    out = tmp_path / "cal.yaml"
    args = ["calibrate", str(folder), "--out", str(out), "--accelerator", "h200-141gb"]
    code, stdout, _ = run_cli(args)
    assert code == 0 and f"wrote {out}" in stdout
    cal = load_calibration(str(out))
    # one implementation: the same fit, field for field, but where it came from
    assert replace(cal, path=None) == replace(script_cal, path=None)
    assert [p.name for p in tmp_path.iterdir()] == ["cal.yaml"]  # no partial file left
    code, _, err = run_cli(args)  # never overwrites silently
    assert code == 2 and "--force" in err and len(err.strip().splitlines()) == 1
    assert run_cli([*args, "--force"])[0] == 0
    code, _, err = run_cli(["calibrate", str(folder), "--out", str(tmp_path / "x.txt")])
    assert code == 2 and ".yaml" in err
    code, _, err = run_cli(["calibrate", str(tmp_path / "nope"), "--out", str(tmp_path / "y.yaml")])
    assert code == 2 and "not a folder" in err and not (tmp_path / "y.yaml").exists()

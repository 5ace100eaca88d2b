"""The recorded H200 runs (kernels_validation/results/nvidia-h200-2026-12-04{,-run2,-run3}) and
the here-side tools that read them: compare_runs.py (repeatability) and
compare_gemm_tables.py (our GEMM times against a calibration's measured tables).

The expectations come from the devices' datasheets (accelerator profiles), not from the
tools' output: the H200 and the H100 SXM share the GH100 die and its dense bf16 peak, and
the H200's HBM is 4.8 / 3.35 = 1.43x faster, so a GEMM that streams its weights should take
~1.43x longer on the H100 and a compute-bound one about as long.
"""

from __future__ import annotations

from pathlib import Path

import compare_gemm_tables
import compare_runs
import pandas as pd
import pytest
import synthetic_run

from sim.cost.calibration import load_calibration
from sim.profiles import load_accelerator

RESULTS = Path(__file__).resolve().parents[2] / "kernels_validation" / "results"
RUN_A = RESULTS / "nvidia-h200-2026-12-04"
RUN_B = RESULTS / "nvidia-h200-2026-12-04-run2"
RUN_C = RESULTS / "nvidia-h200-2026-12-04-run3"  # the shipped calibration's input


def test_recorded_runs_are_full_gpu_runs_whose_checks_passed():
    for run in (RUN_A, RUN_B, RUN_C):
        env = pd.read_json(run / "env.json", typ="series")
        assert env["device"] == "NVIDIA H200" and env["mode"] == "full"
        corr = pd.read_csv(run / "correctness.csv")
        assert set(corr["status"]) == {"pass"} and (corr["impl"] == "triton").any()
    # run 3 also checked bench_layer's prefill over history (the lower-right causal bias)
    corr = pd.read_csv(RUN_C / "correctness.csv")
    assert (corr["check"] == "prefill_bias_vs_mask").sum() == 3
    assert "nvidia-h200-2026-12-04-run3/" in load_calibration("nvidia-h200").notes


def test_gemm_times_against_h100_follow_the_datasheet_ratios():
    h200, h100 = load_accelerator("h200-141gb"), load_accelerator("h100-sxm-80gb")
    bw_ratio = h200.hbm_bw_bytes_per_s / h100.hbm_bw_bytes_per_s
    peak_ratio = h200.peak_flops_per_s("bf16") / h100.peak_flops_per_s("bf16")
    for run in (RUN_A, RUN_C):  # two machines
        m = compare_gemm_tables.matched(run / "gemm.csv", "h100-sxm-80gb-vidur")
        (n_stream, stream), (n_compute, compute) = compare_gemm_tables.regimes(m).values()
        assert n_stream >= 5 and n_compute >= 5
        assert stream == pytest.approx(bw_ratio, rel=0.10)
        assert compute == pytest.approx(peak_ratio, rel=0.10)


def test_gemm_tables_cli(tmp_path, capsys):
    out = tmp_path / "cmp.md"
    assert compare_gemm_tables.main([str(RUN_A / "gemm.csv"), "--calibration",
                                     "h100-sxm-80gb-vidur", "--out", str(out)]) == 0  # fmt: skip
    assert "| compute-bound (>= 2048 tokens) |" in out.read_text()
    # a calibration without GEMM tables (version 1) has nothing in common: one line, exit 2
    assert compare_gemm_tables.main([str(RUN_A / "gemm.csv"), "--calibration", "nvidia-h200"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no GEMM shape" in err[0]


def test_repeatability_of_the_recorded_runs():
    df = compare_runs.compare(RUN_A, RUN_B).set_index(["file", "group"])
    # whole-stack steps (CUDA graphs, 7-260 ms) repeat within 1 %; every layer step matched
    assert (df.loc["layer", "worst"].abs() < 0.01).all()
    assert df.loc["layer", "rows"].sum() == 15
    assert df.loc[("copies", "d2d"), "median_abs"] < 0.01


def test_compare_runs_of_a_run_with_itself_is_zero(tmp_path, capsys):
    synthetic_run.write_run(tmp_path / "a")
    df = compare_runs.compare(tmp_path / "a", tmp_path / "a")
    assert set(df["file"]) == {"paged_attention", "copies", "gemm", "layer"}
    assert (df["worst"] == 0).all() and (df["median_abs"] == 0).all()
    assert compare_runs.main([str(tmp_path / "a"), str(tmp_path / "missing")]) == 2
    assert "not a folder" in capsys.readouterr().err

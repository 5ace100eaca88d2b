"""The device scripts in CPU quick mode: CSV columns, run_all.sh's file budget, layer maths.

Each benchmark is run for real (tiny sizes, seconds); the GPU mode differs only in sizes,
dtype and the fused kernel, which check_correctness.py verifies on the device.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import bench_copies  # noqa: E402
import bench_gemm  # noqa: E402
import bench_layer  # noqa: E402
import bench_paged_attention  # noqa: E402
import check_correctness  # noqa: E402
import synthetic_run  # noqa: E402
from geometry import GEOMETRIES  # noqa: E402

EXPECTED = {
    "paged_attention.csv": bench_paged_attention.COLUMNS,
    "copies.csv": bench_copies.COLUMNS,
    "gemm.csv": bench_gemm.COLUMNS,
    "layer.csv": bench_layer.COLUMNS,
    "correctness.csv": check_correctness.COLUMNS,
}


def read(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory, kv_dir):
    out = tmp_path_factory.mktemp("run_all")
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable}
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run(["bash", str(kv_dir / "run_all.sh"), "--quick"], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out


def test_run_all_writes_at_most_eight_flat_files(quick_run):
    names = sorted(p.name for p in quick_run.iterdir())
    assert len(names) <= 8
    assert all((quick_run / n).is_file() for n in names)
    assert names == sorted([*EXPECTED, "env.json", "run_all.log"])
    log = (quick_run / "run_all.log").read_text()
    for piece in ("env_info", "check_correctness", "bench_paged_attention", "bench_copies",
                  "bench_layer", "bench_gemm"):  # fmt: skip
        assert f"=== {piece}: rc=0" in log


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_quick_csvs_have_the_expected_columns_and_rows(quick_run, name):
    with open(quick_run / name, newline="") as fh:
        header = next(csv.reader(fh))
    assert header == EXPECTED[name]
    assert len(read(quick_run / name)) > 0


def test_quick_paged_attention_covers_every_block_size(quick_run):
    rows = read(quick_run / "paged_attention.csv")
    paged = [r for r in rows if r["impl"].endswith("_paged") and r["sweep"] == "block_context"]
    assert {int(r["block_size"]) for r in paged} == {1, 2, 4, 8, 16, 32, 64, 128}
    for r in rows:
        expect = float(r["bytes_moved"]) / float(r["time_s_median"])
        assert float(r["achieved_bw_bytes_per_s"]) == pytest.approx(expect)


def test_quick_correctness_all_pass_or_skip(quick_run):
    rows = read(quick_run / "correctness.csv")
    assert {r["status"] for r in rows if r["impl"] == "torch_ref"} == {"pass"}
    assert {r["status"] for r in rows if r["impl"] == "triton"} == {"skip"}  # no CUDA here


def test_env_json_says_cpu_quick(quick_run):
    import json

    env = json.loads((quick_run / "env.json").read_text())
    assert env["device_kind"] == "cpu" and env["mode"] == "quick"
    assert env["torch"] == torch.__version__


def test_synthetic_run_writes_the_bench_formats():
    assert synthetic_run.PAGED_COLUMNS == bench_paged_attention.COLUMNS
    assert synthetic_run.COPY_COLUMNS == bench_copies.COLUMNS
    assert synthetic_run.GEMM_COLUMNS == bench_gemm.COLUMNS
    assert synthetic_run.LAYER_COLUMNS == bench_layer.COLUMNS


def test_step_work_exact_for_a_hybrid_step():
    geo = GEOMETRIES["llama-3-8b"]
    step = bench_layer.Step(chunk=4, history=6, seqs=2, context=10)
    w = bench_layer.step_work(geo, 2, 2, step)
    params = 4096 * 6144 + 4096 * 4096 + 4096 * 28672 + 14336 * 4096
    assert geo.linear_params_per_layer() == params
    kv_tok = 2 * 8 * 128 * 2 * 2  # K and V, 8 heads of 128, bf16, 2 layers
    assert w == {
        "weight_bytes": params * 2 * 2,
        "kv_bytes_read": kv_tok * (2 * 10 + 6 + 4),
        "kv_bytes_written": kv_tok * 6,
        "linear_flops": 2 * 6 * params * 2,
        "attention_flops": 4 * 32 * 128 * (2 * 10 + 4 * 6 + 10) * 2,
    }
    assert step.phase == "hybrid" and step.tokens == 6


def test_layer_forward_decode_attention_matches_the_reference():
    """The decode path writes the new K/V into the paged cache and attends over it."""
    gen = torch.Generator().manual_seed(0)
    geo = GEOMETRIES["tiny"]
    stack = bench_layer.Stack(geo, 1, torch.float64, torch.device("cpu"), gen)
    step = bench_layer.Step(seqs=2, context=20)
    runner = bench_layer.StepRunner(stack, step, 8, fused=False, gen=gen)
    out = runner.forward()
    assert out.shape == (2, geo.d_model) and torch.isfinite(out).all()
    kc = runner.dec_k[0]
    slots = runner.slots
    # the new token's key landed where the block table says position context-1 lives
    flat = kc.view(-1, geo.n_kv_heads, geo.head_dim)
    assert all(torch.isfinite(flat[s]).all() for s in slots.tolist())
    assert runner.tables.shape == (2, 3)


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton not installed")
def test_fused_kernel_in_triton_interpreter(tmp_path, kv_dir):
    """The Triton kernel vs the float64 reference, run by Triton's CPU interpreter."""
    out = tmp_path / "c.csv"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, str(kv_dir / "check_correctness.py"), "--quick", "--interpret",
         "--out", str(out)], env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    fused = [r for r in read(out) if r["impl"] == "triton"]
    assert len(fused) >= 20 and {r["status"] for r in fused} == {"pass"}

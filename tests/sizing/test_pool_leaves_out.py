"""h101 (user trial h99, finding 5): vLLM's pool is memory x 0.9 - (weights + its profile
run's activation peak + non-torch memory); kvsim's is memory x utilization - weights -
reserve (0 by default). The numbers stay; every place that prints the pool says what it
leaves out and the key that sets a reserve."""

from __future__ import annotations

import json
from pathlib import Path

from sim.run.checks import preflight
from sim.scenario import load_scenario
from sim.sizing.plan import POOL_LEFT_OUT, pool_leaves_out, pool_note
from sim.sweep.analytic import analytic_estimate

ROOT = Path(__file__).resolve().parents[2]


def test_the_sentences():
    assert pool_leaves_out(0.0) == (
        "vLLM's activation peak (its profile run's torch peak beyond the weights) and "
        "non-torch memory (CUDA context, NCCL and cuBLAS workspaces): not subtracted "
        "(reserve 0); set them with --reserve-gb-per-gpu"
    )
    assert pool_leaves_out(2.5e9) == f"the reserve (2.500 GB per GPU) stands for {POOL_LEFT_OUT}"
    assert pool_note(0.0, "hardware.reserve_bytes_per_gpu") == (
        "reserve 0: vLLM's activation peak and non-torch memory not subtracted, set with "
        "hardware.reserve_bytes_per_gpu"
    )
    assert pool_note(4e9, "k") == "after a reserve of 4.00 GB per GPU"


def test_plan_says_it_and_keeps_the_numbers(run_cli):
    """The trial's repro: gpt-oss-120b on one H100 80 GiB at 0.9: 85.899 x 0.9 - 65.191 =
    12.119 GB, unchanged; the row and the JSON key say what it leaves out."""
    argv = ["plan", "--model", "gpt-oss-120b", "--gpu", "h100-sxm-80gb", "--num-gpus", "1",
            "--context", "8192"]  # fmt: skip
    code, out, _ = run_cli([*argv, "--json"])
    assert code == 0
    doc = json.loads(out)
    assert round(doc["kv_pool_bytes_per_gpu"] / 1e9, 3) == 12.119
    assert doc["kv_pool_leaves_out"] == pool_leaves_out(0.0)
    code, out, _ = run_cli(argv)
    assert code == 0 and "KV pool leaves out" in out and "--reserve-gb-per-gpu" in out
    code, out, _ = run_cli([*argv, "--json", "--reserve-gb-per-gpu", "2",
                            "--gpu-memory-utilization", "0.9"])  # fmt: skip
    assert json.loads(out)["kv_pool_leaves_out"] == pool_leaves_out(2e9)


def test_validate_and_capacity_say_it(run_cli):
    chat = str(ROOT / "workloads/chat_azure.yaml")
    code, out, _ = run_cli(["validate", chat])
    assert code == 0
    assert "tokens; reserve 0: vLLM's activation peak and non-torch memory not subtracted, " \
           "set with hardware.reserve_bytes_per_gpu), allocator" in out
    study = str(ROOT / "workloads/allocator_study.yaml")  # a pool in bytes: no note
    code, out, _ = run_cli(["validate", study])
    assert code == 0 and "tokens), allocator" in out and "reserve 0" not in out
    cap = ROOT / "workloads/coding_agents_capacity.yaml"
    got = analytic_estimate(preflight(load_scenario(cap)), "concurrency", 1)["inputs"]
    assert got["kv_pool_note"] == pool_note(0.0, "hardware.reserve_bytes_per_gpu")
    given = load_scenario(cap, {"hardware.kv_pool_bytes_per_gpu": 20e9})
    assert analytic_estimate(preflight(given), "concurrency", 1)["inputs"]["kv_pool_note"] is None

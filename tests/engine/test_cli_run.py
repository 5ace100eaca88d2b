"""``kvsim run``, ``kvsim validate`` and ``kvsim schema`` from the command line."""

from __future__ import annotations

import json

import pandas as pd
import yaml
from engine_helpers import WORKLOADS, assert_same_summary

from sim.run import run_scenario

E20 = str(WORKLOADS / "seed_chunked_prefill.yaml")


def test_run_writes_the_run_folder(run_cli, tmp_path):
    out = tmp_path / "runs" / "e20"
    code, stdout, stderr = run_cli(
        ["run", E20, "--out", str(out), "--set", "scheduler.chunked_prefill=false"]
    )
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "config.resolved.yaml",
        "memory.parquet",
        "pauses.parquet",
        "requests.parquet",
        "steps.parquet",
        "summary.json",
        "trajectories.parquet",
    ]
    summary = json.loads((out / "summary.json").read_text())
    for key in (
        "requests_completed",
        "trajectories_completed",
        "sim_time_s",
        "wall_time_s",
        "ttft_s",
        "itl_s",
        "e2e_s",
        "output_tokens_per_s",
        "prefix_hit_rate",
        "eta_alloc_mean",
        "eta_effective_mean",
        "peak_allocated_bytes",
        "preemptions",
        "rejected",
        "max_itl_s",
        "seed",
        "versions",
    ):
        assert key in summary
    assert set(summary["itl_s"]) == {"mean", "p50", "p90", "p99"}
    assert summary["max_itl_s"] > 1.2  # the monolithic spike
    assert len(pd.read_parquet(out / "requests.parquet")) == 33
    assert "seed_chunked_prefill" in stdout and "wrote" in stdout
    # the resolved config runs again to the same results
    resolved = yaml.safe_load((out / "config.resolved.yaml").read_text())
    assert resolved["scheduler"]["chunked_prefill"] is False
    again = run_scenario(str(out / "config.resolved.yaml"))
    assert_same_summary(summary, again.summary)


def test_quiet_prints_nothing(run_cli, tmp_path):
    code, stdout, stderr = run_cli(["run", E20, "--out", str(tmp_path / "q"), "--quiet"])
    assert code == 0 and stdout == "" and stderr == ""


def test_bad_scenario_is_one_line_exit_2(run_cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (WORKLOADS / "seed_chunked_prefill.yaml")
        .read_text()
        .replace("  block_size: 16", "  block_size: 16\n  blocks: 3")
    )
    code, stdout, stderr = run_cli(["run", str(bad), "--out", str(tmp_path / "x")])
    assert code == 2 and stdout == ""
    assert stderr.count("\n") == 1
    assert (
        stderr
        == f"kvsim: error: {bad}:29: allocator.blocks: unknown field; valid: block_size, kind\n"
    )
    assert not (tmp_path / "x").exists()
    code, _, stderr = run_cli(["run", E20, "--out", str(tmp_path / "y"), "--set", "seed=-1"])
    assert code == 2 and "--set seed: seed: Input should be greater than or equal to 0" in stderr


def test_validate_and_schema(run_cli, tmp_path):
    code, stdout, _ = run_cli(["validate", E20])
    assert code == 0 and stdout.startswith(f"{E20}: ok: seed_chunked_prefill: chapter-70b")
    code, _, stderr = run_cli(["validate", E20, "--set", "allocator.kind=buddyy"])
    assert code == 2 and "allocator.kind: Input tag 'buddyy'" in stderr
    code, stdout, _ = run_cli(["schema"])
    assert code == 0 and json.loads(stdout)["title"] == "kvsim scenario"
    code, _, _ = run_cli(["schema", "--out", str(tmp_path / "s.json")])
    assert json.loads((tmp_path / "s.json").read_text())["type"] == "object"

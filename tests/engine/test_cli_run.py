"""``kvsim run``, ``kvsim validate`` and ``kvsim schema`` from the command line."""

from __future__ import annotations

import json

import pandas as pd
import yaml
from engine_helpers import WORKLOADS, assert_same_summary

from sim.errors import KvsimError
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


# ------------------------------------------------------------ the run folder, whole or nothing
RUN_FILES = [
    "config.resolved.yaml",
    "memory.parquet",
    "pauses.parquet",
    "requests.parquet",
    "steps.parquet",
    "summary.json",
    "trajectories.parquet",
]


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def test_a_non_empty_out_is_refused_before_the_run_and_force_replaces_it_whole(
    run_cli, tmp_path, monkeypatch
):
    out = tmp_path / "e20"
    out.mkdir()
    (out / "summary.json").write_text("an older run")
    (out / "notes.txt").write_text("mine")
    import sim.run

    def no_run(*a, **k):
        raise AssertionError("the run must not start")

    with monkeypatch.context() as m:
        m.setattr(sim.run, "build", no_run)
        code, stdout, stderr = run_cli(["run", E20, "--out", str(out), "--quiet"])
    assert code == 2 and stdout == ""
    assert stderr == (
        f"kvsim: error: --out: {out}: folder exists and is not empty; pass --force to replace "
        "it whole, or choose another folder\n"
    )
    assert _names(out) == ["notes.txt", "summary.json"]
    assert (out / "summary.json").read_text() == "an older run"
    code, _, stderr = run_cli(["run", E20, "--out", str(out), "--quiet", "--force"])
    assert code == 0, stderr
    assert _names(out) == RUN_FILES  # nothing of the old folder is left: replaced whole
    assert _names(tmp_path) == ["e20"]  # no temporary sibling left behind
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, _ = run_cli(["run", E20, "--out", str(empty), "--quiet"])
    assert code == 0 and _names(empty) == RUN_FILES


def test_out_must_be_a_folder_path(run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, stdout, stderr = run_cli(["run", E20, "--out", "", "--quiet"])
    assert (code, stdout) == (2, "")
    assert stderr == "kvsim: error: --out: an empty path; give the folder the run goes into\n"
    (tmp_path / "f").write_text("x")
    code, _, stderr = run_cli(["run", E20, "--out", "f", "--quiet"])
    assert code == 2 and stderr == "kvsim: error: --out: f: exists and is not a folder\n"
    (tmp_path / "keep").write_text("x")
    code, _, stderr = run_cli(["run", E20, "--out", ".", "--quiet", "--force"])
    assert code == 2 and "--force would delete the current folder" in stderr
    assert (tmp_path / "keep").read_text() == "x"


def test_ctrl_c_during_the_run_writes_nothing(run_cli, tmp_path, monkeypatch):
    from sim.run.runner import Simulation

    old = tmp_path / "old"
    assert run_cli(["run", E20, "--out", str(old), "--quiet"])[0] == 0
    before = {p.name: p.read_bytes() for p in old.iterdir()}

    def interrupted(self, progress=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(Simulation, "run", interrupted)
    for out, flags in ((tmp_path / "new", ["--quiet"]), (old, ["--force"])):
        code, stdout, stderr = run_cli(["run", E20, "--out", str(out), *flags])
        # (without --quiet the progress bar, stopped, may leave an empty line before it)
        assert (code, stdout, stderr.lstrip("\n")) == (130, "", "interrupted: nothing written\n")
    assert not (tmp_path / "new").exists()
    assert {p.name: p.read_bytes() for p in old.iterdir()} == before  # the old run, whole
    assert _names(tmp_path) == ["old"]


def test_ctrl_c_while_writing_leaves_no_partial_folder(run_cli, tmp_path, monkeypatch):
    old = tmp_path / "run"
    assert run_cli(["run", E20, "--out", str(old), "--quiet"])[0] == 0
    before = {p.name: p.read_bytes() for p in old.iterdir()}
    calls = []

    def slow_write(self, path, **kwargs):
        calls.append(path)
        if len(calls) == 3:  # the interrupt lands after two tables are written
            raise KeyboardInterrupt
        return real(self, path, **kwargs)

    real = pd.DataFrame.to_parquet
    monkeypatch.setattr(pd.DataFrame, "to_parquet", slow_write)
    code, _, stderr = run_cli(["run", E20, "--out", str(old), "--quiet", "--force"])
    assert (code, stderr) == (130, "interrupted: nothing written\n")
    assert len(calls) == 3
    assert {p.name: p.read_bytes() for p in old.iterdir()} == before
    assert _names(tmp_path) == ["run"]


def test_sigint_to_a_running_kvsim_leaves_nothing(tmp_path):
    """A real Ctrl-C (SIGINT) to a long run: exit 130, the message, no folder."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "long"
    code = (
        "import sys; from sim.cli import main; print('ready', file=sys.stderr, flush=True); "
        f"sys.exit(main(['run', {str(WORKLOADS / 'agent_swarm.yaml')!r}, '--out', "
        f"{str(out)!r}, '--quiet', '--set', 'workload.num_trajectories=100000']))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr.readline() == "ready\n"  # imports done: the run is under way
        time.sleep(2.0)
        assert proc.poll() is None, "the run ended before it could be interrupted"
        os.kill(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert stderr == "interrupted: nothing written\n"
    assert _names(tmp_path) == []


# --------------------------------------------------------------------- reproducibility
CHAT = str(WORKLOADS / "chat_azure.yaml")


def test_resolved_config_reruns_from_anywhere_with_the_same_hash(run_cli, tmp_path, monkeypatch):
    from sim.run import config_sha256

    monkeypatch.chdir(WORKLOADS)  # a relative scenario path, a relative trace path in it
    code, _, err = run_cli(
        ["run", "chat_azure.yaml", "--out", str(tmp_path / "a"), "--quiet", "--set",
         "workload.num_requests=40"]  # fmt: skip
    )
    assert code == 0, err
    first = json.loads((tmp_path / "a" / "summary.json").read_text())
    resolved = yaml.safe_load((tmp_path / "a" / "config.resolved.yaml").read_text())
    trace = WORKLOADS / "data" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
    assert resolved["workload"]["lengths"]["path"] == str(trace)
    assert first["command"] == [
        "kvsim", "run", "chat_azure.yaml", "--out", str(tmp_path / "a"), "--set",
        "workload.num_requests=40", "--quiet",
    ]  # fmt: skip
    assert first["scenario_path"] == CHAT
    assert first["config_sha256"] == config_sha256(resolved)
    # the resolved config, moved elsewhere and run from another folder
    moved = tmp_path / "elsewhere" / "c.yaml"
    moved.parent.mkdir()
    moved.write_text((tmp_path / "a" / "config.resolved.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["run", str(moved), "--out", "b", "--quiet"])
    assert code == 0, err
    again = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert again["config_sha256"] == first["config_sha256"]
    assert again["scenario_path"] == str(moved)
    assert_same_summary(first, again)
    assert again["requests_completed"] == 40


def test_config_sha256_is_of_the_canonical_form():
    import hashlib

    from sim.run import config_sha256

    a = {"seed": 1, "workload": {"kind": "chat", "num_requests": 3}}
    b = {"workload": {"num_requests": 3, "kind": "chat"}, "seed": 1}
    canonical = '{"seed":1,"workload":{"kind":"chat","num_requests":3}}'
    assert config_sha256(a) == config_sha256(b) == hashlib.sha256(canonical.encode()).hexdigest()
    assert config_sha256({**a, "seed": 2}) != config_sha256(a)


def test_python_api_records_no_command(tmp_path):
    res = run_scenario(E20)
    assert res.summary["command"] is None and res.summary["scenario_path"] == E20
    from sim.run import config_sha256

    assert res.summary["config_sha256"] == config_sha256(res.config)
    from_dict = run_scenario(yaml.safe_load(open(E20)))
    assert from_dict.summary["scenario_path"] is None
    assert from_dict.summary["config_sha256"] == res.summary["config_sha256"]
    res.write(tmp_path / "r")
    try:
        res.write(tmp_path / "r")
        raise AssertionError("a second write into a full folder must be refused")
    except KvsimError as exc:
        assert "pass --force" in str(exc)
    res.write(tmp_path / "r", force=True)
    assert _names(tmp_path / "r") == RUN_FILES

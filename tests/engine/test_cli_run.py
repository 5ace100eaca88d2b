"""``kvsim run``, ``kvsim validate`` and ``kvsim schema`` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
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
        "plot_batch.png",
        "plot_efficiency.png",
        "plot_latency.png",
        "plot_memory.png",
        "plot_pauses.png",
        "plot_prefix.png",
        "report.html",
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
    assert set(summary["itl_s"]) == {"mean", "p50", "p90", "p95", "p99"}
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
    assert code == 2 and "allocator.kind: unknown kind 'buddyy'; valid: " in stderr
    code, stdout, _ = run_cli(["schema"])
    assert code == 0 and json.loads(stdout)["title"] == "kvsim scenario"
    code, _, _ = run_cli(["schema", "--out", str(tmp_path / "s.json")])
    assert json.loads((tmp_path / "s.json").read_text())["type"] == "object"


def test_validate_a_hybrid_model_with_an_eagle_head(run_cli):
    """The probe's command: gpt-oss-120b (a hybrid) + EAGLE on radix used to end in a
    traceback (the drafter's bytes were not in the groups' block table)."""
    fc = str(WORKLOADS / "function_calling_h200.yaml")
    spec = "speculative={method: eagle, num_speculative_tokens: 3, acceptance_rate: 0.7}"
    code, stdout, stderr = run_cli(["validate", fc, "--set", spec])
    assert code == 0 and stderr == "", stderr
    assert stdout.startswith(f"{fc}: ok: function_calling_h200: gpt-oss-120b")


# ------------------------------------------------------------ the run folder, whole or nothing
RUN_FILES = [
    "config.resolved.yaml",
    "memory.parquet",
    "pauses.parquet",
    "plot_batch.png",  # the report (sim.report): plot_*.png and report.html
    "plot_efficiency.png",
    "plot_latency.png",
    "plot_memory.png",
    "plot_pauses.png",
    "plot_prefix.png",
    "report.html",
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


def test_force_replaces_only_a_previous_run_and_never_an_input(run_cli, tmp_path, monkeypatch):
    """``--force`` deletes what the folder holds: a folder that is not a run's (no
    summary.json, no config.resolved.yaml), or one holding the scenario being run (even a
    run folder, where a user saved it), is refused before the run, nothing deleted; the
    Python API's ``result.write(force=True)`` refuses alike."""
    import shutil

    import sim.run

    def no_run(*a, **k):
        raise AssertionError("the run must not start")

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "mine.txt").write_text("keep me")
    mine = tmp_path / "mine"
    mine.mkdir()
    assert run_cli(["run", E20, "--out", str(mine), "--quiet", "--no-report"])[0] == 0
    scenario = mine / "my.yaml"
    shutil.copy(E20, scenario)
    with monkeypatch.context() as m:
        m.setattr(sim.run, "build", no_run)
        code, stdout, stderr = run_cli(["run", E20, "--out", str(notes), "--quiet", "--force"])
        assert (code, stdout) == (2, "")
        assert stderr == (
            f"kvsim: error: --out: {notes}: not a run folder (no summary.json or "
            "config.resolved.yaml); --force replaces only a previous run's folder: choose "
            "another folder, or empty it\n"
        )
        argv = ["run", str(scenario), "--out", str(mine), "--quiet", "--force"]
        for extra in ([], ["--replications", "2"]):
            code, _, stderr = run_cli([*argv, *extra])
            assert code == 2 and stderr == (
                f"kvsim: error: --out: {mine}: --force would delete {scenario}, an input of "
                "this run; choose another folder\n"
            )
        code, _, stderr = run_cli(["run", E20, "--out", str(notes), "--quiet", "--force",
                                   "--replications", "2"])  # fmt: skip
        assert code == 2 and "not a run folder" in stderr
    assert (notes / "mine.txt").read_text() == "keep me" and _names(notes) == ["mine.txt"]
    assert scenario.read_text() == Path(E20).read_text()
    res = run_scenario(str(scenario))
    with pytest.raises(KvsimError, match=r"--force would delete .*my\.yaml, an input"):
        res.write(mine, force=True)
    with pytest.raises(KvsimError, match="not a run folder"):
        res.write(notes, force=True)
    trace = mine / "trace.jsonl"  # another input kept in the run folder (named in the
    lines = (WORKLOADS / "data/mooncake/synthetic_trace.jsonl").read_text().splitlines()
    trace.write_text("\n".join(lines[:4]) + "\n")  # resolved config): refused before the run
    mooncake = ["run", str(WORKLOADS / "mooncake_replay.yaml"), "--out", str(mine),
                "--quiet", "--force", "--no-report", "--set", f"workload.path={trace}",
                "--set", "workload.start_row=0", "--set", "workload.num_requests=4"]  # fmt: skip
    for extra in ([], ["--replications", "2"]):
        code, _, stderr = run_cli([*mooncake, *extra])
        assert code == 2 and stderr == (
            f"kvsim: error: --out: {mine}: --force would delete {trace}, an input of this "
            "run; choose another folder\n"
        )
    assert trace.is_file() and scenario.is_file()
    trace.unlink()
    scenario.unlink()  # a run folder again: replaced whole
    assert run_cli(["run", E20, "--out", str(mine), "--quiet", "--force", "--no-report"])[0] == 0
    own = mine / "config.resolved.yaml"  # a run's own config, run again in place: kvsim's
    assert run_cli(["run", str(own), "--out", str(mine), "--quiet", "--force", "--no-report"])[0] == 0
    seeds = tmp_path / "variant"  # kvsim compare's variant of K seeds: only run folders
    for seed in ("seed-1", "seed-2"):
        assert run_cli(["run", E20, "--out", str(seeds / seed), "--quiet", "--no-report"])[0] == 0
    assert run_cli(["run", E20, "--out", str(seeds), "--quiet", "--force", "--no-report"])[0] == 0
    assert "summary.json" in _names(seeds) and "seed-1" not in _names(seeds)
    inside = tmp_path / "project"  # --out inside the scenario's folder: nothing at risk
    inside.mkdir()
    shutil.copy(E20, inside / "s.yaml")
    assert run_cli(["run", str(inside / "s.yaml"), "--out", str(inside / "out"), "--quiet",
                    "--no-report"])[0] == 0  # fmt: skip
    assert run_cli(["run", str(inside / "s.yaml"), "--out", str(inside / "out"), "--quiet",
                    "--force", "--no-report"])[0] == 0  # fmt: skip


def test_an_out_under_a_file_is_refused_before_the_run(run_cli, tmp_path, monkeypatch):
    """The nearest existing folder above --out must be a writable folder: checked before
    the run (before: found only when writing, after the whole simulation)."""
    import sim.run

    def no_run(*a, **k):
        raise AssertionError("the run must not start")

    monkeypatch.setattr(sim.run, "build", no_run)
    (tmp_path / "f").write_text("x")
    for out, parent in (("/dev/null/x", "/dev/null"), (str(tmp_path / "f" / "a" / "b"), str(tmp_path / "f"))):
        code, stdout, stderr = run_cli(["run", E20, "--out", out, "--quiet"])
        assert (code, stdout) == (2, "")
        assert stderr == f"kvsim: error: --out: {out}: {parent} is not a folder\n"
    assert _names(tmp_path) == ["f"]


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

    import sim.run.output as output

    def slow_write(table, path):
        calls.append(path)
        if len(calls) == 3:  # the interrupt lands after two tables are written
            raise KeyboardInterrupt
        return real(table, path)

    real = output._to_parquet  # every table's writer (numpy columns by pyarrow alone)
    monkeypatch.setattr(output, "_to_parquet", slow_write)
    code, _, stderr = run_cli(["run", E20, "--out", str(old), "--quiet", "--force"])
    assert (code, stderr) == (130, "interrupted: nothing written\n")
    assert len(calls) == 3
    assert {p.name: p.read_bytes() for p in old.iterdir()} == before
    assert _names(tmp_path) == ["run"]


def test_ctrl_c_after_the_folder_is_in_place_says_it_is_complete(run_cli, tmp_path, monkeypatch):
    """An interrupt while the table or the warnings print: the folder is whole on disk, and
    the message says so (before: 'interrupted: nothing written')."""
    import sim.cli._run as cli_run  # the command's own code (the typer command and the quick path)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    for name, flags in (("_print_summary", []), ("_after_run", ["--quiet"])):
        out = tmp_path / name
        with monkeypatch.context() as m:
            m.setattr(cli_run, name, interrupted)
            code, _, stderr = run_cli(["run", E20, "--out", str(out), *flags])
        assert (code, stderr.lstrip("\n")) == (130, f"interrupted: the run folder {out} is complete\n")
        assert _names(out) == RUN_FILES
        assert json.loads((out / "summary.json").read_text())["command"][:2] == ["kvsim", "run"]
    assert _names(tmp_path) == ["_after_run", "_print_summary"]


def test_ctrl_c_between_the_renames_of_force_is_held_until_the_new_run_is_in_place(
    run_cli, tmp_path, monkeypatch
):
    """A real SIGINT right after the new folder is renamed into place (before the previous
    run is removed): the message says the run is complete, and no hidden copy of the
    previous run is left behind (before: 'nothing written' and a stranded .old folder)."""
    import os
    import signal

    import sim.run.output as output

    out = tmp_path / "run"
    assert run_cli(["run", E20, "--out", str(out), "--quiet", "--no-report"])[0] == 0
    real = os.replace
    hits = []

    def replace_then_ctrl_c(src, dst):
        real(src, dst)
        if Path(dst) == out and ".old." not in Path(src).name:  # the new run, in place
            hits.append(dst)
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(output.os, "replace", replace_then_ctrl_c)
    code, _, stderr = run_cli(["run", E20, "--out", str(out), "--quiet", "--force",
                               "--set", "seed=7"])  # fmt: skip
    monkeypatch.undo()
    assert hits == [out]
    assert (code, stderr) == (130, f"interrupted: the run folder {out} is complete\n")
    assert json.loads((out / "summary.json").read_text())["seed"] == 7  # the new run
    assert _names(tmp_path) == ["run"]  # the previous run removed, nothing hidden left
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler restored


@pytest.mark.parametrize(("duration", "line"), [
    ("100", "finished at 19.7 s of simulated time: all work done before duration_s = 100 s\n"),
    ("0.05", "stopped at duration_s = 0.05 s of simulated time (work was still going on)\n"),
])  # fmt: skip
def test_the_end_line_says_whether_the_horizon_cut_the_work(run_cli, tmp_path, duration, line):
    code, _, stderr = run_cli(["run", E20, "--out", str(tmp_path / "r"), "--no-report",
                               "--set", f"duration_s={duration}"])  # fmt: skip
    _, said, after = stderr.partition(line)
    assert code == 0 and said == line, stderr
    if duration == "100":  # all work done: the end line is the last thing said
        assert after == ""
    else:  # cut with work left: the WARNING block after it says what was left unfinished
        assert after.startswith("WARNING: this run looks pathological (1 warning(s)):\n")
        # its first step starts before the horizon and ends at 0.149 s: the run stops there
        assert "32 of 32 requests unfinished when the run stopped at 0.149 s of simulated" in after


def test_command_is_the_argv_main_received(tmp_path):
    from sim.cli import main

    argv = ["run", "--quiet", "--set", "seed=3", E20, "--set", "scheduler.chunked_prefill=false",
            "--out", str(tmp_path / "r")]  # fmt: skip
    assert main(argv) == 0
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["command"] == ["kvsim", *argv]


def test_sigint_to_a_running_kvsim_leaves_nothing(tmp_path):
    """A real Ctrl-C (SIGINT) to a long run: exit 130, the message, no folder."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "long"
    code = (
        # the command's module and typer imported before 'ready', so that the signal lands
        # in the run's body even when a loaded machine makes the imports slow; Python's
        # Ctrl-C handler put back, as a terminal's kvsim has it: a test run started as a
        # background job of a non-interactive shell inherits SIGINT ignored
        "import signal, sys, typer, sim.cli.run; from sim.cli import main; "
        "signal.signal(signal.SIGINT, signal.default_int_handler); "
        "print('ready', file=sys.stderr, flush=True); "
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
    assert first["command"] == [  # the argv as given, in its order (before: rebuilt)
        "kvsim", "run", "chat_azure.yaml", "--out", str(tmp_path / "a"), "--quiet", "--set",
        "workload.num_requests=40",
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
    # the Python API writes the run's own files; the report is kvsim run's (sim.report)
    assert _names(tmp_path / "r") == [f for f in RUN_FILES if not f.startswith(("plot_", "report"))]


# ------------------------------------------------------------------ pathological runs
# 60 requests, one every 50 ms, each writing 9,000 tokens into a pool of ~9,155 tokens
# (1.2 GB at 131,072 B per token): the newest running request is preempted again and again
THRASH = {
    "schema_version": 1,
    "name": "thrash",
    "seed": 0,
    "model": "llama-3-8b",
    "hardware": {"accelerator": "h100-sxm-80gb", "tp": 1, "kv_pool_bytes_per_gpu": 1.2e9},
    "allocator": {"kind": "paged", "block_size": 16},
    "scheduler": {"kind": "vllm_v1"},
    "workload": {
        "kind": "requests",
        "requests": [
            {"count": 1, "at_s": round(0.05 * i, 2), "prompt_tokens": 16, "output_tokens": 9000}
            for i in range(60)
        ],
    },
}


def test_thrashing_is_a_summary_warning_and_a_warning_block(run_cli, tmp_path):
    """A request preempted more than 10 times (PREEMPTIONS_WARN): the run completes (exit 0)
    and says so in summary.json's warnings and in the WARNING block on stderr."""
    from sim.metrics.summary import PREEMPTIONS_WARN

    path = tmp_path / "thrash.yaml"
    path.write_text(yaml.safe_dump(THRASH))
    out = tmp_path / "run"
    code, stdout, stderr = run_cli(["run", str(path), "--out", str(out), "--quiet"])
    assert (code, stdout) == (0, "")
    summary = json.loads((out / "summary.json").read_text())
    preempted = pd.read_parquet(out / "requests.parquet").preemptions
    worst, n = int(preempted.max()), int((preempted > PREEMPTIONS_WARN).sum())
    assert PREEMPTIONS_WARN == 10 and worst > 10 and n >= 1
    assert summary["requests_completed"] == 60 and summary["rejected"] == 0
    sentence = (
        f"thrashing: {n:,} requests were preempted more than 10 times (at most {worst:,}; "
        f"{summary['preemptions']:,} preemptions in all)"
    )
    # 60 requests of 9,000 tokens in 3 s on a 1.2 GB pool also outpace the node: the
    # queue rule (``overload_warning``) says so after the thrashing
    thrash, queue = summary["warnings"]
    assert thrash == sentence and queue.startswith("no steady state: the median queue wait")
    assert stderr == (
        "WARNING: this run looks pathological (2 warning(s)):\n"
        f"WARNING:   - {sentence}\n"
        f"WARNING:   - {queue}\n"
        "WARNING: see summary.json (warnings, rejected_by_reason, trajectories_by_status)\n"
    )


def test_on_a_terminal_the_progress_bar_runs_and_the_end_line_is_said(run_cli, tmp_path, monkeypatch):
    """Standard error on a terminal (faked here): the rich progress bar path, with its
    redraws called from the engine loop, gives the same run and the same end line."""
    import sim.cli._run as cli_run

    monkeypatch.setattr(cli_run, "_is_terminal", lambda stream: True)
    import sim.report.text as text  # the bar's texts (imported on the bar's path)

    calls: list[tuple] = []
    monkeypatch.setattr(text, "progress_text", lambda *a: calls.append(a) or "")
    code, _, stderr = run_cli(["run", E20, "--out", str(tmp_path / "r"), "--no-report",
                               "--set", "duration_s=100"])  # fmt: skip
    assert code == 0 and stderr.endswith(
        "finished at 19.7 s of simulated time: all work done before duration_s = 100 s\n")
    assert len(calls) >= 2  # the first text and the last, at least
    bar = json.loads((tmp_path / "r" / "summary.json").read_text())
    code, _, _ = run_cli(["run", E20, "--out", str(tmp_path / "q"), "--no-report", "--quiet",
                          "--set", "duration_s=100"])  # fmt: skip
    quiet = json.loads((tmp_path / "q" / "summary.json").read_text())
    for s in (bar, quiet):
        s.pop("wall_time_s"), s.pop("command")
    assert bar == quiet


#: ``--out $'x\xff'`` as Python receives it (the byte kept as a surrogate, PEP 383)
NOT_UTF8 = "x\udcff"
NOT_UTF8_ERROR = (
    r"x\xff: not a UTF-8 path (pyarrow reads and writes Parquet tables at UTF-8 paths "
    "only); choose a folder name in UTF-8\n"
)


@pytest.mark.parametrize(
    "args",
    [
        ["run", E20],
        ["run", E20, "--replications", "2"],
        ["sweep", str(WORKLOADS / "coding_agents_sweep.yaml"), "--quiet"],
        ["capacity", str(WORKLOADS / "coding_agents_capacity.yaml"), "--slo", "ttft_p95_s=2"],
        ["compare", E20, E20],
    ],
    ids=["run", "replications", "sweep", "capacity", "compare"],
)
def test_an_out_path_that_is_not_utf8_is_refused_before_any_work(
    run_cli, tmp_path, monkeypatch, args
):
    """Its Parquet tables could not be written (pyarrow takes UTF-8 paths only): one line
    naming --out, exit 2, no run started and nothing written."""
    import sim.run

    def no_run(*a, **k):
        raise AssertionError("the run must not start")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sim.run, "build", no_run)
    code, stdout, stderr = run_cli([*args, "--out", NOT_UTF8])
    assert (code, stdout) == (2, "")
    assert stderr == "kvsim: error: --out: " + NOT_UTF8_ERROR
    assert list(tmp_path.iterdir()) == []


def test_report_of_a_run_folder_whose_path_is_not_utf8_is_one_line(run_cli, tmp_path):
    """``report`` names its argument as the other commands name theirs (``--out: DIR:
    ...``): ``RUN_DIR: DIR: ...``; ``compare`` of that folder says the same line (its
    tables are read by pyarrow too), where it said ``cannot read: UnicodeEncodeError``."""
    out = tmp_path / "e20"
    code, _, stderr = run_cli(["run", E20, "--out", str(out), "--quiet", "--no-report"])
    assert code == 0, stderr
    renamed = out.rename(tmp_path / NOT_UTF8)
    code, stdout, stderr = run_cli(["report", str(renamed)])
    assert (code, stdout) == (2, "")
    assert stderr == f"kvsim: error: RUN_DIR: {tmp_path}/" + NOT_UTF8_ERROR
    code, stdout, stderr = run_cli(["compare", str(renamed), str(renamed), "--out",
                                    str(tmp_path / "cmp")])  # fmt: skip
    assert (code, stdout) == (2, "")
    assert stderr == f"kvsim: error: RUN_DIR: {tmp_path}/" + NOT_UTF8_ERROR
    assert not (tmp_path / "cmp").exists()


@pytest.mark.parametrize(
    "env_set", [{"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0"}]
)
def test_run_lines_on_an_ascii_stdout_keep_non_ascii_characters(tmp_path, env_set):
    """An ASCII stdout (``PYTHONIOENCODING=ascii``, or ``LANG=C`` without Python's UTF-8
    mode) is taken as misconfigured, as click's ``echo`` (which printed these lines before)
    took it: a line it cannot encode goes out in UTF-8, not with ``?``."""
    import os
    import subprocess
    import sys

    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        Path(E20).read_text().replace("name: seed_chunked_prefill", "name: café_✓"),
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "LC_ALL")}
    env.update(env_set)
    for argv, line in [
        (["validate", str(scenario)], -1),
        (["run", str(scenario), "--out", str(tmp_path / "out"), "--no-report"], 0),
    ]:
        proc = subprocess.run(
            [sys.executable, "-m", "sim.cli", *argv],
            capture_output=True, env=env, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        text = proc.stdout.decode("utf-8").splitlines()
        assert "café_✓" in text[line], text


def test_a_utf8_name_python_decoded_as_ascii_says_how_to_fix_it(monkeypatch):
    """``LANG=C`` without Python's UTF-8 mode: ``café`` arrives as ``caf\\udcc3\\udca9``
    (its UTF-8 bytes kept as surrogates), which pyarrow cannot take either."""
    import sys

    from sim.run.output import utf8_path

    monkeypatch.setattr(sys, "getfilesystemencoding", lambda: "ascii")
    with pytest.raises(KvsimError) as err:
        utf8_path("runs/caf\udcc3\udca9", "--out:")
    assert str(err.value) == (
        "--out: runs/café: Python decodes file names as ascii here (LANG=C without UTF-8 "
        "mode) and pyarrow reads and writes Parquet tables at UTF-8 paths only; set "
        "PYTHONUTF8=1 or choose an ASCII name"
    )

"""``kvsim validate FILE [--set ...]`` answered without the typer parser
(``sim.cli._validate``) prints the same lines and returns the same status as the typer
command given the same arguments (which ``sim.cli.main`` uses for every other form)."""

from __future__ import annotations

from pathlib import Path

import pytest

import sim.cli._validate as quick

ONE = "workloads/seed_chunked_prefill.yaml"
CLUSTER = "workloads/cluster_coding_agents.yaml"
SWEEP = "workloads/coding_agents_sweep.yaml"


def test_plain_argv_takes_only_a_file_and_set_flags():
    assert quick.plain_argv(["validate", ONE]) == (Path(ONE), None)
    assert quick.plain_argv(["validate", "--set", "a=1", ONE, "--set=b=2"]) == (
        Path(ONE), ["a=1", "b=2"],
    )  # fmt: skip
    for argv in (
        ["validate"],  # no file: typer's usage error
        ["validate", ONE, CLUSTER],  # two files
        ["validate", ONE, "--help"],
        ["validate", ONE, "--set"],  # a flag without its value
        ["validate", ONE, "--set", "-x"],  # a value that looks like a flag
        ["validate", "-", ONE],
        ["validate", "--", ONE],
        ["validate", ""],
        ["--verbose", "validate", ONE],
        ["run", ONE],
        [],
    ):
        assert quick.plain_argv(argv) is None, argv


def _both(run_cli, monkeypatch, argv: list[str]):
    quick_answer = run_cli(argv)
    with monkeypatch.context() as m:
        m.setattr(quick, "plain_argv", lambda argv: None)  # the typer command
        typer_answer = run_cli(argv)
    return quick_answer, typer_answer


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", ONE],
        ["validate", "./workloads//cluster_coding_agents.yaml"],  # printed as a Path
        ["validate", ONE, "--set", "allocator.kind=buddyy"],
        ["validate", "--set=seed=-1", ONE],
        ["validate", ONE, "--set", "seed=2", "--set", "hardware.tp=0"],
        ["validate", "absent.yaml"],
        ["validate", SWEEP],
        ["validate", SWEEP, "--set", "seed=1"],  # a user error raised by the sweep check
    ],
)
def test_the_quick_path_answers_as_the_typer_command(run_cli, monkeypatch, argv):
    quick_answer, typer_answer = _both(run_cli, monkeypatch, argv)
    assert quick_answer == typer_answer
    assert quick_answer[0] in (0, 2)


def test_more_than_twenty_problems_are_counted_alike(run_cli, monkeypatch, tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("\n".join(f"unknown_{i}: 1" for i in range(25)) + "\n")
    quick_answer, typer_answer = _both(run_cli, monkeypatch, ["validate", str(p)])
    assert quick_answer == typer_answer
    code, out, err = quick_answer
    assert code == 2 and out == ""
    assert err.count("\n") == 21 and err.endswith("more\n")


def test_ctrl_c_gives_status_130_alone_on_both_paths(run_cli, monkeypatch):
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(quick, "_checked", interrupted)  # (what report calls)
    quick_answer, typer_answer = _both(run_cli, monkeypatch, ["validate", ONE])
    assert quick_answer == typer_answer == (130, "", "")


_WARNED = """schema_version: 1
name: warned
seed: 0
model: {profile: nemotron-h-8b, mamba_cache_mode: none}
hardware: {accelerator: h200-141gb, tp: 1, kv_pool_bytes_per_gpu: 20.0e9}
allocator: {kind: radix, block_size: 16}
scheduler: {kind: vllm_v1}
workload:
  kind: requests
  requests: [{count: 1, at_s: 0.0, prompt_tokens: 8180, output_tokens: 12}]
"""


@pytest.mark.parametrize("form", [["validate"], ["validate", "--"]])
def test_ok_line_comes_before_the_warnings_in_one_pipe(tmp_path, form):
    """stdout and stderr into one pipe, Python's buffering on: each line is flushed as it
    is written, so the ``ok`` line stays first (both paths: quick and typer)."""
    import os
    import subprocess
    import sys

    path = tmp_path / "warned_é.yaml"
    path.write_text(_WARNED)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONIOENCODING"] = "ascii"  # a file name the stream cannot encode: in UTF-8
    proc = subprocess.run(
        [sys.executable, "-m", "sim.cli", *form, str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=120,
    )  # fmt: skip
    lines = proc.stdout.decode("utf-8").splitlines()
    assert proc.returncode == 0, lines
    assert lines[0].startswith(f"{path}: ok: warned:"), lines  # as click's echo wrote it
    assert lines[1].startswith("kvsim: warning: "), lines

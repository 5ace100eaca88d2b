"""``kvsim run FILE --out DIR`` with only ``--set``, ``--quiet``, ``--force``,
``--no-report``, ``--trace`` and ``--no-memory-guard`` is answered without the typer parser (``sim.cli._run``):
the same lines, status and run folder as the typer command given the same arguments
(which ``sim.cli.main`` uses for every other form)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import sim.cli._run as quick

ONE = "workloads/seed_chunked_prefill.yaml"
SHORT = ["--set", "duration_s=100"]  # 19.7 s of simulated time: every request done


def test_plain_argv_takes_a_file_out_and_the_plain_flags():
    assert quick.plain_argv(["run", ONE, "--out", "r"]) == {
        "file": Path(ONE), "out": "r", "sets": [], "quiet": False, "force": False,
        "no_report": False, "trace": False, "no_memory_guard": False}  # fmt: skip
    got = quick.plain_argv(["run", "--set", "a=1", "--quiet", ONE, "--out=r", "--set=b=2",
                            "--force", "--no-report", "--trace", "--no-memory-guard"])  # fmt: skip
    assert got == {"file": Path(ONE), "out": "r", "sets": ["a=1", "b=2"], "quiet": True,
                   "force": True, "no_report": True, "trace": True,
                   "no_memory_guard": True}  # fmt: skip
    for argv in (
        ["run", ONE],  # no --out: typer's usage error
        ["run", "--out", "r"],  # no file
        ["run", ONE, "x.yaml", "--out", "r"],  # two files
        ["run", ONE, "--out", "r", "--out", "s"],  # --out twice
        ["run", ONE, "--out", "r", "--quiet", "--quiet"],  # a flag twice
        ["run", ONE, "--out"],  # a flag without its value
        ["run", ONE, "--out", "-r"],  # a value that looks like a flag
        ["run", ONE, "--out", "r", "--set"],
        ["run", ONE, "--out", "r", "--set", "-x"],
        ["run", ONE, "--out", "r", "--replications", "2"],
        ["run", ONE, "--out", "r", "--help"],
        ["run", ONE, "--out", "r", "--quiet=1"],
        ["run", "--", ONE, "--out", "r"],
        ["run", "", "--out", "r"],
        ["validate", ONE],
        [],
    ):
        assert quick.plain_argv(argv) is None, argv


def _both(run_cli, monkeypatch, tmp_path, argv: list[str]):
    """(status, stdout, stderr, the folder's files, its summary less the wall clock) by
    the quick path, then by the typer command, each into its own ``{out}``."""
    answers = []
    for name in ("quick", "typer"):
        out = tmp_path / name
        with monkeypatch.context() as m:
            if name == "typer":
                m.setattr(quick, "plain_argv", lambda argv: None)
            code, stdout, stderr = run_cli([a.replace("{out}", str(out)) for a in argv])
        summary = {}
        if (out / "summary.json").is_file():
            summary = json.loads((out / "summary.json").read_text())
            summary.pop("wall_time_s")
            summary["command"] = [a.replace(str(out), "{out}") for a in summary["command"]]
        stdout = re.sub(r"\(\d+\.\d\d s wall\)", "(wall)", stdout.replace(str(out), "{out}"))
        files = sorted(p.name for p in out.iterdir()) if out.is_dir() else None
        answers.append((code, stdout, stderr.replace(str(out), "{out}"), files, summary))
    return answers


@pytest.mark.parametrize(
    "argv",
    [
        ["run", ONE, "--out", "{out}", "--no-report", *SHORT],
        ["run", ONE, "--out={out}", "--quiet", "--no-report", "--trace", *SHORT],
        ["run", ONE, "--out", "{out}", "--no-report", "--no-memory-guard", *SHORT],
        ["run", "--set", "seed=3", ONE, "--no-report", "--out", "{out}", "--force", *SHORT],
        ["run", ONE, "--out", "{out}", "--set", "seed=-1"],  # a user error: status 2
        ["run", "absent.yaml", "--out", "{out}"],
    ],
)
def test_the_quick_path_answers_as_the_typer_command(run_cli, monkeypatch, tmp_path, argv):
    quick_answer, typer_answer = _both(run_cli, monkeypatch, tmp_path, argv)
    assert quick_answer == typer_answer
    code, _, stderr, files, summary = quick_answer
    if code == 0:
        assert "summary.json" in files and summary["command"][:2] == ["kvsim", "run"]
    else:
        assert (code, files) == (2, None) and stderr.startswith("kvsim: error: ")


def test_a_folder_in_the_way_is_refused_alike(run_cli, monkeypatch, tmp_path):
    for name in ("quick", "typer"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "keep.txt").write_text("mine")
    quick_answer, typer_answer = _both(run_cli, monkeypatch, tmp_path,
                                       ["run", ONE, "--out", "{out}", *SHORT])  # fmt: skip
    assert quick_answer == typer_answer
    assert quick_answer[0] == 2 and quick_answer[3] == ["keep.txt"]


def test_ctrl_c_gives_status_130_and_says_nothing_is_written_on_both_paths(
    run_cli, monkeypatch, tmp_path
):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(quick, "_run", interrupted)
    quick_answer, typer_answer = _both(run_cli, monkeypatch, tmp_path,
                                       ["run", ONE, "--out", "{out}", "--no-report"])  # fmt: skip
    assert quick_answer == typer_answer == (130, "", "interrupted: nothing written\n", None, {})

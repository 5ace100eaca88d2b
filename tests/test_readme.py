"""The README's commands stay true: the main job runs and writes its run folder."""

import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


def test_readme_has_setup_main_job_and_tests():
    setup, main_job, tests = _readme_commands()
    # the dev extra is everything the tests need; torch (750 MB) is opt-in
    assert setup == "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'"
    # the main job: the coding-agent swarm on an 8 x H100 node (fitted on SWE-agent traces)
    assert main_job == ".venv/bin/kvsim run workloads/coding_agent_swarm.yaml --out runs/demo"
    # on every CPU: pytest-xdist comes with the dev extra, and the suite is laid out for it
    assert tests == ".venv/bin/python -m pytest -n auto"
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    assert any(req.startswith("pytest-xdist") for req in dev)


@pytest.mark.parametrize("sets", [
    ["--set", "workload.num_trajectories=8"],  # CI: 8 of the 64 trajectories, 32 at a time
    pytest.param([], marks=pytest.mark.slow, id="full"),  # the command as written
])  # fmt: skip
def test_readme_main_job_writes_the_run_folder(run_cli, tmp_path, monkeypatch, sets):
    argv = shlex.split(_readme_commands()[1])[1:]
    out = tmp_path / "demo"
    argv[argv.index("--out") + 1] = str(out)
    monkeypatch.chdir(ROOT)
    code, _, err = run_cli(["kvsim", *argv, "--quiet", *sets])
    assert code == 0, err
    for name in ("summary.json", "config.resolved.yaml", "requests.parquet", "steps.parquet",
                 "memory.parquet"):
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trajectories_completed"] == summary["trajectories_total"] > 0
    assert summary["warnings"] == [] and summary["rejected"] == 0
    assert (summary["model"], summary["num_gpus"]) == ("llama-3.1-70b", 8)


#: kvsim commands that write a folder named by --out (refused when it is not empty)
WRITING = {"run", "compare", "sweep", "capacity"}


def _all_commands() -> list[list[str]]:
    """Every kvsim command of every ```bash block, in the README's order, as argv."""
    text = (ROOT / "README.md").read_text()
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            argv = shlex.split(line)
            if argv and argv[0].endswith("kvsim"):
                out.append(argv[1:])
    return out


def test_following_the_readme_in_order_never_writes_into_a_filled_folder():
    """Top to bottom, each command that writes gets a folder no earlier command filled
    (or says --force): the report block does not write over the main job's runs/demo."""
    filled: dict[str, int] = {}
    commands = _all_commands()
    assert [c[0] for c in commands][:2] == ["run", "run"]  # the main job, then the report's
    for i, argv in enumerate(commands):
        if argv[0] not in WRITING or "--out" not in argv:
            continue
        folder = argv[argv.index("--out") + 1].rstrip("/")
        assert folder not in filled or "--force" in argv, (
            f"README command {i + 1} ({' '.join(argv[:2])}) writes {folder}, "
            f"which command {filled[folder] + 1} filled"
        )
        filled[folder] = i
    assert len(filled) >= 3  # the main job, the report's run, the comparison


def test_the_main_job_sentence_matches_its_scenario():
    import yaml

    text = " ".join((ROOT / "README.md").read_text().split())
    scenario = yaml.safe_load((ROOT / "workloads" / "coding_agent_swarm.yaml").read_text())
    w = scenario["workload"]
    n, c = w["num_trajectories"], w["arrival"]["concurrency"]
    assert f"{n} coding-agent trajectories, {c} at a time" in text
    assert "in a few seconds" not in text and "swarm of 32 coding agents" not in text
    assert scenario["hardware"]["tp"] == 8 and "TP 8" in text

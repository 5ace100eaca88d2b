"""The README's commands stay true: the main job runs and writes its run folder."""

import json
import re
import shlex
from pathlib import Path

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
    assert tests == ".venv/bin/python -m pytest"


def test_readme_main_job_writes_the_run_folder(run_cli, tmp_path, monkeypatch):
    argv = shlex.split(_readme_commands()[1])[1:]
    out = tmp_path / "demo"
    argv[argv.index("--out") + 1] = str(out)
    monkeypatch.chdir(ROOT)
    code, _, err = run_cli(["kvsim", *argv, "--quiet"])
    assert code == 0, err
    for name in ("summary.json", "config.resolved.yaml", "requests.parquet", "steps.parquet",
                 "memory.parquet"):
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trajectories_completed"] == summary["trajectories_total"] > 0
    assert summary["warnings"] == [] and summary["rejected"] == 0
    assert (summary["model"], summary["num_gpus"]) == ("llama-3.1-70b", 8)

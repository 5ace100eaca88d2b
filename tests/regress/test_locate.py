"""Where ``kvsim regress`` finds its suite without ``--suite``, and that it says so; the
golden suite's scenario cases run frozen copies, not the shipped scenarios."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from sim.regress.locate import resolve_suite
from sim.regress.suite import load_suite

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"

ONE_CASE = """
schema_version: 1
cases:
  - name: fixed-case
    runner: fixed
    inputs: {values: {x: 1.0}}
    metrics:
      x: {better: lower}
"""


def _local_suite(folder: Path) -> Path:
    suite = folder / "tests" / "golden" / "suite.yaml"
    suite.parent.mkdir(parents=True)
    suite.write_text(ONE_CASE.lstrip())
    return suite


def test_the_current_folders_suite_comes_first(tmp_path, monkeypatch):
    suite = _local_suite(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert resolve_suite(None) == suite


def test_without_a_local_suite_the_checkouts_is_used(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_suite(None) == GOLDEN / "suite.yaml"


def test_regress_prints_the_suite_and_baselines_it_used(tmp_path, monkeypatch, run_cli):
    suite = _local_suite(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["regress", "--update", "--json"])
    assert code == 0, out + err
    json.loads(out)  # stdout stays one JSON object
    assert err == f"suite {suite}; baselines {suite.parent / 'baselines'}\n"
    assert (suite.parent / "baselines" / "fixed-case.json").is_file()
    code, out, err = run_cli(["regress", "--suite", str(suite), "--baseline", str(tmp_path / "b")])
    assert f"suite {suite}; baselines {tmp_path / 'b'}" in err


def _scenario_cases():
    return [c for c in load_suite(GOLDEN).cases if c.runner == "scenario"]


def test_golden_scenario_cases_run_frozen_copies():
    cases = _scenario_cases()
    assert cases
    frozen = (GOLDEN / "scenarios").resolve()
    for case in cases:
        path = (GOLDEN / case.inputs.scenario).resolve()
        assert path.parent == frozen, case.name  # never ../../workloads: retuning moves nothing
        assert path.is_file(), case.name


def test_frozen_copies_hold_their_trace_data(tmp_path):
    """Each frozen scenario validates with its traces inside tests/golden/scenarios/."""
    from sim.scenario import load_scenario
    from sim.scenario.paths import file_entries, missing_files

    for path in sorted((GOLDEN / "scenarios").glob("*.yaml")):
        loaded = load_scenario(path)
        assert missing_files(loaded) == [], path.name
        for _, raw in file_entries(loaded.scenario.model_dump(mode="json")):
            target = (path.parent / raw).resolve()
            assert target.is_relative_to((GOLDEN / "scenarios").resolve()), (path.name, raw)


def test_frozen_copies_run_without_the_workloads_folder(tmp_path, run_cli):
    """The golden scenario cases need nothing outside tests/golden/."""
    shutil.copytree(GOLDEN / "scenarios", tmp_path / "scenarios")
    text = yaml.safe_load((GOLDEN / "suite.yaml").read_text())
    cases = [
        c for c in text["cases"] if c["name"] in ("sched-chat-200", "sched-e20-chunked")
    ]
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump({"schema_version": 1, "cases": cases}))
    code, out, err = run_cli(["regress", "--suite", str(tmp_path), "--update"])
    assert code == 0, out + err
    assert {p.name for p in (tmp_path / "baselines").iterdir()} == {
        "sched-chat-200.json",
        "sched-e20-chunked.json",
    }

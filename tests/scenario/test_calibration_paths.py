"""``cost.calibration`` naming a file: relative to the scenario's folder like a trace path,
absolute in ``config.resolved.yaml`` (so it runs again from any folder), and checked to
exist by ``kvsim validate`` and ``kvsim run`` with the scenario line (once)."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from sim.run import build
from sim.run.provenance import resolved_config
from sim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
SYNTHETIC = ROOT / "hardware_profiles" / "calibration" / "synthetic-example.yaml"

SCENARIO = """\
schema_version: 1
name: calibrated
model: llama-3-8b
hardware:
  accelerator: h100-sxm-80gb
cost:
  calibration: {calibration}
workload:
  kind: agent
  num_trajectories: 1
  arrival: {{kind: fixed}}
  turns: 1
  task_tokens: 64
  output_tokens: 2
"""


def _scenario(tmp_path: Path, calibration: str) -> Path:
    folder = tmp_path / "scenarios"
    (folder / "cal").mkdir(parents=True, exist_ok=True)
    shutil.copy(SYNTHETIC, folder / "cal" / "mine.yaml")
    path = folder / "s.yaml"
    path.write_text(SCENARIO.format(calibration=calibration))
    return path


def test_a_relative_calibration_file_is_absolute_in_the_resolved_config(tmp_path, monkeypatch):
    path = _scenario(tmp_path, "cal/mine.yaml")
    monkeypatch.chdir(tmp_path)  # not the scenario's folder
    sim = build(str(path))  # before: looked for ./cal/mine.yaml and failed
    want = str((path.parent / "cal" / "mine.yaml").resolve())
    assert sim.cost.calibration is not None and sim.cost.calibration.path == want
    config = resolved_config(sim.resolved.loaded)
    assert config["cost"]["calibration"] == want
    assert resolved_config(load_scenario(path))["cost"]["calibration"] == want
    assert load_scenario(path).scenario.cost.calibration == "cal/mine.yaml"  # as written
    # the resolved config, moved elsewhere, still names the same file
    moved = tmp_path / "elsewhere" / "c.yaml"
    moved.parent.mkdir()
    moved.write_text(yaml.safe_dump(config))
    assert build(str(moved)).cost.calibration.path == want


def test_a_shipped_calibration_name_stays_a_name(tmp_path):
    path = _scenario(tmp_path, "synthetic-example")
    assert resolved_config(load_scenario(path))["cost"]["calibration"] == "synthetic-example"


def test_a_missing_calibration_file_is_one_problem_with_its_line(tmp_path, run_cli):
    path = _scenario(tmp_path, "cal/nope.yaml")
    want = (
        f"kvsim: error: {path}:7: cost.calibration: no such file: cal/nope.yaml (looked for "
        f"{path.parent / 'cal' / 'nope.yaml'})\n"
    )
    code, out, err = run_cli(["validate", str(path)])
    assert (code, out, err) == (2, "", want)  # once, not again from loading it
    code, out, err = run_cli(["run", str(path), "--out", str(tmp_path / "o")])
    assert (code, err) == (2, want)
    assert not (tmp_path / "o").exists()

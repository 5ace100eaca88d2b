"""``config_sha256`` does not depend on where the checkout lives: files count by content.

Before: the hash was of the resolved config with absolute trace paths, so the same
scenario in two folders hashed differently (and an edited trace hashed the same).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import yaml

from sim.run import config_sha256, run_scenario
from sim.run.provenance import content_sha256

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "workloads" / "data" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
CALIBRATION = ROOT / "hardware_profiles" / "calibration" / "a100-80gb-vidur.yaml"


def _checkout(folder: Path, trace_rows: int = 40) -> Path:
    """A scenario with a relative trace path and a relative calibration file in ``folder``."""
    scenario = yaml.safe_load((ROOT / "workloads" / "chat_azure.yaml").read_text())
    scenario["workload"]["num_requests"] = 12
    scenario["workload"]["lengths"]["path"] = "data/trace.csv"
    scenario["cost"]["calibration"] = "cal/calibration.yaml"
    (folder / "data").mkdir(parents=True)
    (folder / "cal").mkdir()
    lines = TRACE.read_text().splitlines(keepends=True)[: trace_rows + 1]
    (folder / "data" / "trace.csv").write_text("".join(lines))
    shutil.copy(CALIBRATION, folder / "cal" / "calibration.yaml")
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    return path


def test_same_scenario_in_two_checkouts_hashes_the_same(tmp_path):
    a = run_scenario(str(_checkout(tmp_path / "one")))
    b = run_scenario(str(_checkout(tmp_path / "two" / "deeper")))
    # the resolved configs keep their absolute paths (config.resolved.yaml, documented) ...
    assert a.config["workload"]["lengths"]["path"] == str(tmp_path / "one" / "data" / "trace.csv")
    assert a.config["workload"]["lengths"]["path"] != b.config["workload"]["lengths"]["path"]
    assert a.config["cost"]["calibration"] != b.config["cost"]["calibration"]
    # ... and hash the same
    assert a.summary["config_sha256"] == b.summary["config_sha256"]
    assert a.summary["config_sha256"] == config_sha256(a.config) == config_sha256(b.config)


def test_an_edited_trace_or_calibration_changes_the_hash(tmp_path):
    base = _checkout(tmp_path / "base")
    h0 = run_scenario(str(base)).summary["config_sha256"]
    shorter = _checkout(tmp_path / "shorter", trace_rows=39)  # one trace row less
    assert run_scenario(str(shorter)).summary["config_sha256"] != h0
    cal = base.parent / "cal" / "calibration.yaml"
    cal.write_text(cal.read_text() + "\n# edited\n")
    assert run_scenario(str(base)).summary["config_sha256"] != h0


def test_hash_is_the_canonical_json_with_files_by_content(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_bytes(b"ContextTokens,GeneratedTokens\n10,2\n")
    config = {"seed": 1, "workload": {"kind": "chat", "lengths": {"path": str(trace)}}}
    digest = hashlib.sha256(trace.read_bytes()).hexdigest()
    form = {"seed": 1, "workload": {"kind": "chat", "lengths": {"path": f"sha256:{digest}"}}}
    canonical = json.dumps(form, sort_keys=True, separators=(",", ":"))
    assert config_sha256(config) == hashlib.sha256(canonical.encode()).hexdigest()
    assert config["workload"]["lengths"]["path"] == str(trace)  # the config is not changed
    # a config naming no file hashes its plain canonical form, as before
    plain = {"seed": 1, "workload": {"kind": "chat", "num_requests": 3}}
    text = json.dumps(plain, sort_keys=True, separators=(",", ":"))
    assert config_sha256(plain) == hashlib.sha256(text.encode()).hexdigest()


def test_a_folder_hashes_by_its_files_names_and_contents(tmp_path):
    for name in ("x", "y"):
        (tmp_path / name / "sub").mkdir(parents=True)
        (tmp_path / name / "a.json").write_text('{"a": 1}')
        (tmp_path / name / "sub" / "b.json").write_text('{"b": 2}')
    x, y = content_sha256(str(tmp_path / "x")), content_sha256(str(tmp_path / "y"))
    assert x is not None and x == y
    (tmp_path / "y" / "sub" / "b.json").write_text('{"b": 3}')
    assert content_sha256(str(tmp_path / "y")) != x
    (tmp_path / "y" / "sub" / "b.json").write_text('{"b": 2}')
    assert content_sha256(str(tmp_path / "y")) == x
    (tmp_path / "y" / "sub" / "b.json").rename(tmp_path / "y" / "sub" / "c.json")
    assert content_sha256(str(tmp_path / "y")) != x  # a renamed file is a different folder
    assert content_sha256(str(tmp_path / "missing")) is None

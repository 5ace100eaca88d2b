"""benchmarks/same_run.py, the check behind every "no result moves" claim: two runs of
the same scenario are identical; a changed table value, summary key or file is found and
named; the wall clock and the command's provenance are not results."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from sim.run import run_scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "benchmarks" / "chat_azure_5000.yaml"


def _tool():
    spec = importlib.util.spec_from_file_location("same_run", ROOT / "benchmarks" / "same_run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("same_run")
    a, b = base / "a", base / "b"
    run_scenario(str(SCENARIO), **{"workload.num_requests": 40}).write(a)
    run_scenario(str(SCENARIO), **{"workload.num_requests": 40}).write(b)
    return a, b


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_the_same_scenario_twice_is_identical(two_runs) -> None:
    a, b = two_runs
    assert _tool().differences(a, b) == []


def test_a_changed_value_key_or_file_is_named(two_runs, tmp_path) -> None:
    tool = _tool()
    a, _ = two_runs
    b = _copy(a, tmp_path / "table")
    steps = pd.read_parquet(b / "steps.parquet")
    steps.loc[3, "duration_s"] = float(steps.loc[3, "duration_s"]) * (1 + 1e-15) + 1e-18
    steps.to_parquet(b / "steps.parquet")
    assert tool.differences(a, b) == ["steps.parquet: differs (columns duration_s)"]

    b = _copy(a, tmp_path / "summary")
    summary = json.loads((b / "summary.json").read_text())
    summary["ttft_s"]["p99"] += 1e-12
    summary["wall_time_s"] += 5.0  # not a result
    summary["command"] = "kvsim run elsewhere.yaml"  # not a result
    (b / "summary.json").write_text(json.dumps(summary))
    assert tool.differences(a, b) == ["summary.json: ttft_s.p99"]

    b = _copy(a, tmp_path / "file")
    (b / "extra.parquet").write_bytes((a / "steps.parquet").read_bytes())
    assert tool.differences(a, b) == [f"only in {b}: extra.parquet"]

"""benchmarks/same_run.py, the check behind every "no result moves" claim: two runs of
the same scenario are identical; a changed table value, summary key or file is found and
named; the wall clock and the command's provenance are not results."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
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


def _folder(path: Path, summary: dict, tables: dict[str, pd.DataFrame]) -> Path:
    """A run folder of a summary and tables, made here (the comparison's rules alone)."""
    for rel, frame in tables.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(path / rel)
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def _frame(**change) -> pd.DataFrame:
    cols = {"t_s": [0.0, float("nan"), 2.0], "n": pd.array([1, 2, 3], dtype="int64"),
            "kind": ["a", "b", "c"]}  # fmt: skip
    cols.update(change)
    return pd.DataFrame(cols)


SUMMARY = {"schema_version": 1, "ttft_s": {"p99": 0.5}, "counts": [1, 2.5], "exact": False,
           "ratio": float("nan"),  # kvsim writes none, but a NaN is the same as a NaN
           "wall_time_s": 1.0, "command": ["kvsim", "run", "a.yaml"], "scenario_path": "/a"}  # fmt: skip


@pytest.mark.parametrize(
    ("summary", "tables", "found"),
    [
        ({}, {}, []),  # NaN equals NaN; the wall clock and the provenance are not results
        ({"wall_time_s": 9.0, "command": ["kvsim"], "scenario_path": "/b"}, {}, []),
        ({"exact": 0}, {}, ["summary.json: exact"]),  # false and 0: a type changed
        ({"schema_version": 1.0}, {}, ["summary.json: schema_version"]),
        ({"counts": [1, 2.6]}, {}, ["summary.json: counts.1"]),
        ({"counts": [1]}, {}, ["summary.json: counts"]),
        ({"new_key": 1}, {}, ["summary.json: new_key (only in the second)"]),
        ({}, {"t.parquet": _frame(t_s=[0.0, 0.0, 2.0])}, ["t.parquet: differs (columns t_s)"]),
        ({}, {"t.parquet": _frame(n=pd.array([1, 2, 3], dtype="int32"))},
         ["t.parquet: differs (columns n)"]),  # the same values, another dtype
        ({}, {"t.parquet": _frame()[["n", "t_s", "kind"]]},
         ["t.parquet: differs (columns order or index)"]),
        ({}, {"sub/t.parquet": _frame(kind=["a", "b", "d"])},
         ["sub/t.parquet: differs (columns kind)"]),
    ],
)  # fmt: skip
def test_the_rules_of_a_difference(tmp_path, summary, tables, found) -> None:
    base = {"t.parquet": _frame(), "sub/t.parquet": _frame()}
    a = _folder(tmp_path / "a", SUMMARY, base)
    b = _folder(tmp_path / "b", {**SUMMARY, **summary}, {**base, **tables})
    assert _tool().differences(a, b) == found


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "same_run.py"), *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300)  # fmt: skip


def test_the_command_line_exit_status(two_runs, tmp_path) -> None:
    a, b = two_runs
    same = _cli(str(a), str(b), cwd=tmp_path)
    assert (same.returncode, same.stdout.strip()) == (0, "identical (7 files)")
    other = _copy(a, tmp_path / "other")
    summary = json.loads((other / "summary.json").read_text())
    summary["requests_completed"] += 1
    (other / "summary.json").write_text(json.dumps(summary))
    differ = _cli(str(a), str(other), cwd=tmp_path)
    assert differ.returncode == 1
    assert differ.stdout.splitlines()[0] == "summary.json: requests_completed"
    missing = _cli(str(a), str(tmp_path / "nowhere"), cwd=tmp_path)
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.strip().endswith("nowhere: not a kvsim run folder (no summary.json)")
    assert len(missing.stderr.strip().splitlines()) == 1


def test_trees_run_each_checkouts_own_kvsim(tmp_path) -> None:
    scenario = "benchmarks/chat_azure_5000.yaml"
    ok = _cli("--trees", str(ROOT), str(ROOT), scenario, "--set", "workload.num_requests=20",
              cwd=tmp_path)  # fmt: skip
    assert (ok.returncode, ok.stdout.strip()) == (0, "identical (7 files)"), ok.stderr
    empty = tmp_path / "empty"
    (empty / "sim").mkdir(parents=True)  # a folder named sim, but no kvsim in it
    bad = _cli("--trees", str(ROOT), str(empty), scenario, cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        f"same_run: {empty}: Python started there does not import that tree's kvsim"
    ]

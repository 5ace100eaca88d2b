"""One schema per output (sim/metrics/schema.py): every run's outputs follow it, the
producers' columns equal it, docs/metrics.md is its render, and the checks catch drift."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from report_helpers import ROOT

from sim.metrics import MEMORY_COLUMNS, REQUEST_COLUMNS, STEP_COLUMNS, TRAJECTORY_COLUMNS
from sim.metrics.pauses import PAUSE_COLUMNS, PAUSE_DTYPES
from sim.metrics.recorder import GROUP_COLUMNS
from sim.metrics.schema import (
    OPTIONAL_TABLES,
    SUMMARY_KEYS,
    TABLES,
    _value_problem,
    check_run_folder,
    check_summary,
    check_table,
    metrics_markdown,
)

TABLE_RUNS = ("e20_run", "agent_run")


@pytest.mark.parametrize("name", TABLE_RUNS)
def test_every_run_output_follows_the_schema(name, request):
    run = request.getfixturevalue(name)
    assert check_summary(run.summary) == []
    for table in TABLES:
        frame = getattr(run, table)
        if frame is None:  # written only by some runs (memory_groups: several layer groups)
            assert table in OPTIONAL_TABLES and OPTIONAL_TABLES[table] not in run.summary
            continue
        assert check_table(table, frame) == [], table


def test_a_written_run_folder_follows_the_schema(agent_folder):
    assert check_run_folder(agent_folder) == []


def test_producers_columns_are_the_declared_ones_in_order():
    # the run layer appends the ``node`` column to every producer's table
    declared = {n: [c.name for c in cols] for n, cols in TABLES.items()}
    assert declared["requests"] == [*REQUEST_COLUMNS, "node"]
    assert declared["steps"] == [*STEP_COLUMNS, "node"]
    assert declared["memory"] == [*MEMORY_COLUMNS, "node"]
    assert declared["trajectories"] == [*TRAJECTORY_COLUMNS, "node"]
    assert declared["pauses"] == [*PAUSE_COLUMNS, "node"]
    assert declared["memory_groups"] == [*GROUP_COLUMNS, "node"]


def test_the_pause_table_s_dtypes_are_the_declared_ones():
    """``pause_table`` types each column as declared (int64, float64, Python strings)."""
    kinds = {"int": "i", "float": "f", "str": "O"}
    declared = [kinds[c.dtype] for c in TABLES["pauses"] if c.name != "node"]
    assert [np.dtype(d).kind for d in PAUSE_DTYPES] == declared


def test_counts_and_bytes_are_integers_and_units_are_in_the_names():
    for key in SUMMARY_KEYS:
        if key.unit in ("bytes", "count", "tokens") and not key.name.endswith(
            ("_mean", "_per_token")
        ):
            assert key.kind in ("int", "counts"), key.name
        if key.unit == "s":
            assert key.name.endswith("_s"), key.name
        if key.unit == "bytes":
            assert "bytes" in key.name, key.name


def test_docs_metrics_md_is_the_generated_render():
    text = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert text == metrics_markdown(), "run: python docs/gen_metrics.py"
    assert "`prefix_match_rate`" in text and "`paused_hbm_gb_s`" in text


def test_checks_catch_undeclared_missing_and_mistyped_keys(e20_run):
    s = json.loads(json.dumps(e20_run.summary))
    s["made_up_key"] = 1
    del s["ttft_s"]
    s["preemptions"] = 0.5
    s["itl_s"] = {"mean": None}
    problems = check_summary(s)
    assert "summary.json: made_up_key: not declared in sim/metrics/schema.py" in problems
    assert "summary.json: ttft_s: missing" in problems
    assert any(p.startswith("summary.json: preemptions: is 0.5") for p in problems)
    assert any(p.startswith("summary.json: itl_s:") for p in problems)
    assert len(problems) == 4
    frame = e20_run.requests.rename(columns={"ttft_s": "ttft"})
    assert check_table("requests", frame)[0].startswith("requests.parquet: columns differ")
    bad = e20_run.steps.assign(n_steps=e20_run.steps.n_steps.astype(float))
    assert check_table("steps", bad) == ["steps.parquet: n_steps: dtype float64, declared int"]
    assert check_table("pauses", pd.DataFrame(columns=[*PAUSE_COLUMNS, "node"])) == []


def test_kv_by_group_keys_are_checked():
    """``allocated_bytes_by_group_mean`` is a ``floats`` value ({name: number}); its peak
    twin a ``counts`` one (integers)."""
    good = {"peak_allocated_bytes_by_group": {"full": 10, "sliding": 4},
            "allocated_bytes_by_group_mean": {"full": 9.5, "sliding": 3}}  # fmt: skip
    bad = {"peak_allocated_bytes_by_group": {"full": 10.5},
           "allocated_bytes_by_group_mean": {"full": float("nan"), "x": "a"}}  # fmt: skip
    keys = {k.name: k for k in SUMMARY_KEYS}
    assert [k for k, v in good.items() if _value_problem(keys[k], v)] == []
    assert [k for k, v in bad.items() if _value_problem(keys[k], v)] == list(bad)

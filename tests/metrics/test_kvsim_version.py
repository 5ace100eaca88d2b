"""``summary.json``'s ``kvsim_version``: the version that made a run, never a metric.

It is declared in the schema, equals ``sim.__version__`` (one source, ``sim.version``),
heads ``config.resolved.yaml``, stays out of a cluster's per-node entries, and never
reaches a golden baseline: ``kvsim regress`` flattens summaries to numbers only.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

import sim
from sim.metrics.schema import RUN_ONLY_KEYS, SUMMARY_KEYS, check_summary
from sim.regress.runners import RunContext, flatten_metrics, get_runner
from sim.run import run_scenario
from sim.version import __version__

ROOT = Path(__file__).resolve().parents[2]
TINY = {
    "name": "version_tiny",
    "seed": 0,
    "model": "llama-3.1-8b",
    "hardware": {"accelerator": "h100-sxm-80gb", "kv_pool_bytes_per_gpu": 4e9},
    "allocator": {"kind": "paged", "block_size": 16},
    "workload": {"kind": "requests",
                 "requests": [{"count": 2, "at_s": 0.0, "prompt_tokens": 64, "output_tokens": 2}]},
}  # fmt: skip


@pytest.fixture(scope="module")
def tiny():
    return run_scenario(TINY)


def test_one_version_string_everywhere():
    assert sim.__version__ == __version__
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"]["attr"] == "sim.version.__version__"
    key = {k.name: k for k in SUMMARY_KEYS}["kvsim_version"]
    assert key.kind == "str" and not key.optional and not key.nullable
    assert "kvsim_version" in RUN_ONLY_KEYS


def test_the_summary_and_the_run_folder_say_the_version(tiny, tmp_path):
    assert tiny.summary["kvsim_version"] == __version__
    assert check_summary(tiny.summary) == []
    out = tiny.write(tmp_path / "run")
    written = json.loads((out / "summary.json").read_text())
    assert written["kvsim_version"] == __version__
    head = (out / "config.resolved.yaml").read_text().splitlines()[0]
    assert head.startswith(f"# kvsim {__version__}: the scenario ")


def test_regress_never_compares_the_version(tiny, tmp_path):
    flat = flatten_metrics(tiny.summary)
    assert "kvsim_version" not in flat and "versions.python" not in flat
    assert flat["requests_completed"] == 2  # the numbers are still there
    # the scenario runner (what a golden case runs) offers numbers only
    (tmp_path / "tiny.yaml").write_text(json.dumps(TINY))  # JSON is YAML
    runner = get_runner("scenario")
    offered = runner.run(runner.inputs_model(scenario="tiny.yaml"), RunContext(tmp_path))
    assert "kvsim_version" not in offered
    assert offered["requests_completed"] == 2


def test_cluster_nodes_leave_the_version_to_the_run():
    two = run_scenario({**TINY, "cluster": {"nodes": [{"count": 2}]}})
    assert two.summary["kvsim_version"] == __version__
    assert all("kvsim_version" not in n for n in two.summary["nodes"])
    assert check_summary(two.summary) == []

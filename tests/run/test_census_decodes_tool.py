"""benchmarks/census_decodes.py on a cluster: a DP+EP engine's lockstep ranks (it counted
the decisions of no node there and divided by that zero), and a run without any decision
(it says the census does not apply)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from sim.run import run_scenario

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "benchmarks" / "census_decodes.py"
DP_EP = ROOT / "tests" / "golden" / "scenarios" / "dp2_ep2_qwen3_30b_a3b.yaml"


def _tool():
    spec = importlib.util.spec_from_file_location("census_decodes", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_dp_ep_lockstep_scenario_is_censused_over_both_ranks():
    """Its decisions are every rank's: the run's own ``engine_decisions`` (the sum of the
    nodes'), and the decision mix adds up to them."""
    summary = run_scenario(str(DP_EP), **{"workload.num_requests": 12}).summary
    decisions = summary["engine_decisions"]
    assert decisions == sum(n["engine_decisions"] for n in summary["nodes"]) > 0
    proc = subprocess.run(
        [sys.executable, str(TOOL), str(DP_EP), "--set", "workload.num_requests=12"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].endswith(f"; decisions {decisions:,}")
    mix = [line for line in lines if line.startswith(("| decodes alone", "| mixed"))]
    assert sum(int(line.split("|")[2].replace(",", "")) for line in mix) == decisions


def test_a_run_without_decisions_says_the_census_does_not_apply(monkeypatch, capsys):
    tool = _tool()
    no_steps = SimpleNamespace(parts=[SimpleNamespace(recorder=SimpleNamespace(decisions=0))])
    monkeypatch.setattr(tool, "build", lambda *a, **k: no_steps)
    monkeypatch.setattr(tool, "loop", lambda sim: None)
    monkeypatch.setattr(sys, "argv", ["census_decodes.py", "any.yaml"])
    tool.main()
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "no scheduling decision in this run: the census does not apply"

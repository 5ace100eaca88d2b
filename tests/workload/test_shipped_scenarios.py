"""Every shipped scenario (``workloads/*.yaml``) runs clean in a reduced variant (CI-sized).

Each scenario file is run with its counts cut (``num_trajectories``, ``num_requests``, per
``mix`` component too) and must end healthy: no warnings (the allocator studies, overloaded by design: the
overload warning only), nothing rejected; the agent
scenarios also cut no request short at the model's window and complete every trajectory.
Sweep files (a ``sweep:`` key) are not scenarios and are skipped. The full-size runs are what docs/scenarios.md
lists; the agent scenarios of issue "Workloads fitted on real agent traces" open with the
question they answer.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sim.run import run_scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(
    p for p in ROOT.glob("workloads/*.yaml") if "sweep" not in yaml.safe_load(p.read_text())
)
#: the counts of a reduced run
MAX_TRAJECTORIES, MAX_REQUESTS = 6, 150

#: scenarios overloaded by design (Poisson arrivals far above what the pool serves, so
#: requests always wait for memory: the vLLM paper's allocator study): their one warning
#: is the overload rule's (h101), nothing else
OVERLOADED_BY_DESIGN = ("allocator_study", "allocator_study_opt13b")

#: the scenarios of the agent-workloads issue, each opening with its question
AGENT_SCENARIOS = (
    "coding_agent_swarm",
    "function_calling_h200",
    "human_in_loop_nvme",
    "multi_agent_team",
    "tree_search_h100",
    "mixed_chat_agents",
    "mooncake_replay",
    "harness_layout",
)


def reduced(workload: dict, prefix: str = "workload") -> dict:
    """``--set`` overrides that cut a workload's counts (its ``mix`` components' too)."""
    out = {}
    if workload.get("kind") == "mix":
        for i, comp in enumerate(workload["components"]):
            out.update(reduced(comp, f"{prefix}.components.{i}"))
        return out
    if "num_trajectories" in workload:
        out[f"{prefix}.num_trajectories"] = min(workload["num_trajectories"], MAX_TRAJECTORIES)
    if workload.get("kind") in ("chat", "mooncake") or "num_requests" in workload:
        n = workload.get("num_requests") or MAX_REQUESTS
        out[f"{prefix}.num_requests"] = min(n, MAX_REQUESTS)
    return out


def test_the_agent_scenarios_ship():
    names = {p.stem for p in SCENARIOS}
    assert set(AGENT_SCENARIOS) <= names
    for name in AGENT_SCENARIOS:
        text = (ROOT / "workloads" / f"{name}.yaml").read_text()
        assert text.startswith("# Question: "), name  # which question it answers
        assert "Numbers: " in text.split("schema_version")[0], name  # where they come from


def test_the_reduction_cuts_mixes_and_replays():
    mix = yaml.safe_load((ROOT / "workloads/mixed_chat_agents.yaml").read_text())["workload"]
    assert reduced(mix) == {
        "workload.components.0.num_requests": MAX_REQUESTS,
        "workload.components.1.num_trajectories": MAX_TRAJECTORIES,
    }
    assert reduced({"kind": "mooncake", "start_row": 250}) == {
        "workload.num_requests": MAX_REQUESTS
    }


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_shipped_scenario_runs_clean_reduced(path):
    doc = yaml.safe_load(path.read_text())
    res = run_scenario(str(path), **reduced(doc["workload"]))
    s = res.summary
    if path.stem in OVERLOADED_BY_DESIGN:
        [said] = s["warnings"]
        assert said.startswith("no steady state: the median queue wait grew"), said
    else:
        assert s["warnings"] == [], s["warnings"]
    assert s["rejected"] == 0
    if path.stem in AGENT_SCENARIOS:  # (a study of the window, e.g. allocator_study, may cut)
        assert (res.requests.finish_reason == "stop").all()  # nothing cut by the window
        assert s["trajectories_completed"] == s["trajectories_total"] > 0

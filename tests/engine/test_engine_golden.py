"""Golden summaries of the shipped scenarios, in reduced variants (CI-sized).

A change that moves any summary figure fails here; if the change is intended, regenerate
with ``KVSIM_UPDATE_GOLDEN=1 pytest tests/engine/test_engine_golden.py`` and review the diff.
"""

from __future__ import annotations

import json
import os

import pytest
from engine_helpers import ROOT, assert_same_summary, run

GOLDEN = ROOT / "tests" / "engine" / "golden"
VARIANTS = {
    "seed_chunked_prefill": ("seed_chunked_prefill.yaml", {}),
    "seed_chunked_prefill_monolithic": (
        "seed_chunked_prefill.yaml",
        {"scheduler.chunked_prefill": False},
    ),
    "chat_azure_200": ("chat_azure.yaml", {"workload.num_requests": 200}),
    "agent_swarm_8": ("agent_swarm.yaml", {"workload.num_trajectories": 8}),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_golden_summary(name):
    scenario, overrides = VARIANTS[name]
    summary = run(scenario, **overrides, **{"engine.check_invariants": False}).summary
    path = GOLDEN / f"{name}.json"
    # where and when a run came from, not what it simulated
    local = ("wall_time_s", "versions", "kvsim_version", "command", "scenario_path", "config_sha256")
    if os.environ.get("KVSIM_UPDATE_GOLDEN"):
        keep = {k: v for k, v in summary.items() if k not in local}
        path.write_text(json.dumps(keep, indent=2, sort_keys=True) + "\n")
    expected = json.loads(path.read_text())
    expected.update({k: summary[k] for k in local})
    assert_same_summary(summary, expected)

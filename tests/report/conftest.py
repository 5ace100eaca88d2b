"""Shared runs for the report tests: the tiny E20 scenario and a small agent swarm."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # report_helpers

from report_helpers import E20, SWARM  # noqa: E402

from sim.run import run_scenario  # noqa: E402


@pytest.fixture(scope="session")
def e20_run():
    return run_scenario(E20)


@pytest.fixture(scope="session")
def agent_run():
    """Tool pauses, a prefix cache, coalesced decode runs: every plot has data."""
    return run_scenario(SWARM, **{"workload.num_trajectories": 6})


@pytest.fixture(scope="session")
def agent_folder(tmp_path_factory):
    """``kvsim run --trace`` of the small swarm: a run folder with its report."""
    from sim.cli import main

    out = tmp_path_factory.mktemp("runs") / "swarm"
    argv = ["run", SWARM, "--out", str(out), "--quiet", "--trace",
            "--set", "workload.num_trajectories=6"]  # fmt: skip
    assert main(argv) == 0
    return out

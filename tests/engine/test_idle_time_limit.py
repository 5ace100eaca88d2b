"""``engine.max_sim_time_s`` holds while the node is idle too: a workload driver that
waits without posting (a plug-in polling with SimPy timeouts) stops at the guard with the
busy case's message, instead of running for ever; a horizon before the guard still ends
the run cleanly there."""

from __future__ import annotations

from typing import Literal

import pytest

from sim.engine.node import SimTimeLimitError
from sim.run import run_scenario
from sim.workload import WORKLOADS, WorkloadKind, register_workload
from sim.workload.chat import requests_count
from sim.workload.common_config import RequestsWorkload

BASE = {"schema_version": 1, "model": "llama-3.1-8b", "hardware": {"accelerator": "h100-sxm-80gb"}}
REQUESTS = [{"count": 2, "at_s": 0.0, "prompt_tokens": 64, "output_tokens": 4}]


class PollWorkload(RequestsWorkload):
    kind: Literal["poll"] = "poll"  # type: ignore[assignment]


def poll_driver(cfg, ctx):
    """Polls every simulated hour for ever and never posts its requests."""
    while True:
        yield ctx.env.timeout(3600.0)


@pytest.fixture
def poll():
    register_workload(WorkloadKind("poll", PollWorkload, requests_count, poll_driver))
    yield
    del WORKLOADS["poll"]


def test_a_driver_that_polls_without_posting_stops_at_the_guard(deadline, poll):
    """It used to run for ever (the idle node never looked at the clock)."""
    sc = {**BASE, "engine": {"max_sim_time_s": 1e5}, "workload": {"kind": "poll", "requests": REQUESTS}}
    with deadline(60), pytest.raises(SimTimeLimitError) as exc:
        run_scenario(sc)
    assert str(exc.value) == (
        "simulated time reached t=100000 s, past engine.max_sim_time_s = 100000 s; stuck "
        "trajectories: none; raise engine.max_sim_time_s if the run is meant to be this "
        "long, or set duration_s below it to stop cleanly there"
    )


def test_a_polling_driver_ends_cleanly_at_a_horizon_before_the_guard(deadline, poll):
    sc = {**BASE, "duration_s": 50.0, "engine": {"max_sim_time_s": 1e5},
          "workload": {"kind": "poll", "requests": REQUESTS}}  # fmt: skip
    with deadline(60):
        r = run_scenario(sc)
    assert r.summary["sim_time_s"] == 50.0
    assert r.summary["trajectories_completed"] == 0

"""A workload kind whose ``count`` disagrees with its driver is one line naming the kind
and both numbers (``WorkloadContext.miscounted``), instead of a trajectory dropped
silently (count too low) or SimPy's "No scheduled events left" (count too high); a
``mix`` component is named by its place."""

from __future__ import annotations

from typing import Literal

import pytest

from sim.engine.node import WorkloadStoppedError
from sim.errors import KvsimError
from sim.run import build, run_scenario
from sim.workload import WORKLOADS, WorkloadKind, register_workload
from sim.workload.chat import requests_count, requests_driver
from sim.workload.common_config import RequestsWorkload
from sim.workload.context import trajectory_row

BASE = {"schema_version": 1, "model": "llama-3.1-8b", "hardware": {"accelerator": "h100-sxm-80gb"}}
AT_ONCE = [{"count": 5, "at_s": 0.0, "prompt_tokens": 64, "output_tokens": 4}]
#: 3 requests that end long before the 4th arrives
LATE = [{"count": 3, "at_s": 0.0, "prompt_tokens": 64, "output_tokens": 4},
        {"count": 1, "at_s": 5.0, "prompt_tokens": 64, "output_tokens": 4}]  # fmt: skip
TAIL = "; count(cfg) must be the number of trajectories the driver starts and ends (docs/plugins.md)"


class FewerWorkload(RequestsWorkload):
    kind: Literal["fewer"] = "fewer"  # type: ignore[assignment]


class MoreWorkload(RequestsWorkload):
    kind: Literal["more"] = "more"  # type: ignore[assignment]


class EndsWorkload(RequestsWorkload):
    kind: Literal["ends"] = "ends"  # type: ignore[assignment]


def ends_driver(cfg, ctx):
    """Posts nothing and records one more trajectory than its count, none started."""
    yield ctx.env.timeout(1.0)
    for i in range(requests_count(cfg) + 1):
        ctx.trajectory_ended(trajectory_row(i, "ends", 0.0, ctx.now, "completed", 0, [], 0, 0.0), True)


@pytest.fixture
def miscounted():
    """``fewer`` declares one trajectory less than its driver runs, ``more`` one more."""
    register_workload(WorkloadKind("fewer", FewerWorkload, lambda c: requests_count(c) - 1, requests_driver))
    register_workload(WorkloadKind("more", MoreWorkload, lambda c: requests_count(c) + 1, requests_driver))
    register_workload(WorkloadKind("ends", EndsWorkload, requests_count, ends_driver))
    yield
    del WORKLOADS["fewer"], WORKLOADS["more"], WORKLOADS["ends"]


def _run(kind: str, requests: list[dict], **extra) -> None:
    run_scenario({**BASE, **extra, "workload": {"kind": kind, "requests": requests}})


def test_a_count_too_low_with_the_trajectories_in_flight(miscounted):
    """The 5th started while the others ran (it used to finish beyond the count: 5
    completed of 4)."""
    with pytest.raises(KvsimError) as exc:
        _run("fewer", AT_ONCE)
    assert str(exc.value) == (
        "workload kind 'fewer': its count says 4 trajectories but its driver started more "
        "(trajectory 5)" + TAIL
    )


def test_a_count_too_low_with_a_trajectory_still_to_come(miscounted):
    """The 4th arrives after the 3 declared have ended (it used to be dropped: a run of
    3, exit 0)."""
    with pytest.raises(KvsimError) as exc:
        _run("fewer", LATE)
    assert str(exc.value) == (
        "workload kind 'fewer': its count says 3 trajectories but its driver was still "
        "running when those 3 had ended (a driver returns once it has started them all)"
        + TAIL
    )


@pytest.mark.parametrize("requests", [AT_ONCE, LATE], ids=["at_once", "late"])
def test_a_count_too_high(miscounted, requests):
    """It used to end in SimPy's RuntimeError "No scheduled events left"."""
    n = requests_count(FewerWorkload(requests=requests))
    with pytest.raises(KvsimError) as exc:
        _run("more", requests)
    assert str(exc.value) == (
        f"workload kind 'more': its count says {n + 1} trajectories but its driver ended "
        f"{n} (of {n} started) and then posted nothing more" + TAIL
    )


def test_a_count_too_high_in_a_cluster(miscounted):
    with pytest.raises(KvsimError, match=r"^workload kind 'more': its count says 6 trajectories but its driver ended 5 \(of 5 started\)"):
        _run("more", AT_ONCE, cluster={"nodes": [{"count": 2}]})


def test_a_driver_that_ends_more_than_its_count(miscounted):
    with pytest.raises(KvsimError) as exc:
        _run("ends", LATE)
    assert str(exc.value) == (
        "workload kind 'ends': its count says 4 trajectories but its driver ended more "
        "(trajectory 5)" + TAIL
    )


def test_the_engine_says_the_workload_stopped_without_the_runner(miscounted):
    """The node's own error (``sim.run`` names the kind and the counts in its place)."""
    sim = build({**BASE, "engine": {"max_sim_time_s": 1e4},
                 "workload": {"kind": "more", "requests": LATE}})  # fmt: skip
    sim.env.process(sim.driver)
    with pytest.raises(WorkloadStoppedError) as exc:
        sim.env.run(until=sim.node.process)
    assert str(exc.value) == (
        "the node is idle since t=5.01919 s and nothing is left that could post, yet the "
        "workload never said it finished (its trajectories did not all end); stuck "
        "trajectories: none"
    )


def test_a_mix_component_is_named_by_its_place(miscounted):
    comps = [{"kind": "requests", "requests": AT_ONCE}, {"kind": "fewer", "requests": AT_ONCE}]
    with pytest.raises(KvsimError) as exc:
        run_scenario({**BASE, "workload": {"kind": "mix", "components": comps}})
    assert str(exc.value) == (
        "workload kind 'fewer' (workload.components.1): its count says 4 trajectories but "
        "its driver started more (trajectory 5)" + TAIL
    )


def test_a_count_that_agrees_runs(miscounted):
    assert run_scenario({**BASE, "workload": {"kind": "requests", "requests": LATE}}).summary[
        "trajectories_completed"
    ] == 4


def test_a_mix_component_still_running_after_the_others_is_named_by_its_place(miscounted):
    """Its 4th trajectory arrives after every declared one has ended (the mix's own
    driver returns at once, so it used to be dropped: a run of 8, exit 0)."""
    comps = [{"kind": "requests", "requests": AT_ONCE}, {"kind": "fewer", "requests": LATE}]
    with pytest.raises(KvsimError) as exc:
        run_scenario({**BASE, "workload": {"kind": "mix", "components": comps}})
    assert str(exc.value) == (
        "workload kind 'fewer' (workload.components.1): its count says 3 trajectories but "
        "its driver was still running when those 3 had ended (a driver returns once it "
        "has started them all)" + TAIL
    )


def test_a_mix_component_that_ends_fewer_is_named_by_its_place(miscounted):
    comps = [{"kind": "requests", "requests": AT_ONCE}, {"kind": "more", "requests": LATE}]
    with pytest.raises(KvsimError) as exc:
        run_scenario({**BASE, "workload": {"kind": "mix", "components": comps}})
    assert str(exc.value) == (
        "workload kind 'more' (workload.components.1): its count says 5 trajectories but "
        "its driver ended 4 (of 4 started) and then posted nothing more" + TAIL
    )


def test_a_mix_whose_counts_agree_runs(miscounted):
    comps = [{"kind": "requests", "requests": AT_ONCE}, {"kind": "requests", "requests": LATE}]
    r = run_scenario({**BASE, "workload": {"kind": "mix", "components": comps}})
    assert r.summary["trajectories_completed"] == 9

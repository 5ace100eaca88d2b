"""h101: a run whose arrivals outpace the node says so (no steady state: the latency
percentiles grow with the run's length); a healthy run and a closed loop stay silent.
The rule (``overload_warning``): the median queue wait of the last third of the arrivals
over ``OVERLOAD_WAIT_S`` (1 s) and over ``OVERLOAD_GROWTH`` (4x) the first third's, the
arrivals not all at one instant."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.metrics.summary import closed_loop_workloads, overload_warning, run_warnings
from sim.run.runner import load_scenario, run_scenario

ROOT = Path(__file__).resolve().parents[2]
NAN = float("nan")


def _queue(waits: list[float], *, status=None, workload=None) -> pd.DataFrame:
    """One request a second (arrival i), ids in reverse arrival order (the table is not in
    arrival order), with the queue waits given (NaN: never admitted)."""
    n = len(waits)
    return pd.DataFrame({
        "req_id": list(range(n - 1, -1, -1)),
        "status": status or ["finished"] * n,
        "arrival_s": [float(i) for i in range(n)],
        "queue_s": waits,
        "workload": workload or ["chat"] * n,
        "preemptions": [0] * n,
    })  # fmt: skip


def _summary(n: int, sim_time_s: float = 100.0) -> dict:
    return {"unfinished": 0, "requests_submitted": n, "rejected": 0, "rejected_by_reason": {},
            "preemptions": 0, "trajectories_ended": n, "sim_time_s": sim_time_s,
            "trajectories_by_status": {"completed": n, "failed": 0, "context_exhausted": 0}}


def test_a_queue_that_grows_is_named_with_its_medians():
    """30 requests, wait 0.1 x i s for arrival i (a queue that grows 0.1 s a second):
    first third arrivals 0-9, median (0.4 + 0.5) / 2 = 0.45 s; middle 10-19, 1.45 s; last
    third 20-29, median (2.4 + 2.5) / 2 = 2.45 s: over 1 s and over
    4 x 0.45 = 1.8 s -> warned."""
    waits = [0.1 * i for i in range(30)]
    want = ("no steady state: the median queue wait grew from 0.450 s over the first 10 "
            "arrivals through 1.450 s to 2.450 s over the last 10: arrivals outpace what the "
            "engine serves, or the run is too short for a queue this close to capacity to "
            "settle; either way the latency percentiles depend on the run's length (a longer "
            "run tells which; rule: the last third's median over 1 s and over 4x the first "
            "third's)")  # fmt: skip
    assert overload_warning(_summary(30), _queue(waits)) == want
    assert run_warnings(_summary(30), _queue(waits)) == [want]
    # the same queue, but the requests are a closed loop's: left out
    assert overload_warning(_summary(30), _queue(waits), frozenset({"chat"})) is None


def test_steady_short_or_slow_growth_is_silent():
    # a steady queue: 2 s early and late (busy, not running away)
    assert overload_warning(_summary(30), _queue([2.0] * 30)) is None
    # grows 4x but stays under 1 s: first median 0.2, last 0.8
    assert overload_warning(_summary(30), _queue([0.2] * 10 + [0.5] * 10 + [0.8] * 10)) is None
    # over 1 s but only 3x the first third's: 0.5 -> 1.5
    assert overload_warning(_summary(30), _queue([0.5] * 10 + [1.0] * 10 + [1.5] * 10)) is None
    # every request at one instant (a batch): its queue is by design, whatever it waits
    batch = _queue([0.1 * i for i in range(30)]).assign(arrival_s=0.0)
    assert overload_warning(_summary(30), batch) is None
    # 29 requests: too few to compare
    assert overload_warning(_summary(29), _queue([0.1 * i for i in range(29)])) is None


def test_waiting_requests_count_their_wait_so_far_and_rejected_are_left_out():
    """Arrivals 0..13 admitted at once (wait 0), 14..29 after 1 s, 30..32 rejected (left
    out), 33..44 still waiting at t = 100 s (waits so far 67..56 s): 42 waits, thirds of
    14. First third: 0 s; middle (arrivals 14..27): 1 s. Last third, in arrival order:
    arrivals 28, 29 (1 s) and 33..44; sorted 1, 1, 56, 57, 58, 59, 60, 61, ...: median
    (60 + 61) / 2 = 60.5 s."""
    n = 45
    waits = [0.0] * 14 + [1.0] * 16 + [NAN] * 15
    status = ["finished"] * 30 + ["rejected"] * 3 + ["waiting"] * 12
    got = overload_warning(_summary(n), _queue(waits, status=status))
    assert got is not None and "from 0.000 s over the first 14 arrivals through 1.000 s to 60.500 s" in got


def test_closed_loop_names():
    mix = load_scenario(ROOT / "workloads/mixed_chat_agents.yaml").scenario.workload
    assert closed_loop_workloads(mix) == {"agents"}
    chat = load_scenario(ROOT / "workloads/chat_azure.yaml").scenario.workload
    assert closed_loop_workloads(chat) == frozenset()
    team = load_scenario(ROOT / "workloads/multi_agent_team.yaml").scenario.workload
    assert closed_loop_workloads(team) == {team.kind}


def _medians(requests: pd.DataFrame) -> tuple[int, float, float]:
    r = requests.sort_values(["arrival_s", "req_id"])
    third = len(r) // 3
    return third, float(r.queue_s.iloc[:third].median()), float(r.queue_s.iloc[-third:].median())


def test_the_user_trial_runs():
    """The user trial's repro (allocator_study, paged, B=16): 200 requests overload the node
    (TTFT p99 10.2 s), 100 do not (83 ms); the warning's medians are the requests table's."""
    study = ROOT / "workloads/allocator_study.yaml"
    paged = {"allocator.kind": "paged", "allocator.block_size": 16}
    big = run_scenario(study, **paged, **{"workload.num_requests": 200})
    third, first, last = _medians(big.requests)
    assert third == 66 and last > 1.0 and last > 4 * first
    [said] = [w for w in big.summary["warnings"] if w.startswith("no steady state")]
    assert f"from {first:,.3f} s over the first 66 arrivals through " in said
    assert f" s to {last:,.3f} s over the last 66" in said
    small = run_scenario(study, **paged, **{"workload.num_requests": 100})
    assert not [w for w in small.summary["warnings"] if w.startswith("no steady state")]


def test_a_closed_loop_under_pressure_is_not_called_overloaded():
    """agent_swarm_pressure (closed loop, 16 agents): its queue wait grows (memory
    pressure) but its queue holds at most 16 turns: no overload warning."""
    r = run_scenario(ROOT / "workloads/agent_swarm_pressure.yaml",
                     **{"workload.num_trajectories": 24})  # fmt: skip
    _, first, last = _medians(r.requests[r.requests.queue_s.notna()])
    assert last > 4 * first and last > 1.0  # the rule alone would fire
    assert not [w for w in r.summary["warnings"] if w.startswith("no steady state")]
    assert set(r.requests.workload) == set(closed_loop_workloads(
        load_scenario(ROOT / "workloads/agent_swarm_pressure.yaml").scenario.workload))

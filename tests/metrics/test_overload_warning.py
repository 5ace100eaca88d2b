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


def test_a_runaway_queue_cut_by_the_stop_is_named_from_its_whole_waits():
    """h113: 60 requests a second apart served at half that rate (request i admitted at
    2i, waiting i s), the run stopped at 60 s: requests 30..59 never admitted, waits so far
    60 - i = 30..1 s. All 60 in arrival order, thirds of 20: first (0..19) median 9.5 s,
    last (40..59: 20..1 s) 10.5 s, not over 4 x 9.5: the whole reading is silent. The
    second reading stops at the oldest request still waiting, 30 (wait so far 30 s): 31
    waits 0..29, 30, thirds of 10: first 0..9, median 4.5 s; middle 10..20, 15 s; last
    21..29, 30, 25.5 s, over 1 s and over 4 x 4.5 = 18 s -> warned, 29 arrivals left out."""
    waits = [float(i) for i in range(30)] + [NAN] * 30
    status = ["finished"] * 30 + ["waiting"] * 30
    summary = _summary(60, sim_time_s=60.0)
    got = overload_warning(summary, _queue(waits, status=status))
    assert got == (
        "no steady state: the median queue wait grew from 4.500 s over the first 10 arrivals "
        "through 15.000 s to 25.500 s over the last 10 of the 31 arrivals up to the oldest "
        "request still waiting when the run stopped at 60.0 s (the 29 after it left out: the "
        "stop cut their waits short): arrivals outpace what the engine serves, or the run is "
        "too short for a queue this close to capacity to settle; either way the latency "
        "percentiles depend on the run's length (a longer run tells which; rule: the last "
        "third's median over 1 s and over 4x the first third's)")  # fmt: skip
    # the whole reading alone (every request's wait so far in its place) would be silent
    whole = [float(i) for i in range(30)] + [60.0 - i for i in range(30, 60)]
    assert overload_warning(summary, _queue(whole)) is None
    # a closed loop's requests stay left out, cut or not
    assert overload_warning(summary, _queue(waits, status=status), frozenset({"chat"})) is None


def test_a_steady_queue_cut_by_the_stop_stays_silent():
    """Every request waits 2 s; the run stops at 60 s with the last two (arrivals 58, 59)
    not yet admitted, waits so far 2 s and 1 s: up to the oldest still waiting, 59 waits
    of 2 s -> no growth, silent."""
    waits = [2.0] * 58 + [NAN, NAN]
    status = ["finished"] * 58 + ["waiting"] * 2
    assert overload_warning(_summary(60, sim_time_s=60.0), _queue(waits, status=status)) is None


def test_an_open_loop_run_stopped_while_its_queue_runs_away_says_so():
    """allocator_study (paged, B = 16) at 100 arrivals a second stopped at 20 s: most
    requests never admitted; the whole reading (the stop cuts the latest waits short) is
    silent, the reading up to the oldest still waiting is the rule's, from the table."""
    r = run_scenario(ROOT / "workloads/allocator_study.yaml", **{
        "allocator.kind": "paged", "allocator.block_size": 16, "duration_s": 20,
        "workload.num_requests": 20000, "workload.arrival.rate_per_s": 100.0})  # fmt: skip
    q = r.requests.sort_values(["arrival_s", "req_id"])
    q = q[q.status.isin(["finished", "waiting", "running"])].reset_index(drop=True)
    never = q.queue_s.isna() & q.status.isin(["waiting", "running"])
    assert never.sum() > len(q) / 2
    wait = q.queue_s.where(~never, r.summary["sim_time_s"] - q.arrival_s)
    third = len(wait) // 3
    assert not wait.iloc[-third:].median() > 4 * wait.iloc[:third].median()  # silent
    upto = int((q.arrival_s <= q.arrival_s[never].min()).sum())
    head = wait.iloc[:upto]
    t = upto // 3
    first, last = float(head.iloc[:t].median()), float(head.iloc[-t:].median())
    assert last > 1.0 and last > 4 * first
    [said] = [w for w in r.summary["warnings"] if w.startswith("no steady state")]
    assert f"grew from {first:,.3f} s over the first {t} arrivals through " in said
    assert f"to {last:,.3f} s over the last {t} of the {upto} arrivals up to the oldest " in said

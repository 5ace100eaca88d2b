"""``kvsim run``'s memory guard (``sim.cli.memory_guard``): a run whose memory growth so
far, extrapolated to its end, exceeds the machine's available memory stops with one line
naming the scenario's count field; every other run goes on untouched."""

from __future__ import annotations

import json

import pytest

import sim.cli._run as quick
from sim.cli.memory_guard import (
    MIN_GROWTH_BYTES,
    MemoryGuard,
    RunTooLarge,
    available_bytes,
    count_field,
    resident_bytes,
)

MB = 2**20
GB = 10**9


def _guard(resident: list[int], available: int | None, horizon_s: float | None = None,
           started: int | None = None):  # fmt: skip
    """A guard whose resident memory reads ``resident`` in turn (the first at its start)
    and whose run has ``started`` trajectories started (None: the finished count)."""
    reads = iter(resident)
    return MemoryGuard(horizon_s, "workload.num_trajectories",
                       resident=lambda: next(reads), available=lambda: available,
                       started=None if started is None else lambda: started)  # fmt: skip


def test_the_rest_of_the_run_is_its_growth_so_far_scaled_by_what_is_left():
    # 200 MB grown at 10 % done: 1,800 MB still to come (200 x 0.9 / 0.1)
    with pytest.raises(RunTooLarge) as err:
        _guard([100 * MB, 300 * MB], available=1_700 * MB).check(0.0, 100, 1_000)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("workload.num_trajectories: stopped at 10.0% of the run (100 of 1,000 "
                          "trajectories started, 100 finished")  # fmt: skip
    assert "grown 0.2 GB" in msg and "at least 1.9 GB more" in msg and "1.8 GB available" in msg
    assert "--no-memory-guard" in msg
    _guard([100 * MB, 300 * MB], available=1_800 * MB + 1).check(0.0, 100, 1_000)  # fits


def test_the_projection_counts_trajectories_started_so_it_is_a_floor():
    # 50 finished of 1,000 but 250 started: the 1 GB grown was made by 250 trajectories,
    # so the 750 not started need at least 3 GB (by the finished count it read 19 GB)
    with pytest.raises(RunTooLarge) as err:
        _guard([0, GB], available=3 * GB - 1, started=250).check(0.0, 50, 1_000)
    assert "(250 of 1,000 trajectories started, 50 finished" in str(err.value)
    assert "at least 3.0 GB more" in str(err.value)
    _guard([0, GB], available=3 * GB, started=250).check(0.0, 50, 1_000)
    # a batch all in flight at once (every trajectory started): nothing left to project
    _guard([0, 10 * GB], available=0, started=1_000).check(0.0, 50, 1_000)
    # a started count behind the finished one (none recorded) falls back to the finished
    with pytest.raises(RunTooLarge, match="100 of 1,000 trajectories started"):
        _guard([0, GB], available=0, started=0).check(0.0, 100, 1_000)


def test_simulated_time_against_duration_s_counts_as_progress():
    # no trajectory finished, but half of duration_s simulated: 1 GB more to come
    guard = _guard([0, GB, GB], available=GB - 1, horizon_s=100.0)
    with pytest.raises(RunTooLarge, match="stopped at 50.0%"):
        guard.check(50.0, 0, 10)
    _guard([0, GB], available=GB, horizon_s=100.0).check(50.0, 0, 10)


def test_an_early_projection_waits_for_two_percent_or_half_a_gib():
    # 1 % done and 100 MB grown: 9.9 GB projected, but too early to say
    _guard([0, 100 * MB], available=0).check(0.0, 10, 1_000)
    with pytest.raises(RunTooLarge):  # the same 1 % with half a GiB grown
        _guard([0, MIN_GROWTH_BYTES], available=0).check(0.0, 10, 1_000)
    with pytest.raises(RunTooLarge):  # 2 % done with 100 MB grown
        _guard([0, 100 * MB], available=0).check(0.0, 20, 1_000)


def test_nothing_stops_a_run_that_shrank_finished_or_cannot_be_measured():
    _guard([500 * MB, 400 * MB], available=0).check(0.0, 500, 1_000)  # shrank
    _guard([0, GB], available=0).check(0.0, 1_000, 1_000)  # done
    _guard([0, GB], available=0).check(0.0, 0, 1_000)  # nothing done yet
    _guard([0, GB], available=None).check(0.0, 500, 1_000)  # no /proc/meminfo
    _guard([None, GB], available=0).check(0.0, 500, 1_000)  # no /proc/self/statm
    _guard([0, None], available=0).check(0.0, 500, 1_000)


def test_the_callback_checks_then_hands_on_to_the_progress_bar():
    seen = []
    guard = _guard([0, 0, GB], available=0)
    guard.then = lambda *a: seen.append(a)
    guard(1.0, 500, 1_000)  # nothing grown: handed on
    assert seen == [(1.0, 500, 1_000)]
    with pytest.raises(RunTooLarge):
        guard(2.0, 500, 1_000)
    assert len(seen) == 1  # stopped before the bar


def test_proc_readers_read_linux_files_and_say_none_elsewhere(tmp_path):
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "statm").write_text("1000 250 30 4 0 60 0\n")
    (tmp_path / "meminfo").write_text("MemTotal: 100 kB\nMemFree: 5 kB\nMemAvailable: 42 kB\n")
    import os

    assert resident_bytes(tmp_path) == 250 * os.sysconf("SC_PAGE_SIZE")
    assert available_bytes(tmp_path) == 42 * 1024
    empty = tmp_path / "none"
    assert resident_bytes(empty) is None and available_bytes(empty) is None
    (tmp_path / "meminfo").write_text("MemTotal: 100 kB\n")  # an old kernel: no estimate
    assert available_bytes(tmp_path) is None


def test_the_message_points_at_the_scenarios_count_line():
    from sim.run import build

    sim = build("benchmarks/chat_azure_5000.yaml")
    assert count_field(sim) == "benchmarks/chat_azure_5000.yaml:" + _line(
        "benchmarks/chat_azure_5000.yaml", "num_requests:") + ": workload.num_requests"
    sim = build("benchmarks/agents_500.yaml", **{"workload.num_trajectories": 3})
    assert count_field(sim) == "--set workload.num_trajectories: workload.num_trajectories"


def _line(path: str, text: str) -> str:
    with open(path) as f:
        return str(next(i for i, line in enumerate(f, 1) if text in line))


CHAT = ["benchmarks/chat_azure_5000.yaml", "--set", "workload.num_requests=1200"]


def _growing(monkeypatch, available: int):
    """Every guard the command builds sees 1 GB more resident memory at each look."""
    made = []

    def guard(sim):
        reads = iter(range(0, 10**6 * GB, GB))
        g = MemoryGuard(sim.resolved.scenario.duration_s, count_field(sim),
                        resident=lambda: next(reads), available=lambda: available)  # fmt: skip
        made.append(g)
        return g

    monkeypatch.setattr(quick, "_memory_guard", guard)
    return made


@pytest.mark.parametrize("quiet", [[], ["--quiet"]])
def test_a_run_projected_past_the_machine_stops_in_one_line_with_nothing_written(
    run_cli, monkeypatch, tmp_path, quiet
):
    made = _growing(monkeypatch, available=10 * MB)
    out = tmp_path / "run"
    code, stdout, stderr = run_cli(["run", *CHAT, "--out", str(out), "--no-report", *quiet])
    assert code == 2 and len(made) == 1
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert "workload.num_requests: stopped at" in lines[0] and "GB available" in lines[0]
    assert not out.exists() and list(tmp_path.iterdir()) == []  # no folder, no temporary


def test_no_memory_guard_runs_on_and_the_guard_changes_no_result(run_cli, monkeypatch, tmp_path):
    made = _growing(monkeypatch, available=GB)
    code, _, _ = run_cli(["run", *CHAT, "--out", str(tmp_path / "a"), "--no-report",
                          "--no-memory-guard"])  # fmt: skip
    assert code == 0 and made == []
    monkeypatch.undo()
    _growing(monkeypatch, available=10**9 * GB)  # a guard that looks and never stops
    code, _, _ = run_cli(["run", *CHAT, "--out", str(tmp_path / "b"), "--no-report"])
    assert code == 0

    def summary(name):
        s = json.loads((tmp_path / name / "summary.json").read_text())
        return {k: v for k, v in s.items() if k not in ("wall_time_s", "command")}

    assert summary("a") == summary("b")


def test_kvsim_runs_guard_reads_the_runs_own_started_count():
    from sim.run import build

    sim = build("benchmarks/chat_azure_5000.yaml", **{"workload.num_requests": 40})
    guard = quick._memory_guard(sim)
    assert guard.started is not None and guard.started() == 0
    assert guard.horizon_s == sim.resolved.scenario.duration_s
    sim.run()
    assert guard.started() == sim.ctx.started == 40

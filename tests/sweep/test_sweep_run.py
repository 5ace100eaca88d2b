"""``kvsim sweep``: equal tables on every executor, resume, refusal, failed points, and a
killed worker that loses no finished run."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest

from sim.errors import KvsimError
from sim.sweep import run_sweep
from sim.sweep.results import is_wall_column

_SCRIPT = Path(sys.executable).with_name("kvsim")
KVSIM = [str(_SCRIPT)] if _SCRIPT.exists() else ["kvsim"]


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Equal but for the wall-clock columns (the only ones allowed to differ)."""
    assert list(a.columns) == list(b.columns)
    cols = [c for c in a.columns if not is_wall_column(c)]
    assert cols != list(a.columns)  # wall_time_s is there, and left out
    pd.testing.assert_frame_equal(a[cols], b[cols])


def test_table_has_one_row_per_run_with_its_columns(sweep_file, tmp_path):
    out = tmp_path / "out"
    table = run_sweep(sweep_file, out, executor="inline")
    assert len(table) == 8 and table.error.isna().all()
    assert list(table.columns[:9]) == [
        "pause_policy.kind", "workload.arrival.concurrency", "workload.num_trajectories",
        "point", "seed", "replication", "config_sha256", "run_dir", "error",
    ]  # fmt: skip
    assert table.seed.tolist() == [3, 4] * 4 and table.replication.tolist() == [0, 1] * 4
    assert {"ttft_s.p99", "itl_s.p50", "rejected_by_reason.rejected_too_long"} <= set(table.columns)
    # the row is the run folder's summary, flattened
    row = table.iloc[5]
    summary = json.loads((out / row.run_dir / "summary.json").read_text())
    assert row.run_dir == f"runs/{row.config_sha256}" and summary["config_sha256"] == row.config_sha256
    assert row["ttft_s.p99"] == summary["ttft_s"]["p99"] and row.seed == summary["seed"]
    assert [p.name for p in out.glob("*.parquet")] == ["results.parquet"]
    assert len(list((out / "runs").iterdir())) == 8


def test_local_pool_and_dask_give_the_inline_table(sweep_file, tmp_path):
    pytest.importorskip("distributed")
    inline = run_sweep(sweep_file, tmp_path / "inline", executor="inline")
    local = run_sweep(sweep_file, tmp_path / "local", executor="local", workers=2)
    # dask's default HTTP port taken (another sweep, another test worker): no warning, since
    # the scheduler's HTTP routes go to a free local port
    squatter = socket.socket()
    with contextlib.suppress(OSError):
        squatter.bind(("0.0.0.0", 8787))
        squatter.listen()
    with squatter, warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        dask = run_sweep(sweep_file, tmp_path / "dask", executor="dask", workers=2)
    assert not [w for w in seen if "8787" in str(w.message)]
    _same(inline, local)
    _same(inline, dask)


def test_rerun_skips_finished_runs_and_refuses_another_sweep(sweep_file, tmp_path):
    out = tmp_path / "out"
    first = run_sweep(sweep_file, out, executor="inline")
    stamp = {p.name: p.stat().st_mtime_ns for p in (out / "runs").iterdir()}
    calls = []
    again = run_sweep(sweep_file, out, executor="inline", progress=lambda d, t: calls.append((d, t)))
    assert calls == [(8, 8)]  # nothing left to run
    assert {p.name: p.stat().st_mtime_ns for p in (out / "runs").iterdir()} == stamp
    pd.testing.assert_frame_equal(first, again)
    other = sweep_file.with_name("other_sweep.yaml")
    other.write_text(sweep_file.read_text().replace("replications: 2", "replications: 1"))
    with pytest.raises(KvsimError, match="holds the results of another sweep"):
        run_sweep(other, out, executor="inline")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    with pytest.raises(KvsimError, match="is not a sweep's folder"):
        run_sweep(sweep_file, tmp_path / "busy", executor="inline")


def test_a_failed_point_is_a_row_and_the_sweep_goes_on(tiny, tmp_path, monkeypatch):
    import sim.sweep.task as task_module

    path = tiny.with_name("f_sweep.yaml")
    path.write_text("sweep:\n  base: tiny.yaml\n  points: [{workload.num_trajectories: 3}, "
                    "{workload.num_trajectories: 4}]\n")  # fmt: skip
    real = task_module._run

    def failing(task):  # a run that fails once it runs (a valid point: no refusal)
        if task["point"] == 0:
            raise RuntimeError("disk on fire\nsecond line")
        return real(task)

    monkeypatch.setattr(task_module, "_run", failing)
    table = run_sweep(path, tmp_path / "out", executor="inline")
    assert len(table) == 2
    assert table.error[0] == "RuntimeError: disk on fire" and table.run_dir.isna()[0]
    assert pd.isna(table.error[1]) and table["requests_completed"][1] > 0
    monkeypatch.setattr(task_module, "_run", real)
    again = run_sweep(path, tmp_path / "out", executor="inline")  # the failed one is retried
    assert again.error.isna().all() and again["requests_completed"][0] > 0


@pytest.mark.parametrize(("grid", "line", "field", "needle"), [
    ("nope.key: [1]", 4, "sweep.grid.nope.key", "nope: unknown field; valid: allocator"),
    ("hardware.tp: [abc]", 4, "sweep.grid.hardware.tp", "Input should be a valid integer"),
    ("allocator.kind: [paged, nope]", 4, "sweep.grid.allocator.kind", "'nope'"),
    ("workload.turns: [2]\n  points: [{hardware.tp: 3}]", 5, "sweep.points.0.hardware.tp",
     "tp=3 must divide the 32 query heads"),
])  # fmt: skip
def test_an_invalid_point_refuses_the_whole_sweep_before_any_run(run_cli, tiny, tmp_path, grid,
                                                                  line, field, needle):  # fmt: skip
    path = tiny.with_name("bad_sweep.yaml")
    path.write_text(f"sweep:\n  base: tiny.yaml\n  grid:\n    {grid}\n")
    out = tmp_path / "out"
    code, stdout, stderr = run_cli(["sweep", str(path), "--out", str(out), "--quiet"])
    assert code == 2 and stdout == ""
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert stderr.startswith(f"kvsim: error: {path}:{line}: {field}: point ") and needle in stderr
    assert not out.exists()  # nothing written, not even the folder


def test_seed_grid_with_replications_runs_distinct_seeds(tiny, tmp_path):
    path = tiny.with_name("seed_sweep.yaml")
    path.write_text("sweep:\n  base: tiny.yaml\n  grid:\n    seed: [1, 2, 3]\n"
                    "    workload.num_trajectories: [3]\n  replications: 2\n")  # fmt: skip
    table = run_sweep(path, tmp_path / "out", executor="inline")
    # stride 3 (the seeds' width): 1, 4 | 2, 5 | 3, 6: every run its own seed and config
    assert table.seed.tolist() == [1, 4, 2, 5, 3, 6]
    assert table.config_sha256.nunique() == 6 and table.error.isna().all()
    first = table[table.replication == 0]
    assert first.seed.tolist() == [1, 2, 3]  # replication 0 runs the point's own seed


def _parents() -> dict[int, int]:
    """{pid: parent pid} of every process (Linux /proc)."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # gone meanwhile
            continue
        out[int(stat.parent.name)] = int(text.rsplit(")", 1)[1].split()[1])
    return out


def _workers_of(pid: int) -> list[int]:
    """The pool's workers: forked by the forkserver, itself a child of the sweep process."""
    parents = _parents()
    children = {p for p, pp in parents.items() if pp == pid}
    return [p for p, pp in parents.items() if pp in children]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_killed_worker_loses_no_finished_run_and_a_rerun_completes(sweep_file, tmp_path):
    text = sweep_file.read_text().replace("workload.num_trajectories: 6", "workload.num_trajectories: 300")
    sweep_file.write_text(text.replace("workload.num_trajectories: 18", "workload.num_trajectories: 400"))
    out = tmp_path / "out"
    cmd = [*KVSIM, "sweep", str(sweep_file), "--out", str(out), "--workers", "2", "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600  # a hang guard only, never a speed budget
        while not (out / "results.parquet").exists() and proc.poll() is None:
            if time.monotonic() > deadline:  # a hang, not slowness
                pytest.fail("hang guard: the sweep wrote no row and did not end")
            time.sleep(0.02)
        victims = _workers_of(proc.pid)
        while not victims and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
            victims = _workers_of(proc.pid)
        if not victims:
            _, err = proc.communicate(timeout=600)
            pytest.fail(f"no worker process found (the sweep ended: {proc.poll()}): {err[-2000:]}")
        os.kill(victims[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=600)  # hang guards only
    finally:
        if proc.poll() is None:
            proc.kill()
    before = pd.read_parquet(out / "results.parquet")
    assert proc.returncode == 2, err
    assert "a worker process died" in err and "rerun the same command" in err
    assert len(err.strip().splitlines()) == 1
    assert 1 <= len(before) < 8 and before.error.isna().all()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    after = pd.read_parquet(out / "results.parquet")
    assert len(after) == 8 and after.error.isna().all()
    kept = after.merge(before[["point", "replication"]], on=["point", "replication"])
    cols = [c for c in before.columns if not is_wall_column(c) and not before[c].isna().all()]
    pd.testing.assert_frame_equal(before[cols], kept[cols], check_dtype=False)


def _session_members(sid: int) -> list[str]:
    """'pid name state' of every process in session ``sid`` (Linux /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # gone meanwhile
            continue
        name, rest = text.split("(", 1)[1].rsplit(")", 1)
        fields = rest.split()
        if int(fields[3]) == sid:  # state, ppid, pgrp, session
            out.append(f"{stat.parent.name} {name} {fields[0]}")
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("executor", ["local", "dask"])
def test_a_sweep_leaves_no_process_in_its_session(tiny, tmp_path, executor):
    """Workers, the forkserver and the resource tracker are all stopped and reaped before
    the command exits (before: they outlived it, as zombies until the system reaped them)."""
    if executor == "dask":
        pytest.importorskip("distributed")
    path = tiny.with_name("two.yaml")
    path.write_text("sweep:\n  base: tiny.yaml\n  grid: {workload.num_trajectories: [2, 3]}\n")
    cmd = [*KVSIM, "sweep", str(path), "--out", str(tmp_path / "out"), "--workers", "2",
           "--executor", executor, "--quiet"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # its own session: its id is proc.pid
    _, err = proc.communicate(timeout=600)  # a hang guard only
    left = _session_members(proc.pid)
    assert proc.returncode == 0, err
    assert left == [], left
    assert len(pd.read_parquet(tmp_path / "out" / "results.parquet")) == 2


def test_ctrl_c_before_any_run_says_no_run_finished(run_cli, sweep_file, tmp_path, monkeypatch):
    import sim.sweep.runner as runner

    def ctrl_c(sweep):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "check_sweep", ctrl_c)  # Ctrl-C while the points are checked
    out = tmp_path / "out"
    code, stdout, stderr = run_cli(["sweep", str(sweep_file), "--out", str(out), "--quiet"])
    assert (code, stdout, stderr) == (130, "", "interrupted: no run finished\n")
    assert not out.exists()

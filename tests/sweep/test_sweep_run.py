"""``kvsim sweep``: equal tables on every executor, resume, refusal, failed points, and a
killed worker that loses no finished run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
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
    start = time.monotonic()
    dask = run_sweep(sweep_file, tmp_path / "dask", executor="dask", workers=2)
    assert time.monotonic() - start < 45  # a LocalCluster of 2 processes, started and closed
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


def test_a_failed_point_is_a_row_and_the_sweep_goes_on(tiny, tmp_path):
    path = tiny.with_name("f_sweep.yaml")
    # turns 0 passes validation but the pool cannot hold a 60k-token task: rejected, not
    # an error; a tp that does not divide the heads fails when the run is built
    path.write_text(
        "sweep:\n  base: tiny.yaml\n  points: [{hardware.tp: 3}, {workload.num_trajectories: 4}]\n"
    )
    table = run_sweep(path, tmp_path / "out", executor="inline")
    assert len(table) == 2
    assert "hardware.tp" in table.error[0] and table.run_dir.isna()[0]
    assert pd.isna(table.error[1]) and table["requests_completed"][1] > 0
    again = run_sweep(path, tmp_path / "out", executor="inline")  # the failed one is retried
    assert again.error[0] == table.error[0]


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
        deadline = time.monotonic() + 60
        while not (out / "results.parquet").exists() and proc.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        victims = _workers_of(proc.pid)
        while not victims and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
            victims = _workers_of(proc.pid)
        if not victims:
            _, err = proc.communicate(timeout=60)
            pytest.fail(f"no worker process found (the sweep ended: {proc.poll()}): {err[-2000:]}")
        os.kill(victims[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    before = pd.read_parquet(out / "results.parquet")
    assert proc.returncode == 2, err
    assert "a worker process died" in err and "rerun the same command" in err
    assert len(err.strip().splitlines()) == 1
    assert 1 <= len(before) < 8 and before.error.isna().all()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    after = pd.read_parquet(out / "results.parquet")
    assert len(after) == 8 and after.error.isna().all()
    kept = after.merge(before[["point", "replication"]], on=["point", "replication"])
    cols = [c for c in before.columns if not is_wall_column(c) and not before[c].isna().all()]
    pd.testing.assert_frame_equal(before[cols], kept[cols], check_dtype=False)

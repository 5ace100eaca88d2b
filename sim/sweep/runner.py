"""``run_sweep``: every point of a sweep file, on an executor, into a resumable folder.

    from sim.sweep import run_sweep
    table = run_sweep("workloads/coding_agents_sweep.yaml", "runs/sweep", workers=2)

Responsibility: expand the sweep (``sim.sweep.spec``), check every point as ``kvsim
validate`` does (``sim.sweep.check``: one invalid point refuses the whole sweep, before
anything runs or is written), skip the runs the folder already holds, send the rest to an executor (``sim.sweep.executor``), and rewrite
``results.parquet`` after each finished run (``sim.sweep.results``); a failed run is a row
with its ``error`` and never stops the sweep. Returns the results table.

Invariant: a run counts as done once its row is in ``results.parquet``; a rerun into the
same folder runs exactly the runs without a row, or whose row has an ``error`` (a failed
run is retried); a worker that dies loses only the runs in flight (``WorkerLost`` names
how many; rerunning completes them). A run's identity is its resolved config's
``config_sha256`` (the seed included), computed here before it is sent.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from sim.errors import KvsimError
from sim.sweep.check import check_sweep, first_problem
from sim.sweep.executor import Executor, make_executor
from sim.sweep.results import ID_COLUMNS, claim_folder, read_rows, write_results
from sim.sweep.spec import Sweep, SweepRun, load_sweep, sweep_sha256
from sim.sweep.task import error_line, run_point

Progress = Callable[[int, int], None]  # (runs done, runs in all)


def run_sweep(
    sweep_file: str | Path,
    out: str | Path,
    *,
    executor: str | Executor = "local",
    workers: int | None = None,
    scheduler_address: str | None = None,
    progress: Progress | None = None,
) -> pd.DataFrame:
    """Run (or resume) a sweep into ``out``; returns ``results.parquet`` as a DataFrame."""
    from sim.run.output import utf8_path
    from sim.run.provenance import resolved_config

    sweep = load_sweep(sweep_file)
    if str(out).strip() == "":
        raise KvsimError("--out: an empty path; give the folder the sweep goes into")
    utf8_path(out, "--out:")  # before any run: results.parquet is written last
    problems, resolved = check_sweep(sweep)  # every point, before any run or write
    if problems:
        raise first_problem(problems)
    base = resolved.loaded
    out_dir = Path(out)
    claim_folder(out_dir, sweep_sha256(sweep, resolved_config(base)), sweep.path)
    keys = [k for k in sweep.keys if k not in ID_COLUMNS]
    rows = {(r["point"], r["replication"]): r for r in read_rows(out_dir)}
    todo, planned = _plan(sweep, base.scenario.seed, out_dir, rows)
    total = len(planned)
    done = total - len(todo)
    if progress is not None:
        progress(done, total)
    if todo:
        rows.update(_run_all(todo, out_dir, keys, rows, executor, workers, scheduler_address, progress, done, total))
    return write_results(out_dir, [rows[k] for k in planned], keys)


def _plan(sweep: Sweep, base_seed: int, out_dir: Path, rows: dict) -> tuple[list[dict], list]:
    """(the tasks still to run, every (point, replication) in sweep order); rows of runs
    that are no longer part of the sweep are dropped, a finished run's row is kept."""
    from sim.run.provenance import config_sha256, resolved_config
    from sim.scenario import load_scenario, resolve

    todo, planned = [], []
    for run in sweep.runs(base_seed):
        key = (run.point, run.replication)
        planned.append(key)
        task = _task(sweep, run, out_dir)
        try:
            loaded = load_scenario(str(sweep.base_path), {**run.overrides, "seed": run.seed})
            # as the run computes it: after resolve fills the derived defaults
            task["config_sha256"] = config_sha256(resolved_config(resolve(loaded).loaded))
        except KvsimError as exc:  # the point does not load: its row says why, no worker needed
            rows[key] = {**_keys(sweep, run), **_failed(task, error_line(exc))}
            continue
        old = rows.get(key)
        if old and old.get("error") is None and old.get("config_sha256") == task["config_sha256"]:
            continue
        todo.append(task)
    return todo, planned


def _task(sweep: Sweep, run: SweepRun, out_dir: Path) -> dict[str, Any]:
    return {
        "scenario": str(sweep.base_path),
        "overrides": run.overrides,
        "seed": run.seed,
        "point": run.point,
        "replication": run.replication,
        "out_dir": str(out_dir.resolve()),
        "keys": _keys(sweep, run),
    }


def _keys(sweep: Sweep, run: SweepRun) -> dict[str, Any]:
    point = sweep.points[run.point]
    return {k: v for k, v in point.items() if k not in ID_COLUMNS}


def _failed(task: dict, error: str) -> dict[str, Any]:
    return {
        "point": task["point"],
        "seed": task["seed"],
        "replication": task["replication"],
        "config_sha256": task.get("config_sha256"),
        "run_dir": None,
        "error": error,
    }


def _run_all(todo, out_dir, keys, rows, executor, workers, address, progress, done, total):
    """Run the tasks, writing the table after each; returns the new rows by key."""
    own = not isinstance(executor, Executor)
    ex = make_executor(executor, workers, address) if own else executor
    new: dict = {}
    try:
        for i, row in ex.run(run_point, todo):
            row = {**todo[i]["keys"], **row}
            new[(row["point"], row["replication"])] = row
            write_results(out_dir, list({**rows, **new}.values()), keys)
            done += 1
            if progress is not None:
                progress(done, total)
    finally:
        if own:
            ex.close()
    return new

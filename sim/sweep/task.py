"""One run of a sweep or of a capacity search, as a worker process executes it.

Responsibility: the module-level functions the executors send to their workers. Each
takes a plain dict (picklable), runs one scenario with overrides and a seed through
``sim.run``, optionally writes its run folder, and returns a plain dict:

- ``run_point``: a sweep row (``seed``, ``replication``, ``config_sha256``, ``run_dir``,
  every summary metric flattened with dots, ``error``);
- ``run_probe``: a capacity probe (the SLO metrics over the measurement window and over
  the whole run, the verdict and its reasons, the memory figures that explain the gap to
  the analytic estimate, the cost per token of ``sim.run.pricing.token_costs`` over the
  measurement window).

Invariant: a failed run never raises out of a worker: it returns its ``error`` (one line);
only the executor's own failures (a dead worker) are exceptions. The run folder of a
point is ``runs/<config_sha256>`` under the output folder, written whole or not at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sim.sweep.stats import flatten


def error_line(exc: BaseException) -> str:
    """One line for a failed run: a user error's message, else the exception's type and
    message."""
    from sim.errors import KvsimError

    text = str(exc) if isinstance(exc, KvsimError) else f"{type(exc).__name__}: {exc}"
    return (text.strip().splitlines() or [type(exc).__name__])[0]


def _run(task: dict):
    from sim.run import run_scenario

    overrides = {**task["overrides"], "seed": task["seed"]}
    return run_scenario(task["scenario"], **overrides)


def _write(result, task: dict) -> str | None:
    out = task.get("out_dir")
    if not out:
        return None
    rel = f"runs/{result.summary['config_sha256']}"
    result.write(Path(out) / rel, force=True)  # a folder of a run cut short: replaced whole
    return rel


def run_point(task: dict) -> dict[str, Any]:
    """Run one sweep point and return its row (see the module docstring)."""
    row: dict[str, Any] = {
        "point": task["point"],
        "seed": task["seed"],
        "replication": task["replication"],
        "config_sha256": task.get("config_sha256"),
        "run_dir": None,
        "error": None,
    }
    try:
        result = _run(task)
        row["run_dir"] = _write(result, task)
    except Exception as exc:  # noqa: BLE001  (a failed point is a row, never the sweep's end)
        row["error"] = error_line(exc)
        return row
    summary = dict(result.summary)
    summary.pop("seed", None)  # the row's own column
    row.update(flatten(summary))
    row["config_sha256"] = result.summary["config_sha256"]
    return row


def warm_up(_: object = None) -> None:
    """Import what a run imports (pandas, simpy, the engine, tables, pricing, the SLO
    verdict) in a pool worker (``Executor.warm(warm_up, None)``), so that its first run starts
    at once. Only a head start: a module left out is imported by the first run that needs it.
    Never raises: a module that fails to import fails in the run, one line. The imports are
    spelled out so that tests/test_layers.py checks what they reach."""
    try:
        import pandas  # noqa: F401
        import simpy  # noqa: F401

        import sim.cost  # noqa: F401
        import sim.engine.node  # noqa: F401
        import sim.memory  # noqa: F401
        import sim.metrics  # noqa: F401
        import sim.prefix  # noqa: F401
        import sim.run.pricing  # noqa: F401
        import sim.run.runner  # noqa: F401
        import sim.sched  # noqa: F401
        import sim.sweep.slo  # noqa: F401
        import sim.workload.builtin  # noqa: F401
    except Exception:  # noqa: BLE001, S110  (a head start only: the run reports its own error)
        pass


def run_probe(task: dict) -> dict[str, Any]:
    """Run one capacity probe (a load, one replication) and judge it against the SLOs."""
    from sim.sweep.slo import measure, slo_values, verdict, whole_run_values

    out: dict[str, Any] = {
        "load": task["load"],
        "replication": task["replication"],
        "seed": task["seed"],
        "config": task.get("config"),
        "error": None,
    }
    try:
        result = _run(task)
        out["run_dir"] = _write(result, task)
        measured = measure(result, task["warmup_fraction"])
        passed, reasons = verdict(result.summary, measured, task["slos"])
        out.update(
            passed=passed,
            reasons=reasons,
            slo_values=slo_values(measured, task["slos"]),
            slo_values_whole_run=whole_run_values(result.summary, task["slos"]),
            window_s=measured["window_s"],
            window_requests=measured["window_requests"],
            memory=memory_figures(result, measured),
            cost=window_costs(result, measured),
        )
    except Exception as exc:  # noqa: BLE001  (a failed run fails its probe)
        out.update(passed=False, reasons=[f"run failed: {error_line(exc)}"], error=error_line(exc))
    return out


def window_costs(result, measured: dict) -> dict[str, Any]:
    """The cost per token over the measurement window, the load the verdict judged
    (``sim.run.pricing.token_costs`` with ``window_s``): the start-up burst and the drain,
    when fewer agents than the load are left, are not priced."""
    from sim.run.pricing import token_costs

    w = measured["window_s"]
    return token_costs(result.summary, result.steps, result.requests, window_s=(w["start"], w["end"]),
                       trajectories=result.trajectories, pauses=result.pauses)  # fmt: skip


def memory_figures(result, measured: dict) -> dict[str, Any]:
    """The figures that explain a simulated capacity against F37: over the measurement
    window, the time-averaged KV allocated and held by paused trajectories, trajectories
    in flight and queueing (queue p99); over the whole run, fragmentation, the peak,
    preemptions and prefix reuse."""
    s = result.summary
    lo, hi = measured["window_s"]["start"], measured["window_s"]["end"]
    mem = result.memory
    allocated = _time_mean(mem, "allocated_bytes", lo, hi)
    paused = _time_mean(mem, "paused_kv_bytes", lo, hi)
    useful = _time_mean(mem, "useful_bytes", lo, hi)
    pool = s.get("kv_pool_bytes") or 0.0
    return {
        "kv_pool_bytes": pool,
        "allocated_bytes_mean": allocated,
        "paused_kv_bytes_mean": paused,
        "useful_bytes_mean": useful,
        "peak_allocated_bytes": s.get("peak_allocated_bytes"),
        "eta_alloc_mean": s.get("eta_alloc_mean"),
        "preemptions": s.get("preemptions"),
        "queue_p99_s": measured["queue_s"]["p99"],
        "prefix_hit_rate": s.get("prefix_hit_rate"),
        "prompt_reuse_rate": s.get("prompt_reuse_rate"),
        "kv_reuse_rate": s.get("kv_reuse_rate"),
        "sim_time_s": s.get("sim_time_s"),
        "trajectories_active_mean": _active_mean(result.trajectories, lo, hi),
        "trajectories_active_peak": active_peak(result.trajectories),
        "trajectory_s_mean_finished": _duration_mean(result.trajectories),
    }


def _time_mean(frame, column: str, lo: float, hi: float | None) -> float | None:
    """Time-weighted mean of a step-function column of ``memory.parquet`` over [lo, hi]
    (a cluster run's frame holds each node's samples in turn: the nodes' means, summed)."""
    if frame is None or not len(frame) or column not in frame:
        return None
    if "node" in frame and frame["node"].nunique() > 1:
        end = float(frame.t_s.max()) if hi is None else hi  # one span for every node
        parts = [_time_mean(g.drop(columns="node"), column, lo, end) for _, g in frame.groupby("node")]
        return float(sum(p for p in parts if p is not None))
    t = frame.t_s.to_numpy(dtype=np.float64)
    v = frame[column].to_numpy(dtype=np.float64)
    end = float(t[-1]) if hi is None else hi
    if end <= lo:
        return float(v[-1])
    edges = np.clip(np.append(t, end), lo, end)  # each value holds until the next sample
    dt = np.diff(edges)
    total = float(dt.sum())
    return float((v * dt).sum() / total) if total > 0 else float(v[-1])


def _spans(traj) -> tuple[np.ndarray, np.ndarray]:
    """Each trajectory's (start, end); one still running at the run's end (no ``end_s``)
    counts as in flight to the end."""
    start = traj.start_s.to_numpy(dtype=np.float64)
    end = traj.end_s.to_numpy(dtype=np.float64)
    return start, np.where(np.isnan(end), np.inf, end)


def active_peak(traj) -> int | None:
    """The most trajectories in flight at once over the run: each holds ``[start, end)``,
    so one ending at the instant another starts is not counted with it."""
    if traj is None or not len(traj):
        return None
    start, end = _spans(traj)
    times = np.concatenate([start, end])
    steps = np.concatenate([np.ones(len(start)), -np.ones(len(end))])
    order = np.lexsort((steps, times))  # at a tie, the ends (-1) first
    return int(np.cumsum(steps[order]).max())


def _duration_mean(traj) -> float | None:
    """Mean length of the trajectories that finished (``end_s - start_s``)."""
    if traj is None or not len(traj):
        return None
    start, end = _spans(traj)
    done = np.isfinite(end)
    return float((end[done] - start[done]).mean()) if done.any() else None


def _active_mean(traj, lo: float, hi: float | None) -> float | None:
    """Time-averaged number of trajectories in flight over [lo, hi]."""
    if traj is None or not len(traj) or hi is None or hi <= lo:
        return None
    start, end = _spans(traj)
    start, end = np.clip(start, lo, hi), np.clip(end, lo, hi)
    return float(np.maximum(end - start, 0.0).sum() / (hi - lo))

"""A ``mooncake`` workload's trace: the rows it replays and their times (no numpy).

Responsibility: find the trace file (``trace_path``), read the rows a config replays
(``replayed``: ``num_requests`` from ``start_row``) and their arrival times in seconds from
the first, checked to be in time order (``timestamp_values``). ``sim.workload.mooncake``
(the run) and ``sim.workload.trace_files`` (``kvsim validate``) call these same functions.

Invariant: importing this module imports no numpy (``kvsim validate`` of a Mooncake
scenario pays none); ``timestamp_values`` computes each time as the run's float64 arrays
did (the millisecond figure as a float, divided by 1000, minus the first: the same IEEE
operations one value at a time), so the run's array of them is bit for bit the one
before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim.errors import ConfigError
from sim.prefix.trace_replay import TraceRequest, load_mooncake
from sim.workload import traces


def trace_path(cfg: Any, ctx: Any) -> Path:
    """The trace file: ``path`` (relative to the scenario), else the shipped sample."""
    if cfg.path is None:
        return traces.shipped_trace("mooncake_synthetic", f"{ctx.field_prefix}.path")
    return ctx.resolve(cfg.path)


def replayed(cfg: Any, ctx: Any) -> list[TraceRequest]:
    """The requests this workload replays: ``num_requests`` (default: all) from ``start_row``."""
    path = trace_path(cfg, ctx)
    rows = load_mooncake(path)
    if cfg.start_row >= len(rows):
        raise ConfigError(
            f"start_row {cfg.start_row} is past the trace's {len(rows)} requests",
            location=str(path),
            field=f"{ctx.field_prefix}.start_row",
        )
    rows = rows[cfg.start_row :]
    n = len(rows) if cfg.num_requests is None else cfg.num_requests
    if n > len(rows):
        raise ConfigError(
            f"num_requests {n} is more than the {len(rows)} requests from row "
            f"{cfg.start_row} (a replay is not repeated: its hash ids would all hit)",
            location=str(path),
            field=f"{ctx.field_prefix}.num_requests",
        )
    return rows[:n]


def timestamp_values(rows: list[TraceRequest], where: str, first_row: int = 0) -> list[float]:
    """The rows' arrival times in seconds from the first (checked to be in time order);
    ``first_row``: the trace's row of ``rows[0]`` (the workload's ``start_row``), so an
    error names the trace's own requests, counted from 1 over its non-blank lines."""
    t = [float(r.timestamp_ms) / 1000.0 for r in rows]
    first = t[0]
    t = [x - first for x in t]
    for i in range(len(t) - 1):
        if t[i + 1] - t[i] < 0:
            n = first_row + i + 2  # the request out of order, counted from 1
            raise ConfigError(
                f"timestamps are not in time order (request {n} of the trace, at "
                f"{rows[i + 1].timestamp_ms} ms, comes before request {n - 1}, at "
                f"{rows[i].timestamp_ms} ms; requests counted from 1 over its non-blank lines)",
                location=where,
                field="timestamp",
            )
    return t

"""The rows of ``kvsim compare``'s table: one per variant, from its runs' summaries.

Responsibility: flatten each run's summary to its numeric figures (dotted keys), add its
pool shares (``pool_*``), and average a variant's replications into one row
(``variant_row``); ``compare_frame`` makes the table. Shared by ``sim.report.compare``
(the table, the files) and ``sim.report.compare_plots`` (the figures), below both.

The table and the pool figure read every variant's shares over one window
(``table_window``): the memory-bound time when every variant's requests waited, else the
whole run; a run's own ``pool_<share>`` (its busy window when it ever waited, else its
whole run) could put a paged run's idle free memory beside a reservation policy's
memory-bound fragmentation.

Invariant: a row holds floats only besides its ``variant``, ``replications``,
``overrides``, ``run_dirs``, ``error`` and ``warnings`` cells (``warnings``: JSON text of
the list of its runs' ``warnings``, each sentence once, prefixed ``seed S: `` when the
variant has several runs; ``[]`` for a healthy variant); a figure missing from every
replication is NaN.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from sim.report.data import RunData
from sim.report.pool import SHARES, pool_windows


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        elif isinstance(v, int | float) and not isinstance(v, bool):
            out[prefix + k] = float(v)
    return out


def variant_row(name: str, runs: list[RunData], overrides: dict | None = None,
                errors: list[str] | None = None) -> dict:  # fmt: skip
    """One row of compare.parquet: the mean over a variant's replications of every
    numeric summary figure, and its pool shares: ``pool_run_<share>`` over the whole run,
    ``pool_busy_<share>`` over the time requests waited (NaN for a variant where any
    replication's requests never waited: its busy window would be some seeds' alone),
    each for ``SHARES`` and ``EXTERNAL_PARTS``, ``pool_busy_fraction`` (that time over the
    run's), and ``pool_<share>`` (``SHARES``: the busy window when the run's requests ever
    waited, else the whole run, so two variants' may cover different windows; kept for
    older readers, the table reads ``table_window``'s)."""
    flats = []
    for run in runs:
        f = _flat(run.summary)
        windows = pool_windows(run)
        legacy = "busy" if _busy(run) else "run"  # pool_<share>: the run's own window
        f.update({f"pool_{k}": windows[f"{legacy}_{k}"] for k in SHARES})
        f.update({f"pool_{k}": v for k, v in windows.items()})
        flats.append(f)
    keys = sorted({k for f in flats for k in f})
    row: dict[str, Any] = {"variant": name, "replications": len(runs),
                           "overrides": json.dumps(overrides or {}, default=str, sort_keys=True),
                           "run_dirs": json.dumps([str(r.folder) for r in runs if r.folder]),
                           "error": "; ".join(errors or []) or None,
                           "warnings": json.dumps(run_warnings(runs))}  # fmt: skip
    recorded = [f for f in flats if not math.isnan(f.get("pool_run_token_states", math.nan))]
    for k in keys:
        if k.startswith("pool_busy_") and k != "pool_busy_fraction":  # the busy window only
            # if every seed's run waited:
            busy = [f.get(k, math.nan) for f in recorded]  # (one seed's would stand for all)
            row[k] = float(np.mean(busy)) if busy and not any(map(math.isnan, busy)) else math.nan
            continue
        vals = [f[k] for f in flats if k in f and not math.isnan(f[k])]
        row[k] = float(np.mean(vals)) if vals else float("nan")
    return row


def run_warnings(runs: list[RunData]) -> list[str]:
    """A variant's warnings (its runs' summary ``warnings``): each sentence once, in run
    order, prefixed ``seed S: `` when there are several runs."""
    several = len(runs) > 1
    out = []
    for run in runs:
        for w in run.summary.get("warnings") or []:
            out.append(f"seed {run.summary.get('seed')}: {w}" if several else str(w))
    return list(dict.fromkeys(out))


def _busy(run: RunData) -> bool:
    """Average the pool over the memory-bound time when requests ever waited."""
    m = run.memory
    return bool(len(m) and "n_waiting" in m and (m.n_waiting > 0).any())


def compare_frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def table_window(frame: pd.DataFrame) -> str | None:
    """The one window every variant's pool shares are read over in the table and the pool
    figure: ``"busy"`` (the time requests waited, the allocator study's memory-bound
    regime) when every variant with a memory record had requests wait, else ``"run"``
    (the whole run, for every variant); None for a frame without the windowed columns
    (an older compare.parquet, whose ``pool_<share>`` is all there is)."""
    if "pool_run_token_states" not in frame or "pool_busy_token_states" not in frame:
        return None
    has = ~np.isnan(frame.pool_run_token_states.to_numpy(float))
    busy = frame.pool_busy_token_states.to_numpy(float)[has]
    return "busy" if len(busy) and not np.isnan(busy).any() else "run"

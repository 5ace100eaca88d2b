"""What a report reads: one run's summary and tables, from a ``RunResult`` or a run folder.

Responsibility: give the plots one shape of input (``RunData``) whether the run is in
memory (a ``sim.run.RunResult``, right after ``kvsim run``) or on disk (a run folder
written by ``sim.run.output``). Tables a folder lacks are empty DataFrames.

Invariant: loading never changes the run folder; a path that is not a run folder is a
one-line ``KvsimError`` naming it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from sim.errors import KvsimError

TABLE_NAMES = ("requests", "steps", "memory", "trajectories", "pauses")


@dataclass
class RunData:
    """A run's summary and record tables (each a DataFrame, possibly empty)."""

    summary: dict
    requests: pd.DataFrame
    steps: pd.DataFrame
    memory: pd.DataFrame
    trajectories: pd.DataFrame
    pauses: pd.DataFrame
    folder: Path | None = None  # where it was read from (None: in memory)

    @property
    def name(self) -> str:
        return str(self.summary.get("scenario") or (self.folder.name if self.folder else "run"))


def load_run(run: Any) -> RunData:
    """``run``: a ``RunData``, a ``RunResult`` (anything with ``summary`` and the tables as
    attributes) or a run folder path."""
    if isinstance(run, RunData):
        return run
    if isinstance(run, str | Path):
        return read_run_folder(Path(run))
    if not hasattr(run, "summary"):
        raise KvsimError(f"not a run: {run!r} (give a RunResult or a run folder)")
    frames = {n: getattr(run, n, None) for n in TABLE_NAMES}
    return RunData(run.summary, **{n: _frame(f) for n, f in frames.items()})


def read_run_folder(folder: Path) -> RunData:
    """The run folder's summary.json and tables (a missing table is empty)."""
    path = folder / "summary.json"
    if not path.is_file():
        raise KvsimError(f"{folder}: not a run folder (no summary.json)")
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise KvsimError(f"{path}: cannot read: {exc}") from None
    frames = {}
    for name in TABLE_NAMES:
        table = folder / f"{name}.parquet"
        try:
            frames[name] = pd.read_parquet(table) if table.is_file() else pd.DataFrame()
        except Exception as exc:  # a damaged parquet file: say which, in one line
            raise KvsimError(f"{table}: cannot read: {type(exc).__name__}") from None
    return RunData(summary, folder=folder, **frames)


def _frame(f: pd.DataFrame | None) -> pd.DataFrame:
    return pd.DataFrame() if f is None else f

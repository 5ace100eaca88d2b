"""A sweep's output folder: ``results.parquet``, ``sweep.json`` and ``runs/<hash>/``.

Responsibility: the results table's shape and its atomic rewrite, and the folder's
identity. ``results.parquet`` has one row per (point, replication), in sweep order: the
swept keys (values as written; lists and mappings as JSON text), ``point``, ``seed``,
``replication``, ``config_sha256``, ``run_dir`` (relative to the folder), ``error`` (null,
or the one line of a failed run) and every summary metric flattened with dots
(``ttft_s.p99``). ``sweep.json`` names the sweep the folder belongs to
(``sweep_sha256``, see ``sim.sweep.spec``).

Invariant: ``results.parquet`` is the only Parquet file at the top of the folder and is
always complete: it is written beside itself (``.results.parquet.partial``) and renamed
over the previous one; a folder holds the results of one sweep only. Two runs of one sweep
give equal tables but for the wall-clock columns (``WALL_COLUMN`` names).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pandas as pd

from sim.errors import KvsimError

RESULTS = "results.parquet"
MARKER = "sweep.json"
#: the row's own columns, first in the table (the swept keys come before them)
ID_COLUMNS = ("point", "seed", "replication", "config_sha256", "run_dir", "error")
#: the only columns whose values may differ between two runs of one sweep
WALL_COLUMN = re.compile(r"(^|\.)wall_[^.]*$|_wall_s$")


def is_wall_column(name: str) -> bool:
    """Whether a column holds a wall-clock measurement (``wall_*`` or ``*_wall_s``)."""
    return bool(WALL_COLUMN.search(name))


def claim_folder(out: Path, sweep_sha256: str, sweep_file: Path) -> None:
    """Make ``out`` this sweep's folder, or refuse one that holds another sweep's results
    (or anything else)."""
    marker = out / MARKER
    if out.exists() and not out.is_dir():
        raise KvsimError(f"--out: {out}: exists and is not a folder")
    if marker.is_file():
        try:
            owner = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            raise KvsimError(f"--out: {marker}: unreadable; choose another folder") from None
        if owner.get("sweep_sha256") != sweep_sha256:
            raise KvsimError(
                f"--out: {out} holds the results of another sweep ({owner.get('sweep_file')}); "
                "choose another folder (a sweep resumes only into its own folder)"
            )
        return
    if out.is_dir() and any(out.iterdir()):
        raise KvsimError(
            f"--out: {out}: folder exists, is not empty and is not a sweep's folder; choose "
            "another folder"
        )
    from sim.run.output import writable_parent

    writable_parent(out, "--out:")  # a file on the way (``afile/sub``): one line, not OSError
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KvsimError(f"--out: {out}: cannot create the folder: {exc.strerror}") from None
    doc = {"sweep_sha256": sweep_sha256, "sweep_file": str(sweep_file)}
    _atomic_text(marker, json.dumps(doc, indent=2) + "\n")


def read_rows(out: Path) -> list[dict[str, Any]]:
    """The rows already in ``out/results.parquet`` (none when it does not exist)."""
    path = out / RESULTS
    if not path.is_file():
        return []
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001  (a damaged file: say so in one line)
        raise KvsimError(f"--out: {path}: cannot read ({type(exc).__name__}); remove it") from None
    return [
        {k: (None if _is_null(v) else v) for k, v in row.items()}
        for row in frame.to_dict(orient="records")
    ]


def _is_null(value: Any) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # a list or array cell
        return False


def frame(rows: list[dict[str, Any]], keys: list[str]) -> pd.DataFrame:
    """The results table: rows in (point, replication) order, columns swept keys first."""
    rows = sorted(rows, key=lambda r: (r["point"], r["replication"]))
    table = pd.DataFrame(rows)
    metric_cols = sorted(c for c in table.columns if c not in (*keys, *ID_COLUMNS))
    table = table.reindex(columns=[*keys, *ID_COLUMNS, *metric_cols])
    for col in table.columns:
        if table[col].dtype == object:
            table[col] = _uniform(table[col])
    return table.reset_index(drop=True)


def _uniform(column: pd.Series) -> pd.Series:
    """A column Parquet can store: one type, or JSON text when values are mixed or nested."""
    values = [v for v in column if v is not None and not _is_null(v)]
    kinds = {type(v) for v in values}
    numeric = kinds <= {int, float} and kinds
    if not values or kinds == {str} or kinds == {bool} or numeric:
        return column
    return column.map(lambda v: None if v is None or _is_null(v) else json.dumps(v, default=str))


def write_results(out: Path, rows: list[dict[str, Any]], keys: list[str]) -> pd.DataFrame:
    """Rewrite ``out/results.parquet`` with ``rows`` (atomically); returns the table."""
    table = frame(rows, keys)
    tmp = out / f".{RESULTS}.partial"
    try:
        table.to_parquet(tmp, index=False)
        os.replace(tmp, out / RESULTS)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise KvsimError(f"cannot write {out / RESULTS}: {exc.strerror}") from None
    return table


#: at most this many warning lines under a sweep's end line (then a count of the rest)
SWEEP_WARNING_LINES = 20


def warnings_text(table: pd.DataFrame) -> str:
    """The lines ``kvsim sweep`` prints after its end line: each run whose summary
    ``warnings`` (the ``warnings`` column, JSON text) are not empty, one sentence a line as
    ``WARNING:   point P, seed S: <sentence>``, at most ``SWEEP_WARNING_LINES`` (then how
    many more); '' when every run is healthy."""
    if "warnings" not in table or not len(table):
        return ""
    said = []
    runs = 0  # runs with any warning
    for point, seed, cell in zip(table.point, table.seed, table.warnings, strict=True):
        sentences = json.loads(cell) if isinstance(cell, str) else []
        said += [f"point {point}, seed {seed}: {w}" for w in sentences]
        runs += bool(sentences)
    if not said:
        return ""
    lines = [f"WARNING: {runs} of {len(table)} runs look pathological (results.parquet's "
             "warnings column; each run's summary.json):"]  # fmt: skip
    lines += [f"WARNING:   {line}" for line in said[:SWEEP_WARNING_LINES]]
    if len(said) > SWEEP_WARNING_LINES:
        lines.append(f"WARNING:   ... and {len(said) - SWEEP_WARNING_LINES} more")
    return "\n".join(lines) + "\n"


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.partial")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise KvsimError(f"cannot write {path}: {exc.strerror}") from None

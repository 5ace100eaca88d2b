"""Reading request traces (CSV) for lengths and arrival times; the traces that ship.

Responsibility: load the columns a scenario names from a CSV trace (the Azure LLM
inference traces of 2023: ``TIMESTAMP, ContextTokens, GeneratedTokens``) with one-line
errors naming the file and the column; name the traces shipped in ``workloads/data``
(``SHIPPED``) and find them in the checkout.

Invariant: traces are read with Python's ``csv`` module only (no code execution, no
pandas: ``kvsim validate`` of a scenario that names a trace does not pay pandas' import,
~0.25 s; a cell is at most ``csv.field_size_limit()`` characters); token columns come back
as int64 arrays of whole numbers in [1, ``MAX_TRACE_TOKENS``] (any other cell is refused
naming its row, never rounded or raised to 1), time columns as float seconds from the
first row. Reading the cells and checking a token column is plain Python
(``read_cells``, ``token_values``): ``kvsim validate`` of a scenario whose lengths come
from a CSV trace imports no numpy (its import is a third of that command's time); a run
makes the arrays of the same values (``read_columns``, ``token_column``).
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sim.errors import ConfigError
from sim.lazy_numpy import numpy_on_first_use

if TYPE_CHECKING:
    import numpy as np
else:
    np = numpy_on_first_use(globals())

#: the project's ``workloads/data`` folder (traces with their licences; in the checkout)
DATA_DIR = Path(__file__).resolve().parents[2] / "workloads" / "data"
#: traces named in scenarios (``lengths.trace``, a ``mooncake`` workload without a path)
SHIPPED = {
    "azure_conv": "azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
    "azure_code": "azure_llm_2023/AzureLLMInferenceTrace_code.csv",
    "mooncake_synthetic": "mooncake/synthetic_trace.jsonl",
}


def shipped_trace(name: str, field: str | None = None) -> Path:
    """The path of a shipped trace (raises ConfigError when this install lacks it)."""
    path = DATA_DIR / SHIPPED[name]
    if not path.is_file():
        raise ConfigError(
            f"the shipped trace {name!r} is not in this install (looked for {path}); "
            "it ships in the source checkout's workloads/data: give a path instead",
            field=field,
        )
    return path


def read_columns(path: Path, columns: list[str]) -> dict[str, np.ndarray]:
    """The named columns of a CSV file as arrays of their cells' text (raises ConfigError;
    ``read_cells``'s columns as object arrays)."""
    return {c: np.array(cells, dtype=object) for c, cells in read_cells(path, columns).items()}


def read_cells(path: Path, columns: list[str]) -> dict[str, tuple[str, ...]]:
    """The named columns of a CSV file as their cells' text (raises ConfigError).

    The first non-blank line is the header; blank lines are skipped (so a "data row" is a
    row, not a line, as pandas counted them before); a row with fewer cells than the header
    has empty ones at its end, one with more is refused naming its line."""
    if not path.is_file():
        raise ConfigError("trace file not found", location=str(path))
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            rows = [r for r in reader if r and (len(r) > 1 or r[0].strip())]
    except csv.Error as exc:
        raise ConfigError(f"cannot read trace: line {reader.line_num}: {exc}", location=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"cannot read trace: {msg}", location=str(path)) from None
    if not rows:
        raise ConfigError("cannot read trace: the file is empty", location=str(path))
    header = rows[0]
    missing = [c for c in columns if c not in header]
    if missing:
        raise ConfigError(f"trace has no column {missing[0]!r}", location=str(path))
    if len(rows) == 1:
        raise ConfigError("trace has no rows", location=str(path))
    width = len(header)
    data = rows[1:]
    if any(len(r) != width for r in data):
        for i, r in enumerate(data):
            if len(r) > width:
                raise ConfigError(f"cannot read trace: data row {i + 1} has {len(r)} cells, "
                                  f"the header {width}", location=str(path))  # fmt: skip
        data = [r + [""] * (width - len(r)) for r in data]
    cells = list(zip(*data, strict=True))
    return {c: cells[header.index(c)] for c in columns}


#: the most tokens a trace's prompt or output may have (a bound far above any model's window)
MAX_TRACE_TOKENS = 10_000_000


def token_column(path: Path, values: Sequence, column: str) -> np.ndarray:
    """A token-count column as int64 (``token_values``' numbers; raises its error)."""
    return np.array(token_values(path, values, column), dtype=np.int64)


def token_values(path: Path, values: Sequence, column: str) -> list[int]:
    """A token-count column's cells as ints: every cell a whole number in [1,
    ``MAX_TRACE_TOKENS``]; the first other cell (empty, 0, negative, fractional, past the
    bound, not a number) is a one-line error naming its data row (pandas skips blank
    lines, so the row, not the line). Cells used to be rounded and raised to 1 silently,
    and a huge one overflowed int64.

    Each cell is read by ``float`` (what numpy's cast of a text cell to float64 calls: the
    same numbers and the same refusals); the first cell that is not a number is named
    before any number out of range, and a ``nan`` cell is shown as an empty one."""
    try:  # every cell a whole number in range: C loops alone (a run reads ~40,000 cells)
        tokens = list(map(float, values))
        whole = list(map(int, tokens))  # NaN and inf raise here
    except (TypeError, ValueError, OverflowError):
        whole = None
    if whole is not None and whole == tokens and (
        not whole or (min(whole) >= 1 and max(whole) <= MAX_TRACE_TOKENS)
    ):
        return whole
    tokens = []  # a cell is refused: find the first, as the message names it
    for i, v in enumerate(values):
        try:
            tokens.append(float(v))
        except (TypeError, ValueError, OverflowError):
            raise _bad_cell(path, column, i, _shown(v)) from None
    for i, t in enumerate(tokens):
        if not (1 <= t <= MAX_TRACE_TOKENS and t == math.floor(t)):  # NaN and inf fail here
            raise _bad_cell(path, column, i, "an empty cell" if math.isnan(t) else _shown(values[i]))
    return [int(t) for t in tokens]


def _is_number(value: object) -> bool:
    try:
        float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return True


def _shown(value: object) -> str:
    """A cell as the message shows it, at most 40 characters: a number as written (or as
    its value), other text quoted, an empty cell as such."""
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return "an empty cell"
        if not _is_number(text):
            text = repr(value)
    else:
        text = repr(value.item() if isinstance(value, np.generic) else value)
    return text if len(text) <= 40 else text[:37] + "..."


def _bad_cell(path: Path, column: str, row: int, got: str) -> ConfigError:
    return ConfigError(
        f"{column}: expected a whole number of tokens in [1, {MAX_TRACE_TOKENS:,}], got {got}",
        location=f"{path}: data row {row + 1}",
    )


#: an ISO 8601 date-time without a zone (the Azure traces': ``2023-11-16 18:15:46.6805900``),
#: which numpy parses to the nanosecond as pandas does; other forms go to pandas
_ISO_DATETIME = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d{1,9})?")


def time_column(path: Path, values: np.ndarray, column: str) -> np.ndarray:
    """A timestamp column (numbers in seconds, or date-times) as seconds from the first row."""
    values = np.asarray(values)
    try:
        t = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        t = _datetime_seconds(path, values, column)
    t = t - t[0]
    if (np.diff(t) < 0).any():
        raise ConfigError(f"column {column!r} is not in time order", location=str(path))
    return t


def _datetime_seconds(path: Path, values: np.ndarray, column: str) -> np.ndarray:
    """Date-time cells as seconds from the first: ISO 8601 ones by numpy, any other form
    by pandas' ``to_datetime(format="mixed")`` (imported only then)."""
    match = _ISO_DATETIME.fullmatch
    if all(isinstance(v, str) and match(v) for v in values):
        try:
            stamps = np.array(values, dtype="datetime64[ns]")
        except ValueError:  # a date that does not exist (2023-02-30): pandas says so below
            pass
        else:
            # whole seconds plus the nanosecond rest, each exact in a float below 2**53:
            # a correctly rounded figure (and the one pandas' ``total_seconds`` gives)
            whole_s, rest_ns = np.divmod((stamps - stamps[0]).astype(np.int64), 10**9)
            return whole_s + rest_ns / 10**9
    import pandas as pd

    try:
        series = pd.to_datetime(pd.Series(values), format="mixed")
    except (ValueError, TypeError):
        raise ConfigError(
            f"column {column!r} is neither seconds nor date-times", location=str(path)
        ) from None
    return (series - series.iloc[0]).dt.total_seconds().to_numpy()


def cycle_times(t: np.ndarray, n: int) -> np.ndarray:
    """``n`` arrival times: the trace's, repeated after its span (plus one mean gap)."""
    if n <= len(t):
        return t[:n].copy()
    gap = (t[-1] - t[0]) / max(1, len(t) - 1)
    period = t[-1] - t[0] + gap
    reps = -(-n // len(t))
    out = (t[None, :] + period * np.arange(reps)[:, None]).ravel()
    return out[:n]

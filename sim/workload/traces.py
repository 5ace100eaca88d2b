"""Reading request traces (CSV) for lengths and arrival times; the traces that ship.

Responsibility: load the columns a scenario names from a CSV trace (the Azure LLM
inference traces of 2023: ``TIMESTAMP, ContextTokens, GeneratedTokens``) with one-line
errors naming the file and the column; name the traces shipped in ``workloads/data``
(``SHIPPED``) and find them in the checkout.

Invariant: traces are read with pandas' CSV parser only (no code execution); token
columns come back as int64 arrays of whole numbers in [1, ``MAX_TRACE_TOKENS``] (any
other cell is refused naming its row, never rounded or raised to 1), time columns as float
seconds from the first row.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sim.errors import ConfigError

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
    """The named columns of a CSV file as numpy arrays (raises ConfigError)."""
    import pandas as pd

    if not path.is_file():
        raise ConfigError("trace file not found", location=str(path))
    try:
        frame = pd.read_csv(path, usecols=lambda c: c in columns)
    except (ValueError, OSError, pd.errors.ParserError) as exc:
        msg = str(exc).splitlines()[0]
        raise ConfigError(f"cannot read trace: {msg}", location=str(path)) from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ConfigError(f"trace has no column {missing[0]!r}", location=str(path))
    if frame.empty:
        raise ConfigError("trace has no rows", location=str(path))
    return {c: frame[c].to_numpy() for c in columns}


#: the most tokens a trace's prompt or output may have (a bound far above any model's window)
MAX_TRACE_TOKENS = 10_000_000


def token_column(path: Path, values: np.ndarray, column: str) -> np.ndarray:
    """A token-count column as int64: every cell a whole number in [1,
    ``MAX_TRACE_TOKENS``]; the first other cell (empty, 0, negative, fractional, past the
    bound, not a number) is a one-line error naming its data row (pandas skips blank
    lines, so the row, not the line). Cells used to be rounded and raised to 1 silently,
    and a huge one overflowed int64."""
    try:
        tokens = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        tokens = None
    if tokens is None:  # the first cell that is not a number
        i = next((j for j, v in enumerate(values) if not _is_number(v)), 0)
        raise _bad_cell(path, column, i, _shown(values[i]))
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(tokens) & (tokens >= 1) & (tokens <= MAX_TRACE_TOKENS)
        ok &= tokens == np.floor(tokens)
    if not ok.all():
        i = int(np.argmin(ok))
        raise _bad_cell(path, column, i, "an empty cell" if np.isnan(tokens[i]) else _shown(values[i]))
    return tokens.astype(np.int64)


def _is_number(value: object) -> bool:
    try:
        float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return True


def _shown(value: object) -> str:
    """A cell as the message shows it: a plain number or string, at most 40 characters."""
    text = repr(value.item() if isinstance(value, np.generic) else value)
    return text if len(text) <= 40 else text[:37] + "..."


def _bad_cell(path: Path, column: str, row: int, got: str) -> ConfigError:
    return ConfigError(
        f"{column}: expected a whole number of tokens in [1, {MAX_TRACE_TOKENS:,}], got {got}",
        location=f"{path}: data row {row + 1}",
    )


def time_column(path: Path, values: np.ndarray, column: str) -> np.ndarray:
    """A timestamp column (numbers in seconds, or date-times) as seconds from the first row."""
    import pandas as pd

    if np.issubdtype(np.asarray(values).dtype, np.number):
        t = np.asarray(values, dtype=np.float64)
    else:
        try:
            stamps = pd.to_datetime(pd.Series(values), format="mixed")
        except (ValueError, TypeError):
            raise ConfigError(
                f"column {column!r} is neither seconds nor date-times", location=str(path)
            ) from None
        t = (stamps - stamps.iloc[0]).dt.total_seconds().to_numpy()
    t = t - t[0]
    if (np.diff(t) < 0).any():
        raise ConfigError(f"column {column!r} is not in time order", location=str(path))
    return t


def cycle_times(t: np.ndarray, n: int) -> np.ndarray:
    """``n`` arrival times: the trace's, repeated after its span (plus one mean gap)."""
    if n <= len(t):
        return t[:n].copy()
    gap = (t[-1] - t[0]) / max(1, len(t) - 1)
    period = t[-1] - t[0] + gap
    reps = -(-n // len(t))
    out = (t[None, :] + period * np.arange(reps)[:, None]).ravel()
    return out[:n]

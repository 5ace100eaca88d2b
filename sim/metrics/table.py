"""An append-only table that keeps its rows compactly: tuples in, numpy chunks inside;
and the one representation of a finished record table, ``Columns``, with its two ways out
(a pandas DataFrame, an Arrow table for Parquet).

Responsibility: record millions of rows without millions of Python objects. Rows are
appended as tuples (cheap); every ``chunk_rows`` rows they are packed into one numpy
structured array of the table's dtype (8 bytes per number instead of ~32 for a boxed
float), so memory grows with the data, not with Python object overhead. A finished table
is ``Columns``: column name -> one 1-D numpy array, every array of the same length, in
column order; text is an object array of Python ``str`` (``None``: null).

Invariants: ``columns()`` (and ``frame()``) return every appended row, in order, with
the declared column names; ``None`` in a float column becomes NaN. The run path (build,
run, summary, Parquet) does not import pandas: ``to_frame`` imports it when a caller asks
for a DataFrame, ``to_arrow`` uses pyarrow alone. Both give what pandas gave from the same
columns: ``to_frame`` is ``pandas.DataFrame`` of them (a text column named in
``objects`` stays Python objects, null as ``None``; any other text column pandas infers,
``str`` in pandas 3), and ``to_arrow`` the Arrow types ``DataFrame.to_parquet`` wrote for
that frame (numbers as they are, NaN as null; inferred text as ``large_string``, an
``objects`` column as ``string``; an empty or all-null object column as ``null``), so the
Parquet files read back as the same DataFrame.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.errors import InvariantError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

#: a finished record table: column name -> 1-D array (all of one length), in column order
Columns = dict[str, np.ndarray]


class ChunkedTable:
    """Rows of a fixed set of typed columns."""

    __slots__ = ("dtype", "chunk_rows", "_rows", "_chunks")

    def __init__(self, columns: list[tuple[str, str]], chunk_rows: int = 4096) -> None:
        self.dtype = np.dtype(columns)
        self.chunk_rows = chunk_rows
        self._rows: list[tuple] = []
        self._chunks: list[np.ndarray] = []

    def append(self, row: tuple) -> None:
        rows = self._rows
        rows.append(row)
        if len(rows) >= self.chunk_rows:
            self._pack()

    def _pack(self) -> None:
        rows = self._rows
        if not rows:
            return
        # column by column (one C-level conversion per column, no per-row Python work);
        # numpy turns None into NaN in a float column, as the docstring promises
        chunk = np.empty(len(rows), dtype=self.dtype)
        for name, column in zip(self.dtype.names, zip(*rows, strict=True), strict=True):
            chunk[name] = column
        self._chunks.append(chunk)
        self._rows = []

    def __len__(self) -> int:
        return sum(len(c) for c in self._chunks) + len(self._rows)

    def array(self) -> np.ndarray:
        """Every row as one structured array."""
        self._pack()
        if not self._chunks:
            return np.empty(0, dtype=self.dtype)
        if len(self._chunks) > 1:
            self._chunks = [np.concatenate(self._chunks)]
        return self._chunks[0]

    def columns(self, release: bool = False) -> Columns:
        """Every row as ``Columns`` (text columns as Python strings); ``release`` empties
        the table, so the columns do not double the memory held."""
        self._pack()
        chunks = self._chunks or [np.empty(0, dtype=self.dtype)]
        data = {}
        for name in self.dtype.names:  # column by column: no copy of the whole table
            col = np.concatenate([c[name] for c in chunks])
            data[name] = col.astype(str).astype(object) if col.dtype.kind in "US" else col
        if release:
            self._chunks = []
        return data

    def frame(self, release: bool = False) -> pd.DataFrame:
        """``columns()`` as a DataFrame (imports pandas)."""
        return to_frame(self.columns(release))


def to_frame(columns: Columns, objects: Collection[str] = ()) -> pd.DataFrame:
    """``columns`` as a pandas DataFrame (a RangeIndex; a text column named in
    ``objects`` kept as Python objects, null as ``None``)."""
    import pandas as pd

    data = {
        name: pd.Series(col, dtype=object, copy=False) if name in objects else col
        for name, col in columns.items()
    }
    return pd.DataFrame(data, columns=list(columns), copy=False)


def to_arrow(columns: Columns, objects: Collection[str] = ()) -> pa.Table:
    """``columns`` as the Arrow table ``DataFrame.to_parquet`` wrote for
    ``to_frame(columns, objects)`` (see the module docstring), without pandas: every
    array is made from its buffers (``pyarrow.array`` imports pandas when it is installed)."""
    import pyarrow as pa

    arrays = [_text(col, name in objects) if col.dtype == object else _numbers(col)
              for name, col in columns.items()]  # fmt: skip
    return pa.Table.from_arrays(arrays, names=list(columns))


def _bitmap(valid: np.ndarray) -> Any:
    """An Arrow validity (or boolean) bitmap of ``valid``."""
    import pyarrow as pa

    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _numbers(col: np.ndarray) -> pa.Array:
    """A number (or boolean) column; NaN becomes null, as ``to_parquet`` wrote it."""
    import pyarrow as pa

    col = np.ascontiguousarray(col)
    kind = pa.from_numpy_dtype(col.dtype)
    data = _bitmap(col) if col.dtype == np.bool_ else pa.py_buffer(col)
    nan = np.isnan(col) if col.dtype.kind == "f" else None
    if nan is None or not nan.any():
        return pa.Array.from_buffers(kind, len(col), [None, data], null_count=0)
    return pa.Array.from_buffers(kind, len(col), [_bitmap(~nan), data], null_count=int(nan.sum()))


def _text(col: np.ndarray, kept_object: bool) -> pa.Array:
    """A text column (Python ``str``, ``None`` as null): ``null`` when it holds no text,
    else ``string`` for a column kept as objects, ``large_string`` for one pandas makes
    ``str``."""
    import pyarrow as pa

    valid = np.not_equal(col, None)
    values = col[valid].tolist()
    if not values:
        return pa.nulls(len(col))
    bad = next((v for v in values if not isinstance(v, str)), None)
    if bad is not None:
        raise InvariantError(f"a text column holds {bad!r} ({type(bad).__name__}), not a str")
    text = "".join(values)
    data = text.encode("utf-8")
    if len(data) == len(text):  # ASCII: one byte per character
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    else:
        lengths = np.fromiter((len(v.encode("utf-8")) for v in values), dtype=np.int64,
                              count=len(values))  # fmt: skip
    sizes = np.zeros(len(col), dtype=np.int64)
    sizes[valid] = lengths
    offsets = np.zeros(len(col) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    if kept_object:
        kind, offsets = pa.string(), offsets.astype(np.int32)
    else:
        kind = pa.large_string()
    nulls = len(col) - len(values)
    bitmap = _bitmap(valid) if nulls else None
    buffers = [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(kind, len(col), buffers, null_count=nulls)

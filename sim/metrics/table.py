"""An append-only table that keeps its rows compactly: tuples in, numpy chunks inside.

Responsibility: record millions of rows without millions of Python objects. Rows are
appended as tuples (cheap); every ``chunk_rows`` rows they are packed into one numpy
structured array of the table's dtype (8 bytes per number instead of ~32 for a boxed
float), so memory grows with the data, not with Python object overhead.

Invariant: ``frame()`` returns every appended row, in order, with the declared column
names; ``None`` in a float column becomes NaN.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


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

    def frame(self, release: bool = False) -> pd.DataFrame:
        """Every row as a DataFrame (text columns as Python strings); ``release`` empties
        the table, so the frame does not double the memory held."""
        self._pack()
        chunks = self._chunks or [np.empty(0, dtype=self.dtype)]
        data = {}
        for name in self.dtype.names:  # column by column: no copy of the whole table
            col = np.concatenate([c[name] for c in chunks])
            data[name] = col.astype(str).astype(object) if col.dtype.kind in "US" else col
        if release:
            self._chunks = []
        return pd.DataFrame(data, columns=list(self.dtype.names), copy=False)

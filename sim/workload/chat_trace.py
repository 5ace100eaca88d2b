"""A chat workload's trace files: the lengths CSV and the arrival it implies (no numpy).

Responsibility: find a ``trace`` lengths config's CSV file (``lengths_path``), read its
prompt and output columns as checked token counts (``trace_length_values``) and give a
chat config's arrival process (``chat_arrival``: a ``trace`` arrival without a ``path``
reads the lengths file). ``sim.workload.chat`` (the run) and
``sim.workload.trace_files`` (``kvsim validate``) call these same functions.

Invariant: importing this module, and everything it calls, imports no numpy and no
simulation module: validating a scenario whose lengths come from the Azure trace pays
neither (``tests/cli/test_startup_imports.py``); the run makes its arrays from the lists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim.workload import traces


def lengths_path(lengths: Any, ctx: Any) -> Path:
    """The CSV file of trace lengths: its ``path``, or the shipped trace it names."""
    if lengths.trace is not None:
        return traces.shipped_trace(lengths.trace, f"{ctx.field_prefix}.lengths.trace")
    return ctx.resolve(lengths.path)


def trace_length_values(lengths: Any, ctx: Any) -> tuple[list[int], list[int]]:
    """Every row's (prompt tokens, output tokens) of a ``trace`` lengths config's CSV file
    (``traces.token_values``' checks: a bad cell is a one-line error naming its row)."""
    path = lengths_path(lengths, ctx)
    cols = traces.read_cells(path, [lengths.prompt_column, lengths.output_column])
    prompt = traces.token_values(path, cols[lengths.prompt_column], lengths.prompt_column)
    output = traces.token_values(path, cols[lengths.output_column], lengths.output_column)
    return prompt, output


def chat_arrival(cfg: Any, ctx: Any) -> Any:
    """A chat config's arrival process: a ``trace`` arrival without a ``path`` reads the
    lengths trace's file."""
    arrival = cfg.arrival
    if arrival.kind == "trace" and arrival.path is None and cfg.lengths.kind == "trace":
        arrival = arrival.model_copy(update={"path": str(lengths_path(cfg.lengths, ctx))})
    elif arrival.kind == "trace" and arrival.path is None:
        from sim.errors import ConfigError

        raise ConfigError(
            "a trace arrival needs a path (or trace lengths)",
            field=f"{ctx.field_prefix}.arrival.path",
        )
    return arrival

"""Whether a YAML file is a sweep file, without the sweep file's schema.

Invariant: imports only ``sim.yamlio`` and ``sim.errors`` (no pydantic model is built), so
``kvsim validate`` can tell a sweep file from a scenario before it loads either's schema.
"""

from __future__ import annotations

from pathlib import Path

from sim.errors import KvsimError
from sim.yamlio import load_yaml


def is_sweep_file(path: str | Path) -> bool:
    """Whether a YAML file is a sweep file (a top-level ``sweep:`` key); False when it
    cannot be read (the scenario loader then reports why)."""
    try:
        data, _ = load_yaml(path)
    except KvsimError:
        return False
    return isinstance(data, dict) and "sweep" in data

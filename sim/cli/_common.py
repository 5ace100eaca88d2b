"""Shared CLI helpers: number lists, unit flags, ``--set`` overrides, JSON output, warnings.

Invariant: flag values are turned into bytes/seconds here, once; GB means 10^9 B and GiB
2^30 B, and a pair of GB/GiB flags for the same quantity is mutually exclusive.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from sim.errors import KvsimError
from sim.units import GB, GiB
from sim.yamlio import load_value


def int_list(values: list[str] | None, flag: str) -> list[int]:
    """Comma-separated and/or repeated integers (``8192,32768`` or the flag twice)."""
    out: list[int] = []
    for v in values or []:
        for part in str(v).split(","):
            part = part.strip().replace("_", "")
            if not part:
                continue
            try:
                out.append(int(float(part)) if "e" in part.lower() else int(part))
            except ValueError:
                raise KvsimError(f"{flag}: {part!r} is not a whole number") from None
    return out


def gb_or_gib(gb: float | None, gib: float | None, flag: str) -> float | None:
    """Bytes from a ``--X-gb`` / ``--X-gib`` pair; None when neither is given."""
    if gb is not None and gib is not None:
        raise KvsimError(f"give {flag}-gb or {flag}-gib, not both")
    if gb is not None:
        return gb * GB
    if gib is not None:
        return gib * GiB
    return None


def parse_sets(items: list[str] | None, prefixes: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """``--set model.num_layers=96`` -> {'model': {'num_layers': 96}}; values parsed as YAML."""
    out: dict[str, dict[str, Any]] = {p: {} for p in prefixes}
    for item in items or []:
        key, sep, raw = item.partition("=")
        head, dot, rest = key.partition(".")
        if not sep or not dot or head not in prefixes or not rest:
            raise KvsimError(
                f"--set {item!r}: expected PREFIX.FIELD=VALUE with PREFIX one of "
                f"{', '.join(prefixes)}"
            )
        out[head][rest] = load_value(raw, f"--set {key}")
    return out


def print_json(obj: Any) -> None:
    """One JSON object on stdout."""
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def print_warnings(warnings: list[str]) -> None:
    """Each warning as one ``kvsim: warning:`` line on stderr (stdout keeps its contract)."""
    for warning in warnings:
        print(f"kvsim: warning: {warning}", file=sys.stderr)

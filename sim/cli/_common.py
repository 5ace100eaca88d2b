"""Shared CLI helpers: number lists, unit flags, ``--set`` overrides, JSON output, warnings.

Invariant: flag values are turned into bytes/seconds here, once; GB means 10^9 B and GiB
2^30 B, and a pair of GB/GiB flags for the same quantity is mutually exclusive. A numeric
flag is range-checked (``sim.sizing.bounds.check_number``) before it is converted, so the
one-line error names the flag the user typed and its valid range.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

import typer

from sim.errors import KvsimError
from sim.sizing.bounds import MAX_MEMORY_GB, check_number
from sim.units import GB, GiB
from sim.yamlio import load_value


@dataclass(frozen=True)
class Invocation:
    """What ``sim.cli.main`` was called with, handed to the commands as click's ``obj``."""

    argv: list[str]  # the arguments after the program name


def command_argv(ctx: typer.Context) -> list[str]:
    """The command line as the user gave it, ``kvsim`` first: the argv ``sim.cli.main``
    received (``sys.argv`` when the app is called some other way)."""
    obj = ctx.find_root().obj
    argv = obj.argv if isinstance(obj, Invocation) else sys.argv[1:]
    return ["kvsim", *argv]


def int_list(values: list[str] | None, flag: str) -> list[int]:
    """Comma-separated and/or repeated integers (``8192,32768`` or the flag twice)."""
    out: list[int] = []
    for v in values or []:
        for part in str(v).split(","):
            part = part.strip().replace("_", "")
            if not part:
                continue
            try:
                out.append(_whole(part))
            except (ValueError, OverflowError):  # 'nan', 'inf', '1e999', '1.5e0'
                raise KvsimError(f"{flag}: {part!r} is not a whole number") from None
    return out


def _whole(text: str) -> int:
    if "e" not in text.lower():
        return int(text)
    value = float(text)
    if not value.is_integer():  # also nan; inf raises OverflowError in int()
        raise ValueError(text)
    return int(value)


def gb_or_gib(
    gb: float | None, gib: float | None, flag: str, suffix: str = "", *, allow_zero: bool = False
) -> float | None:
    """Bytes from a ``--X-gb[SUFFIX]`` / ``--X-gib[SUFFIX]`` pair; None when neither is
    given. Each value must be finite, positive (or 0 with ``allow_zero``) and at most
    ``MAX_MEMORY_GB``."""
    gb_flag, gib_flag = f"{flag}-gb{suffix}", f"{flag}-gib{suffix}"
    if gb is not None and gib is not None:
        raise KvsimError(f"give {gb_flag} or {gib_flag}, not both")
    for value, name, unit in ((gb, gb_flag, GB), (gib, gib_flag, GiB)):
        if value is not None:
            check_number(value, name, 0, MAX_MEMORY_GB, low_open=not allow_zero)
            return value * unit
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

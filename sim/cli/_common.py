"""Shared CLI helpers: number lists, unit flags, ``--set`` overrides, JSON output, warnings,
and the lines several commands print (a rebuilt ``kvsim run`` command line, a cluster's
summary line).

Invariant: flag values are turned into bytes/seconds here, once; GB means 10^9 B and GiB
2^30 B, and a pair of GB/GiB flags for the same quantity is mutually exclusive. A numeric
flag is range-checked (``sim.sizing.bounds.check_number``) before it is converted, so the
one-line error names the flag the user typed and its valid range.
"""

from __future__ import annotations

import codecs
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from sim.errors import KvsimError, escaped_text
from sim.units import GB, GiB
from sim.yamlio import load_value

if TYPE_CHECKING:
    import typer


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
    # imported here: the sizing layer loads the profiles (pydantic), which ``kvsim
    # --version`` (``sim.cli.main`` uses ``Invocation``) must not pay for
    from sim.sizing.bounds import MAX_MEMORY_GB, check_number

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


def load_with_sets(load: Any, name: str, profiles: Any, sets: dict[str, Any], prefix: str) -> Any:
    """``load(name, profiles, sets)`` (``sim.profiles.load_model``, ``load_accelerator``)
    of the ``--set PREFIX.FIELD=V`` overrides ``sets``; a value the profile refuses is
    named by its ``--set`` (``--set model.num_layers: model.num_layers: ...``), never by
    a line of the profile file the user did not write."""
    from sim.errors import ConfigError
    from sim.profiles.registry import ProfileOverrideError

    try:
        return load(name, profiles, sets)
    except ProfileOverrideError as exc:
        key = f"{prefix}.{exc.key}" if exc.key else prefix
        field = f"{prefix}.{exc.field}" if exc.field else key
        raise ConfigError(exc.message, location=f"--set {key}", field=field) from None


def print_json(obj: Any) -> None:
    """One JSON object on stdout."""
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def echo(line: str, stream: TextIO) -> None:
    """One line on ``stream``, flushed (so stdout and stderr keep their order in one pipe,
    as ``typer.echo`` kept it). A line the stream cannot encode is written as click's
    ``echo`` wrote it (``typer.echo``): an ASCII stream (``LANG=C``,
    ``PYTHONIOENCODING=ascii``) is taken as misconfigured and gets the line in UTF-8, any
    other encoding gets it with what it cannot encode replaced (``?``); never raised. The
    test is the stream's encoding, not its error handler: stderr, whose handler
    (``backslashreplace``) would write ``\\xe9``, gets what stdout gets; a stream that
    writes the bytes a name's surrogates stand for (``surrogateescape``: Python's stdout
    in the C or POSIX locale) still writes them."""
    try:
        encoding = getattr(stream, "encoding", None)
        if encoding:  # strict, but for the surrogates a surrogateescape stream writes back
            kept = getattr(stream, "errors", None) == "surrogateescape"
            line.encode(encoding, "surrogateescape" if kept else "strict")
        stream.write(line + "\n")
    except UnicodeEncodeError:
        own = getattr(stream, "encoding", None) or "utf-8"
        buffer = getattr(stream, "buffer", None)
        if buffer is None:  # a text-only stream: what its own encoding carries
            stream.write((line + "\n").encode(own, "replace").decode(own))
        else:
            wire = "utf-8" if codecs.lookup(own).name == "ascii" else own  # (click's rule)
            stream.flush()  # what the text layer holds goes first
            buffer.write((line + "\n").encode(wire, "replace"))
    stream.flush()


def print_error(message: object) -> None:
    """``kvsim: error: MESSAGE`` on stderr, written as ``echo`` writes stdout's lines (an
    ASCII stderr gets it in UTF-8, as click wrote it; never Python's ``\\xe9`` escapes).
    A file name's bytes that are not UTF-8 (kept by Python as surrogates, ``$'x\\xff'``)
    are shown escaped (``x\\xff``), as ``sim.run.output.utf8_path`` shows them."""
    echo(f"kvsim: error: {escaped_text(str(message))}", sys.stderr)


def print_warnings(warnings: list[str]) -> None:
    """Each warning as one ``kvsim: warning:`` line on stderr (stdout keeps its contract)."""
    for warning in warnings:
        echo(f"kvsim: warning: {warning}", sys.stderr)


def command_line(file: Path, out: str, sets: list[str], quiet: bool, force: bool) -> list[str]:
    """A command line rebuilt from parsed flags (``kvsim run`` itself records the argv it
    was given, ``command_argv``)."""
    argv = ["kvsim", "run", str(file), "--out", out]
    for item in sets:
        argv += ["--set", item]
    return argv + (["--quiet"] if quiet else []) + (["--force"] if force else [])


def cluster_line(resolved) -> str:
    """What a cluster scenario resolved to: its node groups (count x accelerator, tp
    when above 1; equal groups merged), the router, the model and the KV pool in all."""
    from sim.cluster.config import node_groups
    from sim.run.checks import preflight_cluster
    from sim.units import GB

    sc = resolved.scenario
    groups = preflight_cluster(resolved.loaded)
    counts: dict[str, int] = {}
    for i, g in enumerate(sc.cluster.nodes):
        r = groups[i]
        tp = r.scenario.hardware.tp
        name = r.accelerator.name + (f" (tp {tp})" if tp > 1 else "")
        counts[name] = counts.get(name, 0) + g.count
    pool = sum(groups[g].pool_bytes for g in node_groups(sc.cluster))
    n = sc.cluster.n_nodes
    nodes = ", ".join(f"{c} x {name}" for name, c in counts.items())
    allocators = "+".join(dict.fromkeys(r.allocator_kind for r in groups))  # every group's
    schedulers = "+".join(dict.fromkeys(r.scenario.scheduler.kind for r in groups))
    dp = sc.cluster.data_parallel
    if dp is not None:  # one engine's data-parallel ranks
        if resolved.model.num_experts:
            how = "expert parallel" if dp.expert_parallel else "experts sharded as TP"
            how += ", stepping in lockstep"
        else:
            how = "a dense model: each rank steps alone"
        return (
            f"one engine of {n} data-parallel rank{'s' if n > 1 else ''} ({nodes}; {how}), "
            f"router {sc.cluster.router.kind}, {resolved.model.name}, KV pool "
            f"{pool / GB:,.2f} GB in all, allocator {allocators}, scheduler {schedulers}, "
            f"workload {sc.workload.kind}"
        )
    router = sc.cluster.router.kind
    if sc.cluster.disaggregated:  # it places requests itself (no router), as the run says
        roles = {r: sum(g.count for g in sc.cluster.nodes if g.role == r) for r in ("prefill", "decode")}
        router = f"disaggregated ({roles['prefill']} prefill + {roles['decode']} decode)"
    return (
        f"cluster of {n} node{'s' if n > 1 else ''} ({nodes}), router {router}, "
        f"{resolved.model.name}, KV pool {pool / GB:,.2f} GB in all, allocator "
        f"{allocators}, scheduler {schedulers}, workload {sc.workload.kind}"
    )

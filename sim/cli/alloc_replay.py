"""``kvsim alloc-replay``: drive one allocator through an allocation trace, print metrics.

Invariant: the command only parses flags and prints; trace parsing, the replay and the
table live in ``sim.memory.replay``. ``--json`` prints exactly one object.
"""

from __future__ import annotations

from typing import Annotated

import typer

from sim.cli._common import print_json
from sim.errors import KvsimError
from sim.yamlio import load_value

HELP = """Replay an allocation trace (no timing) and print memory metrics after the ops.

FILE is YAML or JSON: a list of ops ("allocate SEQ TOKENS", "append SEQ [TOKENS]",
"fork PARENT CHILD", "free SEQ"), or {allocator: {kind, pool_bytes, kv_bytes_per_token,
OPTIONS...}, ops: [...]}. A YAML trace may hold up to 2,000,000 nodes (about a million
ops) and 128 MiB; a FILE named *.json is read with a JSON parser, up to 128 MiB (millions
of ops): use JSON for large traces. Flags override the file's allocator section (a different
--kind drops the file's options, which belong to its kind). Without FILE,
--random N replays a generated trace. A miss is shown as MISS and the replay goes on; a
sequence whose allocate or fork missed is dropped (its later ops are skipped). Byte sizes
take units: 2048, 1.5e9, '10GiB' (2^30), '10GB' (10^9). Example:

  kvsim alloc-replay --random 200 --kind contiguous --pool 8GiB --kv-bytes-per-token 160KiB
  --every 20 --request 1GiB
"""


def register(app: typer.Typer) -> None:
    """Add ``alloc-replay`` to the app."""
    app.command("alloc-replay", help=HELP)(alloc_replay)


def _options(items: list[str] | None) -> dict:
    out = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise KvsimError(f"--option {item!r}: expected NAME=VALUE, e.g. block_size=16")
        out[key.strip()] = load_value(raw, f"--option {key.strip()}")
    return out


def alloc_replay(
    file: Annotated[str | None, typer.Argument(help="Trace file (YAML/JSON).")] = None,
    kind: Annotated[str | None, typer.Option(help="Allocator kind (static, contiguous, buddy, paged, ...).")] = None,
    pool: Annotated[str | None, typer.Option(help="KV pool size, e.g. 10GiB.")] = None,
    kv_bytes_per_token: Annotated[str | None, typer.Option(help="KV bytes per token, e.g. 320KiB.")] = None,
    option: Annotated[list[str] | None, typer.Option("--option", "-o", help="Allocator option NAME=VALUE (repeatable), e.g. block_size=16.")] = None,
    random_ops: Annotated[int | None, typer.Option("--random", help="Replay N generated ops instead of FILE.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the generated trace.")] = 0,
    every: Annotated[int, typer.Option(help="Print metrics after every N-th op (and the last).")] = 1,
    request: Annotated[str | None, typer.Option(help="Request size for Phi_ext (F9), e.g. 2GiB.")] = None,
    unit: Annotated[str, typer.Option(help="Byte unit of the table: B, KiB, MiB, GiB, KB, MB, GB.")] = "MiB",
    check: Annotated[bool, typer.Option(help="Check the allocator's invariants after every op.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:  # fmt: skip
    """Parse the flags, replay, print."""
    import sim.prefix  # noqa: F401  (registers the radix and paged_hash allocator kinds)
    from sim.memory.replay import (
        allocator_from_settings,
        format_table,
        load_trace,
        parse_bytes,
        replay,
        row_record,
    )
    from sim.memory.replay import (
        random_ops as make_random_ops,
    )

    if (file is None) == (random_ops is None):
        raise KvsimError("give a trace FILE or --random N (exactly one)")
    if unit.lower() not in {"b", "kib", "mib", "gib", "kb", "mb", "gb"}:
        raise KvsimError(f"--unit: unknown unit {unit!r}; valid: B, KiB, MiB, GiB, KB, MB, GB")
    if file is not None:
        trace = load_trace(file)
        ops, settings, source = trace.ops, trace.allocator, f"{file}: allocator"
    else:
        ops, settings, source = make_random_ops(random_ops, seed=seed), {}, "flags"
    if kind is not None and settings.get("kind", kind) != kind:
        # another kind: the file's options belong to its own kind
        settings = {k: settings[k] for k in ("pool_bytes", "kv_bytes_per_token") if k in settings}
    settings.update(_options(option))
    names = {}  # the flag each setting came from, for its errors
    for key, value, flag in (
        ("kind", kind, "--kind"),
        ("pool_bytes", pool, "--pool"),
        ("kv_bytes_per_token", kv_bytes_per_token, "--kv-bytes-per-token"),
    ):
        if value is not None:
            settings[key] = value
            names[key] = flag
    if (
        "kind" not in settings
        or "pool_bytes" not in settings
        or "kv_bytes_per_token" not in settings
    ):
        raise KvsimError("the allocator needs --kind, --pool and --kv-bytes-per-token (or the file's allocator section)")  # fmt: skip
    alloc = allocator_from_settings(settings, source, names)
    request_bytes = parse_bytes(request, "--request") if request is not None else None
    rows = replay(alloc, ops, every=every, request_bytes=request_bytes, check=check)
    if json_out:
        print_json({
            "kind": alloc.kind,
            "ops": len(ops),
            "misses": sum(r.ok is False for r in rows),
            "skipped": sum(r.ok is None for r in rows),
            "rows": [row_record(r) for r in rows if r.metrics is not None],
        })  # fmt: skip
        return
    typer.echo(format_table(rows, unit))

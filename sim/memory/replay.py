"""Replay allocation traces (no timing): allocate/append/fork/free ops -> metrics over time.

Responsibility: read a trace (a YAML/JSON file or a generator), drive one allocator through
it and report ``MemoryMetrics`` after the ops, and whether the reference request fits
the largest free hole (``fits``; ``request_fits``: a paged pool short of memory does not
fit it, though its ``phi_ext``, F9, is 0 by construction). Used by ``kvsim alloc-replay``, the tests and
notebooks.

Trace file: a list of ops, or a mapping ``{allocator: {...}, ops: [...]}`` whose optional
``allocator`` section gives ``kind``, ``pool_bytes``, ``kv_bytes_per_token`` (numbers or
strings such as ``"10 GiB"``) and the kind's options. An op is a string
``"allocate SEQ TOKENS"``, ``"append SEQ [TOKENS]"``, ``"fork PARENT CHILD"``,
``"free SEQ"``, or the same as a mapping (``{op: fork, parent: 1, child: 2}``,
``{op: append, seq: 1, tokens: 16}``). Ids that look like integers are integers.

Semantics: ops run in order. A miss is recorded (``ok`` False) and the replay goes on; a
sequence whose ``allocate`` or ``fork`` missed is *dropped*: its later ops are skipped
(``ok`` None) until an ``allocate`` brings the id back. Misuse (an op on an id that was
never admitted) is an error naming ``file:line``.

Invariant: the trace is parsed with the safe YAML loader, or ``json`` for a ``*.json`` file
(each within ``MAX_TRACE_*``); a replay is deterministic.
"""

from __future__ import annotations

import random
import re
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.errors import ConfigError
from sim.memory.base import Allocator
from sim.memory.errors import AllocatorError
from sim.memory.fragmentation import request_fits
from sim.memory.metrics import MemoryMetrics
from sim.memory.registry import MAX_POOL_TOKENS, make_allocator
from sim.units import GB, KB, MB, TB, GiB, KiB, MiB, TiB
from sim.yamlio import load_json, load_yaml, loads_yaml

OP_KINDS = ("allocate", "append", "fork", "free")
_UNITS = {"": 1, "b": 1, "kb": KB, "mb": MB, "gb": GB, "tb": TB,
          "kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB}  # fmt: skip
_SIZE = re.compile(r"^\s*([0-9][0-9_]*(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


@dataclass(frozen=True, slots=True)
class Op:
    """One trace operation."""

    op: str  # allocate | append | fork | free
    seq: Hashable  # the sequence (the parent for fork)
    tokens: int = 0  # allocate: prompt tokens; append: tokens written
    child: Hashable = None  # fork only
    where: str | None = None  # "file:line" for error messages

    def __str__(self) -> str:
        if self.op == "fork":
            return f"fork {self.seq} {self.child}"
        if self.op == "free":
            return f"free {self.seq}"
        return f"{self.op} {self.seq} {self.tokens}"


@dataclass(frozen=True, slots=True)
class ReplayRow:
    """The state after one op."""

    step: int  # 0-based index of the op
    op: Op
    ok: bool | None  # True done, False miss, None skipped (dropped sequence)
    metrics: MemoryMetrics | None  # None on steps not sampled (see ``every``)
    request_bytes: float | None = None  # the reference request (``fits``, ``phi_ext``)


@dataclass(frozen=True, slots=True)
class Trace:
    """A parsed trace file: its ops and the optional allocator settings."""

    ops: list[Op]
    allocator: dict[str, Any]


def parse_bytes(value: Any, field: str = "bytes") -> float:
    """``2048``, ``1.5e9``, ``"10 GiB"``, ``"1.5GB"`` -> bytes (GB = 10^9, GiB = 2^30)."""
    if isinstance(value, bool):
        raise ConfigError(f"expected a byte size, got {value!r}", field=field)
    if isinstance(value, int | float):
        return value
    m = _SIZE.match(str(value))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS:
        raise ConfigError(
            f"expected a byte size such as 2048, '10 GiB' or '1.5GB', got {value!r}", field=field
        )
    number = float(m.group(1).replace("_", ""))
    n_bytes = number * _UNITS[unit]
    return int(n_bytes) if float(n_bytes).is_integer() else n_bytes


def _ident(raw: Any) -> Hashable:
    if isinstance(raw, str) and re.fullmatch(r"-?[0-9]+", raw.strip()):
        return int(raw)
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise ValueError(f"a sequence id must be an integer or a name, got {raw!r}")
    return raw


def _int(raw: Any, what: str) -> int:
    if isinstance(raw, bool):
        raise ValueError(f"{what} must be a whole number, got {raw!r}")
    if isinstance(raw, str) and re.fullmatch(r"[0-9]+", raw.strip()):
        return int(raw)
    if not isinstance(raw, int):
        raise ValueError(f"{what} must be a whole number, got {raw!r}")
    return raw


_ARITY = {"allocate": (2, 2), "append": (1, 2), "fork": (2, 2), "free": (1, 1)}
_KEYS = {"allocate": ("seq", "tokens"), "append": ("seq", "tokens"),
         "fork": ("parent", "child"), "free": ("seq",)}  # fmt: skip


def parse_op(item: Any, where: str | None = None) -> Op:
    """One op from a string or a mapping; ConfigError (with ``where``) when malformed."""
    try:
        if isinstance(item, str):
            name, *args = item.split()
        elif isinstance(item, dict):
            name = item.get("op")
            keys = _KEYS.get(name, ())
            extra = sorted(set(item) - {"op", *keys}, key=str)
            if extra:
                raise ValueError(f"unknown field {extra[0]!r}; valid: op, {', '.join(keys)}")
            args = [item[k] for k in keys if k in item]
        else:
            raise ValueError("an op is a string like 'allocate 1 100' or a mapping")
        if name not in _ARITY:
            raise ValueError(f"unknown op {name!r}; valid: {', '.join(OP_KINDS)}")
        lo, hi = _ARITY[name]
        if not lo <= len(args) <= hi:
            usage = {"allocate": "allocate SEQ TOKENS", "append": "append SEQ [TOKENS]",
                     "fork": "fork PARENT CHILD", "free": "free SEQ"}[name]  # fmt: skip
            raise ValueError(f"expected '{usage}'")
        if name == "fork":
            return Op("fork", _ident(args[0]), child=_ident(args[1]), where=where)
        tokens = _int(args[1], "tokens") if len(args) > 1 else (1 if name == "append" else 0)
        return Op(name, _ident(args[0]), tokens, where=where)
    except ValueError as exc:
        raise ConfigError(str(exc), location=where) from None


def parse_trace(data: Any, source: str = "<trace>", lines: dict | None = None) -> Trace:
    """A trace from loaded YAML data (a list of ops or ``{allocator:, ops:}``)."""
    lines = lines or {}
    settings: dict[str, Any] = {}
    prefix: tuple = ()
    if isinstance(data, dict):
        extra = sorted(set(data) - {"allocator", "ops"}, key=str)
        if extra:
            line = lines.get((extra[0],))
            raise ConfigError(
                "unknown field; valid: allocator, ops",
                location=f"{source}:{line}" if line else source,
                field=str(extra[0]),
            )
        settings = data.get("allocator") or {}
        if not isinstance(settings, dict):
            raise ConfigError("must be a mapping", location=source, field="allocator")
        data, prefix = data.get("ops"), ("ops",)
    if not isinstance(data, list):
        raise ConfigError("a trace is a list of ops (or a mapping with 'ops')", location=source)
    ops = []
    for i, item in enumerate(data):
        line = lines.get((*prefix, i))
        ops.append(parse_op(item, f"{source}:{line}" if line else f"{source}: op {i}"))
    return Trace(ops, dict(settings))


#: bounds of a trace file, above the scenario loader's (a trace holds one node per op):
#: YAML (a pure-Python parse, ~35 us and ~1 KB per node) up to 2 M nodes, about 1 M ops;
#: JSON (``*.json``, parsed by ``json``: no aliases) up to 128 MiB, about 6 M ops
MAX_TRACE_NODES = 2_000_000
MAX_TRACE_BYTES = 128 * 1024 * 1024


def load_trace(path: str | Path) -> Trace:
    """Parse a trace file: ``*.json`` with ``json``, anything else with the safe YAML
    loader (each within the bounds above)."""
    if Path(path).suffix.lower() == ".json":
        data, lines = load_json(path, max_bytes=MAX_TRACE_BYTES)
    else:
        data, lines = load_yaml(path, max_nodes=MAX_TRACE_NODES, max_bytes=MAX_TRACE_BYTES)
    return parse_trace(data, str(path), lines)


def loads_trace(text: str, source: str = "<string>") -> Trace:
    data, lines = loads_yaml(text, source)
    return parse_trace(data, source, lines)


def allocator_from_settings(settings: dict[str, Any], source: str = "allocator",
                            names: dict[str, str] | None = None) -> Allocator:  # fmt: skip
    """``make_allocator`` from a trace's ``allocator`` section (byte sizes may have units).
    A pool of more than ``MAX_POOL_TOKENS`` tokens (pool / bytes per token), the bound a
    run applies, is refused in one line naming the setting (``names``: the flag each key
    came from, e.g. ``{"pool_bytes": "--pool"}``; else ``allocator.<key>``)."""
    names = names or {}
    opts = dict(settings)
    for key in ("kind", "pool_bytes", "kv_bytes_per_token"):
        if key not in opts:
            raise ConfigError("missing", location=source, field=f"allocator.{key}")
    kind = opts.pop("kind")
    pool_name = names.get("pool_bytes", "allocator.pool_bytes")
    kv_name = names.get("kv_bytes_per_token", "allocator.kv_bytes_per_token")
    pool = parse_bytes(opts.pop("pool_bytes"), pool_name)
    kv = parse_bytes(opts.pop("kv_bytes_per_token"), kv_name)
    if pool > 0 and kv > 0 and pool / kv > MAX_POOL_TOKENS:
        raise ConfigError(
            f"a pool of {pool:.4g} B at {kv:.4g} B per token holds {pool / kv:.4g} tokens, "
            f"beyond kvsim's bound of {MAX_POOL_TOKENS:.0e} tokens (the one kvsim run "
            f"applies: the block tables would not fit in memory); check {pool_name} and "
            f"{kv_name} (their units)", field=pool_name,
            location=None if "pool_bytes" in names else source)  # fmt: skip
    return make_allocator(kind, pool_bytes=pool, kv_bytes_per_token=kv, **opts)


def _apply(alloc: Allocator, op: Op, dropped: set) -> bool | None:
    if op.op == "allocate":
        ok = bool(alloc.allocate(op.seq, op.tokens))
        (dropped.discard if ok else dropped.add)(op.seq)
        return ok
    if op.seq in dropped:
        if op.op == "free":
            dropped.discard(op.seq)
        elif op.op == "fork":
            dropped.add(op.child)
        return None
    if op.op == "append":
        return alloc.append(op.seq, op.tokens)
    if op.op == "fork":
        ok = alloc.fork(op.seq, op.child)
        (dropped.discard if ok else dropped.add)(op.child)
        return ok
    alloc.free(op.seq)
    return True


def replay(
    alloc: Allocator,
    ops: Iterable[Op],
    *,
    every: int = 1,
    request_bytes: float | None = None,
    check: bool = False,
) -> list[ReplayRow]:
    """Run ``ops``; metrics after every ``every``-th op and after the last one."""
    if every < 1:
        raise ConfigError(f"must be >= 1, got {every}", field="every")
    ops = list(ops)
    rows: list[ReplayRow] = []
    dropped: set = set()
    for step, op in enumerate(ops):
        try:
            ok = _apply(alloc, op, dropped)
        except AllocatorError as exc:
            where = op.where or f"op {step}"
            raise AllocatorError(f"{where}: {op}: {exc}") from None
        if check:
            alloc.check_invariants()
        sample = (step + 1) % every == 0 or step == len(ops) - 1
        rows.append(ReplayRow(step, op, ok, alloc.metrics(request_bytes) if sample else None,
                              request_bytes))  # fmt: skip
    return rows


def random_ops(
    n_ops: int,
    *,
    seed: int = 0,
    max_prompt_tokens: int = 2048,
    max_append_tokens: int = 64,
    p_fork: float = 0.05,
    p_free: float = 0.1,
    max_live: int = 64,
    p_reuse_id: float = 0.2,
) -> list[Op]:
    """A deterministic, well-formed random trace (valid whenever every op succeeds)."""
    rng = random.Random(seed)
    live: list[int] = []
    freed: list[int] = []
    next_id = 0
    ops: list[Op] = []

    def new_id() -> int:
        nonlocal next_id
        if freed and rng.random() < p_reuse_id:
            return freed.pop(rng.randrange(len(freed)))  # a preempted request comes back
        next_id += 1
        return next_id - 1

    while len(ops) < n_ops:
        r = rng.random()
        if not live or (r < 0.15 and len(live) < max_live):
            seq = new_id()
            ops.append(Op("allocate", seq, rng.randint(1, max_prompt_tokens)))
            live.append(seq)
        elif r < 0.15 + p_fork and len(live) < max_live:
            child = new_id()
            ops.append(Op("fork", rng.choice(live), child=child))
            live.append(child)
        elif r < 0.15 + p_fork + p_free or len(live) >= max_live:
            seq = live.pop(rng.randrange(len(live)))
            ops.append(Op("free", seq))
            freed.append(seq)
        else:
            ops.append(Op("append", rng.choice(live), rng.randint(1, max_append_tokens)))
    return ops


_COLUMNS = ("step", "op", "ok", "seqs", "useful", "allocated", "free", "cached",
            "largest_free", "eta_alloc", "eta_eff", "phi_ext", "fits", "copied", "cow")  # fmt: skip


def row_record(row: ReplayRow) -> dict[str, Any]:
    """A flat dict of one sampled row (for JSON and DataFrames)."""
    out: dict[str, Any] = {"step": row.step, "op": str(row.op), "ok": row.ok}
    if row.metrics is not None:
        out.update(row.metrics.as_dict())
        out["request_fits"] = request_fits(row.metrics.largest_free_bytes, row.request_bytes)
    return out


def format_table(rows: Sequence[ReplayRow], unit: str = "MiB") -> str:
    """A fixed-width text table of the sampled rows; byte columns in ``unit``."""
    scale = _UNITS[unit.lower()]

    def size(x: float) -> str:
        return f"{x / scale:.1f}" if scale != 1 else str(x)

    def frac(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    def fits(x: bool | None) -> str:
        return "-" if x is None else "yes" if x else "no"

    table = [list(_COLUMNS)]
    for row in rows:
        m = row.metrics
        if m is None:
            continue
        ok = {True: "ok", False: "MISS", None: "skip"}[row.ok]
        table.append([
            str(row.step), str(row.op), ok, str(m.num_sequences), size(m.useful_bytes),
            size(m.allocated_bytes), size(m.free_bytes), size(m.cached_bytes),
            size(m.largest_free_bytes), frac(m.eta_alloc), frac(m.eta_effective),
            frac(m.phi_ext), fits(request_fits(m.largest_free_bytes, row.request_bytes)),
            size(m.bytes_copied), str(m.cow_copies),
        ])  # fmt: skip
    widths = [max(len(r[i]) for r in table) for i in range(len(_COLUMNS))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in table]
    lines.insert(1, f"(bytes in {unit})")
    return "\n".join(lines)

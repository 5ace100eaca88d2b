"""Claude Code session traces (kv-cache-tester format): reading and validation.

Responsibility: read recorded coding-assistant sessions whose prompts are given as block
ids (``block_size`` tokens per id; equal ids = equal content and equal prefix) into frozen
records, for ``kvsim trace-replay --format claude-code`` (``sim.prefix.trace_replay``) and
the ``claude_code`` workload kind (``sim.workload.claude_code``). Three layouts:

- ``.jsonl`` or ``.jsonl.gz``: one session (a JSON object) per line;
- a folder of upstream per-session ``.json`` files (read in sorted name order).

A session: ``id``, ``block_size`` (default 64), ``hash_id_scope`` (``local``: ids are
unique within a session only, so replays namespace them per session; ``global``: ids are
shared across sessions), ``tool_tokens``, ``system_tokens`` and ``requests``. A request is
a call (``t``, ``in``, ``out``, the block ids as ``hash_runs`` ``[[first, count], ...]`` or
``hash_ids``, optional ``input_types``, ``think_time``, ``api_time``) or a subagent
(``type: "subagent"``, its own ``requests``, ``subagent_type``, ``tool_tokens``,
``system_tokens``; its ``t`` is when it returned). A call has ``floor(in / block_size)``
ids: a trailing partial block has none.

Invariant: every record returned is validated (a bad field is one ``ConfigError`` naming
the file, line, field and what is allowed); a call's block ids are held as runs of
consecutive ids (``BlockRuns``), so memory grows with the runs a file states, not with its
prompts' lengths (the 487 shipped sessions: 63 million ids in 113 thousand runs); nesting
is bounded by ``MAX_DEPTH``.
"""

from __future__ import annotations

import gzip
import math
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Union, overload

from sim.errors import ConfigError, KvsimError
from sim.yamlio import json_value

#: the largest prompt a call may state (tokens): bounds the ids one call expands to
MAX_PROMPT_TOKENS = 10_000_000
#: subagents nested deeper than this are refused (bounded recursion)
MAX_DEPTH = 8
#: block ids must fit in 32 bits (replays pack a session index above them)
MAX_BLOCK_ID = (1 << 32) - 1
SCOPES = ("local", "global")


class BlockRuns(Sequence[int]):
    """Block ids as maximal runs of consecutive ids, ``(first, count)`` pairs: a sequence of
    ints (``len``, iteration, indexing, slicing) whose memory is O(runs), not O(ids).

    Runs are merged on construction (a run starting where the previous one ends joins it;
    empty runs are dropped), so two equal id sequences have equal ``runs``. It equals any
    sequence of the same ids; its hash is that of ``runs`` (use it in sets and dict keys
    with other ``BlockRuns`` only)."""

    __slots__ = ("_len", "runs")

    def __init__(self, runs: Iterable[tuple[int, int]] = ()) -> None:
        merged: list[tuple[int, int]] = []
        for first, count in runs:
            if count <= 0:
                continue
            if merged and merged[-1][0] + merged[-1][1] == first:
                merged[-1] = (merged[-1][0], merged[-1][1] + count)
            else:
                merged.append((first, count))
        self.runs: tuple[tuple[int, int], ...] = tuple(merged)
        self._len = sum(c for _, c in merged)

    @classmethod
    def of_ids(cls, ids: Iterable[int]) -> BlockRuns:
        """The runs of an explicit list of ids."""
        return cls((x, 1) for x in ids)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[int]:
        for first, count in self.runs:
            yield from range(first, first + count)

    @overload
    def __getitem__(self, key: int) -> int: ...
    @overload
    def __getitem__(self, key: slice) -> BlockRuns: ...
    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(self._len)
            if step != 1:
                return BlockRuns.of_ids(tuple(self)[key])
            return self._window(start, stop)
        i = key + self._len if key < 0 else key
        if not 0 <= i < self._len:
            raise IndexError("block id index out of range")
        for first, count in self.runs:
            if i < count:
                return first + i
            i -= count
        raise AssertionError("unreachable: lengths agree")

    def _window(self, start: int, stop: int) -> BlockRuns:
        """Ids ``start`` .. ``stop - 1`` (positions), still as runs."""
        if start == 0 and stop >= self._len:
            return self
        out, pos = [], 0
        for first, count in self.runs:
            lo, hi = max(start, pos), min(stop, pos + count)
            if lo < hi:
                out.append((first + lo - pos, hi - lo))
            pos += count
            if pos >= stop:
                break
        return BlockRuns(out)

    def common_prefix(self, other: BlockRuns) -> int:
        """How many leading ids ``self`` and ``other`` share (run by run, not id by id)."""
        a, b = self.runs, other.runs
        i = j = n = 0
        fa = ca = fb = cb = 0
        while True:
            if ca == 0:
                if i == len(a):
                    return n
                fa, ca = a[i]
                i += 1
            if cb == 0:
                if j == len(b):
                    return n
                fb, cb = b[j]
                j += 1
            if fa != fb:
                return n
            k = min(ca, cb)
            n, fa, ca, fb, cb = n + k, fa + k, ca - k, fb + k, cb - k

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BlockRuns):
            return self.runs == other.runs
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(other) == self._len and all(x == y for x, y in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.runs)

    def __repr__(self) -> str:
        return f"BlockRuns({list(self.runs)!r})"


@dataclass(frozen=True, slots=True)
class SessionCall:
    """One LLM call of a session (or of a subagent)."""

    t_s: float  # when it was sent, s from its agent's start
    prompt_tokens: int  # the whole prompt (history included)
    output_tokens: int  # completion tokens
    block_ids: BlockRuns  # floor(prompt_tokens / block_size) ids, as runs
    input_types: tuple[str, ...]  # what is new in the prompt: "tool_result", "text", ...
    think_time_s: float | None  # the client's wait before sending it (tool or human)
    api_time_s: float | None  # the provider's time for it

    @property
    def after_human(self) -> bool:
        """The new input is a user message (no tool result): the pause before it is human."""
        return "tool_result" not in self.input_types and "text" in self.input_types


@dataclass(frozen=True, slots=True)
class Subagent:
    """A nested agent the parent started and waited for (Claude Code's Task tool)."""

    t_s: float  # when it returned, s from the parent's start
    agent_type: str  # subagent_type ("Explore", "general-purpose", ...)
    tool_tokens: int  # its tool definitions
    system_tokens: int  # its system prompt
    entries: tuple[Entry, ...]  # its calls (and subagents), in order


Entry = Union[SessionCall, Subagent]  # noqa: UP007


@dataclass(frozen=True, slots=True)
class Session:
    """One recorded session."""

    session_id: str
    block_size: int  # tokens per block id
    scope: str  # "local" (ids unique within the session) or "global"
    tool_tokens: int  # tool definitions at the front of every prompt
    system_tokens: int  # the system prompt after them
    entries: tuple[Entry, ...]  # top-level calls and subagents, in order

    def calls(self) -> Iterator[SessionCall]:
        """Every call in replay order: the top-level calls in order, and at a subagent
        entry that subagent's calls in order (depth first)."""
        yield from iter_calls(self.entries)


def iter_calls(entries: tuple[Entry, ...]) -> Iterator[SessionCall]:
    """The calls of ``entries``, depth first."""
    for e in entries:
        if isinstance(e, Subagent):
            yield from iter_calls(e.entries)
        else:
            yield e


# ---------------------------------------------------------------------- validation
class _Where:
    """Where a value sits: file:line and a field path."""

    def __init__(self, location: str) -> None:
        self.location = location

    def fail(self, field: str, message: str):
        raise ConfigError(message, location=self.location, field=field)


def _num(obj: dict, name: str, w: _Where, path: str, *, required: bool, whole: bool):
    v = obj.get(name)
    if v is None:
        if required:
            w.fail(f"{path}{name}", "missing (a number >= 0)")
        return None
    ok = isinstance(v, int) if whole else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok or not math.isfinite(v) or v < 0:
        what = "a whole number" if whole else "a number"
        w.fail(f"{path}{name}", f"must be {what} >= 0, got {v!r}")
    return v


def _valid_run(run) -> bool:
    return (
        isinstance(run, list)
        and len(run) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) for x in run)
        and run[0] >= 0
        and run[1] >= 1
        and run[0] + run[1] - 1 <= MAX_BLOCK_ID
    )


def _ids(obj: dict, w: _Where, path: str, block_size: int, n_in: int) -> BlockRuns:
    want = n_in // block_size
    if "hash_runs" in obj:
        runs = obj["hash_runs"]
        if not isinstance(runs, list):
            w.fail(f"{path}hash_runs", "must be a list of [first_id, count] pairs")
        for k, run in enumerate(runs):
            if not _valid_run(run):
                w.fail(f"{path}hash_runs[{k}]", f"must be [first_id >= 0, count >= 1], got {run!r}")
        out = BlockRuns((r[0], r[1]) for r in runs)  # never expanded to one int per id
        field = "hash_runs"
    elif "hash_ids" in obj:
        ids = obj["hash_ids"]
        if not isinstance(ids, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) and 0 <= h <= MAX_BLOCK_ID for h in ids
        ):
            w.fail(f"{path}hash_ids", f"must be a list of whole numbers in [0, {MAX_BLOCK_ID}]")
        out, field = BlockRuns.of_ids(ids), "hash_ids"
    else:
        w.fail(f"{path}hash_runs", "missing (give hash_runs or hash_ids)")
    if len(out) != want:
        w.fail(
            f"{path}{field}",
            f"has {len(out)} block ids but in = {n_in} needs floor({n_in} / {block_size}) = {want}",
        )
    return out


def _call(obj: dict, w: _Where, path: str, block_size: int) -> SessionCall:
    t = _num(obj, "t", w, path, required=True, whole=False)
    n_in = _num(obj, "in", w, path, required=True, whole=True)
    if n_in > MAX_PROMPT_TOKENS:
        w.fail(f"{path}in", f"{n_in:,} tokens; the limit is {MAX_PROMPT_TOKENS:,}")
    n_out = _num(obj, "out", w, path, required=True, whole=True)
    types = obj.get("input_types") or []
    if not isinstance(types, list) or not all(isinstance(x, str) for x in types):
        w.fail(f"{path}input_types", "must be a list of strings")
    return SessionCall(
        float(t),
        n_in,
        n_out,
        _ids(obj, w, path, block_size, n_in),
        tuple(types),
        _opt_float(_num(obj, "think_time", w, path, required=False, whole=False)),
        _opt_float(_num(obj, "api_time", w, path, required=False, whole=False)),
    )


def _opt_float(v) -> float | None:
    return None if v is None else float(v)


def _entries(reqs, w: _Where, path: str, block_size: int, depth: int) -> tuple[Entry, ...]:
    if not isinstance(reqs, list):
        w.fail(f"{path}requests", "must be a list of requests")
    out: list[Entry] = []
    for i, r in enumerate(reqs):
        here = f"{path}requests[{i}]."
        if not isinstance(r, dict):
            w.fail(here[:-1], "must be a JSON object")
        if r.get("type") == "subagent":
            if depth >= MAX_DEPTH:
                w.fail(here + "requests", f"subagents nested deeper than {MAX_DEPTH}")
            out.append(_subagent(r, w, here, block_size, depth + 1))
        else:
            out.append(_call(r, w, here, block_size))
    return tuple(out)


def _subagent(obj: dict, w: _Where, path: str, block_size: int, depth: int) -> Subagent:
    t = _num(obj, "t", w, path, required=True, whole=False)
    kind = obj.get("subagent_type") or "subagent"
    if not isinstance(kind, str):
        w.fail(f"{path}subagent_type", "must be a string")
    return Subagent(
        float(t),
        kind,
        _num(obj, "tool_tokens", w, path, required=False, whole=True) or 0,
        _num(obj, "system_tokens", w, path, required=False, whole=True) or 0,
        _entries(obj.get("requests", []), w, path, block_size, depth),
    )


def parse_session(obj, location: str) -> Session:
    """One session object -> ``Session``; errors name ``location`` and the field."""
    w = _Where(location)
    if not isinstance(obj, dict):
        raise ConfigError("expected a JSON object (one session)", location=location)
    bs = obj.get("block_size", 64)
    if isinstance(bs, bool) or not isinstance(bs, int) or not 1 <= bs <= 1 << 20:
        w.fail("block_size", f"must be a whole number in [1, {1 << 20}], got {bs!r}")
    scope = obj.get("hash_id_scope", "local")
    if scope not in SCOPES:
        w.fail("hash_id_scope", f"must be one of {', '.join(SCOPES)}, got {scope!r}")
    sid = obj.get("id", location)
    return Session(
        str(sid),
        bs,
        scope,
        _num(obj, "tool_tokens", w, "", required=False, whole=True) or 0,
        _num(obj, "system_tokens", w, "", required=False, whole=True) or 0,
        _entries(obj.get("requests"), w, "", bs, 0),
    )


# ------------------------------------------------------------------------- loading
def _json(text: str, location: str, *, lines: bool = False):
    return json_value(text, location, lines=lines)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            yield from enumerate(fh, start=1)
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as exc:
        raise KvsimError(
            f"{path}: cannot read sessions: {getattr(exc, 'strerror', None) or exc}"
        ) from None


def load_sessions(path: str | Path) -> list[Session]:
    """Read every session of a ``.jsonl``/``.jsonl.gz`` file or a folder of ``.json`` files."""
    path = Path(path)
    out: list[Session] = []
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".json" and p.is_file())
        for f in files:
            try:
                text = f.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise KvsimError(f"{f}: cannot read session: {exc}") from None
            out.append(parse_session(_json(text, str(f), lines=True), str(f)))
    elif path.is_file():
        for i, line in _lines(path):
            if line.strip():
                where = f"{path}:{i}"
                out.append(parse_session(_json(line, where), where))
    else:
        raise KvsimError(f"{path}: no such file or folder (Claude Code sessions)")
    if not out or not any(True for s in out for _ in s.calls()):
        raise KvsimError(f"{path}: no sessions with calls")
    return out

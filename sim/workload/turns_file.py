"""Reading agent logs in the ``turns.jsonl`` schema (one JSON object per LLM call).

Responsibility: parse a recorded trajectory file into calls grouped by trajectory, for
``kvsim workload fit --kind coding_agent`` and the ``agent_trace`` replay. The schema
(docs/workloads.md "Your own logs"): required ``instance_id`` (the trajectory), ``turn``
(call index), ``prompt_tokens`` (the whole prompt as the provider counts it),
``completion_tokens``; optional ``run`` (trajectories are keyed by run and instance),
``tool_s`` (tool time after the call; null on the last), ``tool`` and ``tool_cat``
(the tool and its category), ``tool_returncodes`` (-1 = the harness killed it at its
timeout) or ``timed_out`` (bool), ``ctx_growth_next``, ``cache_hit_tokens``.

Invariant: every row is checked (types and ranges: no negative token count, no time
below ``-MAX_CLOCK_SKEW_S``, no NaN, UTF-8 text) with a one-line error naming the file,
line and field; reading is bounded (at most ``MAX_CALLS`` calls, lines of at most
``MAX_LINE_BYTES``); calls come back sorted by ``turn`` within each trajectory, and
trajectories in order of first appearance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sim.errors import ConfigError
from sim.workload.distributions import MAX_TIME_S, MAX_TOKENS
from sim.yamlio import json_value

MAX_CALLS = 5_000_000
MAX_LINE_BYTES = 1 << 20
#: a recorded tool time down to this far below 0 is clock skew between the harness's and
#: the provider's clocks (the SWE-agent data has 5, the largest -1.1 s): the reader keeps it
#: and the fit drops it; a time further below 0 is a broken log, refused
MAX_CLOCK_SKEW_S = 2.0


@dataclass(frozen=True, slots=True)
class Call:
    """One recorded LLM call and the tool that followed it."""

    turn: int
    prompt_tokens: int
    completion_tokens: int
    tool_s: float | None  # None on the last call (or not recorded)
    tool: str
    category: str
    timed_out: bool
    growth_tokens: int | None  # what the next prompt adds beyond this prompt and reply
    cache_hit_tokens: int | None


def _int(obj: dict, name: str, where: str, low: int, required: bool = True) -> int | None:
    v = obj.get(name)
    if v is None:
        if required:
            raise ConfigError("missing field", location=where, field=name)
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ConfigError(f"expected a number, got {v!r}", location=where, field=name)
    if v != int(v) or not low <= v <= MAX_TOKENS:
        raise ConfigError(
            f"expected a whole number in [{low}, {MAX_TOKENS:,}], got {v!r}",
            location=where,
            field=name,
        )
    return int(v)


def _seconds(obj: dict, name: str, where: str) -> float | None:
    v = obj.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ConfigError(f"expected seconds, got {v!r}", location=where, field=name)
    if not -MAX_CLOCK_SKEW_S <= v <= MAX_TIME_S:
        raise ConfigError(
            f"{v!r} is out of range [-{MAX_CLOCK_SKEW_S:g}, 1e9] s (a time is not negative; "
            f"down to -{MAX_CLOCK_SKEW_S:g} s is taken as clock skew and the call's time dropped)",
            location=where,
            field=name,
        )
    return float(v)


def text_line(raw: bytes, where: str) -> str:
    """One line of a text file as UTF-8 (a leading byte-order mark dropped); bytes that are
    not UTF-8 (a binary file) are a one-line error naming the line and column, never a
    codec's message (``json.loads`` of bytes would guess UTF-16 or UTF-32 for them)."""
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"not UTF-8 text (a binary file?): byte {raw[exc.start]:#04x} at column {exc.start + 1}",
            location=where,
        ) from None


def _text(obj: dict, name: str, where: str, default: str) -> str:
    v = obj.get(name)
    if v is None:
        return default
    if not isinstance(v, str):
        raise ConfigError(f"expected text, got {v!r}", location=where, field=name)
    return v[:64] or default


def parse_call(obj: dict, where: str) -> tuple[str, Call]:
    """(trajectory key, call) of one parsed row."""
    if not isinstance(obj, dict):
        raise ConfigError("expected a JSON object per line", location=where)
    if "instance_id" not in obj:
        raise ConfigError("missing field", location=where, field="instance_id")
    key = f"{obj.get('run', '')}/{obj['instance_id']}"
    codes = obj.get("tool_returncodes")
    timed_out = bool(obj.get("timed_out", False)) or (
        isinstance(codes, list) and any(c == -1 for c in codes)
    )
    tool = _text(obj, "tool", where, "tool")
    call = Call(
        turn=_int(obj, "turn", where, 0),
        prompt_tokens=_int(obj, "prompt_tokens", where, 1),
        completion_tokens=_int(obj, "completion_tokens", where, 1),
        tool_s=_seconds(obj, "tool_s", where),
        tool=tool,
        category=_text(obj, "tool_cat", where, tool),
        timed_out=timed_out,
        growth_tokens=_int(obj, "ctx_growth_next", where, -MAX_TOKENS, required=False),
        cache_hit_tokens=_int(obj, "cache_hit_tokens", where, 0, required=False),
    )
    return key, call


def read_turns(path: str | Path) -> dict[str, list[Call]]:
    """Trajectory key -> its calls in turn order (raises ConfigError)."""
    p = Path(path)
    if not p.is_file():  # a folder, a device: there, but not the file this reads
        what = "not a regular file" if p.exists() else "no such file"
        raise ConfigError(f"{what} (a turns.jsonl trace)", location=str(p))
    out: dict[str, list[Call]] = {}
    n = 0
    with p.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            where = f"{p}:{lineno}"
            if len(raw) > MAX_LINE_BYTES:
                raise ConfigError(f"line longer than {MAX_LINE_BYTES:,} bytes", location=where)
            if not raw.strip():
                continue
            obj = json_value(text_line(raw, where), where)  # syntax, depth, digits, a key twice
            key, call = parse_call(obj, where)
            out.setdefault(key, []).append(call)
            n += 1
            if n > MAX_CALLS:
                raise ConfigError(f"more than {MAX_CALLS:,} calls", location=where)
    if not out:
        raise ConfigError("no calls in the file", location=str(p))
    for key, calls in out.items():
        calls.sort(key=lambda c: c.turn)
        turns = [c.turn for c in calls]
        if len(set(turns)) != len(turns):
            raise ConfigError(f"trajectory {key!r} has the same turn twice", location=str(p))
    return out


def growth(calls: Sequence[Call], t: int) -> int | None:
    """What call ``t + 1``'s prompt adds beyond call ``t``'s prompt and reply (recorded,
    else derived from the prompts); None on the last call."""
    if t + 1 >= len(calls):
        return None
    c = calls[t]
    if c.growth_tokens is not None:
        return c.growth_tokens
    return calls[t + 1].prompt_tokens - c.prompt_tokens - c.completion_tokens

"""The order in which a session replay serves calls: N sessions in flight, interleaved.

Responsibility: turn recorded sessions (``sim.prefix.session_trace``) into one sequence of
calls for ``kvsim trace-replay --format claude-code --concurrency N``, so that sessions
compete for one cache.

Rules:
- a session's calls are in its replay order (top-level calls in order, a subagent's calls
  at its entry, depth first); each gets a time in s from the session's start: a top-level
  call its ``t``; a subagent's call the subagent's start plus its own ``t``, the start being
  the subagent's ``t`` (when it returned) less its last call's ``t`` and ``api_time``; times
  are then made non-decreasing in replay order (a call never precedes one before it);
- N slots each run sessions one after another: session k (file order) goes to the slot
  that frees first (ties: the lowest slot), starting when that slot's previous session
  sent its last call, plus that call's ``api_time`` when the file gives one;
- ``time`` interleaving serves calls by absolute time, ties by slot then replay order;
  ``round-robin`` (for files without times) serves the slots' next calls in turn and gives
  call i the time i s;
- with N = 1 the order is the file's, as in a one-after-another replay.

Invariant: every call of every session appears exactly once; a session's calls keep their
order; times are non-decreasing along the sequence; the result depends on the inputs only.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from sim.errors import KvsimError, UnknownNameError
from sim.prefix.session_trace import Entry, Session, SessionCall, Subagent

INTERLEAVE_MODES = ("time", "round-robin")


@dataclass(frozen=True, slots=True)
class ReplayCall:
    """One call in the interleaved order."""

    index: int  # position in the sequence (the cache's clock)
    t_s: float  # absolute time (s) from the replay's start
    session: int  # the session's index in the file
    call: SessionCall
    next_t_s: float | None  # the same session's next call's t_s (None: its last call)


def _span_s(entries: tuple[Entry, ...]) -> float:
    """How long a subagent ran: its last call's time plus that call's provider time."""
    last = None
    for e in entries:
        last = e
    if last is None:
        return 0.0
    if isinstance(last, Subagent):
        return last.t_s
    return last.t_s + (last.api_time_s or 0.0)


def _timed(entries: tuple[Entry, ...], offset_s: float, out: list) -> None:
    for e in entries:
        if isinstance(e, Subagent):
            start = offset_s + max(0.0, e.t_s - _span_s(e.entries))
            _timed(e.entries, start, out)
        else:
            out.append((offset_s + e.t_s, e))


def session_times(session: Session) -> list[tuple[float, SessionCall]]:
    """(time from the session's start in s, call) in replay order, non-decreasing."""
    raw: list[tuple[float, SessionCall]] = []
    _timed(session.entries, 0.0, raw)
    out, clock = [], 0.0
    for t, call in raw:
        clock = max(clock, t)
        out.append((clock, call))
    return out


def interleave(
    sessions: list[Session], concurrency: int = 1, mode: str = "time"
) -> list[ReplayCall]:
    """The calls of ``sessions`` with ``concurrency`` in flight (module docstring: rules)."""
    if mode not in INTERLEAVE_MODES:
        raise UnknownNameError("interleave mode", mode, list(INTERLEAVE_MODES))
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise KvsimError(f"concurrency must be a whole number >= 1, got {concurrency!r}")
    timed = [session_times(s) for s in sessions]
    # (absolute time, slot, session, position) per call, each slot's sessions back to back
    free = [(0.0, slot) for slot in range(concurrency)]
    rows: list[tuple[float, int, int, int]] = []
    per_slot: list[list[tuple[int, int]]] = [[] for _ in range(concurrency)]
    for k, calls in enumerate(timed):
        start, slot = heapq.heappop(free)
        for pos, (t, _) in enumerate(calls):
            rows.append((start + t, slot, k, pos))
            per_slot[slot].append((k, pos))
        end = start
        if calls:
            t_last, last = calls[-1]
            end = start + t_last + (last.api_time_s or 0.0)
        heapq.heappush(free, (end, slot))
    if mode == "time":
        rows.sort(key=lambda r: (r[0], r[1], r[2], r[3]))
        order = [(r[0], r[2], r[3]) for r in rows]
    else:
        order = [(float(i), k, pos) for i, (k, pos) in enumerate(_round_robin(per_slot))]
    return _with_next(order, timed)


def _round_robin(per_slot: list[list[tuple[int, int]]]) -> list[tuple[int, int]]:
    cursors = [0] * len(per_slot)
    out: list[tuple[int, int]] = []
    while True:
        moved = False
        for slot, queue in enumerate(per_slot):
            if cursors[slot] < len(queue):
                out.append(queue[cursors[slot]])
                cursors[slot] += 1
                moved = True
        if not moved:
            return out


def _with_next(order, timed) -> list[ReplayCall]:
    """Attach each call's session-next time (the exact future hints are computed from)."""
    next_t: dict[tuple[int, int], float | None] = {}
    last_of: dict[int, tuple[int, int]] = {}
    for t, k, pos in order:
        prev = last_of.get(k)
        if prev is not None:
            next_t[prev] = t
        last_of[k] = (k, pos)
        next_t[(k, pos)] = None
    return [
        ReplayCall(i, t, k, timed[k][pos][1], next_t[(k, pos)])
        for i, (t, k, pos) in enumerate(order)
    ]
